"""Run a solution script on a competition in the sandbox and grade its submission.

The environment step of a competition (:meth:`rpg_llm.env.tasks.Competition.run_batch`): the
script runs on the competition's public data with its private answers and data root hidden
(:func:`hidden_paths`), its ``submission.csv`` is graded (:mod:`rpg_llm.env.tasks.grading`), and
the result is an :class:`rpg_llm.env.outcome.Outcome`.  A failure of the sandbox, the executor or
the grader's set-up is an ``"infra"`` outcome, never charged to the script.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import BrokenExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rpg_llm.env.outcome import Outcome, infra_outcome
from rpg_llm.env.sandbox import BatchExecutor, LocalExecutor, Sandbox
from rpg_llm.env.sandbox.base import MAX_TIMEOUT_S, SandboxError
from rpg_llm.env.sandbox.subprocess_backend import interpreter_paths
from rpg_llm.env.tasks.grading import (
    INVALID_REWARD,
    GradingLimits,
    GradingSetupError,
    grade_submission,
    raw_reward,
)

if TYPE_CHECKING:  # pragma: no cover - annotations only: the Competition record runs through here
    from rpg_llm.env.tasks.format import Competition

__all__ = ["hidden_paths", "run_and_grade", "run_batch"]


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
        afterwards) or any :class:`rpg_llm.env.sandbox.BatchExecutor`.
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
