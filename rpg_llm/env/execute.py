"""Run a solution in the sandbox and grade it: the environment step of the LLM loop.

Paper section 4: an action is a generated script, executed in a sandbox to produce time delta and
reward r.  DESIGN section 7: the outcome text shows the score on success, the timeout, or the
exception type, line and message; an invalid submission earns ``INVALID_REWARD`` (-10).

Failure classes: ``"invalid" | "timeout" | "oom" | "error"`` are the script's own failures (reward
-10); ``"infra"`` is a failure of the sandbox, the grader set-up or the machine, never charged to
the script (the loop masks it out of PPO and out of the reward-rate estimator, as open-instruct
masks infrastructure failures).

CLI: ``python -m rpg_llm.env.execute SCRIPT --task NAME [--sandbox auto] [--timeout 60]`` runs one
script and prints its outcome, delta, CPU seconds and score (exit 1 when the outcome is ``infra``).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from concurrent.futures import BrokenExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_llm.env.sandbox import KINDS, BatchExecutor, LocalExecutor, Sandbox, make_sandbox
from rpg_llm.env.sandbox.base import MAX_TIMEOUT_S, SandboxError
from rpg_llm.env.sandbox.subprocess_backend import interpreter_paths

if TYPE_CHECKING:  # pragma: no cover
    from rpg_llm.env.tasks import Competition
    from rpg_llm.env.tasks.grading import GradingLimits

OUTCOME_STATUSES = ("ok", "timeout", "oom", "error", "invalid", "infra")

INFRA_REWARD = 0.0
"""Placeholder ``raw_reward`` of an ``"infra"`` outcome: no reward was observed; mask by status."""

RUN_TIME_RE = re.compile(r", ran \d+(?:\.\d+)? s\b")
"""The wall time part (``", ran 3.2 s"``) of a success's ``outcome_text``."""


@dataclass(frozen=True)
class Outcome:
    """Result of running and grading one solution.

    Attributes:
      status: ``"ok" | "timeout" | "oom" | "error" | "invalid" | "infra"`` (invalid: ran but the
        submission is missing or rejected by the grader; infra: the sandbox, the grader set-up or
        the machine failed, not the script).
      delta: wall time of the child from start to exit, seconds (0.0 when it never started).
      score: the grader's score (``None`` unless ``status == "ok"``).
      raw_reward: DESIGN section 7 raw reward (score, or leaderboard percentile for
        lower-is-better tasks); ``INVALID_REWARD`` (-10) for the script's own failures;
        ``INFRA_REWARD`` (0.0, a placeholder never to be used as a reward) for ``"infra"``.
      valid: True iff ``status == "ok"``.
      outcome_text: text shown to the policy; on success
        ``"score <s> (<lower|higher> is better), ran <delta> s[, beats <p>% of the leaderboard]"``
        (:data:`RUN_TIME_RE` finds the time part).
      cpu_s: CPU seconds (user + system) of the script and every child it waited for, ``None``
        when not measured (docker backend, or the run never started); for ``--time cpu``.
      percentile: the score's leaderboard percentile in [0, 1] (``None`` when invalid or the
        task has no leaderboard); for ``--raw-reward percentile``.
    """

    status: str
    delta: float
    score: float | None
    raw_reward: float
    valid: bool
    outcome_text: str
    cpu_s: float | None = field(default=None, compare=False)
    percentile: float | None = field(default=None, compare=False)


def infra_outcome(reason: str, delta: float = 0.0, cpu_s: float | None = None) -> Outcome:
    """An ``"infra"`` outcome whose text says what failed (not the script)."""
    text = " ".join(f"infra: {reason}".split())[:500]
    return Outcome("infra", float(delta), None, INFRA_REWARD, False, text, cpu_s)


def hidden_paths(comp: Competition) -> list[Path]:
    """Host paths a script for ``comp`` must not see: the whole data root (every competition's
    ``private/`` and ``raw/`` folders and other competitions' data), the private folder and the
    answers file.

    The data root is ``comp.data_root`` when the competition has one, else the parent of
    ``comp.root``; it is left out (and only this competition's folder hidden) when it holds the
    interpreter.  The public folder is bound back at ``./input`` by the sandbox.
    """
    root = Path(comp.root)
    data_root = Path(getattr(comp, "data_root", None) or root.parent)
    exe = [Path(p) for p in interpreter_paths(sys.executable)]
    hide = []
    for cand in (data_root, root):
        real = Path(cand).resolve()
        if real != Path("/") and not any(e == real or real in e.parents for e in exe):
            hide.append(Path(cand))
            break
    hide.append(Path(comp.private_dir))
    answers = getattr(comp, "answers", None)
    if answers is not None:
        hide.append(Path(answers))
    return hide


