"""Tests of rpg_jax.envs: reference layout, exact means, sampling, permutation, validation."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.stats import norm

from rpg_jax import rates
from rpg_jax.envs import (
    BASE_ARMS,
    COUPLING_ARMS,
    SKIP_OUTCOME,
    EnvParams,
    as_dtype,
    clipped_lognormal_mean,
    clipped_normal_mean,
    context_scales,
    make_custom_env,
    make_reference_env,
    make_trial_params,
    permute_env,
    sample_context,
    sample_outcome,
)

ENVS = ("E1", "E2", "E3", "E4")


# ---------------------------------------------------------------- reference layout


def test_reference_filler_draws_match_published_check():
    env = make_reference_env("E1", K=5, n_contexts=4)
    np.testing.assert_allclose(env.loc_d[:, 4], [1.163809, 1.795153, 1.808103, 0.734607], atol=5e-7)
    # filler rate 0.42 (single filler), times the context's reward scale (coupling context: 1)
    np.testing.assert_allclose(
        env.loc_r[:, 4] / env.loc_d[:, 4], 0.42 * np.array([1.5, 1, 1, 0.32])
    )


def test_reference_layout_base_coupling_skip_and_filler_rates():
    env = make_reference_env("e2", K=7, n_contexts=6)
    base = np.asarray(BASE_ARMS)
    scales = {0: 1.5, 2: 1.0, 3: 0.32, 4: 1.35 - 0.93 / 4, 5: 1.35 - 3 * 0.93 / 4}
    for x, scale in scales.items():
        np.testing.assert_allclose(env.loc_r[x, :4], scale * base[:, 0])
        np.testing.assert_allclose(env.loc_d[x, :4], base[:, 1])
        np.testing.assert_allclose(
            env.loc_r[x, 4:7] / env.loc_d[x, 4:7], scale * np.array([0.42, 0.30, 0.18])
        )
    np.testing.assert_allclose(env.loc_r[1, :4], np.asarray(COUPLING_ARMS)[:, 0])
    np.testing.assert_allclose(env.loc_r[1, 4:7] / env.loc_d[1, 4:7], [0.42, 0.30, 0.18])
    assert np.all((env.loc_d[:, 4:7] >= 0.70) & (env.loc_d[:, 4:7] <= 2.00))
    np.testing.assert_array_equal(env.rbar[:, -1], SKIP_OUTCOME[0])
    np.testing.assert_array_equal(env.dbar[:, -1], SKIP_OUTCOME[1])
    np.testing.assert_allclose(env.p, np.full(6, 1 / 6))


def test_context_scales_are_cell_midpoints():
    np.testing.assert_allclose(
        context_scales(8)[4:], [1.23375, 1.00125, 0.76875, 0.53625], rtol=0, atol=1e-14
    )
    assert context_scales(5)[4] == pytest.approx((1.35 + 0.42) / 2)


@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_small_K_uses_first_base_arms(K):
    env = make_reference_env("E1", K=K)
    assert env.rbar.shape == (4, K + 1)
    np.testing.assert_allclose(env.loc_r[0, :K], 1.5 * np.asarray(BASE_ARMS)[:K, 0])
    np.testing.assert_allclose(env.loc_d[1, :K], np.asarray(COUPLING_ARMS)[:K, 1])


# ---------------------------------------------------------------- exact means


def _quad_mean(m, s, f, lognormal):
    """E[max(X, f)] by numerical integration over z (kink passed to quad)."""
    if lognormal:
        mu = np.log(m) - s * s / 2
        kink = (np.log(f) - mu) / s if f > 0 else -np.inf
        g = lambda z: max(np.exp(mu + s * z), f) * norm.pdf(z)
    else:
        kink = (f - m) / s
        g = lambda z: max(m + s * z, f) * norm.pdf(z)
    pts = [kink] if -15 < kink < 15 else None
    val, _ = integrate.quad(g, -15, 15, points=pts, limit=200, epsabs=1e-14, epsrel=1e-13)
    return val


@pytest.mark.parametrize("name", ENVS)
def test_exact_means_match_quadrature(name):
    env = make_reference_env(name, K=6, n_contexts=5)
    lognormal = bool(env.lognormal)
    for (x, a), rbar in np.ndenumerate(env.rbar):
        if env.sigma_r[x, a] == 0:
            assert (rbar, env.dbar[x, a]) == SKIP_OUTCOME
            continue
        r_quad = _quad_mean(env.loc_r[x, a], env.sigma_r[x, a], env.r_floor[x, a], lognormal)
        d_quad = _quad_mean(env.loc_d[x, a], env.sigma_d[x, a], env.d_floor[x, a], lognormal)
        assert abs(rbar - r_quad) < 1e-10
        assert abs(env.dbar[x, a] - d_quad) < 1e-10


@settings(max_examples=60, deadline=None)
@given(
    m=st.floats(0.01, 3.0),
    s=st.floats(0.05, 1.5),
    f=st.floats(0.0, 3.0),
    lognormal=st.booleans(),
)
def test_clipped_means_match_quadrature_random(m, s, f, lognormal):
    mean = clipped_lognormal_mean if lognormal else clipped_normal_mean
    got = float(mean(m, s, f))
    assert abs(got - _quad_mean(m, s, f, lognormal)) < 1e-10
    assert got >= max(m, f) - 1e-12  # Jensen: E max(X, f) >= max(E X, f)


def test_clipped_means_edge_cases():
    assert clipped_normal_mean(0.3, 0.0, 0.5) == 0.5
    assert clipped_normal_mean(0.3, 0.2, -np.inf) == pytest.approx(0.3, abs=1e-15)
    assert clipped_lognormal_mean(0.7, 0.5, 0.0) == 0.7
    assert clipped_lognormal_mean(0.35, 0.0, 0.5) == 0.5


@functools.partial(jax.jit, static_argnums=2)
def _cell_moments(params, key, n):
    """Per (x, a): sample mean and std of r and delta over n draws, and corr(r, delta)."""
    C, A = params.rbar.shape
    xs, as_ = jnp.meshgrid(jnp.arange(C), jnp.arange(A), indexing="ij")

    def cell(args):
        x, a, k = args
        keys = jax.random.split(k, n)
        r, d = jax.vmap(sample_outcome, in_axes=(None, 0, None, None))(params, keys, x, a)
        lr = jnp.log(jnp.maximum(r, 1e-300))
        ld = jnp.log(d)
        return (
            r.mean(),
            d.mean(),
            r.std(),
            d.std(),
            jnp.corrcoef(r, d)[0, 1],
            jnp.corrcoef(lr, ld)[0, 1],
        )

    out = jax.lax.map(cell, (xs.ravel(), as_.ravel(), jax.random.split(key, C * A)))
    return [o.reshape(C, A) for o in out]


def _jnp(params):
    return jax.tree.map(jnp.asarray, params)


@pytest.mark.parametrize("name", ENVS)
def test_exact_means_match_monte_carlo(name):
    n = 200_000
    env = make_reference_env(name, K=5)
    r_mean, d_mean, r_std, d_std, _, _ = map(
        np.asarray, _cell_moments(_jnp(env), jax.random.key(7), n)
    )
    random = env.sigma_r > 0
    assert np.all(np.abs(r_mean - env.rbar)[random] <= 4 * r_std[random] / np.sqrt(n))
    assert np.all(np.abs(d_mean - env.dbar)[random] <= 4 * d_std[random] / np.sqrt(n))


@pytest.mark.parametrize("name", ENVS)
def test_skip_is_deterministic_and_exact(name):
    env = make_reference_env(name, K=5)
    keys = jax.random.split(jax.random.key(2), 1000)
    draw = jax.jit(jax.vmap(sample_outcome, in_axes=(None, 0, None, None)))
    for x in range(4):
        r, d = map(np.asarray, draw(_jnp(env), keys, x, 5))
        np.testing.assert_array_equal(r, 0.0)
        np.testing.assert_array_equal(d, 0.35)


@pytest.mark.parametrize(("name", "corr"), [("E1", 0.0), ("E2", 0.8), ("E3", -0.8), ("E4", 0.5)])
def test_noise_correlation(name, corr):
    env = make_reference_env(name, K=5)
    *_, c_rd, c_log = map(np.asarray, _cell_moments(_jnp(env), jax.random.key(3), 100_000))
    # context 0, arm 2: (rbar 1.35, dbar 3.0), clipping probability < 1e-3
    measured = c_log[0, 2] if name == "E4" else c_rd[0, 2]
    assert abs(measured - corr) < 0.015
    arms = c_rd[:, :-1]
    if corr:
        assert np.all(np.sign(arms) == np.sign(corr))
    else:
        assert np.all(np.abs(arms) < 0.02)


def test_sample_context_frequencies():
    p = np.array([0.1, 0.6, 0.3])
    env = make_custom_env(p, np.ones((3, 2)), np.ones((3, 2)))
    keys = jax.random.split(jax.random.key(0), 50_000)
    xs = np.asarray(jax.jit(jax.vmap(sample_context, in_axes=(None, 0)))(_jnp(env), keys))
    assert xs.dtype == np.int32
    freq = np.bincount(xs, minlength=3) / xs.size
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / xs.size))


def test_sample_outcome_follows_params_dtype():
    env = as_dtype(make_reference_env("E4", K=3), np.float32)
    r, d = jax.jit(sample_outcome)(_jnp(env), jax.random.key(1), 0, 1)
    assert r.dtype == jnp.float32 and d.dtype == jnp.float32
    assert float(d) >= 0.5 and float(r) > 0


# ---------------------------------------------------------------- rho_star


@pytest.mark.parametrize("name", ENVS)
@pytest.mark.parametrize("K", [1, 2, 5])
def test_rho_star_three_ways(name, K):
    env = make_reference_env(name, K=K, n_contexts=4)
    args = (env.p, env.rbar, env.dbar)
    dink = rates.rho_star_dinkelbach(*args)[0]
    brute = rates.rho_star_bruteforce(*args)[0]
    assert abs(dink - rates.rho_star_bisection(*args)) < 1e-9
    assert abs(dink - brute) < 1e-9
    assert env.rho_star == dink
    q = env.rbar - dink * env.dbar
    np.testing.assert_allclose(env.gap, q.max(axis=1, keepdims=True) - q)


@st.composite
def _instances(draw):
    C = draw(st.integers(1, 4))
    A = draw(st.integers(1, 4))
    cells = st.lists(st.floats(0.0, 2.0), min_size=C * A, max_size=C * A)
    rbar = np.array(draw(cells)).reshape(C, A)
    dbar = 0.1 + np.array(draw(cells)).reshape(C, A)
    w = np.array(draw(st.lists(st.floats(0.05, 1.0), min_size=C, max_size=C)))
    noise = draw(st.sampled_from(["gaussian", "lognormal", "none"]))
    return w / w.sum(), rbar + (0.01 if noise == "lognormal" else 0.0), dbar, noise


@settings(max_examples=40, deadline=None)
@given(inst=_instances())
def test_rho_star_three_ways_random_custom(inst):
    p, rbar_loc, dbar_loc, noise = inst
    env = make_custom_env(p, rbar_loc, dbar_loc, noise=noise, corr=0.3)
    args = (env.p, env.rbar, env.dbar)
    assert abs(env.rho_star - rates.rho_star_bisection(*args)) < 1e-9
    assert abs(env.rho_star - rates.rho_star_bruteforce(*args)[0]) < 1e-9
    assert np.all(env.gap >= 0) and np.allclose(env.gap.min(axis=1), 0)
    if noise == "none":
        np.testing.assert_array_equal(env.rbar, rbar_loc)


# ---------------------------------------------------------------- permutation


def test_permutation_preserves_instance():
    base = make_reference_env("E3", K=10, n_contexts=6)
    perm = permute_env(base, seed=5)
    assert perm.rho_star == pytest.approx(base.rho_star, abs=1e-12)
    assert rates.rho_star(perm.p, perm.rbar, perm.dbar) == pytest.approx(base.rho_star, abs=1e-12)
    np.testing.assert_allclose(perm.gap, rates.gaps(perm.p, perm.rbar, perm.dbar), atol=1e-12)
    assert sorted(perm.rbar.ravel()) == sorted(base.rbar.ravel())
    assert sorted(zip(perm.rbar.ravel(), perm.dbar.ravel(), strict=True)) == sorted(
        zip(base.rbar.ravel(), base.dbar.ravel(), strict=True)
    )
    np.testing.assert_array_equal(perm.dbar[:, -1], 0.35)  # SKIP last
    # each context's row is a permutation of one base row, arms relabelled the same way everywhere
    rows = [int(np.flatnonzero([sorted(b) == sorted(r) for b in base.rbar])[0]) for r in perm.rbar]
    assert sorted(rows) == list(range(6))
    arm = [int(np.flatnonzero(base.rbar[rows[0]] == v)[0]) for v in perm.rbar[0]]
    np.testing.assert_array_equal(perm.rbar, base.rbar[rows][:, arm])


def test_permutation_deterministic_and_seed_dependent():
    base = make_reference_env("E1", K=20)
    a, b, c = permute_env(base, 3), permute_env(base, 3), permute_env(base, 4)
    for fa, fb in zip(a, b, strict=True):
        np.testing.assert_array_equal(fa, fb)
    assert not np.array_equal(a.rbar, c.rbar)


def test_trial_params_vmap_matches_per_seed_and_base():
    seeds = [0, 1, 2, 900]
    stacked = make_trial_params("E2", 6, 4, seeds)
    assert stacked.rbar.shape == (4, 4, 7) and stacked.rho_star.shape == (4,)
    keys = jax.random.split(jax.random.key(11), 4)
    xs, as_ = jnp.array([0, 1, 2, 3]), jnp.array([0, 3, 6, 2])
    r, d = jax.jit(jax.vmap(sample_outcome))(_jnp(stacked), keys, xs, as_)
    base = make_reference_env("E2", 6, 4)
    for i, s in enumerate(seeds):
        one = permute_env(base, s)
        for fs, fo in zip(stacked, one, strict=True):
            np.testing.assert_array_equal(fs[i], fo)
        ri, di = sample_outcome(_jnp(one), keys[i], xs[i], as_[i])
        assert (float(r[i]), float(d[i])) == (float(ri), float(di))
        # same key, same underlying cell of the unpermuted env -> the same outcome
        x0 = int(np.flatnonzero((base.rbar == one.rbar[xs[i], as_[i]]).any(axis=1))[0])
        a0 = int(np.flatnonzero(base.rbar[x0] == one.rbar[xs[i], as_[i]])[0])
        rb, db = sample_outcome(_jnp(base), keys[i], x0, a0)
        assert (float(rb), float(db)) == (float(ri), float(di))


# ---------------------------------------------------------------- validation

_ONE = np.ones((2, 3))
_BAD_INPUTS = [
    (lambda: make_reference_env("E1", K=0), "K must be an int >= 1, got 0"),
    (lambda: make_reference_env("E1", K=5, n_contexts=3), "n_contexts must be an int >= 4, got 3"),
    (lambda: make_reference_env("E7", K=5), "'E7'.*E1"),
    (lambda: make_trial_params("E1", 5, 4, []), "seeds is empty"),
    (lambda: make_custom_env(np.ones(0), np.ones((0, 2)), np.ones((0, 2))), r"C >= 1.*\(0,\)"),
    (lambda: make_custom_env([0.5, 0.5], np.ones((2, 0)), np.ones((2, 0))), r"A >= 1.*\(2, 0\)"),
    (lambda: make_custom_env([0.5, 0.5], _ONE, -_ONE), r"dbar_loc\[0, 0\] = -1.0"),
    (lambda: make_custom_env([0.5, 0.5], _ONE, 0 * _ONE), r"dbar_loc\[0, 0\] = 0.0"),
    (lambda: make_custom_env([0.5, 0.5], _ONE, np.full((2, 3), np.inf)), "dbar_loc.* = inf"),
    (lambda: make_custom_env([0.5, 0.5], np.where(_ONE > 0, np.nan, 0), _ONE), "rbar_loc.* = nan"),
    (lambda: make_custom_env([0.5, 0.5], _ONE, _ONE, corr=1.5), "corr = 1.5"),
    (lambda: make_custom_env([0.5, 0.5], _ONE, _ONE, sigma_r=-0.1), r"sigma_r\[0, 0\] = -0.1"),
    (lambda: make_custom_env([0.5, 0.5], _ONE, _ONE, d_floor=0.0), "d_floor.* = 0.0"),
    (lambda: make_custom_env([0.9, 0.3], _ONE, _ONE), r"p must be .*0\.9"),
    (lambda: make_custom_env([0.5, 0.5], _ONE, _ONE, noise="cauchy"), "'cauchy'"),
    (lambda: permute_env(make_reference_env("E1", 5), -1), "seed .* -1"),
]


@pytest.mark.parametrize(("build", "message"), _BAD_INPUTS)
def test_bad_inputs_raise_before_any_jax_work(build, message, monkeypatch):
    def traced(*args, **kwargs):
        raise AssertionError("JAX was used while building an instance")

    for mod, name in [(jax, "jit"), (jax, "vmap"), (jax, "make_jaxpr"), (jnp, "asarray")]:
        monkeypatch.setattr(mod, name, traced)
    with pytest.raises(ValueError, match=message):
        build()


def test_good_build_is_plain_numpy(monkeypatch):
    monkeypatch.setattr(jnp, "asarray", lambda *a, **k: pytest.fail("JAX used"))
    env = make_trial_params("E4", 5, 4, [0, 1])
    assert isinstance(env, EnvParams)
    assert all(isinstance(f, np.ndarray) for f in env)
    assert env.lognormal.dtype == np.bool_ and env.rbar.dtype == np.float64


# ---------------------------------------------------------------- rho_star_bisection arguments


def test_bisection_terminates_for_tiny_and_zero_tol():
    """tol at or below the float spacing used to loop forever; now the bracket stops at adjacent
    floats and the root agrees with exact Dinkelbach to a few ulps."""
    env = make_reference_env("E1", K=5, n_contexts=4)
    args = (env.p, env.rbar, env.dbar)
    dink = rates.rho_star_dinkelbach(*args)[0]
    for tol in (1e-16, 1e-17, 0.0):
        got = rates.rho_star_bisection(*args, tol=tol)
        assert abs(got - dink) <= 8 * np.spacing(dink), (tol, got, dink)


@pytest.mark.parametrize("tol", [float("nan"), float("inf"), -1e-9, "x"])
def test_bisection_rejects_bad_tol(tol):
    env = make_reference_env("E1", K=5, n_contexts=4)
    with pytest.raises(ValueError, match="tol"):
        rates.rho_star_bisection(env.p, env.rbar, env.dbar, tol=tol)


def test_bisection_iteration_cap():
    env = make_reference_env("E1", K=5, n_contexts=4)
    with pytest.raises(ValueError, match="max_iter=3"):
        rates.rho_star_bisection(env.p, env.rbar, env.dbar, tol=0.0, max_iter=3)
    with pytest.raises(ValueError, match="max_iter"):
        rates.rho_star_bisection(env.p, env.rbar, env.dbar, max_iter=0)


def test_bisection_ratio_overflow():
    """rbar/dbar = 1e310 overflows float64, the optimal rate (a ratio of means) does not."""
    p = np.array([0.5, 0.5])
    rbar = np.array([[1e300, 1.0], [1.0, 2.0]])
    dbar = np.array([[1e-10, 1.0], [1.0, 1.0]])
    expect = (0.5e300 + 0.5 * 2.0) / (0.5e-10 + 0.5 * 1.0)  # policy (0, 1), the best one
    got = rates.rho_star_bisection(p, rbar, dbar)
    assert np.isfinite(got) and abs(got / expect - 1) < 1e-12
    assert abs(rates.rho_star_dinkelbach(p, rbar, dbar)[0] / expect - 1) < 1e-12


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_rho_star_outside_float64_range_raises_naming_the_ratio():
    """rbar/dbar = 1e308/1e-10: the optimal rate itself overflows float64. Bisection refuses
    (clipping the bracket would return the largest float, 1e10 times too small), and so do
    Dinkelbach (an inf rate) and enumeration, naming the values; -1e308/1e-10 likewise."""
    for r0, end in ((1e308, "F(1.79769e+308)"), (-1e308, "F(-1.79769e+308)")):
        p, rbar, dbar = np.array([1.0]), np.array([[r0, r0]]), np.array([[1e-10, 1e-10]])
        with pytest.raises(ValueError, match=rf"outside the float64 range: {re.escape(end)}"):
            rates.rho_star_bisection(p, rbar, dbar)
        for f in (rates.rho_star, rates.rho_star_bruteforce):
            with pytest.raises(ValueError, match=re.escape(f"policy [0] is {r0!r} / 1e-10 = ")):
                f(p, rbar, dbar)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_rho_star_finite_when_only_a_losing_policy_overflows():
    """Policy [0] has rate -1e318 (overflows to -inf), the optimal one -1: all three agree."""
    p, rbar, dbar = np.array([1.0]), np.array([[-1e308, -1.0]]), np.array([[1e-10, 1.0]])
    assert rates.rho_star(p, rbar, dbar) == -1.0
    assert rates.rho_star_bruteforce(p, rbar, dbar)[0] == -1.0
    assert abs(rates.rho_star_bisection(p, rbar, dbar) + 1.0) < 1e-12
