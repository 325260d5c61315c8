"""The table's numbers: budgets, run values, cells, % improvements, averages, ablation effects.

Definitions (the paper, section 5, Table "RPG vs. vanilla RL on 22 MLE-Bench Lite tasks"):

* score: the *raw reward* of DESIGN.md section 7 — the score of a higher-is-better competition,
  the leaderboard percentile (in [0, 1], higher is better) of a lower-is-better one, -10 for an
  invalid sample. Every column is therefore higher-is-better. With ``--raw-reward percentile``
  it is the leaderboard percentile for every task.
* chain, best score so far, value of a chain at a budget: :mod:`rpg_llm.loop.budget` (one chain
  per batch row, cumulative *measured* execution seconds, step-0 seed samples excluded).
* the budget ``B`` the table is read at (:func:`table_budget`): the runs' **execution budget**
  ``--exec-budget`` (default 30 CPU-seconds per chain with ``--time cpu``; 6 with ``--quick``).
  Every run stops before the first step at which each of its chains has used ``B`` seconds of
  measured execution (``--steps`` is a cap), so both arms get the same execution budget, as the
  paper's budget curves compare them (RPG's cheaper scripts then buy it more steps). A chain
  with no sample finished within ``B`` has no value and is left out of its run's mean
  (``llm_table.md`` counts them). With ``--exec-budget none`` both arms take ``--steps`` steps
  and ``B`` is the **common final budget** ``max(min T_run, max t_first)``
  (:func:`common_final_budget`): the smallest final budget ``T_run`` (the largest total
  execution time of a run's chains) over the task's finished runs, raised when needed to the
  largest time ``t_first`` any chain took for its first sample; chains that ended before ``B``
  keep their last value (as on the budget curves). When one arm's scripts are much cheaper this
  reads it long after its end (after equal steps, RPG's chains had used 2-4 s against vanilla's
  8-63 s in a measured table), hence the execution budget.
* a run's value (:func:`run_value`): the mean across its chains of the best score within ``B``
  (``rpg_llm.loop.budget.curve(chains, [B])``).
* table cell (:func:`mean_se`): mean +- standard error (sample s.d. with ddof 1, over sqrt(n)) of
  the run values over the run seeds of one arm.
* % improvement (:func:`pct_improvement`): ``100 (RPG - vanilla) / |vanilla|`` on the raw reward
  (higher is better for every task, so a positive number means RPG is better; undefined when
  vanilla is 0). On a native lower-is-better score the paper's convention is
  ``100 (vanilla - RPG) / |vanilla|`` (``lower_is_better=True``; tested on the paper's rows).
* average improvement (:func:`trimmed_average`): the mean of the per-task % improvements after
  dropping the highest and the lowest (as the paper does) when there are >= 3 tasks; the plain
  mean otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from paper_figures.llm_table.settings import ABLATION, METHODS
from rpg_llm.loop.budget import Chain, curve

__all__ = [
    "Cell",
    "Value",
    "RunRow",
    "TABLE_FIELDS",
    "RUN_FIELDS",
    "fmt",
    "mean_se",
    "pct_improvement",
    "trimmed_average",
    "run_final_budget",
    "common_final_budget",
    "table_budget",
    "run_value",
    "TaskRow",
    "table_fields",
    "ablation_effects",
    "task_row",
]

Cell = tuple[float, float, int]
"""One arm's cell of a row: (mean, standard error, n) of its run values (:func:`mean_se`)."""
Value = str | int | float
"""A value of a CSV row (numbers written as text where they may be NaN)."""
RunRow = dict[str, Value]
"""One run's row of ``llm_table_runs.csv`` (fields :data:`RUN_FIELDS`)."""

TABLE_FIELDS = [
    "task",
    "raw_reward",
    "budget_s",
    "rpg_n",
    "rpg_mean",
    "rpg_se",
    "vanilla_n",
    "vanilla_mean",
    "vanilla_se",
    "pct_improvement",
    "engine",
]
RUN_FIELDS = [
    "task",
    "method",
    "seed",
    "engine",
    "run_dir",
    "final_budget_s",
    "value",
    "n_chains",
    "n_ended_before_b",
    "step_seconds",
]


def fmt(x: float) -> str:
    """A number for the CSVs: ``"nan"`` when not finite, else 6 significant digits."""
    return "nan" if not math.isfinite(x) else f"{x:.6g}"


def mean_se(values: Sequence[float]) -> Cell:
    """Mean, standard error (sample s.d., ddof 1, / sqrt(n)) and n of the finite ``values``.

    NaN values are left out; mean NaN when none is left, s.e. NaN when fewer than 2.
    """
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    n = int(v.size)
    if n == 0:
        return math.nan, math.nan, 0
    se = float(v.std(ddof=1) / math.sqrt(n)) if n >= 2 else math.nan
    return float(v.mean()), se, n


