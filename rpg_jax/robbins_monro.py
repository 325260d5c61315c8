"""Robbins-Monro reward-rate estimator, JAX backend (DESIGN.md section 4).

The running rate of the NPG theorem (:mod:`rpg_core.robbins_monro` holds the algebra, shared with
the torch backend ``rpg_llm.loop.robbins_monro``): each refit moves ``rho_bar`` toward the slots'
pooled rate by the step ``a_k = eta_k / H_{k+1}``, ``eta_k = (k + 1) ** -chi``; ``rho_hat`` is
``max(0, rho_bar)`` or, with a ``quantile``, ``max(0, rho_bar + z_q se)``. No random draws: the
key of the contract is accepted and unused. Every function is pure and ``jit``/``vmap``-able.
Source: Robbins & Monro (1951); paper (Tian & Yang 2026), section 3 and the NPG theorem
(proofs/npg_decoupling.md).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from rpg_core import niw
from rpg_core import robbins_monro as rm
from rpg_core.robbins_monro import CHI, RMState

__all__ = ["CHI", "RMState", "init_state", "refit", "make_rm_estimator"]


def init_state(dtype=jnp.float32) -> RMState:
    """The state before any data (``rho_hat = rho_bar = 0`` with weight 1, no fit).

    Raises:
      ValueError: ``dtype`` is not a floating dtype.
    """
    if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise ValueError(f"dtype must be a floating dtype, got {dtype!r}")
    fields = {k: jnp.asarray(v, dtype) for k, v in rm.initial_fields().items()}
    return RMState(**fields, fitted=jnp.zeros((), bool), num_fits=jnp.zeros((), jnp.int32))


def refit(
    state: RMState,
    slot_rewards: ArrayLike,
    slot_times: ArrayLike,
    key: jax.Array | None = None,
    chi: float = CHI,
    quantile: float | None = None,
) -> RMState:
    """One Robbins-Monro refit on the slot sums (:func:`rpg_core.robbins_monro.update`).

    Args:
      state: :class:`RMState`.
      slot_rewards, slot_times: shape ``(S,)``, cast to the state's dtype (times in time units).
      key: unused (the contract's random key).
      chi: weight exponent in ``[0, 1)`` (may be traced).
      quantile: None (the running mean) or the confidence quantile in ``(0, 1)``; static.

    Returns:
      The new state; ``rho_hat`` in reward per time unit, >= 0.

    Raises:
      ValueError: a concrete ``chi`` outside ``[0, 1)`` or a bad ``quantile``.
    """
    del key
    dtype = state.rho_bar.dtype
    r = jnp.asarray(slot_rewards, dtype)
    t = jnp.asarray(slot_times, dtype)
    return rm.update(jnp, state, r, t, chi, rm.normal_quantile(quantile))


def make_rm_estimator(
    num_slots: int = niw.NUM_SLOTS, chi: float = CHI, quantile: float | None = None
) -> niw.Estimator:
    """The Robbins-Monro estimator with its settings bound, behind the estimator contract.

    Returns:
      ``Estimator(init, refit)``; ``refit(state, slot_rewards (S,), slot_times (S,), key)`` is
      pure and raises ValueError on slot arrays not of shape ``(S,)``.

    Raises:
      ValueError: a bad ``num_slots``, ``chi`` or ``quantile`` (here, before any tracing).
    """
    niw.check_count("num_slots", num_slots)
    rm.check_chi(chi)
    rm.check_rm_quantile(quantile)
    bound = partial(refit, chi=chi, quantile=quantile)

    def checked(state: RMState, slot_rewards, slot_times, key) -> RMState:
        shape = tuple(jnp.shape(slot_rewards))
        if shape != (num_slots,):
            raise ValueError(f"expected slot arrays of shape ({num_slots},), got {shape}")
        return bound(state, slot_rewards, slot_times, key)

    return niw.Estimator(init=init_state, refit=checked)  # type: ignore[arg-type]
