"""Rewards of both arms of the NanoGPT task on hand-computed cases."""

from __future__ import annotations

import pytest

from rpg_llm.env.tasks.nanogpt.rewards import charged_time, rate_reward, rpg_reward, vanilla_reward

T = 3.28


@pytest.mark.parametrize(
    "loss, valid, want",
    [
        (3.27, True, 6.73 + 5 + 1.0),  # margin 0.01 -> 100 * 0.01
        (3.20, True, 6.80 + 5 + 3.0),  # margin 0.08 capped at 0.03
        (3.28, True, 6.72 + 5 + 0.0),  # exactly at the target
        (3.30, True, 6.70),  # missed: no bonus
        (12.0, True, 0.0),  # max(0, 10 - L)
        (None, False, -10.0),
    ],
)
def test_rpg_reward(loss, valid, want):
    assert rpg_reward(loss, valid, T) == pytest.approx(want)


@pytest.mark.parametrize(
    "loss, valid, want",
    [(3.27, True, 6.73), (3.30, True, 6.70), (11.0, True, 0.0), (None, False, 0.0)],
)
def test_rate_reward_has_no_bonus(loss, valid, want):
    assert rate_reward(loss, valid) == pytest.approx(want)


@pytest.mark.parametrize(
    "loss, valid, delta, want",
    [
        (3.27, True, 200.0, -200.0 + 200.0),  # 20000 * 0.01
        (3.20, True, 180.0, -180.0 + 600.0),  # margin capped at 0.03
        (3.29, True, 180.0, -1500.0 - 200.0),  # missed by 0.01
        (3.50, True, 180.0, -1500.0 - 600.0),  # missed by more than 0.03
        (None, False, 180.0, -3000.0),
    ],
)
def test_vanilla_reward(loss, valid, delta, want):
    assert vanilla_reward(loss, valid, T, delta) == pytest.approx(want, abs=1e-9)


def test_invalid_samples_are_charged_the_timeout():
    assert charged_time(False, 12.0, 1500.0) == 1500.0
    assert charged_time(True, 12.0, 1500.0) == 12.0


def test_bad_input_is_an_error():
    with pytest.raises(ValueError, match="finite val loss"):
        rpg_reward(float("nan"), True, T)
    with pytest.raises(ValueError, match="delta"):
        vanilla_reward(3.0, True, T, -1.0)
