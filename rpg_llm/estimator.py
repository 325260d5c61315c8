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

Units: rewards in reward units, times in seconds; ``rho_hat`` in reward per second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.distributions import Chi2, MultivariateNormal

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

D = 2  # dimension of y = (slot reward sum, log slot time sum)
MU0 = 0.0  # first prior mean (both coordinates)
KAPPA0 = 1e-3  # first prior mean-precision count
NU0 = 3.0  # first prior degrees of freedom
PSI0_SCALE = 1e-3  # first prior scale matrix psi0 = PSI0_SCALE * I
LAM = 0.3  # forgetting factor applied to the previous posterior before each refit
NUM_SLOTS = 128  # slots in the reference (the slot count is the caller's array length)
NUM_BATCHES = 1000  # synthetic batches M drawn per estimate
QUANTILE = 0.95  # quantile of the per-batch rate
# "fast" (default) and "torch" both draw with torch.distributions (MultivariateNormal + Chi2):
# in torch that already is the fast path; the names match rpg_jax.estimator.SAMPLERS' default.
SAMPLERS = ("fast", "torch")


class NIWState(NamedTuple):
    """Estimator state (tensors on one device, one dtype for the float fields).

    Attributes:
      mu: posterior mean of ``y``, shape ``(2,)``, float.
      kappa: posterior mean-precision count, shape ``()``, float.
      nu: posterior degrees of freedom, shape ``()``, float.
      psi: posterior scale matrix, shape ``(2, 2)``, float, symmetric positive definite.
      rho_hat: last estimate of the reward rate, shape ``()``, float (0 before any fit).
      fitted: whether the LAST :func:`update` was a real refit (>= 2 usable slots), ``()`` bool.
      num_fits: number of real refits so far, ``()`` int32 (0: the next refit uses the first
        prior ``(MU0, KAPPA0, NU0, PSI0_SCALE I)`` itself, not its forgotten version).
    """

    mu: torch.Tensor
    kappa: torch.Tensor
    nu: torch.Tensor
    psi: torch.Tensor
    rho_hat: torch.Tensor
    fitted: torch.Tensor
    num_fits: torch.Tensor


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


def _check_slots(slot_rewards: torch.Tensor, slot_times: torch.Tensor) -> None:
    if slot_rewards.ndim != 1 or slot_rewards.shape != slot_times.shape:
        raise ValueError(
            "slot_rewards and slot_times must be 1-D of equal length, got shapes "
            f"{tuple(slot_rewards.shape)} and {tuple(slot_times.shape)}"
        )
    if slot_rewards.shape[0] < 1:
        raise ValueError("need at least one slot, got 0")


def _check_lam(lam) -> None:
    if isinstance(lam, int | float) and not 0.0 < lam <= 1.0:
        raise ValueError(f"lam must lie in (0, 1], got {lam}")


def slot_vectors(slot_rewards, slot_times, dtype: torch.dtype | None = None):
    """Slot vectors ``y = (reward sum, log time sum)`` and the usable-slot mask.

    Args:
      slot_rewards: slot reward sums, shape ``(S,)`` (tensor or array-like).
      slot_times: slot time sums (seconds), shape ``(S,)``.
      dtype: float dtype of ``y`` (default: the inputs' promoted float dtype).

    Returns:
      ``(y, mask)``: ``y`` shape ``(S, 2)`` with unusable rows set to 0, ``mask`` shape ``(S,)``
      bool, True where the slot is usable (reward and time finite, time > 0).

    Raises:
      ValueError: on shape mismatch or zero slots.
    """
    r, t = _as_tensor(slot_rewards), _as_tensor(slot_times)
    _check_slots(r, t)
    if dtype is None:
        dtype = torch.promote_types(r.dtype, t.dtype)
    r, t = r.to(dtype), t.to(dtype)
    mask = torch.isfinite(r) & torch.isfinite(t) & (t > 0)
    zero, one = torch.zeros_like(r), torch.ones_like(t)
    y = torch.stack([torch.where(mask, r, zero), torch.log(torch.where(mask, t, one))], dim=-1)
    return y, mask


def forgetting_prior(state: NIWState, lam=LAM):
    """The prior used by the next refit: ``(mu, lam kappa, max(lam nu, D + 2), lam psi)``.

    Before the first real refit (``state.num_fits == 0``) it is the first prior itself (the
    state's posterior fields unchanged).

    Args:
      state: current :class:`NIWState`.
      lam: forgetting factor in ``(0, 1]``.

    Returns:
      ``(mu0, kappa0, nu0, psi0)`` with shapes ``(2,), (), (), (2, 2)``.

    Raises:
      ValueError: if ``lam`` is a Python number outside ``(0, 1]``.

    Source: DESIGN.md section 4 (reference forgetting rule).
    """
    _check_lam(lam)
    if int(state.num_fits) == 0:
        return state.mu, state.kappa, state.nu, state.psi
    lam = torch.as_tensor(lam, dtype=state.kappa.dtype, device=state.kappa.device)
    nu0 = torch.clamp(lam * state.nu, min=D + 2.0)
    return state.mu, lam * state.kappa, nu0, lam * state.psi


