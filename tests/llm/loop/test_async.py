"""The asynchronous loop (``--max-staleness K``): chains at their own pace, staleness bounded,
every sample stored once, a killed driver resumed without loss; PPO against the behaviour
policy."""

from __future__ import annotations

import json
import threading
import types
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace

import fixtures_llm
import pytest
import torch

from rpg_llm.learner.forward import PPOBatch, response_logits
from rpg_llm.learner.losses import logprobs_from_logits
from rpg_llm.learner.policy import load_policy
from rpg_llm.learner.ppo import PPOConfig, PPOTrainer
from rpg_llm.loop.asynchronous import LEDGER, AsyncTrainer
from rpg_llm.loop.buffer import SampleBuffer
from testkit.tiny_trainer import bbc_backends, tiny_edit_config

tiny_model_dir = fixtures_llm.tiny_model_dir
tiny_policy = fixtures_llm.tiny_policy

SECONDS = {0: 4.0, 1: 1.5, 2: 0.6, 3: 0.4}
"""Each chain's script time, seconds: row 0 ten times slower than row 3 (an update of the tiny
model takes about 1-2 s here)."""


def _outcome(row: int):
    r = 0.5 + 0.1 * row
    return types.SimpleNamespace(
        status="ok", delta=SECONDS[row], score=r, raw_reward=r, valid=True,
        outcome_text=f"score {r}", cpu_s=SECONDS[row], percentile=None,
    )  # fmt: skip


class _TimedService:
    """An execution service whose scripts end after their chain's time (a timer thread each),
    so the chains finish out of order; the trainer tells it the chain before each submit."""

    def __init__(self) -> None:
        self.row = 0
        self.timers: list[threading.Timer] = []

    def submit(self, codes: Sequence[str]) -> list[Future]:
        out = []
        for _ in codes:
            f: Future = Future()
            row = self.row
            t = threading.Timer(SECONDS[row], lambda f=f, row=row: f.set_result(_outcome(row)))
            t.start()
            self.timers.append(t)
            out.append(f)
        return out

    def close(self) -> None:
        for t in self.timers:
            t.cancel()


def _trainer(model_dir, run_dir, resume=False, **kw) -> tuple[AsyncTrainer, _TimedService]:
    cfg = tiny_edit_config(
        model_dir, batch_size=4, steps=5, max_staleness=1, workers=4,
        ppo=PPOConfig(micro_batch_size=4, lora_rank=0),
    )  # fmt: skip
    backends = bbc_backends(["nb_tfidf", "logreg_tfidf"])  # the edit prompts' first parents
    trainer = AsyncTrainer(
        replace(cfg, **kw), run_dir, backends=backends, resume=resume, progress=False
    )
    service = _TimedService()
    trainer.env.service.close()
    trainer.env.service = service
    real = trainer._submit

    def submit(answers):  # one answer at a time: the service learns its chain
        for a in answers:
            service.row = a.row
            real([a])

    trainer._submit = submit  # type: ignore[method-assign]
    return trainer, service


def _scripted(monkeypatch):
    """Every answer is a valid edit of the bbc baseline (the tiny model's answers are noise)."""
    from rpg_llm.env.actions import Action

    monkeypatch.setattr(
        "rpg_llm.loop.asynchronous.parse_action",
        lambda text, action, parent: Action("script", "print('ok')\n"),
    )


def test_chains_go_at_their_own_pace_with_staleness_bounded(tiny_model_dir, tmp_path, monkeypatch):
    """K = 1, rows 10x apart in script time: the fast chains run more scripts than the slow
    one; every update trains B = 4 samples at most 1 version old; every sample is stored once,
    each chain's steps are 1, 2, ... without a gap, and each is trained once."""
    _scripted(monkeypatch)
    trainer, _ = _trainer(tiny_model_dir, tmp_path / "run")
    try:
        records = trainer.run()
    finally:
        trainer.close()
    assert [r.step for r in records] == [1, 2, 3, 4, 5]
    assert all(r.ppo["staleness_max"] <= 1.0 for r in records)
    assert any(r.ppo["staleness_max"] == 1.0 for r in records)  # it did run ahead
    with SampleBuffer(tmp_path / "run" / "buffer.sqlite") as buf:
        samples = [s for s in buf.all() if s.step >= 1]
    keys = [(s.row, s.step) for s in samples]
    assert len(keys) == len(set(keys))
    per_row = Counter(s.row for s in samples)
    for row in range(4):
        assert sorted(s.step for s in samples if s.row == row) == list(range(1, per_row[row] + 1))
    assert per_row[3] > per_row[0]  # the cheap chain bought more attempts
    ledger = [json.loads(x) for x in (tmp_path / "run" / LEDGER).read_text().splitlines()]
    trained = [i for e in ledger for i in e["trained"]]
    assert len(trained) == len(set(trained)) == 20  # 5 updates x B = 4, each sample once
    fed = [i for e in ledger for i in e["fed"]]
    assert len(fed) == len(set(fed)) and set(trained) <= set(fed)