def run_and_grade(
    code: str,
    comp: Competition,
    sandbox: Sandbox,
    timeout_s: float,
    grading: GradingLimits | None = None,
) -> Outcome:
    """Execute ``code`` on ``comp``'s public data and grade its ``submission.csv``.

    The competition's data root and private answers are hidden from the child on backends that
    can hide paths (``hidden_paths``).  The submission is read as an untrusted plain file and
    graded within ``grading``'s size, time and memory limits (``grade_submission``): a link,
    FIFO, device, folder or oversized file, or grading past a limit, makes the sample
    ``"invalid"`` with the reason.  The working folder is deleted afterwards.

    Args:
      code: the solution script (Python source).
      comp: a loaded ``rpg_llm.env.tasks.Competition``.
      sandbox: any ``Sandbox`` (``make_sandbox(...)``).
      timeout_s: wall-clock limit, seconds.
      grading: bounds on grading (default ``GradingLimits()``).

    Returns:
      ``Outcome``; status ``"infra"`` (never -10) when the sandbox failed to start
      (``SandboxError``, e.g. bubblewrap could not set up its namespaces), launching raised an
      ``OSError``, or ``grade_submission`` raised ``GradingSetupError`` (answers file missing,
      grader not importable).

    Raises:
      ValueError: bad ``code`` / ``timeout_s`` (before launching).
    """
    from rpg_llm.env.tasks import INVALID_REWARD, grade_submission, raw_reward
    from rpg_llm.env.tasks.grading import GradingSetupError

    try:
        res = sandbox.run(code, Path(comp.public_dir), timeout_s, hide=hidden_paths(comp))
    except (SandboxError, OSError) as exc:
        return infra_outcome(f"sandbox {getattr(sandbox, 'name', '?')} failed: {exc}")
    cpu = res.cpu_s
    try:
        if res.status != "ok":
            return Outcome(
                res.status, res.delta, None, INVALID_REWARD, False, res.outcome_text, cpu
            )
        if not res.submission_path.exists() and not res.submission_path.is_symlink():
            text = "invalid: the script finished without writing submission.csv"
            return Outcome("invalid", res.delta, None, INVALID_REWARD, False, text, cpu)
        try:
            report = grade_submission(comp, res.submission_path, grading)
        except GradingSetupError as exc:
            return infra_outcome(f"grader set-up failed: {exc}", res.delta, cpu)
        if not report.valid or report.score is None:
            text = f"invalid submission: {report.reason}"
            return Outcome("invalid", res.delta, None, INVALID_REWARD, False, text, cpu)
        reward = raw_reward(report)
        direction = "lower" if report.lower_is_better else "higher"
        text = f"score {report.score:.6g} ({direction} is better), ran {res.delta:.1f} s"
        if report.percentile is not None:
            text += f", beats {100 * report.percentile:.0f}% of the leaderboard"
        score = float(report.score)
        return Outcome("ok", res.delta, score, float(reward), True, text, cpu, report.percentile)
    finally:
        res.cleanup()


def run_batch(
    codes: Sequence[str],
    comp: Competition,
    sandbox: Sandbox,
    timeout_s: float,
    executor: BatchExecutor | None = None,
    grading: GradingLimits | None = None,
) -> list[Outcome]:
    """``run_and_grade`` over a batch in parallel, results in the order of ``codes``.

    Args:
      codes: B solution scripts.
      comp, sandbox, timeout_s: as in ``run_and_grade``.
      executor: ``LocalExecutor`` (default: one with ``os.cpu_count()`` process workers, shut down
        afterwards) or ``RayExecutor``.
      grading: bounds on grading each submission (default ``GradingLimits()``).

    Returns:
      One ``Outcome`` per code; a code whose executor worker crashed (``BrokenProcessPool``, a
      lost Ray worker) gets status ``"infra"``.  With an executor that has ``map_settled``
      (``LocalExecutor``) the other results survive; otherwise every item of the batch is
      ``"infra"`` when the executor fails.

    Raises:
      ValueError: a code is not a str or ``timeout_s`` is not > 0 (checked before launching).
    """
    codes = list(codes)
    for i, code in enumerate(codes):
        if not isinstance(code, str):
            raise ValueError(f"codes[{i}] must be a str, got {type(code).__name__}")
    if not isinstance(timeout_s, int | float) or not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}] seconds, got {timeout_s!r}")
    fn = partial(run_and_grade, comp=comp, sandbox=sandbox, timeout_s=timeout_s, grading=grading)
    if executor is None:
        with LocalExecutor() as own:
            return _settle(own.map_settled(fn, codes))
    settled = getattr(executor, "map_settled", None)
    if settled is not None:
        return _settle(settled(fn, codes))
    try:
        return executor.map(fn, codes)
    except (BrokenExecutor, OSError) as exc:
        return [_worker_failed(exc)] * len(codes)
    except Exception as exc:  # e.g. a Ray worker lost: RayError subclasses  # noqa: BLE001
        if type(exc).__module__.split(".")[0] == "ray":
            return [_worker_failed(exc)] * len(codes)
        raise


