"""The Robbins-Monro reward-rate estimator: the NPG theorem's running rate, written once.

DESIGN.md section 4 ("alternatives behind the same contract"). The estimator is fed exactly what
the NIW estimator is fed: ``S`` slot sums of rewards and times (DESIGN.md section 7). At refit
``k = 1, 2, ...`` it reads the slots' pooled rate ``x_k = sum_s r_s / sum_s delta_s`` over the
usable slots (reward and time finite, time > 0) and moves its running rate toward it by a
Robbins-Monro step:

    rho_bar_{k+1} = rho_bar_k + a_k (x_k - rho_bar_k),   a_k = eta_k / H_{k+1},
    eta_k = (k + 1) ** -chi,   H_{k+1} = sum_{i <= k} eta_i,   rho_bar_1 = rho_0 = 0,

so ``rho_bar`` is the ``eta``-weighted mean of ``rho_0 = 0`` (Algorithm 1's ``rho_hat_1 = 0``,
weight ``eta_0 = 1``) and ``x_1 .. x_k``. This is exactly the running rate ``rhobar_k`` of the NPG
decoupling theorem (proofs/npg_decoupling.md, Theorems 1-2; ``rpg_jax.npg_theory``), whose error
shrinks as ``O(k^-(1-chi))``; the steps ``a_k`` are ``~ (1 - chi) / k``. A common scale ``eta0``
of the weights cancels in the mean, so ``chi`` in ``[0, 1)`` is the one setting of the mean
(``chi = 0``: the plain average of the batch rates; larger ``chi`` forgets old rates faster). On a
stationary stream of independent batch rates the error of ``rho_bar`` has standard deviation
``s sqrt(sum eta_i^2) / H``, i.e. ``~ k^-(1-chi)`` for ``chi > 1/2`` and ``~ k^-1/2`` below
(``tests/core/test_robbins_monro.py`` fits the exponent).

Confidence quantile (optional, ``quantile`` in ``(0, 1)``): ``rho_hat = max(0, rho_bar + z_q se)``
with ``z_q`` the standard normal quantile and ``se = s sqrt(sum eta_i^2) / H`` the standard
error of the weighted mean, ``s^2`` the reliability-weighted variance of the fed rates (West,
"Updating mean and variance estimates: an improved method", CACM 1979, for the running update).
Without a quantile ``rho_hat = max(0, rho_bar)``.

Written against an array namespace ``xp`` (``jax.numpy``, ``torch``, ``numpy``) as
:mod:`rpg_core.niw` is, with no Python branch on an array value; imports neither jax nor torch.
Sources: Robbins & Monro, "A stochastic approximation method", Ann. Math. Stat. 1951; paper
(Tian & Yang 2026), section 3 ("f_rho can be ... Robbins-Monro iteration") and the NPG theorem.

Units: rewards in reward units, times in seconds (``rpg_llm``) or abstract time units (bandits);
``rho_hat`` in reward per time unit.
"""

from __future__ import annotations

import numbers
from statistics import NormalDist
from typing import Any, NamedTuple

from rpg_core.niw import concrete

__all__ = [
    "CHI",
    "RMState",
    "check_chi",
    "check_rm_quantile",
    "normal_quantile",
    "initial_fields",
    "pooled_rate",
    "step_weight",
    "update",
]

CHI = 0.5  # default exponent of the weights eta_k = (k + 1) ** -chi


class RMState(NamedTuple):
    """Robbins-Monro estimator state, in one backend's arrays (a pytree in JAX).

    Attributes:
      rho_hat: the estimate, shape ``()``, float (0 before any fit).
      rho_bar: the running rate (the ``eta``-weighted mean), ``()`` float.
      weight_sum: ``H = sum eta_i`` over ``rho_0`` and the fitted rates, ``()`` float.
      weight_sq_sum: ``sum eta_i^2``, ``()`` float.
      m2: weighted sum of squared deviations from ``rho_bar``, ``()`` float.
      fitted: whether the LAST refit had a usable slot, ``()`` bool.
      num_fits: refits with a usable slot so far, ``()`` int32.
    """

    rho_hat: Any
    rho_bar: Any
    weight_sum: Any
    weight_sq_sum: Any
    m2: Any
    fitted: Any
    num_fits: Any


def check_chi(chi: Any) -> None:
    """Raise ValueError naming ``chi`` unless it is one number in ``[0, 1)``."""
    if isinstance(chi, bool) or not isinstance(chi, numbers.Real) or not 0.0 <= float(chi) < 1.0:
        raise ValueError(f"chi must be a number in [0, 1), got {chi!r}")


