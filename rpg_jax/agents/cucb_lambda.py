"""The optimistic reward-rate ``lambda_t`` of C-UCB: brute force and sampled policies.

Source: Gyorgy, Kocsis, Szabo, Szepesvari, "Continuous time associative bandit problems",
IJCAI 2007 (algorithm C-UCB), with the conventions of DESIGN.md section 5.

A deterministic stationary policy ``u`` picks an action ``u(x)`` in every context ``x``. With
per-``(x, a)`` statistics ``n`` (count), ``sum_r`` and ``sum_d`` (sums of reward and duration),

    R_u = sum_x sum_r[x, u(x)],  D_u = sum_x sum_d[x, u(x)],  T_u = sum_x n[x, u(x)],
    f(u) = R_u / D_u - c / sqrt(T_u),        c = sqrt(2 c1 L),
    lambda = max(max_u f(u), 1e-9).

An untried ``(x, a)`` (``n = 0``) has all three statistics 0, so it contributes nothing: a policy
that picks it is scored as if it ignored context ``x``. A policy with ``T_u = 0`` (only untried
actions) has no value and is left out; if every policy is left out, ``lambda = 1e-9``. Durations
must be > 0 (then ``D_u > 0`` whenever ``T_u > 0``).

All functions are pure, jittable, single-seed, and follow the float dtype of ``sum_r``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = [
    "LAMBDA_FLOOR",
    "log1p_int_power",
    "policy_value",
    "group_sums",
    "best_policy_bruteforce",
    "lambda_exact_bruteforce",
    "best_policy_sampled",
]

LAMBDA_FLOOR = 1e-9
"""Lower clip of ``lambda_t`` (DESIGN.md section 5)."""


def log1p_int_power(base: int, exponent: int) -> float:
    """``log(1 + base**exponent)`` in float64 without overflow (e.g. ``|U| = 161**64``)."""
    if base < 1 or exponent < 0:
        raise ValueError(f"need base >= 1 and exponent >= 0, got {base}, {exponent}")
    if base == 1 or exponent == 0:
        return math.log(2.0)
    log_u = exponent * math.log(base)
    return log_u + math.log1p(math.exp(-log_u))


def policy_value(R: jax.Array, D: jax.Array, T: jax.Array, c: jax.typing.ArrayLike) -> jax.Array:
    """``f = R / D - c / sqrt(T)`` elementwise, ``-inf`` where ``T = 0`` (no valid policy).

    Args:
      R, D: reward / duration sums of policies, float, any (equal) shape.
      T: count sums, same shape, float or int.
      c: ``sqrt(2 c1 L)``, scalar.
    """
    T = T.astype(R.dtype)
    ok = T > 0
    safe_t = jnp.where(ok, T, jnp.ones_like(T))
    safe_d = jnp.where(ok, D, jnp.ones_like(D))
    return jnp.where(ok, R / safe_d - c * jax.lax.rsqrt(safe_t), -jnp.inf)


def group_sums(n: jax.Array, sum_r: jax.Array, sum_d: jax.Array, contexts: tuple[int, ...]):
    """Statistics of every joint action of a group of contexts.

    Args:
      n, sum_r, sum_d: ``(C, A)`` statistics.
      contexts: the group, e.g. ``(0, 1)``; may be empty.

    Returns:
      ``(R, D, T)``, each of shape ``(A ** len(contexts),)`` (``(1,)`` zeros when empty), in
      row-major order of the joint action ``(u(contexts[0]), u(contexts[1]), ...)``; ``T`` has
      the dtype of ``sum_r``.
    """
    dtype = sum_r.dtype
    R = jnp.zeros((1,), dtype)
    D = jnp.zeros((1,), dtype)
    T = jnp.zeros((1,), dtype)
    for x in contexts:
        R = (R[:, None] + sum_r[x][None, :]).reshape(-1)
        D = (D[:, None] + sum_d[x][None, :]).reshape(-1)
        T = (T[:, None] + n[x].astype(dtype)[None, :]).reshape(-1)
    return R, D, T


def _split(n_contexts: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    h = (n_contexts + 1) // 2
    return tuple(range(h)), tuple(range(h, n_contexts))


def _unravel(index: jax.Array, n_actions: int, size: int) -> jax.Array:
    """Joint-action index (row-major over ``size`` contexts) to an int32 ``(size,)`` array."""
    digits = []
    for _ in range(size):
        digits.append(index % n_actions)
        index = index // n_actions
    return jnp.stack(digits[::-1]).astype(jnp.int32) if size else jnp.zeros((0,), jnp.int32)


def best_policy_bruteforce(n: jax.Array, sum_r: jax.Array, sum_d: jax.Array, c: jax.Array):
    """``max_u f(u)`` over all ``A**C`` deterministic policies, by full enumeration.

    Contexts are split into two halves; the joint statistics of each half are summed once
    (``A**ceil(C/2)`` and ``A**floor(C/2)`` items) and every pair is evaluated.

    Args:
      n: ``(C, A)`` int counts; sum_r, sum_d: ``(C, A)`` float sums.
      c: scalar ``sqrt(2 c1 L)`` (>= 0).

    Returns:
      ``(value, u)``: the unclipped maximum (``-inf`` if all ``T_u = 0``) and an int32 ``(C,)``
      maximiser (first in row-major order on ties).
    """
    C, A = n.shape
    P, Q = _split(C)
    Rp, Dp, Tp = group_sums(n, sum_r, sum_d, P)
    Rq, Dq, Tq = group_sums(n, sum_r, sum_d, Q)
    vals = policy_value(
        Rp[:, None] + Rq[None, :], Dp[:, None] + Dq[None, :], Tp[:, None] + Tq[None, :], c
    )
    flat = jnp.argmax(vals.reshape(-1))
    i, j = flat // Rq.shape[0], flat % Rq.shape[0]
    u = jnp.concatenate([_unravel(i, A, len(P)), _unravel(j, A, len(Q))])
    return vals.reshape(-1)[flat], u


def lambda_exact_bruteforce(
    n: jax.Array,
    sum_r: jax.Array,
    sum_d: jax.Array,
    c1: jax.typing.ArrayLike,
    log_term: jax.typing.ArrayLike,
) -> jax.Array:
    """``lambda = max(max_u [R_u/D_u - sqrt(2 c1 L / T_u)], 1e-9)`` by full enumeration.

    Args:
      n: ``(C, A)`` counts; sum_r, sum_d: ``(C, A)`` sums (float).
      c1: scalar constant ``c1 >= 0``.
      log_term: scalar ``L``, e.g. ``log max(t, 2) + 0.5 log(1 + |U|)``.

    Returns:
      scalar ``lambda`` of the dtype of ``sum_r``.
    """
    dtype = sum_r.dtype
    c = jnp.sqrt(2.0 * jnp.asarray(c1, dtype) * jnp.asarray(log_term, dtype))
    value, _ = best_policy_bruteforce(n, sum_r, sum_d, c)
    return jnp.maximum(value, jnp.asarray(LAMBDA_FLOOR, dtype))


def best_policy_sampled(
    n: jax.Array,
    sum_r: jax.Array,
    sum_d: jax.Array,
    c: jax.typing.ArrayLike,
    key: jax.Array,
    num: int,
):
    """``max f(u)`` over ``num`` random policies, ``u(x)`` uniform over the tried actions of ``x``.

    A context with no tried action contributes nothing (any pick there has zero statistics).
    Source: DESIGN.md section 5 (the reference's approximation for |X| > 4).

    Returns:
      ``(value, u)``: unclipped maximum over the sample (``-inf`` if no valid policy) and the
      int32 ``(C,)`` maximiser among the sampled policies.
    """
    C, A = n.shape
    tried = n > 0
    cum = jnp.cumsum(tried, axis=1)  # (C, A): number of tried actions up to a
    k = cum[:, -1]  # tried actions per context
    # rank r uniform in [0, k_x), then the action holding that rank: O(M C log A), not O(M C A)
    r = jax.random.randint(key, (num, C), 0, jnp.maximum(k, 1)[None, :])
    u = jax.vmap(lambda cx, rx: jnp.searchsorted(cx, rx, side="right"), in_axes=(0, 1), out_axes=1)(
        cum, r
    )
    u = jnp.minimum(u, A - 1).astype(jnp.int32)  # contexts with nothing tried: any (zero) entry
    rows = jnp.arange(C)[None, :]
    R = jnp.sum(sum_r[rows, u], axis=1)
    D = jnp.sum(sum_d[rows, u], axis=1)
    T = jnp.sum(n[rows, u], axis=1)
    vals = policy_value(R, D, T, c)
    k = jnp.argmax(vals)
    return vals[k], u[k]
