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
from dataclasses import dataclass, field

import numpy as np

from rpg_llm.env.sandbox.base import MAX_TIMEOUT_S

__all__ = [
    "METHODS",
    "PARENT_RANKS",
    "TIME_MEASURES",
    "INVALID_REWARD",
    "TIME_FLOOR_S",
    "IMPROVEMENT_BONUS",
    "RAW_REWARDS",
    "RewardConfig",
    "StepRewards",
    "charged_time",
    "relative_reward",
    "improvement_bonus",
    "step_rewards",
]

METHODS = ("rpg", "vanilla", "fixed-lambda")
PARENT_RANKS = ("arm", "rate", "raw")
TIME_MEASURES = ("wall", "cpu")
RAW_REWARDS = ("design", "percentile")
INVALID_REWARD = -10.0
TIME_FLOOR_S = 0.1
IMPROVEMENT_BONUS = 0.5


@dataclass(frozen=True)
class RewardConfig:
    """Reward settings of one arm.

    Attributes:
        method: ``"rpg"`` (relative reward), ``"vanilla"`` (raw reward) or ``"fixed-lambda"``
            (``r - fixed_lambda * delta``).
        timeout_s: execution time limit, seconds (charged to invalid samples in the RPG arm).
        c: weight of the time cost ``c * rho_hat * delta`` (paper: 1).
        bonus: improvement bonus for a new best (paper: 0.5; 0 disables it).
        time_floor_s: smallest time charged, seconds (0.1).
        time_measure: ``"wall"`` (the paper) or ``"cpu"``: which time of the script is ``delta``.
        fixed_lambda: the fixed-lambda arm's price of time, reward per second (> 0 there; must
            stay 0 in the other arms).
        parent_rank: how parents are ranked: ``"arm"``, ``"rate"`` or ``"raw"``
            (:meth:`ranking_rho`).
        raw_reward: the raw reward ``r`` of a valid script: ``"design"`` (DESIGN.md section 7:
            the score when higher is better, the leaderboard percentile when lower is better)
            or ``"percentile"`` (the leaderboard percentile in [0, 1] for every task). A reward
            rate is not invariant to a shift of ``r``: with ``"design"`` a chance-level AUC
            script still earns 0.5 per run, so the fastest chance-level script has the highest
            rate; a percentile puts such a script near 0. Invalid scripts get -10 either way.

    The ``metadata`` of each field names its ``python -m rpg_llm.run`` flag
    (:mod:`rpg_llm.config`). Numbers are cast to float here, once.

    Raises:
        ValueError: a bad value (named).
    """

    method: str = field(default="rpg", metadata={"help": "training arm", "choices": METHODS})
    timeout_s: float = field(
        default=60.0, metadata={"flag": "--timeout", "help": "seconds per script"}
    )
    c: float = field(
        default=1.0, metadata={"flag": "--time-cost", "help": "weight c of rho_hat * delta"}
    )
    bonus: float = field(
        default=IMPROVEMENT_BONUS,
        metadata={"flag": "--improvement-bonus", "help": "bonus for a new best raw reward"},
    )
    time_floor_s: float = field(
        default=TIME_FLOOR_S, metadata={"flag": "--time-floor", "help": "smallest time charged, s"}
    )
    time_measure: str = field(
        default="wall",
        metadata={
            "flag": "--time",
            "help": "delta is the script's wall time or its CPU time (user + sys, children too)",
            "choices": TIME_MEASURES,
        },
    )

    fixed_lambda: float = field(
        default=0.0,
        metadata={"help": "price of time of --method fixed-lambda, reward per second"},
    )
    parent_rank: str = field(
        default="arm",
        metadata={
            "help": "parents ranked as the arm does, by r - rho_hat * delta, or by r",
            "choices": PARENT_RANKS,
        },
    )
    raw_reward: str = field(
        default="design",
        metadata={
            "help": "raw reward of a valid script: DESIGN.md's (score; percentile if lower is "
            "better) or the leaderboard percentile for every task",
            "choices": RAW_REWARDS,
        },
    )

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.parent_rank not in PARENT_RANKS:
            raise ValueError(f"parent_rank must be one of {PARENT_RANKS}, got {self.parent_rank!r}")
        if self.raw_reward not in RAW_REWARDS:
            raise ValueError(f"raw_reward must be one of {RAW_REWARDS}, got {self.raw_reward!r}")
        if self.time_measure not in TIME_MEASURES:
            raise ValueError(
                f"time_measure must be one of {TIME_MEASURES}, got {self.time_measure!r}"
            )
        for name in ("timeout_s", "c", "bonus", "time_floor_s", "fixed_lambda"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
            object.__setattr__(self, name, float(v))  # the one cast
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(
                f"timeout_s must be > 0 and at most {MAX_TIMEOUT_S:g} seconds (24 h), "
                f"got {self.timeout_s!r}"
            )
        if self.c < 0 or self.bonus < 0 or self.time_floor_s <= 0:
            raise ValueError(
                f"need c >= 0, bonus >= 0, time_floor_s > 0; got {self.c}, {self.bonus}, "
                f"{self.time_floor_s}"
            )
        if self.method == "fixed-lambda" and not self.fixed_lambda > 0:
            raise ValueError(
                f"method fixed-lambda needs fixed_lambda > 0 (reward per second), "
                f"got {self.fixed_lambda!r}"
            )
        if self.method != "fixed-lambda" and self.fixed_lambda != 0:
            raise ValueError(
                f"fixed_lambda {self.fixed_lambda!r} applies to method fixed-lambda only "
                f"(method is {self.method})"
            )

    @property
    def priced(self) -> bool:
        """Whether the training reward charges time (RPG and fixed-lambda; not vanilla)."""
        return self.method != "vanilla"

    def ranking_rho(self, rho_hat: float) -> float | None:
        """The price of time, reward per second, by which parents are ranked
        (``r - price * delta``; None: by ``r``), given the current ``rho_hat``."""
        rank = self.parent_rank
        if rank == "arm":
            rank = {"rpg": "rate", "vanilla": "raw", "fixed-lambda": "lambda"}[self.method]
        return {"rate": rho_hat, "raw": None, "lambda": self.fixed_lambda}[rank]


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
) -> StepRewards:
    """The PPO rewards of one step for ``cfg.method`` (see the module docstring).

    ``rho_hat`` must be the estimate refitted on this step's slot sums (the loop's job).
    """
    times = charged_time(valid, delta, cfg)
    bonuses, best = improvement_bonus(raw, valid, best_before, cfg.bonus)
    base = np.asarray(raw, dtype=np.float64) + bonuses
    if cfg.method == "rpg":
        rewards = relative_reward(base, times, rho_hat, cfg.c)
    elif cfg.method == "fixed-lambda":
        rewards = relative_reward(base, times, cfg.fixed_lambda)
    else:
        rewards = base
    return StepRewards(rewards, times, bonuses, best, float(rho_hat))
