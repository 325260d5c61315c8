"""PPO maths against values computed by hand on tiny tensors, and the trainer on a tiny model."""

from __future__ import annotations

import math

import fixtures_llm
import pytest
import torch

from rpg_llm.ppo import (
    PPOBatch,
    PPOConfig,
    PPOTrainer,
    entropy_from_logits,
    gae,
    kl_penalized_rewards,
    logprobs_from_logits,
    masked_mean,
    masked_whiten,
    policy_loss,
    value_loss,
)

# fixtures (pytest finds them by name in this module)
tiny_model_dir = fixtures_llm.tiny_model_dir
tiny_policy = fixtures_llm.tiny_policy

F64 = torch.float64


def t(x):
    return torch.tensor(x, dtype=F64)


MASK = t([[1, 1, 1], [1, 1, 0]])


def test_masked_mean_and_whiten_by_hand():
    x = t([[1.0, 2.0, 99.0], [4.0, 99.0, 99.0]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    assert masked_mean(x, mask).item() == pytest.approx(7 / 3)
    # unbiased variance of {1, 2, 4}: (16/9 + 1/9 + 25/9) / 2 = 7/3
    w = masked_whiten(x, mask)
    sd = math.sqrt(7 / 3 + 1e-8)
    expected = t([[(1 - 7 / 3) / sd, (2 - 7 / 3) / sd, 0.0], [(4 - 7 / 3) / sd, 0.0, 0.0]])
    torch.testing.assert_close(w, expected)
    # whitened valid entries: mean 0, unbiased variance 1
    vals = w[mask.bool()]
    assert vals.mean().item() == pytest.approx(0.0, abs=1e-12)
    assert vals.var().item() == pytest.approx(1.0, rel=1e-6)


def test_kl_penalty_in_reward_by_hand():
    logp = t([[-1.0, -2.0, -3.0], [-0.5, -1.0, -9.0]])
    ref = t([[-1.5, -2.0, -2.0], [-1.0, -7.0, -7.0]])
    scores = t([2.0, -1.0])
    rewards, kl = kl_penalized_rewards(scores, logp, ref, MASK, kl_coef=0.1)
    torch.testing.assert_close(kl, t([[0.5, 0.0, -1.0], [0.5, 6.0, 0.0]]))
    # score lands on the last valid token (index 2 in row 0, index 1 in row 1)
    torch.testing.assert_close(rewards, t([[-0.05, 0.0, 0.1 + 2.0], [-0.05, -0.6 - 1.0, 0.0]]))


def test_kl_rewards_reject_bad_shapes():
    with pytest.raises(ValueError, match="shapes differ"):
        kl_penalized_rewards(t([1.0, 1.0]), t([[0.0, 0.0]]), t([[0.0]]), t([[1.0, 1.0]]), 0.1)
    with pytest.raises(ValueError, match="at least one valid token"):
        kl_penalized_rewards(t([1.0]), t([[0.0]]), t([[0.0]]), t([[0.0]]), 0.1)


def test_gae_gamma_lambda_one_is_reward_to_go_minus_value():
    r = t([[1.0, 0.0, 2.0], [0.5, -1.0, 7.0]])
    v = t([[0.5, 1.0, 1.5], [0.2, 0.4, 9.0]])
    adv, ret = gae(r, v, MASK, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, t([[2.5, 1.0, 0.5], [-0.7, -1.4, 0.0]]))
    torch.testing.assert_close(ret, t([[3.0, 2.0, 2.0], [-0.5, -1.0, 0.0]]))


def test_gae_discounted_by_hand():
    r, v = t([[1.0, 0.0, 2.0]]), t([[0.5, 1.0, 1.5]])
    adv, ret = gae(r, v, t([[1, 1, 1]]), gamma=0.9, lam=0.8)
    # delta_2 = 2 - 1.5 = 0.5; delta_1 = 0.9*1.5 - 1 = 0.35; delta_0 = 1 + 0.9*1 - 0.5 = 1.4
    a2 = 0.5
    a1 = 0.35 + 0.72 * a2
    a0 = 1.4 + 0.72 * a1
    torch.testing.assert_close(adv, t([[a0, a1, a2]]))
    torch.testing.assert_close(ret, adv + v)


def test_clipped_surrogate_by_hand_and_its_gradient():
    old = t([[-1.2, -1.5, -1.0]])
    new = t([[-1.0, -2.0, -1.0]]).requires_grad_(True)
    adv = t([[1.0, -2.0, 3.0]])
    loss, stats = policy_loss(new, old, adv, t([[1, 1, 1]]), clip_ratio=0.2)
    # token 0: ratio e^0.2 = 1.2214 > 1.2 with A > 0 -> clipped term -1.2
    # token 1: ratio e^-0.5 = 0.6065 < 0.8 with A < 0 -> clipped term 2 * 0.8 = 1.6
    # token 2: ratio 1 -> -3
    assert loss.item() == pytest.approx((-1.2 + 1.6 - 3.0) / 3)
    assert stats["clipfrac"].item() == pytest.approx(2 / 3)
    r = math.exp(0.2)
    assert stats["approx_kl"].item() == pytest.approx(
        ((r - 1 - 0.2) + (math.exp(-0.5) - 1 + 0.5) + 0.0) / 3
    )
    loss.backward()
    # clipped tokens carry no gradient; the unclipped one: d/dlp (-A e^{lp-old}) / 3 = -3/3
    torch.testing.assert_close(new.grad, t([[0.0, 0.0, -1.0]]))


def test_clipped_value_loss_by_hand():
    v = t([[1.0, 0.0, 1.0]]).requires_grad_(True)
    old = t([[0.0, 0.0, 0.0]])
    ret = t([[0.2, 1.0, 2.0]])
    loss, stats = value_loss(v, old, ret, t([[1, 1, 1]]), value_clip=0.5)
    # token 0: max((0.8)^2, (0.5-0.2)^2) = 0.64; token 1: 1; token 2: max(1, (0.5-2)^2) = 2.25
    assert loss.item() == pytest.approx(0.5 * (0.64 + 1.0 + 2.25) / 3)
    assert stats["vf_clipfrac"].item() == pytest.approx(1 / 3)
    loss.backward()
    # d/dv of 0.5 (v - G)^2 / 3 where unclipped; 0 where the clipped branch wins
    torch.testing.assert_close(v.grad, t([[0.8 / 3, -1.0 / 3, 0.0]]))


def test_normalizer_makes_micro_batches_add_up():
    lp = t([[-1.0, -2.0], [-0.5, -0.1]])
    old = t([[-1.1, -2.0], [-0.4, -0.3]])
    adv = t([[1.0, -1.0], [0.5, 2.0]])
    m = t([[1, 1], [1, 0]])
    full, _ = policy_loss(lp, old, adv, m, 0.2)
    n = float(m.sum())
    parts = sum(
        policy_loss(lp[i : i + 1], old[i : i + 1], adv[i : i + 1], m[i : i + 1], 0.2, n)[0]
        for i in range(2)
    )
    assert parts.item() == pytest.approx(full.item())


def test_logprobs_and_entropy():
    logits = t([[[0.0, math.log(3.0)], [1.0, 1.0]]])
    lp = logprobs_from_logits(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(lp, torch.tensor([[math.log(0.75), math.log(0.5)]]))
    ent = entropy_from_logits(logits)
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(ent, torch.tensor([[h0, math.log(2.0)]]))


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
    from rpg_llm.policy import load_policy

    return load_policy(str(model_dir), device="cpu").model


def test_micro_batch_accumulation_equals_full_batch_gradient(tiny_model_dir):
    grads = []
    for micro in (1, 2):
        actor = _fresh_actor(tiny_model_dir)
        trainer = PPOTrainer(actor, PPOConfig(micro_batch_size=micro, max_grad_norm=1e9))
        from rpg_llm.policy import load_policy

        pol = load_policy(str(tiny_model_dir), device="cpu")
        trainer.step(_batch(pol, [1.0, -0.5]))
        grads.append([p.grad.clone() for p in trainer.policy.parameters() if p.grad is not None])
    assert len(grads[0]) == len(grads[1]) > 0
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def _seq_logps(trainer, batch):
    from rpg_llm.ppo import _response_logits

    with torch.no_grad():
        lp = logprobs_from_logits(_response_logits(trainer.actor, batch), batch.response_ids)
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
