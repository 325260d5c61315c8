"""Budget curves: best raw score so far against cumulative execution time (paper, section 5).

``python -m paper_figures.budget_curves RUN_DIR [RUN_DIR ...] [--out DIR]``

A *chain* is one batch row of one run: the sequence of scripts generated in that row at steps
1, 2, ... (the seed solutions of step 0 are not part of any chain). Per chain, the cumulative
execution time after each sample and the best raw reward so far give a step function; at every
budget ``b`` of a common grid a chain's value is its best raw reward among the samples finished
within ``b`` (undefined before its first sample; after its last sample the value stays). The
plot shows, per arm (the run's method and whether it was seeded), the mean across chains and its
standard error at every budget; RPG and vanilla runs share one plot. Outputs
``budget_curves.png``, ``.pdf`` and ``.csv`` (columns ``label, budget_s, mean_best, se,
n_chains, n_active``: chains with a value, and chains that have not yet used up their time).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from paper_figures._common import out_dir, plt, save_figure, write_csv

__all__ = ["Chain", "read_chains", "curve", "budget_curves", "main"]

CSV_FIELDS = ["label", "budget_s", "mean_best", "se", "n_chains", "n_active"]


class Chain:
    """One chain: ``times[k]`` cumulative execution seconds after sample ``k``, ``best[k]`` the best
    raw reward among samples ``0..k``. Both 1-D float arrays of equal length >= 1."""

    def __init__(self, label: str, times: np.ndarray, best: np.ndarray):
        self.label, self.times, self.best = label, np.asarray(times), np.asarray(best)

    def value_at(self, budgets: np.ndarray) -> np.ndarray:
        """Best raw reward finished within each budget (NaN before the first sample)."""
        idx = np.searchsorted(self.times, budgets, side="right") - 1
        out = np.where(idx >= 0, self.best[np.clip(idx, 0, None)], np.nan)
        return out.astype(np.float64)


def _label(config: dict) -> str:
    seeded = "seeded" if config.get("seeded", config.get("seed_buffer", False)) else "unseeded"
    return f"{config.get('method', '?')} ({seeded})"


def read_chains(run_dir: str | Path) -> list[Chain]:
    """Chains of one run folder (one per batch row), from its ``config.json`` and buffer.

    Raises:
        ValueError: not a run folder, or no training sample in it.
    """
    import sqlite3

    run_dir = Path(run_dir)
    cfg_path, db = run_dir / "config.json", run_dir / "buffer.sqlite"
    if not cfg_path.exists() or not db.exists():
        raise ValueError(f"{run_dir} is not a run folder (needs config.json and buffer.sqlite)")
    config = json.loads(cfg_path.read_text())
    label = _label(config)
    con = sqlite3.connect(str(db))
    try:
        rows = con.execute(
            "SELECT row, step, exec_time, raw_reward FROM samples WHERE step >= 1 "
            "ORDER BY row, step, id"
        ).fetchall()
    finally:
        con.close()
    if not rows:
        raise ValueError(f"{run_dir} has no training samples yet")
    per_row: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for row, _step, t, r in rows:
        per_row[int(row)].append((float(t), float(r)))
    chains = []
    for row in sorted(per_row):
        t, r = np.array(per_row[row]).T
        chains.append(Chain(label, np.cumsum(t), np.maximum.accumulate(r)))
    return chains


def curve(chains: Sequence[Chain], budgets: np.ndarray) -> dict[str, np.ndarray]:
    """Mean and standard error across chains at each budget.

    Returns:
        ``mean_best``, ``se`` (sample s.d. / sqrt(n); NaN for n < 2), ``n_chains`` (chains with a
        value at that budget), ``n_active`` (chains whose total time is >= the budget).
    """
    values = np.stack([c.value_at(budgets) for c in chains])  # [chains, budgets]
    ok = ~np.isnan(values)
    n = ok.sum(0)
    total = np.where(ok, values, 0.0).sum(0)
    mean = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    dev = np.where(ok, values - mean, 0.0)
    var = (dev**2).sum(0) / np.maximum(n - 1, 1)
    se = np.where(n >= 2, np.sqrt(var / np.maximum(n, 1)), np.nan)
    n_active = np.array([[c.times[-1] >= b for b in budgets] for c in chains]).sum(0)
    return {"mean_best": mean, "se": se, "n_chains": n, "n_active": n_active}


def budget_curves(
    run_dirs: Sequence[str | Path], out: str | Path | None = None, points: int = 200
) -> tuple[Path, Path, Path]:
    """Plot the budget curves of ``run_dirs`` (grouped by arm); returns (png, pdf, csv) paths.

    Default output folder: ``RUN_DIR/figures`` for one run, else ``out/budget_curves``.
    """
    if not run_dirs:
        raise ValueError("give at least one run folder")
    if points < 2:
        raise ValueError(f"points must be >= 2, got {points}")
    groups: dict[str, list[Chain]] = defaultdict(list)
    for d in run_dirs:
        for c in read_chains(d):
            groups[c.label].append(c)
    folder = out_dir(
        out if out is not None else (Path(run_dirs[0]) / "figures" if len(run_dirs) == 1 else None),
        "budget_curves",
    )
    t_max = max(c.times[-1] for cs in groups.values() for c in cs)
    budgets = np.linspace(0.0, max(t_max, 1e-9), points)
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    rows = []
    colors = {"rpg": "tab:red", "vanilla": "tab:blue"}
    for label in sorted(groups):
        cs = groups[label]
        res = curve(cs, budgets)
        color = colors.get(label.split()[0])
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
        for i, b in enumerate(budgets):
            rows.append(
                {
                    "label": label,
                    "budget_s": f"{b:.6g}",
                    "mean_best": f"{res['mean_best'][i]:.6g}",
                    "se": f"{res['se'][i]:.6g}",
                    "n_chains": int(res["n_chains"][i]),
                    "n_active": int(res["n_active"][i]),
                }
            )
    ax.set_xlabel("cumulative execution time per chain (s)")
    ax.set_ylabel("best raw reward so far")
    ax.set_title("Budget curves (mean ± s.e. across chains)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    png, pdf = save_figure(fig, folder, "budget_curves")
    csv = write_csv(folder / "budget_curves.csv", rows, CSV_FIELDS)
    return png, pdf, csv


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; exit 2 with a one-line message on bad input."""
    parser = argparse.ArgumentParser(prog="python -m paper_figures.budget_curves")
    parser.add_argument("run_dirs", nargs="+", help="rpg_llm run folders")
    parser.add_argument("--out", default=None, help="output folder")
    parser.add_argument("--points", type=int, default=200, help="budget grid size")
    args = parser.parse_args(argv)
    try:
        png, pdf, csv = budget_curves(args.run_dirs, args.out, args.points)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {png}\nwrote {pdf}\nwrote {csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
