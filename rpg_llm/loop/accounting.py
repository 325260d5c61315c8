"""Accounting stage: estimator refit + rewards -> StepRewards (paper Algorithm 1, lines 9-10).

Slot ``i % S`` accumulates the raw reward and the charged time of batch row ``i`` (never reset;
DESIGN.md section 4); the NIW estimator is refitted on the slot sums after every step and gives
that step's ``rho_hat``; rewards are then relative (RPG) or raw (vanilla), plus the improvement
bonus (:mod:`rpg_llm.rewards`). Samples whose status is ``infra`` (the sandbox, grader set-up or
machine failed, not the script) feed neither the slots nor the best score.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rpg_llm.rewards import RewardConfig, StepRewards, charged_time, step_rewards

__all__ = ["RateTracker", "Accounts", "INFRA", "infra_mask"]

INFRA = "infra"


def infra_mask(samples: list[Any]) -> np.ndarray:
    """``[B]`` bool: True where a sample's status is ``infra``."""
    return np.array([s.status == INFRA for s in samples], dtype=bool)


class RateTracker:
    """Slot sums and the NIW reward-rate estimator of one run (DESIGN.md section 4).

    :meth:`refit` runs the estimator's ``refit`` with a generator seeded from ``(seed, step)``,
    so replaying the same samples gives the same ``rho_hat``.
    """

    def __init__(self, estimator: Any, num_slots: int, seed: int, num_batches: int):
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
        """Add row ``rows[k]``'s raw reward and charged time (seconds) to its slot, refit, and
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


class Accounts:
    """The run's reward-rate estimate and best raw reward, fed step by step from stored samples
    (the same calls on a fresh run and on resume, so both give the same numbers)."""

    def __init__(self, rates: RateTracker, reward_cfg: RewardConfig):
        self.rates = rates
        self.cfg = reward_cfg
        self.best = -math.inf  # seeds included (the improvement bonus)
        self.best_generated = -math.inf  # the policy's own samples only (steps >= 1)

    @property
    def rho_hat(self) -> float:
        return self.rates.rho_hat

    def _arrays(self, samples: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raw = np.array([s.raw_reward for s in samples], dtype=np.float64)
        valid = np.array([s.status == "ok" for s in samples], dtype=bool)
        delta = np.array([s.exec_time for s in samples], dtype=np.float64)
        return raw, valid, delta

    def _feed(self, step: int, samples: list[Any], raw, valid, delta) -> float:
        keep = ~infra_mask(samples)
        times = charged_time(valid, delta, self.cfg)
        rows = [s.row for s, k in zip(samples, keep, strict=True) if k]
        return self.rates.refit(step, rows, raw[keep], times[keep])

    def feed_seeds(self, step: int, seeds: list[Any]) -> None:
        """The seed solutions are historical samples: they set the best score and feed the
        slots (seed ``i`` into slot ``i % S``), so ``rho_hat`` before step 1 comes from them
        (paper, section 5: the estimator is fitted from the samples in the buffer)."""
        if not seeds:
            return
        raw, valid, delta = self._arrays(seeds)
        self._feed(step, seeds, raw, valid, delta)
        if valid.any():
            self.best = max(self.best, float(raw[valid].max()))

    def account(self, step: int, samples: list[Any]) -> StepRewards:
        """Refit ``rho_hat`` on the slot sums including this step, then this step's rewards."""
        raw, valid, delta = self._arrays(samples)
        rho = self._feed(step, samples, raw, valid, delta)
        sr = step_rewards(raw, valid, delta, rho, self.best, self.cfg)
        self.best = sr.best
        if valid.any():
            self.best_generated = max(self.best_generated, float(raw[valid].max()))
        return sr
