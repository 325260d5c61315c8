"""C-UCB: the continuous-time UCB agent of Gyorgy, Kocsis, Szabo and Szepesvari (IJCAI 2007).

Pure, single-seed, jittable functions with the ``Agent`` interface (``rpg_jax.agents.base``);
conventions of DESIGN.md section 5. ``A = K + 1`` actions per context (SKIP is an ordinary
action here), ``C`` contexts, ``|U| = A**C`` deterministic policies.

Time index. ``state.t`` counts the decisions already taken. The decision being made is number
``t = state.t + 1`` (1-based), and everything at that decision uses this ``t``:

    L_t = log max(t, 2) + 0.5 log(1 + |U|)
    lambda_t = max( max_u [R_u / D_u - sqrt(2 c1 L'_t / T_u)], 1e-9 )   (``cucb_lambda``)
    a_t = argmax_a [sum_r/n - lambda_t sum_d/n + c2 sqrt(L_t / n)]      over the actions of x_t

with ``L'_t = L_t`` for the exact agent and ``L'_t = log max(t, 2) + 0.5 log(1 + M)`` for the
sampled one (M sampled policies replace the ``|U|`` policies in ``lambda_t`` only). Before the
index is used, every action of ``x_t`` is pulled once: while some action of ``x_t`` is untried,
``a_t`` is the lowest untried index. Ties in the index go to the lowest action index.

``lambda_t`` depends only on the statistics and on ``t``, not on ``x_t``, so ``update`` computes
it right after the statistics of decision ``t - 1`` are recorded and stores it in the state
(``state.lam``, with the maximising policy ``state.u_best``); ``act`` only reads it.

Variants (``make_cucb``):
- ``exact=True``: exact maximum over all ``A**C`` policies (``cucb_fast.best_policy_exact``,
  branch and bound, equal to full enumeration up to float rounding; ``bruteforce=True`` uses
  plain full enumeration instead).
- ``exact=False``: ``M`` policies drawn each decision, ``u(x)`` uniform over the actions already
  tried in ``x`` (DESIGN.md section 5, for |X| > 4).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from rpg_jax.agents.base import Agent
from rpg_jax.agents.cucb_fast import best_policy_exact
from rpg_jax.agents.cucb_lambda import (
    LAMBDA_FLOOR,
    best_policy_bruteforce,
    best_policy_sampled,
    log1p_int_power,
)

__all__ = [
    "CUCBHyper",
    "CUCBState",
    "make_cucb",
    "theory_constants",
    "cucb_index",
    "MAX_EXACT_POLICIES",
]

MAX_EXACT_POLICIES = 10**8
"""``make_cucb(exact=True)`` refuses more policies than this (use the sampled variant)."""


class CUCBHyper(NamedTuple):
    """C-UCB constants (JAX or NumPy scalars of shape ``()``, so grids vmap).

    Attributes:
      c1: width constant of ``lambda_t`` (>= 0). Tuned grid 1e-2 ... 1e2.
      c2: width constant of the action index (>= 0). Tuned grid 1e-4 ... 1 (large: 0, 1e-6 ... 1).
    """

    c1: Any
    c2: Any


class CUCBState(NamedTuple):
    """State of C-UCB for one seed (``C`` contexts, ``A`` actions).

    Attributes:
      n: ``(C, A)`` int32 counts.
      sum_r: ``(C, A)`` float sums of rewards.
      sum_d: ``(C, A)`` float sums of durations (time units).
      t: ``()`` int32, number of decisions taken so far.
      lam: ``()`` float, ``lambda`` for the next decision (number ``t + 1``).
      u_best: ``(C,)`` int32, a policy attaining ``lam`` (before the 1e-9 clip; all zeros while
        no policy has been tried).
    """

    n: jax.Array
    sum_r: jax.Array
    sum_d: jax.Array
    t: jax.Array
    lam: jax.Array
    u_best: jax.Array


def theory_constants(rbar: np.ndarray, dbar: np.ndarray) -> CUCBHyper:
    """The theoretical constants ``c1, c2`` of C-UCB from a table of true means (incl. SKIP).

    ``c1 = 2 max{(rmax - rmin)^2 / dmin^2, rmax^2 (dmax - dmin)^2 / dmin^4}``,
    ``c2 = a0 + a1``, ``a0 = sqrt(8 max{(rmax - rmin)^2, rmax^2 (dmax - dmin)^2 / dmin^2})``,
    ``a1 = sqrt(2 dmax^2 c1)``, extremes over all entries (DESIGN.md section 5, Gyorgy et al. 2007).

    Args:
      rbar, dbar: ``(C, A)`` mean rewards / durations (durations > 0).

    Returns:
      ``CUCBHyper`` of Python floats.

    Raises:
      ValueError: shapes differ, values are not finite, or a duration is not > 0.
    """
    rbar = np.asarray(rbar, dtype=np.float64)
    dbar = np.asarray(dbar, dtype=np.float64)
    if rbar.shape != dbar.shape or rbar.size == 0:
        raise ValueError(f"rbar {rbar.shape} and dbar {dbar.shape} must be equal, non-empty")
    if not (np.all(np.isfinite(rbar)) and np.all(np.isfinite(dbar))):
        raise ValueError("rbar and dbar must be finite")
    if np.any(dbar <= 0):
        raise ValueError(f"durations must be > 0, got min dbar = {dbar.min()}")
    rmax, rmin = float(rbar.max()), float(rbar.min())
    dmax, dmin = float(dbar.max()), float(dbar.min())
    c1 = 2.0 * max((rmax - rmin) ** 2 / dmin**2, rmax**2 * (dmax - dmin) ** 2 / dmin**4)
    a0 = math.sqrt(8.0 * max((rmax - rmin) ** 2, rmax**2 * (dmax - dmin) ** 2 / dmin**2))
    a1 = math.sqrt(2.0 * dmax**2 * c1)
    return CUCBHyper(c1=c1, c2=a0 + a1)


def cucb_index(
    n: jax.Array,
    sum_r: jax.Array,
    sum_d: jax.Array,
    lam: jax.typing.ArrayLike,
    c2: jax.typing.ArrayLike,
    L: jax.typing.ArrayLike,
) -> jax.Array:
    """Optimistic index ``sum_r/n - lam sum_d/n + c2 sqrt(L/n)``; ``+inf`` where ``n = 0``.

    Any (common) shape of ``n, sum_r, sum_d``; scalars ``lam, c2, L``; float dtype of ``sum_r``.
    """
    dtype = sum_r.dtype
    nf = n.astype(dtype)
    safe = jnp.where(n > 0, nf, jnp.ones_like(nf))
    idx = (sum_r - lam * sum_d) / safe + jnp.asarray(c2, dtype) * jnp.sqrt(L / safe)
    return jnp.where(n > 0, idx, jnp.inf)


def _float_dtype(value) -> Any:
    dt = jnp.result_type(value)
    return dt if jnp.issubdtype(dt, jnp.floating) else jnp.result_type(float)


def make_cucb(
    n_contexts: int,
    n_actions: int,
    *,
    exact: bool = True,
    num_sampled_policies: int = 2048,
    bruteforce: bool = False,
) -> Agent:
    """Build the C-UCB agent (module docstring) for ``C`` contexts and ``A`` actions.

    Args:
      n_contexts: ``C >= 1``; n_actions: ``A >= 1`` (incl. SKIP).
      exact: maximum over all ``A**C`` policies in ``lambda_t``; else over
        ``num_sampled_policies`` random ones each decision.
      num_sampled_policies: ``M >= 1`` (sampled variant only).
      bruteforce: exact variant by plain full enumeration (tests, benchmarks, small ``A**C``).

    Returns:
      ``Agent(init, act, update, n_contexts=C, n_actions=A)`` (``rpg_jax.simulate.simulate``
      refuses an environment of another size); ``hyper`` is a :class:`CUCBHyper`, the state a
      :class:`CUCBState` whose float dtype is that of ``hyper.c1``.

    Raises:
      ValueError: non-positive sizes, ``M < 1``, or ``exact`` with more than
        ``MAX_EXACT_POLICIES`` policies.
    """
    C, A, M = int(n_contexts), int(n_actions), int(num_sampled_policies)
    if C < 1 or C != n_contexts:
        raise ValueError(f"n_contexts must be a positive int, got {n_contexts!r}")
    if A < 1 or A != n_actions:
        raise ValueError(f"n_actions must be a positive int, got {n_actions!r}")
    if not exact and (M < 1 or M != num_sampled_policies):
        raise ValueError(
            f"num_sampled_policies must be a positive int, got {num_sampled_policies!r}"
        )
    if exact and C * math.log(A) > math.log(MAX_EXACT_POLICIES):
        raise ValueError(
            f"exact C-UCB over A**C = {A}**{C} policies is too large (> {MAX_EXACT_POLICIES}); "
            "use exact=False (sampled policies)"
        )
    log1p_u = log1p_int_power(A, C)
    log1p_lam = log1p_u if exact else math.log1p(M)

    if exact and not bruteforce:

        def best(n, sr, sd, c, u_prev, key):
            return best_policy_exact(n, sr, sd, c, u_prev)
    elif exact:

        def best(n, sr, sd, c, u_prev, key):
            return best_policy_bruteforce(n, sr, sd, c)
    else:

        def best(n, sr, sd, c, u_prev, key):
            return best_policy_sampled(n, sr, sd, c, key, M)

    def init(hyper: CUCBHyper, key: jax.Array) -> CUCBState:
        dtype = _float_dtype(hyper.c1)
        return CUCBState(
            n=jnp.zeros((C, A), jnp.int32),
            sum_r=jnp.zeros((C, A), dtype),
            sum_d=jnp.zeros((C, A), dtype),
            t=jnp.zeros((), jnp.int32),
            lam=jnp.asarray(LAMBDA_FLOOR, dtype),
            u_best=jnp.zeros((C,), jnp.int32),
        )

    def act(state: CUCBState, hyper: CUCBHyper, x: jax.Array, key: jax.Array) -> jax.Array:
        chex.assert_shape([state.n, state.sum_r, state.sum_d], (C, A))
        chex.assert_rank(x, 0)
        dtype = state.sum_r.dtype
        t = (state.t + 1).astype(dtype)
        L = jnp.log(jnp.maximum(t, 2.0)) + 0.5 * log1p_u
        n_x = state.n[x]
        idx = cucb_index(n_x, state.sum_r[x], state.sum_d[x], state.lam, hyper.c2, L)
        untried = n_x == 0
        return jnp.where(
            jnp.any(untried), jnp.argmax(untried), jnp.argmax(jnp.where(untried, -jnp.inf, idx))
        ).astype(jnp.int32)

    def update(
        state: CUCBState,
        hyper: CUCBHyper,
        x: jax.Array,
        a: jax.Array,
        r: jax.Array,
        delta: jax.Array,
        key: jax.Array,
    ) -> CUCBState:
        chex.assert_shape([state.n, state.sum_r, state.sum_d], (C, A))
        chex.assert_shape(state.u_best, (C,))
        chex.assert_rank([x, a, r, delta], 0)
        dtype = state.sum_r.dtype
        n = state.n.at[x, a].add(1)
        sum_r = state.sum_r.at[x, a].add(jnp.asarray(r, dtype))
        sum_d = state.sum_d.at[x, a].add(jnp.asarray(delta, dtype))
        t = state.t + 1
        t_next = (t + 1).astype(dtype)
        L_lam = jnp.log(jnp.maximum(t_next, 2.0)) + 0.5 * log1p_lam
        c = jnp.sqrt(2.0 * jnp.asarray(hyper.c1, dtype) * L_lam)
        value, u = best(n, sum_r, sum_d, c, state.u_best, key)
        found = value > -jnp.inf
        lam = jnp.maximum(value, jnp.asarray(LAMBDA_FLOOR, dtype))
        u_best = jnp.where(found, u, state.u_best)
        return CUCBState(n, sum_r, sum_d, t, lam.astype(dtype), u_best.astype(jnp.int32))

    return Agent(init=init, act=act, update=update, n_contexts=C, n_actions=A)
