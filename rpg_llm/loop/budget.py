"""Budget curves: best raw score so far against cumulative execution time (paper, section 5).

A *chain* is one batch row of one run: the sequence of scripts generated in that row at steps
1, 2, ... (the seed solutions of step 0 are not part of any chain, nor are ``infra`` samples,
whose placeholder reward and time are the machine's, not the script's). Per chain, the cumulative
execution time after each sample and the best raw reward so far give a step function; at every
budget ``b`` of a common grid a chain's value is its best raw reward among the samples finished
within ``b`` (undefined before its first sample; after its last sample the value stays). Per arm
(the run's method and whether it was seeded) :func:`curve` gives the mean across chains and its
standard error at every budget (DESIGN.md section 7). Runs of a task whose value is a loss
(``rpg_llm.env.registry.is_loss_task``: lower is better) give minus the best loss that crossed
the task's target (``registry.loss_chains``). The plot lives in
``paper_figures.budget_curves``; this module only reads run folders and does the arithmetic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rpg_llm.env.registry import is_loss_task, loss_chains
from rpg_llm.loop.buffer import SampleBuffer
from rpg_llm.loop.rewards import INVALID_REWARD
from rpg_llm.loop.runfolder import RunFolder

if TYPE_CHECKING:
    from rpg_llm.config import LoopConfig

__all__ = [
    "Chain",
    "run_label",
    "read_chains",
    "group_chains",
    "curve",
    "budget_spent",
    "steps_done",
    "stop_reason",
    "budget_grid",
    "curve_rows",
    "write_budget_csv",
    "CSV_FIELDS",
]

CSV_FIELDS = ["label", "budget_s", "mean_best", "se", "n_chains", "n_active"]


class Chain:
    """One chain: ``times[k]`` cumulative execution seconds after sample ``k``, ``best[k]`` the best
    raw reward among samples ``0..k``. Both 1-D float arrays of equal length >= 1."""

    def __init__(self, label: str, times: np.ndarray, best: np.ndarray):
        self.label, self.times, self.best = label, np.asarray(times), np.asarray(best)

    def value_at(self, budgets: np.ndarray) -> np.ndarray:
        """Best raw reward finished within each budget (``[n]`` float64, NaN before the first
        sample)."""
        idx = np.searchsorted(self.times, budgets, side="right") - 1
        out = np.where(idx >= 0, self.best[np.clip(idx, 0, None)], np.nan)
        return out.astype(np.float64)


def run_label(config: dict) -> str:
    """``"<arm> (seeded|unseeded)"`` from a ``config.json`` (any layout): the arm is the method,
    with the fixed-lambda arm's lambda, a parent ranking other than the arm's own
    (``"rpg, parents by raw (seeded)"``) and a raw reward other than DESIGN.md's
    (``"rpg, r = percentile (seeded)"``), so that every arm of a table is its own curve. The
    label is derived from the reward settings whenever the config has them (a stored ``label``
    is used only by configs without a ``reward`` section)."""
    reward = config.get("reward")
    if not isinstance(reward, dict):
        if isinstance(config.get("label"), str):
            return config["label"]
        reward = {}
    method = config.get("method") or reward.get("method", "?")
    if method == "fixed-lambda" and reward.get("fixed_lambda") is not None:
        method = f"fixed-lambda {reward['fixed_lambda']:g}/s"
    if reward.get("parent_rank", "arm") != "arm":
        method = f"{method}, parents by {reward['parent_rank']}"
    if reward.get("raw_reward", "design") != "design":  # its values are on another scale
        method = f"{method}, r = {reward['raw_reward']}"
    seeded = "seeded" if config.get("seeded", config.get("seed_buffer", False)) else "unseeded"
    return f"{method} ({seeded})"


def read_chains(run_dir: str | Path) -> list[Chain]:
    """Chains of one run folder (one per batch row), from its ``config.json`` and buffer.

    For a task whose chains are a loss (``rpg_llm.env.registry.is_loss_task``) a chain's value is
    minus the best *crossing* loss so far (``registry.loss_chains``; NaN before the first
    crossing), so "higher is better" holds for every curve.

    Raises:
        ValueError: not a run folder, or no training sample in it.
    """
    folder = RunFolder(run_dir)
    if not folder.config_path.exists() or not folder.buffer_path.exists():
        raise ValueError(f"{folder.root} is not a run folder (needs config.json and buffer.sqlite)")
    config = folder.load_config()
    label = run_label(config)
    with SampleBuffer(folder.buffer_path) as buf:
        samples = buf.by_row(min_step=1)
    if not samples:
        raise ValueError(f"{folder.root} has no training samples yet")
    task = str(config.get("competition") or config.get("task") or "")
    if is_loss_task(task):
        # best crossing loss so far per chain (lower is better), negated: higher is better
        return [Chain(label, t, -best) for t, best in loss_chains(task, samples).values()]
    per_row: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for s in samples:
        if s.status == "infra":  # the machine failed: no score, no script time (DESIGN 7)
            continue
        per_row[s.row].append((float(s.exec_time), float(s.raw_reward)))
    if not per_row:
        raise ValueError(f"{folder.root} has only infra samples (no script outcome)")
    chains = []
    for row in sorted(per_row):
        t, r = np.array(per_row[row]).T
        chains.append(Chain(label, np.cumsum(t), np.maximum.accumulate(r)))
    return chains


def budget_spent(totals: Mapping[int, float], batch_size: int, budget_s: float) -> bool:
    """True when every chain (rows ``0 .. batch_size - 1``) has used at least ``budget_s``
    seconds of measured execution, ``totals`` being ``SampleBuffer.exec_seconds_by_row`` (a
    row absent from it has used 0 s): the execution-budget stopping rule of
    ``LoopConfig.exec_budget_s``.

    Raises:
        ValueError: ``batch_size < 1`` or ``budget_s`` not > 0 (both named).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if not budget_s > 0:
        raise ValueError(f"budget_s must be > 0 seconds, got {budget_s!r}")
    return all(totals.get(r, 0.0) >= budget_s for r in range(batch_size))


