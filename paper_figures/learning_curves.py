"""Learning curves of LLM runs over run seeds: what a step of the loop achieved.

``python -m paper_figures.learning_curves RUN_DIR [RUN_DIR ...] [--out DIR]``

Reads each run folder's ``metrics.jsonl`` (the step lines; the SFT warm start's lines are left
out) and ``buffer.sqlite`` (through :func:`rpg_llm.loop.budget.read_chains`), and writes, per PPO
step,
the mean and standard error across runs (sample s.d., ddof 1, over sqrt(n)) of:

* ``valid_fraction``: generated answers that ran and were scored, over the batch;
* ``mean_reward``: the mean relative reward ``r - rho_hat * delta`` of the step's samples (the
  PPO reward; vanilla runs: the raw reward);
* ``rho_hat``: the reward-rate estimate after the step's refit (1/s);
* ``best_generated``: the best raw reward of a generated (not seeded) sample so far;
* ``cum_exec_s``: cumulative execution seconds of the generated samples (the budget axis of the
  paper's budget curves).

Outputs ``learning_curves.csv`` (one row per run and step, then the ``mean`` / ``se`` rows),
``learning_curves.md`` (the mean +- s.e. table) and ``learning_curves.png`` / ``.pdf``: four
panels against the step, the fourth the best generated raw reward against cumulative execution
time per run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from paper_figures._common import out_dir, plt, save_figure, write_csv
from rpg_core.cli import ArgumentParser, UsageError, run_cli

__all__ = ["COLUMNS", "read_steps", "summarise", "learning_curves", "main"]

PROG = "python -m paper_figures.learning_curves"
COLUMNS = ("valid_fraction", "mean_reward", "rho_hat", "best_generated", "cum_exec_s")


def read_steps(run_dir: str | Path) -> list[dict[str, float]]:
    """The step lines of one run's ``metrics.jsonl``: ``[{"step", *COLUMNS}]`` in step order
    (a replayed step counts once: the last line of a step wins).

    ``best_generated`` is NaN until a generated sample was scored; ``cum_exec_s`` sums the
    lines' ``exec_seconds`` (wall seconds the step's executions took).

    Raises:
        ValueError: no ``metrics.jsonl`` or no step line in it (names the folder).
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"{run_dir}: no metrics.jsonl (not a run folder?)")
    by_step: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        m = json.loads(line)
        if "sft_step" in m or int(m.get("step", 0)) < 1:
            continue
        by_step[int(m["step"])] = m
    if not by_step:
        raise ValueError(f"{run_dir}: metrics.jsonl has no PPO step line yet")
    rows, cum = [], 0.0
    for step in sorted(by_step):
        m = by_step[step]
        cum += float(m.get("exec_seconds", math.nan))
        best = m.get("best_generated")
        rows.append(
            {
                "step": step,
                "valid_fraction": float(m["valid_fraction"]),
                "mean_reward": float(m["mean_reward"]),
                "rho_hat": float(m["rho_hat"]),
                "best_generated": math.nan if best is None else float(best),
                "cum_exec_s": cum,
            }
        )
    return rows


def summarise(runs: Sequence[Sequence[dict[str, float]]]) -> list[dict[str, float]]:
    """Per step, mean and standard error across runs of every column (NaN-aware; ``n``: runs
    with that step; s.e. NaN with fewer than 2 values).

    Returns:
        ``[{"step", "n", "<col>_mean", "<col>_se", ...}]`` for every step any run reached.
    """
    steps = sorted({r["step"] for run in runs for r in run})
    out = []
    for step in steps:
        vals = [r for run in runs for r in run if r["step"] == step]
        row: dict[str, float] = {"step": step, "n": len(vals)}
        for col in COLUMNS:
            v = np.array([r[col] for r in vals], dtype=np.float64)
            v = v[np.isfinite(v)]
            row[f"{col}_mean"] = float(v.mean()) if v.size else math.nan
            row[f"{col}_se"] = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size >= 2 else math.nan
        out.append(row)
    return out


