"""``python -m paper_figures.llm_table``: the parser, the checks before any run starts, and the
table's course (state of every run, one slice of runs and probes, the table's files).

Every flag is checked before any run starts: usage errors exit 2 with one line naming the flag
and the value (rpg_core.cli); the runs' settings by ``rpg_llm.launch`` (``make_config``, then
``plan`` once per task), a folder holding another experiment by ``rpg_llm.launch.status`` and
``config_difference``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from paper_figures.llm_table.markdown import protocol_text, table_markdown
from paper_figures.llm_table.plan import RunSpec, check_runs, run_configs, run_specs, run_state
from paper_figures.llm_table.report import has_row, write_table
from paper_figures.llm_table.runflags import add_run_flags, defaults, run_args_values, run_values
from paper_figures.llm_table.runner import STATE_WORDS, run_slice
from paper_figures.llm_table.settings import (
    ARMS,
    DESCRIPTION,
    FULL,
    PROG,
    QUICK,
    TUNING_NOTE,
    TableSettings,
    chosen_fixed_lambda,
)
from paper_figures.llm_table.stats import trimmed_average
from rpg_core.cli import ArgumentParser, UsageError, comma_list, out_folder, run_cli
from rpg_core.filelock import FileLock, LockBusy
from rpg_llm.config import LoopConfig
from rpg_llm.env import tasks

__all__ = ["parser", "settings_from_args", "check_settings", "main"]


def _seed(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("seeds must be >= 0")
    return value


def parser() -> ArgumentParser:
    """The table's flags, and every shared run setting (:func:`runflags.add_run_flags`)."""
    p = ArgumentParser(prog=PROG, description=DESCRIPTION, allow_abbrev=False)
    q = QUICK.run
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke table: {','.join(QUICK.tasks)} x seeds {','.join(map(str, QUICK.seeds))} x "
        f"{','.join(QUICK.arms)}; {q['batch_size']} chains, {q['exec_budget_s']:g} CPU-s per "
        f"chain, <= {q['steps']} steps, no probe",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder, runs under OUT/runs (default out/llm_table, "
        "out/llm_table_quick with --quick)",
    )
    p.add_argument(
        "--tasks",
        default=None,
        help=f"comma-separated offline competition ids ({defaults(lambda s: s.tasks)})",
    )
    seeds = comma_list(_seed, "run seeds (integers >= 0)")
    p.add_argument("--seeds", type=seeds, default=None, help=f"run seeds ({defaults(_seeds)})")
    p.add_argument(
        "--preset", default="cpu-default", help="rpg_llm.run preset (default %(default)s)"
    )
    p.add_argument(
        "--run-args",
        default=None,
        help="run settings as one quoted string of the flags below, applied after the others "
        "(so '--time wall' wins over the protocol's --time cpu); write --run-args='--x=1' when "
        "the string starts with a dash and has no space",
    )
    p.add_argument(
        "--arms",
        default=None,
        help=f"comma-separated arms, rpg first, or all ({','.join(ARMS)}) (default rpg,vanilla)",
    )
    p.add_argument(
        "--fixed-lambda",
        type=float,
        default=None,
        help="price of time of the fixed-lambda arm, reward per second of the time measure "
        "(CPU-s by default); default: the price chosen on held-out seeds 900, 901, "
        "0.000277778 at the full protocol (paper_figures/llm_table_lambda_full.json) and at 2 "
        "chains and 10 CPU-s, used with --quick (paper_figures/llm_table_lambda.json)",
    )
    p.add_argument(
        "--points", type=int, default=200, help="budget grid of the figures (default %(default)s)"
    )
    p.add_argument(
        "--probe",
        type=int,
        default=None,
        metavar="N",
        help="probe every finished run: N answers per fixed parent from the trained and the "
        "SFT-only policy (python -m rpg_llm.probe); 0: no probe "
        f"({defaults(lambda s: s.probe_answers)})",
    )
    p.add_argument(
        "--probe-parents", type=int, default=4, help="fixed parents of the probe (default 4)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs (with their probes) at once, each on one torch thread; 2 uses both cores "
        "of a 2-core machine. Script times are CPU seconds, which grow somewhat when two runs "
        "share the machine (benchmarks/RESULTS.md) (default %(default)s)",
    )
    p.add_argument(
        "--table-only",
        action="store_true",
        help="start no run and no probe; write the table, its CSVs and figures (over earlier "
        "ones) in --out from the runs there",
    )
    add_run_flags(p)
    return p


