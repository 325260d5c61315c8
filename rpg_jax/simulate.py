"""Simulation of a bandit agent over many seeds: ``lax.scan`` over decisions, ``vmap`` over seeds,
``jit``, with the seed axis sharded over all local devices.

Regret bookkeeping (DESIGN.md section 2): after ``n`` decisions

- regret ``R_n = rho_star * sum_t delta_t - sum_t r_t``,
- pseudo-regret ``P_n = sum_t GAP(x_t, a_t)``, with ``E[R_n] = E[P_n]`` (proofs/regret_identity.md).

Totals (``sum r``, ``sum delta``, ``sum GAP``) are compensated sums: each is a pair ``(hi, lo)``
updated with an error-free TwoSum and renormalised (a double-word sum), so with or without
``jax_enable_x64`` the running error stays at the rounding of the final value, not ``n``
roundings (float32 without x64: 5e6 x 0.0005 summed naively is 2448.70, -2 %; compensated it is
2500.00012 = 5e6 x float32(0.0005) exactly). ``R_n`` and ``P_n`` are formed on the host in
float64 from the pairs and the host's float64 ``rho_star``.

Randomness: seed ``s`` owns the key ``jax.random.key(s, impl="threefry2x32")`` whatever
``JAX_DEFAULT_PRNG_IMPL`` says (the ``rbg`` implementations are not invariant under ``vmap``: a
seed's draws would depend on its lane); decision ``t`` uses ``fold_in(key, t)`` split into
(context, action, outcome, update) keys, so a seed's trajectory does not depend on which other
seeds run beside it, on the batch size or on the sharding.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rpg_jax.agents.base import Agent
from rpg_jax.envs import EnvParams, sample_context, sample_outcome

__all__ = [
    "PRNG_IMPL",
    "SimResult",
    "checkpoint_grid",
    "seed_keys",
    "simulate",
    "simulate_one",
    "standard_error",
    "two_sum_add",
]

PRNG_IMPL = "threefry2x32"
"""PRNG implementation of every seed key (fixed; see the module docstring)."""


class SimResult(NamedTuple):
    """Per-seed results of :func:`simulate` (NumPy arrays; totals and regrets float64 always).

    Attributes:
      seeds: int64 ``(S,)`` the seeds, in input order.
      regret: ``(S,)`` final regret ``R_n``.
      pseudo_regret: ``(S,)`` final pseudo-regret ``P_n``.
      checkpoints: int64 ``(G,)`` decision counts at which curves are recorded (last = n).
      regret_curve: ``(S, G)`` ``R_t`` at each checkpoint.
      pseudo_regret_curve: ``(S, G)`` ``P_t`` at each checkpoint.
      total_reward: ``(S,)`` ``sum_t r_t``.
      total_time: ``(S,)`` ``sum_t delta_t``.
    """

    seeds: np.ndarray
    regret: np.ndarray
    pseudo_regret: np.ndarray
    checkpoints: np.ndarray
    regret_curve: np.ndarray
    pseudo_regret_curve: np.ndarray
    total_reward: np.ndarray
    total_time: np.ndarray


class _Totals(NamedTuple):
    """Compensated running sums: value = hi + lo (each a ``(hi, lo)`` pair of scalars)."""

    sum_r: tuple[jax.Array, jax.Array]
    sum_d: tuple[jax.Array, jax.Array]
    pseudo: tuple[jax.Array, jax.Array]


def two_sum_add(acc: tuple[jax.Array, jax.Array], v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Add ``v`` to the compensated sum ``acc = (hi, lo)`` (value ``hi + lo``), error-free.

    Knuth's TwoSum (The Art of Computer Programming vol. 2, 4.2.2, Theorem B): ``s = hi + v``
    and ``e = (hi - (s - b)) + (v - b)`` with ``b = s - hi`` satisfy ``s + e = hi + v`` exactly;
    ``e + lo`` is then folded back with Dekker's FastTwoSum so ``|lo| <= ulp(hi) / 2`` (a
    double-word sum). The relative error of ``hi + lo`` after ``n`` additions is about
    ``n eps^2`` instead of ``n eps`` (Ogita, Rump, Oishi 2005, "Accurate sum and dot product";
    Dekker 1971).

    Args:
      acc: ``(hi, lo)``, float scalars of one dtype.
      v: float scalar (cast to that dtype).

    Returns:
      The new ``(hi, lo)``.
    """
    hi, lo = acc
    v = v.astype(hi.dtype)
    s = hi + v
    b = s - hi
    e = (hi - (s - b)) + (v - b) + lo
    hi = s + e  # renormalise (Dekker's FastTwoSum, |s| >= |e|): lo stays below ulp(hi)
    return hi, e - (hi - s)


