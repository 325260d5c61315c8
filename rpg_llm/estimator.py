"""Normal-Inverse-Wishart (NIW) reward-rate estimator (DESIGN.md section 4, torch backend).

Mirrors ``rpg_jax.estimator`` name for name and in semantics (the contract suite
``tests/test_estimator_contract.py`` runs against both and checks their parity): ``S`` slots each
accumulate a (reward sum, time sum) pair; the slot vector ``y = (slot reward sum, log slot time
sum)`` (``D = 2``) gets an NIW posterior refitted from the slots with forgetting, and the reward
rate is estimated as the 95th percentile of the ratio ``mean(r) / mean(delta)`` over synthetic
batches of ``S`` slots drawn from the posterior predictive (a multivariate Student-t).
Paper: Tian & Yang (2026), "Reward-rate Policy Gradient ...", Algorithm 1 (``f_rho`` is an NIW
posterior, ``rho_hat_1 = 0``). Conjugate NIW update: Murphy, "Conjugate Bayesian analysis of the
Gaussian distribution" (2007), eqs. 250-254; predictive Student-t: same, eq. 258.

Differences forced by the framework, not by the semantics: randomness comes from a seeded
``torch.Generator`` (where JAX takes a key), and functions run eagerly. Every float field follows
the dtype given to :func:`init_state` (``torch.float64`` for exact parity with JAX in float64).
The draws use ``torch.distributions`` (``MultivariateNormal`` and ``Chi2``); since those sample
from the global RNG, a seed is taken from the caller's generator and the draws run inside
``torch.random.fork_rng``, so the global RNG is left untouched and the same generator state gives
the same draws.

The algebra (constants, checks, conjugate update with forgetting, predictive parameters,
quantile, posterior-mean rate) is :mod:`rpg_core.niw`, shared with the JAX backend and the NumPy
reference; this module keeps the torch sampler and the eager control flow.

Units: rewards in reward units, times in seconds; ``rho_hat`` in reward per second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.distributions import Chi2, MultivariateNormal

from rpg_core import niw
from rpg_core.niw import (
    KAPPA0,
    LAM,
    MU0,
    NU0,
    NUM_BATCHES,
    NUM_SLOTS,
    PSI0_SCALE,
    QUANTILE,
    D,
    NIWState,
)

__all__ = [
    "D",
    "MU0",
    "KAPPA0",
    "NU0",
    "PSI0_SCALE",
    "LAM",
    "NUM_SLOTS",
    "NUM_BATCHES",
    "QUANTILE",
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
]

# "fast" (default) and "torch" both draw with torch.distributions (MultivariateNormal + Chi2):
# in torch that already is the fast path; the names match rpg_jax.estimator.SAMPLERS' default.
SAMPLERS = ("fast", "torch")


def init_state(dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
    """The state before any data: the first prior, ``rho_hat = 0``, ``fitted = False``.

    Args:
      dtype: float dtype of every float field.
      device: device of the tensors (default: CPU).

    Returns:
      :class:`NIWState` with ``mu = MU0``, ``kappa = KAPPA0``, ``nu = NU0``,
      ``psi = PSI0_SCALE * I``.

    Raises:
      ValueError: if ``dtype`` is not a floating dtype.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")
    kw = {"dtype": dtype, "device": device}
    return NIWState(
        mu=torch.full((D,), MU0, **kw),
        kappa=torch.tensor(KAPPA0, **kw),
        nu=torch.tensor(NU0, **kw),
        psi=PSI0_SCALE * torch.eye(D, **kw),
        rho_hat=torch.zeros((), **kw),
        fitted=torch.zeros((), dtype=torch.bool, device=device),
        num_fits=torch.zeros((), dtype=torch.int32, device=device),
    )


