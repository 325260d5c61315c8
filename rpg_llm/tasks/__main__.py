"""CLI: ``python -m rpg_llm.tasks prepare NAME|all`` and ``python -m rpg_llm.tasks list``.

``prepare`` builds offline competitions under the data root (``--data-root``, else env
``RPG_DATA_ROOT``, else ``~/.cache/rpg/competitions``) and prints one line per competition with
its folder, leaderboard size and build time in seconds. Usage errors exit 2 with one line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rpg_llm.tasks.format import default_data_root, resolve_id
from rpg_llm.tasks.offline import list_offline_competitions, prepare


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m rpg_llm.tasks")
    sub = parser.add_subparsers(dest="command", required=True)
    p_prepare = sub.add_parser("prepare", help="build offline competition folders")
    p_prepare.add_argument("name", help="competition id, alias ('text') or 'all'")
    p_prepare.add_argument("--data-root", type=Path, default=None)
    p_prepare.add_argument("--seed", type=int, default=0)
    p_prepare.add_argument("--force", action="store_true", help="rebuild even if cached")
    p_prepare.add_argument("--no-leaderboard", action="store_true")
    p_prepare.add_argument("--workers", type=int, default=None)
    sub.add_parser("list", help="list the offline competitions")
    args = parser.parse_args(argv)

    if args.command == "list":
        for comp_id in list_offline_competitions():
            print(comp_id)
        return 0
    known = list_offline_competitions()
    if args.name == "all":
        names = known
    else:
        try:
            comp_id = resolve_id(args.name)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if comp_id not in known:
            print(
                f"error: unknown competition {args.name!r}; known: {', '.join(known)}",
                file=sys.stderr,
            )
            return 2
        names = [comp_id]
    if args.workers is not None and args.workers < 1:
        print(f"error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    data_root = args.data_root or default_data_root()
    total = time.perf_counter()
    for name in names:
        start = time.perf_counter()
        comp = prepare(
            name,
            data_root,
            seed=args.seed,
            force=args.force,
            leaderboard=not args.no_leaderboard,
            workers=args.workers,
        )
        n_board = 0 if comp.leaderboard is None else len(comp.leaderboard)
        best = "" if comp.leaderboard is None else f" best={comp.leaderboard['score'].iloc[0]:.5g}"
        print(
            f"{comp.id}: {comp.root} leaderboard={n_board}{best} "
            f"({'lower' if comp.lower_is_better else 'higher'} is better) "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
    print(f"total {time.perf_counter() - total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
