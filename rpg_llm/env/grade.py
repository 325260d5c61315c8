"""Grade one submission: ``python -m rpg_llm.env.grade COMPETITION SUBMISSION.csv [options]``.

Options: ``--data-root D`` (offline competitions), ``--mlebench-dir D`` (an MLE-Bench tree).

Prints one JSON object: ``competition, submission, score, valid, reason, percentile, medal,
lower_is_better, raw_reward`` (raw reward per DESIGN.md section 7; ``score`` rounded to 5
decimals as MLE-Bench does). Exit status 0 when the report was produced (valid or not); 2 with one
line on stderr for a usage error (a missing submission file, an unknown or unprepared
competition, a ``--mlebench-dir`` without ``mlebench/competitions``); 1 with one line when the
competition cannot be graded at all (:class:`rpg_llm.env.tasks.GradingSetupError`: answers missing,
grader not importable).

The data root is ``--data-root``, else env ``RPG_DATA_ROOT``, else ``~/.cache/rpg/competitions``.
The MLE-Bench tree is ``--mlebench-dir``, else env ``RPG_MLEBENCH_DIR``, else none: its
``mlebench/competitions/<id>/`` is read directly (config.yaml, grade.py, leaderboard.csv,
description.md), without the ``mlebench`` package (see :mod:`rpg_llm.env.tasks.format`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rpg_core.cli import ArgumentParser, UsageError, file_kind, run_cli
from rpg_llm.env.tasks.cliflags import add_mlebench_dir_flag, data_root_arg, mlebench_dir_arg
from rpg_llm.env.tasks.format import load_competition
from rpg_llm.env.tasks.grading import grade_submission, raw_reward

PROG = "python -m rpg_llm.env.grade"


def _main(argv: Sequence[str] | None) -> int:
    parser = ArgumentParser(
        prog=PROG,
        description="Grade one submission CSV and print one JSON object: competition, "
        "submission, score, valid, reason, percentile, medal, lower_is_better, raw_reward.",
        epilog="Exit status: 0 when the report was printed (valid or not); 2 for a usage error "
        "(missing submission, unknown or unprepared competition, a --mlebench-dir without "
        "mlebench/competitions); 1 when the competition cannot be graded at all (answers "
        "missing, grader not importable).",
    )
    parser.add_argument("competition", help="competition id or alias ('text')")
    parser.add_argument("submission", type=Path, help="submission CSV")
    parser.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="offline competitions folder (default env RPG_DATA_ROOT, else "
        "~/.cache/rpg/competitions)",
    )
    add_mlebench_dir_flag(parser)
    args = parser.parse_args(argv)
    tree = mlebench_dir_arg(args.mlebench_dir)
    data_root = data_root_arg(args.data_root, writable=False)  # a file: UsageError naming it
    try:
        comp = load_competition(args.competition, data_root, tree)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    # after the competition, so that a bad id and a bad file at once name the id first
    kind = file_kind(args.submission)
    if kind == "missing":
        raise UsageError(f"submission file not found: {args.submission}")
    if kind != "a regular file":
        raise UsageError(f"submission {args.submission} is {kind}, not a CSV file")
    report = grade_submission(comp, args.submission)  # GradingSetupError: exit 1, one line
    out = {"competition": comp.id, "submission": str(args.submission), **report.to_dict()}
    try:
        out["raw_reward"] = raw_reward(report)
    except ValueError:  # lower-is-better competition without a leaderboard
        out["raw_reward"] = None
    print(json.dumps(out))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI under the project's exit-status convention; returns the exit status."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
