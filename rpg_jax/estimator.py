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

The algebra (constants, input checks, conjugate update with forgetting, predictive parameters,
quantile, posterior-mean rate) is :mod:`rpg_core.niw`, shared with the torch backend and the
NumPy reference; this module adds the JAX samplers and control flow (``lax.scan`` over chunks of
synthetic batches, ``lax.cond`` on ``fitted``).

Every function is pure, works on one state (use ``jax.vmap`` for many seeds), is ``jit``-able with
the static arguments named in its docstring, and follows the dtype of the state
(:func:`init_state`). The torch backend ``rpg_llm.loop.estimator`` mirrors these names and
semantics;
``tests/test_estimator_contract.py`` holds both to the contract.

Units: rewards in reward units, times in seconds (``rpg_llm``) or abstract time units (bandits);
``rho_hat`` in reward per time unit.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from rpg_core import niw
from rpg_core.niw import KAPPA0, LAM, MU0, NU0, NUM_BATCHES, NUM_SLOTS, PSI0_SCALE, QUANTILE, D
from rpg_jax import polar_t, student_t

__all__ = [*niw.BACKEND_API, "CHUNK_BATCHES", "BATCH_SIZES", "selected_rate_quantile"]

SAMPLERS = ("polar", "fast", "numpyro")
Estimator = niw.Estimator
NIWState = niw.NIWState
# Synthetic batches are drawn CHUNK_BATCHES at a time inside a lax.scan. With the default "polar"
# sampler a chunk's draws are generated and reduced to batch rates in one XLA fusion (never
# stored); the scan keeps the per-step working set small under a wide vmap over seeds. The law
# of the estimate does not depend on it (benchmarks/estimator_sampler.py --chunk to tune).
CHUNK_BATCHES = 25
BATCH_SIZES = ("slots", "usable")  # refit's synthetic batch size: all S slots / the usable ones


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


def slot_vectors(slot_rewards: jax.Array, slot_times: jax.Array, dtype=None):
    """Slot vectors ``y = (reward sum, log time sum)`` and the usable-slot mask.

    Args:
      slot_rewards: slot reward sums, shape ``(S,)``.
      slot_times: slot time sums (time units), shape ``(S,)``.
      dtype: float dtype of ``y`` (default: the inputs' result float dtype).

    Returns:
      ``(y, mask)``: ``y`` ``(S, 2)`` with unusable rows 0, ``mask`` ``(S,)`` bool (reward and
      time finite, time > 0); algebra :func:`rpg_core.niw.slot_vectors`.

    Raises:
      ValueError: on shape mismatch or zero slots.
    """
    niw.check_slot_shapes(jnp.shape(slot_rewards), jnp.shape(slot_times))
    if dtype is None:
        dtype = jnp.result_type(slot_rewards, slot_times, jnp.zeros(()).dtype)
    return niw.slot_vectors(jnp, jnp.asarray(slot_rewards, dtype), jnp.asarray(slot_times, dtype))


def forgetting_prior(state: NIWState, lam=LAM):
    """The prior of the next refit, ``(mu, lam kappa, max(lam nu, D + 2), lam psi)`` (or the
    first prior before any real refit): :func:`rpg_core.niw.forgetting_prior` in ``jax.numpy``.

    Args: ``state`` (:class:`NIWState`), ``lam`` in ``(0, 1]`` (may be traced).
    Returns: ``(mu0, kappa0, nu0, psi0)``, shapes ``(2,), (), (), (2, 2)``.
    Raises: ValueError if ``lam`` is concrete and outside ``(0, 1]``, NaN or not one number.
    """
    return niw.forgetting_prior(jnp, state, jnp.asarray(lam, state.kappa.dtype))


def niw_posterior(mu0, kappa0, nu0, psi0, y: jax.Array, mask: jax.Array):
    """Conjugate NIW update on the masked rows of ``y`` ``(S, d)`` (Murphy 2007, eqs. 250-254):
    :func:`rpg_core.niw.niw_posterior` in ``jax.numpy``; returns ``(mu_n, kappa_n, nu_n, psi_n)``.
    """
    return niw.niw_posterior(jnp, mu0, kappa0, nu0, psi0, y, mask)


