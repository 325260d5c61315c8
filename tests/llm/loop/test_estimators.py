"""The loop's reward-rate estimator by name (``--estimator``): each is fed the same slot sums
by ``RateTracker`` and gives the value its own algebra gives, computed another way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rpg_core import robbins_monro as rm
from rpg_llm.config import LoopConfig
from rpg_llm.loop import estimator as niw_estimator
from rpg_llm.loop.accounting import RateTracker
from rpg_llm.loop.estimators import make_rate_estimator

ROWS = [0, 1, 2, 3]
RAW = [np.array([1.0, 0.5, 0.0, 2.0]), np.array([0.8, 0.9, 1.1, 0.2])]
TIMES = [np.array([2.0, 1.0, 4.0, 3.0]), np.array([1.5, 2.5, 0.5, 1.0])]


def _track(name: str) -> list[float]:
    tracker = RateTracker(make_rate_estimator(name), 4, 0, 50)
    steps = enumerate(zip(RAW, TIMES, strict=True))
    return [tracker.refit(step, ROWS, r, t) for step, (r, t) in steps]


def test_robbins_monro_tracks_the_weighted_mean_of_the_pooled_slot_rates():
    got = _track("robbins-monro")
    # slots accumulate: pooled rates after step 0 and step 1 (sums over the same 4 slots)
    x1 = RAW[0].sum() / TIMES[0].sum()
    x2 = (RAW[0] + RAW[1]).sum() / (TIMES[0] + TIMES[1]).sum()
    eta = np.arange(1, 4, dtype=np.float64) ** -rm.CHI  # rho_0 = 0, x1, x2
    assert got[0] == pytest.approx(eta[1] * x1 / eta[:2].sum(), rel=1e-12)
    assert got[1] == pytest.approx((eta[1] * x1 + eta[2] * x2) / eta.sum(), rel=1e-12)


def test_niw_mean_is_the_posterior_mean_rate_of_the_same_refits():
    got = _track("niw-mean")
    state = niw_estimator.init_state(torch.float64)
    slots_r, slots_t = torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    want = []
    for r, t in zip(RAW, TIMES, strict=True):
        slots_r += torch.tensor(r)
        slots_t += torch.tensor(t)
        state = niw_estimator.update(state, slots_r, slots_t)
        want.append(float(niw_estimator.posterior_mean_rate(state)))
    assert got == pytest.approx(want, rel=1e-12)
    assert got != pytest.approx(_track("niw"))  # the 95th percentile is another number


def test_unknown_estimator_is_refused_by_name():
    with pytest.raises(ValueError, match="estimator must be one of niw, niw-mean, robbins-monro"):
        LoopConfig(estimator="rm")
    with pytest.raises(ValueError, match="unknown estimator 'rm'"):
        make_rate_estimator("rm")
