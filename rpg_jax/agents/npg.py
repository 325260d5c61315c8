"""NPG-NIW (= RPG in the bandit) and SPG-NIW: softmax policy gradient on the relative value.

Source: Tian & Yang (2026), "Reward-rate Policy Gradient ...", section "Natural policy gradient
and reward-rate RL" and the bandit experiments; update rules and the estimator feeding as recorded
in DESIGN.md section 5 (the feeding rule is the reference's 'gage' mode). Pure, single-seed,
jittable functions; the simulator scans over decisions and vmaps over seeds / hyper-parameter
grids.

Per context ``x`` the policy is ``pi[x] = softmax(theta[x])``. Arm statistics per ``(x, a)``:
count ``n``, sums ``sum_r`` and ``sum_d`` (duration). With the current reward-rate estimate
``rho_hat`` the relative value estimate is

    Q(x, a) = (sum_r(x, a) - rho_hat * sum_d(x, a)) / n(x, a),   and Q(x, a) = 0 when n(x, a) = 0.

- NPG (natural=True):  ``theta[x] += lr * (Q[x] - pi[x] . Q[x])``
- SPG (natural=False): ``theta[x] += lr * pi[x] * (Q[x] - pi[x] . Q[x])``

Acting: ``a ~ pi(. | x)`` from ``theta`` before the update, drawn as the Gumbel-max
``argmax(theta[x] + G)`` with ``G = jax.random.gumbel(key, (A,))`` (so a test can replay it).

Feeding ``feeding="reference"`` (default; DESIGN.md section 5 "Estimator feeding"). ``state.t``
counts decisions from 1 and is incremented at the start of each update; ``rho_hat`` starts at 0.
One decision ``(x, a, r, delta)``, in this order:

1. ``t += 1``.
2. Feed: the sample feeds the estimator only if ``a == argmax theta[x]`` (``theta`` before this
   decision's step; ties to the lowest index). A fed sample goes to slot ``i = slot_ptr``. Before
   adding: if slot ``i`` holds >= 1 sample and ``t - birth[i] > age_bound`` it is emptied and
   ``birth[i] = t``; ``birth`` starts at 0 and is set only by such a reset. Then slot ``i`` gets
   ``(r, delta)``, its count + 1, and ``slot_ptr = (i + 1) % S``. Unfed samples change no slot.
3. Refit: only right after a fed sample, only when ``t % refit_every == 0`` and only when >= 2
   slots are non-empty. The estimator gets the non-empty slots only (a mask); their count ``n``
   is also the synthetic batch size (:func:`reference_niw_estimator`). Otherwise ``rho_hat`` keeps
   its value.
4. ``pi = softmax(theta[x])`` (before the step). 5. Arm statistics of ``(x, a)`` += ``(r, delta,
   1)``; ``Q`` as above. 6. The NPG / SPG step on ``theta[x]`` (the visited context only).

Feeding ``feeding="legacy"`` (this package's earlier rule, kept as a named option): ``state.t``
counts decisions already processed (0-based at the decision); every non-empty slot whose age
``t - slot_birth`` (``slot_birth`` = decision of the first sample since the slot was last empty)
exceeds ``age_bound`` is zeroed at every decision; a greedy sample goes round-robin; the refit runs
whenever ``t + 1`` is a multiple of ``refit_every``, on all ``S`` slots (batch size ``S``).

Refit scheduling. ``agent.update`` uses ``lax.cond`` on ``t % refit_every == 0`` only (the
"fed and >= 2 non-empty slots" part of the reference rule is a ``where`` inside the branch).
``t`` starts as the same constant for every seed and depends only on itself, so when a whole
simulation is vmapped over seeds (state built by ``init`` inside the vmapped function, as
``rpg_jax.simulate`` does) ``t`` stays UNBATCHED and ``cond`` stays a real branch: the refit
costs once per ``refit_every`` decisions. If ``t`` becomes batched (a state stacked outside
``vmap``), ``cond`` turns into ``select`` and the refit runs at every decision (~7x slower);
then scan over blocks of ``refit_every`` decisions with :func:`PGFns.update_stats_and_theta`
and, for the last decision of a block, :func:`PGFns.update_with_refit` (bit-identical, tested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

from rpg_jax import estimator as niw_estimator
from rpg_jax import learned, robbins_monro
from rpg_jax.agents.base import Agent

__all__ = [
    "FEEDINGS",
    "PGHyper",
    "PGState",
    "PGFns",
    "OracleState",
    "oracle_estimator",
    "reference_niw_estimator",
    "ESTIMATORS",
    "masked_estimator",
    "reference_estimator",
    "relative_value_estimate",
    "pg_theta_step",
    "make_pg_fns",
    "make_pg_agent",
]

FEEDINGS = ("reference", "legacy")
ESTIMATORS = ("niw", "niw-mean", "robbins-monro", "learned")
"""Reward-rate estimators of the bandit agents (:func:`reference_estimator`); ``niw`` is the
paper's."""
"""Estimator feeding rules of :func:`make_pg_fns` (module docstring); the first is the default."""


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
      slot_birth: int32 ``(S,)``; reference feeding: the ``t`` of the slot's last reset (0 at
        start); legacy feeding: the decision of the slot's first sample since it was last empty.
      slot_ptr: next slot to write (round-robin), int32 ``()``.
      fed: whether the last decision's sample fed a slot, bool ``()``.
      est: estimator state (any pytree with a ``rho_hat`` leaf, float ``()``).
      t: decision counter, int32 ``()`` (reference: the last decision's number, 1-based; legacy:
        number of decisions processed).
      slot_xa: the slots' samples by context and action, float ``(S, C, A, 4)`` (count, reward
        sum, log-duration sum, squared log-duration sum; emptied with their slot) when the
        estimator is labelled (``rpg_jax.learned``), else float ``(0,)``.
    """

    theta: jax.Array
    n: jax.Array
    sum_r: jax.Array
    sum_d: jax.Array
    slot_r: jax.Array
    slot_d: jax.Array
    slot_n: jax.Array
    slot_birth: jax.Array
    slot_ptr: jax.Array
    fed: jax.Array
    est: Any
    t: jax.Array
    slot_xa: jax.Array


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
    refit: Callable  # legacy: (est, slot_r, slot_d, key); reference: (est, r, d, mask, key)


def oracle_estimator(rho: float) -> _EstimatorLike:
    """An estimator whose ``rho_hat`` is fixed to ``rho`` (e.g. ``rho_star``): for tests/ablations.

    ``init(dtype) -> OracleState``; ``refit(est_state, slot_r, slot_d, [mask,] key) ->
    OracleState`` ignores its inputs and counts refits (both feeding rules' signatures).

    Raises:
      ValueError: if ``rho`` is not a finite number.
    """
    rho = float(rho)
    if not jnp.isfinite(rho):
        raise ValueError(f"oracle rho must be finite, got {rho}")

    def init(dtype=jnp.float32) -> OracleState:
        return OracleState(jnp.asarray(rho, dtype), jnp.zeros((), jnp.int32))

    def refit(est: OracleState, *slots_and_key) -> OracleState:
        del slots_and_key
        return OracleState(est.rho_hat, est.num_refits + 1)

    return _EstimatorLike(init, refit)


def reference_niw_estimator(
    num_slots: int = 128, num_batches: int = 1000, quantile: float = 0.95, lam: float = 0.3
) -> _EstimatorLike:
    """The NIW estimator as the reference feeding calls it: on the non-empty slots only.

    ``refit(est_state, slot_r (S,), slot_d (S,), mask (S,) bool, key)`` zeroes the slots outside
    ``mask`` (an empty slot, time 0, is not usable) and runs the fused estimator
    ``rpg_jax.estimator.make_niw_estimator(num_slots, ..., batch="usable")``: the NIW update with
    forgetting on the ``n = sum(mask)`` masked slots, then ``rho_hat`` = ``max(0, quantile)`` of
    ``M = num_batches`` synthetic batch rates of ``n`` predictive slot vectors each (drawn and
    reduced in one XLA fusion, ``rpg_jax.polar_t.batch_rates``); when the update did not fit
    (< 2 usable slots) ``rho_hat`` keeps its value. State: ``rpg_jax.estimator.NIWState``.

    Raises:
      ValueError: on a bad ``num_slots`` / ``num_batches`` / ``quantile`` / ``lam`` (checked by
        ``rpg_jax.estimator.make_niw_estimator``, before any tracing).

    Source: DESIGN.md section 5 ("The NIW update gets the non-empty slots only, so n = their
    count, which is also the synthetic batch size"); the law is tested against a NumPy masked
    refit in ``tests/jax/test_npg.py`` (``testkit/numpy_ref_masked.py``).
    """
    fused = niw_estimator.make_niw_estimator(num_slots, num_batches, quantile, lam, batch="usable")
    return masked_estimator(fused.init, fused.refit, num_slots)


def masked_estimator(init: Callable, refit: Callable, num_slots: int) -> _EstimatorLike:
    """Any estimator of the contract (``refit(state, slot_r, slot_d, key)``) as the reference
    feeding calls it: ``refit(est_state, slot_r (S,), slot_d (S,), mask (S,) bool, key)`` zeroes
    the slots outside ``mask`` (time 0: not usable) and refits on the rest."""

    def masked(state, slot_r, slot_d, mask, key):
        chex.assert_shape([slot_r, slot_d, mask], (num_slots,))
        zero = jnp.zeros_like(slot_d)
        return refit(state, jnp.where(mask, slot_r, zero), jnp.where(mask, slot_d, zero), key)

    return _EstimatorLike(init, masked)


def reference_estimator(
    name: str, num_slots: int = 128, n_contexts: int | None = None, n_actions: int | None = None
) -> Any:
    """The bandit agents' estimator ``name`` (one of :data:`ESTIMATORS`) at its reference
    settings, fed as the reference feeds it (:func:`masked_estimator`):

    - ``niw``: :func:`reference_niw_estimator` (95th predictive percentile, ``M = 1000``);
    - ``niw-mean``: the NIW posterior-mean rate (``rpg_core.niw.posterior_mean_rate``);
    - ``robbins-monro``: the NPG theorem's running rate, ``chi = 0.5``, no quantile
      (``rpg_jax.robbins_monro``);
    - ``learned``: a network fitted on the labelled slots and Dinkelbach iterations on its
      predictions (``rpg_jax.learned``); needs ``n_contexts`` and ``n_actions``.

    Raises:
      ValueError: an unknown ``name``, a bad ``num_slots``, or ``learned`` without the sizes.
    """
    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}")
    if name == "learned":
        if n_contexts is None or n_actions is None:
            raise ValueError("the learned estimator needs n_contexts and n_actions")
        niw_estimator.niw.check_count("num_slots", num_slots)
        return learned.make_learned_estimator(n_contexts, n_actions)
    if name == "niw":
        return reference_niw_estimator(num_slots)
    if name == "niw-mean":
        mean = niw_estimator.make_niw_estimator(num_slots, kind="posterior_mean")
        return masked_estimator(mean.init, mean.refit, num_slots)
    rm = robbins_monro.make_rm_estimator(num_slots)
    return masked_estimator(rm.init, rm.refit, num_slots)


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
      theta_x: logits, float ``(A,)``; ``-inf`` entries are actions of probability 0. A row
        that is ``-inf`` everywhere has no policy: it is returned unchanged (no NaN).
      q_x: relative value estimates ``Q[x]``, float ``(A,)``.
      lr: step size, float ``()``.
      natural: True: NPG ``theta += lr (Q - pi.Q)``; False: SPG ``theta += lr pi (Q - pi.Q)``
        (gradient of ``pi.Q`` w.r.t. softmax logits). Static.

    Returns:
      New logits, float ``(A,)``.
    """
    chex.assert_rank(theta_x, 1)
    chex.assert_equal_shape([theta_x, q_x])
    alive = jnp.any(theta_x > -jnp.inf)
    safe = jnp.where(alive, theta_x, jnp.zeros_like(theta_x))
    pi = jax.nn.softmax(safe)
    adv = q_x - jnp.dot(pi, q_x)
    step = adv if natural else pi * adv
    return jnp.where(alive, theta_x + lr * step, theta_x)


class PGFns(NamedTuple):
    """The pieces of a PG agent, for simulators that schedule the refit themselves.

    Attributes:
      update_stats: ``(state, hyper, x, a, r, delta) -> state``; counter, feeding, arm statistics.
      refit_rho: ``(state, key) -> state``; the refit of a due decision (reference: only if the
        last sample was fed and >= 2 slots are non-empty; legacy: unconditionally).
      update_theta: ``(state, hyper, x) -> state``; the policy step.
      update_stats_and_theta: ``(state, hyper, x, a, r, delta) -> state``; a decision without refit.
      update_with_refit: ``(state, hyper, x, a, r, delta, key) -> state``; a due decision.
      refit_due: ``(state) -> bool``; whether the state after ``update_stats`` is due a refit
        (``t % refit_every == 0``).
    """

    update_stats: Callable
    refit_rho: Callable
    update_theta: Callable
    update_stats_and_theta: Callable
    update_with_refit: Callable
    refit_due: Callable


def _check_config(n_contexts, n_actions, num_slots, refit_every, feeding):
    for name, v in (
        ("n_contexts", n_contexts),
        ("n_actions", n_actions),
        ("num_slots", num_slots),
        ("refit_every", refit_every),
    ):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if feeding not in FEEDINGS:
        raise ValueError(f"feeding must be one of {FEEDINGS}, got {feeding!r}")


def make_pg_fns(
    n_contexts: int,
    n_actions: int,
    *,
    natural: bool,
    num_slots: int = 128,
    refit_every: int = 8,
    estimator: Any = None,
    feeding: str = "reference",
) -> tuple[Callable, Callable, PGFns]:
    """Build ``(init, act, fns)`` of NPG-/SPG-NIW (exact semantics: the module docstring).

    Args:
      n_contexts: number of contexts ``C``.
      n_actions: number of actions ``A`` (SKIP included where the environment has it).
      natural: True for NPG-NIW, False for SPG-NIW.
      num_slots: number of estimator slots ``S`` (128 in the reference).
      refit_every: decisions between two refit opportunities (8 in the reference).
      estimator: object with ``init(dtype) -> est_state`` and ``refit``, where
        ``est_state.rho_hat`` is the estimate. ``feeding="reference"``: ``refit(est_state,
        slot_r, slot_d, mask, key)`` (mask: the non-empty slots), default
        :func:`reference_niw_estimator`; ``feeding="legacy"``: ``refit(est_state, slot_r, slot_d,
        key)``, default ``rpg_jax.estimator.make_niw_estimator(num_slots)``.
      feeding: ``"reference"`` (default) or ``"legacy"``, see the module docstring.

    Returns:
      ``init(hyper, key) -> PGState``, ``act(state, hyper, x, key) -> int32`` and :class:`PGFns`.

    Raises:
      ValueError: on a non-positive or non-int size or an unknown ``feeding``.
    """
    _check_config(n_contexts, n_actions, num_slots, refit_every, feeding)
    reference = feeding == "reference"
    if estimator is None:
        if reference:
            estimator = reference_niw_estimator(num_slots)
        else:
            estimator = niw_estimator.make_niw_estimator(num_slots)
    natural = bool(natural)
    C, A, S = n_contexts, n_actions, num_slots
    labelled = bool(getattr(estimator, "labelled", False))
    if labelled and not reference:
        raise ValueError("a labelled estimator (learned) needs feeding='reference'")
    if labelled and (estimator.n_contexts, estimator.n_actions) != (C, A):
        raise ValueError(
            f"the estimator is built for {estimator.n_contexts} contexts x "
            f"{estimator.n_actions} actions, the agent has {C} x {A}"
        )

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
            slot_birth=jnp.zeros((S,), jnp.int32),
            slot_ptr=jnp.zeros((), jnp.int32),
            fed=jnp.zeros((), bool),
            est=estimator.init(dtype),
            t=jnp.zeros((), jnp.int32),
            slot_xa=jnp.zeros((S, C, A, 4) if labelled else (0,), dtype),
        )

    def act(state: PGState, hyper: PGHyper, x: jax.Array, key: jax.Array) -> jax.Array:
        del hyper
        chex.assert_shape(state.theta, (C, A))
        chex.assert_rank(x, 0)
        g = jax.random.gumbel(key, (A,), state.theta.dtype)
        return jnp.argmax(state.theta[x] + g).astype(jnp.int32)

    def _arm_stats(state: PGState, x, a, r, delta) -> PGState:
        return state._replace(
            n=state.n.at[x, a].add(1),
            sum_r=state.sum_r.at[x, a].add(r),
            sum_d=state.sum_d.at[x, a].add(delta),
        )

    def _feed_reference(state: PGState, hyper: PGHyper, x, a, r, delta) -> PGState:
        t = state.t + 1
        fed = a == jnp.argmax(state.theta[x])
        i = state.slot_ptr
        reset = fed & (state.slot_n[i] >= 1) & (t - state.slot_birth[i] > hyper.age_bound)
        keep = jnp.where(reset, 0, 1)
        add = jnp.where(fed, 1, 0)
        if labelled:
            log_d = jnp.log(jnp.maximum(delta, jnp.finfo(delta.dtype).tiny))
            sample = jnp.where(fed, jnp.stack([jnp.ones_like(r), r, log_d, log_d**2]), 0)
            xa = state.slot_xa.at[i].multiply(keep.astype(r.dtype))
            state = state._replace(slot_xa=xa.at[i, x, a].add(sample))
        return state._replace(
            slot_r=state.slot_r.at[i].set(state.slot_r[i] * keep + jnp.where(fed, r, 0)),
            slot_d=state.slot_d.at[i].set(state.slot_d[i] * keep + jnp.where(fed, delta, 0)),
            slot_n=state.slot_n.at[i].set(state.slot_n[i] * keep + add),
            slot_birth=state.slot_birth.at[i].set(jnp.where(reset, t, state.slot_birth[i])),
            slot_ptr=(i + add) % S,
            fed=fed,
            t=t,
        )

    def _feed_legacy(state: PGState, hyper: PGHyper, x, a, r, delta) -> PGState:
        greedy = a == jnp.argmax(state.theta[x])
        age = state.t - state.slot_birth
        stale = (state.slot_n > 0) & (age > hyper.age_bound)
        slot_r = jnp.where(stale, 0, state.slot_r)
        slot_d = jnp.where(stale, 0, state.slot_d)
        slot_n = jnp.where(stale, 0, state.slot_n)
        p = state.slot_ptr
        g = greedy.astype(jnp.int32)
        slot_birth = state.slot_birth.at[p].set(
            jnp.where(greedy & (slot_n[p] == 0), state.t, state.slot_birth[p])
        )
        return state._replace(
            slot_r=slot_r.at[p].add(jnp.where(greedy, r, 0)),
            slot_d=slot_d.at[p].add(jnp.where(greedy, delta, 0)),
            slot_n=slot_n.at[p].add(g),
            slot_birth=slot_birth,
            slot_ptr=(p + g) % S,
            fed=greedy,
            t=state.t + 1,
        )

    feed = _feed_reference if reference else _feed_legacy

    def update_stats(state: PGState, hyper: PGHyper, x, a, r, delta) -> PGState:
        chex.assert_shape([state.theta, state.sum_r, state.n], (C, A))
        chex.assert_shape([state.slot_r, state.slot_d, state.slot_n], (S,))
        chex.assert_rank([x, a, r, delta], 0)
        dtype = state.sum_r.dtype
        r = jnp.asarray(r, dtype)
        delta = jnp.asarray(delta, dtype)
        state = feed(state, hyper, x, a, r, delta)
        return _arm_stats(state, x, a, r, delta)

    def refit_rho(state: PGState, key: jax.Array) -> PGState:
        if not reference:
            return state._replace(est=estimator.refit(state.est, state.slot_r, state.slot_d, key))
        mask = state.slot_n >= 1
        ok = state.fed & (jnp.sum(mask) >= 2)
        if labelled:
            cells = jnp.sum(jnp.where(mask[:, None, None, None], state.slot_xa, 0), axis=0)
            seen = jnp.sum(state.n, axis=1)  # every decision's context: the empirical p(x)
            new = estimator.refit(state.est, state.slot_r, state.slot_d, mask, key, cells, seen)
        else:
            new = estimator.refit(state.est, state.slot_r, state.slot_d, mask, key)
        est = jax.tree.map(lambda u, v: jnp.where(ok, u, v), new, state.est)
        return state._replace(est=est)

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
    feeding: str = "reference",
) -> Agent:
    """NPG-NIW (``natural=True``, = RPG in the bandit) or SPG-NIW (``natural=False``) as an Agent.

    ``update`` performs one decision: counter and feeding -> (refit if ``t % refit_every == 0``,
    via ``lax.cond``; reference feeding: and only after a fed sample with >= 2 non-empty slots)
    -> theta of the visited context; see the module docstring. Arguments and errors as
    :func:`make_pg_fns`. ``hyper`` is a :class:`PGHyper`; the state a :class:`PGState`.
    """
    init, act, fns = make_pg_fns(
        n_contexts,
        n_actions,
        natural=natural,
        num_slots=num_slots,
        refit_every=refit_every,
        estimator=estimator,
        feeding=feeding,
    )

    def update(state: PGState, hyper: PGHyper, x, a, r, delta, key) -> PGState:
        state = fns.update_stats(state, hyper, x, a, r, delta)
        state = jax.lax.cond(fns.refit_due(state), fns.refit_rho, lambda s, k: s, state, key)
        return fns.update_theta(state, hyper, x)

    return Agent(init, act, update, n_contexts=n_contexts, n_actions=n_actions)
