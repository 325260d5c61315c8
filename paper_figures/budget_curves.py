"""Budget curves: best raw score so far against cumulative execution time (paper, section 5).

``python -m paper_figures.budget_curves RUN_DIR [RUN_DIR ...] [--out DIR] [--points N]``

The arithmetic (chains, mean and standard error across chains per budget) is
:mod:`rpg_llm.loop.budget`; this module only plots it. Per arm (the run's method and whether it was
seeded) the mean across chains and its standard error at every budget; RPG and vanilla runs share
one plot, above a panel of how many chains each mean averages (it changes when a chain that had
no valid sample yet gets one). Outputs ``budget_curves.png``, ``.pdf`` and ``.csv`` (columns
``label, budget_s, mean_best, se, n_chains, n_active``: chains with a value, and chains that
have not yet used up their time).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from paper_figures._common import out_dir, plt, save_figure, write_csv
from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_llm.loop.budget import (
    CSV_FIELDS,
    Chain,
    budget_grid,
    curve,
    curve_rows,
    group_chains,
    read_chains,
)

__all__ = ["Chain", "read_chains", "curve", "budget_curves", "y_label", "main"]

PROG = "python -m paper_figures.budget_curves"
MAX_POINTS = 100_000
"""Largest ``--points`` (the grid is held for every arm; a typo would exhaust the memory)."""
_COLORS = {"rpg": "tab:red", "vanilla": "tab:blue"}


def y_label(run_dirs: Sequence[str | Path]) -> str:
    """The y-axis label: the best raw reward for competition runs; for NanoGPT runs
    (:func:`rpg_llm.env.registry.is_loss_task`) the curves are minus the best crossing val loss."""
    from rpg_llm.env.registry import is_loss_task
    from rpg_llm.loop.runfolder import RunFolder

    loss = []
    for d in run_dirs:
        config = RunFolder(d).load_config()
        loss.append(is_loss_task(config.get("competition") or config.get("task")))
    if all(loss):
        return "minus the best crossing val loss so far"
    if any(loss):
        return "best so far: raw reward (NanoGPT runs: minus crossing val loss)"
    return "best raw reward so far"


def budget_curves(
    run_dirs: Sequence[str | Path], out: str | Path | None = None, points: int = 200
) -> tuple[Path, Path, Path]:
    """Plot the budget curves of ``run_dirs`` (grouped by arm); returns (png, pdf, csv) paths.

    Default output folder: ``RUN_DIR/figures`` for one run, else ``out/budget_curves``.

    Raises:
        ValueError: no run folder, a folder that is not a run or has no samples, ``points < 2``.
    """
    groups = group_chains(run_dirs)
    budgets = budget_grid(groups, points)
    folder = out_dir(
        out if out is not None else (Path(run_dirs[0]) / "figures" if len(run_dirs) == 1 else None),
        "budget_curves",
    )
    fig, (ax, ax_n) = plt.subplots(
        2, 1, figsize=(6.0, 5.0), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    rows = []
    for label in sorted(groups):
        cs = groups[label]
        res = curve(cs, budgets)
        color = _COLORS.get(label.split()[0])
        style = "--" if label.startswith("vanilla") else "-"  # visible where the arms overlap
        ax.step(
            budgets,
            res["mean_best"],
            where="post",
            label=f"{label}, {len(cs)} chains",
            color=color,
            linestyle=style,
        )
        lo, hi = res["mean_best"] - res["se"], res["mean_best"] + res["se"]
        ax.fill_between(budgets, lo, hi, step="post", alpha=0.2, color=color)
        ax_n.step(budgets, res["n_chains"], where="post", color=color, linestyle=style)
        rows.extend(curve_rows(label, budgets, res))
    ax_n.set_xlabel("cumulative execution time per chain (s)")
    ax_n.set_ylabel("chains in\nthe mean")
    ax_n.grid(alpha=0.3)
    ax.set_ylabel(y_label(run_dirs))
    ax.set_title("Budget curves (mean ± s.e. across chains)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    png, pdf = save_figure(fig, folder, "budget_curves")
    csv = write_csv(folder / "budget_curves.csv", rows, CSV_FIELDS)
    return png, pdf, csv


def _main(argv: Sequence[str] | None) -> int:
    parser = ArgumentParser(prog=PROG, description="Plot budget curves of rpg_llm run folders.")
    parser.add_argument("run_dirs", nargs="+", help="rpg_llm run folders")
    parser.add_argument("--out", default=None, help="output folder")
    parser.add_argument("--points", type=int, default=200, help="budget grid size (>= 2)")
    args = parser.parse_args(argv)
    if not 2 <= args.points <= MAX_POINTS:
        raise UsageError(f"--points must lie in [2, {MAX_POINTS}], got {args.points}")
    if args.out is not None:
        if not args.out.strip():
            raise UsageError(f"--out {args.out!r}: an empty value; give a folder")
        out = Path(args.out).expanduser()
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {args.out}: exists and is not a folder")
    seen: set[Path] = set()
    for d in args.run_dirs:
        key = Path(d).expanduser().resolve()
        if key in seen:
            raise UsageError(f"RUN_DIR {d} is given twice (its chains would count double)")
        seen.add(key)
    for d in args.run_dirs:
        try:
            read_chains(d)
        except ValueError as err:
            raise UsageError(f"RUN_DIR {d}: {err}") from None
    png, pdf, csv = budget_curves(args.run_dirs, args.out, args.points)
    print(f"wrote {png}\nwrote {pdf}\nwrote {csv}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (rpg_core.cli convention): usage error exit 2, other failure exit 1."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
