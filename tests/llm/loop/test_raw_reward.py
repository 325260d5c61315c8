"""``--raw-reward``: which number a valid script's raw reward is (rpg_llm.loop.execution,
rpg_llm.loop.rewards, rpg_llm.loop.accounting)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rpg_llm.config import LoopConfig, RewardConfig
from rpg_llm.env.execute import Outcome
from rpg_llm.env.service import LocalService
from rpg_llm.env.types import TaskRewards
from rpg_llm.loop.accounting import Accounts, check_task_rewards
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.execution import execute_seeds, make_sample
from rpg_llm.loop.rewards import INVALID_REWARD

# an AUC of 0.5 (chance) that beats 1 of 40 leaderboard entries
CHANCE = Outcome("ok", 0.4, 0.5, 0.5, True, "score 0.5", 0.4, 0.025)
GOOD = Outcome("ok", 2.0, 0.93, 0.93, True, "score 0.93", 2.0, 0.975)
FAILED = Outcome("error", 1.0, None, INVALID_REWARD, False, "Traceback", 1.0)
NO_BOARD = Outcome("ok", 1.0, 0.7, 0.7, True, "score 0.7", 1.0)


def _sample(outcome, raw_reward):
    return make_sample(
        Sample, run="r", step=1, row=0, task="toy-auc", parent_id=None, prompt="p", code="c",
        outcome=outcome, time_measure="cpu", now=0.0, raw_reward=raw_reward,
    )  # fmt: skip


def test_percentile_replaces_the_score_and_invalid_stays_minus_ten():
    assert [_sample(o, "design").raw_reward for o in (CHANCE, GOOD, FAILED)] == [0.5, 0.93, -10.0]
    got = [_sample(o, "percentile").raw_reward for o in (CHANCE, GOOD, FAILED)]
    assert got == [0.025, 0.975, -10.0]
    # the rate r / delta: by score the chance-level script leads (1.25 > 0.465 per s), by
    # percentile the good one does (0.0625 < 0.4875 per s)
    assert 0.5 / 0.4 > 0.93 / 2.0 and 0.025 / 0.4 < 0.975 / 2.0
    assert _sample(CHANCE, "percentile").score == 0.5  # the score itself is kept


def test_percentile_without_a_leaderboard_names_the_task():
    assert _sample(NO_BOARD, "design").raw_reward == 0.7
    with pytest.raises(ValueError, match="task toy-auc gave no leaderboard percentile"):
        _sample(NO_BOARD, "percentile")
    assert _sample(None, "percentile").raw_reward == INVALID_REWARD  # no script: no outcome


def test_seeds_are_rewarded_by_the_runs_setting():
    outcomes = [CHANCE, GOOD, FAILED]
    service = LocalService(lambda codes: outcomes)
    seeds = [(f"s{i}", f"print({i})") for i in range(3)]
    try:
        for raw, want in (("design", [0.5, 0.93, -10.0]), ("percentile", [0.025, 0.975, -10.0])):
            cfg = LoopConfig()
            cfg = replace(cfg, reward=replace(cfg.reward, raw_reward=raw))
            got = execute_seeds(seeds, cfg, "toy-auc", Sample, service, 0)
            assert [s.raw_reward for s in got] == want
    finally:
        service.close()


def test_bad_raw_reward_and_a_task_with_its_own_rewards_are_refused():
    with pytest.raises(ValueError, match="raw_reward must be one of .* got 'auc'"):
        RewardConfig(raw_reward="auc")
    own = TaskRewards(rate=lambda s, v: 0.0, vanilla=lambda s, v, d: 0.0)
    check_task_rewards(RewardConfig(), own)
    check_task_rewards(RewardConfig(raw_reward="percentile"), None)
    with pytest.raises(ValueError, match="rewards of its own"):
        check_task_rewards(RewardConfig(raw_reward="percentile"), own)
    with pytest.raises(ValueError, match="rewards of its own"):
        Accounts(None, RewardConfig(raw_reward="percentile"), own)  # type: ignore[arg-type]
