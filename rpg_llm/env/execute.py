"""One environment step from the command line, and the names of an outcome.

A step runs a generated script in the sandbox and grades it (paper section 4: an action is a
script, executed to produce time delta and reward r): :class:`rpg_llm.env.outcome.Outcome` is its
result, :func:`run_and_grade` / :func:`run_batch` run scripts on a competition
(:mod:`rpg_llm.env.tasks.runner`), and every task runs its own batch (``Task.run_batch``).

CLI: ``python -m rpg_llm.env.execute SCRIPT --task NAME [--sandbox auto] [--timeout 60]`` runs one
script and prints its outcome, delta, CPU seconds and score (exit 1 when the outcome is ``infra``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from rpg_core.cli import ArgumentParser, UsageError, input_file, run_cli
from rpg_llm.env.outcome import (
    INFRA_REWARD,
    OUTCOME_STATUSES,
    RUN_TIME_RE,
    Outcome,
    infra_outcome,
)
from rpg_llm.env.sandbox import KINDS, make_sandbox
from rpg_llm.env.sandbox.base import MAX_TIMEOUT_S
from rpg_llm.env.tasks.cliflags import add_mlebench_dir_flag, data_root_arg, mlebench_dir_arg
from rpg_llm.env.tasks.format import load_competition
from rpg_llm.env.tasks.runner import hidden_paths, run_and_grade, run_batch

__all__ = [
    "INFRA_REWARD",
    "OUTCOME_STATUSES",
    "RUN_TIME_RE",
    "Outcome",
    "hidden_paths",
    "infra_outcome",
    "main",
    "run_and_grade",
    "run_batch",
]

PROG = "python -m rpg_llm.env.execute"
MAX_SCRIPT_BYTES = 10 * 2**20
"""The largest script the command reads (a script is text a policy wrote: kilobytes)."""


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Run one solution script in the sandbox; grade it.")
    p.add_argument("script", type=Path, help="the solution script (.py)")
    p.add_argument("--task", required=True, help="competition id (see python -m rpg_llm.env.tasks)")
    p.add_argument("--sandbox", default="auto", choices=KINDS, help="backend (default: auto)")
    p.add_argument("--timeout", type=float, default=60.0, help="wall-clock limit, s (default 60)")
    p.add_argument("--data-root", type=Path, default=None, help="folder of competition folders")
    p.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    add_mlebench_dir_flag(p)
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    data = input_file("script", args.script, MAX_SCRIPT_BYTES)
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        raise UsageError(
            f"--timeout must be > 0 and at most {MAX_TIMEOUT_S:g} seconds (24 h), "
            f"got {args.timeout}"
        )
    try:
        code = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"script {str(args.script)!r} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
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
