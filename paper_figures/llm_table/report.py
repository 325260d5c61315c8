"""The table's files, from the finished runs: ``llm_table.{csv,md,png,pdf}``, the per-run, per-step,
edits and probe CSVs, and the figures per task (:func:`write_table`).

* ``llm_table.csv``, ``llm_table.md``: each arm's mean +- s.e. and the % improvement of RPG over
  each other arm; a task with rpg and some other arm finished has a row, ``n/a`` in the arms it
  lacks, so the ablation may cover some tasks only; for each task with all four ablation arms,
  the 2 x 2 table of parent ranking x training reward and its main effects.
* ``llm_table_runs.csv``: the per-run values; ``figures/<task>/budget_curves.{png,pdf,csv}``
  (:func:`paper_figures.budget_curves.budget_curves`).
* ``llm_table_steps.csv``, ``figures/<task>/steps.{png,pdf}``: per task and arm the mean time
  and mean raw reward of the valid generated scripts at every step.
* ``llm_table_edits.csv``: what the answers did to their parents (declared-switch changes such
  as ``MODEL``, dead edits, better children, time ratios).
* ``llm_table_probe.{csv,png,pdf}``: trained minus SFT-only policy per task and arm, from the
  probes (:mod:`rpg_llm.probe`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from paper_figures import _slices as slices
from paper_figures._common import plt, save_figure
from paper_figures.budget_curves import budget_curves
from paper_figures.llm_table.analysis import (
    EDIT_FIELDS,
    PROBE_FIELDS,
    STEP_FIELDS,
    Row,
    edit_rows,
    probe_rows,
    raw_reward_label,
    run_step_seconds,
    step_means,
)
from paper_figures.llm_table.markdown import markdown_document, seeding_text
from paper_figures.llm_table.plan import RunSpec, run_state
from paper_figures.llm_table.settings import TableSettings
from paper_figures.llm_table.stats import RUN_FIELDS, RunRow, TaskRow, fmt, table_fields, task_row
from rpg_llm.config import LoopConfig
from rpg_llm.loop.budget import Chain, read_chains

__all__ = ["has_row", "plot_table", "plot_steps", "plot_probe", "write_table"]


def has_row(arms_done: set[str]) -> bool:
    """Whether a task whose finished runs cover ``arms_done`` has a table row: rpg and at least
    one other arm (the others are ``n/a``)."""
    return "rpg" in arms_done and len(arms_done) >= 2


def _write_csv(path: Path, rows: Sequence[Mapping[str, object]], fields: Sequence[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fields), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def write_table(
    s: TableSettings,
    specs: Sequence[RunSpec],
    cfgs: Mapping[RunSpec, LoopConfig],
    out: Path,
    points: int,
) -> tuple[list[TaskRow], list[Path]]:
    """The table, its CSVs and figures in ``out`` from the finished runs of ``specs``
    (``cfgs``: each run's config; ``points``: the budget grid of the figures).

    Returns:
        The table's rows (none when no task has a finished rpg run and one of another arm:
        then only the per-task figures are written) and the files written.

    Raises:
        UsageError: a run folder with other settings (:func:`run_state`), or a probe record
            that cannot be read.
    """
    rows: list[TaskRow] = []
    written: list[Path] = []
    run_rows: list[RunRow] = []
    step_rows: list[Row] = []
    edits: list[Row] = []
    n_finished = 0
    for task in s.tasks:
        finished = [p for p in specs if p.task == task and run_state(p, cfgs[p]).finished]
        n_finished += len(finished)
        runs: dict[str, dict[int, list[Chain]]] = {m: {} for m in s.arms}
        for p in finished:
            runs[p.method][p.seed] = read_chains(p.run_dir)
        if not has_row({m for m in s.arms if runs[m]}):
            print(f"{task}: no table row (rpg or every other arm has no finished run)")
            continue
        if missing := [m for m in s.arms if not runs[m]]:
            print(f"{task}: {', '.join(missing)} n/a (no finished run)")
        label = raw_reward_label(task, cfgs[finished[0]])
        row = task_row(task, runs, label, cfgs[finished[0]].exec_budget_s, s.arms)
        for r in row.runs:
            spec = next(p for p in finished if (p.method, p.seed) == (r["method"], r["seed"]))
            r["run_dir"], r["engine"] = str(spec.run_dir), cfgs[spec].engine
            r["step_seconds"] = fmt(run_step_seconds(spec.run_dir))
        rows.append(row)
        run_rows += row.runs
        dirs = [p.run_dir for p in finished]
        written += list(budget_curves(dirs, out / "figures" / task, points))
        per_arm = {m: d for m in s.arms if (d := [p.run_dir for p in finished if p.method == m])}
        edits += edit_rows(task, per_arm)
        steps = step_means(task, per_arm)
        if steps:
            step_rows += steps
            written += list(plot_steps(task, steps, out / "figures" / task))
    if not rows:
        return rows, written
    written += list(plot_table(rows, out))
    fields = table_fields(s.arms)
    written.append(_write_csv(out / "llm_table.csv", [r.as_dict() for r in rows], fields))
    written.append(_write_csv(out / "llm_table_runs.csv", run_rows, RUN_FIELDS))
    if step_rows:
        written.append(_write_csv(out / "llm_table_steps.csv", step_rows, STEP_FIELDS))
    written.append(_write_csv(out / "llm_table_edits.csv", edits, EDIT_FIELDS))
    probed = probe_rows([p for p in specs if p.task in {r.task for r in rows}])
    if probed:
        written.append(_write_csv(out / "llm_table_probe.csv", probed, PROBE_FIELDS))
        written += list(plot_probe(probed, out))
    seeding = seeding_text(s.tasks, {cfgs[p].seed_buffer for p in specs})
    names = [f"{r.task}/{Path(str(x['run_dir'])).name}" for r in rows for x in r.runs]
    ledger = slices.slices_text(
        slices.read_slices(out / slices.SLICES_CSV),
        names,
        unfinished=len(specs) - n_finished,
        planned=len(specs),
    )
    md = out / "llm_table.md"
    md.write_text(markdown_document(s, cfgs[specs[0]], rows, edits, seeding, ledger))
    written.append(md)
    return rows, written


def plot_table(rows: Sequence[TaskRow], out: Path) -> tuple[Path, Path]:
    """Bar chart of the table (per task: each arm's mean +- s.e. of the run values at the
    table's budget B, :func:`paper_figures.llm_table.stats.table_budget`); writes
    ``<out>/llm_table.png`` and ``.pdf``, returns both paths."""
    arms = list(rows[0].arms)
    colors = {"rpg": "tab:red", "vanilla": "tab:blue", "fixed-lambda": "tab:green"}
    colors |= {"rpg-raw-parents": "tab:orange", "vanilla-rate-parents": "tab:purple"}
    fig, ax = plt.subplots(figsize=(max(4.0, (0.6 + 0.4 * len(arms)) * len(rows) + 2.0), 3.6))
    x = np.arange(len(rows))
    width = 0.8 / len(arms)
    for j, m in enumerate(arms):
        mean = [r.arms[m][0] for r in rows]
        se = [r.arms[m][1] if math.isfinite(r.arms[m][1]) else 0.0 for r in rows]
        shift = (j - (len(arms) - 1) / 2) * width
        ax.bar(x + shift, mean, width, yerr=se, capsize=3, color=colors.get(m), label=m)
        for i, r in enumerate(rows):
            if not math.isfinite(r.arms[m][0]):  # no run of this arm on this task
                ax.text(
                    x[i] + shift, 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize=7
                )
    ax.set_xticks(x, [f"{r.task}\n(B = {r.budget_s:.3g} s)" for r in rows], fontsize=8)
    ax.set_ylabel("mean best raw reward at B")
    ax.set_title("Arms at the table's budget B (mean ± s.e. over seeds)", fontsize=9)
    ax.axhline(0.0, color="k", lw=0.5)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, out, "llm_table")


def plot_steps(task: str, rows: Sequence[Row], folder: Path) -> tuple[Path, Path]:
    """Mean time (seconds) and mean raw reward of the valid generated scripts per step, one line
    per arm (:func:`paper_figures.llm_table.analysis.step_means` rows); writes
    ``<folder>/steps.png`` and ``.pdf``."""
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(8.0, 3.2))
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        steps = [r["step"] for r in mine]
        times = [float(r["valid_mean_time_s"]) for r in mine]
        rewards = [float(r["valid_mean_raw_reward"]) for r in mine]
        ax_t.plot(steps, times, marker="o", label=arm)
        ax_r.plot(steps, rewards, marker="o", label=arm)
    ax_t.set_ylabel("mean time of valid scripts (s)")
    ax_r.set_ylabel("mean raw reward of valid scripts")
    for ax in (ax_t, ax_r):
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    ax_r.legend(fontsize=7)
    fig.suptitle(f"{task}: what each arm generates, per step (mean over runs)", fontsize=9)
    folder.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, folder, "steps")


def plot_probe(rows: Sequence[Row], out: Path) -> tuple[Path, Path]:
    """Per task and arm, trained minus SFT-only policy on the same fixed parents: mean time of
    the valid answers (s), their mean raw reward and the valid fraction, and the share of
    answers whose outcome changed (:func:`rpg_llm.probe.changed_outcomes`), each the mean over
    the arm's probed runs (:func:`paper_figures.llm_table.analysis.probe_rows`); writes
    ``<out>/llm_table_probe.{png,pdf}``."""
    keys = sorted({(str(r["task"]), str(r["arm"])) for r in rows})
    what = (("mean_time_s", "Δ mean time (s)"), ("mean_raw_reward", "Δ mean raw reward"))
    what += (("valid_fraction", "Δ valid fraction"),)
    fig, axes = plt.subplots(1, 4, figsize=(14.0, 0.35 * len(keys) + 2.0))
    changed = []
    for task, arm in keys:
        shares = [
            int(a) / int(n)
            for r in rows
            if (r["task"], r["arm"]) == (task, arm) and r.get("changed_outcomes")
            for a, n in [str(r["changed_outcomes"]).split("/")]
        ]
        changed.append(float(np.mean(shares)) if shares else 0.0)
    axes[3].barh(range(len(keys)), changed, color="tab:gray")
    axes[3].set_title("answers with another outcome", fontsize=9)
    axes[3].set_xlim(0.0, 1.0)
    axes[3].grid(axis="x", alpha=0.3)
    for ax, (k, title) in zip(axes[:3], what, strict=True):
        deltas = []
        for task, arm in keys:
            by_seed: dict[object, dict[str, float]] = {}
            for r in rows:
                if (r["task"], r["arm"]) == (task, arm):
                    by_seed.setdefault(r["seed"], {})[str(r["policy"])] = float(r[k])
            d = [v["trained"] - v["sft"] for v in by_seed.values() if len(v) == 2]
            d = [x for x in d if math.isfinite(x)]
            deltas.append(float(np.mean(d)) if d else 0.0)
        ax.barh(range(len(keys)), deltas, color="tab:gray")
        ax.axvline(0.0, color="k", lw=0.5)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(keys)), [f"{t} {a}" for t, a in keys], fontsize=7)
    for ax in axes[1:]:
        ax.set_yticks([])
    fig.suptitle("Did the policy move? trained minus SFT-only, same fixed parents", fontsize=9)
    return save_figure(fig, out, "llm_table_probe")
