"""A step's record (rpg_llm.loop.recording.step_record) against values computed by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rpg_llm.config import RewardConfig
from rpg_llm.loop.recording import json_metrics, step_record
from rpg_llm.loop.rewards import step_rewards
from rpg_llm.loop.rollout import Rollout
from testkit.samples import toy_sample


def _record(samples):
    raw = np.array([s.raw_reward for s in samples])
    valid = np.array([s.status == "ok" for s in samples])
    delta = np.array([s.exec_time for s in samples])
    sr = step_rewards(raw, valid, delta, 0.1, 0.7, RewardConfig("rpg", timeout_s=60))
    rollout = Rollout(1, [], [], [], [], [], 2.5, 40, 1)
    return step_record(1, samples, sr, 0.05, rollout, 3.0, 4.0, {}, False, 0.8)


def test_valid_means_leave_invalid_samples_out():
    samples = [
        toy_sample(0, 0.9, 2.0),
        toy_sample(1, -10.0, 0.3, status="error", score=None),
        toy_sample(2, 0.6, 5.0),
        toy_sample(3, 0.0, 0.0, status="infra", score=None),
    ]
    rec = _record(samples)
    assert rec.valid_mean_time_s == pytest.approx(3.5)  # (2 + 5) / 2
    assert rec.valid_mean_raw_reward == pytest.approx(0.75)  # (0.9 + 0.6) / 2
    assert rec.mean_raw_reward == pytest.approx((0.9 - 10.0 + 0.6 + 0.0) / 4)
    assert rec.valid_fraction == 0.5 and rec.infra == 1
    # relative rewards at rho 0.1: invalid charged the 60 s timeout; 0.9 is a new best (> 0.7)
    want = [0.9 + 0.5 - 0.2, -10.0 - 6.0, 0.6 - 0.5, 0.0 - 6.0]
    assert rec.mean_reward == pytest.approx(np.mean(want))


def test_no_valid_sample_gives_null_means_in_the_json():
    rec = _record([toy_sample(0, -10.0, 1.0, status="error", score=None)])
    assert math.isnan(rec.valid_mean_time_s) and math.isnan(rec.valid_mean_raw_reward)
    line = json.loads(json.dumps(json_metrics(rec.flat()), allow_nan=False))
    assert line["valid_mean_time_s"] is None and line["valid_mean_raw_reward"] is None
    assert line["valid_fraction"] == 0.0
