"""The loop's reward-rate estimator by name (``--estimator``; DESIGN.md section 4).

Every estimator meets :class:`rpg_llm.loop.types.RateEstimator` and is fed the same slot sums
(DESIGN.md section 7), so they differ only in how they estimate:

- ``niw``: the NIW posterior's 95th predictive percentile (the paper's; :mod:`.estimator`);
- ``niw-mean``: the same posterior's mean rate (:func:`.estimator.refit_posterior_mean`);
- ``robbins-monro``: the NPG theorem's running rate (:mod:`.robbins_monro`, ``chi = 0.5``).
"""

from __future__ import annotations

import torch

from rpg_llm.config import ESTIMATORS
from rpg_llm.loop import estimator as niw_estimator
from rpg_llm.loop.estimator import NIWState
from rpg_llm.loop.robbins_monro import RobbinsMonroEstimator, SlotSums
from rpg_llm.loop.types import RateEstimator

__all__ = ["ESTIMATORS", "NIWMeanEstimator", "make_rate_estimator"]


class NIWMeanEstimator:
    """The NIW posterior-mean rate behind the loop's contract (no draws: the generator and
    ``num_batches`` are unused)."""

    def init_state(
        self, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
    ) -> NIWState:
        """:func:`rpg_llm.loop.estimator.init_state`."""
        return niw_estimator.init_state(dtype, device)

    def refit(
        self,
        state: NIWState,
        slot_rewards: SlotSums,
        slot_times: SlotSums,
        generator: torch.Generator | None = None,
        num_batches: int = 0,
    ) -> NIWState:
        """:func:`rpg_llm.loop.estimator.refit_posterior_mean`."""
        del num_batches
        return niw_estimator.refit_posterior_mean(state, slot_rewards, slot_times, generator)


def make_rate_estimator(name: str, niw: RateEstimator = niw_estimator) -> RateEstimator:
    """The estimator called ``name`` (one of :data:`ESTIMATORS`).

    Args:
        name: the estimator's name.
        niw: what ``niw`` is (the loop's backends may swap the module).

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    if name == "niw":
        return niw
    if name == "niw-mean":
        return NIWMeanEstimator()
    if name == "robbins-monro":
        return RobbinsMonroEstimator()
    raise ValueError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}")