def steps_done(folder: RunFolder, engine: str) -> int:
    """The training steps a run folder holds (0 for none).

    ``engine == "ppo"``: its last ``metrics.jsonl`` step or the step of its last checkpoint,
    whichever is later (a kill between a step's checkpoint and its metrics line leaves that
    step trained; the last step of a run is always checkpointed before its line).
    ``engine == "trl"``: TRL's last checkpointed global step (TRL writes a step's metrics line
    in the reward call, before the update, and numbers resumed steps after the stored ones, so
    its metrics overcount); a folder without TRL's ``trl/`` folder (a run's kept record, its
    checkpoints left out) falls back to its metrics."""
    metrics = max((int(m.get("step", 0)) for m in folder.read_metrics()), default=0)
    if engine == "trl" and folder.trl_dir.is_dir():
        return folder.latest_trl_checkpoint()
    return max(metrics, folder.trained_step(engine) or 0)


def stop_reason(cfg: LoopConfig, done: int, totals: Mapping[int, float]) -> str | None:
    """Why a run with ``done`` training steps stops now, under ``cfg``: ``"budget"`` when
    ``cfg.exec_budget_s`` is set and every chain (rows ``0 .. cfg.batch_size - 1``) has used
    it over steps ``1 .. done`` (:func:`budget_spent`; ``totals`` as
    ``SampleBuffer.exec_seconds_by_row`` gives them); else ``"steps"`` when ``done`` reaches
    ``cfg.steps``; None while the run goes on.

    This is the one rule of a run's end: the PPO loop and the TRL engine ask it after every
    step, :func:`rpg_llm.launch.status` asks it of a folder (``--resume``, the table)."""
    budget = cfg.exec_budget_s
    if budget is not None and done >= 1 and budget_spent(totals, cfg.batch_size, float(budget)):
        return "budget"
    return "steps" if done >= cfg.steps else None


def curve(chains: Sequence[Chain], budgets: np.ndarray) -> dict[str, np.ndarray]:
    """Mean and standard error across chains at each budget (``budgets``: ``[n]`` seconds).

    Returns:
        ``[n]`` arrays: ``mean_best``, ``se`` (sample s.d. / sqrt(n); NaN for n < 2),
        ``n_chains`` (chains with a value at that budget), ``n_active`` (chains whose total
        time is >= the budget), ``n_invalid`` (chains in the mean whose best is still the
        invalid reward, ``rpg_llm.loop.rewards.INVALID_REWARD``, or lower).
    """
    values = np.stack([c.value_at(budgets) for c in chains])  # [chains, budgets]
    ok = ~np.isnan(values)
    n_invalid = (ok & (np.where(ok, values, 0.0) <= INVALID_REWARD)).sum(0)
    n = ok.sum(0)
    total = np.where(ok, values, 0.0).sum(0)
    mean = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    dev = np.where(ok, values - mean, 0.0)
    var = (dev**2).sum(0) / np.maximum(n - 1, 1)
    se = np.where(n >= 2, np.sqrt(var / np.maximum(n, 1)), np.nan)
    n_active = np.array([[c.times[-1] >= b for b in budgets] for c in chains]).sum(0)
    return {
        "mean_best": mean,
        "se": se,
        "n_chains": n,
        "n_active": n_active,
        "n_invalid": n_invalid,
    }


def budget_grid(groups: dict[str, list[Chain]], points: int) -> np.ndarray:
    """``points`` evenly spaced budgets from 0 to the longest chain's total time, seconds.

    Raises:
        ValueError: ``points < 2``.
    """
    if points < 2:
        raise ValueError(f"points must be >= 2, got {points}")
    t_max = max(c.times[-1] for cs in groups.values() for c in cs)
    return np.linspace(0.0, max(t_max, 1e-9), points)


def curve_rows(label: str, budgets: np.ndarray, res: dict[str, np.ndarray]) -> list[dict]:
    """The CSV rows (:data:`CSV_FIELDS`) of one arm's curve."""
    return [
        {
            "label": label,
            "budget_s": f"{b:.6g}",
            "mean_best": f"{res['mean_best'][i]:.6g}",
            "se": f"{res['se'][i]:.6g}",
            "n_chains": int(res["n_chains"][i]),
            "n_active": int(res["n_active"][i]),
        }
        for i, b in enumerate(budgets)
    ]


def group_chains(run_dirs: Sequence[str | Path]) -> dict[str, list[Chain]]:
    """Chains of every run, grouped by arm label.

    Raises:
        ValueError: no run folder given, or one of them is not a run folder / has no samples.
    """
    if not run_dirs:
        raise ValueError("give at least one run folder")
    groups: dict[str, list[Chain]] = defaultdict(list)
    for d in run_dirs:
        for c in read_chains(d):
            groups[c.label].append(c)
    return dict(groups)


def write_budget_csv(run_dirs: Sequence[str | Path], path: str | Path, points: int = 200) -> Path:
    """Write the curves of ``run_dirs`` (grouped by arm) as CSV (:data:`CSV_FIELDS`) to ``path``.

    Raises:
        ValueError: as :func:`group_chains` and :func:`budget_grid`.
    """
    import csv

    groups = group_chains(run_dirs)
    budgets = budget_grid(groups, points)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for label in sorted(groups):
            w.writerows(curve_rows(label, budgets, curve(groups[label], budgets)))
    return path
