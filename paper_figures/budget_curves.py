"""Budget curves: best raw score so far against cumulative execution time (paper, section 5).

``python -m paper_figures.budget_curves RUN_DIR [RUN_DIR ...] [--out DIR] [--points N]``

The arithmetic (chains, mean and standard error across chains per budget) is
:mod:`rpg_llm.loop.budget`; this module only plots it. Per arm (the run's method and whether it was
seeded) the mean across chains and its standard error at every budget; RPG and vanilla runs share
one plot, above a panel of how many chains each mean averages (it changes when a chain that had
no valid sample yet gets one). Outputs ``budget_curves.png``, ``.pdf`` and ``.csv`` (columns
``label, budget_s, mean_best, se, n_chains, n_active``: chains with a value, and chains that
have not yet used up their time).

The y-axis spans the means at the budgets where no chain in a mean is still at the invalid
reward (``rpg_llm.loop.rewards.INVALID_REWARD``, -10): an early invalid sample would otherwise
stretch the axis to -10 and flatten the scores that matter; the part of a curve below is clipped
and the panel says so (the CSV keeps every value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from paper_figures._common import out_dir, plt, save_figure, write_csv
from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_llm.env.registry import is_loss_task
from rpg_llm.loop.budget import (
    CSV_FIELDS,
    Chain,
    budget_grid,
    curve,
    curve_rows,
    group_chains,
    read_chains,
)
from rpg_llm.loop.rewards import INVALID_REWARD

__all__ = [
    "Chain",
    "read_chains",
    "curve",
    "budget_curves",
    "y_label",
    "arm_style",
    "valid_limits",
    "main",
]

PROG = "python -m paper_figures.budget_curves"
MAX_POINTS = 100_000
"""Largest ``--points`` (the grid is held for every arm; a typo would exhaust the memory)."""
_COLORS = {
    "rpg": "tab:red",
    "vanilla": "tab:blue",
    "fixed-lambda": "tab:green",
    "rpg, parents by raw": "tab:orange",
    "vanilla, parents by rate": "tab:purple",
}


def arm_style(label: str) -> tuple[str | None, str]:
    """Colour and line style of the curve of arm ``label`` (``rpg_llm.loop.budget.run_label``):
    one colour per arm of the table (the ablation's ``parents by`` arms their own), dashed for
    vanilla's training reward, dotted for fixed-lambda; ``None``: matplotlib's next colour."""
    arm = label.rsplit(" (", 1)[0]
    method = arm.split(",")[0].split()[0]
    style = {"vanilla": "--", "fixed-lambda": ":"}.get(method, "-")
    return _COLORS.get(arm, _COLORS.get(method)), style


def valid_limits(
    curves: Sequence[dict[str, np.ndarray]],
) -> tuple[float, float] | None:
    """The y-range of the curves at the budgets where every chain in the mean has a valid best.

    Args:
        curves: per arm, :func:`rpg_llm.loop.budget.curve`'s ``[budgets]`` float64 arrays
            (``mean_best``, ``se``, ``n_invalid`` are read; NaN where undefined).

    Returns:
        ``(low, high)``, the means and their mean -/+ s.e. band with 5 % padding, or None when
        no budget of any arm qualifies (then the axis is left to matplotlib).
    """
    lo, hi = math.inf, -math.inf
    for res in curves:
        m, se = res["mean_best"], res["se"]
        ok = np.isfinite(m) & (res["n_invalid"] == 0)
        if not ok.any():
            continue
        band = np.concatenate([m[ok], (m - se)[ok], (m + se)[ok]])
        band = band[np.isfinite(band)]
        lo, hi = min(lo, float(band.min())), max(hi, float(band.max()))
    if not math.isfinite(lo):
        return None
    pad = 0.05 * (hi - lo) if hi > lo else max(0.05 * abs(hi), 0.01)
    return lo - pad, hi + pad


def y_label(run_dirs: Sequence[str | Path]) -> str:
    """The y-axis label: the best raw reward for competition runs; for NanoGPT runs
    (:func:`rpg_llm.env.registry.is_loss_task`) the curves are minus the best crossing val loss."""
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
    rows, curves = [], []
    for label in sorted(groups):
        cs = groups[label]
        res = curve(cs, budgets)
        curves.append(res)
        color, style = arm_style(label)  # dashed/dotted: visible where the arms overlap
        lo, hi = res["mean_best"] - res["se"], res["mean_best"] + res["se"]
        ax.step(
            budgets,
            res["mean_best"],
            where="post",
            label=f"{label}, {len(cs)} chains",
            color=color,
            linestyle=style,
        )
        ax.fill_between(budgets, lo, hi, step="post", alpha=0.2, color=color)
        ax_n.step(budgets, res["n_chains"], where="post", color=color, linestyle=style)
        rows.extend(curve_rows(label, budgets, res))
    ax_n.set_xlabel("cumulative execution time per chain (s)")
    ax_n.set_ylabel("chains in\nthe mean")
    ax_n.grid(alpha=0.3)
    ax.set_ylabel(y_label(run_dirs))
    limits = valid_limits(curves)
    title = "Budget curves (mean ± s.e. across chains)"
    if limits is not None and any(np.any(res["mean_best"] < limits[0]) for res in curves):
        ax.set_ylim(*limits)
        title += f"\nclipped below: means that include an invalid sample ({INVALID_REWARD:g})"
    ax.set_title(title, fontsize=10 if "\n" in title else None)
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
