"""PPO's maths (rpg_llm.learner.losses) against values worked out by hand on tiny tensors and
against the same quantities computed another way (torch's own distributions and statistics, the
closed forms of GAE and of the losses at ratio 1)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from rpg_llm.learner.losses import (
    at_least_float32,
    entropy_from_logits,
    gae,
    kl_penalized_rewards,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
    policy_loss,
    value_loss,
)

F64 = torch.float64


def t(x):
    return torch.tensor(x, dtype=F64)


MASK = t([[1, 1, 1], [1, 1, 0]])


def _ragged(seed: int = 0, B: int = 4, T: int = 6):
    """Random float64 ``x [B, T]`` and a right-padded 0/1 mask with row lengths 1 .. T."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [T, 1, 3, T - 1][:B]
    mask = torch.zeros(B, T, dtype=F64)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return torch.randn(B, T, generator=gen, dtype=F64), mask, gen


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
    parts: Any = sum(
        policy_loss(lp[i : i + 1], old[i : i + 1], adv[i : i + 1], m[i : i + 1], 0.2, n)[0]
        for i in range(2)
    )
    assert parts.item() == pytest.approx(full.item())


def test_logprobs_and_entropy():
    logits = t([[[0.0, math.log(3.0)], [1.0, 1.0]]])
    lp = logprobs_from_logits(logits, torch.tensor([[1, 0]]))
    torch.testing.assert_close(lp, t([[math.log(0.75), math.log(0.5)]]))  # float64 stays float64
    ent = entropy_from_logits(logits)
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(ent, t([[h0, math.log(2.0)]]))
    # bf16 logits are promoted to float32
    assert logprobs_from_logits(logits.bfloat16(), torch.tensor([[1, 0]])).dtype == torch.float32


def test_masked_statistics_equal_torch_on_the_valid_entries():
    x, mask, _ = _ragged()
    valid = x[mask.bool()]
    torch.testing.assert_close(masked_mean(x, mask), valid.mean())
    torch.testing.assert_close(masked_var(x, mask), valid.var(unbiased=True))
    torch.testing.assert_close(masked_var(x, mask, unbiased=False), valid.var(unbiased=False))
    rows = torch.stack([x[b, mask[b].bool()].mean() for b in range(x.shape[0])])
    torch.testing.assert_close(masked_mean(x, mask, dim=1), rows)
    # an empty mask gives 0, not NaN
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0


def test_whitening_without_the_mean_shift_adds_the_mean_back():
    x, mask, _ = _ragged(1)
    mean = x[mask.bool()].mean()
    torch.testing.assert_close(
        masked_whiten(x, mask, shift_mean=False), masked_whiten(x, mask) + mean * mask
    )


def test_logprobs_and_entropy_equal_torch_categorical():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 3, 7, generator=gen, dtype=F64) * 3
    tokens = torch.randint(0, 7, (2, 3), generator=gen)
    dist = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(logprobs_from_logits(logits, tokens), dist.log_prob(tokens))
    torch.testing.assert_close(entropy_from_logits(logits), dist.entropy())
    assert at_least_float32(logits.bfloat16()).dtype == torch.float32
    assert at_least_float32(logits).dtype == F64


def test_kl_rewards_add_up_to_the_score_minus_the_penalty():
    logp, mask, gen = _ragged(3)
    ref = torch.randn(logp.shape, generator=gen, dtype=F64)
    scores = t([1.0, -2.0, 0.5, 3.0])
    rewards, kl = kl_penalized_rewards(scores, logp, ref, mask, kl_coef=0.3)
    torch.testing.assert_close(kl, (logp - ref) * mask)
    torch.testing.assert_close(rewards.sum(1), scores - 0.3 * kl.sum(1))
    # without the penalty the score is the only reward, at the last valid token
    rewards, _ = kl_penalized_rewards(scores, logp, ref, mask, kl_coef=0.0)
    last = mask.sum(1).long() - 1
    expected = torch.zeros_like(rewards)
    expected[torch.arange(4), last] = scores
    torch.testing.assert_close(rewards, expected)


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.9, 0.8), (0.5, 0.0)])
def test_gae_equals_the_discounted_sum_of_td_errors(gamma, lam):
    """``A_t = sum_l (gamma lam)^l delta_{t+l}`` over the row's valid tokens, computed by loops;
    values and rewards on padding must not matter."""
    rewards, mask, gen = _ragged(4)
    values = torch.randn(rewards.shape, generator=gen, dtype=F64)
    pad = (1 - mask) * 99.0
    adv, ret = gae(rewards + pad, values + pad, mask, gamma, lam)
    expected = torch.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        n = int(mask[b].sum())
        v = [float(values[b, i]) for i in range(n)] + [0.0]
        delta = [float(rewards[b, i]) + gamma * v[i + 1] - v[i] for i in range(n)]
        for i in range(n):
            expected[b, i] = sum((gamma * lam) ** k * delta[i + k] for k in range(n - i))
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, (expected + values) * mask)


def test_losses_at_ratio_one_are_the_unclipped_closed_forms():
    """At the rollout's parameters (ratio 1, values within the clip): the surrogate is minus the
    mean advantage with gradient ``-A / n``, the value loss half the mean squared error."""
    old, mask, gen = _ragged(5)
    adv = torch.randn(old.shape, generator=gen, dtype=F64)
    new = old.clone().requires_grad_(True)
    loss, stats = policy_loss(new, old, adv, mask, clip_ratio=0.2)
    torch.testing.assert_close(loss, -masked_mean(adv, mask))
    assert stats["clipfrac"].item() == 0.0 and stats["approx_kl"].item() == 0.0
    loss.backward()
    torch.testing.assert_close(new.grad, -adv * mask / mask.sum())
    ret = torch.randn(old.shape, generator=gen, dtype=F64)
    v = (old + 0.1).requires_grad_(True)
    vf, vf_stats = value_loss(v, old, ret, mask, value_clip=0.5)
    torch.testing.assert_close(vf, 0.5 * masked_mean((old + 0.1 - ret) ** 2, mask))
    assert vf_stats["vf_clipfrac"].item() == 0.0


def test_shapes_are_checked_not_broadcast():
    x, row = t([[0.0, 1.0]]), t([[0.0]])
    with pytest.raises(ValueError, match="shapes differ"):
        gae(x, row, x, 1.0, 1.0)
    with pytest.raises(ValueError, match="shapes differ"):
        policy_loss(x, x, row, x, 0.2)
    with pytest.raises(ValueError, match="shapes differ"):
        value_loss(x, x, x, row, 0.5)
    with pytest.raises(ValueError, match="shapes differ"):
        masked_whiten(x, t([[1.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="do not match tokens"):
        logprobs_from_logits(torch.zeros(1, 2, 5), torch.zeros(1, 3, dtype=torch.long))
