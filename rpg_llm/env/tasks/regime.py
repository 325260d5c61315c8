"""The prior regime of an offline competition: how CPU time and score go together before any run.

Pricing time can only pay where a cheaper script of equal or better quality exists. Before a
training run, each task's regime is measured on a fixed set of scripts: its seed baselines and
every leaderboard entry of its own solution scripts (the ``prior`` constant prediction excluded:
it is the metric's floor, not a setting of the task's knobs), each run once through the training
executor (:func:`rpg_llm.env.tasks.baselines.measure_scripts`: the sandbox, the timeout and the
grader of a run), so the CPU seconds are those a run is charged, interpreter start included.

Two numbers summarise it (:class:`RegimePrior`):

* the CPU span: the slowest valid script's CPU seconds over the fastest's;
* the Spearman rank correlation between CPU seconds and the score oriented so that higher is
  better, over every script, a script that did not score (timeout, error) ranked below every
  score, as a training run ranks it. ``spearman_valid`` is the same over the scripts that scored.

Regimes, by the sign of that correlation: positive, slower scripts are better (time buys
quality); about zero, a plateau; negative, overkill or timeout-binding (the slowest settings
score worse or do not finish). Source: issue 47; the paper's spooky-author example (section 6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from rpg_llm.env.tasks.ladder import entry_name, set_constants
from rpg_llm.env.tasks.offline import SPECS, baseline_solutions
from rpg_llm.env.tasks.specs import solutions_dir

__all__ = [
    "PRIOR_TIMEOUT_S",
    "FLOOR_SOLUTION",
    "RegimePrior",
    "prior_scripts",
    "regime_prior",
    "spearman",
]

PRIOR_TIMEOUT_S = 60.0
"""Time limit of one prior run, seconds: the CPU default's ``reward.timeout_s``
(:mod:`rpg_llm.presets`), so a script that would time out in a run times out here."""
FLOOR_SOLUTION = "prior"
"""The solution script that predicts a constant (the metric's floor), left out of the prior."""


@dataclass(frozen=True)
class RegimePrior:
    """The prior regime of one task (module docstring).

    Attributes:
        task: competition id.
        scripts: scripts measured.
        valid: scripts that scored.
        timeouts: scripts that ran past the time limit.
        cpu_min_s: CPU seconds of the fastest valid script.
        cpu_max_s: CPU seconds of the slowest valid script.
        span: ``cpu_max_s / cpu_min_s``.
        spearman: rank correlation of CPU seconds and oriented score over every script, a
            script that did not score ranked worst; in ``[-1, 1]``.
        spearman_valid: the same over the valid scripts only (NaN with fewer than 3).
    """

    task: str
    scripts: int
    valid: int
    timeouts: int
    cpu_min_s: float
    cpu_max_s: float
    span: float
    spearman: float
    spearman_valid: float

    def to_json(self) -> dict[str, object]:
        """The fields as a JSON-ready dict (floats rounded to 4 decimals)."""
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RegimePrior:
        """The inverse of :meth:`to_json`.

        Raises:
            ValueError: a field is missing or unknown.
        """
        names = set(cls.__dataclass_fields__)
        if set(data) != names:
            raise ValueError(f"a regime prior has the fields {sorted(names)}, got {sorted(data)}")
        return cls(**data)  # type: ignore[arg-type]


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks (ties share
    their mean rank; Spearman 1904).

    Args:
        a, b: finite values, the same length ``n >= 2``.

    Returns:
        The correlation in ``[-1, 1]``; NaN when either side is constant.

    Raises:
        ValueError: lengths differ, fewer than 2 values, or a value is not finite.
    """
    x, y = np.asarray(a, float), np.asarray(b, float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError(f"need two 1-d sequences of one length >= 2, got {x.shape}, {y.shape}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("spearman needs finite values")
    rx, ry = rankdata(x) - (x.size + 1) / 2, rankdata(y) - (y.size + 1) / 2
    norm = math.sqrt(float(np.sum(rx**2) * np.sum(ry**2)))
    return float(np.sum(rx * ry)) / norm if norm > 0 else math.nan


def prior_scripts(comp_id: str) -> list[tuple[str, str]]:
    """The fixed scripts of ``comp_id``'s prior: its seed baselines, then every leaderboard entry
    of its solution scripts but :data:`FLOOR_SOLUTION`, each code text once (first name kept).

    Returns:
        ``(name, code)`` pairs; names as on the leaderboard (``family(MODEL='rf',...)``).

    Raises:
        ValueError: ``comp_id`` is not an offline competition.
    """
    if comp_id not in SPECS:
        raise ValueError(f"unknown offline competition {comp_id!r}; known: {', '.join(SPECS)}")
    scripts = [(n, c) for n, c in baseline_solutions(comp_id) if n != FLOOR_SOLUTION]
    folder = solutions_dir(comp_id)
    for solution, constants in SPECS[comp_id].ladder:
        if solution != FLOOR_SOLUTION:
            code = set_constants((folder / f"{solution}.py").read_text(), constants)
            scripts.append((entry_name(solution, constants), code))
    seen: set[str] = set()
    unique = []
    for name, code in scripts:
        if code not in seen:
            seen.add(code)
            unique.append((name, code))
    return unique


def regime_prior(rows: pd.DataFrame, lower_is_better: bool) -> RegimePrior:
    """Summarise measured scripts of one task (rows of
    :func:`rpg_llm.env.tasks.baselines.measure_scripts`).

    Args:
        rows: columns ``task, status, cpu_s, score`` at least; one task; ``status == "ok"``
            rows have a finite score; every row has a finite ``cpu_s``.
        lower_is_better: the metric's direction.

    Returns:
        :class:`RegimePrior`.

    Raises:
        ValueError: rows of several tasks, fewer than 3 rows, fewer than 2 valid, a row whose
            run failed for the machine's sake (status ``infra``: not the script's doing, so it
            cannot be ranked; measure again), or a missing CPU time (the docker backend does
            not measure it; use bwrap or subprocess).
    """
    tasks = sorted(set(rows["task"]))
    if len(tasks) != 1:
        raise ValueError(f"rows must be of one task, got {tasks}")
    infra = int(np.sum(rows["status"].to_numpy() == "infra"))
    if infra:
        raise ValueError(f"{tasks[0]}: {infra} run(s) failed for the machine's sake (infra)")
    cpu = rows["cpu_s"].to_numpy(float)
    if not np.all(np.isfinite(cpu)):
        raise ValueError(f"{tasks[0]}: every row needs its CPU seconds (docker measures none)")
    valid = (rows["status"] == "ok").to_numpy()
    if len(rows) < 3 or valid.sum() < 2:
        raise ValueError(
            f"{tasks[0]}: need >= 3 scripts and >= 2 valid, got {len(rows)} and {valid.sum()}"
        )
    oriented = rows["score"].to_numpy(float) * (-1.0 if lower_is_better else 1.0)
    floor = np.min(oriented[valid]) - 1.0
    ranked = np.where(valid, oriented, floor)
    all_rho = spearman(cpu, ranked)
    valid_rho = math.nan
    if valid.sum() >= 3:
        valid_rho = spearman(cpu[valid], oriented[valid])
    lo, hi = float(np.min(cpu[valid])), float(np.max(cpu[valid]))
    return RegimePrior(
        task=tasks[0],
        scripts=len(rows),
        valid=int(valid.sum()),
        timeouts=int(np.sum(rows["status"].to_numpy() == "timeout")),
        cpu_min_s=lo,
        cpu_max_s=hi,
        span=hi / lo,
        spearman=all_rho,
        spearman_valid=valid_rho,
    )