def pct_improvement(rpg: float, vanilla: float, lower_is_better: bool = False) -> float:
    """Relative improvement of RPG over vanilla, percent (the paper's "% improv." column).

    ``100 (rpg - vanilla) / |vanilla|`` for a higher-is-better number (the raw reward),
    ``100 (vanilla - rpg) / |vanilla|`` for a lower-is-better score; positive: RPG is better.
    NaN when ``vanilla`` is 0 or either value is not finite.
    """
    if not (math.isfinite(rpg) and math.isfinite(vanilla)) or vanilla == 0:
        return math.nan
    diff = (vanilla - rpg) if lower_is_better else (rpg - vanilla)
    return 100.0 * diff / abs(vanilla)


def trimmed_average(pcts: Sequence[float]) -> tuple[float, list[int]]:
    """Mean of the finite ``pcts`` after dropping the highest and the lowest (paper, Table 1:
    "after dropping the highest and lowest numbers") when >= 3 are finite; else the plain mean.

    Returns:
        (average, indices into ``pcts`` of the dropped values); NaN when none is finite.
    """
    idx = [i for i, p in enumerate(pcts) if math.isfinite(p)]
    if not idx:
        return math.nan, []
    dropped: list[int] = []
    if len(idx) >= 3:
        hi = max(idx, key=lambda i: pcts[i])
        lo = min((i for i in idx if i != hi), key=lambda i: pcts[i])
        dropped = sorted({hi, lo})
    kept = [pcts[i] for i in idx if i not in dropped]
    return float(np.mean(kept)), dropped


def run_final_budget(chains: Sequence[Chain]) -> float:
    """A run's final budget ``T_run``, seconds: the largest total execution time of its chains
    (``rpg_llm.loop.budget.Chain``), where its budget curve ends."""
    return float(max(c.times[-1] for c in chains))


def common_final_budget(runs: Sequence[Sequence[Chain]]) -> float:
    """The common final budget of a task, seconds: ``min`` over runs of :func:`run_final_budget`,
    raised to the largest time any chain took for its first sample when that is larger (so that
    every chain has a value at the budget; a run that ended earlier is then read at its end, as
    the budget curves do).

    Raises:
        ValueError: no run.
    """
    if not runs:
        raise ValueError("no finished run to take a common budget from")
    shortest = min(run_final_budget(cs) for cs in runs)
    first = max(float(c.times[0]) for cs in runs for c in cs)
    return max(shortest, first)


def table_budget(runs: Sequence[Sequence[Chain]], exec_budget_s: float | None) -> float:
    """The budget ``B`` the table is read at, seconds: the runs' execution budget when they had
    one (every chain then ran until it had used it), else :func:`common_final_budget`.

    Raises:
        ValueError: no run, or ``exec_budget_s`` not > 0.
    """
    if not runs:
        raise ValueError("no finished run to take a budget from")
    if exec_budget_s is None:
        return common_final_budget(runs)
    if not exec_budget_s > 0:
        raise ValueError(f"exec_budget_s must be > 0 seconds, got {exec_budget_s!r}")
    return float(exec_budget_s)


def run_value(chains: Sequence[Chain], budget_s: float) -> tuple[float, int]:
    """Mean best raw reward across a run's chains within ``budget_s`` seconds, and how many chains
    have a value there (``rpg_llm.loop.budget.curve``; NaN when none has)."""
    res = curve(chains, np.array([float(budget_s)]))
    return float(res["mean_best"][0]), int(res["n_chains"][0])


@dataclass(frozen=True)
class TaskRow:
    """One row of the table (fields as :data:`TABLE_FIELDS`) and its per-run values.

    Attributes:
        task: the task's id; raw_reward: what its raw reward is (the row's label).
        budget_s: the budget ``B`` the row is read at, seconds (:func:`table_budget`).
        arms: arm -> its cell (mean, s.e., n), in column order.
        runs: the per-run rows (:data:`RUN_FIELDS`; ``run_dir``, ``engine`` and
            ``step_seconds`` are filled in by the writer).
    """

    task: str
    raw_reward: str
    budget_s: float
    arms: dict[str, Cell]
    runs: list[RunRow]

    @property
    def pcts(self) -> dict[str, float]:
        """% improvement of RPG over each other arm."""
        rpg = self.arms["rpg"][0]
        return {m: pct_improvement(rpg, v[0]) for m, v in self.arms.items() if m != "rpg"}

    @property
    def pct(self) -> float:
        """% improvement of RPG over vanilla (the paper's column; NaN without vanilla)."""
        return self.pcts.get("vanilla", math.nan)

    def has_runs(self, arm: str) -> bool:
        """Whether ``arm`` has a finished run in this row (else its cell is ``n/a``; a cell is
        also ``n/a`` when its runs have no chain with a value at B)."""
        return any(r["method"] == arm for r in self.runs)

    @property
    def engine(self) -> str:
        """The training engine(s) of the row's runs (their ``engine`` entries), comma-joined."""
        return ",".join(sorted({str(r["engine"]) for r in self.runs if r.get("engine")}))

    def as_dict(self) -> dict[str, object]:
        """The row of ``llm_table.csv`` (:func:`table_fields`)."""
        d: dict[str, object] = {
            "task": self.task,
            "raw_reward": self.raw_reward,
            "budget_s": fmt(self.budget_s),
        }
        for m, (mean, se, n) in self.arms.items():
            d |= {f"{m}_n": n, f"{m}_mean": fmt(mean), f"{m}_se": fmt(se)}
        d["pct_improvement"] = fmt(self.pct)
        for m, p in self.pcts.items():
            if m != "vanilla":
                d[f"pct_over_{m}"] = fmt(p)
        d["engine"] = self.engine
        return d


