"""Jittable sampling of contexts and outcomes for one bandit instance (``EnvParams``).

Pure functions of ``(params, key, ...)``; no Python branching on traced values, so they jit and
vmap over a leading seed axis of stacked params (``make_trial_params``). Dtype-generic: outputs
follow the dtype of ``params.loc_r``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rpg_jax.envs.params import EnvParams

__all__ = ["sample_context", "correlated_normals", "sample_outcome"]


def sample_context(params: EnvParams, key: jax.Array) -> jax.Array:
    """Draw a context ``x ~ p``: int32 scalar; ``params`` of one instance (``p`` shape ``(C,)``)."""
    p = jnp.asarray(params.p)
    return jax.random.categorical(key, jnp.log(p)).astype(jnp.int32)


def correlated_normals(
    key: jax.Array, corr: jax.typing.ArrayLike, dtype
) -> tuple[jax.Array, jax.Array]:
    """Standard normals ``(Z1, Z2)`` of correlation ``corr``: ``Z2 = corr Z1 + sqrt(1-corr^2) E``.

    Scalars of ``dtype``; ``E`` is a second independent standard normal.
    """
    e = jax.random.normal(key, (2,), dtype=dtype)
    corr = jnp.asarray(corr, dtype=dtype)
    return e[0], corr * e[0] + jnp.sqrt(1.0 - corr * corr) * e[1]


def _noisy(loc, sigma, floor, z, lognormal):
    """``max(noise(loc, sigma, z), floor)``; ``max(loc, floor)`` exactly where ``sigma == 0``."""
    gauss = loc + sigma * z
    safe_loc = jnp.where(loc > 0, loc, jnp.ones_like(loc))
    logn = jnp.exp(jnp.log(safe_loc) - 0.5 * sigma * sigma + sigma * z)
    raw = jnp.where(sigma > 0, jnp.where(lognormal, logn, gauss), loc)
    return jnp.maximum(raw, floor)


def sample_outcome(
    params: EnvParams, key: jax.Array, x: jax.typing.ArrayLike, a: jax.typing.ArrayLike
) -> tuple[jax.Array, jax.Array]:
    """Draw ``(r, delta)`` for action ``a`` in context ``x`` (DESIGN.md section 3 noise models).

    Args:
      params: one instance (unbatched; vmap for a seed axis).
      key: PRNG key; x, a: int scalars (not range-checked: indices are clamped by JAX).

    Returns:
      ``(r, delta)``: scalars of the dtype of ``params.loc_r``; ``delta`` in time units.
    """
    loc_r = jnp.asarray(params.loc_r)
    dtype = loc_r.dtype
    z1, z2 = correlated_normals(key, params.corr, dtype)
    lognormal = jnp.asarray(params.lognormal)

    def cell(field):
        return jnp.asarray(field, dtype=dtype)[x, a]

    r = _noisy(loc_r[x, a], cell(params.sigma_r), cell(params.r_floor), z1, lognormal)
    delta = _noisy(cell(params.loc_d), cell(params.sigma_d), cell(params.d_floor), z2, lognormal)
    return r, delta
