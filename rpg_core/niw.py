"""The Normal-Inverse-Wishart (NIW) algebra of the reward-rate estimator, written once.

DESIGN.md section 4. The slot vector is ``y = (slot reward sum, log slot time sum)`` (``D = 2``).
This module holds every piece of the estimator that does not depend on how random numbers are
drawn: the constants, the input checks, the conjugate update with forgetting, the posterior
predictive (Student-t) parameters, the batch-rate quantile and the posterior-mean rate. It is
written against an *array namespace* ``xp`` passed as the first argument: ``jax.numpy``
(``rpg_jax.estimator``, traceable under ``jit`` / ``vmap``), ``torch`` (``rpg_llm.loop.estimator``)
or ``numpy`` (``testkit.numpy_ref_npg``). It uses only what the three share -- ``xp.where``,
``xp.maximum``, ``xp.sqrt``, ``xp.log``, ``xp.exp``, ``xp.isfinite``, ``xp.stack``,
``xp.zeros_like``, ``xp.quantile`` and array operators/methods -- and never branches in Python on
an array value, so one code path serves the traced JAX backend and the eager ones. The backends
keep only their sampler and control flow. This module imports neither jax nor torch.

Sources: paper (Tian & Yang 2026, "Reward-rate Policy Gradient ...") Algorithm 1 (``f_rho`` an
NIW posterior, ``rho_hat_1 = 0``); conjugate update: Murphy, "Conjugate Bayesian analysis of the
Gaussian distribution" (2007), eqs. 250-254; predictive Student-t: same, eq. 258 (Gelman et al.,
"Bayesian Data Analysis", 3rd ed., section 3.6); mean of the inverse-Wishart: Murphy eq. 247.

Units: rewards in reward units, times in seconds (``rpg_llm``) or abstract time units (bandits);
``rho_hat`` in reward per time unit.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

CONSTANTS = (
    "D",
    "MU0",
    "KAPPA0",
    "NU0",
    "PSI0_SCALE",
    "LAM",
    "NUM_SLOTS",
    "NUM_BATCHES",
    "QUANTILE",
)
__all__ = [
    *CONSTANTS,
    "KINDS",
    "BACKEND_API",
    "NIWState",
    "Estimator",
    "bind_estimator",
    "concrete",
    "check_lam",
    "check_quantile",
    "check_count",
    "check_choice",
    "check_slot_shapes",
    "check_draws_shape",
    "slot_vectors",
    "forgetting_prior",
    "niw_posterior",
    "update",
    "predictive_params",
    "batch_rates",
    "rate_quantile",
    "posterior_mean_rate",
]

D = 2  # dimension of y = (slot reward sum, log slot time sum)
MU0 = 0.0  # first prior mean (both coordinates)
KAPPA0 = 1e-3  # first prior mean-precision count
NU0 = 3.0  # first prior degrees of freedom
PSI0_SCALE = 1e-3  # first prior scale matrix psi0 = PSI0_SCALE * I
LAM = 0.3  # forgetting factor applied to the previous posterior before each refit
NUM_SLOTS = 128  # slots in the reference (the slot count is the caller's array length)
NUM_BATCHES = 1000  # synthetic batches M drawn per estimate
QUANTILE = 0.95  # quantile of the per-batch rate
KINDS = ("niw_quantile", "posterior_mean")  # estimators behind the contract
# The names every estimator backend (rpg_jax.estimator, rpg_llm.loop.estimator) exports, with one
# meaning (tests/test_estimator_contract.py holds both to it).
BACKEND_API = (
    *CONSTANTS,
    "SAMPLERS",
    "NIWState",
    "init_state",
    "slot_vectors",
    "forgetting_prior",
    "niw_posterior",
    "update",
    "predictive_params",
    "predictive_draws",
    "rate_quantile",
    "estimate",
    "refit",
    "posterior_mean_rate",
    "refit_posterior_mean",
    "Estimator",
    "make_niw_estimator",
)


class NIWState(NamedTuple):
    """Estimator state, in the arrays of one backend (a pytree in JAX: stack for ``vmap``).

    Attributes:
      mu: posterior mean of ``y``, shape ``(2,)``, float.
      kappa: posterior mean-precision count, shape ``()``, float.
      nu: posterior degrees of freedom, shape ``()``, float.
      psi: posterior scale matrix, shape ``(2, 2)``, float, symmetric positive definite.
      rho_hat: last estimate of the reward rate, shape ``()``, float (0 before any fit).
      fitted: whether the LAST update was a real refit (>= 2 usable slots), ``()`` bool.
      num_fits: number of real refits so far, ``()`` int32 (0: the next refit uses the first
        prior ``(MU0, KAPPA0, NU0, PSI0_SCALE I)`` itself, not its forgotten version).
    """

    mu: Any
    kappa: Any
    nu: Any
    psi: Any
    rho_hat: Any
    fitted: Any
    num_fits: Any


class Estimator(NamedTuple):
    """A reward-rate estimator behind the contract, with its settings bound (either backend).

    Attributes:
      init: ``init(dtype) -> NIWState`` (the backend's ``init_state``).
      refit: ``refit(state, slot_rewards (S,), slot_times (S,), rng) -> NIWState``, ``rng`` a
        ``jax.random`` key (pure, ``jit``/``vmap``-able) or a seeded ``torch.Generator``; the
        estimate is ``state.rho_hat``.
    """

    init: Callable[..., NIWState]
    refit: Callable[[NIWState, Any, Any, Any], NIWState]


def bind_estimator(
    init: Callable[..., NIWState],
    refit_quantile: Callable[[NIWState, Any, Any, Any], NIWState],
    refit_posterior_mean: Callable[[NIWState, Any, Any, Any], NIWState],
    num_slots: int,
    kind: str,
    shape_of: Callable[[Any], tuple[int, ...]],
) -> Estimator:
    """The :class:`Estimator` of ``kind``, whose refit insists on ``num_slots`` slots.

    Args:
      init: the backend's ``init_state``.
      refit_quantile, refit_posterior_mean: ``(state, slot_rewards, slot_times, rng) -> state``
        with every other setting bound (``kind`` ``"niw_quantile"`` / ``"posterior_mean"``).
      num_slots: expected slot count ``S``.
      kind: one of :data:`KINDS`.
      shape_of: the shape of a slot array in the backend (``jnp.shape``, ...).

    Returns:
      :class:`Estimator`; its ``refit`` raises ValueError on slot arrays not of shape ``(S,)``.

    Raises:
      ValueError: on a bad ``num_slots`` or ``kind`` (here, before any tracing).
    """
    check_count("num_slots", num_slots)
    check_choice("kind", kind, KINDS)
    chosen = refit_posterior_mean if kind == "posterior_mean" else refit_quantile

    def refit(state: NIWState, slot_rewards: Any, slot_times: Any, rng: Any) -> NIWState:
        shape = tuple(shape_of(slot_rewards))
        if shape != (num_slots,):
            raise ValueError(f"expected slot arrays of shape ({num_slots},), got {shape}")
        return chosen(state, slot_rewards, slot_times, rng)

    return Estimator(init=init, refit=refit)


# ----------------------------------------------------------------------------- checks


def concrete(value: Any) -> np.ndarray | None:
    """``value`` as a float64 NumPy array, or None when it has no value yet (a JAX tracer).

    Accepts Python numbers, NumPy / JAX arrays and torch tensors (any device; moved to the host).

    Raises:
      ValueError: if ``value`` is concrete but not numeric (e.g. a string).
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, without torch
        value = value.detach().cpu()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        if type(value).__module__.startswith("jax"):  # tracer: checked by the caller's jit
            return None
        raise ValueError(f"expected a number or a numeric array, got {value!r}") from err


def _check_range(name: str, value: Any, lo: float, hi: float, lo_open: bool) -> None:
    v = concrete(value)
    if v is None:
        return
    bad = np.isnan(v) | (v <= lo if lo_open else v < lo) | (v > hi)
    if np.any(bad):
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        shown = float(v) if v.ndim == 0 else v[bad][:4].tolist()
        raise ValueError(f"{name} must lie in {interval}, got {shown!r}")
    if v.ndim != 0:
        raise ValueError(f"{name} must be one number (a 0-d array), got shape {v.shape}")


def check_lam(lam: Any) -> None:
    """Raise ValueError unless ``lam`` is one number in ``(0, 1]``.

    ``lam`` may be a number or a 0-d array (any backend); a traced JAX value is not checked. An
    array is checked value by value first (a NaN or out-of-range entry is named), then refused
    unless 0-d (the estimator's prior and state fields are scalars).
    """
    _check_range("lam", lam, 0.0, 1.0, lo_open=True)


def check_quantile(quantile: Any) -> None:
    """Raise ValueError unless ``quantile`` is one number in ``[0, 1]``.

    ``quantile`` may be a number or a 0-d array (any backend); a traced JAX value is not checked.
    An array is checked value by value first (a NaN or out-of-range entry is named), then refused
    unless 0-d (``rho_hat`` is a scalar).
    """
    _check_range("quantile", quantile, 0.0, 1.0, lo_open=False)


def check_count(name: str, value: Any) -> None:
    """Raise ValueError unless ``value`` is a positive Python ``int`` (a static size)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raise ValueError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_slot_shapes(shape_rewards: tuple[int, ...], shape_times: tuple[int, ...]) -> None:
    """Raise ValueError unless both slot arrays are 1-D, of one length ``S >= 1``."""
    shape_rewards, shape_times = tuple(shape_rewards), tuple(shape_times)
    if len(shape_rewards) != 1 or shape_rewards != shape_times:
        raise ValueError(
            "slot_rewards and slot_times must be 1-D of equal length, got shapes "
            f"{shape_rewards} and {shape_times}"
        )
    if shape_rewards[0] < 1:
        raise ValueError("need at least one slot, got 0")


def check_draws_shape(shape: tuple[int, ...]) -> None:
    """Raise ValueError unless ``shape`` is ``(M, S, 2)``."""
    shape = tuple(shape)
    if len(shape) != 3 or shape[-1] != D:
        raise ValueError(f"draws must have shape (M, S, {D}), got {shape}")


# ----------------------------------------------------------------------------- algebra


def _at_least(xp: Any, x: Any, floor: float) -> Any:
    """Elementwise ``max(x, floor)`` in ``x``'s dtype (NaN propagates)."""
    return xp.maximum(x, xp.zeros_like(x) + floor)


def slot_vectors(xp: Any, slot_rewards: Any, slot_times: Any) -> tuple[Any, Any]:
    """Slot vectors ``y = (reward sum, log time sum)`` and the usable-slot mask.

    Args:
      xp: array namespace.
      slot_rewards: slot reward sums, shape ``(S,)``, float.
      slot_times: slot time sums (time units), shape ``(S,)``, the same float dtype.

    Returns:
      ``(y, mask)``: ``y`` shape ``(S, 2)`` with unusable rows set to 0, ``mask`` shape ``(S,)``
      bool, True where the slot is usable (reward and time finite, time > 0).
    """
    mask = xp.isfinite(slot_rewards) & xp.isfinite(slot_times) & (slot_times > 0)
    r = xp.where(mask, slot_rewards, xp.zeros_like(slot_rewards))
    log_t = xp.log(xp.where(mask, slot_times, xp.zeros_like(slot_times) + 1.0))
    return xp.stack([r, log_t], axis=-1), mask


def forgetting_prior(xp: Any, state: Any, lam: Any = LAM) -> tuple[Any, Any, Any, Any]:
    """The prior of the next refit: ``(mu, lam kappa, max(lam nu, D + 2), lam psi)``.

    The first refit forgets the first prior too (reference fact, DESIGN.md section 4): it
    starts from ``(0, lam kappa0, max(lam nu0, D + 2), lam psi0)`` = ``(0, 3e-4, 4, 3e-4 I)``
    at ``lam = 0.3``.

    Args:
      xp: array namespace.
      state: any object with ``mu (2,), kappa (), nu (), psi (2, 2)``.
      lam: forgetting factor in ``(0, 1]`` (number or 0-d array; may be traced).

    Returns:
      ``(mu0, kappa0, nu0, psi0)``, shapes ``(2,), (), (), (2, 2)``.

    Raises:
      ValueError: if ``lam`` is concrete and outside ``(0, 1]``, NaN or not one number.

    Source: DESIGN.md section 4 (reference forgetting rule).
    """
    check_lam(lam)
    return state.mu, lam * state.kappa, _at_least(xp, lam * state.nu, D + 2.0), lam * state.psi


def niw_posterior(
    xp: Any, mu0: Any, kappa0: Any, nu0: Any, psi0: Any, y: Any, mask: Any
) -> tuple[Any, Any, Any, Any]:
    """Conjugate NIW update of the prior ``(mu0, kappa0, nu0, psi0)`` on the masked rows of ``y``.

    With ``n`` usable rows, mean ``ybar`` and centred scatter ``C = sum (y - ybar)(y - ybar)^T``:
    ``kappa_n = kappa0 + n``, ``nu_n = nu0 + n``, ``mu_n = (kappa0 mu0 + n ybar) / kappa_n``,
    ``psi_n = psi0 + C + kappa0 n / kappa_n (ybar - mu0)(ybar - mu0)^T``.

    Args:
      xp: array namespace.
      mu0, kappa0, nu0, psi0: prior, shapes ``(d,), (), (), (d, d)``.
      y: observations, shape ``(S, d)``, float; rows where ``mask`` is False are ignored (they
        must be finite).
      mask: usable rows, shape ``(S,)`` bool.

    Returns:
      ``(mu_n, kappa_n, nu_n, psi_n)`` in ``y``'s dtype (the prior when ``n = 0``).

    Source: Murphy (2007), eqs. 250-254.
    """
    w = xp.where(mask, xp.zeros_like(y[:, 0]) + 1.0, xp.zeros_like(y[:, 0]))[:, None]
    n = w.sum(0)[0]
    ybar = (w * y).sum(0) / _at_least(xp, n, 1.0)
    dev = w * (y - ybar)
    scatter = dev.T @ dev
    kappa_n = kappa0 + n
    mu_n = (kappa0 * mu0 + n * ybar) / kappa_n
    shift = ybar - mu0
    psi_n = psi0 + scatter + (kappa0 * n / kappa_n) * (shift[:, None] * shift[None, :])
    return mu_n, kappa_n, nu0 + n, psi_n


def update(xp: Any, state: NIWState, y: Any, mask: Any, lam: Any = LAM) -> NIWState:
    """Refit the posterior on the usable slot vectors, with forgetting (no Python branching).

    With fewer than 2 usable rows the state is returned unchanged except ``fitted = False``
    (posterior and ``rho_hat`` kept). Otherwise the prior is :func:`forgetting_prior` and the
    conjugate update :func:`niw_posterior` runs on the usable rows; ``fitted = True``,
    ``num_fits += 1``, ``rho_hat`` unchanged (the backend's estimate sets it).

    Args:
      xp: array namespace.
      state: :class:`NIWState` in ``xp`` arrays.
      y, mask: from :func:`slot_vectors`, shapes ``(S, 2)`` and ``(S,)``, ``y`` in the state's
        float dtype.
      lam: forgetting factor in ``(0, 1]``.

    Returns:
      The new :class:`NIWState`.

    Raises:
      ValueError: if ``lam`` is concrete and outside ``(0, 1]``, NaN or not one number.

    Source: DESIGN.md section 4; paper Algorithm 1 ("Fit f_rho on B").
    """
    mu, kappa, nu, psi = niw_posterior(xp, *forgetting_prior(xp, state, lam), y, mask)
    ok = mask.sum() >= 2
    one = state.num_fits * 0 + 1  # keeps the counter's integer dtype in every namespace
    return NIWState(
        mu=xp.where(ok, mu, state.mu),
        kappa=xp.where(ok, kappa, state.kappa),
        nu=xp.where(ok, nu, state.nu),
        psi=xp.where(ok, psi, state.psi),
        rho_hat=state.rho_hat,
        fitted=ok,
        num_fits=xp.where(ok, state.num_fits + one, state.num_fits),
    )


def predictive_params(xp: Any, state: Any) -> tuple[Any, Any, Any, Any]:
    """Posterior predictive Student-t of one slot vector: ``(df, loc, scale, scale_tril)``.

    ``df = nu - D + 1``, ``loc = mu``, ``scale = psi (kappa + 1) / (kappa df)``, ``scale_tril``
    its lower Cholesky factor (closed form for ``2 x 2``). Covariance ``scale df / (df - 2)``.

    Args:
      xp: array namespace.
      state: any object with ``mu (2,), kappa (), nu (), psi (2, 2)``.

    Returns:
      Shapes ``(), (2,), (2, 2), (2, 2)`` in the state's dtype.

    Source: Murphy (2007), eq. 258.
    """
    df = state.nu - D + 1.0
    scale = state.psi * ((state.kappa + 1.0) / (state.kappa * df))
    a, b, c = scale[0, 0], scale[1, 0], scale[1, 1]
    l00 = xp.sqrt(a)
    l10 = b / l00
    l11 = xp.sqrt(_at_least(xp, c - l10 * l10, 0.0))
    zero = xp.zeros_like(a)
    scale_tril = xp.stack([xp.stack([l00, zero]), xp.stack([l10, l11])])
    return df, state.mu, scale, scale_tril


def batch_rates(xp: Any, draws: Any) -> Any:
    """Per-batch rate ``mean_s r / mean_s exp(log t)`` of draws ``(..., S, 2)`` -> ``(...)``."""
    return draws[..., 0].mean(-1) / xp.exp(draws[..., 1]).mean(-1)


def rate_quantile(xp: Any, rates: Any, quantile: Any = QUANTILE) -> Any:
    """``rho_hat = max(0, quantile of rates)`` (linear interpolation, NumPy's default).

    Args:
      xp: array namespace.
      rates: per-batch rates, shape ``(M,)``, float.
      quantile: in ``[0, 1]`` (may be traced).

    Returns:
      Shape ``()``, ``rates``' dtype, >= 0 (NaN stays NaN).

    Raises:
      ValueError: if ``quantile`` is concrete and outside ``[0, 1]``, NaN or not one number.

    Source: DESIGN.md section 4 (``rho_hat = max(0, 95th percentile)``).
    """
    check_quantile(quantile)
    return _at_least(xp, xp.quantile(rates, quantile), 0.0)


def posterior_mean_rate(xp: Any, state: Any) -> Any:
    """Alternative estimator: rate of the NIW posterior means, ``max(0, E[r] / E[exp(t)])``.

    ``E[r] = mu_r``; ``E[exp(t)] = exp(mu_t + Sigma_tt / 2)`` with the posterior mean covariance
    ``Sigma = psi / (nu - D - 1)`` (lognormal mean). ``state.rho_hat`` when ``state.fitted`` is
    False or ``nu <= D + 1`` (mean covariance undefined).

    Args:
      xp: array namespace.
      state: :class:`NIWState`.

    Returns:
      Shape ``()``, state dtype, >= 0.

    Source: DESIGN.md section 4 ("alternatives behind the same contract"); Murphy (2007), eq. 247.
    """
    denom = state.nu - D - 1.0
    ok = state.fitted & (denom > 0)
    sigma_tt = state.psi[1, 1] / xp.where(denom > 0, denom, xp.zeros_like(denom) + 1.0)
    rate = state.mu[0] / xp.exp(state.mu[1] + 0.5 * sigma_tt)
    return xp.where(ok, _at_least(xp, rate, 0.0), state.rho_hat)