def table_fields(arms: Sequence[str]) -> list[str]:
    """The columns of ``llm_table.csv`` for ``arms`` (:data:`TABLE_FIELDS` for the default)."""
    cols = ["task", "raw_reward", "budget_s"]
    for m in arms:
        cols += [f"{m}_n", f"{m}_mean", f"{m}_se"]
    cols.append("pct_improvement")
    return cols + [f"pct_over_{m}" for m in arms if m not in ("rpg", "vanilla")] + ["engine"]


def ablation_effects(arms: Mapping[str, Cell]) -> dict[str, float] | None:
    """Main effects of the 2 x 2 ablation (:data:`ABLATION`) from the four arms' means.

    ``parents``: mean over the training reward of (rate-ranked - raw-ranked parents);
    ``learning``: mean over the parent ranking of (relative - raw training reward);
    ``interaction``: (rpg - rpg-raw-parents) - (vanilla-rate-parents - vanilla). None when an
    arm of the four is missing or not finite.
    """
    mean = {key: arms[a][0] if a in arms else math.nan for key, a in ABLATION.items()}
    if not all(math.isfinite(v) for v in mean.values()):
        return None
    rr, wr = mean["rate", "relative"], mean["raw", "relative"]
    rw, ww = mean["rate", "raw"], mean["raw", "raw"]
    return {
        "parents": ((rr - wr) + (rw - ww)) / 2,
        "learning": ((rr - rw) + (wr - ww)) / 2,
        "interaction": (rr - wr) - (rw - ww),
    }


def task_row(
    task: str,
    runs: Mapping[str, Mapping[int, Sequence[Chain]]],
    raw_reward: str = "",
    exec_budget_s: float | None = None,
    arms: Sequence[str] = METHODS,
) -> TaskRow:
    """The table row of one task from its finished runs' chains.

    Args:
        task: the task's id (the row's label).
        runs: arm (``rpg``, ``vanilla``, ...) -> seed -> that run's chains
            (``rpg_llm.loop.budget``).
        raw_reward: what the raw reward is for this task (for the table's label).
        exec_budget_s: the runs' execution budget per chain, seconds (:func:`table_budget`); a
            chain with no sample finished within it has no value and is left out of its run's
            mean (the per-run ``n_chains`` says how many had one).
        arms: the arms of the row, in column order (``rpg`` among them). An arm without a
            finished run (say an ablation arm run on some tasks only) gets the cell
            ``(nan, nan, 0)``, shown ``n/a``, no % improvement and no per-run rows
            (:meth:`TaskRow.has_runs`); B is taken over the arms that have runs.

    Raises:
        ValueError: no finished rpg run, no other arm with a finished run, or
            ``exec_budget_s`` not > 0.
    """
    if not runs.get("rpg"):
        raise ValueError(f"task {task}: no finished rpg run")
    if not any(runs.get(m) for m in arms if m != "rpg"):
        raise ValueError(f"task {task}: no other arm of {', '.join(arms)} has a finished run")
    present = [m for m in arms if runs.get(m)]
    budget = table_budget([cs for m in present for cs in runs[m].values()], exec_budget_s)
    cells: dict[str, Cell] = {}
    rows: list[RunRow] = []
    for m in arms:
        vals = []
        by_seed = runs.get(m, {})
        for seed in sorted(by_seed):
            v, n = run_value(by_seed[seed], budget)
            vals.append(v)
            rows.append(
                {
                    "task": task,
                    "method": m,
                    "seed": seed,
                    "final_budget_s": fmt(run_final_budget(by_seed[seed])),
                    "value": fmt(v),
                    "n_chains": n,
                    # chains whose run ended (step cap) before they had used B
                    "n_ended_before_b": sum(float(c.times[-1]) < budget for c in by_seed[seed]),
                }
            )
        cells[m] = mean_se(vals)
    return TaskRow(task, raw_reward, budget, cells, rows)