def _worker_failed(exc: BaseException) -> Outcome:
    return infra_outcome(f"executor worker failed: {type(exc).__name__}: {exc}")


def _settle(results: list) -> list[Outcome]:
    """Turn the executor failures in ``results`` into ``"infra"`` outcomes; re-raise the rest."""
    out = []
    for r in results:
        if isinstance(r, Outcome):
            out.append(r)
        elif isinstance(r, BrokenExecutor | OSError) or type(r).__module__.startswith("ray"):
            out.append(_worker_failed(r))
        else:
            raise r
    return out


PROG = "python -m rpg_llm.env.execute"


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Run one solution script in the sandbox; grade it.")
    p.add_argument("script", type=Path, help="the solution script (.py)")
    p.add_argument("--task", required=True, help="competition id (see python -m rpg_llm.env.tasks)")
    p.add_argument("--sandbox", default="auto", choices=KINDS, help="backend (default: auto)")
    p.add_argument("--timeout", type=float, default=60.0, help="wall-clock limit, s (default 60)")
    p.add_argument("--data-root", type=Path, default=None, help="folder of competition folders")
    p.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    from rpg_llm.env.tasks.cliflags import add_mlebench_dir_flag

    add_mlebench_dir_flag(p)
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if not args.script.exists():
        raise UsageError(f"script {str(args.script)!r} not found")
    if not args.script.is_file():
        raise UsageError(f"script {str(args.script)!r} is a folder, not a Python file")
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        raise UsageError(
            f"--timeout must be > 0 and at most {MAX_TIMEOUT_S:g} seconds (24 h), "
            f"got {args.timeout}"
        )
    try:
        code = args.script.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"script {str(args.script)!r} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
    from rpg_llm.env.tasks import load_competition
    from rpg_llm.env.tasks.cliflags import data_root_arg, mlebench_dir_arg

    tree = mlebench_dir_arg(args.mlebench_dir)  # UsageError naming the flag / env var
    data_root = data_root_arg(args.data_root, writable=False)  # a file: UsageError naming it
    try:
        comp = load_competition(args.task, data_root, tree)
    except ValueError as exc:
        raise UsageError(f"--task {args.task}: {str(exc).splitlines()[0]}") from exc
    try:
        sandbox = make_sandbox(args.sandbox)
    except ValueError as exc:
        raise UsageError(f"--sandbox {args.sandbox}: {str(exc).splitlines()[0]}") from exc
    outcome = run_and_grade(code, comp, sandbox, args.timeout)
    if args.json:
        print(json.dumps({"task": comp.id, "sandbox": sandbox.name, **asdict(outcome)}))
    else:
        score = "-" if outcome.score is None else f"{outcome.score:.6g}"
        cpu = "-" if outcome.cpu_s is None else f"{outcome.cpu_s:.3f} s"
        print(f"outcome: {outcome.status}")
        print(f"delta: {outcome.delta:.3f} s")
        print(f"cpu: {cpu}")
        print(f"score: {score}")
        print(f"raw_reward: {outcome.raw_reward:.6g}")
        print(f"text: {outcome.outcome_text}")
    return 1 if outcome.status == "infra" else 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``rpg_core.cli`` convention): 0 when the script's outcome is printed (any
    status of the script's own), 1 when it is ``"infra"`` (the sandbox or grader failed; printed
    too) or on another failure, 2 on a usage error."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