def update(state: NIWState, slot_rewards: jax.Array, slot_times: jax.Array, lam=LAM) -> NIWState:
    """Refit the NIW posterior from the slot accumulators, with forgetting.

    :func:`rpg_core.niw.update` on :func:`slot_vectors`: with fewer than 2 usable slots the
    state is kept except ``fitted = False``; otherwise ``fitted = True``, ``num_fits += 1``,
    ``rho_hat`` unchanged. Masking keeps shapes static: ``jit``/``vmap`` friendly.

    Args:
      state: current :class:`NIWState`.
      slot_rewards: slot reward sums, shape ``(S,)``.
      slot_times: slot time sums (time units), shape ``(S,)``.
      lam: forgetting factor in ``(0, 1]``.

    Returns:
      The new :class:`NIWState`.

    Raises:
      ValueError: on mismatched / non-1-D slot arrays, zero slots, or ``lam`` outside ``(0, 1]``
        (or NaN, or not one number).

    Source: DESIGN.md section 4; paper Algorithm 1 ("Fit f_rho on B").
    """
    niw.check_lam(lam)
    y, mask = slot_vectors(slot_rewards, slot_times, state.mu.dtype)
    return niw.update(jnp, state, y, mask, jnp.asarray(lam, state.kappa.dtype))


def predictive_params(state: NIWState):
    """Posterior predictive Student-t ``(df, loc, scale, scale_tril)`` of one slot vector
    (Murphy 2007, eq. 258): :func:`rpg_core.niw.predictive_params` in ``jax.numpy``; shapes
    ``(), (2,), (2, 2), (2, 2)``.
    """
    return niw.predictive_params(jnp, state)


def _check_sampling(num_slots, num_batches, quantile, sampler) -> None:
    niw.check_count("num_slots", num_slots)
    niw.check_count("num_batches", num_batches)
    niw.check_quantile(quantile)
    niw.check_choice("sampler", sampler, SAMPLERS)