def test_a_chain_stops_when_its_budget_is_spent(tiny_model_dir, tmp_path, monkeypatch):
    """Budget 5 s per chain: row 0 (4 s a script) stops after 2 scripts, row 3 (0.4 s) after
    13; the run ends when every chain has spent it, leftovers trained in a last update."""
    _scripted(monkeypatch)
    trainer, _ = _trainer(tiny_model_dir, tmp_path / "run", steps=100, exec_budget_s=5.0)
    try:
        records = trainer.run()
    finally:
        trainer.close()
    with SampleBuffer(tmp_path / "run" / "buffer.sqlite") as buf:
        per_row = Counter(s.row for s in buf.all() if s.step >= 1)
    assert per_row == {0: 2, 1: 4, 2: 9, 3: 13}  # ceil(1.0 / seconds)
    assert len(records) == -(-sum(per_row.values()) // 4)  # 28 samples: 7 updates


def test_a_killed_driver_resumes_without_loss_or_double_counting(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Stopped after the 3rd update's checkpoint with scripts in flight and samples waiting:
    the resumed run replays the feeds, trains the waiting samples, resubmits the answers in
    flight, and every sample is stored and trained once over both parts."""
    _scripted(monkeypatch)
    run = tmp_path / "run"
    trainer, service = _trainer(tiny_model_dir, run, steps=3)
    try:
        trainer.run()  # ends after update 3 with the in-flight scripts stored, not trained
    finally:
        trainer.close()
    with SampleBuffer(run / "buffer.sqlite") as buf:
        first = {(s.row, s.step) for s in buf.all() if s.step >= 1}
    # resume with more steps: what waited is trained first, nothing is stored twice
    again, _ = _trainer(tiny_model_dir, run, steps=6, resume=True)
    try:
        assert again.version == 3
        records = again.run()
    finally:
        again.close()
    assert [r.step for r in records] == [4, 5, 6]
    with SampleBuffer(run / "buffer.sqlite") as buf:
        samples = [s for s in buf.all() if s.step >= 1]
    keys = [(s.row, s.step) for s in samples]
    assert len(keys) == len(set(keys)) and first <= set(keys)
    ledger = [json.loads(x) for x in (run / LEDGER).read_text().splitlines()]
    assert [e["update"] for e in ledger] == [1, 2, 3, 4, 5, 6]
    trained = [i for e in ledger for i in e["trained"]]
    assert len(trained) == len(set(trained)) == 24
    waiting = [s.id for s in samples if (s.row, s.step) in first and s.id not in trained[:12]]
    assert set(waiting) <= set(trained[12:])  # the samples left after update 3 trained later


def test_behaviour_logprobs_equal_to_the_rollouts_give_the_same_update(tiny_model_dir):
    """Against log-probs that equal the rollout policy's, the off-policy ratio is the on-policy
    one: the same parameters and statistics after a step as the general path without them."""
    pol = load_policy(str(tiny_model_dir), device="cpu")
    tok = pol.tokenizer
    q = [tok("import numpy", add_special_tokens=False)["input_ids"], [5, 6, 7, 8]]
    r = [[10, 11, 12], [13, 14]]
    plain = PPOBatch.from_lists(q, r, [1.0, -0.5], tok.pad_token_id)
    results = []
    for use_behaviour in (False, True):
        torch.manual_seed(0)
        actor = load_policy(str(tiny_model_dir), device="cpu").model
        trainer = PPOTrainer(actor, PPOConfig(micro_batch_size=2, actor_lr=1e-2))
        batch = plain
        if use_behaviour:
            with torch.no_grad():
                logits = response_logits(trainer.actor, plain, trainer.temperature)
                lp = logprobs_from_logits(logits, plain.response_ids)
            rows = [lp[b, : len(r[b])].tolist() for b in range(2)]
            batch = PPOBatch.from_lists(q, r, [1.0, -0.5], tok.pad_token_id, rows)
        stats = trainer.step(batch, single_pass=False)
        results.append((stats, [p.detach().clone() for p in trainer.policy.parameters()]))
    (s0, p0), (s1, p1) = results
    for a, b in zip(p0, p1, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert s1 == pytest.approx(s0, rel=1e-4, abs=1e-6)


def test_behaviour_logprobs_of_another_policy_move_the_ratio(tiny_model_dir):
    """Behaviour log-probs 0.5 lower than the policy's (an older, less likely policy): the
    ratio exp(0.5) > 1 + clip on every token, so every advantage-positive token is clipped."""
    pol = load_policy(str(tiny_model_dir), device="cpu")
    tok = pol.tokenizer
    q = [[5, 6, 7, 8], [5, 6, 7, 9]]
    r = [[10, 11, 12], [13, 14, 15]]
    trainer = PPOTrainer(pol.model, PPOConfig(micro_batch_size=2, whiten_advantages=False))
    plain = PPOBatch.from_lists(q, r, [1.0, 1.0], tok.pad_token_id)
    with torch.no_grad():
        lp = logprobs_from_logits(response_logits(trainer.actor, plain, trainer.temperature),
                                  plain.response_ids)  # fmt: skip
    rows = [(lp[b] - 0.5).tolist() for b in range(2)]
    stats = trainer.step(PPOBatch.from_lists(q, r, [1.0, 1.0], tok.pad_token_id, rows))
    assert stats["approx_kl"] == pytest.approx(float(torch.tensor(0.5).exp() - 1 - 0.5), rel=1e-3)
    with pytest.raises(ValueError, match="behaviour log-probs for"):
        PPOBatch.from_lists(q, r, [1.0, 1.0], tok.pad_token_id, [[0.0], [0.0, 0.0, 0.0]])
