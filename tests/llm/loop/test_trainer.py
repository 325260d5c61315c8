"""The training loop end to end with the tiny model on the offline text competition."""

from __future__ import annotations

import json
import math
import types
from dataclasses import replace
from typing import NamedTuple

import fixtures_llm
import numpy as np
import pytest
import torch

from rpg_llm.config import RewardConfig
from rpg_llm.learner.ppo import PPOConfig
from rpg_llm.loop import Backends, LoopConfig, SamplingConfig, Trainer, default_backends, train

# fixtures (pytest finds them by name in this module)
tiny_model_dir = fixtures_llm.tiny_model_dir

COPY_SAMPLE = "import shutil\nshutil.copy('input/sample_submission.csv', 'submission.csv')\n"


def _print_one(text, action, parent_code=None):
    """Every answer becomes the script ``print(1)`` (a stand-in for parse_action)."""
    from rpg_llm.env.actions import Action

    return Action("script", "print(1)\n")


class _RatioState(NamedTuple):
    rho_hat: torch.Tensor


def _ratio_estimator():
    """A transparent stand-in estimator: rho_hat = max(0, sum r / sum t) over the slots."""

    def init_state(dtype):
        return _RatioState(torch.tensor(0.0, dtype=dtype))

    def refit(state, r, t, key, num_batches=1000):
        if (t > 0).sum() < 2:
            return state
        return _RatioState(torch.clamp(r.sum() / t.sum(), min=0.0))

    return types.SimpleNamespace(init_state=init_state, refit=refit)


def _backends(estimator=None) -> Backends:
    b = default_backends()
    b.baseline_solutions = lambda comp_id: [("copy_sample", COPY_SAMPLE)]
    if estimator is not None:
        b.estimator = estimator
    return b


def _cfg(model_dir, method, **kw):
    base = LoopConfig(
        task="text",
        model=str(model_dir),
        steps=2,
        batch_size=2,
        checkpoint_every=1,
        workers=2,
        sandbox="subprocess",
        estimator_batches=200,
        sampling=SamplingConfig(max_prompt_tokens=768, max_new_tokens=12),
        reward=RewardConfig(method, timeout_s=30.0),
        ppo=PPOConfig(micro_batch_size=2),
    )
    return replace(base, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["rpg", "vanilla"])
def test_two_step_run_both_arms(tiny_model_dir, tmp_path, method):
    run = tmp_path / method
    records = train(_cfg(tiny_model_dir, method), run, backends=_backends(), progress=False)
    assert [r.step for r in records] == [1, 2]
    from rpg_llm.loop.buffer import SampleBuffer

    samples = SampleBuffer(run / "buffer.sqlite").all()
    keys = sorted((s.step, s.row) for s in samples)
    assert keys == [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1)]  # one seed, then B per step
    seed = [s for s in samples if s.step == 0][0]
    assert seed.status == "ok" and seed.exec_time > 0  # really executed and graded
    # step 1 prompts improve the seed (the buffer was not empty)
    assert all(s.parent_id == seed.id for s in samples if s.step == 1)
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["method"] == method and cfg["seeded"] is True
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    for m, step in zip(metrics, (1, 2), strict=True):
        rows = [s for s in samples if s.step == step]
        raw = np.array([s.raw_reward for s in rows])
        valid = np.array([s.status == "ok" for s in rows])
        bonus = 0.5 * (valid & (raw > seed.raw_reward))
        if method == "rpg":
            t = np.where(valid, np.maximum([s.exec_time for s in rows], 0.1), 30.0)
            expected = raw + bonus - m["rho_hat"] * t
        else:
            expected = raw + bonus
        assert m["ppo/score_mean"] == pytest.approx(float(expected.mean()), rel=1e-5)
        assert math.isfinite(m["ppo/pg_loss"]) and math.isfinite(m["ppo/vf_loss"])
    assert (run / "checkpoints" / "step_000002" / "trainer.pt").exists()
    assert any((run / "tb").iterdir())
    # samples.csv: one row per stored sample, its script on disk, the PPO reward of its row
    import csv

    rows = list(csv.DictReader(open(run / "samples.csv")))
    assert [(int(r["step"]), int(r["row"])) for r in rows] == keys
    by_id = {s.id: s for s in samples}
    for r in rows:
        s = by_id[int(r["id"])]
        assert (run / r["script"]).read_text() == s.code
        assert float(r["raw_reward"]) == pytest.approx(s.raw_reward, rel=1e-5)
    for m, step in zip(metrics, (1, 2), strict=True):
        rel = [float(r["relative_reward"]) for r in rows if int(r["step"]) == step]
        assert np.mean(rel) == pytest.approx(m["ppo/score_mean"], rel=1e-4, abs=1e-5)
    assert rows[0]["relative_reward"] == ""  # the seed was never trained on
    # seeds never count as the model's best
    gen = [s.raw_reward for s in samples if s.step >= 1 and s.status == "ok"]
    last_best = metrics[-1]["best_generated"]
    assert (max(gen) == pytest.approx(last_best)) if gen else last_best is None  # JSON null


