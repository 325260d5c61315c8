"""The baselines beside RPG and vanilla: the fixed-lambda arm and the 2 x 2 ablation of parent
ranking x training reward (rpg_llm.loop.rewards), on hand-made outcomes and a hand-made buffer."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from rpg_llm.config import LoopConfig, RewardConfig
from rpg_llm.flags import apply_flags
from rpg_llm.loop.buffer import SampleBuffer
from rpg_llm.loop.parents import ParentPool
from rpg_llm.loop.rewards import step_rewards
from testkit.samples import toy_sample

RAW = np.array([0.8, -10.0, 0.9, 0.5])
VALID = np.array([True, False, True, True])
DELTA = np.array([2.0, 0.01, 30.0, 0.05])
RHO = 0.02


def test_fixed_lambda_rewards_by_hand():
    """lambda = 0.01 per second, timeout 60 s: charged times 2, 60 (invalid), 30, 0.1 (floor);
    the third sample beats the best so far (0.85) and gets the 0.5 bonus. rho_hat plays no part."""
    cfg = RewardConfig("fixed-lambda", timeout_s=60, fixed_lambda=0.01)
    got = step_rewards(RAW, VALID, DELTA, RHO, 0.85, cfg)
    np.testing.assert_allclose(got.rewards, [0.78, -10.6, 1.1, 0.499])
    np.testing.assert_allclose(got.charged_times, [2.0, 60.0, 30.0, 0.1])
    same = step_rewards(RAW, VALID, DELTA, 5.0, 0.85, cfg)  # another rho_hat: same rewards
    np.testing.assert_allclose(same.rewards, got.rewards)


@pytest.mark.parametrize("rank", ["arm", "rate", "raw"])
@pytest.mark.parametrize("method", ["rpg", "vanilla"])
def test_ablation_training_reward_does_not_depend_on_parent_ranking(method, rank):
    """The training reward is the arm's (relative or raw) whatever ranks the parents."""
    cfg = RewardConfig(method, timeout_s=60, parent_rank=rank)
    got = step_rewards(RAW, VALID, DELTA, RHO, 0.85, cfg).rewards
    relative = [0.8 - RHO * 2.0, -10.0 - RHO * 60.0, 1.4 - RHO * 30.0, 0.5 - RHO * 0.1]
    np.testing.assert_allclose(got, relative if method == "rpg" else [0.8, -10.0, 1.4, 0.5])


@pytest.mark.parametrize(
    ("method", "rank", "lam", "order"),
    [
        ("rpg", "arm", 0.0, "CBA"),  # by r - rho_hat * delta
        ("rpg", "raw", 0.0, "ACB"),  # the ablation: relative reward, parents by r
        ("vanilla", "arm", 0.0, "ACB"),
        ("vanilla", "rate", 0.0, "CBA"),  # the ablation: raw reward, parents by rate
        ("fixed-lambda", "arm", 0.001, "ACB"),  # a small price keeps the slow best first
        ("fixed-lambda", "arm", 0.1, "BCA"),  # a large one puts the fastest first
        ("fixed-lambda", "rate", 0.1, "CBA"),
    ],
)
def test_parent_ranking_of_each_arm_on_a_hand_made_buffer(tmp_path, method, rank, lam, order):
    """A: r 0.9 in 30 s; B: 0.6 in 1 s; C: 0.8 in 4 s. At rho_hat 0.05: A -0.6, B 0.55, C 0.6;
    at lambda 0.001: A 0.87, B 0.599, C 0.796; at lambda 0.1: A -2.1, B 0.5, C 0.4."""
    cfg = RewardConfig(method, parent_rank=rank, fixed_lambda=lam)
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        ids = buf.add_many(
            [toy_sample(0, 0.9, 30.0), toy_sample(1, 0.6, 1.0), toy_sample(2, 0.8, 4.0)]
        )
        stored = [buf.get(i) for i in ids]
    names: dict[int | None, str] = dict(zip(ids, "ABC", strict=True))
    pool = ParentPool(8)
    pool.add(stored, cfg.ranking_rho(0.05))
    top = pool.top(3, cfg.ranking_rho(0.05))
    assert "".join(names[s.id] for s in top) == order


