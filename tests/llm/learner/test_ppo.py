"""The PPO trainer on a tiny model: its update paths agree, its updates move the policy the right
way, its checkpoints round-trip; log-probs at the sampling temperature, dropout off in the update.

The maths alone: test_losses.py."""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace

import fixtures_llm
import pytest
import torch

from rpg_llm.learner import ppo
from rpg_llm.learner.forward import response_logits, update_mode
from rpg_llm.learner.losses import logprobs_from_logits
from rpg_llm.learner.policy import chat_prompt_ids, generate, load_policy
from rpg_llm.learner.ppo import PPOBatch, PPOConfig, PPOTrainer, takes_rollout_pass

# fixtures (pytest finds them by name in this module)
tiny_model_dir = fixtures_llm.tiny_model_dir
tiny_policy = fixtures_llm.tiny_policy


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="clip_ratio"):
        PPOConfig(clip_ratio=0.0)
    with pytest.raises(ValueError, match="micro_batch_size"):
        PPOConfig(micro_batch_size=0)


def test_batch_from_lists_layout():
    b = PPOBatch.from_lists([[5, 6], [7]], [[1], [2, 3, 4]], [1.0, -1.0], pad_id=0)
    torch.testing.assert_close(b.query_ids, torch.tensor([[5, 6], [0, 7]]))
    torch.testing.assert_close(b.response_mask, torch.tensor([[1, 0, 0], [1, 1, 1]]))
    torch.testing.assert_close(b.input_ids, torch.tensor([[5, 6, 1, 0, 0], [0, 7, 2, 3, 4]]))
    with pytest.raises(ValueError, match="equal"):
        PPOBatch.from_lists([[1]], [[1], [2]], [0.0], pad_id=0)


def _batch(policy, scores):
    tok = policy.tokenizer
    q = [tok("import numpy", add_special_tokens=False)["input_ids"], [5, 6, 7, 8]]
    r = [[10, 11, 12], [13, 14]]
    return PPOBatch.from_lists(q[: len(scores)], r[: len(scores)], scores, tok.pad_token_id)


def _fresh_actor(model_dir):
    return load_policy(str(model_dir), device="cpu").model


def test_micro_batch_accumulation_equals_full_batch_gradient(tiny_model_dir):
    grads = []
    for micro in (1, 2):
        actor = _fresh_actor(tiny_model_dir)
        trainer = PPOTrainer(actor, PPOConfig(micro_batch_size=micro, max_grad_norm=1e9))
        pol = load_policy(str(tiny_model_dir), device="cpu")
        seen = []  # the accumulated gradients at the optimiser step (step() drops them after)
        real_step = trainer.actor_opt.step

        def spy(*a, _seen=seen, _real=real_step, _t=trainer, **kw):
            _seen.append([p.grad.clone() for p in _t.policy.parameters() if p.grad is not None])
            return _real(*a, **kw)

        trainer.actor_opt.step = spy
        trainer.step(_batch(pol, [1.0, -0.5]))
        assert len(seen) == 1
        assert all(p.grad is None for p in trainer.policy.parameters())
        grads.append(seen[0])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def _count_forwards(module, counts, name):
    def hook(*_):
        counts[name] = counts.get(name, 0) + 1

    return module.register_forward_hook(hook)


def _steps(model_dir, cfg, batches, single_pass):
    """One step per batch of a fresh trainer: per-step statistics, final actor + critic
    parameters and the forward counts of each model."""
    torch.manual_seed(0)  # the same LoRA A initialisation in every trainer
    trainer = PPOTrainer(_fresh_actor(model_dir), cfg)
    counts: dict[str, int] = {}
    _count_forwards(trainer.actor, counts, "actor")
    _count_forwards(trainer.critic, counts, "critic")
    stats = [trainer.step(b, single_pass=single_pass) for b in batches]
    params = [p.detach().clone() for p in trainer.policy.parameters()]
    params += [p.detach().clone() for p in trainer.critic.parameters()]
    return stats, params, counts