def test_relative_reward_uses_the_current_step_estimate(tiny_model_dir, tmp_path, monkeypatch):
    """The PPO scores of step k use rho_hat refitted on the slot sums INCLUDING step k."""
    trainer = Trainer(
        _cfg(tiny_model_dir, "rpg", seed_buffer=False),
        tmp_path / "run",
        backends=_backends(_ratio_estimator()),
        progress=False,
    )
    try:
        seen = []
        monkeypatch.setattr(trainer.ppo, "step", lambda batch: seen.append(batch.scores) or {})
        fake_outcomes = iter([(0.9, 3.0), (0.5, 1.0), (0.7, 10.0), (0.8, 2.0)])

        def run_batch(codes, comp, sandbox, timeout_s, executor):
            out = []
            for _ in codes:
                r, t = next(fake_outcomes)
                out.append(
                    types.SimpleNamespace(
                        status="ok",
                        delta=t,
                        score=r,
                        raw_reward=r,
                        valid=True,
                        outcome_text=f"score {r}",
                    )
                )
            return out

        trainer.env.backends.run_batch = run_batch
        # every response "contains" a script
        monkeypatch.setattr("rpg_llm.loop.execution.parse_action", _print_one)
        trainer.step(1)
        trainer.step(2)
        # after step 1: slots (0.9, 3), (0.5, 1) -> rho_1 = 1.4 / 4 = 0.35
        # after step 2: slots (1.6, 13), (1.3, 3) -> rho_2 = 2.9 / 16
        rho1, rho2 = 1.4 / 4, 2.9 / 16
        np.testing.assert_allclose(
            seen[0].numpy(), [0.9 + 0.5 - rho1 * 3.0, 0.5 + 0.5 - rho1 * 1.0], rtol=1e-6
        )
        # step 2: no new best (0.7, 0.8 < 0.9); priced at rho_2, not at rho_1
        np.testing.assert_allclose(
            seen[1].numpy(), [0.7 - rho2 * 10.0, 0.8 - rho2 * 2.0], rtol=1e-6
        )
        assert trainer.env.accounts.rho_hat == pytest.approx(rho2)
    finally:
        trainer.close()


def test_seeds_feed_the_estimator_and_rpg_parents_use_it(tiny_model_dir, tmp_path):
    """Seed solutions are historical samples: rho_hat before step 1 is fitted on them, and RPG
    picks parents by raw_reward - rho_hat * time (vanilla by raw reward)."""
    outcomes = {"slow_good": (0.8, 4.0), "fast_ok": (0.4, 1.0)}

    def run_batch(codes, comp, sandbox, timeout_s, executor):
        out = []
        for code in codes:
            r, t = outcomes[code.strip()]
            out.append(
                types.SimpleNamespace(
                    status="ok",
                    delta=t,
                    score=r,
                    raw_reward=r,
                    valid=True,
                    outcome_text=f"score {r}",
                )
            )
        return out

    order = {}
    for method in ("rpg", "vanilla"):
        b = _backends(_ratio_estimator())
        b.baseline_solutions = lambda comp_id: [(n, n + "\n") for n in outcomes]
        b.run_batch = run_batch
        trainer = Trainer(
            _cfg(tiny_model_dir, method), tmp_path / method, backends=b, progress=False
        )
        try:
            trainer.env.seed()
            trainer.env.rebuild(1)
            assert trainer.env.accounts.rho_hat == pytest.approx((0.8 + 0.4) / (4.0 + 1.0))
            assert trainer.env.accounts.best == pytest.approx(0.8)
            parent_ids = trainer.env.prompts(2, trainer.policy.tokenizer).parent_ids
            codes = {s.id: s.code.strip() for s in trainer.env.step_samples(0)}
            order[method] = [codes[i] for i in parent_ids]
        finally:
            trainer.close()
    # keys at rho = 0.24: slow_good 0.8 - 0.96 = -0.16, fast_ok 0.4 - 0.24 = 0.16
    assert order["rpg"] == ["fast_ok", "slow_good"]
    assert order["vanilla"] == ["slow_good", "fast_ok"]