def test_arm_settings_are_checked_together_whatever_the_flag_order():
    cfg = LoopConfig()
    got = apply_flags(cfg, {"reward.method": "fixed-lambda", "reward.fixed_lambda": 0.01})
    assert got.method == "fixed-lambda" and got.reward.fixed_lambda == 0.01
    got = apply_flags(cfg, {"reward.fixed_lambda": 0.01, "reward.method": "fixed-lambda"})
    assert got.reward.fixed_lambda == 0.01
    got = apply_flags(cfg, {"trl.num_generations": 4, "batch_size": 8, "engine": "trl"})
    assert (got.batch_size, got.trl.num_generations) == (8, 4)
    with pytest.raises(ValueError, match=r"--fixed-lambda 0.01 applies to --method fixed-lambda"):
        apply_flags(cfg, {"reward.fixed_lambda": 0.01})
    with pytest.raises(ValueError, match=r"needs --fixed-lambda > 0 .*got -1.0"):
        apply_flags(cfg, {"reward.method": "fixed-lambda", "reward.fixed_lambda": -1.0})
    with pytest.raises(ValueError, match="parent_rank must be one of"):
        RewardConfig("rpg", parent_rank="best")


def test_every_arm_is_its_own_budget_curve_label():
    from rpg_llm.loop.budget import run_label

    def label(**reward):
        return run_label(LoopConfig(seed_buffer=True, reward=RewardConfig(**reward)).to_dict())

    assert label(method="rpg") == "rpg (seeded)"
    assert label(method="rpg", parent_rank="raw") == "rpg, parents by raw (seeded)"
    assert label(method="vanilla", parent_rank="rate") == "vanilla, parents by rate (seeded)"
    assert label(method="fixed-lambda", fixed_lambda=0.01) == "fixed-lambda 0.01/s (seeded)"
    assert run_label({"method": "vanilla", "seeded": False}) == "vanilla (unseeded)"
    pct = label(method="rpg", parent_rank="raw", raw_reward="percentile")
    assert pct == "rpg, parents by raw, r = percentile (seeded)"


def test_the_run_folder_records_the_arm_and_old_records_read_right(tmp_path):
    """The folder records the arm (method and parent ranking), so each ablation arm is its own
    curve; a record whose label names only the method is read by its reward section."""
    from types import SimpleNamespace

    from rpg_llm.env.types import Task
    from rpg_llm.loop.backends import default_backends
    from rpg_llm.loop.budget import run_label
    from rpg_llm.loop.dist import Dist
    from rpg_llm.loop.pipeline import RunEnv

    acc = SimpleNamespace(is_main_process=True, num_processes=1, process_index=0)
    acc.wait_for_everyone = lambda: None
    cfg = LoopConfig(
        task="churn-auc",
        sandbox="subprocess",
        seed_buffer=True,
        reward=RewardConfig("vanilla", parent_rank="rate"),
    )
    backends = default_backends(cfg)
    stand_in = SimpleNamespace(id="churn-auc", own_rewards=lambda: None, description="")
    backends.load_task = lambda task, root: cast(Task, stand_in)  # the folder needs its id only
    env = RunEnv(cfg, tmp_path / "run", dist=Dist(acc), backends=backends)
    env.close()
    stored = env.folder.load_config()
    assert stored["label"] == "vanilla, parents by rate (seeded)"
    old = stored | {"label": "vanilla (seeded)"}  # a method-only label
    assert run_label(old) == "vanilla, parents by rate (seeded)"
    assert run_label({"label": "my arm", "method": "rpg"}) == "my arm"  # no reward section
