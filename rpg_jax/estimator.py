"""Normal-Inverse-Wishart (NIW) reward-rate estimator (DESIGN.md section 4, JAX backend).

The estimator keeps ``S`` slots, each accumulating a (reward sum, time sum) pair; which samples
feed which slot is the caller's choice. It models the slot vector ``y = (slot reward sum,
log slot time sum)`` (``D = 2``) with an NIW posterior refitted from the slots with forgetting,
and estimates the reward rate as the 95th percentile of the ratio ``mean(r) / mean(delta)`` over
synthetic batches of ``S`` slots drawn from the posterior predictive (a multivariate Student-t).
Paper: Tian & Yang (2026), "Reward-rate Policy Gradient ...", Algorithm 1 (``f_rho`` is an NIW
posterior, ``rho_hat_1 = 0``). Conjugate NIW update: Murphy, "Conjugate Bayesian analysis of the
Gaussian distribution" (2007), eqs. 250-254; predictive Student-t: same, eq. 258 (Gelman et al.,
"Bayesian Data Analysis", 3rd ed., section 3.6).

Every function is pure, works on one state (use ``jax.vmap`` for many seeds), is ``jit``-able with
the static arguments named in its docstring, and follows the dtype of the state
(:func:`init_state`). The torch backend ``rpg_llm.estimator`` mirrors these names and semantics;
``tests/test_estimator_contract.py`` holds both to the contract.

Units: rewards in reward units, times in seconds (``rpg_llm``) or abstract time units (bandits);
``rho_hat`` in reward per time unit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from rpg_jax import polar_t, student_t

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
    "CHUNK_BATCHES",
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
SAMPLERS = ("polar", "fast", "numpyro")
# Synthetic batches are drawn CHUNK_BATCHES at a time inside a lax.scan: under a wide vmap over
# seeds this keeps the working set in cache (measured ~1.3-1.5x faster at 64 seeds than one
# (M, S) draw, on a loaded 2-core CPU). The law of the estimate does not depend on it.
CHUNK_BATCHES = 50


class NIWState(NamedTuple):
    """Estimator state (a pytree; stack along a leading axis for ``vmap`` over seeds).

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

    mu: jax.Array
    kappa: jax.Array
    nu: jax.Array
    psi: jax.Array
    rho_hat: jax.Array
    fitted: jax.Array
    num_fits: jax.Array


def init_state(dtype=jnp.float32) -> NIWState:
    """The state before any data: the first prior, ``rho_hat = 0``, ``fitted = False``.

    Args:
      dtype: float dtype of every float field (``jnp.float64`` needs ``jax_enable_x64``).

    Returns:
      :class:`NIWState` with ``mu = MU0``, ``kappa = KAPPA0``, ``nu = NU0``,
      ``psi = PSI0_SCALE * I``.

    Raises:
      ValueError: if ``dtype`` is not a floating dtype.
    """
    if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        raise ValueError(f"dtype must be a floating dtype, got {dtype!r}")
    return NIWState(
        mu=jnp.full((D,), MU0, dtype),
        kappa=jnp.asarray(KAPPA0, dtype),
        nu=jnp.asarray(NU0, dtype),
        psi=PSI0_SCALE * jnp.eye(D, dtype=dtype),
        rho_hat=jnp.zeros((), dtype),
        fitted=jnp.zeros((), bool),
        num_fits=jnp.zeros((), jnp.int32),
    )


def _check_slots(slot_rewards, slot_times) -> None:
    if jnp.ndim(slot_rewards) != 1 or jnp.shape(slot_rewards) != jnp.shape(slot_times):
        raise ValueError(
            "slot_rewards and slot_times must be 1-D of equal length, got shapes "
            f"{jnp.shape(slot_rewards)} and {jnp.shape(slot_times)}"
        )
    if jnp.shape(slot_rewards)[0] < 1:
        raise ValueError("need at least one slot, got 0")


def _check_lam(lam) -> None:
    if isinstance(lam, int | float) and not 0.0 < lam <= 1.0:
        raise ValueError(f"lam must lie in (0, 1], got {lam}")