def _seeds(s: TableSettings) -> tuple[int, ...]:
    return s.seeds


def _arms(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    """The arms of ``--arms``: comma-separated names, ``all`` for :data:`ARMS`."""
    if not text:
        return default
    if text.strip() == "all":
        return tuple(ARMS)
    return tuple(a for a in text.split(",") if a)


def settings_from_args(args: argparse.Namespace) -> TableSettings:
    """The table's settings from parsed flags: ``--quick``'s or the full protocol, with the
    flags given applied (``--run-args`` last).

    Raises:
        UsageError: ``--tasks`` names none, a bad ``--run-args``, or the fixed-lambda arm
            without ``--fixed-lambda`` and no readable tuning record.
    """
    base = QUICK if args.quick else FULL
    table_flags = {o for a in parser()._actions for o in a.option_strings}
    run = {**base.run, **run_values(args), **run_args_values(args.run_args, table_flags)}
    s = replace(
        base,
        tasks=tuple(t for t in args.tasks.split(",") if t) if args.tasks else base.tasks,
        seeds=tuple(args.seeds) if args.seeds is not None else base.seeds,
        run=run,
        preset=args.preset,
        arms=_arms(args.arms, base.arms),
        fixed_lambda=args.fixed_lambda,
        probe_answers=base.probe_answers if args.probe is None else args.probe,
        probe_parents=args.probe_parents,
    )
    if s.fixed_lambda is None and "fixed-lambda" in s.arms:
        s = replace(s, fixed_lambda=chosen_fixed_lambda(quick=args.quick))
    if not s.tasks:
        raise UsageError(f"--tasks {args.tasks!r} names no task")
    return s


def check_settings(s: TableSettings) -> None:
    """The table's own values, before any run's (:func:`plan.run_configs`).

    Raises:
        UsageError: naming the flag and the value.
    """
    known = tasks.list_offline_competitions()
    for t in s.tasks:
        try:
            cid = tasks.resolve_id(t)
        except ValueError:
            cid = t
        if cid not in known:
            raise UsageError(f"--tasks {t!r} is not an offline competition; known: {known}")
    for a in s.arms:
        if a not in ARMS:
            raise UsageError(f"--arms {a!r} is not an arm; arms: {', '.join(ARMS)}")
    if not s.arms or s.arms[0] != "rpg" or len(set(s.arms)) != len(s.arms) or len(s.arms) < 2:
        raise UsageError(
            f"--arms {','.join(s.arms)}: give rpg first, then at least one other arm, each once"
        )
    if "fixed-lambda" in s.arms and not (s.fixed_lambda is not None and s.fixed_lambda > 0):
        raise UsageError(
            f"--arms fixed-lambda needs --fixed-lambda > 0, got {s.fixed_lambda} (leave it out "
            "for the price chosen on held-out seeds, paper_figures/llm_table_lambda_full.json)"
        )
    if s.fixed_lambda is not None and "fixed-lambda" not in s.arms:
        raise UsageError(f"--fixed-lambda {s.fixed_lambda:g} applies to --arms fixed-lambda only")
    if len(set(s.tasks)) != len(s.tasks):
        raise UsageError(f"--tasks {','.join(s.tasks)} names a task twice")
    if len(set(s.seeds)) != len(s.seeds):
        raise UsageError(f"--seeds {','.join(map(str, s.seeds))} names a seed twice")
    if s.probe_answers < 0:
        raise UsageError(f"--probe must be >= 0, got {s.probe_answers}")
    if s.probe_parents < 1:
        raise UsageError(f"--probe-parents must be >= 1, got {s.probe_parents}")


def _lock(out: Path) -> FileLock:
    """Hold an exclusive lock on ``<out>/.llm_table.lock`` until the returned lock is let go (or
    the process ends), so that two tables never run (or resume) the same run folders at once.

    Raises:
        UsageError: the folder cannot be made, or another table holds the lock (names ``--out``
            and the holder's pid, host and start time).
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {out}: cannot make the folder ({err.strerror or err})") from None
    try:
        return FileLock(out / ".llm_table.lock", f"--out {out} ({PROG})", wait=False).acquire()
    except LockBusy as err:
        raise UsageError(str(err)) from None


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    s = settings_from_args(args)
    check_settings(s)
    if args.points < 2:
        raise UsageError(f"--points must be >= 2, got {args.points}")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    default_out = "out/llm_table_quick" if args.quick else "out/llm_table"
    out = out_folder("--out", args.out or default_out)
    specs = run_specs(s, out)
    cfgs = run_configs(s, specs)  # every value checked before any run starts
    check_runs(s, specs, cfgs, table_only=args.table_only)
    states = [run_state(p, cfgs[p]) for p in specs]  # other settings: usage error, before the lock
    if args.table_only:
        done = {(p.task, p.method) for p, st in zip(specs, states, strict=True) if st.finished}
        if not any(has_row({m for tt, m in done if tt == t}) for t in s.tasks):
            n = sum(st.finished for st in states)
            raise UsageError(
                f"--out {out}: no task has a finished rpg run and one of another arm ({n} of "
                f"{len(specs)} runs finished; --table-only)"
            )
        return _table(args, s, out, specs, cfgs)
    lock = _lock(out)
    try:
        return _table(args, s, out, specs, cfgs)
    finally:
        lock.release()


def _table(
    args: argparse.Namespace,
    s: TableSettings,
    out: Path,
    specs: list[RunSpec],
    cfgs: Mapping[RunSpec, LoopConfig],
) -> int:
    states = {p: run_state(p, cfgs[p]) for p in specs}
    cfg = cfgs[specs[0]]
    print(protocol_text(s, cfg), flush=True)
    print(TUNING_NOTE, flush=True)
    ended: dict[RunSpec, bool] = {}
    if args.table_only:
        for i, p in enumerate(specs, 1):
            word = "skip (finished)" if states[p].finished else STATE_WORDS[states[p].state]
            print(f"[{i}/{len(specs)}] {p}: {word}")
    else:
        if args.jobs > 1:
            print(f"{args.jobs} runs at once (--jobs), each on one torch thread", flush=True)
        ended = run_slice(s, specs, cfgs, states, out, args.jobs)
    failed = [p for p in specs if ended.get(p) is False]
    rows, written = write_table(s, specs, cfgs, out, args.points)
    if rows:
        avg, dropped = trimmed_average([r.pct for r in rows])
        print(table_markdown(rows, avg, dropped), end="")
        short = sum(int(x["n_ended_before_b"]) for r in rows for x in r.runs)
        if short and cfg.exec_budget_s is not None:
            unit = "CPU-s" if cfg.reward.time_measure == "cpu" else "s"
            print(
                f"warning: {short} chains ended at the step cap ({cfg.steps}) before using the "
                f"{cfg.exec_budget_s:g} {unit} per chain budget; they are read at their end "
                "(llm_table.md)"
            )
    for w in written:
        print(f"wrote {w}")
    if failed:
        names = "; ".join(f"{p} (log {p.log_path})" for p in failed)
        raise RuntimeError(f"{len(failed)} of {len(specs)} runs did not finish: {names}")
    if not rows and args.table_only:
        raise UsageError(
            f"--out {out}: no task has a finished rpg run and one of another arm (--table-only)"
        )
    if not rows:
        raise RuntimeError("no task has a finished rpg run and one of another arm: no table")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (rpg_core.cli convention): usage error exit 2, other failure exit 1."""
    return run_cli(PROG, _main, argv)
