"""NPG-NIW (= RPG in the bandit) and SPG-NIW: softmax policy gradient on the relative value.

Source: Tian & Yang (2026), "Reward-rate Policy Gradient ...", section "Natural policy gradient
and reward-rate RL" and the bandit experiments; update rules and bookkeeping as recorded in
DESIGN.md section 5. Pure, single-seed, jittable functions; the simulator scans over decisions and
vmaps over seeds / hyper-parameter grids.

Per context ``x`` the policy is ``pi[x] = softmax(theta[x])``. Arm statistics per ``(x, a)``:
count ``n``, sums ``sum_r`` and ``sum_d`` (duration). With the current reward-rate estimate
``rho_hat`` the relative value estimate is

    Q(x, a) = (sum_r(x, a) - rho_hat * sum_d(x, a)) / n(x, a),   and Q(x, a) = 0 when n(x, a) = 0.

- NPG (natural=True):  ``theta[x] += lr * (Q[x] - pi[x] . Q[x])``
- SPG (natural=False): ``theta[x] += lr * pi[x] * (Q[x] - pi[x] . Q[x])``

One decision ``t`` (0-based; ``state.t`` counts decisions already processed) in context ``x`` with
action ``a``, reward ``r`` and duration ``delta`` updates the state in this order:

1. ``greedy = (a == argmax theta[x])`` with ``theta`` BEFORE this decision's update (lowest index
   on ties, so with ``theta = 0`` action 0 is the greedy one).
2. Arm statistics of ``(x, a)`` are incremented.
3. Slot ageing: a non-empty slot whose age exceeds ``age_bound`` is zeroed. The age of a slot at
   decision ``t`` is ``t - slot_start``, where ``slot_start`` is the decision index of the first
   sample that entered the slot since it was last empty; an empty slot has no age. So a slot never
   holds a sample older than ``age_bound`` decisions when it is read. Then, if ``greedy``, the
   sample ``(r, delta)`` is added to slot ``slot_ptr`` and ``slot_ptr`` advances round-robin
   (``(slot_ptr + 1) % S``); non-greedy samples never enter the slots. ``t`` becomes ``t + 1``.
4. If ``t`` (after the increment) is a multiple of ``refit_every`` (8), ``rho_hat`` is refit by the
   estimator from all slots (empty slots have ``slot_d = 0``; the estimator ignores them).
5. ``theta[x]`` (the visited context only) is updated with ``Q`` from the updated statistics and
   the possibly just refit ``rho_hat``. ``rho_hat`` starts at 0 (paper, Algorithm 1).

Refit scheduling. ``agent.update`` uses ``lax.cond`` on ``t % refit_every == 0``. ``t`` starts
as the same constant for every seed and depends only on itself, so when a whole simulation is
vmapped over seeds (state built by ``init`` inside the vmapped function, as
``rpg_jax.simulate`` does) ``t`` stays UNBATCHED, the predicate is unbatched and ``cond`` stays a
real branch: the refit runs once per ``refit_every`` decisions (measured: vmapped cond schedule
0.9x the time of the blocked schedule below). If ``t`` becomes batched (e.g. a state stacked
outside ``vmap`` and passed in with ``in_axes=0``), ``cond`` turns into ``select``, the refit runs
at every decision and a step costs ~7x more (measured 6.8x at 8 seeds, K = 5). Then scan over
blocks of ``refit_every`` decisions instead: :func:`PGFns.update_stats_and_theta` for the first
``refit_every - 1`` decisions of a block and :func:`PGFns.update_with_refit` for the last one;
this is bit-identical to ``agent.update`` (tested). :func:`PGFns.refit_rho` refits alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rpg_jax.agents.base import Agent

__all__ = [
    "PGHyper",
    "PGState",
    "PGFns",
    "OracleState",
    "oracle_estimator",
    "relative_value_estimate",
    "pg_theta_step",
    "make_pg_fns",
    "make_pg_agent",
]


class PGHyper(NamedTuple):
    """Tuned hyper-parameters (JAX scalars, shape ``()``, so grids vmap).

    Attributes:
      lr: step size ``eta`` (float). Reference grid {0.03, 0.1, 0.3, 1, 3} (+10 large setting).
      age_bound: slot age bound in decisions (int or float; compared as ``age > age_bound``).
        Reference grid 60 ... 32,000 (... 4,000 in the large setting).
    """

    lr: Any
    age_bound: Any


class PGState(NamedTuple):
    """State of NPG-/SPG-NIW for one seed. ``C`` contexts, ``A`` actions, ``S`` slots.

    Attributes:
      theta: logits, float ``(C, A)``.
      n: arm counts, int32 ``(C, A)``.
      sum_r: arm reward sums, float ``(C, A)``.
      sum_d: arm duration sums (time units), float ``(C, A)``.
      slot_r: slot reward sums, float ``(S,)``.
      slot_d: slot duration sums, float ``(S,)`` (0 for an empty slot).
      slot_n: number of samples in each slot, int32 ``(S,)``.
      slot_start: decision index of the first sample of each non-empty slot, int32 ``(S,)``.
      slot_ptr: next slot to write (round-robin), int32 ``()``.
      est: estimator state (any pytree with a ``rho_hat`` leaf, float ``()``).
      t: number of decisions processed, int32 ``()``.
    """

    theta: jax.Array
    n: jax.Array
    sum_r: jax.Array
    sum_d: jax.Array
    slot_r: jax.Array
    slot_d: jax.Array
    slot_n: jax.Array
    slot_start: jax.Array
    slot_ptr: jax.Array
    est: Any
    t: jax.Array


class OracleState(NamedTuple):
    """State of :func:`oracle_estimator` (and a template for any estimator state).

    Attributes:
      rho_hat: the reward-rate estimate, float ``()``.
      num_refits: how many times ``refit`` ran, int32 ``()`` (lets tests count refits).
    """

    rho_hat: jax.Array
    num_refits: jax.Array


class _EstimatorLike(NamedTuple):
    init: Callable  # (dtype) -> est_state
    refit: Callable  # (est_state, slot_r, slot_d, key) -> est_state


def oracle_estimator(rho: float) -> _EstimatorLike:
    """An estimator whose ``rho_hat`` is fixed to ``rho`` (e.g. ``rho_star``): for tests/ablations.

    Same protocol as ``rpg_jax.estimator.Estimator``: ``init(dtype) -> OracleState`` and
    ``refit(est_state, slot_r, slot_d, key) -> OracleState`` (ignores the slots; counts refits).

    Raises:
      ValueError: if ``rho`` is not a finite number.
    """
    rho = float(rho)
    if not jnp.isfinite(rho):
        raise ValueError(f"oracle rho must be finite, got {rho}")

    def init(dtype=jnp.float32) -> OracleState:
        return OracleState(jnp.asarray(rho, dtype), jnp.zeros((), jnp.int32))

    def refit(est: OracleState, slot_r, slot_d, key) -> OracleState:
        del slot_r, slot_d, key
        return OracleState(est.rho_hat, est.num_refits + 1)

    return _EstimatorLike(init, refit)


def relative_value_estimate(
    n: jax.Array, sum_r: jax.Array, sum_d: jax.Array, rho_hat: jax.Array
) -> jax.Array:
    """``Q = (sum_r - rho_hat * sum_d) / n``, and 0 where ``n == 0``.

    Any (common) shape; the result has the float dtype of ``sum_r``.
    """
    safe_n = jnp.maximum(n, 1).astype(sum_r.dtype)
    return jnp.where(n > 0, (sum_r - rho_hat * sum_d) / safe_n, jnp.zeros_like(sum_r))


def pg_theta_step(theta_x: jax.Array, q_x: jax.Array, lr: jax.Array, natural: bool) -> jax.Array:
    """One policy-gradient step on the logits of one context.

    Args:
      theta_x: logits, float ``(A,)``.
      q_x: relative value estimates ``Q[x]``, float ``(A,)``.
      lr: step size, float ``()``.
      natural: True: NPG ``theta += lr (Q - pi.Q)``; False: SPG ``theta += lr pi (Q - pi.Q)``
        (gradient of ``pi.Q`` w.r.t. softmax logits). Static.

    Returns:
      New logits, float ``(A,)``.
    """
    pi = jax.nn.softmax(theta_x)
    adv = q_x - jnp.dot(pi, q_x)
    step = adv if natural else pi * adv
    return theta_x + lr * step


class PGFns(NamedTuple):
    """The pieces of a PG agent, for simulators that schedule the refit themselves.

    Attributes:
      update_stats: ``(state, hyper, x, a, r, delta) -> state``; steps 1-3 of the module docstring.
      refit_rho: ``(state, key) -> state``; step 4 unconditionally.
      update_theta: ``(state, hyper, x) -> state``; step 5.
      update_stats_and_theta: ``(state, hyper, x, a, r, delta) -> state``; a decision without refit.
      update_with_refit: ``(state, hyper, x, a, r, delta, key) -> state``; a decision with refit.
      refit_due: ``(state) -> bool``; whether the state after ``update_stats`` is due a refit.
    """

    update_stats: Callable
    refit_rho: Callable
    update_theta: Callable
    update_stats_and_theta: Callable
    update_with_refit: Callable
    refit_due: Callable


def _check_config(n_contexts, n_actions, num_slots, refit_every):
    for name, v in (
        ("n_contexts", n_contexts),
        ("n_actions", n_actions),
        ("num_slots", num_slots),
        ("refit_every", refit_every),
    ):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


def make_pg_fns(
    n_contexts: int,
    n_actions: int,
    *,
    natural: bool,
    num_slots: int = 128,
    refit_every: int = 8,
    estimator: Any = None,
) -> tuple[Callable, Callable, PGFns]:
    """Build ``(init, act, fns)`` of NPG-/SPG-NIW (exact semantics: the module docstring).

    Args:
      n_contexts: number of contexts ``C``.
      n_actions: number of actions ``A`` (SKIP included where the environment has it).
      natural: True for NPG-NIW, False for SPG-NIW.
      num_slots: number of estimator slots ``S`` (128 in the reference).
      refit_every: decisions between two refits of ``rho_hat`` (8 in the reference).
      estimator: object with ``init(dtype) -> est_state`` and
        ``refit(est_state, slot_r, slot_d, key) -> est_state`` where ``est_state.rho_hat`` is the
        estimate; default ``rpg_jax.estimator.make_niw_estimator(num_slots)`` (NIW, 95th
        percentile).

    Returns:
      ``init(hyper, key) -> PGState``, ``act(state, hyper, x, key) -> int32`` and :class:`PGFns`.

    Raises:
      ValueError: on a non-positive or non-int size.
    """
    _check_config(n_contexts, n_actions, num_slots, refit_every)
    if estimator is None:
        from rpg_jax.estimator import make_niw_estimator

        estimator = make_niw_estimator(num_slots)
    natural = bool(natural)
    C, A, S = n_contexts, n_actions, num_slots

    def init(hyper: PGHyper, key: jax.Array) -> PGState:
        del key
        dtype = jnp.result_type(jnp.asarray(hyper.lr).dtype, jnp.float32)
        zf = jnp.zeros((C, A), dtype)
        return PGState(
            theta=zf,
            n=jnp.zeros((C, A), jnp.int32),
            sum_r=zf,
            sum_d=zf,
            slot_r=jnp.zeros((S,), dtype),
            slot_d=jnp.zeros((S,), dtype),
            slot_n=jnp.zeros((S,), jnp.int32),
            slot_start=jnp.zeros((S,), jnp.int32),
            slot_ptr=jnp.zeros((), jnp.int32),
            est=estimator.init(dtype),
            t=jnp.zeros((), jnp.int32),
        )

    def act(state: PGState, hyper: PGHyper, x: jax.Array, key: jax.Array) -> jax.Array:
        del hyper
        return jax.random.categorical(key, state.theta[x]).astype(jnp.int32)

    def update_stats(state: PGState, hyper: PGHyper, x, a, r, delta) -> PGState:
        dtype = state.sum_r.dtype
        r = jnp.asarray(r, dtype)
        delta = jnp.asarray(delta, dtype)
        greedy = a == jnp.argmax(state.theta[x])
        n = state.n.at[x, a].add(1)
        sum_r = state.sum_r.at[x, a].add(r)
        sum_d = state.sum_d.at[x, a].add(delta)
        # Ageing: zero every non-empty slot older than the age bound.
        age = state.t - state.slot_start
        stale = (state.slot_n > 0) & (age > hyper.age_bound)
        slot_r = jnp.where(stale, 0, state.slot_r)
        slot_d = jnp.where(stale, 0, state.slot_d)
        slot_n = jnp.where(stale, 0, state.slot_n)
        # Greedy sample into the round-robin slot.
        p = state.slot_ptr
        g = greedy.astype(jnp.int32)
        slot_start = state.slot_start.at[p].set(
            jnp.where(greedy & (slot_n[p] == 0), state.t, state.slot_start[p])
        )
        slot_r = slot_r.at[p].add(jnp.where(greedy, r, 0))
        slot_d = slot_d.at[p].add(jnp.where(greedy, delta, 0))
        slot_n = slot_n.at[p].add(g)
        slot_ptr = (p + g) % S
        return state._replace(
            n=n,
            sum_r=sum_r,
            sum_d=sum_d,
            slot_r=slot_r,
            slot_d=slot_d,
            slot_n=slot_n,
            slot_start=slot_start,
            slot_ptr=slot_ptr,
            t=state.t + 1,
        )

    def refit_rho(state: PGState, key: jax.Array) -> PGState:
        return state._replace(est=estimator.refit(state.est, state.slot_r, state.slot_d, key))

    def update_theta(state: PGState, hyper: PGHyper, x) -> PGState:
        rho_hat = state.est.rho_hat
        q_x = relative_value_estimate(state.n[x], state.sum_r[x], state.sum_d[x], rho_hat)
        lr = jnp.asarray(hyper.lr, state.theta.dtype)
        theta_x = pg_theta_step(state.theta[x], q_x, lr, natural)
        return state._replace(theta=state.theta.at[x].set(theta_x))

    def update_stats_and_theta(state, hyper, x, a, r, delta) -> PGState:
        return update_theta(update_stats(state, hyper, x, a, r, delta), hyper, x)

    def update_with_refit(state, hyper, x, a, r, delta, key) -> PGState:
        state = update_stats(state, hyper, x, a, r, delta)
        return update_theta(refit_rho(state, key), hyper, x)

    def refit_due(state: PGState) -> jax.Array:
        return state.t % refit_every == 0

    fns = PGFns(
        update_stats, refit_rho, update_theta, update_stats_and_theta, update_with_refit, refit_due
    )
    return init, act, fns


def make_pg_agent(
    n_contexts: int,
    n_actions: int,
    *,
    natural: bool,
    num_slots: int = 128,
    refit_every: int = 8,
    estimator: Any = None,
) -> Agent:
    """NPG-NIW (``natural=True``, = RPG in the bandit) or SPG-NIW (``natural=False``) as an Agent.

    ``update`` performs one decision: stats -> (refit if ``t % refit_every == 0``, via
    ``lax.cond``) -> theta of the visited context; see the module docstring. Arguments and errors
    as :func:`make_pg_fns`. ``hyper`` is a :class:`PGHyper`; the state a :class:`PGState`.
    """
    init, act, fns = make_pg_fns(
        n_contexts,
        n_actions,
        natural=natural,
        num_slots=num_slots,
        refit_every=refit_every,
        estimator=estimator,
    )

    def update(state: PGState, hyper: PGHyper, x, a, r, delta, key) -> PGState:
        state = fns.update_stats(state, hyper, x, a, r, delta)
        state = jax.lax.cond(fns.refit_due(state), fns.refit_rho, lambda s, k: s, state, key)
        return fns.update_theta(state, hyper, x)

    return Agent(init, act, update)
