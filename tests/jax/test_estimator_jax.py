"""Tests of the JAX NIW reward-rate estimator (rpg_jax.estimator) and its fast sampler.

Backend-independent contract checks live in tests/test_estimator_contract.py; here: the algebra
against independent NumPy/SciPy computations, the samplers' laws, and jit / vmap behaviour.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from rpg_core import niw
from rpg_jax import estimator as E
from rpg_jax import student_t

TOL: dict[str, Any] = {"rtol": 1e-10, "atol": 1e-10}


def np_niw(prior, y):
    """NumPy conjugate NIW update via raw moments (different algebra from the module's)."""
    mu0, k0, nu0, psi0 = prior
    n = y.shape[0]
    kn = k0 + n
    mn = (k0 * mu0 + y.sum(axis=0)) / kn
    psin = psi0 + y.T @ y + k0 * np.outer(mu0, mu0) - kn * np.outer(mn, mn)
    return mn, kn, nu0 + n, psin


def first_prior():
    return np.zeros(2), E.KAPPA0, E.NU0, E.PSI0_SCALE * np.eye(2)


def slot_data(seed, num_slots=64, per_slot=8, corr=0.0):
    rng = np.random.default_rng(seed)
    z = rng.multivariate_normal([0, 0], [[1, corr], [corr, 1]], size=(num_slots, per_slot))
    delta = np.maximum(1.2 * (1 + 0.15 * z[..., 1]), 0.5)
    r = np.maximum(0.6 + 0.2 * z[..., 0], 0.0)
    return r.sum(axis=1), delta.sum(axis=1)


def posterior(state):
    return tuple(np.asarray(x) for x in (state.mu, state.kappa, state.nu, state.psi))


def assert_post(state, ref, tol=TOL):
    for got, want in zip(posterior(state), ref, strict=True):
        np.testing.assert_allclose(got, want, **tol)


update_jit = jax.jit(E.update)
_STATIC = ("num_slots", "num_batches", "sampler", "chunk_batches")
estimate_jit = jax.jit(E.estimate, static_argnames=_STATIC)
draws_jit = jax.jit(E.predictive_draws, static_argnames=_STATIC)
refit_jit = jax.jit(E.refit, static_argnames=("num_batches", "sampler"))
chi2_jit = jax.jit(student_t.chi2_over_df, static_argnames=("shape",))
mvt_jit = jax.jit(student_t.multivariate_t, static_argnames=("shape",))


def fitted_state(seed=0, num_slots=128, refits=2, corr=0.0):
    state = E.init_state(jnp.float64)
    for i in range(refits):
        r, t = slot_data(seed + i, num_slots=num_slots, corr=corr)
        state = update_jit(state, r, t, E.LAM)
    return state


# ----------------------------------------------------------------------------- posterior algebra


def test_sequential_without_forgetting_equals_batch():
    """lam = 1: three sequential refits equal one conjugate update on all the data, from the
    first prior with its degrees of freedom raised to the floor d + 2 = 4 (the first refit's
    forgetting step: max(1 x 3, 4))."""
    chunks = [slot_data(s, num_slots=40, corr=0.5) for s in range(3)]
    state = E.init_state(jnp.float64)
    for r, t in chunks:
        state = update_jit(state, r, t, 1.0)
    y = np.concatenate([np.stack([r, np.log(t)], axis=1) for r, t in chunks])
    mu0, kappa0, _, psi0 = first_prior()
    assert_post(state, np_niw((mu0, kappa0, 4.0, psi0), y))
    assert int(state.num_fits) == 3


def test_the_first_refit_forgets_the_first_prior():
    """Reference fact (DESIGN.md section 4): the first refit starts from (0, 3e-4, 4, 3e-4 I)
    at lam = 0.3, not from the first prior (0, 1e-3, 3, 1e-3 I) itself."""
    r, t = slot_data(7, num_slots=16)
    state = update_jit(E.init_state(jnp.float64), r, t, 0.3)
    y = np.stack([r, np.log(t)], axis=1)
    assert_post(state, np_niw((np.zeros(2), 3e-4, 4.0, 3e-4 * np.eye(2)), y))
    unforgotten = np_niw(first_prior(), y)
    assert abs(float(state.kappa) - unforgotten[1]) == pytest.approx(1e-3 - 3e-4)
    assert float(state.nu) == pytest.approx(unforgotten[2] + 1.0)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    lam=st.floats(0.05, 1.0),
    refits=st.integers(1, 4),
    bad=st.integers(0, 6),
)
def test_posterior_matches_numpy_with_forgetting(seed, lam, refits, bad):
    """Random slot data (with unusable slots) and forgetting factors: NumPy model at 1e-10."""
    rng = np.random.default_rng(seed)
    state = E.init_state(jnp.float64)
    post, fits = first_prior(), 0
    for _ in range(refits):
        r = rng.normal(3.0, 2.0, 16)
        t = rng.lognormal(1.0, 0.5, 16)
        idx = rng.choice(16, size=bad, replace=False)
        r[idx[: bad // 2]] = np.nan
        t[idx[bad // 2 :]] = rng.choice([0.0, -1.0, np.inf], size=bad - bad // 2)
        ok = np.isfinite(r) & np.isfinite(t) & (t > 0)
        y = np.stack([r[ok], np.log(t[ok])], axis=1)
        state = update_jit(state, r, t, lam)
        mu, k, nu, psi = post  # every refit forgets its prior, the first too
        post = np_niw((mu, lam * k, max(lam * nu, 4.0), lam * psi), y)
        fits += 1
        assert_post(state, post)
        assert bool(state.fitted)
    assert int(state.num_fits) == fits


def test_masked_update_equals_update_on_usable_subset():
    r, t = slot_data(7, num_slots=32)
    r, t = r.copy(), t.copy()
    r[[2, 9]] = [np.nan, -np.inf]
    t[[4, 11, 20]] = [0.0, np.nan, -3.0]
    ok = np.isfinite(r) & np.isfinite(t) & (t > 0)
    assert ok.sum() == 27
    base = fitted_state(seed=3, num_slots=32, refits=1)
    masked = update_jit(base, r, t, E.LAM)
    subset = E.update(base, r[ok], t[ok], E.LAM)  # eager, other static shape
    assert_post(masked, posterior(subset), {"rtol": 1e-12, "atol": 1e-12})


def test_too_few_usable_keeps_everything_under_vmap():
    """Per-seed decisions under vmap: a seed with one usable slot keeps its state."""
    state = fitted_state(seed=5, num_slots=16, refits=1)
    state = state._replace(rho_hat=jnp.asarray(0.37))
    r, t = slot_data(6, num_slots=16)
    r_bad = np.where(np.arange(16) == 0, r, np.nan)
    rs, ts = np.stack([r, r_bad]), np.stack([t, t])
    keys = jax.random.split(jax.random.key(0), 2)
    batched = jax.tree.map(lambda x: jnp.stack([x, x]), state)
    out = jax.jit(jax.vmap(lambda s, a, b, k: E.refit(s, a, b, k, num_batches=200)))(
        batched, rs, ts, keys
    )
    kept = jax.tree.map(lambda x: x[1], out)
    for f in ("mu", "kappa", "nu", "psi", "rho_hat", "num_fits"):
        np.testing.assert_array_equal(getattr(kept, f), getattr(state, f))
    assert not bool(kept.fitted) and bool(out.fitted[0]) and int(out.num_fits[0]) == 2


# ----------------------------------------------------------------------------- predictive draws


def test_predictive_params_closed_form():
    """df = nu - 1, scale = psi (kappa + 1) / (kappa df) (Murphy 2007, eq. 258), from NumPy."""
    r, t = slot_data(13, num_slots=6)
    state = update_jit(E.init_state(jnp.float64), r, t, E.LAM)
    y = np.stack([r, np.log(t)], axis=1)
    mu0, k0, _, psi0 = first_prior()  # the first refit forgets it: kappa, psi x lam, nu 4
    mu, k, nu, psi = np_niw((mu0, E.LAM * k0, 4.0, E.LAM * psi0), y)
    df, loc, scale, _ = (np.asarray(x) for x in E.predictive_params(state))
    np.testing.assert_allclose(df, nu - 1.0, **TOL)
    np.testing.assert_allclose(loc, mu, **TOL)
    np.testing.assert_allclose(scale, psi * (k + 1) / (k * (nu - 1.0)), **TOL)


@pytest.mark.parametrize("sampler", ["polar", "fast", "numpyro"])
def test_predictive_moments(sampler):
    """Draws have mean loc and covariance scale df / (df - 2) within Monte-Carlo error."""
    state = E.init_state(jnp.float64)
    r, t = slot_data(11, num_slots=7, corr=0.8)  # few slots: small df = 4 + 7 - 1 = 10
    state = update_jit(state, r, t, E.LAM)
    df, loc, scale, tril = (np.asarray(x) for x in E.predictive_params(state))
    np.testing.assert_allclose(tril @ tril.T, scale, rtol=1e-12)
    assert df == 10.0
    y = np.asarray(
        draws_jit(state, jax.random.key(3), num_slots=400, num_batches=250, sampler=sampler)
    )
    y = y.reshape(-1, 2)
    n = y.shape[0]
    cov = scale * df / (df - 2)
    assert np.all(np.abs(y.mean(0) - loc) < 5 * np.sqrt(np.diag(cov) / n))
    c = y - loc
    for i, j in [(0, 0), (0, 1), (1, 1)]:
        prod = c[:, i] * c[:, j]
        se = prod.std() / np.sqrt(n)
        assert abs(prod.mean() - cov[i, j]) < 5 * se, (i, j, prod.mean(), cov[i, j], se)


@pytest.mark.parametrize("df", [4.0, 30.0, 182.0])
def test_fast_chi2_matches_numpyro_in_distribution(df):
    """Two-sample KS, 200k draws each, different keys (distribution, not seed, equality)."""
    n = 200_000
    fast = np.asarray(chi2_jit(jax.random.key(1), jnp.float64(df), shape=(n,)))
    ref = np.asarray(dist.Chi2(jnp.float64(df)).sample(jax.random.key(2), (n,))) / df
    assert stats.ks_2samp(fast, ref).pvalue > 0.01  # pyright: ignore[reportAttributeAccessIssue]
    # and against the exact law (a wrong shape or scale would fail these at this n)
    assert stats.kstest(fast, stats.chi2(df, scale=1 / df).cdf).pvalue > 0.01
    assert abs(fast.mean() - 1.0) < 5 * np.sqrt(2 / df / n)


@pytest.mark.parametrize("df", [4.0, 30.0, 182.0])
def test_fast_student_t_matches_numpyro_in_distribution(df):
    """Each coordinate and the batch-rate statistic of the fast and numpyro samplers agree."""
    loc = jnp.array([1.0, -0.5], jnp.float64)
    tril = jnp.array([[2.0, 0.0], [-0.7, 0.4]], jnp.float64)
    shape = (2000, 100)
    fast = np.asarray(mvt_jit(jax.random.key(5), jnp.float64(df), loc, tril, shape=shape))
    ref = np.asarray(dist.MultivariateStudentT(df, loc, tril).sample(jax.random.key(6), shape))
    for k in range(2):
        assert stats.ks_2samp(fast[..., k].ravel(), ref[..., k].ravel()).pvalue > 0.01  # pyright: ignore[reportAttributeAccessIssue]
    # the shared chi-square: the radial part |L^-1 (y - loc)|^2 / 2 ~ F(2, df)
    li = np.linalg.inv(np.asarray(tril))
    rad = np.einsum("ij,...j->...i", li, fast - np.asarray(loc))
    f = (rad**2).sum(-1).ravel() / 2
    assert stats.kstest(f, stats.f(2, df).cdf).pvalue > 0.01


def test_gamma_fallback_loop_is_exact(monkeypatch):
    """With a 1-candidate pool the exact while-loop fallback does the work: law still exact."""
    monkeypatch.setattr(student_t, "_pool_size", lambda n: 1)
    g = np.asarray(
        jax.jit(lambda k: student_t.standard_gamma(k, jnp.float64(1.0), (50_000,)))(
            jax.random.key(9)
        )
    )
    assert np.all(np.isfinite(g)) and np.all(g > 0)
    assert stats.kstest(g, stats.gamma(1.0).cdf).pvalue > 0.01


@pytest.mark.parametrize("alpha", [0.5, np.inf, np.nan])
def test_gamma_outside_domain_is_nan_not_a_hang(alpha):
    g = jax.jit(lambda k, a: student_t.standard_gamma(k, a, (10,)))(
        jax.random.key(0), jnp.float64(alpha)
    )
    assert np.all(np.isnan(np.asarray(g)))


def test_gamma_vmap_equals_unbatched():
    """Fast sampler under vmap gives each lane the draws it gets alone (threefry keys)."""
    keys = jax.random.split(jax.random.key(4), 3)
    alphas = jnp.array([1.5, 15.0, 91.0])
    f = lambda k, a: student_t.standard_gamma(k, a, (5000,))
    batched = np.asarray(jax.jit(jax.vmap(f))(keys, alphas))
    one = jax.jit(f)
    for i in range(3):
        np.testing.assert_allclose(batched[i], np.asarray(one(keys[i], alphas[i])), rtol=1e-13)


def test_student_t_rejects_bad_shapes():
    with pytest.raises(ValueError, match="loc"):
        student_t.multivariate_t(jax.random.key(0), 5.0, jnp.zeros((2, 2)), jnp.eye(2), (3,))
    with pytest.raises(ValueError, match="scale_tril"):
        student_t.multivariate_t(jax.random.key(0), 5.0, jnp.zeros(2), jnp.eye(3), (3,))


# ----------------------------------------------------------------------------- estimate


@pytest.mark.parametrize("sampler", ["polar", "fast", "numpyro"])
def test_estimate_is_numpy_quantile_of_its_draws(sampler):
    state = fitted_state(seed=20, num_slots=64)
    key = jax.random.key(12)
    # 101 batches: 3 chunks of 34 (last batch dropped); chunk_batches=7: 15 chunks of 7
    for m, ch in ((300, E.CHUNK_BATCHES), (101, E.CHUNK_BATCHES), (101, 7)):
        kw = {"num_slots": 64, "num_batches": m, "sampler": sampler, "chunk_batches": ch}
        y = np.asarray(draws_jit(state, key, **kw))
        assert y.shape == (m, 64, 2)
        ratio = y[..., 0].mean(-1) / np.exp(y[..., 1]).mean(-1)
        for q in (0.5, 0.95):
            want = max(0.0, np.quantile(ratio, q))
            got = estimate_jit(state, key, quantile=q, **kw)
            np.testing.assert_allclose(float(got), want, rtol=1e-12)


@pytest.mark.parametrize("sampler", ["polar", "fast"])
def test_batch_slots_takes_the_first_n_slots_of_each_batch(sampler):
    """batch_slots = n (traced): the quantile of the rates of the first n slots of each batch of
    predictive_draws (same key), i.e. synthetic batches of n slot vectors (DESIGN.md section 5)."""
    state = fitted_state(seed=21, num_slots=64)
    key = jax.random.key(13)
    y = np.asarray(draws_jit(state, key, num_slots=64, num_batches=120, sampler=sampler))
    f = jax.jit(lambda n: E.estimate(state, key, 64, 120, 0.9, sampler, batch_slots=n))
    for n in (2, 17, 64):
        ratio = y[:, :n, 0].mean(-1) / np.exp(y[:, :n, 1]).mean(-1)
        np.testing.assert_allclose(float(f(n)), max(0.0, np.quantile(ratio, 0.9)), rtol=1e-12)


def test_refit_usable_batch_is_the_usable_slot_count():
    """refit(batch="usable") with 40 of 64 slots non-empty = estimate with batch_slots=40."""
    r, t = slot_data(22, num_slots=64)
    r[40:], t[40:] = 0.0, 0.0
    key, init = jax.random.key(5), E.init_state(jnp.float64)
    usable = jax.jit(lambda: E.refit(init, r, t, key, 200, batch="usable"))()
    fitted = E.update(init, r, t)
    want = E.estimate(fitted, key, 64, 200, batch_slots=40)
    np.testing.assert_allclose(float(usable.rho_hat), float(want), rtol=1e-12)
    every = E.refit(init, r, t, key, 200, batch="slots")
    assert float(every.rho_hat) != float(usable.rho_hat)  # the option changes the batches
    with pytest.raises(ValueError, match="batch must be one of"):
        E.make_niw_estimator(batch="all")
    for bad in (0, 65):  # a Python int outside 1..num_slots is refused before tracing
        with pytest.raises(ValueError, match=f"batch_slots must be in 1..64 .*got {bad}"):
            E.estimate(fitted, key, 64, 200, batch_slots=bad)


@pytest.mark.parametrize("sampler", ["polar", "fast"])
def test_fast_and_numpyro_estimates_agree_within_mc_error(sampler):
    """Spread of 8 estimates each; the two means differ by < 5 standard errors."""
    state = fitted_state(seed=30, num_slots=64, corr=-0.8)
    keys = jax.random.split(jax.random.key(0), 16)
    est = {}
    for name, ks in ((sampler, keys[:8]), ("numpyro", keys[8:])):
        f = jax.jit(jax.vmap(lambda k, s=name: E.estimate(state, k, 64, 250, 0.95, s)))
        est[name] = np.asarray(f(ks))
    se = np.sqrt(est[sampler].var(ddof=1) / 8 + est["numpyro"].var(ddof=1) / 8)
    assert se > 0
    assert abs(est[sampler].mean() - est["numpyro"].mean()) < 5 * se


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), shift=st.floats(-20.0, 5.0))
def test_rho_hat_nonnegative(seed, shift):
    rng = np.random.default_rng(seed)
    r = rng.normal(shift, 3.0, 32)
    t = rng.lognormal(0.0, 1.0, 32)
    state = _refit32(E.init_state(jnp.float64), r, t, jax.random.key(seed))
    assert float(state.rho_hat) >= 0.0 and np.isfinite(float(state.rho_hat))
    if shift < -15:  # all rewards negative: every batch rate negative, clipped to exactly 0
        assert np.all(r < 0) and float(state.rho_hat) == 0.0


_refit32 = jax.jit(lambda s, r, t, k: E.refit(s, r, t, k, num_batches=200))


def test_jit_vmap_over_states_equals_per_seed():
    """A vmapped, jitted refit over 4 seeds equals 4 separate refits."""
    datas = [slot_data(40 + i, num_slots=128, corr=0.8) for i in range(4)]
    rs, ts = (np.stack(x) for x in zip(*datas, strict=True))
    states = jax.vmap(lambda _: E.init_state(jnp.float64))(jnp.arange(4))
    keys = jax.random.split(jax.random.key(1), 4)
    f = jax.jit(jax.vmap(lambda s, r, t, k: E.refit(s, r, t, k, num_batches=300)))
    out = f(f(states, rs, ts, keys), rs[::-1], ts[::-1], keys[::-1])
    for i in range(4):
        one = refit_jit(E.init_state(jnp.float64), rs[i], ts[i], keys[i], num_batches=300)
        one = refit_jit(one, rs[3 - i], ts[3 - i], keys[3 - i], num_batches=300)
        for f_name in ("mu", "kappa", "nu", "psi", "rho_hat"):
            np.testing.assert_allclose(
                np.asarray(getattr(out, f_name))[i], np.asarray(getattr(one, f_name)), rtol=1e-12
            )
    assert np.all(np.asarray(out.rho_hat) > 0.4) and np.all(np.asarray(out.rho_hat) < 0.7)


def test_posterior_mean_rate_closed_form_and_estimator_factory():
    state = fitted_state(seed=50, num_slots=64)
    mu, _, nu, psi = posterior(state)
    want = max(0.0, mu[0] / np.exp(mu[1] + 0.5 * psi[1, 1] / (nu - 3.0)))
    np.testing.assert_allclose(float(E.posterior_mean_rate(state)), want, rtol=1e-12)
    r, t = slot_data(52, num_slots=64)
    key = jax.random.key(2)
    pm = E.make_niw_estimator(num_slots=64, kind="posterior_mean")
    got = jax.jit(pm.refit)(state, r, t, key)
    np.testing.assert_allclose(
        float(got.rho_hat),
        float(E.posterior_mean_rate(update_jit(state, r, t, E.LAM))),
        rtol=1e-12,
    )
    q = E.make_niw_estimator(num_slots=64, num_batches=200)
    got_q = jax.jit(q.refit)(state, r, t, key)
    want_q = refit_jit(state, r, t, key, num_batches=200)
    np.testing.assert_allclose(float(got_q.rho_hat), float(want_q.rho_hat), rtol=1e-12)
    assert q.init().mu.dtype == jnp.float32


def test_scan_of_refits_float32():
    """The estimator runs inside lax.scan in float32 (the bandits' use) and tracks the rate."""
    est = E.make_niw_estimator(num_slots=64, num_batches=200)
    r, t = slot_data(60, num_slots=64)

    def step(state, key):
        state = est.refit(state, jnp.asarray(r, jnp.float32), jnp.asarray(t, jnp.float32), key)
        return state, state.rho_hat

    keys = jax.random.split(jax.random.key(0), 5)
    state, rhos = jax.jit(lambda s: jax.lax.scan(step, s, keys))(est.init(jnp.float32))
    assert state.rho_hat.dtype == jnp.float32 and int(state.num_fits) == 5
    true_rate = r.sum() / t.sum()
    assert np.all(np.abs(np.asarray(rhos) - true_rate) < 0.1 * true_rate)


def test_bad_inputs_raise_value_error():
    s = E.init_state(jnp.float64)
    with pytest.raises(ValueError, match="slot_rewards"):
        E.update(s, jnp.zeros(3), jnp.ones(4))
    with pytest.raises(ValueError, match="lam"):
        E.update(s, jnp.zeros(3), jnp.ones(3), lam=0.0)
    with pytest.raises(ValueError, match="sampler"):
        E.estimate(s, jax.random.key(0), 4, sampler="gibbs")
    with pytest.raises(ValueError, match="quantile"):
        E.estimate(s, jax.random.key(0), 4, quantile=1.5)
    with pytest.raises(ValueError, match="num_batches"):
        E.estimate(s, jax.random.key(0), 4, num_batches=0)
    with pytest.raises(ValueError, match="chunk_batches"):
        E.estimate(s, jax.random.key(0), 4, chunk_batches=0)
    with pytest.raises(ValueError, match="kind"):
        E.make_niw_estimator(kind="robbins")
    with pytest.raises(ValueError, match="shape"):
        E.make_niw_estimator(num_slots=8).refit(s, jnp.ones(4), jnp.ones(4), jax.random.key(0))
    with pytest.raises(ValueError, match="dtype"):
        E.init_state(jnp.int32)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 1200),
    q=st.sampled_from([0.0, 0.05, 0.5, 0.95, 0.999, 1.0]),
    f64=st.booleans(),
    ties=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@example(m=130, q=0.999, f64=False, ties=False, seed=2)  # the position's rounding matters
@example(m=399, q=0.999, f64=False, ties=False, seed=136)  # so it does against NumPy's too
def test_selected_rate_quantile_equals_the_sorting_quantile(m, q, f64, ties, seed):
    """The top_k selection gives the sort-based quantile (jnp.quantile's linear rule) to the
    last bits (XLA may contract the interpolation into an FMA in one graph and not the other,
    and may round the position ``q (m - 1)`` differently, which moves the result by up to
    ``eps q (m - 1)`` times the gap it interpolates across), and both equal NumPy's quantile of
    the same numbers (within the same bound: NumPy computes in float64 from the same values)."""
    dtype = jnp.float64 if f64 else jnp.float32
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3.0, m)
    if ties:
        x = np.round(x, 1)
    rates = jnp.asarray(x, dtype)
    got = E.selected_rate_quantile(rates, q)
    want = niw.rate_quantile(jnp, rates, q)
    assert got.dtype == rates.dtype
    eps = float(jnp.finfo(dtype).eps)
    scale = float(np.max(np.abs(np.asarray(rates))))  # rounding of a (1 - w) + b w
    xs = np.sort(np.asarray(rates, np.float64))
    lo = min(int(np.floor(q * (m - 1))), m - 1)
    # b - a: the gap the position falls in, or the one below when rounding moves it across xs[lo]
    gap = float(max(xs[min(lo + 1, m - 1)] - xs[lo], xs[lo] - xs[max(lo - 1, 0)]))
    atol = 8 * eps * scale + 2 * eps * q * (m - 1) * gap  # and of the position's weight w
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=atol)
    ref = max(0.0, float(np.quantile(np.asarray(rates, np.float64), q)))
    np.testing.assert_allclose(float(got), ref, rtol=0, atol=atol)


def test_selected_rate_quantile_nan_and_bad_input():
    rates = jnp.asarray([0.3, np.nan, 0.1, 0.2], jnp.float32)
    assert np.isnan(float(E.selected_rate_quantile(rates, 0.95)))
    assert float(E.selected_rate_quantile(jnp.asarray([-2.0, -1.0]), 0.95)) == 0.0
    with pytest.raises(ValueError, match="quantile"):
        E.selected_rate_quantile(rates, 1.5)
    with pytest.raises(ValueError, match="shape"):
        E.selected_rate_quantile(jnp.zeros((2, 3)), 0.5)
    # traced quantile: the sorting path, same value
    f = jax.jit(E.selected_rate_quantile)
    x = jnp.asarray(np.random.default_rng(0).normal(size=101), jnp.float32)
    want = np.asarray(niw.rate_quantile(jnp, x, 0.9))
    np.testing.assert_allclose(np.asarray(f(x, 0.9)), want, rtol=1e-6)
