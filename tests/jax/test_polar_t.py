"""The radial inverse-CDF bivariate Student-t sampler, checked by distribution against scipy and
numpyro (never by seed)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rpg_jax.polar_t import (
    affine,
    batch_rates,
    bivariate_t,
    bivariate_t_standard,
    hash_uniform,
    standard_grid,
)


@pytest.mark.parametrize("nu", [4.0, 30.0, 182.0])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_standard_t_marginals_and_radius(nu, dtype):
    t = np.asarray(bivariate_t_standard(jax.random.key(11), dtype(nu), 100_000), np.float64)
    assert t.dtype == np.float64 and t.shape == (100_000, 2)
    # Each coordinate of a standard bivariate t is a univariate t(nu).
    assert stats.kstest(t[:, 0], stats.t(nu).cdf).pvalue > 1e-3
    assert stats.kstest(t[:, 1], stats.t(nu).cdf).pvalue > 1e-3
    # |t|^2 / 2 ~ F(2, nu).
    assert stats.kstest((t**2).sum(axis=1) / 2, stats.f(2, nu).cdf).pvalue > 1e-3
    # Uncorrelated but dependent (shared radius): E[t0^2 t1^2] > E[t0^2] E[t1^2] for finite nu.
    assert abs(np.corrcoef(t[:, 0], t[:, 1])[0, 1]) < 0.02


def test_matches_numpyro_by_distribution():
    import numpyro.distributions as dist

    loc = jnp.array([0.7, -1.2])
    scale = jnp.array([[0.5, 0.2], [0.2, 0.3]])
    nu = 6.0
    ours = np.asarray(bivariate_t(jax.random.key(1), loc, scale, nu, 60_000))
    ref = np.asarray(
        dist.MultivariateStudentT(nu, loc, jnp.linalg.cholesky(scale)).sample(
            jax.random.key(2), (60_000,)
        )
    )
    for j in range(2):
        assert stats.ks_2samp(ours[:, j], ref[:, j]).pvalue > 1e-3  # pyright: ignore[reportAttributeAccessIssue]
    # A linear combination checks the joint law, not just the marginals.
    w = np.array([0.6, -1.3])
    assert stats.ks_2samp(ours @ w, ref @ w).pvalue > 1e-3  # pyright: ignore[reportAttributeAccessIssue]
    # Covariance = scale * nu / (nu - 2).
    np.testing.assert_allclose(np.cov(ours.T), np.asarray(scale) * nu / (nu - 2), atol=0.03)


def test_wrong_law_is_detected():
    """The KS check above has power: draws with nu = 6 are rejected as t(3)."""
    t = np.asarray(bivariate_t_standard(jax.random.key(5), 6.0, 100_000))
    assert stats.kstest(t[:, 0], stats.t(3.0).cdf).pvalue < 1e-6


def test_hash_uniform_is_uniform_and_key_dependent():
    u = np.asarray(hash_uniform(jax.random.key(0), 200_000, jnp.float64))
    assert 0 < u.min() and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    v = np.asarray(hash_uniform(jax.random.key(1), 200_000, jnp.float64))
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.01  # streams of different keys are unrelated
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01  # no lag-1 correlation


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="loc must be"):
        bivariate_t(jax.random.key(0), jnp.zeros(3), jnp.eye(2), 5.0, 10)


# ----------------------------------------------------------------------------- fused fast path

_LOC = np.array([0.9, 0.3])
_TRIL = np.array([[0.25, 0.0], [-0.06, 0.12]])


def _scipy_batch_rates(df, loc, tril, num_batches, num_slots, seed):
    """The estimator's batch statistic on SciPy multivariate-t draws (other code, same law)."""
    dist = stats.multivariate_t(loc=loc, shape=tril @ tril.T, df=df)
    y = dist.rvs(size=num_batches * num_slots, random_state=seed)
    y = y.reshape(num_batches, num_slots, 2)
    return y[..., 0].mean(-1) / np.exp(y[..., 1]).mean(-1)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_fused_batch_rates_equal_the_rates_of_the_stored_draws(dtype):
    """Same key: the fused draw-and-reduce gives the rates of the materialised draws."""
    key, nu = jax.random.key(7), dtype(9.0)
    loc, tril = jnp.asarray(_LOC, dtype), jnp.asarray(_TRIL, dtype)
    fused = np.asarray(jax.jit(lambda k: batch_rates(k, nu, loc, tril, 300, 64))(key))
    t0, t1 = standard_grid(key, nu, (300, 64), dtype)
    y0, y1 = affine(t0, t1, loc, tril)
    want = np.asarray(y0).mean(-1) / np.exp(np.asarray(y1, np.float64)).mean(-1)
    assert fused.shape == (300,) and fused.dtype == dtype
    np.testing.assert_allclose(fused, want, rtol=1e-12 if dtype == jnp.float64 else 2e-6)
    # the flattened grid is the stream of bivariate_t_standard (one sampler, one law)
    flat = np.asarray(bivariate_t_standard(key, nu, 300 * 64, dtype))
    np.testing.assert_array_equal(flat[:, 0], np.asarray(t0).ravel())
    np.testing.assert_array_equal(flat[:, 1], np.asarray(t1).ravel())


@pytest.mark.parametrize("df", [5.0, 40.0])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_fused_batch_rate_law_matches_scipy_and_a_wrong_law_is_caught(df, dtype):
    """The batch-rate law of the fast path (what the estimator's quantile sees) equals the one of
    SciPy multivariate-t draws (two-sample KS, 40,000 batches of 4 slots); the same test rejects
    the fast path given a wrong scale factor (L^T for L) or wrong degrees of freedom."""
    m, s = 40_000, 4
    loc = jnp.asarray(_LOC, dtype)
    ref = _scipy_batch_rates(df, _LOC, _TRIL, m, s, seed=int(df))

    def fast(nu, l_factor):
        f = jax.jit(lambda k: batch_rates(k, dtype(nu), loc, jnp.asarray(l_factor, dtype), m, s))
        return np.asarray(f(jax.random.key(int(df) + 1)), np.float64)

    assert stats.ks_2samp(fast(df, _TRIL), ref).pvalue > 1e-3  # pyright: ignore[reportAttributeAccessIssue]
    assert stats.ks_2samp(fast(df, _TRIL.T), ref).pvalue < 1e-6  # pyright: ignore[reportAttributeAccessIssue]
    assert stats.ks_2samp(fast(2.5 if df < 10 else 4.0, _TRIL), ref).pvalue < 1e-6  # pyright: ignore[reportAttributeAccessIssue]


def test_batch_rates_refuses_a_batch_of_no_slot_or_of_more_slots_than_drawn():
    key, loc, tril = jax.random.key(0), jnp.asarray(_LOC), jnp.asarray(_TRIL)
    args = (key, jnp.float64(5.0), loc, tril, 8, 4)
    for bad in (0, 5, np.int64(-1)):
        with pytest.raises(ValueError, match=f"batch_slots must be in 1..4 .*got {bad}"):
            batch_rates(*args, batch_slots=bad)
    # every allowed n gives finite rates; n = num_slots equals the default of all slots
    rates = [np.asarray(batch_rates(*args, batch_slots=n)) for n in (1, 4)]
    assert all(np.isfinite(r).all() for r in rates)
    np.testing.assert_allclose(rates[1], np.asarray(batch_rates(*args)), rtol=1e-12)
