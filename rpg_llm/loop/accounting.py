"""Accounting stage: estimator refit + rewards -> StepRewards (paper Algorithm 1, lines 9-10).

Slot ``i % S`` accumulates, for batch row ``i`` (never reset; DESIGN.md sections 4 and 7,
reference facts), the sample's score (its raw reward; 0 for an invalid sample) and its
*measured* time ``max(delta, 0.1 s)``: the ``-10`` and the full-timeout charge of an invalid
sample enter only the reward PPO trains on, never the estimator. The NIW estimator is refitted
on the slot sums after every step and gives that step's ``rho_hat``; rewards are then relative
(RPG) or raw (vanilla), plus the improvement bonus (:mod:`rpg_llm.loop.rewards`). A task with
rewards of its own (``Task.own_rewards``, e.g. a val loss against a target) feeds the slots its
own rate reward and charged time, and gives the vanilla reward and the bonus
(:class:`rpg_llm.env.types.TaskRewards`). Samples whose status is
``infra`` (the sandbox, grader set-up or machine failed, not the script) feed neither the slots
nor the best score.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from rpg_llm.config import RewardConfig
from rpg_llm.env.types import TaskRewards
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.rewards import StepRewards, charged_time, step_rewards
from rpg_llm.loop.types import RateEstimator

__all__ = [
    "RateTracker",
    "Accounts",
    "check_task_rewards",
    "TaskRewards",
    "INFRA",
    "infra_mask",
]

INFRA = "infra"


def infra_mask(samples: list[Sample]) -> np.ndarray:
    """``[B]`` bool: True where a sample's status is ``infra``."""
    return np.array([s.status == INFRA for s in samples], dtype=bool)


class RateTracker:
    """Slot sums and the NIW reward-rate estimator of one run (DESIGN.md section 4).

    :meth:`refit` runs the estimator's ``refit`` with a generator seeded from ``(seed, step)``,
    so replaying the same samples gives the same ``rho_hat``.
    """

    def __init__(self, estimator: RateEstimator, num_slots: int, seed: int, num_batches: int):
        self.est = estimator
        self.num_slots = num_slots
        self.seed = seed
        self.num_batches = num_batches
        self.state = estimator.init_state(torch.float64)
        self.slot_rewards = torch.zeros(num_slots, dtype=torch.float64)
        self.slot_times = torch.zeros(num_slots, dtype=torch.float64)

    @property
    def rho_hat(self) -> float:
        return float(self.state.rho_hat)

    def refit(self, step: int, rows: list[int], raw: np.ndarray, times: np.ndarray) -> float:
        """Add row ``rows[k]``'s fed reward and time (seconds) to its slot, refit, and
        return ``rho_hat`` (reward per second).

        Raises:
            RuntimeError: the estimator returned a negative or non-finite ``rho_hat``.
        """
        for row, r, t in zip(rows, raw, times, strict=True):
            self.slot_rewards[row % self.num_slots] += float(r)
            self.slot_times[row % self.num_slots] += float(t)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        self.state = self.est.refit(
            self.state, self.slot_rewards, self.slot_times, gen, num_batches=self.num_batches
        )
        rho = self.rho_hat
        if not math.isfinite(rho) or rho < 0:
            raise RuntimeError(f"estimator returned an invalid rho_hat {rho!r} at step {step}")
        return rho


def check_task_rewards(reward_cfg: RewardConfig, task_rewards: TaskRewards | None) -> None:
    """Refuse ``--raw-reward percentile`` for a task with rewards of its own (no leaderboard).

    Raises:
        ValueError: that combination.
    """
    if task_rewards is not None and reward_cfg.raw_reward == "percentile":
        raise ValueError(
            "--raw-reward percentile: this task has rewards of its own, not a leaderboard "
            "percentile; use --raw-reward design"
        )


