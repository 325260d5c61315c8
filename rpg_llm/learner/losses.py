"""PPO's maths for token sequences, as pure functions of tensors (no model, no optimiser).

Every function takes ``[B, T]`` tensors over right-padded responses with a 0/1 ``mask`` (1 on real
tokens) and is tested against values worked out by hand or computed another way
(``tests/llm/learner/test_losses.py``):

* masked statistics: :func:`masked_mean`, :func:`masked_var`, :func:`masked_whiten`;
* the categorical distribution of a logit vector: :func:`logprobs_from_logits`,
  :func:`entropy_from_logits`;
* token rewards with a KL penalty against a reference policy (Ziegler et al. 2019, "Fine-Tuning
  Language Models from Human Preferences"): :func:`kl_penalized_rewards`;
* generalised advantage estimation (Schulman et al. 2016, "High-Dimensional Continuous Control
  Using Generalized Advantage Estimation"): :func:`gae`;
* the clipped surrogate and the clipped value loss (Schulman et al. 2017, "Proximal Policy
  Optimization Algorithms", eq. 7 and section 5): :func:`policy_loss`, :func:`value_loss`.

Shapes are checked: a mismatch raises ValueError instead of broadcasting.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "at_least_float32",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "logprobs_from_logits",
    "entropy_from_logits",
    "kl_penalized_rewards",
    "gae",
    "policy_loss",
    "value_loss",
]


def _check_shapes(**tensors: torch.Tensor) -> None:
    """ValueError unless every tensor has the shape of the first."""
    shapes = {name: tuple(x.shape) for name, x in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shapes differ: {', '.join(f'{k} {v}' for k, v in shapes.items())}")


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 if its dtype is narrower (bf16, fp16), else unchanged (float32, float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over entries where ``mask`` is 1.

    Args:
        x: float tensor, any shape.
        mask: same shape as ``x``, 0/1 (bool or float).
        dim: reduce over this dimension only (None: over all entries).

    Returns:
        Scalar tensor (or ``x`` reduced over ``dim``) in ``x.dtype``; 0 where the mask is empty.
    """
    mask = mask.to(x.dtype)
    total = (x * mask).sum() if dim is None else (x * mask).sum(dim)
    count = mask.sum() if dim is None else mask.sum(dim)
    return total / count.clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked entries of ``x`` (Bessel-corrected when ``unbiased``).

    Shapes as in :func:`masked_mean`; returns a scalar tensor in ``x.dtype``.
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = mask.to(x.dtype).sum()
        var = var * n / (n - 1).clamp(min=1.0)
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Advantage whitening: ``(x - mean) / sqrt(var + 1e-8)`` over the masked entries.

    The mean and the unbiased variance are taken over all masked entries of the batch; masked-out
    entries are returned as 0. With ``shift_mean=False`` the mean is added back.

    Args:
        x, mask: ``[B, T]``.

    Returns:
        ``[B, T]`` in ``x.dtype``.
    """
    _check_shapes(x=x, mask=mask)
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        out = out + mean
    return out * mask.to(x.dtype)


def logprobs_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probability of ``tokens`` under the categorical distribution ``softmax(logits)``.

    Args:
        logits: ``[B, T, V]`` float.
        tokens: ``[B, T]`` int64 in ``[0, V)``.

    Returns:
        ``[B, T]`` log-probabilities (nats), in float32 at least (float32 for bf16 logits,
        float64 for float64 ones).
    """
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match tokens {tuple(tokens.shape)}")
    logp = F.log_softmax(at_least_float32(logits), dim=-1)
    return torch.gather(logp, 2, tokens.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy ``-sum_v p_v log p_v`` (nats) of ``softmax(logits)`` at each position.

    Args:
        logits: ``[B, T, V]`` float.

    Returns:
        ``[B, T]``, in float32 at least.
    """
    logp = F.log_softmax(at_least_float32(logits), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def kl_penalized_rewards(
    scores: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards: KL penalty at every token, the sequence score at the last one.

    ``r_t = -kl_coef * (log pi(y_t) - log pi_ref(y_t))`` for valid tokens, plus ``scores[b]`` at the
    last valid token of row ``b`` (Ziegler et al. 2019, eq. 2; the k1 KL estimator).

    Args:
        scores: ``[B]`` sequence-level reward (relative reward in RPG).
        logprobs, ref_logprobs: ``[B, T]`` rollout-time log-probs of actor and reference.
        mask: ``[B, T]`` response mask (1 on real tokens, right-padded; at least one per row).
        kl_coef: penalty coefficient (>= 0).

    Returns:
        ``(rewards [B, T], kl [B, T])`` in ``logprobs.dtype``, both zero on masked-out positions.

    Raises:
        ValueError: on shape mismatch or a row with no valid token.
    """
    _check_shapes(logprobs=logprobs, ref=ref_logprobs, mask=mask)
    if scores.shape != (mask.shape[0],):
        raise ValueError(f"scores must have shape ({mask.shape[0]},), got {tuple(scores.shape)}")
    maskf = mask.to(logprobs.dtype)
    lengths = maskf.sum(1).long()
    if (lengths < 1).any():
        raise ValueError("every response needs at least one valid token")
    kl = (logprobs - ref_logprobs) * maskf
    rewards = -kl_coef * kl
    # last valid token index (responses are right-padded, so it is length - 1)
    last = lengths - 1
    rewards = rewards.clone()
    rewards[torch.arange(mask.shape[0]), last] += scores.to(rewards.dtype)
    return rewards, kl


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over right-padded token sequences (Schulman et al. 2016).

    ``delta_t = r_t + gamma V_{t+1} - V_t`` (``V`` beyond the last valid token is 0),
    ``A_t = delta_t + gamma lam A_{t+1}``, returns ``= A + V``. With ``gamma = lam = 1`` this is
    ``A_t = sum_{s >= t} r_s - V_t``.

    Args:
        rewards, values, mask: ``[B, T]`` (values are rollout-time critic outputs).
        gamma, lam: discount and trace parameters in [0, 1].

    Returns:
        ``(advantages [B, T], returns [B, T])`` in ``values.dtype``, zero on masked-out positions.
    """
    _check_shapes(rewards=rewards, values=values, mask=mask)
    maskf = mask.to(values.dtype)
    values = values * maskf
    rewards = rewards * maskf
    T = rewards.shape[1]
    last = torch.zeros_like(rewards[:, 0])
    advs = []
    for t in reversed(range(T)):
        next_v = values[:, t + 1] if t + 1 < T else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last = delta + gamma * lam * last
        last = last * maskf[:, t]
        advs.append(last)
    advantages = torch.stack(advs[::-1], dim=1)
    returns = (advantages + values) * maskf
    return advantages, returns


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio: float,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate loss ``mean(max(-A r, -A clip(r, 1-eps, 1+eps)))``, ``r = exp(lp - old)``.

    The negative of Schulman et al. 2017, eq. 7, averaged over the valid tokens.

    Args:
        logprobs: ``[B, T]`` current log-probs (with gradient).
        old_logprobs, advantages, mask: ``[B, T]`` rollout-time values.
        clip_ratio: epsilon.
        normalizer: divide the masked sum by this token count instead of ``mask.sum()`` (for
            exact gradient accumulation across micro-batches).

    Returns:
        ``(loss scalar, stats)`` with ``clipfrac`` (fraction of tokens where the clipped term
        wins) and ``approx_kl`` (``mean((r-1) - log r)``, the k3 estimator of KL(old || new)).
    """
    _check_shapes(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=mask)
    maskf = mask.to(logprobs.dtype)
    n = maskf.sum().clamp(min=1.0) if normalizer is None else normalizer
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    loss = (torch.maximum(pg1, pg2) * maskf).sum() / n
    with torch.no_grad():
        clipfrac = ((pg2 > pg1).to(maskf.dtype) * maskf).sum() / n
        approx_kl = (((ratio - 1) - log_ratio) * maskf).sum() / n
    return loss, {"clipfrac": clipfrac, "approx_kl": approx_kl}


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_clip: float,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss ``0.5 mean(max((V - G)^2, (V_old + clip(V - V_old, +-c) - G)^2))``.

    The value clipping of the PPO reference implementation (OpenAI baselines ``ppo2``; Engstrom et
    al. 2020, "Implementation Matters in Deep Policy Gradients", section 3), over the valid tokens.

    Args:
        values: ``[B, T]`` current critic outputs (with gradient).
        old_values, returns, mask: ``[B, T]`` rollout-time values, GAE returns, response mask.
        value_clip: c.
        normalizer: as in :func:`policy_loss`.

    Returns:
        ``(loss scalar, stats)`` with ``vf_clipfrac`` (fraction of tokens where the clipped term
        wins).
    """
    _check_shapes(values=values, old_values=old_values, returns=returns, mask=mask)
    maskf = mask.to(values.dtype)
    n = maskf.sum().clamp(min=1.0) if normalizer is None else normalizer
    v_clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    l1 = (values - returns) ** 2
    l2 = (v_clipped - returns) ** 2
    loss = 0.5 * (torch.maximum(l1, l2) * maskf).sum() / n
    with torch.no_grad():
        clipfrac = ((l2 > l1).to(maskf.dtype) * maskf).sum() / n
    return loss, {"vf_clipfrac": clipfrac}