def _as_tensor(x, dtype=None, device=None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(dtype=dtype or x.dtype, device=device or x.device)
    t = torch.as_tensor(x, device=device)
    if dtype is not None:
        return t.to(dtype)
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


def slot_vectors(slot_rewards, slot_times, dtype: torch.dtype | None = None):
    """Slot vectors ``y = (reward sum, log time sum)`` ``(S, 2)`` (unusable rows 0) and the
    usable-slot mask ``(S,)`` bool (reward and time finite, time > 0):
    :func:`rpg_core.niw.slot_vectors` on tensors (array-likes are converted; ``dtype`` defaults
    to the inputs' promoted float dtype).

    Raises: ValueError on shape mismatch or zero slots.
    """
    r, t = _as_tensor(slot_rewards), _as_tensor(slot_times)
    niw.check_slot_shapes(r.shape, t.shape)
    if dtype is None:
        dtype = torch.promote_types(r.dtype, t.dtype)
    return niw.slot_vectors(torch, r.to(dtype), t.to(dtype))


def forgetting_prior(state: NIWState, lam=LAM):
    """``(mu0, kappa0, nu0, psi0)`` of the next refit (the first prior before any real refit,
    else ``(mu, lam kappa, max(lam nu, D + 2), lam psi)``): :func:`rpg_core.niw.forgetting_prior`
    on tensors. Raises ValueError if ``lam`` is outside ``(0, 1]`` or NaN.
    """
    niw.check_lam(lam)
    lam = torch.as_tensor(lam, dtype=state.kappa.dtype, device=state.kappa.device)
    return niw.forgetting_prior(torch, state, lam)


def niw_posterior(mu0, kappa0, nu0, psi0, y: torch.Tensor, mask: torch.Tensor):
    """Conjugate NIW update of a prior on the masked rows of ``y`` ``(S, d)`` (Murphy 2007, eqs.
    250-254): :func:`rpg_core.niw.niw_posterior` on tensors; ``(mu_n, kappa_n, nu_n, psi_n)``.
    """
    return niw.niw_posterior(torch, mu0, kappa0, nu0, psi0, y, mask)


def update(state: NIWState, slot_rewards, slot_times, lam=LAM) -> NIWState:
    """Refit the NIW posterior from the slot accumulators ``(S,)`` (seconds), with forgetting.

    :func:`rpg_core.niw.update` on :func:`slot_vectors`: fewer than 2 usable slots keep the
    state except ``fitted = False``; otherwise ``fitted = True``, ``num_fits += 1``, ``rho_hat``
    unchanged (set it with :func:`estimate` / :func:`refit`).

    Raises:
      ValueError: on mismatched / non-1-D slot arrays, zero slots, or ``lam`` outside ``(0, 1]``
        (or NaN).

    Source: DESIGN.md section 4; paper Algorithm 1 ("Fit f_rho on B").
    """
    niw.check_lam(lam)
    dev = state.mu.device
    y, mask = slot_vectors(
        _as_tensor(slot_rewards, device=dev), _as_tensor(slot_times, device=dev), state.mu.dtype
    )
    lam = torch.as_tensor(lam, dtype=state.kappa.dtype, device=dev)
    return niw.update(torch, state, y, mask, lam)


def predictive_params(state: NIWState):
    """Predictive Student-t ``(df, loc, scale, scale_tril)`` of one slot vector, shapes
    ``(), (2,), (2, 2), (2, 2)`` (Murphy 2007, eq. 258): :func:`rpg_core.niw.predictive_params`.
    """
    return niw.predictive_params(torch, state)


def _check_sampling(num_slots, num_batches, quantile, sampler) -> None:
    for name, value in (("num_batches", num_batches), ("num_slots", num_slots)):
        niw.check_count(name, value)
    niw.check_choice("sampler", sampler, SAMPLERS)
    niw.check_quantile(quantile)


def _check_generator(generator) -> None:
    if not isinstance(generator, torch.Generator):
        raise ValueError(
            f"generator must be a seeded torch.Generator, got {type(generator).__name__}"
        )


def predictive_draws(
    state: NIWState,
    generator: torch.Generator,
    num_slots: int,
    num_batches: int = NUM_BATCHES,
    sampler: str = "fast",
) -> torch.Tensor:
    """Draw ``num_batches`` synthetic batches of ``num_slots`` slot vectors from the predictive.

    Multivariate Student-t as a scale mixture: ``loc + z sqrt(df / w)``, ``z ~ N(0, scale)``
    (``MultivariateNormal`` with ``scale_tril``), ``w ~ Chi2(df)`` independent, one ``w`` per
    slot vector (Kotz & Nadarajah, "Multivariate t Distributions and Their Applications", 2004,
    eq. 1.1).

    Args:
      state: :class:`NIWState` (needs ``nu > 3``).
      generator: a seeded ``torch.Generator`` (on the state's device); advanced by one draw.
      num_slots: slots per batch ``S``.
      num_batches: batches ``M``.
      sampler: ``"fast"`` or ``"torch"`` (the same torch.distributions draws; see ``SAMPLERS``).

    Returns:
      Draws of ``y = (reward sum, log time sum)``, shape ``(num_batches, num_slots, 2)``.

    Raises:
      ValueError: on a non-positive ``num_slots`` / ``num_batches``, an unknown ``sampler`` or a
        ``generator`` that is not a ``torch.Generator``.
    """
    _check_sampling(num_slots, num_batches, 0.5, sampler)
    _check_generator(generator)
    df, loc, _, scale_tril = predictive_params(state)
    seed = int(torch.randint(0, 2**62, (), generator=generator, device=generator.device))
    device = loc.device
    devices = [device.index or 0] if device.type == "cuda" else []
    shape = (num_batches, num_slots)
    with torch.random.fork_rng(devices=devices, device_type=device.type):
        if device.type == "cuda":
            torch.cuda.manual_seed(seed)
        else:
            torch.default_generator.manual_seed(seed)
        z = MultivariateNormal(torch.zeros_like(loc), scale_tril=scale_tril).sample(shape)
        w = Chi2(df).sample(shape)
    return loc + z * torch.sqrt(df / w)[..., None]


def rate_quantile(draws: torch.Tensor, quantile=QUANTILE) -> torch.Tensor:
    """``max(0, quantile_m [mean_s r_ms / mean_s exp(t_ms)])`` of predictive draws.

    Args:
      draws: shape ``(M, S, 2)``: slot vectors ``(reward sum, log time sum)``.
      quantile: in ``[0, 1]`` (linear interpolation between order statistics, NumPy's default).

    Returns:
      ``rho_hat``, shape ``()``, >= 0.

    Raises:
      ValueError: if ``draws`` is not ``(M, S, 2)`` or ``quantile`` is outside ``[0, 1]``.
    """
    niw.check_draws_shape(draws.shape)
    return niw.rate_quantile(torch, niw.batch_rates(torch, draws), float(quantile))


def estimate(
    state: NIWState,
    generator: torch.Generator,
    num_slots: int = NUM_SLOTS,
    num_batches: int = NUM_BATCHES,
    quantile=QUANTILE,
    sampler: str = "fast",
) -> torch.Tensor:
    """Reward-rate estimate from the posterior predictive (quantile of synthetic batch rates).

    If ``state.fitted`` is False, returns ``state.rho_hat`` (the last estimate; 0 before any
    fit) and draws nothing. Otherwise draws ``num_batches`` batches of ``num_slots`` slot
    vectors from the predictive Student-t, exponentiates the time coordinate, takes
    ``mean(r) / mean(delta)`` per batch and returns ``max(0, quantile)`` of those ratios
    (:func:`rate_quantile` of :func:`predictive_draws`).

    Args:
      state: :class:`NIWState`.
      generator: a seeded ``torch.Generator``.
      num_slots, num_batches: ints (``S``, ``M``).
      quantile: in ``[0, 1]``.
      sampler: see :func:`predictive_draws`.

    Returns:
      ``rho_hat``, shape ``()``, state dtype, >= 0.

    Raises:
      ValueError: on bad ``num_slots`` / ``num_batches`` / ``quantile`` / ``sampler`` /
        ``generator``.

    Source: DESIGN.md section 4 (reference estimator).
    """
    _check_sampling(num_slots, num_batches, quantile, sampler)
    _check_generator(generator)
    if not bool(state.fitted):
        return state.rho_hat
    draws = predictive_draws(state, generator, num_slots, num_batches, sampler)
    return rate_quantile(draws, quantile).to(state.rho_hat.dtype)


def refit(
    state: NIWState,
    slot_rewards,
    slot_times,
    generator: torch.Generator,
    num_batches: int = NUM_BATCHES,
    quantile=QUANTILE,
    lam=LAM,
    sampler: str = "fast",
) -> NIWState:
    """:func:`update` then :func:`estimate` (with ``num_slots = S``), stored in ``rho_hat``.

    Args:
      state: :class:`NIWState`.
      slot_rewards, slot_times: slot accumulators, shape ``(S,)``.
      generator: a seeded ``torch.Generator``.
      num_batches, quantile, lam, sampler: as in :func:`update` / :func:`estimate`.

    Returns:
      The new state; ``rho_hat`` unchanged when fewer than 2 slots are usable.

    Raises:
      ValueError: as :func:`update` and :func:`estimate`.
    """
    _check_sampling(1, num_batches, quantile, sampler)
    _check_generator(generator)
    state = update(state, slot_rewards, slot_times, lam)
    num_slots = int(_as_tensor(slot_rewards).shape[0])
    rho_hat = estimate(state, generator, num_slots, num_batches, quantile, sampler)
    return state._replace(rho_hat=rho_hat)


def posterior_mean_rate(state: NIWState) -> torch.Tensor:
    """Alternative estimator: rate of the NIW posterior means, ``max(0, E[r] / E[exp(t)])``.

    ``E[r] = mu_r``; ``E[exp(t)] = exp(mu_t + Sigma_tt / 2)`` with the posterior mean covariance
    ``Sigma = psi / (nu - D - 1)`` (lognormal mean). Returns ``state.rho_hat`` when
    ``state.fitted`` is False (or when ``nu <= D + 1``, where the mean covariance is undefined).

    Args:
      state: :class:`NIWState`.

    Returns:
      Shape ``()``, state dtype, >= 0.

    Source: DESIGN.md section 4 ("alternatives behind the same contract"); NIW moments: Murphy
    (2007), eq. 247 (mean of the inverse-Wishart).
    """
    return niw.posterior_mean_rate(torch, state)


def refit_posterior_mean(
    state: NIWState,
    slot_rewards,
    slot_times,
    generator: torch.Generator | None = None,
    lam=LAM,
) -> NIWState:
    """:func:`update` then :func:`posterior_mean_rate`, stored in ``rho_hat``.

    Args:
      state, slot_rewards, slot_times, lam: as in :func:`update`.
      generator: unused (kept so every estimator's refit has the same signature).

    Returns:
      The new state.

    Raises:
      ValueError: as :func:`update`.
    """
    del generator
    state = update(state, slot_rewards, slot_times, lam)
    return state._replace(rho_hat=posterior_mean_rate(state))


class Estimator(NamedTuple):
    """A reward-rate estimator behind the contract, with its settings bound.

    Attributes:
      init: ``init(dtype=torch.float32) -> NIWState``.
      refit: ``refit(state, slot_rewards (S,), slot_times (S,), generator) -> NIWState``; the
        estimate is ``state.rho_hat``.
    """

    init: Callable[..., NIWState]
    refit: Callable[[NIWState, torch.Tensor, torch.Tensor, torch.Generator], NIWState]


def make_niw_estimator(
    num_slots: int = NUM_SLOTS,
    num_batches: int = NUM_BATCHES,
    quantile: float = QUANTILE,
    lam: float = LAM,
    kind: str = "niw_quantile",
    sampler: str = "fast",
) -> Estimator:
    """Bind the settings of an NIW estimator.

    Args:
      num_slots: expected slot count ``S``; ``refit`` raises ValueError on other lengths.
      num_batches: synthetic batches ``M`` (``kind="niw_quantile"``).
      quantile: in ``[0, 1]`` (``kind="niw_quantile"``).
      lam: forgetting factor in ``(0, 1]``.
      kind: ``"niw_quantile"`` (:func:`refit`) or ``"posterior_mean"``
        (:func:`refit_posterior_mean`).
      sampler: one of ``SAMPLERS``.

    Returns:
      :class:`Estimator`.

    Raises:
      ValueError: on any bad setting (checked here).
    """
    _check_sampling(num_slots, num_batches, quantile, sampler)
    niw.check_lam(lam)
    niw.check_choice("kind", kind, niw.KINDS)

    def _refit(state, slot_rewards, slot_times, generator):
        shape = tuple(_as_tensor(slot_rewards).shape)
        if shape != (num_slots,):
            raise ValueError(f"expected slot arrays of shape ({num_slots},), got {shape}")
        if kind == "posterior_mean":
            return refit_posterior_mean(state, slot_rewards, slot_times, generator, lam)
        return refit(
            state, slot_rewards, slot_times, generator, num_batches, quantile, lam, sampler
        )

    return Estimator(init=init_state, refit=_refit)
