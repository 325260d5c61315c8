"""Run a solution in the sandbox and grade it: the environment step of the LLM loop.

Paper section 4: an action is a generated script, executed in a sandbox to produce time delta and
reward r.  DESIGN section 7: the outcome text shows the score on success, the timeout, or the
exception type, line and message; an invalid submission earns ``INVALID_REWARD`` (-10).

CLI: ``python -m rpg_llm.execute SCRIPT --task NAME [--sandbox auto] [--timeout 60]`` runs one
script and prints its outcome, delta and score.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rpg_llm.sandbox import KINDS, BatchExecutor, LocalExecutor, Sandbox, make_sandbox

if TYPE_CHECKING:  # pragma: no cover
    from rpg_llm.tasks import Competition

OUTCOME_STATUSES = ("ok", "timeout", "oom", "error", "invalid")


@dataclass(frozen=True)
class Outcome:
    """Result of running and grading one solution.

    Attributes:
      status: ``"ok" | "timeout" | "oom" | "error" | "invalid"`` (invalid: ran but the submission
        is missing or rejected by the grader).
      delta: wall time of the child from start to exit, seconds.
      score: the grader's score (``None`` unless ``status == "ok"``).
      raw_reward: DESIGN section 7 raw reward (score, or leaderboard percentile for
        lower-is-better tasks); ``INVALID_REWARD`` (-10) for every non-ok status.
      valid: True iff ``status == "ok"``.
      outcome_text: text shown to the policy (includes the score on success).
    """

    status: str
    delta: float
    score: float | None
    raw_reward: float
    valid: bool
    outcome_text: str


def _hidden_paths(comp: Competition) -> list[Path]:
    hide = [Path(comp.private_dir)]
    answers = getattr(comp, "answers", None)
    if answers is not None and Path(comp.private_dir) not in Path(answers).parents:
        hide.append(Path(answers))
    return hide


def run_and_grade(code: str, comp: Competition, sandbox: Sandbox, timeout_s: float) -> Outcome:
    """Execute ``code`` on ``comp``'s public data and grade its ``submission.csv``.

    The competition's private folder (and answers file) is hidden from the child on backends that
    can hide paths.  The working folder is deleted afterwards.

    Args:
      code: the solution script (Python source).
      comp: a loaded ``rpg_llm.tasks.Competition``.
      sandbox: any ``Sandbox`` (``make_sandbox(...)``).
      timeout_s: wall-clock limit, seconds.

    Returns:
      ``Outcome``.

    Raises:
      ValueError: bad ``code`` / ``timeout_s`` (before launching), or the competition cannot be
        graded at all (missing answers / grader: a set-up error, not the script's fault).
    """
    from rpg_llm.tasks import INVALID_REWARD, grade_submission, raw_reward

    res = sandbox.run(code, Path(comp.public_dir), timeout_s, hide=_hidden_paths(comp))
    try:
        if res.status != "ok":
            return Outcome(res.status, res.delta, None, INVALID_REWARD, False, res.outcome_text)
        if not res.submission_path.is_file():
            text = "invalid: the script finished without writing submission.csv"
            return Outcome("invalid", res.delta, None, INVALID_REWARD, False, text)
        report = grade_submission(comp, res.submission_path)
        if not report.valid or report.score is None:
            text = f"invalid submission: {report.reason}"
            return Outcome("invalid", res.delta, None, INVALID_REWARD, False, text)
        reward = raw_reward(report)
        direction = "lower" if report.lower_is_better else "higher"
        text = f"score {report.score:.6g} ({direction} is better), ran {res.delta:.1f} s"
        if report.percentile is not None:
            text += f", beats {100 * report.percentile:.0f}% of the leaderboard"
        return Outcome("ok", res.delta, float(report.score), float(reward), True, text)
    finally:
        res.cleanup()


def run_batch(
    codes: Sequence[str],
    comp: Competition,
    sandbox: Sandbox,
    timeout_s: float,
    executor: BatchExecutor | None = None,
) -> list[Outcome]:
    """``run_and_grade`` over a batch in parallel, results in the order of ``codes``.

    Args:
      codes: B solution scripts.
      comp, sandbox, timeout_s: as in ``run_and_grade``.
      executor: ``LocalExecutor`` (default: one with ``os.cpu_count()`` process workers, shut down
        afterwards) or ``RayExecutor``.

    Raises:
      ValueError: a code is not a str or ``timeout_s`` is not > 0 (checked before launching).
    """
    codes = list(codes)
    for i, code in enumerate(codes):
        if not isinstance(code, str):
            raise ValueError(f"codes[{i}] must be a str, got {type(code).__name__}")
    if not isinstance(timeout_s, int | float) or not timeout_s > 0 or math.isinf(timeout_s):
        raise ValueError(f"timeout_s must be a positive finite number, got {timeout_s!r}")
    fn = partial(run_and_grade, comp=comp, sandbox=sandbox, timeout_s=timeout_s)
    if executor is not None:
        return executor.map(fn, codes)
    with LocalExecutor() as own:
        return own.map(fn, codes)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m rpg_llm.execute",
        description="Run one solution script in the sandbox and grade it.",
    )
    p.add_argument("script", type=Path, help="the solution script (.py)")
    p.add_argument("--task", required=True, help="competition id (see python -m rpg_llm.tasks)")
    p.add_argument("--sandbox", default="auto", choices=KINDS, help="backend (default: auto)")
    p.add_argument("--timeout", type=float, default=60.0, help="wall-clock limit, s (default 60)")
    p.add_argument("--data-root", type=Path, default=None, help="folder of competition folders")
    p.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (2 on usage errors)."""
    parser = _parser()
    args = parser.parse_args(argv)

    def usage(msg: str) -> int:
        print(f"{parser.prog}: error: {msg}", file=sys.stderr)
        return 2

    if not args.script.is_file():
        return usage(f"script {str(args.script)!r} not found")
    if not args.timeout > 0 or math.isinf(args.timeout):
        return usage(f"--timeout must be a positive number of seconds, got {args.timeout}")
    from rpg_llm.tasks import load_competition

    try:
        comp = load_competition(args.task, args.data_root)
        sandbox = make_sandbox(args.sandbox)
    except ValueError as exc:
        return usage(str(exc).splitlines()[0])
    try:
        outcome = run_and_grade(args.script.read_text(), comp, sandbox, args.timeout)
    except RuntimeError as exc:  # e.g. docker requested but no engine answers
        return usage(str(exc).splitlines()[0])
    if args.json:
        print(json.dumps({"task": comp.id, "sandbox": sandbox.name, **asdict(outcome)}))
    else:
        score = "-" if outcome.score is None else f"{outcome.score:.6g}"
        print(f"outcome: {outcome.status}")
        print(f"delta: {outcome.delta:.3f} s")
        print(f"score: {score}")
        print(f"raw_reward: {outcome.raw_reward:.6g}")
        print(f"text: {outcome.outcome_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