class Accounts:
    """The run's reward-rate estimate and best raw reward, fed step by step from stored samples
    (the same calls on a fresh run and on resume, so both give the same numbers).

    With ``task_rewards`` (a task with rewards of its own, ``Task.own_rewards()``) the
    estimator is fed ``task_rewards.rate``, the vanilla arm gets ``task_rewards.vanilla`` and
    the generic improvement bonus is 0 (the task's raw reward holds its own bonus).
    """

    def __init__(self, rates: RateTracker, reward_cfg: RewardConfig, task_rewards=None):
        check_task_rewards(reward_cfg, task_rewards)
        self.rates = rates
        self.task_rewards: TaskRewards | None = task_rewards
        self.cfg = reward_cfg if task_rewards is None else replace(reward_cfg, bonus=0.0)
        self.best = -math.inf  # seeds included (the improvement bonus)
        self.best_generated = -math.inf  # the policy's own samples only (steps >= 1)

    @property
    def rho_hat(self) -> float:
        return self.rates.rho_hat

    def _arrays(
        self, samples: list[Sample]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``[B]`` arrays: reward of the arm (before rho_hat), what the slots get, valid, delta."""
        raw = np.array([s.raw_reward for s in samples], dtype=np.float64)
        valid = np.array([s.status == "ok" for s in samples], dtype=bool)
        delta = np.array([s.exec_time for s in samples], dtype=np.float64)
        rate = raw
        tr = self.task_rewards
        if tr is not None:
            rate = np.array(
                [tr.rate(s.score, bool(v)) for s, v in zip(samples, valid, strict=True)],
                dtype=np.float64,
            )
            if self.cfg.method == "vanilla":
                raw = np.array(
                    [
                        tr.vanilla(s.score, bool(v), float(s.exec_time))
                        for s, v in zip(samples, valid, strict=True)
                    ],
                    dtype=np.float64,
                )
        return raw, rate, valid, delta

    def _feed(
        self,
        step: int,
        samples: list[Sample],
        rate: np.ndarray,
        times: np.ndarray,
    ) -> float:
        keep = ~infra_mask(samples)
        rows = [s.row for s, k in zip(samples, keep, strict=True) if k]
        return self.rates.refit(step, rows, rate[keep], times[keep])

    def fed(
        self, rate: np.ndarray, valid: np.ndarray, delta: np.ndarray, charged: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """What the slots get of a step, ``([B] rewards, [B] seconds)`` (module docstring): the
        score and measured time ``max(delta, floor)``, an invalid sample's score 0; a task with
        rewards of its own: its rate reward and the ``charged`` time."""
        if self.task_rewards is not None:
            return rate, charged
        measured = np.maximum(delta, self.cfg.time_floor_s)
        return np.where(valid, rate, 0.0), measured

    def feed_seeds(self, step: int, seeds: list[Sample]) -> None:
        """The seed solutions are historical samples: they set the best score and feed the
        slots (seed ``i`` into slot ``i % S``), so ``rho_hat`` before step 1 comes from them
        (paper, section 5: the estimator is fitted from the samples in the buffer)."""
        if not seeds:
            return
        raw, rate, valid, delta = self._arrays(seeds)
        self._feed(step, seeds, *self.fed(rate, valid, delta, charged_time(valid, delta, self.cfg)))
        if valid.any():
            self.best = max(self.best, float(raw[valid].max()))

    def feed(self, step: int, samples: list[Sample]) -> float:
        """Feed ``samples`` into the slots (what :meth:`fed` gives of them) and refit
        ``rho_hat`` on the slot sums (Algorithm 1, line 9); returns it (1/s)."""
        _, rate, valid, delta = self._arrays(samples)
        return self._feed(step, samples, *self.fed(rate, valid, delta, self._charged(valid, delta)))

    def _charged(self, valid: np.ndarray, delta: np.ndarray) -> np.ndarray:
        return charged_time(valid, delta, self.cfg)

    def reward(self, samples: list[Sample], rho: float) -> StepRewards:
        """The rewards of ``samples`` at ``rho`` (Algorithm 1, line 10): ``r - rho * delta`` in
        the RPG arm, the raw reward in the vanilla arm, plus the improvement bonus on a new best
        (:func:`rpg_llm.loop.rewards.step_rewards`); the best scores move on."""
        raw, _, valid, delta = self._arrays(samples)
        return self._reward(raw, valid, delta, rho, self._charged(valid, delta))

    def account(self, step: int, samples: list[Sample]) -> StepRewards:
        """One synchronous step's accounting: :meth:`feed` its samples, then :meth:`reward`
        them at the refitted ``rho_hat`` (the arrays and charged times computed once)."""
        raw, rate, valid, delta = self._arrays(samples)
        times = self._charged(valid, delta)
        rho = self._feed(step, samples, *self.fed(rate, valid, delta, times))
        return self._reward(raw, valid, delta, rho, times)

    def _reward(
        self, raw: np.ndarray, valid: np.ndarray, delta: np.ndarray, rho: float, times: np.ndarray
    ) -> StepRewards:
        sr = step_rewards(raw, valid, delta, rho, self.best, self.cfg, times=times)
        self.best = sr.best
        if valid.any():
            self.best_generated = max(self.best_generated, float(raw[valid].max()))
        return sr
