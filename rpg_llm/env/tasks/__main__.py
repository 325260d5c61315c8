"""CLI: ``python -m rpg_llm.env.tasks prepare|baselines|prior NAME|all`` and ``... list``.

``prepare`` builds offline competitions under the data root (``--data-root``, else env
``RPG_DATA_ROOT``, else ``~/.cache/rpg/competitions``) and prints one line per competition with
its folder, leaderboard size, best score and build time in seconds, then the total.

``list`` prints one line per competition, tab-separated: id, source (``offline``, or ``mlebench``
for a competition of the ``--mlebench-dir`` tree, default env ``RPG_MLEBENCH_DIR``) and whether its
data is prepared under the data root (``prepared``, with the leaderboard size when there is one,
or ``not prepared``).

``baselines`` prepares each named offline competition (cached, with its leaderboard) and runs
its seed baselines once each through the training executor (:mod:`rpg_llm.env.tasks.baselines`:
``--sandbox``, ``--timeout`` seconds, ``--workers`` at once), then prints one markdown table:
task, baseline, CPU seconds, wall seconds, score, rank on the leaderboard and the share of the
board it beats. Exit 1 when a baseline did not score.

``prior`` measures each named task's prior regime (:mod:`rpg_llm.env.tasks.regime`): its fixed
scripts run once each through the training executor (``--timeout``, default the CPU default's
60 s; ``--sandbox``; ``--workers``), written to ``--out DIR`` as ``<task>.csv`` (one row per
script) and ``priors.json`` (``{task: RegimePrior}``, merged with what is there), then one
markdown line per task. A task whose CSV is already in ``DIR`` is read, not re-run (``--force``
re-runs it, as it must after a change of ``--timeout`` or of the task's scripts), so an
interrupted measurement resumes; a task with a run that failed for the machine's sake
(``infra``) is an error and its rows are not stored.

Usage errors exit 2 with one line naming the flag and the value; other failures exit 1 with one
line (``rpg_core.cli``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_llm.env.sandbox import Sandbox, make_sandbox
from rpg_llm.env.sandbox.base import MAX_TIMEOUT_S
from rpg_llm.env.tasks.baselines import markdown_table, measure_baselines, measure_scripts
from rpg_llm.env.tasks.cliflags import add_mlebench_dir_flag, data_root_arg, mlebench_dir_arg
from rpg_llm.env.tasks.format import (
    TREE_COMPETITIONS,
    is_prepared,
    list_tree_competitions,
    read_board,
    resolve_id,
)
from rpg_llm.env.tasks.offline import list_offline_competitions, prepare
from rpg_llm.env.tasks.regime import PRIOR_TIMEOUT_S, prior_scripts, regime_prior

PROG = "python -m rpg_llm.env.tasks"


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Offline competitions: build and list.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    p_prepare = sub.add_parser("prepare", help="build offline competition folders")
    p_prepare.add_argument("name", help="competition id, alias ('text') or 'all'")
    p_prepare.add_argument("--data-root", type=Path, default=None)
    p_prepare.add_argument("--seed", type=int, default=0)
    p_prepare.add_argument("--force", action="store_true", help="rebuild even if cached")
    p_prepare.add_argument("--no-leaderboard", action="store_true")
    p_prepare.add_argument("--workers", type=int, default=None)
    add_mlebench_dir_flag(p_prepare)
    p_base = sub.add_parser("baselines", help="time, score and rank of the seed baselines")
    p_base.add_argument("name", help="competition id, alias, comma-separated ids or 'all'")
    p_base.add_argument("--data-root", type=Path, default=None)
    p_base.add_argument("--seed", type=int, default=0)
    p_base.add_argument("--sandbox", default="auto")
    p_base.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    p_base.add_argument("--workers", type=int, default=1, help="runs at once")
    add_mlebench_dir_flag(p_base)
    p_prior = sub.add_parser("prior", help="measure the tasks' prior regime (CPU time vs score)")
    p_prior.add_argument("name", help="competition id, comma-separated ids or 'all'")
    p_prior.add_argument("--out", type=Path, required=True, help="folder of the CSVs and JSON")
    p_prior.add_argument("--data-root", type=Path, default=None)
    p_prior.add_argument("--sandbox", default="auto")
    p_prior.add_argument("--timeout", type=float, default=PRIOR_TIMEOUT_S, help="seconds per run")
    p_prior.add_argument("--workers", type=int, default=1, help="runs at once")
    p_prior.add_argument("--force", action="store_true", help="re-run tasks already measured")
    add_mlebench_dir_flag(p_prior)
    p_list = sub.add_parser("list", help="list the competitions and whether they are prepared")
    p_list.add_argument("--data-root", type=Path, default=None)
    add_mlebench_dir_flag(p_list)
    return parser


def _list(data_root: Path, tree: Path | None) -> int:
    rows = [(comp_id, "offline") for comp_id in list_offline_competitions()]
    if tree is not None:
        rows += [(comp_id, "mlebench") for comp_id in list_tree_competitions(tree)]
    for comp_id, source in rows:
        status = "not prepared"
        if is_prepared(comp_id, data_root):
            base = data_root / comp_id
            if source == "mlebench" and tree is not None:
                base = tree / TREE_COMPETITIONS / comp_id
            try:
                board = read_board(base / "leaderboard.csv")
            except ValueError:
                board = None
            status = "prepared" + ("" if board is None else f" (leaderboard {len(board)})")
        print(f"{comp_id}\t{source}\t{status}")
    return 0


def _offline_names(
    command: str, name: str, data_root: Path, tree: Path | None, several: bool = False
) -> list[str]:
    """The offline competition ids that ``name`` names (``all``; with ``several``, also
    comma-separated ids); UsageError naming the value otherwise."""
    known = list_offline_competitions()
    if name == "all":
        return known
    names = []
    for part in name.split(",") if several else [name]:
        try:
            comp_id = resolve_id(part)
        except ValueError as exc:
            raise UsageError(f"{command} {part!r}: {exc}") from exc
        if comp_id not in known:
            if tree is not None and comp_id in list_tree_competitions(tree):
                raise UsageError(
                    f"{command} {comp_id!r}: an MLE-Bench competition of {tree}; prepare it with "
                    f"mle-bench (`mlebench prepare -c {comp_id} --data-dir {data_root}`)"
                )
            raise UsageError(f"unknown competition {part!r}; offline ones: {', '.join(known)}")
        names.append(comp_id)
    return names


def _run_settings(args: Any) -> Sandbox:
    """Check ``--workers`` and ``--timeout`` and make the ``--sandbox`` (UsageError naming the
    flag and the value)."""
    if not args.workers >= 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        raise UsageError(f"--timeout must be in (0, {MAX_TIMEOUT_S:g}] seconds, got {args.timeout}")
    try:
        return make_sandbox(args.sandbox)
    except ValueError as exc:
        raise UsageError(f"--sandbox {args.sandbox}: {str(exc).splitlines()[0]}") from exc


def _baselines(args: Any, data_root: Path, tree: Path | None) -> int:
    names = _offline_names("baselines", args.name, data_root, tree, several=True)
    if not args.seed >= 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    sandbox = _run_settings(args)
    data_root_arg(args.data_root, writable=True)  # after the other checks: makes the folder
    tables = []
    for name in names:
        comp = prepare(name, data_root, seed=args.seed)
        tables.append(measure_baselines(comp, sandbox, args.timeout, args.workers))
    rows = pd.concat(tables, ignore_index=True)
    print(markdown_table(rows), end="", flush=True)
    return 0 if bool((rows["status"] == "ok").all()) else 1


def _prior(args: Any, data_root: Path, tree: Path | None) -> int:
    names = _offline_names("prior", args.name, data_root, tree, several=True)
    sandbox = _run_settings(args)
    if sandbox.name == "docker":
        raise UsageError("--sandbox docker: it measures no CPU seconds; use bwrap or subprocess")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a folder")
    data_root_arg(args.data_root, writable=True)  # after the other checks: makes the folder
    out.mkdir(parents=True, exist_ok=True)
    summary_path = out / "priors.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    print("| task | scripts | valid | timeouts | CPU s min - max | span | Spearman | (valid) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    for name in names:
        comp = prepare(name, data_root)
        rows_path = out / f"{name}.csv"
        cached = rows_path.is_file() and not args.force
        if cached:
            rows = pd.read_csv(rows_path)
        else:
            rows = measure_scripts(comp, prior_scripts(name), sandbox, args.timeout, args.workers)
        prior = regime_prior(rows, comp.lower_is_better)  # before storing: bad rows never cached
        if not cached:
            tmp = rows_path.with_suffix(".csv.tmp")
            rows.to_csv(tmp, index=False)
            tmp.replace(rows_path)
        summary[name] = prior.to_json()
        tmp = summary_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(dict(sorted(summary.items())), indent=1) + "\n")
        tmp.replace(summary_path)
        print(
            f"| {name} | {prior.scripts} | {prior.valid} | {prior.timeouts} | "
            f"{prior.cpu_min_s:.1f} - {prior.cpu_max_s:.1f} | {prior.span:.1f} | "
            f"{prior.spearman:+.2f} | {prior.spearman_valid:+.2f} |",
            flush=True,
        )
    return 0


def _prepare(args: Any, data_root: Path, tree: Path | None) -> int:
    names = _offline_names("prepare", args.name, data_root, tree)
    if not (args.workers is None or args.workers >= 1):
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if not (args.seed >= 0):
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    data_root_arg(args.data_root, writable=True)  # after the other checks: makes the folder
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


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    tree = mlebench_dir_arg(args.mlebench_dir)
    data_root = data_root_arg(args.data_root, writable=False)
    if args.command == "list":
        return _list(data_root, tree)
    if args.command == "baselines":
        return _baselines(args, data_root, tree)
    if args.command == "prior":
        return _prior(args, data_root, tree)
    return _prepare(args, data_root, tree)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI under the project's exit-status convention; returns the exit status."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
