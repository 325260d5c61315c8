"""CLI: ``python -m rpg_llm.grade COMPETITION SUBMISSION.csv``.

Prints one JSON object: ``competition, submission, score, valid, reason, percentile, medal,
lower_is_better, raw_reward`` (raw reward per DESIGN.md section 7). Exit status 0 when the report
was produced (valid or not), 2 with one line on stderr for a missing competition or file or any
other usage error. The data root is ``--data-root``, else env ``RPG_DATA_ROOT``, else
``~/.cache/rpg/competitions``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rpg_llm.tasks.format import load_competition
from rpg_llm.tasks.grading import grade_submission, raw_reward


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m rpg_llm.grade")
    parser.add_argument("competition", help="competition id or alias ('text')")
    parser.add_argument("submission", type=Path, help="submission CSV")
    parser.add_argument("--data-root", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.submission.is_file():
        print(f"error: submission file not found: {args.submission}", file=sys.stderr)
        return 2
    try:
        comp = load_competition(args.competition, args.data_root)
        report = grade_submission(comp, args.submission)
    except ValueError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    out = {"competition": comp.id, "submission": str(args.submission), **report.to_dict()}
    try:
        out["raw_reward"] = raw_reward(report)
    except ValueError:  # lower-is-better competition without a leaderboard
        out["raw_reward"] = None
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