def check_rm_quantile(quantile: Any) -> None:
    """Raise ValueError naming ``quantile`` unless it is None or one number in ``(0, 1)``."""
    if quantile is None:
        return
    bad = isinstance(quantile, bool) or not isinstance(quantile, numbers.Real)
    if bad or not 0.0 < float(quantile) < 1.0:
        raise ValueError(f"quantile must be None or a number in (0, 1), got {quantile!r}")


def normal_quantile(quantile: float | None) -> float:
    """``z_q`` of the standard normal (0.0 for ``quantile=None``: the running mean itself).

    Raises:
      ValueError: as :func:`check_rm_quantile`.
    """
    check_rm_quantile(quantile)
    return 0.0 if quantile is None else NormalDist().inv_cdf(float(quantile))


def initial_fields() -> dict[str, float]:
    """The float fields before any data: ``rho_0 = 0`` with weight ``eta_0 = 1``."""
    return {"rho_hat": 0.0, "rho_bar": 0.0, "weight_sum": 1.0, "weight_sq_sum": 1.0, "m2": 0.0}


def pooled_rate(xp: Any, slot_rewards: Any, slot_times: Any) -> tuple[Any, Any]:
    """The slots' pooled rate ``sum r / sum delta`` over the usable slots, and whether any is.

    Args:
      xp: array namespace.
      slot_rewards, slot_times: slot sums, shape ``(S,)``, one float dtype (times > 0 usable).

    Returns:
      ``(rate, ok)``: shape ``()`` each, ``rate`` 0 where ``ok`` is False.
    """
    mask = xp.isfinite(slot_rewards) & xp.isfinite(slot_times) & (slot_times > 0)
    zero = xp.zeros_like(slot_rewards)
    r = xp.where(mask, slot_rewards, zero).sum()
    t = xp.where(mask, slot_times, zero).sum()
    ok = mask.sum() >= 1
    return xp.where(ok, r / xp.where(ok, t, t * 0 + 1.0), r * 0), ok


def step_weight(num_fits: Any, chi: Any, like: Any) -> Any:
    """``eta_k = (k + 1) ** -chi`` for the ``k = num_fits + 1``-th fitted rate, in ``like``'s
    dtype (``num_fits``: fits before this one)."""
    k = like * 0 + num_fits + 1.0
    return (k + 1.0) ** (-chi)


def update(
    xp: Any, state: RMState, slot_rewards: Any, slot_times: Any, chi: Any = CHI, z: Any = 0.0
) -> RMState:
    """One refit: the Robbins-Monro step toward the slots' pooled rate (module docstring).

    With no usable slot the state is returned unchanged except ``fitted = False``.

    Args:
      xp: array namespace.
      state: :class:`RMState` in ``xp`` arrays.
      slot_rewards, slot_times: shape ``(S,)``, the state's float dtype.
      chi: weight exponent in ``[0, 1)``.
      z: the confidence quantile's ``z_q`` (:func:`normal_quantile`; 0: the mean).

    Returns:
      The new :class:`RMState`; ``rho_hat = max(0, rho_bar + z se)``.

    Raises:
      ValueError: ``chi`` concrete and outside ``[0, 1)``.
    """
    c = concrete(chi)
    if c is not None:
        check_chi(float(c))
    x, ok = pooled_rate(xp, slot_rewards, slot_times)
    w = step_weight(state.num_fits, chi, state.rho_bar)
    h = state.weight_sum + w
    dev = x - state.rho_bar
    bar = state.rho_bar + (w / h) * dev
    m2 = state.m2 + w * dev * (x - bar)
    h2 = state.weight_sq_sum + w * w
    rho_bar = xp.where(ok, bar, state.rho_bar)
    weight_sum = xp.where(ok, h, state.weight_sum)
    weight_sq_sum = xp.where(ok, h2, state.weight_sq_sum)
    m2 = xp.where(ok, m2, state.m2)
    # reliability-weighted variance of the fed rates, and the standard error of their mean
    dof = weight_sum - weight_sq_sum / weight_sum
    var = m2 / xp.where(dof > 0, dof, dof * 0 + 1.0)
    se = xp.sqrt(xp.maximum(var, var * 0) * weight_sq_sum) / weight_sum
    est = rho_bar + z * se
    rho_hat = xp.where(ok, xp.maximum(est, est * 0), state.rho_hat)
    one = state.num_fits * 0 + 1
    return RMState(
        rho_hat=rho_hat,
        rho_bar=rho_bar,
        weight_sum=weight_sum,
        weight_sq_sum=weight_sq_sum,
        m2=m2,
        fitted=ok,
        num_fits=xp.where(ok, state.num_fits + one, state.num_fits),
    )
