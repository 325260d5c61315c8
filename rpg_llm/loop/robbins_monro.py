"""Robbins-Monro reward-rate estimator, torch backend (DESIGN.md section 4).

Mirrors ``rpg_jax.robbins_monro``; the algebra is :mod:`rpg_core.robbins_monro` (the NPG
theorem's running rate: each refit moves ``rho_bar`` toward the slots' pooled rate by
``a_k = eta_k / H_{k+1}``, ``eta_k = (k + 1) ** -chi``). :class:`RobbinsMonroEstimator` meets the
loop's :class:`rpg_llm.loop.types.RateEstimator` contract, fed the same slot sums as the NIW
estimator; it draws nothing (the generator and ``num_batches`` are accepted and unused).
Units: rewards in reward units, times in seconds; ``rho_hat`` in reward per second.
"""

from __future__ import annotations

import numpy as np
import torch

from rpg_core import robbins_monro as rm
from rpg_core.robbins_monro import CHI, RMState

__all__ = ["CHI", "RMState", "SlotSums", "init_state", "refit", "RobbinsMonroEstimator"]

SlotSums = torch.Tensor | np.ndarray  # shape (S,): slot reward or time (seconds) sums


def init_state(
    dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
) -> RMState:
    """The state before any data (``rho_hat = rho_bar = 0`` with weight 1, no fit).

    Raises:
      ValueError: ``dtype`` is not a floating dtype.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")
    fields = {
        k: torch.tensor(v, dtype=dtype, device=device) for k, v in rm.initial_fields().items()
    }
    return RMState(
        **fields,
        fitted=torch.tensor(False, device=device),
        num_fits=torch.tensor(0, dtype=torch.int32, device=device),
    )


def refit(
    state: RMState,
    slot_rewards: SlotSums,
    slot_times: SlotSums,
    chi: float = CHI,
    quantile: float | None = None,
) -> RMState:
    """One Robbins-Monro refit on the slot sums (:func:`rpg_core.robbins_monro.update`).

    Args:
      state: :class:`RMState`.
      slot_rewards, slot_times: shape ``(S,)`` (tensors or arrays; times in seconds).
      chi: weight exponent in ``[0, 1)``.
      quantile: None (the running mean) or the confidence quantile in ``(0, 1)``.

    Raises:
      ValueError: a bad ``chi`` or ``quantile``.
    """
    rm.check_chi(chi)
    dtype, device = state.rho_bar.dtype, state.rho_bar.device
    r = torch.as_tensor(slot_rewards, dtype=dtype, device=device)
    t = torch.as_tensor(slot_times, dtype=dtype, device=device)
    return rm.update(torch, state, r, t, chi, rm.normal_quantile(quantile))


class RobbinsMonroEstimator:
    """The Robbins-Monro estimator with ``chi`` and ``quantile`` bound, as the loop calls it.

    Raises:
      ValueError: a bad ``chi`` or ``quantile`` (at construction).
    """

    def __init__(self, chi: float = CHI, quantile: float | None = None) -> None:
        rm.check_chi(chi)
        rm.check_rm_quantile(quantile)
        self.chi, self.quantile = float(chi), quantile

    def init_state(
        self, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None
    ) -> RMState:
        """:func:`init_state`."""
        return init_state(dtype, device)

    def refit(
        self,
        state: RMState,
        slot_rewards: SlotSums,
        slot_times: SlotSums,
        generator: torch.Generator | None = None,
        num_batches: int = 0,
    ) -> RMState:
        """:func:`refit` with the bound settings (``generator``, ``num_batches`` unused)."""
        del generator, num_batches
        return refit(state, slot_rewards, slot_times, self.chi, self.quantile)