def _total(pair) -> np.ndarray:
    """Host float64 value of a compensated pair of arrays."""
    return np.asarray(pair[0], np.float64) + np.asarray(pair[1], np.float64)


def checkpoint_grid(n_steps: int, max_points: int = 100) -> np.ndarray:
    """Evenly spaced checkpoints ending at ``n_steps``: the largest divisor ``G <= max_points``
    of ``n_steps`` gives ``G`` points ``n/G, 2n/G, ..., n`` (int64 ``(G,)``)."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    g = max(d for d in range(1, min(max_points, n_steps) + 1) if n_steps % d == 0)
    return np.arange(1, g + 1, dtype=np.int64) * (n_steps // g)


def _acc_dtype():
    return jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32


def _run_seed(agent: Agent, hyper: Any, params: EnvParams, key: jax.Array, n_steps: int, g: int):
    """One seed: nested scan (G checkpoints x n/G decisions). Returns the compensated totals at
    the end and at every checkpoint (``_Totals`` of pairs; curves with a leading ``G`` axis)."""
    k_init, k_run = jax.random.split(key)
    state = agent.init(hyper, k_init)
    acc = _acc_dtype()
    zero = (jnp.zeros((), acc), jnp.zeros((), acc))
    totals = _Totals(zero, zero, zero)
    per = n_steps // g

    def step(carry, t):
        state, tot = carry
        kx, ka, ke, ku = jax.random.split(jax.random.fold_in(k_run, t), 4)
        x = sample_context(params, kx)
        a = agent.act(state, hyper, x, ka)
        r, d = sample_outcome(params, ke, x, a)
        state = agent.update(state, hyper, x, a, r, d, ku)
        tot = _Totals(
            two_sum_add(tot.sum_r, r),
            two_sum_add(tot.sum_d, d),
            two_sum_add(tot.pseudo, params.gap[x, a]),
        )
        return (state, tot), None

    def segment(carry, i):
        carry, _ = jax.lax.scan(step, carry, i * per + jnp.arange(per))
        return carry, carry[1]

    (state, tot), curves = jax.lax.scan(segment, (state, totals), jnp.arange(g))
    return tot, curves


@functools.lru_cache(maxsize=64)
def _compiled(agent: Agent, n_steps: int, g: int, per_seed_hyper: bool):
    """Jitted, seed-vmapped runner, cached per (agent, n_steps, G, hyper batching):
    hyper-parameters and environment parameters are traced arguments, so new values reuse the
    compiled code."""
    return jax.jit(
        jax.vmap(
            lambda h, p, k: _run_seed(agent, h, p, k, n_steps, g),
            in_axes=(0 if per_seed_hyper else None, 0, 0),
        )
    )


def seed_keys(seeds: Sequence[int] | np.ndarray) -> jax.Array:
    """Typed keys ``jax.random.key(s, impl=PRNG_IMPL)`` of the seeds, shape ``(S,)``.

    Always threefry, whatever ``JAX_DEFAULT_PRNG_IMPL`` / ``jax_default_prng_impl`` says, so that
    a seed's trajectory is the same in every lane of a vmapped batch.
    """
    return jax.vmap(lambda s: jax.random.key(s, impl=PRNG_IMPL))(jnp.asarray(seeds))


def _check_sizes(agent: Agent, params: EnvParams) -> None:
    """Raise ValueError if the agent was built for another (contexts, actions) than ``params``."""
    c_env, a_env = np.shape(params.rbar)[-2:]
    for what, built, env in (
        ("contexts", getattr(agent, "n_contexts", None), c_env),
        ("actions", getattr(agent, "n_actions", None), a_env),
    ):
        if built is not None and int(built) != int(env):
            raise ValueError(
                f"the agent was built for {built} {what}, the environment has {env} {what}"
            )


def _validate(seeds: Sequence[int] | np.ndarray, n_steps: int) -> np.ndarray:
    arr = np.asarray(seeds)
    if arr.ndim != 1 or arr.size < 1:
        raise ValueError(f"seeds must be a non-empty 1-D sequence, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 0) or np.any(arr >= 2**32):
        bad = [s for s in arr.tolist() if not (isinstance(s, int) and 0 <= s < 2**32)][:8]
        raise ValueError(f"seeds must be integers in [0, 2**32), got {bad or arr.tolist()[:8]}")
    if not isinstance(n_steps, int | np.integer) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive integer, got {n_steps!r}")
    return arr.astype(np.int64)


def simulate(
    agent: Agent,
    hyper: Any,
    params: EnvParams,
    seeds: Sequence[int],
    n_steps: int,
    *,
    max_checkpoints: int = 100,
    shard: bool = True,
    per_seed_hyper: bool = False,
) -> SimResult:
    """Run ``agent`` for ``n_steps`` decisions on each seed's environment, all seeds at once.

    Args:
      agent: pure single-seed agent (``rpg_jax.agents.base.Agent``).
      hyper: agent hyper-parameters (NamedTuple of scalars, shared by all seeds).
      params: environment parameters with a leading seed axis of length ``S`` (one permuted
        instance per seed, e.g. ``envs.make_trial_params``).
      seeds: ``S`` distinct ints in ``[0, 2**32)``; seed ``s`` owns key
        ``jax.random.key(s, impl=PRNG_IMPL)`` (threefry whatever the default implementation;
        :func:`seed_keys`). Repeats are allowed only with ``per_seed_hyper``, where each run has
        its own setting.
      n_steps: decisions per seed (>= 1).
      max_checkpoints: at most this many curve points (see :func:`checkpoint_grid`).
      shard: shard the seed axis over all local devices (padding to a multiple of the device
        count; padded seeds are dropped from the result).
      per_seed_hyper: ``hyper`` leaves carry a leading axis of length ``S`` (one setting per
        run), so a whole hyper-parameter grid x seeds runs as one batch (used for tuning).

    Returns:
      :class:`SimResult`.

    Raises:
      ValueError: bad or repeated seeds, bad steps or ``max_checkpoints``, ``params`` whose
        leading axis is not ``S``, or an agent built for another number of contexts or actions
        than the environment's (before any compilation).
    """
    seed_arr = _validate(seeds, n_steps)
    n_seeds = seed_arr.size
    if not per_seed_hyper and np.unique(seed_arr).size != n_seeds:
        dup = sorted({int(s) for s in seed_arr if np.count_nonzero(seed_arr == s) > 1})
        raise ValueError(f"seeds must be distinct, repeated: {dup[:8]}")
    if not isinstance(max_checkpoints, int) or max_checkpoints < 1:
        raise ValueError(f"max_checkpoints must be a positive int, got {max_checkpoints!r}")
    lead = np.shape(params.p)[0] if np.ndim(params.p) == 2 else None
    if lead != n_seeds:
        raise ValueError(f"params must have a leading seed axis of length {n_seeds}, got {lead}")
    _check_sizes(agent, params)
    grid = checkpoint_grid(n_steps, max_checkpoints)
    g = int(grid.size)

    devices = jax.local_devices()
    n_dev = len(devices) if shard else 1
    pad = (-n_seeds) % n_dev
    seeds_p = np.concatenate([seed_arr, seed_arr[:pad]]) if pad else seed_arr

    def _pad(tree):
        return jax.tree.map(
            lambda v: np.concatenate([np.asarray(v), np.asarray(v)[:pad]]) if pad else v, tree
        )

    params_p = _pad(jax.tree.map(np.asarray, params))
    if per_seed_hyper:
        lens = {np.shape(v)[0] if np.ndim(v) else None for v in jax.tree.leaves(hyper)}
        if lens != {n_seeds}:
            raise ValueError(
                f"per_seed_hyper: hyper leaves need leading axis {n_seeds}, got {lens}"
            )
        hyper = _pad(hyper)
    keys = seed_keys(seeds_p)
    run = _compiled(agent, n_steps, g, per_seed_hyper)
    if n_dev > 1:
        mesh = Mesh(np.asarray(devices), ("seeds",))
        spec = NamedSharding(mesh, PartitionSpec("seeds"))
        params_p = jax.device_put(params_p, spec)
        keys = jax.device_put(keys, spec)
        if per_seed_hyper:
            hyper = jax.device_put(hyper, spec)
    tot, curves = run(hyper, params_p, keys)
    rho_star = np.asarray(params.rho_star, np.float64)[:, None]
    sum_r, sum_d, pseudo = (_total(v)[:n_seeds] for v in tot)
    c_r, c_d, c_p = (_total(v)[:n_seeds] for v in curves)
    r_curve = rho_star * c_d - c_r
    return SimResult(
        seeds=seed_arr,
        regret=r_curve[:, -1],
        pseudo_regret=pseudo,
        checkpoints=grid,
        regret_curve=r_curve,
        pseudo_regret_curve=c_p,
        total_reward=sum_r,
        total_time=sum_d,
    )


def simulate_one(
    agent: Agent, hyper: Any, params: EnvParams, seed: int, n_steps: int, **kw
) -> SimResult:
    """:func:`simulate` for one seed; ``params`` without a seed axis."""
    batched = jax.tree.map(lambda v: np.asarray(v)[None], params)
    return simulate(agent, hyper, batched, [seed], n_steps, shard=False, **kw)


def standard_error(values: np.ndarray) -> float:
    """Standard error of the mean of a 1-D sample (``std(ddof=1) / sqrt(n)``; 0 for n = 1)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size < 2:
        return 0.0
    return float(values.std(ddof=1) / math.sqrt(values.size))
