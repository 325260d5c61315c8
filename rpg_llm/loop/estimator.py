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

from typing import Literal

import torch
from torch.distributions import Chi2, MultivariateNormal

from rpg_core import niw
from rpg_core.niw import KAPPA0, LAM, MU0, NU0, NUM_BATCHES, NUM_SLOTS, PSI0_SCALE, QUANTILE, D

__all__ = list(niw.BACKEND_API)

# "fast" (default) and "torch" both draw with torch.distributions (MultivariateNormal + Chi2):
# in torch that already is the fast path; the names match rpg_jax.estimator.SAMPLERS' default.
SAMPLERS = ("fast", "torch")
Estimator = niw.Estimator
NIWState = niw.NIWState


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


def forgetting_prior(state: NIWState, lam: float | torch.Tensor = LAM):
    """``(mu0, kappa0, nu0, psi0)`` of the next refit (the first prior before any real refit,
    else ``(mu, lam kappa, max(lam nu, D + 2), lam psi)``): :func:`rpg_core.niw.forgetting_prior`
    on tensors. Raises ValueError if ``lam`` is outside ``(0, 1]``, NaN or not one number.
    """
    niw.check_lam(lam)
    lam = torch.as_tensor(lam, dtype=state.kappa.dtype, device=state.kappa.device)
    return niw.forgetting_prior(torch, state, lam)


def niw_posterior(mu0, kappa0, nu0, psi0, y: torch.Tensor, mask: torch.Tensor):
    """Conjugate NIW update of a prior on the masked rows of ``y`` ``(S, d)`` (Murphy 2007, eqs.
    250-254): :func:`rpg_core.niw.niw_posterior` on tensors; ``(mu_n, kappa_n, nu_n, psi_n)``.
    """
    return niw.niw_posterior(torch, mu0, kappa0, nu0, psi0, y, mask)


def update(state: NIWState, slot_rewards, slot_times, lam: float | torch.Tensor = LAM) -> NIWState:
    """Refit the NIW posterior from the slot accumulators ``(S,)`` (seconds), with forgetting.

    :func:`rpg_core.niw.update` on :func:`slot_vectors`: fewer than 2 usable slots keep the
    state except ``fitted = False``; otherwise ``fitted = True``, ``num_fits += 1``, ``rho_hat``
    unchanged (set it with :func:`estimate` / :func:`refit`).

    Raises:
      ValueError: on mismatched / non-1-D slot arrays, zero slots, or ``lam`` outside ``(0, 1]``
        (or NaN, or not one number).

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
    sampler: Literal["fast", "torch"] = "fast",
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


def rate_quantile(draws: torch.Tensor, quantile: float | torch.Tensor = QUANTILE) -> torch.Tensor:
    """``rho_hat = max(0, quantile)`` over the batches of ``draws`` ``(M, S, 2)`` of the batch rate
    ``mean r / mean exp(log t)`` (:func:`rpg_core.niw.rate_quantile`, NumPy's linear
    interpolation); a 0-d tensor, >= 0. ``quantile``: a number or a 0-d array / tensor.
    Raises ValueError on another shape of ``draws``, or a ``quantile`` outside ``[0, 1]``, NaN
    (also inside an array; the error names it) or not 0-d.
    """
    niw.check_draws_shape(draws.shape)
    niw.check_quantile(quantile)  # before float(): an array's NaN is named, not a TypeError
    return niw.rate_quantile(torch, niw.batch_rates(torch, draws), float(quantile))


def estimate(
    state: NIWState,
    generator: torch.Generator,
    num_slots: int = NUM_SLOTS,
    num_batches: int = NUM_BATCHES,
    quantile: float | torch.Tensor = QUANTILE,
    sampler: Literal["fast", "torch"] = "fast",
) -> torch.Tensor:
    """``rho_hat`` from the posterior predictive (DESIGN.md section 4, reference estimator).

    Not fitted (``state.fitted`` False): the last estimate ``state.rho_hat`` (0 before any fit),
    and nothing is drawn. Fitted: :func:`rate_quantile` of :func:`predictive_draws`
    (``num_batches`` synthetic batches of ``num_slots`` slot vectors, drawn from ``generator``).
    A 0-d tensor in the state's dtype, >= 0.

    Raises:
      ValueError: on a non-positive ``num_slots`` / ``num_batches``, a ``quantile`` outside
        ``[0, 1]`` (or NaN, or not one number), an unknown ``sampler`` or a ``generator`` that is
        not a seeded ``torch.Generator``.
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
    quantile: float | torch.Tensor = QUANTILE,
    lam: float | torch.Tensor = LAM,
    sampler: Literal["fast", "torch"] = "fast",
) -> NIWState:
    """:func:`update` (``lam``) and then :func:`estimate` with ``num_slots = S`` (the slot arrays'
    length), stored in ``rho_hat`` (kept when fewer than 2 slots are usable). Raises ValueError
    as those two do.
    """
    _check_sampling(1, num_batches, quantile, sampler)
    _check_generator(generator)
    state = update(state, slot_rewards, slot_times, lam)
    num_slots = int(_as_tensor(slot_rewards).shape[0])
    rho_hat = estimate(state, generator, num_slots, num_batches, quantile, sampler)
    return state._replace(rho_hat=rho_hat)


def make_niw_estimator(
    num_slots: int = NUM_SLOTS,
    num_batches: int = NUM_BATCHES,
    quantile: float | torch.Tensor = QUANTILE,
    lam: float | torch.Tensor = LAM,
    kind: str = "niw_quantile",
    sampler: Literal["fast", "torch"] = "fast",
) -> Estimator:
    """Bind the settings of an NIW estimator (:func:`rpg_core.niw.bind_estimator`).

    Args:
      num_slots: the slot count ``S`` every ``refit`` call must pass (else ValueError).
      num_batches, quantile, sampler: see :func:`estimate` (``kind="niw_quantile"``).
      lam: forgetting factor in ``(0, 1]``.
      kind: one of ``rpg_core.niw.KINDS``: :func:`refit` or :func:`refit_posterior_mean`.

    Returns:
      :class:`Estimator` whose ``refit(state, slot_rewards, slot_times, generator)`` runs eagerly.

    Raises:
      ValueError: on any bad setting (checked here).
    """
    _check_sampling(num_slots, num_batches, quantile, sampler)
    niw.check_lam(lam)
    return niw.bind_estimator(
        init_state,
        lambda st, r, t, gen: refit(st, r, t, gen, num_batches, quantile, lam, sampler),
        lambda st, r, t, gen: refit_posterior_mean(st, r, t, gen, lam),
        num_slots,
        kind,
        lambda x: tuple(_as_tensor(x).shape),
    )


def posterior_mean_rate(state: NIWState) -> torch.Tensor:
    """Alternative estimator ``max(0, mu_r / exp(mu_t + Sigma_tt / 2))`` (posterior means; shape
    ``()``, state dtype; ``rho_hat`` when not fitted): :func:`rpg_core.niw.posterior_mean_rate`
    on torch tensors.
    """
    return niw.posterior_mean_rate(torch, state)


def refit_posterior_mean(
    state: NIWState,
    slot_rewards,
    slot_times,
    generator: torch.Generator | None = None,
    lam: float | torch.Tensor = LAM,
) -> NIWState:
    """:func:`update`, then ``rho_hat = posterior_mean_rate(state)``; ``generator`` is unused
    (every estimator's refit takes one). Raises ValueError as :func:`update` does."""
    del generator
    state = update(state, slot_rewards, slot_times, lam)
    return state._replace(rho_hat=posterior_mean_rate(state))