def niw_posterior(mu0, kappa0, nu0, psi0, y: torch.Tensor, mask: torch.Tensor):
    """Conjugate NIW update of the prior ``(mu0, kappa0, nu0, psi0)`` on the masked rows of ``y``.

    With ``n`` usable rows, mean ``ybar`` and centred scatter ``C = sum (y - ybar)(y - ybar)^T``:
    ``kappa_n = kappa0 + n``, ``nu_n = nu0 + n``, ``mu_n = (kappa0 mu0 + n ybar) / kappa_n``,
    ``psi_n = psi0 + C + kappa0 n / kappa_n (ybar - mu0)(ybar - mu0)^T``.

    Args:
      mu0, kappa0, nu0, psi0: prior, shapes ``(d,), (), (), (d, d)``.
      y: observations, shape ``(S, d)``; rows where ``mask`` is False are ignored (must be finite).
      mask: usable rows, shape ``(S,)`` bool.

    Returns:
      ``(mu_n, kappa_n, nu_n, psi_n)`` in ``y``'s dtype (prior unchanged when ``n = 0``).

    Source: Murphy (2007), "Conjugate Bayesian analysis of the Gaussian distribution", eqs. 250-254.
    """
    w = mask.to(y.dtype)
    n = w.sum()
    ybar = (w[:, None] * y).sum(dim=0) / torch.clamp(n, min=1.0)
    dev = w[:, None] * (y - ybar)
    scatter = dev.T @ dev
    kappa_n = kappa0 + n
    mu_n = (kappa0 * mu0 + n * ybar) / kappa_n
    shift = ybar - mu0
    psi_n = psi0 + scatter + (kappa0 * n / kappa_n) * torch.outer(shift, shift)
    return mu_n, kappa_n, nu0 + n, psi_n


def update(state: NIWState, slot_rewards, slot_times, lam=LAM) -> NIWState:
    """Refit the NIW posterior from the slot accumulators, with forgetting.

    Usable slot: reward and time finite, time > 0. With fewer than 2 usable slots the state is
    returned unchanged except ``fitted = False`` (posterior and ``rho_hat`` kept). Otherwise the
    prior is :func:`forgetting_prior` and the conjugate update :func:`niw_posterior` runs on the
    usable slot vectors ``(reward sum, log time sum)``; ``fitted = True``, ``num_fits += 1``,
    ``rho_hat`` unchanged (set it with :func:`estimate` / :func:`refit`).

    Args:
      state: current :class:`NIWState`.
      slot_rewards: slot reward sums, shape ``(S,)``.
      slot_times: slot time sums (seconds), shape ``(S,)``.
      lam: forgetting factor in ``(0, 1]``.

    Returns:
      The new :class:`NIWState`.

    Raises:
      ValueError: on mismatched / non-1-D slot arrays, zero slots, or ``lam`` outside ``(0, 1]``.

    Source: DESIGN.md section 4; paper Algorithm 1 ("Fit f_rho on B").
    """
    _check_lam(lam)
    dev = state.mu.device
    r = _as_tensor(slot_rewards, device=dev)
    t = _as_tensor(slot_times, device=dev)
    y, mask = slot_vectors(r, t, state.mu.dtype)
    ok = int(mask.sum()) >= 2
    if not ok:
        return state._replace(fitted=torch.zeros((), dtype=torch.bool, device=dev))
    mu, kappa, nu, psi = niw_posterior(*forgetting_prior(state, lam), y, mask)
    return NIWState(
        mu=mu,
        kappa=kappa,
        nu=nu,
        psi=psi,
        rho_hat=state.rho_hat,
        fitted=torch.ones((), dtype=torch.bool, device=dev),
        num_fits=state.num_fits + 1,
    )


def predictive_params(state: NIWState):
    """Posterior predictive Student-t of one slot vector: ``(df, loc, scale, scale_tril)``.

    ``df = nu - D + 1``, ``loc = mu``, ``scale = psi (kappa + 1) / (kappa df)``, ``scale_tril``
    its lower Cholesky factor (closed form for ``2 x 2``). Covariance ``scale df / (df - 2)``.

    Args:
      state: :class:`NIWState`.

    Returns:
      Shapes ``(), (2,), (2, 2), (2, 2)`` in the state's dtype.

    Source: Murphy (2007), eq. 258.
    """
    df = state.nu - D + 1.0
    scale = state.psi * ((state.kappa + 1.0) / (state.kappa * df))
    a, b, c = scale[0, 0], scale[1, 0], scale[1, 1]
    l00 = torch.sqrt(a)
    l10 = b / l00
    l11 = torch.sqrt(torch.clamp(c - l10 * l10, min=0.0))
    zero = torch.zeros_like(a)
    scale_tril = torch.stack([torch.stack([l00, zero]), torch.stack([l10, l11])])
    return df, state.mu, scale, scale_tril


def _check_sampling(num_slots, num_batches, quantile, sampler) -> None:
    for name, v in (("num_slots", num_slots), ("num_batches", num_batches)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if isinstance(quantile, int | float) and not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {quantile}")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")


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
    if draws.ndim != 3 or draws.shape[-1] != D:
        raise ValueError(f"draws must have shape (M, S, {D}), got {tuple(draws.shape)}")
    if isinstance(quantile, int | float) and not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {quantile}")
    ratio = draws[..., 0].mean(dim=-1) / torch.exp(draws[..., 1]).mean(dim=-1)
    q = torch.quantile(ratio, float(quantile))
    return torch.clamp(q, min=0.0)


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
    denom = state.nu - D - 1.0
    if not bool(state.fitted) or not bool(denom > 0):
        return state.rho_hat
    sigma_tt = state.psi[1, 1] / denom
    rate = state.mu[0] / torch.exp(state.mu[1] + 0.5 * sigma_tt)
    return torch.clamp(rate, min=0.0)


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
    _check_lam(lam)
    if kind not in ("niw_quantile", "posterior_mean"):
        raise ValueError(f"kind must be 'niw_quantile' or 'posterior_mean', got {kind!r}")

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
