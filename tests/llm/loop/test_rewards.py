"""Rewards of the two arms (rpg_llm.loop.rewards) against values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from rpg_llm.config import RewardConfig
from rpg_llm.loop.rewards import (
    charged_time,
    improvement_bonus,
    relative_reward,
    step_rewards,
)

RAW = np.array([0.8, -10.0, 0.9, 0.5])
VALID = np.array([True, False, True, True])
DELTA = np.array([2.0, 0.01, 30.0, 0.05])


def test_charged_time_rpg_charges_invalid_the_timeout_and_floors_small_times():
    rpg = charged_time(VALID, DELTA, RewardConfig("rpg", timeout_s=60))
    np.testing.assert_allclose(rpg, [2.0, 60.0, 30.0, 0.1])
    van = charged_time(VALID, DELTA, RewardConfig("vanilla", timeout_s=60))
    np.testing.assert_allclose(van, [2.0, 0.1, 30.0, 0.1])


def test_relative_reward_by_hand():
    np.testing.assert_allclose(relative_reward(RAW, DELTA, 0.02), RAW - 0.02 * DELTA)
    assert relative_reward(np.array([1.0]), np.array([10.0]), 0.05)[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="rho_hat"):
        relative_reward(RAW, DELTA, -0.1)


def test_improvement_bonus_only_for_valid_new_best():
    bonus, best = improvement_bonus(RAW, VALID, best_before=0.85)
    np.testing.assert_allclose(bonus, [0.0, 0.0, 0.5, 0.0])
    assert best == 0.9
    bonus, best = improvement_bonus(RAW, VALID, best_before=-np.inf)
    np.testing.assert_allclose(bonus, [0.5, 0.0, 0.5, 0.5])
    bonus, best = improvement_bonus(np.array([-10.0]), np.array([False]), best_before=0.3)
    assert bonus[0] == 0.0 and best == 0.3


def test_step_rewards_both_arms():
    rho = 0.01
    rpg = step_rewards(RAW, VALID, DELTA, rho, 0.85, RewardConfig("rpg", timeout_s=60))
    expected = np.array([0.8 - rho * 2.0, -10.0 - rho * 60.0, 0.9 + 0.5 - rho * 30.0, 0.5 - 0.001])
    np.testing.assert_allclose(rpg.rewards, expected)
    van = step_rewards(RAW, VALID, DELTA, rho, 0.85, RewardConfig("vanilla", timeout_s=60))
    np.testing.assert_allclose(van.rewards, [0.8, -10.0, 1.4, 0.5])


def test_reward_config_rejects_bad_values():
    with pytest.raises(ValueError, match="method"):
        RewardConfig("ppo")
    with pytest.raises(ValueError, match="timeout_s"):
        RewardConfig("rpg", timeout_s=0)