def _assert_same_steps(s1, p1, s2, p2):
    for a, b in zip(s1, s2, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-5, abs=1e-7), k
    # Adam moves each parameter by ~lr = 3e-3 per step whatever its gradient's size, so float
    # rounding in a near-zero gradient shows as ~1e-6 here; a wrong gradient moves it by ~lr
    for a, b in zip(p1, p2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_single_pass_update_equals_the_two_pass_update(tiny_model_dir, tiny_policy, lora_rank):
    """One micro-batch: the update's own forwards replace the no-grad rollout forwards, with the
    same parameters, statistics and KL after two steps (the second has a moved policy, non-zero
    values and KL), and one actor and one critic forward fewer per step."""
    cfg = PPOConfig(actor_lr=3e-3, critic_lr=3e-3, kl_coef=0.5, lora_rank=lora_rank)
    batches = [_batch(tiny_policy, [1.0, -0.5]), _batch(tiny_policy, [0.25, 2.0])]
    (s1, p1, c1), (s2, p2, c2) = (_steps(tiny_model_dir, cfg, batches, x) for x in (False, True))
    assert s1[1]["kl"] > 1e-4 and abs(s1[1]["value_mean"]) > 1e-4  # the second step tests them
    _assert_same_steps(s1, p1, s2, p2)
    # per step: the general path runs actor and critic twice (rollout pass, update) plus the
    # reference (the actor with its adapters off under LoRA); the single pass once each
    ref = 1 if lora_rank else 0
    assert c1 == {"actor": 2 * (2 + ref), "critic": 2 * 2}
    assert c2 == {"actor": 2 * (1 + ref), "critic": 2 * 1}
    # the default takes the single pass here; more than one micro-batch needs the general path
    torch.manual_seed(0)
    assert PPOTrainer(_fresh_actor(tiny_model_dir), cfg).step(batches[0]) == pytest.approx(s2[0])
    two_micro = PPOTrainer(_fresh_actor(tiny_model_dir), PPOConfig(micro_batch_size=1))
    with pytest.raises(ValueError, match="micro_batch_size 1 for a batch of 2"):
        two_micro.step(batches[0], single_pass=True)


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_the_critic_update_in_the_rollout_pass_equals_the_two_pass_update(
    tiny_model_dir, tiny_policy, lora_rank
):
    """One epoch, one mini-batch of two micro-batches: the critic's update folded into the
    rollout pass gives the parameters and statistics of the plain path, one critic forward
    fewer per micro-batch; a second epoch takes the plain path."""
    cfg = PPOConfig(
        actor_lr=3e-3, critic_lr=3e-3, kl_coef=0.5, lora_rank=lora_rank, micro_batch_size=1
    )
    batches = [_batch(tiny_policy, [1.0, -0.5]), _batch(tiny_policy, [0.25, 2.0])]
    (s1, p1, c1), (s2, p2, c2) = (_steps(tiny_model_dir, cfg, batches, x) for x in (False, None))
    assert s1[1]["kl"] > 1e-4 and abs(s1[1]["value_mean"]) > 1e-4
    assert s1[1]["vf_loss"] > 1e-4 and s1[1]["critic_grad_norm"] > 1e-4
    _assert_same_steps(s1, p1, s2, p2)
    # the batch's lengths, by hand: prompts of len("import numpy") and 4 tokens, answers 3 and 2
    q = len(tiny_policy.tokenizer("import numpy", add_special_tokens=False)["input_ids"])
    assert s1[0]["query_len"] == (q + 4) / 2 and s1[0]["response_len"] == 2.5
    assert s1[0]["seq_len"] == max(q, 4) + 3
    ref = 1 if lora_rank else 0  # forwards of one row each: 2 rows x 2 steps
    assert c1 == {"actor": 4 * (2 + ref), "critic": 4 * 2}
    assert c2 == {"actor": 4 * (2 + ref), "critic": 4 * 1}
    torch.manual_seed(0)
    two_epochs = PPOTrainer(_fresh_actor(tiny_model_dir), replace(cfg, ppo_epochs=2))
    counts = {}
    _count_forwards(two_epochs.critic, counts, "critic")
    two_epochs.step(batches[0])
    assert counts == {"critic": 2 * (1 + 2)}  # rollout pass, then one per epoch


def test_one_dispatch_chooses_the_update_path():
    """The rollout pass exactly where one epoch meets one mini-batch; ``single_pass`` False forces
    the general path, True demands one micro-batch (the single pass)."""
    cases = [
        # (ppo_epochs, mini_batch_size, micro_batch_size, single_pass), B = 4 -> rollout pass
        ((1, None, 4, None), True),  # the single pass
        ((1, None, 1, None), True),  # the critic's update in the rollout pass
        ((1, 4, 2, None), True),
        ((1, None, 4, True), True),
        ((1, 2, 1, None), False),  # two mini-batches
        ((2, None, 4, None), False),  # two epochs
        ((1, None, 4, False), False),
        ((1, None, 1, False), False),
    ]
    for (epochs, mini, micro, single_pass), expected in cases:
        cfg = PPOConfig(ppo_epochs=epochs, mini_batch_size=mini, micro_batch_size=micro)
        assert takes_rollout_pass(cfg, 4, single_pass) is expected, (epochs, mini, micro)
    for epochs, mini, micro in ((2, None, 4), (1, 2, 4), (1, None, 2)):
        cfg = PPOConfig(ppo_epochs=epochs, mini_batch_size=mini, micro_batch_size=micro)
        with pytest.raises(ValueError, match="single_pass=True needs one epoch"):
            takes_rollout_pass(cfg, 4, True)


def _batches3(policy):
    """Three batches of rows with different prompt and answer lengths (the last of two rows)."""
    tok = policy.tokenizer
    q = [tok("import numpy", add_special_tokens=False)["input_ids"], [5, 6, 7, 8], [9, 10]]
    r = [[10, 11, 12], [13, 14], [15, 16, 17, 18]]
    pad = tok.pad_token_id
    return [
        PPOBatch.from_lists(q, r, [1.0, -0.5, 0.3], pad),
        PPOBatch.from_lists(q[::-1], r, [0.25, 2.0, -1.0], pad),
        PPOBatch.from_lists(q[:2], r[:2], [-1.0, 0.5], pad),
    ]


@pytest.mark.parametrize(
    "settings",
    [
        dict(micro_batch_size=2),
        dict(micro_batch_size=2, lora_rank=4),
        dict(gamma=0.9, lam=0.8, whiten_advantages=False),
        dict(micro_batch_size=1, gamma=0.9, lam=0.8, entropy_coef=0.1, max_grad_norm=0.01),
    ],
    ids=["micro-2-of-3", "micro-2-of-3-lora", "single-discounted", "micro-1-clipped"],
)
def test_the_rollout_pass_equals_the_general_path(tiny_model_dir, tiny_policy, settings):
    """Three steps on batches of three and two rows with different lengths: the path the
    defaults take (the rollout pass: uneven micro-batches, one micro-batch, the gradient
    clipped, discounted unwhitened advantages) gives the statistics and parameters of the
    general path."""
    cfg = PPOConfig(actor_lr=3e-3, critic_lr=3e-3, kl_coef=0.5, **settings)
    batches = _batches3(tiny_policy)
    (s1, p1, c1), (s2, p2, c2) = (_steps(tiny_model_dir, cfg, batches, x) for x in (False, None))
    assert c2["critic"] < c1["critic"]  # the default took the rollout pass
    assert abs(s1[1]["kl"]) > 1e-4 and abs(s1[1]["value_mean"]) > 1e-4  # later steps test them
    assert s1[-1]["vf_loss"] > 1e-4 and s1[-1]["critic_grad_norm"] > 1e-4
    _assert_same_steps(s1, p1, s2, p2)


def _seq_logps(trainer, batch):
    with torch.no_grad():
        logits = response_logits(trainer.actor, batch, trainer.temperature)
        lp = logprobs_from_logits(logits, batch.response_ids)
    return (lp * batch.response_mask).sum(1)


def test_positive_score_raises_response_logprob(tiny_model_dir, tiny_policy):
    cfg = PPOConfig(actor_lr=3e-3, critic_lr=3e-3, kl_coef=0.0, whiten_advantages=False)
    trainer = PPOTrainer(_fresh_actor(tiny_model_dir), cfg)
    batch = _batch(tiny_policy, [1.0])
    before = _seq_logps(trainer, batch)
    stats = [trainer.step(batch) for _ in range(3)]
    assert float(_seq_logps(trainer, batch)[0]) > float(before[0]) + 1e-3
    # rollout-time KL against the frozen reference starts at exactly 0, then grows
    assert stats[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert stats[-1]["kl"] > 0.0
    # zero-initialised value head: first advantages equal the score on every token
    assert stats[0]["advantage_mean"] == pytest.approx(1.0, abs=1e-6)


def test_whitened_advantages_push_better_response_up(tiny_model_dir, tiny_policy):
    cfg = PPOConfig(actor_lr=3e-3, critic_lr=3e-3)
    trainer = PPOTrainer(_fresh_actor(tiny_model_dir), cfg)
    batch = _batch(tiny_policy, [1.0, -1.0])
    before = _seq_logps(trainer, batch)
    s = [trainer.step(batch) for _ in range(3)]
    after = _seq_logps(trainer, batch)
    assert float(after[0]) > float(before[0]) and float(after[1]) < float(before[1])
    assert s[0]["advantage_mean"] == pytest.approx(0.0, abs=1e-5)


def test_checkpoint_roundtrip(tiny_model_dir, tiny_policy, tmp_path):
    trainer = PPOTrainer(_fresh_actor(tiny_model_dir), PPOConfig(actor_lr=1e-3))
    trainer.step(_batch(tiny_policy, [1.0, 0.0]))
    trainer.save(tmp_path / "ckpt")
    other = PPOTrainer(_fresh_actor(tiny_model_dir), PPOConfig(actor_lr=1e-3))
    other.load(tmp_path / "ckpt")
    for a, b in zip(trainer.policy.parameters(), other.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert other.num_updates == 1
    s1 = trainer.step(_batch(tiny_policy, [0.5, 1.0]))
    s2 = other.step(_batch(tiny_policy, [0.5, 1.0]))
    assert s1["pg_loss"] == pytest.approx(s2["pg_loss"], rel=1e-5)


def test_lora_trainer_steps(tiny_model_dir, tiny_policy):
    trainer = PPOTrainer(_fresh_actor(tiny_model_dir), PPOConfig(lora_rank=4, actor_lr=1e-3))
    assert trainer.ref is None
    s = trainer.step(_batch(tiny_policy, [1.0, -1.0]))
    assert all(math.isfinite(v) for v in s.values())
    assert s["kl"] == pytest.approx(0.0, abs=1e-6)  # LoRA B starts at zero: actor == reference


# ----------------------------------------------------------------------------------------------
# Log-probs at the sampling temperature; dropout off in the update
# ----------------------------------------------------------------------------------------------

SAMPLE_T = 0.7


@pytest.fixture(scope="module")
def dropout_model_dir(tmp_path_factory):
    """The tiny model with attention dropout 0.1 in its config."""
    from testkit.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_dropout") / "tiny", dropout=0.1)


def _load(model_dir, dtype=torch.float32):
    return load_policy(str(model_dir), device="cpu", dtype=dtype)


def _sampled_batch(pol, seed=1, max_new_tokens=16):
    """Responses sampled at T 0.7, top-k 20, top-p 0.8 for prompts of different lengths."""
    tok = pol.tokenizer
    prompts = ["write code", "hi", "import numpy as np and pandas as pd, then fit a model"]
    q = [chat_prompt_ids(tok, p) for p in prompts]
    gen = generate(pol, q, max_new_tokens, temperature=SAMPLE_T, top_k=20, top_p=0.8, seed=seed)
    batch = PPOBatch.from_lists(
        gen.query_ids, gen.response_ids, [1.0, -0.5, 0.25], tok.pad_token_id
    )
    return gen, batch


def _padded(rows, like):
    out = torch.zeros_like(like)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=like.dtype)
    return out


@pytest.mark.parametrize(
    ("train_temperature", "matches"),
    [(SAMPLE_T, True), (1.0, False)],  # 1.0: the old convention (raw logits)
    ids=["logits-over-T", "old-raw-logits"],
)
def test_training_logprobs_equal_the_samplers_at_its_temperature(
    dropout_model_dir, train_temperature, matches
):
    """Old (rollout-time), reference and actor log-probs of each sampled token equal the
    sampler's own log-prob at T to 1e-5 (float64 model); the raw-logit convention misses."""
    pol = _load(dropout_model_dir, torch.float64)
    gen, batch = _sampled_batch(pol)
    assert len(gen.logprobs) == 3
    assert [len(lp) for lp in gen.logprobs] == [len(r) for r in gen.response_ids]
    trainer = PPOTrainer(pol.model, PPOConfig(), temperature=train_temperature)
    roll = trainer._rollout_stats(batch)
    sampler = _padded(gen.logprobs, roll["old_logprobs"])
    mask = batch.response_mask.bool()
    with update_mode(trainer.actor):  # the actor's forward of the update, with gradients
        logits = response_logits(trainer.actor, batch, trainer.temperature)
        actor_lp = logprobs_from_logits(logits, batch.response_ids)
    assert actor_lp.requires_grad
    for name, lp in [
        ("old", roll["old_logprobs"]),
        ("ref", roll["ref_logprobs"]),
        ("actor", actor_lp),
    ]:
        gap = (lp.detach() - sampler)[mask].abs().max().item()
        if matches:
            assert gap <= 1e-5, (name, gap)
        else:
            assert gap > 1e-2, (name, gap)
    # each sampled token's log-prob is a real probability (the token was in the top-k set)
    assert (sampler[mask] < 0).all() and (sampler[mask] > math.log(1e-12)).all()


@contextlib.contextmanager
def _old_train_mode(*models):
    """The old update: ``model.train()``, dropout on."""
    for m in models:
        m.train()
    yield


@pytest.mark.parametrize("mode", ["eval", "old-train"])
def test_lr_zero_gives_ratio_one_and_zero_kl_with_dropout_in_the_config(
    dropout_model_dir, monkeypatch, mode
):
    """Dropout 0.1 in the config: at lr 0 the update's ratio is exactly 1, approx-KL and clip
    fraction 0, over two epochs of single-sample mini-batches. In train mode (the old update,
    parametrised) dropout makes the ratio differ from 1 and the test's assertion fail."""
    if mode == "old-train":
        monkeypatch.setattr(ppo, "update_mode", _old_train_mode)
    pol = _load(dropout_model_dir)
    assert pol.model.config.attention_dropout == 0.1
    _, batch = _sampled_batch(pol)
    cfg = PPOConfig(ppo_epochs=2, mini_batch_size=1, micro_batch_size=1)
    trainer = PPOTrainer(pol.model, cfg, temperature=SAMPLE_T)
    for opt in (trainer.actor_opt, trainer.critic_opt):
        for group in opt.param_groups:
            group["lr"] = 0.0
    torch.manual_seed(0)
    stats = trainer.step(batch)
    assert stats["actor_grad_norm"] > 0  # gradients flowed: a real update, at lr 0
    ratio_one = stats["approx_kl"] <= 1e-10 and stats["clipfrac"] == 0.0
    assert ratio_one == (mode == "eval"), stats


def test_update_mode_keeps_gradient_checkpointing(dropout_model_dir):
    """Eval mode must not switch gradient checkpointing off: with it on, the attention modules
    run again in the backward pass (the recomputation)."""
    calls = {}
    for ckpt in (False, True):
        pol = _load(dropout_model_dir)
        if ckpt:
            pol.model.gradient_checkpointing_enable()
        _, batch = _sampled_batch(pol, max_new_tokens=6)
        n = [0]

        def count(*_, n=n):
            n[0] += 1

        attn = [m for name, m in pol.model.named_modules() if name.endswith("self_attn")]
        assert attn
        for m in attn:
            m.register_forward_hook(count)
        with update_mode(pol.model):
            logits = response_logits(pol.model, batch, SAMPLE_T)
            logits.sum().backward()
        assert not pol.model.training  # modes restored? (eval before, eval after)
        calls[ckpt] = n[0]
    assert calls[True] == 2 * calls[False]


def test_update_mode_restores_modes(tiny_model_dir):
    model = _fresh_actor(tiny_model_dir).train()
    with update_mode(model):
        assert not any(m.training for m in model.modules())
    assert all(m.training for m in model.modules())


def test_temperature_is_checked_early(tiny_model_dir):
    for bad in (0.0, -1.0, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="temperature"):
            PPOTrainer(_fresh_actor(tiny_model_dir), PPOConfig(), temperature=bad)