def _outcome(status, r, t):
    ok = status == "ok"
    return types.SimpleNamespace(
        status=status,
        delta=t,
        score=r if ok else None,
        raw_reward=r if ok else -10.0,
        valid=ok,
        outcome_text=f"{status} {r}",
    )


def test_infra_samples_are_masked_from_ppo_and_the_estimator(tiny_model_dir, tmp_path, monkeypatch):
    """An "infra" outcome (the machine failed, not the script) is stored and counted, but feeds
    neither the slots nor the PPO batch; charged as an invalid sample it would have pulled
    rho_hat to 0 (see the numbers below)."""
    trainer = Trainer(
        _cfg(tiny_model_dir, "rpg", seed_buffer=False),
        tmp_path / "run",
        backends=_backends(_ratio_estimator()),
        progress=False,
    )
    try:
        seen = []
        monkeypatch.setattr(trainer.ppo, "step", lambda batch: seen.append(batch.scores) or {})
        fake = iter([("ok", 0.9, 3.0), ("infra", 0.0, 0.2), ("ok", 0.5, 1.0), ("ok", 0.8, 2.0)])
        trainer.env.backends.run_batch = lambda codes, *a: [_outcome(*next(fake)) for _ in codes]
        monkeypatch.setattr("rpg_llm.loop.execution.parse_action", _print_one)
        rec1, _ = trainer.step(1)
        rec2, _ = trainer.step(2)
        assert [s.status for s in trainer.env.step_samples(1)] == ["ok", "infra"]
        assert (rec1.infra, rec2.infra) == (1, 0)
        # step 1: only slot 0 fed (0.9, 3 s): fewer than 2 slots, rho_hat stays 0
        assert rec1.rho_hat == 0.0
        np.testing.assert_allclose(seen[0].numpy(), [0.9 + 0.5])  # one row, the infra one dropped
        # step 2: slots (1.4, 4 s), (0.8, 2 s) -> 2.2 / 6; with the infra row charged -10 and the
        # 30 s timeout, slot 1 would be (-9.2, 32 s) and rho_hat max(0, -7.8 / 36) = 0
        rho2 = 2.2 / 6.0
        assert rec2.rho_hat == pytest.approx(rho2)
        np.testing.assert_allclose(seen[1].numpy(), [0.5 - rho2 * 1.0, 0.8 - rho2 * 2.0], rtol=1e-6)
    finally:
        trainer.close()


def test_trainable_rows_drop_infra_and_keep_processes_in_step():
    from rpg_llm.loop.update import trainable_rows

    infra = np.array([True, False, False, False, False, False])
    assert trainable_rows(6, 1, 0, infra) == [1, 2, 3, 4, 5]
    # two processes: rank 0 has rows 2, 4 left, rank 1 has 1, 3, 5 -> both train on two rows
    assert trainable_rows(6, 2, 0, infra) == [2, 4]
    assert trainable_rows(6, 2, 1, infra) == [1, 3]
    # a process with no usable row: nobody updates (the same number of optimiser steps)
    assert trainable_rows(4, 2, 1, np.array([True, False, True, False])) == []
    assert trainable_rows(4, 2, 0, np.array([True, False, True, False])) == []