def slot_vectors(slot_rewards: jax.Array, slot_times: jax.Array, dtype=None):
    """Slot vectors ``y = (reward sum, log time sum)`` and the usable-slot mask.

    Args:
      slot_rewards: slot reward sums, shape ``(S,)``.
      slot_times: slot time sums (time units), shape ``(S,)``.
      dtype: float dtype of ``y`` (default: the inputs' result float dtype).

    Returns:
      ``(y, mask)``: ``y`` shape ``(S, 2)`` with unusable rows set to 0, ``mask`` shape ``(S,)``
      bool, True where the slot is usable (reward and time finite, time > 0).

    Raises:
      ValueError: on shape mismatch or zero slots.
    """
    _check_slots(slot_rewards, slot_times)
    if dtype is None:
        dtype = jnp.result_type(slot_rewards, slot_times, jnp.zeros(()).dtype)
    r = jnp.asarray(slot_rewards, dtype)
    t = jnp.asarray(slot_times, dtype)
    mask = jnp.isfinite(r) & jnp.isfinite(t) & (t > 0)
    y = jnp.stack([jnp.where(mask, r, 0.0), jnp.log(jnp.where(mask, t, 1.0))], axis=-1)
    return y, mask


def forgetting_prior(state: NIWState, lam=LAM):
    """The prior used by the next refit: ``(mu, lam kappa, max(lam nu, D + 2), lam psi)``.

    Before the first real refit (``state.num_fits == 0``) it is the first prior itself
    (``MU0, KAPPA0, NU0, PSI0_SCALE I``, i.e. the state's posterior fields unchanged).

    Args:
      state: current :class:`NIWState`.
      lam: forgetting factor in ``(0, 1]`` (scalar; may be traced).

    Returns:
      ``(mu0, kappa0, nu0, psi0)`` with shapes ``(2,), (), (), (2, 2)``.

    Raises:
      ValueError: if ``lam`` is a Python number outside ``(0, 1]``.

    Source: DESIGN.md section 4 (reference forgetting rule).
    """
    _check_lam(lam)
    first = state.num_fits == 0
    lam = jnp.asarray(lam, state.kappa.dtype)
    kappa0 = jnp.where(first, state.kappa, lam * state.kappa)
    nu0 = jnp.where(first, state.nu, jnp.maximum(lam * state.nu, D + 2.0))
    psi0 = jnp.where(first, state.psi, lam * state.psi)
    return state.mu, kappa0, nu0, psi0


def niw_posterior(mu0, kappa0, nu0, psi0, y: jax.Array, mask: jax.Array):
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
    w = mask.astype(y.dtype)
    n = jnp.sum(w)
    ybar = jnp.sum(w[:, None] * y, axis=0) / jnp.maximum(n, 1.0)
    dev = w[:, None] * (y - ybar)
    scatter = dev.T @ dev
    kappa_n = kappa0 + n
    mu_n = (kappa0 * mu0 + n * ybar) / kappa_n
    shift = ybar - mu0
    psi_n = psi0 + scatter + (kappa0 * n / kappa_n) * jnp.outer(shift, shift)
    return mu_n, kappa_n, nu0 + n, psi_n