def _markdown(summary: Sequence[dict[str, float]], labels: Sequence[str]) -> str:
    def cell(row: dict, col: str, fmt: str) -> str:
        m, se = row[f"{col}_mean"], row[f"{col}_se"]
        if not math.isfinite(m):
            return "-"
        return f"{m:{fmt}} ± {se:{fmt}}" if math.isfinite(se) else f"{m:{fmt}}"

    head = (
        "| step | runs | valid fraction | mean relative reward | rho_hat (1/s) | "
        "best generated raw reward | cum. exec s |\n|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['step']} | {r['n']} | {cell(r, 'valid_fraction', '.2f')} | "
        f"{cell(r, 'mean_reward', '.4g')} | {cell(r, 'rho_hat', '.4g')} | "
        f"{cell(r, 'best_generated', '.4g')} | {cell(r, 'cum_exec_s', '.1f')} |\n"
        for r in summary
    )
    return (
        "# Learning curves (mean ± s.e. across runs)\n\nRuns: "
        + ", ".join(labels)
        + "\n\n"
        + head
        + body
    )


def learning_curves(run_dirs: Sequence[str | Path], out: str | Path) -> dict[str, Path]:
    """Read the runs, write the CSV, the markdown table and the figure into ``out``.

    Returns:
        ``{"csv", "md", "png", "pdf"}`` paths.

    Raises:
        ValueError: a folder that is not a run folder with at least one step (names it).
    """
    labels = [str(d) for d in run_dirs]
    runs = [read_steps(d) for d in run_dirs]
    summary = summarise(runs)
    folder = out_dir(out, "learning_curves")
    rows = [{"run": lab, **r} for lab, run in zip(labels, runs, strict=True) for r in run]
    for stat in ("mean", "se"):
        rows += [
            {"run": stat, "step": s["step"], **{c: s[f"{c}_{stat}"] for c in COLUMNS}}
            for s in summary
        ]
    csv_path = write_csv(folder / "learning_curves.csv", rows, ("run", "step", *COLUMNS))
    md_path = folder / "learning_curves.md"
    md_path.write_text(_markdown(summary, labels))

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    titles = {
        "valid_fraction": "valid generated answers (fraction)",
        "mean_reward": "mean relative reward",
        "rho_hat": "rho_hat (1/s)",
    }
    steps = np.array([s["step"] for s in summary])
    for ax, col in zip(axes.flat[:3], titles, strict=True):
        for run in runs:
            ax.plot([r["step"] for r in run], [r[col] for r in run], lw=0.8, alpha=0.4)
        m = np.array([s[f"{col}_mean"] for s in summary])
        se = np.nan_to_num(np.array([s[f"{col}_se"] for s in summary]))
        ax.plot(steps, m, "k-o", ms=3, label=f"mean of {len(runs)} runs")
        ax.fill_between(steps, m - se, m + se, color="k", alpha=0.15, label="± s.e.")
        ax.set_title(titles[col], fontsize=9)
        ax.set_xlabel("PPO step")
        ax.grid(alpha=0.3)
    axes.flat[0].set_ylim(-0.05, 1.05)
    axes.flat[0].legend(fontsize=7)
    ax = axes.flat[3]
    for lab, run in zip(labels, runs, strict=True):
        ax.step(
            [r["cum_exec_s"] for r in run],
            [r["best_generated"] for r in run],
            where="post",
            label=Path(lab).name,
        )
    ax.set_title("best generated raw reward vs cumulative execution time", fontsize=9)
    ax.set_xlabel("cumulative execution time of generated samples (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    png, pdf = save_figure(fig, folder, "learning_curves")
    return {"csv": csv_path, "md": md_path, "png": png, "pdf": pdf}


def _main(argv: Sequence[str] | None) -> int:
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders (python -m rpg_llm.run --out ...)")
    ap.add_argument("--out", default="out/learning_curves", help="output folder")
    args = ap.parse_args(argv)
    for d in args.runs:
        if not (Path(d) / "metrics.jsonl").is_file():
            raise UsageError(f"{d!r} is not a run folder (no metrics.jsonl)")
    paths = learning_curves(args.runs, args.out)
    print(Path(paths["md"]).read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``rpg_core.cli``: 2 on usage errors, 1 on other failures)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
