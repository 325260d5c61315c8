"""Rewards of the two training arms: RPG's relative reward and the vanilla raw reward.

Reference facts (DESIGN.md section 7; paper section 4):

* raw reward ``r``: the score (higher-is-better tasks) or the leaderboard percentile
  (lower-is-better tasks); an invalid sample (no code block, crash, timeout, bad submission) gets
  ``-10``;
* time ``delta``: the script's wall time in seconds, floored at 0.1 s; in the RPG arm an invalid
  sample is charged the full timeout;
* improvement bonus: ``+0.5`` for a valid sample whose raw reward beats the best raw reward of all
  earlier steps (never fed to ``rho_hat``);
* RPG: ``r_tilde = r + bonus - c * rho_hat * delta`` with ``c = 1``, ``rho_hat`` the estimate
  refitted on the current step's slot sums; vanilla: ``r + bonus``.

Baselines beside the paper's two arms (what a user would try instead, and an ablation):

* ``fixed-lambda``: ``r + bonus - lambda * delta`` with ``lambda`` (reward per second) fixed for
  the run, as in time-penalised RL with a constant price of time; invalid samples are charged the
  timeout as in RPG;
* parent ranking apart from the training reward (``parent_rank``): ``"rate"`` ranks the buffer's
  parents by ``r - rho_hat * delta``, ``"raw"`` by ``r``, ``"arm"`` (default) as the arm itself
  does (RPG: rate; vanilla: raw; fixed-lambda: ``r - lambda * delta``). RPG and vanilla crossed
  with ``rate`` / ``raw`` give the 2 x 2 ablation that separates choosing parents from learning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rpg_llm.config import IMPROVEMENT_BONUS, RewardConfig

__all__ = [
    "INVALID_REWARD",
    "StepRewards",
    "charged_time",
    "relative_reward",
    "improvement_bonus",
    "step_rewards",
]

INVALID_REWARD = -10.0
"""Raw reward of an invalid sample (DESIGN.md section 7)."""


def charged_time(valid: np.ndarray, delta: np.ndarray, cfg: RewardConfig) -> np.ndarray:
    """Time charged to each sample, seconds: ``max(delta, floor)``; the arms that price time
    (RPG, fixed-lambda) charge invalid ones ``max(timeout, floor)``.

    Args:
        valid: ``[B]`` bool.
        delta: ``[B]`` float, measured wall time in seconds (>= 0).
        cfg: :class:`RewardConfig`.

    Returns:
        ``[B]`` float64.

    Raises:
        ValueError: shape mismatch or a negative / non-finite time.
    """
    valid = np.asarray(valid, dtype=bool)
    delta = np.asarray(delta, dtype=np.float64)
    if valid.shape != delta.shape or delta.ndim != 1:
        raise ValueError(f"valid {valid.shape} and delta {delta.shape} must be equal 1-D shapes")
    if not np.all(np.isfinite(delta)) or np.any(delta < 0):
        raise ValueError(f"times must be finite and >= 0, got {delta.tolist()}")
    t = np.maximum(delta, cfg.time_floor_s)
    if cfg.priced:
        t = np.where(valid, t, max(cfg.timeout_s, cfg.time_floor_s))
    return t


def relative_reward(
    raw: np.ndarray, delta: np.ndarray, rho_hat: float, c: float = 1.0
) -> np.ndarray:
    """The paper's relative reward ``r - c * rho_hat * delta``.

    Args:
        raw: ``[B]`` raw rewards.
        delta: ``[B]`` charged times, seconds.
        rho_hat: reward-rate estimate (reward per second, >= 0, finite).
        c: weight of the time cost.

    Raises:
        ValueError: a negative or non-finite ``rho_hat``, or mismatched shapes.
    """
    raw = np.asarray(raw, dtype=np.float64)
    delta = np.asarray(delta, dtype=np.float64)
    if raw.shape != delta.shape:
        raise ValueError(f"raw {raw.shape} and delta {delta.shape} differ")
    if not (math.isfinite(rho_hat) and rho_hat >= 0):
        raise ValueError(f"rho_hat must be finite and >= 0, got {rho_hat!r}")
    return raw - c * rho_hat * delta


def improvement_bonus(
    raw: np.ndarray, valid: np.ndarray, best_before: float, bonus: float = IMPROVEMENT_BONUS
) -> tuple[np.ndarray, float]:
    """Bonus for each valid sample whose raw reward beats every earlier step's best.

    Args:
        raw: ``[B]`` raw rewards of this step.
        valid: ``[B]`` bool.
        best_before: best valid raw reward of all earlier steps (``-inf`` if none).
        bonus: the bonus (0.5).

    Returns:
        ``(bonuses [B], best after this step)``.
    """
    raw = np.asarray(raw, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    new_best = valid & (raw > best_before)
    best_after = max([best_before, *raw[valid].tolist()])
    return np.where(new_best, bonus, 0.0), float(best_after)


@dataclass(frozen=True)
class StepRewards:
    """Rewards of one step.

    Attributes:
        rewards: ``[B]`` scalar PPO rewards (relative in RPG, raw in vanilla, bonus included).
        charged_times: ``[B]`` seconds.
        bonuses: ``[B]``.
        best: best valid raw reward after this step.
        rho_hat: the estimate used (reward per second).
    """

    rewards: np.ndarray
    charged_times: np.ndarray
    bonuses: np.ndarray
    best: float
    rho_hat: float


def step_rewards(
    raw: np.ndarray,
    valid: np.ndarray,
    delta: np.ndarray,
    rho_hat: float,
    best_before: float,
    cfg: RewardConfig,
    times: np.ndarray | None = None,
) -> StepRewards:
    """The PPO rewards of one step for ``cfg.method`` (see the module docstring).

    ``rho_hat`` must be the estimate refitted on this step's slot sums (the loop's job);
    ``times``: the step's :func:`charged_time`, when the caller has it already.
    """
    times = charged_time(valid, delta, cfg) if times is None else times
    bonuses, best = improvement_bonus(raw, valid, best_before, cfg.bonus)
    base = np.asarray(raw, dtype=np.float64) + bonuses
    if cfg.method == "rpg":
        rewards = relative_reward(base, times, rho_hat, cfg.c)
    elif cfg.method == "fixed-lambda":
        rewards = relative_reward(base, times, cfg.fixed_lambda)
    else:
        rewards = base
    return StepRewards(rewards, times, bonuses, best, float(rho_hat))