def update(state: NIWState, slot_rewards: jax.Array, slot_times: jax.Array, lam=LAM) -> NIWState:
    """Refit the NIW posterior from the slot accumulators, with forgetting.

    Usable slot: reward and time finite, time > 0. With fewer than 2 usable slots the state is
    returned unchanged except ``fitted = False`` (posterior and ``rho_hat`` kept). Otherwise the
    prior is :func:`forgetting_prior` and the conjugate update :func:`niw_posterior` runs on the
    usable slot vectors ``(reward sum, log time sum)``; ``fitted = True``, ``num_fits += 1``,
    ``rho_hat`` unchanged (set it with :func:`estimate` / :func:`refit`). Masking keeps shapes
    static: ``jit``/``vmap`` friendly.

    Args:
      state: current :class:`NIWState`.
      slot_rewards: slot reward sums, shape ``(S,)``.
      slot_times: slot time sums (time units), shape ``(S,)``.
      lam: forgetting factor in ``(0, 1]``.

    Returns:
      The new :class:`NIWState`.

    Raises:
      ValueError: on mismatched / non-1-D slot arrays, zero slots, or ``lam`` outside ``(0, 1]``.

    Source: DESIGN.md section 4; paper Algorithm 1 ("Fit f_rho on B").
    """
    _check_lam(lam)
    y, mask = slot_vectors(slot_rewards, slot_times, state.mu.dtype)
    mu, kappa, nu, psi = niw_posterior(*forgetting_prior(state, lam), y, mask)
    ok = jnp.sum(mask) >= 2
    keep = lambda new, old: jnp.where(ok, new, old)
    return NIWState(
        mu=keep(mu, state.mu),
        kappa=keep(kappa, state.kappa),
        nu=keep(nu, state.nu),
        psi=keep(psi, state.psi),
        rho_hat=state.rho_hat,
        fitted=ok,
        num_fits=state.num_fits + ok.astype(jnp.int32),
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
    l00 = jnp.sqrt(a)
    l10 = b / l00
    l11 = jnp.sqrt(jnp.maximum(c - l10 * l10, 0.0))
    zero = jnp.zeros_like(a)
    scale_tril = jnp.stack([jnp.stack([l00, zero]), jnp.stack([l10, l11])])
    return df, state.mu, scale, scale_tril


def _check_sampling(num_slots, num_batches, quantile, sampler) -> None:
    for name, v in (("num_slots", num_slots), ("num_batches", num_batches)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if isinstance(quantile, int | float) and not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {quantile}")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")


def _chunking(num_batches: int, chunk_batches: int) -> tuple[int, int]:
    """(number of chunks k, batches per chunk c) with k c >= num_batches, c <= chunk_batches."""
    if not isinstance(chunk_batches, int) or isinstance(chunk_batches, bool) or chunk_batches < 1:
        raise ValueError(f"chunk_batches must be a positive int, got {chunk_batches!r}")
    k = -(-num_batches // chunk_batches)
    return k, -(-num_batches // k)


def _chunk_draws(state: NIWState, key: jax.Array, shape: tuple[int, int], sampler: str):
    df, loc, _, scale_tril = predictive_params(state)
    if sampler == "polar":
        t = polar_t.bivariate_t_standard(key, df, shape[0] * shape[1], loc.dtype)
        return (loc + t @ scale_tril.T).reshape(*shape, D)
    if sampler == "fast":
        return student_t.multivariate_t(key, df, loc, scale_tril, shape)
    import numpyro.distributions as dist

    return dist.MultivariateStudentT(df, loc, scale_tril).sample(key, shape)


def _batch_rates(draws: jax.Array) -> jax.Array:
    """Per-batch rate ``mean(r) / mean(exp(t))`` of draws ``(..., S, 2)`` -> ``(...)``."""
    return jnp.mean(draws[..., 0], axis=-1) / jnp.mean(jnp.exp(draws[..., 1]), axis=-1)


def predictive_draws(
    state: NIWState,
    key: jax.Array,
    num_slots: int,
    num_batches: int = NUM_BATCHES,
    sampler: str = "polar",
    *,
    chunk_batches: int = CHUNK_BATCHES,
) -> jax.Array:
    """Draw ``num_batches`` synthetic batches of ``num_slots`` slot vectors from the predictive.

    These are exactly the draws :func:`estimate` uses for the same ``key`` (batches are drawn
    ``chunk_batches`` at a time, chunk ``i`` from ``jax.random.split(key, k)[i]``).

    Args:
      state: :class:`NIWState` (predictive from :func:`predictive_params`; needs ``nu > 3``).
      key: a ``jax.random`` key.
      num_slots: slots per batch ``S`` (static).
      num_batches: batches ``M`` (static).
      sampler: ``"polar"`` (default: :func:`rpg_jax.polar_t.bivariate_t_standard`, radial
        inverse CDF, no rejection, no gamma draws), ``"fast"``
        (:func:`rpg_jax.student_t.multivariate_t`, normal / sqrt(chi2 / df)) or ``"numpyro"``
        (``numpyro.distributions.MultivariateStudentT``). All three have the same law; they
        differ in speed under ``vmap`` (``benchmarks/estimator_sampler.py``).
      chunk_batches: batches drawn per ``lax.scan`` step (static; speed only, the law of the
        estimate does not depend on it; tune with ``benchmarks/estimator_sampler.py --chunk``).

    Returns:
      Draws of ``y = (reward sum, log time sum)``, shape ``(num_batches, num_slots, 2)``.

    Raises:
      ValueError: on a non-positive ``num_slots`` / ``num_batches`` / ``chunk_batches`` or an
        unknown ``sampler``.
    """
    _check_sampling(num_slots, num_batches, 0.5, sampler)
    k, c = _chunking(num_batches, chunk_batches)
    keys = jax.random.split(key, k)
    draws = jax.lax.map(lambda kc: _chunk_draws(state, kc, (c, num_slots), sampler), keys)
    return draws.reshape(k * c, num_slots, D)[:num_batches]


def rate_quantile(draws: jax.Array, quantile=QUANTILE) -> jax.Array:
    """``max(0, quantile_m [mean_s r_ms / mean_s exp(t_ms)])`` of predictive draws.

    Args:
      draws: shape ``(M, S, 2)``: slot vectors ``(reward sum, log time sum)``.
      quantile: in ``[0, 1]`` (linear interpolation between order statistics, NumPy's default).

    Returns:
      ``rho_hat``, shape ``()``, >= 0.

    Raises:
      ValueError: if ``draws`` is not ``(M, S, 2)`` or ``quantile`` is outside ``[0, 1]``.
    """
    if jnp.ndim(draws) != 3 or jnp.shape(draws)[-1] != D:
        raise ValueError(f"draws must have shape (M, S, {D}), got {jnp.shape(draws)}")
    if isinstance(quantile, int | float) and not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must lie in [0, 1], got {quantile}")
    return jnp.maximum(jnp.quantile(_batch_rates(draws), quantile), 0.0)


def estimate(
    state: NIWState,
    key: jax.Array,
    num_slots: int = NUM_SLOTS,
    num_batches: int = NUM_BATCHES,
    quantile=QUANTILE,
    sampler: str = "polar",
    *,
    chunk_batches: int = CHUNK_BATCHES,
) -> jax.Array:
    """Reward-rate estimate from the posterior predictive (quantile of synthetic batch rates).

    If ``state.fitted`` is False, returns ``state.rho_hat`` (the last estimate; 0 before any
    fit). Otherwise draws ``num_batches`` batches of ``num_slots`` slot vectors from the
    predictive Student-t, exponentiates the time coordinate, takes ``mean(r) / mean(delta)``
    per batch and returns ``max(0, quantile)`` of those ratios (:func:`rate_quantile` of
    :func:`predictive_draws`: the same key gives the same draws).

    Args:
      state: :class:`NIWState`.
      key: a ``jax.random`` key.
      num_slots, num_batches: static ints (``S``, ``M``).
      quantile: in ``[0, 1]``.
      sampler: ``"polar"``, ``"fast"`` or ``"numpyro"`` (see :func:`predictive_draws`).
      chunk_batches: speed knob, see :func:`predictive_draws` (static).

    Returns:
      ``rho_hat``, shape ``()``, state dtype, >= 0.

    Raises:
      ValueError: on bad ``num_slots`` / ``num_batches`` / ``quantile`` / ``sampler``.

    Source: DESIGN.md section 4 (reference estimator).
    """
    _check_sampling(num_slots, num_batches, quantile, sampler)

    k, c = _chunking(num_batches, chunk_batches)

    def chunk(_, kc):  # same per-chunk draws as predictive_draws, only the rates are kept
        return None, _batch_rates(_chunk_draws(state, kc, (c, num_slots), sampler))

    def fit(_):
        _, rates = jax.lax.scan(chunk, None, jax.random.split(key, k))
        rho = jnp.maximum(jnp.quantile(rates.reshape(-1)[:num_batches], quantile), 0.0)
        return rho.astype(state.rho_hat.dtype)

    return jax.lax.cond(state.fitted, fit, lambda _: state.rho_hat, None)


def refit(
    state: NIWState,
    slot_rewards: jax.Array,
    slot_times: jax.Array,
    key: jax.Array,
    num_batches: int = NUM_BATCHES,
    quantile=QUANTILE,
    lam=LAM,
    sampler: str = "polar",
    *,
    chunk_batches: int = CHUNK_BATCHES,
) -> NIWState:
    """:func:`update` then :func:`estimate` (with ``num_slots = S``), stored in ``rho_hat``.

    Args:
      state: :class:`NIWState`.
      slot_rewards, slot_times: slot accumulators, shape ``(S,)``.
      key: a ``jax.random`` key.
      num_batches, quantile, lam, sampler, chunk_batches: as in :func:`update` / :func:`estimate`.

    Returns:
      The new state; ``rho_hat`` unchanged when fewer than 2 slots are usable.

    Raises:
      ValueError: as :func:`update` and :func:`estimate`.
    """
    state = update(state, slot_rewards, slot_times, lam)
    num_slots = int(jnp.shape(slot_rewards)[0])
    rho_hat = estimate(
        state, key, num_slots, num_batches, quantile, sampler, chunk_batches=chunk_batches
    )
    return state._replace(rho_hat=rho_hat)


def posterior_mean_rate(state: NIWState) -> jax.Array:
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
    ok = state.fitted & (denom > 0)
    sigma_tt = state.psi[1, 1] / jnp.where(denom > 0, denom, 1.0)
    rate = state.mu[0] / jnp.exp(state.mu[1] + 0.5 * sigma_tt)
    return jnp.where(ok, jnp.maximum(rate, 0.0), state.rho_hat)


def refit_posterior_mean(
    state: NIWState,
    slot_rewards: jax.Array,
    slot_times: jax.Array,
    key: jax.Array | None = None,
    lam=LAM,
) -> NIWState:
    """:func:`update` then :func:`posterior_mean_rate`, stored in ``rho_hat`` (``key`` unused).

    Args:
      state, slot_rewards, slot_times, lam: as in :func:`update`.
      key: ignored (kept so every estimator's refit has the same signature).

    Returns:
      The new state.

    Raises:
      ValueError: as :func:`update`.
    """
    del key
    state = update(state, slot_rewards, slot_times, lam)
    return state._replace(rho_hat=posterior_mean_rate(state))


class Estimator(NamedTuple):
    """A reward-rate estimator behind the contract, with its settings bound.

    Attributes:
      init: ``init(dtype=jnp.float32) -> NIWState``.
      refit: ``refit(state, slot_rewards (S,), slot_times (S,), key) -> NIWState``; pure,
        ``jit``/``vmap``-able; the estimate is ``state.rho_hat``.
    """

    init: Callable[..., NIWState]
    refit: Callable[[NIWState, jax.Array, jax.Array, jax.Array], NIWState]


def make_niw_estimator(
    num_slots: int = NUM_SLOTS,
    num_batches: int = NUM_BATCHES,
    quantile: float = QUANTILE,
    lam: float = LAM,
    kind: str = "niw_quantile",
    sampler: str = "polar",
    chunk_batches: int = CHUNK_BATCHES,
) -> Estimator:
    """Bind the settings of an NIW estimator.

    Args:
      num_slots: expected slot count ``S``; ``refit`` raises ValueError on other lengths.
      num_batches: synthetic batches ``M`` (``kind="niw_quantile"``).
      quantile: in ``[0, 1]`` (``kind="niw_quantile"``).
      lam: forgetting factor in ``(0, 1]``.
      kind: ``"niw_quantile"`` (:func:`refit`) or ``"posterior_mean"``
        (:func:`refit_posterior_mean`).
      sampler: ``"polar"``, ``"fast"`` or ``"numpyro"``.
      chunk_batches: speed knob (see :func:`predictive_draws`).

    Returns:
      :class:`Estimator`.

    Raises:
      ValueError: on any bad setting (checked here, before any tracing).
    """
    _check_sampling(num_slots, num_batches, quantile, sampler)
    _check_lam(lam)
    _chunking(num_batches, chunk_batches)
    if kind not in ("niw_quantile", "posterior_mean"):
        raise ValueError(f"kind must be 'niw_quantile' or 'posterior_mean', got {kind!r}")

    def _refit(state, slot_rewards, slot_times, key):
        if jnp.shape(slot_rewards) != (num_slots,):
            raise ValueError(
                f"expected slot arrays of shape ({num_slots},), got {jnp.shape(slot_rewards)}"
            )
        if kind == "posterior_mean":
            return refit_posterior_mean(state, slot_rewards, slot_times, key, lam)
        return refit(
            state,
            slot_rewards,
            slot_times,
            key,
            num_batches,
            quantile,
            lam,
            sampler,
            chunk_batches=chunk_batches,
        )

    return Estimator(init=init_state, refit=_refit)
