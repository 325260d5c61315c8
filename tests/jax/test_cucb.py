"""Tests of C-UCB (rpg_jax.agents.cucb*, numpy_ref_cucb): exact lambda, constants, behaviour."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpg_jax import rates
from rpg_jax.agents.cucb import CUCBHyper, cucb_index, make_cucb, theory_constants
from rpg_jax.agents.cucb_fast import best_policy_exact, lambda_exact_fast
from rpg_jax.agents.cucb_lambda import (
    LAMBDA_FLOOR,
    best_policy_bruteforce,
    best_policy_sampled,
    lambda_exact_bruteforce,
    log1p_int_power,
)
from testkit.numpy_ref_cucb import CUCBNumpy, lambda_numpy

# ---------------------------------------------------------------- helpers


def _itertools_lambda(n, sr, sd, c):
    """max over policies by itertools.product, in Python float64 (an independent oracle)."""
    C, A = n.shape
    best = -math.inf
    for u in itertools.product(range(A), repeat=C):
        T = sum(int(n[x, u[x]]) for x in range(C))
        if T == 0:
            continue
        R = sum(float(sr[x, u[x]]) for x in range(C))
        D = sum(float(sd[x, u[x]]) for x in range(C))
        best = max(best, R / D - c / math.sqrt(T))
    return max(best, LAMBDA_FLOOR)


def _random_stats(rng, C, A, max_count=50, p_zero=0.2):
    """Statistics as an agent would have them: durations > 0, rewards >= 0, some untried arms."""
    n = rng.integers(1, max_count + 1, size=(C, A))
    n[rng.random((C, A)) < p_zero] = 0
    rbar = rng.uniform(0.0, 2.0, size=(C, A))
    dbar = rng.uniform(0.3, 3.0, size=(C, A))
    sr = n * rbar * rng.uniform(0.7, 1.3, size=(C, A))
    sd = n * dbar * rng.uniform(0.8, 1.2, size=(C, A))
    return n.astype(np.int32), sr, sd


def _all_values(n, sr, sd, c):
    """f(u) of every policy, shape (A,) * C, by NumPy broadcasting (-inf where T_u = 0)."""
    C, A = n.shape
    R = D = T = 0.0
    for x in range(C):
        shape = (1,) * x + (A,) + (1,) * (C - x - 1)
        R, D, T = R + sr[x].reshape(shape), D + sd[x].reshape(shape), T + n[x].reshape(shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(T > 0, R / D - c / np.sqrt(T), -np.inf)


def _concentrated_stats(rng, C, A):
    """Statistics like a late C-UCB run: one dominant arm per context, few pulls elsewhere."""
    n = rng.integers(0, 25, size=(C, A))
    n[np.arange(C), rng.integers(0, A, size=C)] = rng.integers(200, 5000, size=C)
    rbar = rng.uniform(0.0, 1.5, size=(C, A))
    dbar = rng.uniform(0.35, 3.0, size=(C, A))
    sr = n * rbar + np.sqrt(n) * 0.2 * rng.standard_normal((C, A))
    sd = n * dbar * rng.uniform(0.95, 1.05, size=(C, A))
    sr = np.where(n > 0, np.maximum(sr, 0.0), 0.0)
    return n.astype(np.int32), sr, sd


def _gauss_sampler(rbar, dbar):
    """Jittable outcome sampler of a simple test instance: Gaussian reward, clipped duration."""
    rbar = jnp.asarray(rbar)
    dbar = jnp.asarray(dbar)

    def sample(key, x, a):
        z = jax.random.normal(key, (2,), rbar.dtype)
        r = rbar[x, a] + 0.2 * z[0]
        d = jnp.maximum(dbar[x, a] * (1.0 + 0.15 * z[1]), 0.05)
        return r, d

    return sample


def _run_jax(agent, hyper, rbar, dbar, key, n_steps):
    """Scan one seed; returns (contexts, actions, lams) per decision."""
    C = rbar.shape[0]
    sample = _gauss_sampler(rbar, dbar)

    def step(state, k):
        kx, ka, ke, ku = jax.random.split(k, 4)
        x = jax.random.randint(kx, (), 0, C)
        a = agent.act(state, hyper, x, ka)
        r, d = sample(ke, x, a)
        lam = state.lam
        return agent.update(state, hyper, x, a, r, d, ku), (x, a, lam)

    k0, k1 = jax.random.split(key)
    state = agent.init(hyper, k0)
    _, out = jax.lax.scan(step, state, jax.random.split(k1, n_steps))
    return out


# ---------------------------------------------------------------- lambda: brute force


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    C=st.integers(1, 3),
    A=st.integers(1, 4),
    c=st.floats(0.0, 5.0),
)
def test_bruteforce_lambda_matches_itertools(seed, C, A, c):
    n, sr, sd = _random_stats(np.random.default_rng(seed), C, A)
    want = _itertools_lambda(n, sr, sd, c)
    value, u = best_policy_bruteforce(jnp.asarray(n), jnp.asarray(sr), jnp.asarray(sd), c)
    got = max(float(value), LAMBDA_FLOOR)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    if np.isfinite(float(value)):  # the returned policy attains the value
        u = np.asarray(u)
        rows = np.arange(C)
        R, D, T = sr[rows, u].sum(), sd[rows, u].sum(), n[rows, u].sum()
        assert R / D - c / math.sqrt(T) == pytest.approx(float(value), rel=1e-12, abs=1e-12)
    # the NumPy reference enumeration agrees too (float64 here)
    assert lambda_numpy(n, sr, sd, c, np.float64) == pytest.approx(want, rel=1e-12, abs=1e-12)


_fast_jit = jax.jit(best_policy_exact)
_brute_jit = jax.jit(best_policy_bruteforce)


def _check_fast_equals_brute(n, sr, sd, c, u_prev):
    args = (jnp.asarray(n), jnp.asarray(sr), jnp.asarray(sd), jnp.asarray(c, jnp.float64))
    v_b, _ = _brute_jit(*args)
    v_f, u_f = _fast_jit(*args, jnp.asarray(u_prev, jnp.int32))
    lam_b, lam_f = max(float(v_b), LAMBDA_FLOOR), max(float(v_f), LAMBDA_FLOOR)
    assert lam_f == pytest.approx(lam_b, rel=1e-9, abs=1e-12)
    if float(v_f) > -np.inf:  # the returned policy attains the returned value
        u = np.asarray(u_f)
        rows = np.arange(n.shape[0])
        R, D, T = sr[rows, u].sum(), sd[rows, u].sum(), n[rows, u].sum()
        assert R / D - c / math.sqrt(T) == pytest.approx(float(v_f), rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=st.sampled_from([(1, 3), (2, 5), (3, 5), (4, 3), (4, 6), (5, 3)]),
    c=st.sampled_from([0.0, 0.02, 0.3, 2.0, 50.0]),
    concentrated=st.booleans(),
)
def test_fast_exact_lambda_equals_bruteforce_random(seed, shape, c, concentrated):
    rng = np.random.default_rng(seed)
    C, A = shape
    make = _concentrated_stats if concentrated else _random_stats
    n, sr, sd = make(rng, C, A)
    _check_fast_equals_brute(n, sr, sd, c, rng.integers(0, A, size=C))  # cold incumbent
    # near-optimal incumbents (as in the agent, whose incumbent is the last maximiser): the
    # certificates, not the incumbent, must then find the better policies
    vals = _all_values(n, sr, sd, c)
    order = np.argsort(-vals, axis=None, kind="stable")
    for rank in (0, 1, 3):
        if rank < order.size:
            u = np.array(np.unravel_index(order[rank], vals.shape))
            _check_fast_equals_brute(n, sr, sd, c, u)


def test_fast_exact_lambda_float32_matches_float64_bruteforce():
    """In float32 (the simulator's default) the branch and bound stays within float32 rounding."""
    rng = np.random.default_rng(8)
    fast32 = jax.jit(best_policy_exact)
    for _ in range(20):
        n, sr, sd = _concentrated_stats(rng, 4, 6)
        c = float(rng.choice([0.02, 0.3, 2.0]))
        args = (jnp.asarray(n), jnp.asarray(sr), jnp.asarray(sd), jnp.asarray(c))
        vals = _all_values(n, sr, sd, c)
        u_near = np.array(np.unravel_index(np.argsort(-vals, axis=None)[2], vals.shape))
        v64, _ = _brute_jit(*args)
        v32, _ = fast32(args[0], *(a.astype(jnp.float32) for a in args[1:]), u_near)
        assert max(float(v32), LAMBDA_FLOOR) == pytest.approx(
            max(float(v64), LAMBDA_FLOOR), rel=2e-5
        )


def test_fast_exact_lambda_equals_bruteforce_along_trajectory():
    """At every decision of a real C-UCB run (K = 7, |X| = 4) the branch and bound, warm
    started from the previous maximiser as in the agent, gives the brute-force lambda."""
    C, A, n_steps = 4, 8, 1500
    rng = np.random.default_rng(4)
    rbar = rng.uniform(0.1, 1.5, size=(C, A))
    dbar = rng.uniform(0.4, 3.0, size=(C, A))
    agent = make_cucb(C, A, bruteforce=True)
    hyper = CUCBHyper(jnp.float64(0.05), jnp.float64(0.02))
    sample = _gauss_sampler(rbar, dbar)
    log1p_u = log1p_int_power(A, C)

    def step(carry, k):
        state, u_prev = carry
        kx, ka, ke, ku = jax.random.split(k, 4)
        x = jax.random.randint(kx, (), 0, C)
        a = agent.act(state, hyper, x, ka)
        r, d = sample(ke, x, a)
        state = agent.update(state, hyper, x, a, r, d, ku)
        L = jnp.log(jnp.maximum(state.t + 1.0, 2.0)) + 0.5 * log1p_u
        c = jnp.sqrt(2.0 * hyper.c1 * L)
        v_f, u_f = best_policy_exact(state.n, state.sum_r, state.sum_d, c, u_prev)
        lam_f = jnp.maximum(v_f, LAMBDA_FLOOR)
        return (state, u_f), (lam_f, state.lam)

    state0 = agent.init(hyper, jax.random.key(0))
    keys = jax.random.split(jax.random.key(5), n_steps)
    _, (lam_f, lam_b) = jax.jit(lambda s: jax.lax.scan(step, (s, s.u_best), keys))(state0)
    lam_f, lam_b = np.asarray(lam_f), np.asarray(lam_b)
    assert np.all(lam_b[200:] > 1e-6)  # the clip is not what is being compared
    np.testing.assert_allclose(lam_f, lam_b, rtol=1e-9, atol=1e-12)


def test_lambda_exact_fast_wrapper():
    rng = np.random.default_rng(2)
    n, sr, sd = _concentrated_stats(rng, 4, 5)
    args = (jnp.asarray(n), jnp.asarray(sr), jnp.asarray(sd), 0.1, 12.0)
    assert float(lambda_exact_fast(*args)) == pytest.approx(
        float(lambda_exact_bruteforce(*args)), rel=1e-12
    )


def test_lambda_floor_and_untried():
    n = np.zeros((2, 3), np.int32)
    z = np.zeros((2, 3))
    lam = lambda_exact_bruteforce(jnp.asarray(n), jnp.asarray(z), jnp.asarray(z), 1.0, 2.0)
    assert float(lam) == LAMBDA_FLOOR
    # one tried arm in context 1: the only valid policies score R/D - c/sqrt(T) of that arm
    n[1, 2] = 4
    sr, sd = z.copy(), z.copy()
    sr[1, 2], sd[1, 2] = 6.0, 2.0
    lam = lambda_exact_bruteforce(jnp.asarray(n), jnp.asarray(sr), jnp.asarray(sd), 0.5, 1.0)
    assert float(lam) == pytest.approx(3.0 - 1.0 / 2.0)


def test_log1p_int_power():
    assert log1p_int_power(6, 4) == pytest.approx(math.log(1 + 6**4), rel=1e-15)
    assert log1p_int_power(161, 64) == pytest.approx(64 * math.log(161), rel=1e-15)


# ---------------------------------------------------------------- constants and index


def test_theory_constants_by_hand():
    rbar = np.array([[1.0, 0.0], [2.0, 0.5]])
    dbar = np.array([[1.0, 0.5], [4.0, 2.0]])
    # rmax 2, rmin 0, dmin 0.5, dmax 4
    c1 = 2 * max(2.0**2 / 0.5**2, 2.0**2 * 3.5**2 / 0.5**4)  # = 2 * 784 = 1568
    a0 = math.sqrt(8 * max(4.0, 4.0 * 12.25 / 0.25))  # sqrt(8 * 196) = 39.598
    a1 = math.sqrt(2 * 16.0 * 1568.0)  # 224
    got = theory_constants(rbar, dbar)
    assert got.c1 == pytest.approx(c1) == pytest.approx(1568.0)
    assert got.c2 == pytest.approx(a0 + a1)
    assert got.c2 == pytest.approx(39.59797974644666 + 224.0)
    with pytest.raises(ValueError, match="durations"):
        theory_constants(rbar, -dbar)


def test_index_formula():
    n = jnp.array([0, 2, 8])
    sr = jnp.array([0.0, 3.0, 4.0])
    sd = jnp.array([0.0, 2.0, 16.0])
    idx = np.asarray(cucb_index(n, sr, sd, 0.5, 0.1, 2.0))
    assert idx[0] == np.inf
    assert idx[1] == pytest.approx(1.5 - 0.5 + 0.1 * 1.0)
    assert idx[2] == pytest.approx(0.5 - 1.0 + 0.1 * 0.5)


# ---------------------------------------------------------------- agent behaviour


def test_initial_round_robin_pulls_each_arm_once():
    C, A = 3, 4
    agent = make_cucb(C, A, bruteforce=True)
    hyper = CUCBHyper(jnp.float64(0.5), jnp.float64(0.1))
    rbar = np.full((C, A), 0.5)
    dbar = np.ones((C, A))
    xs, acts, _ = _run_jax(agent, hyper, rbar, dbar, jax.random.key(3), 60)
    xs, acts = np.asarray(xs), np.asarray(acts)
    for x in range(C):
        seq = acts[xs == x]
        assert seq.size >= A, "test needs every context visited A times"
        np.testing.assert_array_equal(seq[:A], np.arange(A))  # lowest untried first, each once


def test_jax_agent_matches_numpy_reference_action_by_action():
    C, A, n_steps = 4, 5, 200
    rng = np.random.default_rng(7)
    rbar = rng.uniform(0.1, 1.5, size=(C, A))
    dbar = rng.uniform(0.4, 3.0, size=(C, A))
    xs = rng.integers(0, C, size=n_steps)
    noise = rng.standard_normal((n_steps, 2))
    for exact_fast in (False, True):
        agent = make_cucb(C, A, bruteforce=not exact_fast)
        hyper = CUCBHyper(jnp.float64(0.3), jnp.float64(0.05))
        act, upd = jax.jit(agent.act), jax.jit(agent.update)
        state = agent.init(hyper, jax.random.key(0))
        ref = CUCBNumpy(C, A, 0.3, 0.05, dtype=np.float64)
        key = jax.random.key(1)
        for t in range(n_steps):
            x = int(xs[t])
            a = int(act(state, hyper, x, key))
            b = ref.act(x)
            assert a == b, f"decision {t + 1}: JAX {a} vs NumPy {b}"
            assert float(state.lam) == pytest.approx(ref.lam, rel=1e-9)
            r = rbar[x, a] + 0.2 * noise[t, 0]
            d = max(dbar[x, a] * (1 + 0.15 * noise[t, 1]), 0.05)
            state = upd(state, hyper, x, a, r, d, key)
            ref.update(x, a, r, d)
        assert len(set(np.asarray(state.n).ravel().tolist())) > 3  # the agent did explore


@pytest.mark.parametrize("variant", ["exact", "sampled"])
def test_pseudo_regret_per_step_falls_on_easy_instance(variant):
    C, A = 2, 3
    rbar = np.array([[1.0, 0.3, 0.0], [0.8, 0.2, 0.0]])
    dbar = np.array([[1.0, 1.0, 0.35], [1.0, 2.0, 0.35]])
    gap = rates.gaps(np.full(C, 0.5), rbar, dbar)
    if variant == "exact":
        agent = make_cucb(C, A)
    else:
        agent = make_cucb(C, A, exact=False, num_sampled_policies=64)
    hyper = CUCBHyper(jnp.float64(0.1), jnp.float64(0.1))
    n_steps, seeds = 3000, 8
    run = jax.jit(jax.vmap(lambda k: _run_jax(agent, hyper, rbar, dbar, k, n_steps)))
    xs, acts, _ = run(jax.random.split(jax.random.key(11), seeds))
    g = gap[np.asarray(xs), np.asarray(acts)]  # (seeds, n)
    early, late = g[:, 50:550].mean(), g[:, -500:].mean()
    assert late < 0.5 * early, (early, late)


# ---------------------------------------------------------------- sampled variant


def test_sampled_policies_use_only_tried_arms():
    rng = np.random.default_rng(5)
    C, A = 3, 6
    n, sr, sd = _random_stats(rng, C, A, p_zero=0.5)
    n[0] = 0  # a context with nothing tried: contributes nothing
    n[0, 0] = 0
    sr[n == 0] = 0.0
    sd[n == 0] = 0.0
    nj, srj, sdj = jnp.asarray(n), jnp.asarray(sr), jnp.asarray(sd)
    sampled = jax.jit(best_policy_sampled, static_argnums=5)
    for s in range(20):
        value, u = sampled(nj, srj, sdj, 0.7, jax.random.key(s), 64)
        u = np.asarray(u)
        for x in range(1, C):
            if n[x].any():
                assert n[x, u[x]] > 0
    # all sampled policies (not only the best) pick tried arms: check through the logits path
    keys = jax.random.split(jax.random.key(0), 200)
    us = jax.vmap(lambda k: best_policy_sampled(nj, srj, sdj, 0.0, k, 1)[1])(keys)
    us = np.asarray(us)
    for x in range(1, C):
        if n[x].any():
            assert np.all(n[x, us[:, x]] > 0)
            assert set(us[:, x].tolist()) == set(np.flatnonzero(n[x]).tolist())


def test_sampled_close_to_exact_with_many_samples():
    rng = np.random.default_rng(9)
    C, A = 2, 4
    n, sr, sd = _random_stats(rng, C, A, p_zero=0.0)
    c = 0.4
    exact = _itertools_lambda(n, sr, sd, c)
    value, _ = best_policy_sampled(
        jnp.asarray(n), jnp.asarray(sr), jnp.asarray(sd), c, jax.random.key(2), 512
    )
    assert max(float(value), LAMBDA_FLOOR) == pytest.approx(exact, rel=1e-12)
    # with one sample it is (almost surely, for this instance) below the exact maximum
    keys = jax.random.split(jax.random.key(3), 10)
    vals = jax.vmap(
        lambda k: best_policy_sampled(jnp.asarray(n), jnp.asarray(sr), jnp.asarray(sd), c, k, 1)[0]
    )(keys)
    vals = np.asarray(vals)
    assert min(vals) < exact - 1e-6


def test_make_cucb_rejects_bad_sizes():
    with pytest.raises(ValueError, match="n_contexts"):
        make_cucb(0, 3)
    with pytest.raises(ValueError, match="too large"):
        make_cucb(64, 161, exact=True)
    with pytest.raises(ValueError, match="num_sampled_policies"):
        make_cucb(4, 3, exact=False, num_sampled_policies=0)


def test_chex_shape_asserts_catch_mismatched_state():
    """A C-UCB state built for another (C, A) is refused at trace time, not index-clamped."""
    hyper = CUCBHyper(jnp.asarray(1.0), jnp.asarray(0.1))
    small, big = make_cucb(2, 3), make_cucb(2, 4)
    s = big.init(hyper, jax.random.key(0))
    with pytest.raises(AssertionError):
        small.act(s, hyper, 0, jax.random.key(1))
    with pytest.raises(AssertionError):
        small.update(s, hyper, 0, 1, 1.0, 1.0, jax.random.key(1))
    s_ok = small.init(hyper, jax.random.key(0))
    assert int(small.act(s_ok, hyper, 0, jax.random.key(1))) == 0  # first untried action