def _chunking(num_batches: int, chunk_batches: int) -> tuple[int, int]:
    """(number of chunks k, batches per chunk c) with k c >= num_batches, c <= chunk_batches."""
    if not isinstance(chunk_batches, int) or isinstance(chunk_batches, bool) or chunk_batches < 1:
        raise ValueError(f"chunk_batches must be a positive int, got {chunk_batches!r}")
    k = -(-num_batches // chunk_batches)
    return k, -(-num_batches // k)


def _chunk_draws(state: NIWState, key: jax.Array, shape: tuple[int, int], sampler: str):
    df, loc, _, scale_tril = predictive_params(state)
    if sampler == "polar":
        t0, t1 = polar_t.standard_grid(key, df, shape, loc.dtype)
        return jnp.stack(polar_t.affine(t0, t1, loc, scale_tril), axis=-1)
    if sampler == "fast":
        return student_t.multivariate_t(key, df, loc, scale_tril, shape)
    import numpyro.distributions as dist

    return dist.MultivariateStudentT(df, loc, scale_tril).sample(key, shape)


def _chunk_rates(state: NIWState, key: jax.Array, shape: tuple[int, int], sampler: str, n):
    """Batch rates ``(c,)`` of one chunk (batches of the first ``n`` slots, all when None);
    ``"polar"`` fuses draw and reduce (nothing stored)."""
    if sampler == "polar":
        df, loc, _, scale_tril = predictive_params(state)
        return polar_t.batch_rates(key, df, loc, scale_tril, *shape, batch_slots=n)
    draws = _chunk_draws(state, key, shape, sampler)
    if n is None:
        return niw.batch_rates(jnp, draws)
    use = jnp.arange(shape[1]) < n
    r_sum = jnp.sum(jnp.where(use, draws[..., 0], 0.0), -1)
    return r_sum / jnp.sum(jnp.where(use, jnp.exp(draws[..., 1]), 0.0), -1)


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
      ValueError: if ``draws`` is not ``(M, S, 2)`` or ``quantile`` is outside ``[0, 1]``, NaN
        or not one number.
    """
    niw.check_draws_shape(jnp.shape(draws))
    return niw.rate_quantile(jnp, niw.batch_rates(jnp, draws), quantile)


def selected_rate_quantile(rates: jax.Array, quantile=QUANTILE) -> jax.Array:
    """:func:`rpg_core.niw.rate_quantile` (``max(0, quantile)``, NumPy's linear interpolation)
    by a partial selection (``jax.lax.top_k`` of the ``M - floor(q (M - 1))`` largest rates, 51
    for ``M = 1000, q = 0.95``) instead of a full sort, when ``quantile`` is concrete.

    The interpolation is ``jnp.quantile``'s, step by step in ``rates``' dtype (``q (M - 1)``,
    floor / ceil, ``low (1 - w) + high w``), so the result equals
    ``rpg_core.niw.rate_quantile(jnp, rates, quantile)`` (tested); a NaN rate gives NaN, as there.
    A traced ``quantile`` falls back to that function.

    Args:
      rates: per-batch rates, shape ``(M,)``, float.
      quantile: in ``[0, 1]``.

    Returns:
      Shape ``()``, ``rates``' dtype, >= 0 (or NaN).

    Raises:
      ValueError: if ``rates`` is not 1-D and non-empty, or ``quantile`` is concrete and outside
        ``[0, 1]``, NaN or not one number.

    Source: DESIGN.md section 4 (``rho_hat = max(0, 95th percentile)``).
    """
    niw.check_quantile(quantile)
    if len(jnp.shape(rates)) != 1 or jnp.shape(rates)[0] < 1:
        raise ValueError(f"rates must have shape (M,) with M >= 1, got {jnp.shape(rates)}")
    q = niw.concrete(quantile)
    if q is None or q.ndim != 0:
        return niw.rate_quantile(jnp, rates, quantile)
    m = rates.shape[0]
    dt = np.dtype(rates.dtype)
    pos = dt.type(q) * dt.type(m - 1)
    lo, hi = int(np.clip(np.floor(pos), 0, m - 1)), int(np.clip(np.ceil(pos), 0, m - 1))
    w = dt.type(pos - np.floor(pos))
    top = jax.lax.top_k(rates, m - lo)[0]  # descending: top[j] is order statistic m - 1 - j
    value = top[m - 1 - lo] * (dt.type(1) - w) + top[m - 1 - hi] * w
    value = jnp.where(jnp.any(jnp.isnan(rates)), jnp.nan, value)
    return jnp.where(value < 0, jnp.zeros_like(value), value)


def estimate(
    state: NIWState,
    key: jax.Array,
    num_slots: int = NUM_SLOTS,
    num_batches: int = NUM_BATCHES,
    quantile=QUANTILE,
    sampler: str = "polar",
    *,
    chunk_batches: int = CHUNK_BATCHES,
    batch_slots: int | np.integer | jax.Array | None = None,
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
      batch_slots: None (synthetic batches of ``num_slots``) or an int ``n`` in
        ``1..num_slots`` (shape ``()``, may be traced): batches of ``n`` slot vectors, the first
        ``n`` of each batch of :func:`predictive_draws` (DESIGN.md section 5: the batch size is
        the number of non-empty slots).

    Returns:
      ``rho_hat``, shape ``()``, state dtype, >= 0.

    Raises:
      ValueError: on bad ``num_slots`` / ``num_batches`` / ``quantile`` / ``sampler``, or a
        Python int ``batch_slots`` outside ``1..num_slots`` (a traced one is not checked).

    Source: DESIGN.md section 4 (reference estimator).
    """
    _check_sampling(num_slots, num_batches, quantile, sampler)
    polar_t.check_batch_slots(batch_slots, num_slots)  # before tracing, for every sampler

    k, c = _chunking(num_batches, chunk_batches)

    def chunk(_, kc):  # the rates of predictive_draws' chunk kc (polar: draws never stored)
        return None, _chunk_rates(state, kc, (c, num_slots), sampler, batch_slots)

    def fit(_):
        _, rates = jax.lax.scan(chunk, None, jax.random.split(key, k))
        rho = selected_rate_quantile(rates.reshape(-1)[:num_batches], quantile)
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
    batch: str = "slots",
) -> NIWState:
    """:func:`update` then :func:`estimate` (with ``num_slots = S``), stored in ``rho_hat``.

    Args:
      state: :class:`NIWState`.
      slot_rewards, slot_times: slot accumulators, shape ``(S,)``.
      key: a ``jax.random`` key.
      num_batches, quantile, lam, sampler, chunk_batches: as in :func:`update` / :func:`estimate`.
      batch: synthetic batch size, ``"slots"`` (``S``, DESIGN.md section 4) or ``"usable"``
        (the number of usable slots, the reference bandit agents' rule, DESIGN.md section 5).

    Returns:
      The new state; ``rho_hat`` unchanged when fewer than 2 slots are usable.

    Raises:
      ValueError: as :func:`update` and :func:`estimate`.
    """
    niw.check_choice("batch", batch, BATCH_SIZES)
    state = update(state, slot_rewards, slot_times, lam)
    num_slots = int(jnp.shape(slot_rewards)[0])
    n = None
    if batch == "usable":
        n = jnp.sum(slot_vectors(slot_rewards, slot_times, state.mu.dtype)[1].astype(jnp.int32))
    rho_hat = estimate(
        state,
        key,
        num_slots,
        num_batches,
        quantile,
        sampler,
        chunk_batches=chunk_batches,
        batch_slots=n,
    )
    return state._replace(rho_hat=rho_hat)


def posterior_mean_rate(state: NIWState) -> jax.Array:
    """Alternative estimator ``max(0, mu_r / exp(mu_t + Sigma_tt / 2))`` (posterior means; shape
    ``()``, state dtype; ``rho_hat`` when not fitted): :func:`rpg_core.niw.posterior_mean_rate`
    on ``jax.numpy``.
    """
    return niw.posterior_mean_rate(jnp, state)


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


def make_niw_estimator(
    num_slots: int = NUM_SLOTS,
    num_batches: int = NUM_BATCHES,
    quantile: float = QUANTILE,
    lam: float = LAM,
    kind: str = "niw_quantile",
    sampler: str = "polar",
    chunk_batches: int = CHUNK_BATCHES,
    batch: str = "slots",
) -> Estimator:
    """Bind the settings of an NIW estimator (:func:`rpg_core.niw.bind_estimator`).

    Args:
      num_slots: expected slot count ``S``; ``refit`` raises ValueError on other lengths.
      num_batches, quantile, sampler, chunk_batches: as in :func:`estimate`
        (``kind="niw_quantile"``).
      lam: forgetting factor in ``(0, 1]``.
      kind: ``"niw_quantile"`` (:func:`refit`) or ``"posterior_mean"``
        (:func:`refit_posterior_mean`).
      batch: synthetic batch size of :func:`refit`, ``"slots"`` or ``"usable"``.

    Returns:
      :class:`Estimator` whose ``refit(state, slot_rewards, slot_times, key)`` is pure and
      ``jit``/``vmap``-able.

    Raises:
      ValueError: on any bad setting (checked here, before any tracing).
    """
    _check_sampling(num_slots, num_batches, quantile, sampler)
    niw.check_lam(lam)
    _chunking(num_batches, chunk_batches)
    niw.check_choice("batch", batch, BATCH_SIZES)
    quantile_refit = partial(
        refit,
        num_batches=num_batches,
        quantile=quantile,
        lam=lam,
        sampler=sampler,
        chunk_batches=chunk_batches,
        batch=batch,
    )
    mean_refit = partial(refit_posterior_mean, lam=lam)
    return niw.bind_estimator(init_state, quantile_refit, mean_refit, num_slots, kind, jnp.shape)
