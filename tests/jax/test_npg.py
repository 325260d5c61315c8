"""NPG-NIW / SPG-NIW agents (rpg_jax.agents.npg) and the NumPy reference loop (numpy_ref_npg)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rpg_jax import rates
from rpg_jax.agents.npg import (
    PGHyper,
    make_pg_agent,
    make_pg_fns,
    oracle_estimator,
    relative_value_estimate,
)

F64 = jnp.float64


def _hyper(lr=0.5, age_bound=25):
    return PGHyper(jnp.asarray(lr, F64), jnp.asarray(age_bound, F64))


class _RatioState(NamedTuple):
    rho_hat: jax.Array
    num_refits: jax.Array


class _RatioEstimator(NamedTuple):
    """Cheap key-dependent estimator for tests: pooled slot ratio times (1 + 0.01 U(-1, 1))."""

    def init(self, dtype=jnp.float32):
        return _RatioState(jnp.zeros((), dtype), jnp.zeros((), jnp.int32))

    def refit(self, est, slot_r, slot_d, *mask_key):
        key = mask_key[-1]
        if len(mask_key) == 2:  # reference feeding: (mask, key)
            slot_r, slot_d = jnp.where(mask_key[0], slot_r, 0), jnp.where(mask_key[0], slot_d, 0)
        tot_d = slot_d.sum()
        ratio = jnp.where(tot_d > 0, slot_r.sum() / jnp.where(tot_d > 0, tot_d, 1.0), est.rho_hat)
        jitter = 1.0 + 0.01 * jax.random.uniform(key, (), slot_r.dtype, -1.0, 1.0)
        return _RatioState(ratio * jitter, est.num_refits + 1)


def _softmax(v):
    e = np.exp(v - v.max())
    return e / e.sum()


# ---------------------------------------------------------------- one step against the formula


@pytest.mark.parametrize("natural", [True, False])
def test_one_step_matches_hand_formula(natural):
    C, A = 2, 4
    rng = np.random.default_rng(0)
    init, _, fns = make_pg_fns(C, A, natural=natural, num_slots=4, estimator=oracle_estimator(0.4))
    hyper = _hyper(lr=0.7)
    s = init(hyper, jax.random.key(0))
    theta = rng.normal(size=(C, A))
    n = np.array([[2, 0, 3, 1], [1, 1, 1, 1]])
    sum_r = rng.uniform(0, 2, size=(C, A)) * n
    sum_d = rng.uniform(0.5, 2, size=(C, A)) * n
    s = s._replace(theta=jnp.asarray(theta), n=jnp.asarray(n, jnp.int32))
    s = s._replace(sum_r=jnp.asarray(sum_r), sum_d=jnp.asarray(sum_d))
    x, a, r, d = 0, 2, 1.3, 0.9
    out = fns.update_stats_and_theta(s, hyper, x, a, r, d)

    n2, sr2, sd2 = n.copy(), sum_r.copy(), sum_d.copy()
    n2[x, a] += 1
    sr2[x, a] += r
    sd2[x, a] += d
    q = np.array(
        [(sr2[x, b] - 0.4 * sd2[x, b]) / n2[x, b] if n2[x, b] > 0 else 0.0 for b in range(A)]
    )
    assert n2[x, 1] == 0  # the n = 0 convention is exercised
    pi = _softmax(theta[x])
    adv = q - pi @ q
    expect = theta.copy()
    expect[x] += 0.7 * (adv if natural else pi * adv)
    np.testing.assert_allclose(np.asarray(out.theta), expect, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(out.n), n2)
    np.testing.assert_allclose(np.asarray(out.sum_r), sr2, atol=1e-12)
    other = fns.update_stats_and_theta(s, hyper, x, a, r, d)  # deterministic: same again
    np.testing.assert_array_equal(np.asarray(other.theta), np.asarray(out.theta))


def test_npg_and_spg_differ():
    _, _, npg = make_pg_fns(1, 3, natural=True, num_slots=2, estimator=oracle_estimator(0.2))
    init, _, spg = make_pg_fns(1, 3, natural=False, num_slots=2, estimator=oracle_estimator(0.2))
    s = init(_hyper(), jax.random.key(0))
    s = s._replace(theta=jnp.asarray([[0.3, -0.1, 0.5]]))
    a = npg.update_stats_and_theta(s, _hyper(), 0, 1, 1.0, 1.0).theta
    b = spg.update_stats_and_theta(s, _hyper(), 0, 1, 1.0, 1.0).theta
    assert float(jnp.abs(a - b).max()) > 1e-3


def test_relative_value_estimate_zero_count():
    q = relative_value_estimate(
        jnp.asarray([0, 2]), jnp.asarray([5.0, 3.0]), jnp.asarray([1.0, 2.0]), jnp.asarray(0.5)
    )
    np.testing.assert_allclose(np.asarray(q), [0.0, (3.0 - 1.0) / 2])


# ---------------------------------------------------------------- NPG decoupling identity


def _run_exact(natural, C=3, A=4, k=60, lr=0.3, seed=1):
    """k decisions with deterministic outcomes (r, delta) = (rbar, dbar), oracle rho_star and
    arm statistics pre-filled with one exact sample each, so every step uses Q = q_{rho*}."""
    rng = np.random.default_rng(seed)
    rbar = rng.uniform(0.2, 1.5, size=(C, A))
    dbar = rng.uniform(0.5, 2.5, size=(C, A))
    p = np.full(C, 1.0 / C)
    rho = rates.rho_star(p, rbar, dbar)
    agent = make_pg_agent(C, A, natural=natural, num_slots=8, estimator=oracle_estimator(rho))
    hyper = _hyper(lr=lr)
    s = agent.init(hyper, jax.random.key(0))
    s = s._replace(n=jnp.ones((C, A), jnp.int32), sum_r=jnp.asarray(rbar), sum_d=jnp.asarray(dbar))
    xs = jnp.asarray(rng.integers(0, C, size=k), jnp.int32)
    rb, db = jnp.asarray(rbar), jnp.asarray(dbar)

    def step(s, inp):
        x, key = inp
        ka, ku = jax.random.split(key)
        a = agent.act(s, hyper, x, ka)
        return agent.update(s, hyper, x, a, rb[x, a], db[x, a], ku), None

    keys = jax.random.split(jax.random.key(seed), k)
    s, _ = jax.jit(lambda s: jax.lax.scan(step, s, (xs, keys)))(s)
    counts = np.bincount(np.asarray(xs), minlength=C)
    return np.asarray(s.theta), lr * counts, rates.relative_values(rho, rbar, dbar)


def test_npg_decoupling_identity():
    theta, H, q = _run_exact(natural=True)
    resid = theta - H[:, None] * q
    assert np.all(H > 0)
    np.testing.assert_allclose(resid - resid.mean(axis=1, keepdims=True), 0.0, atol=1e-10)


def test_spg_breaks_decoupling_identity():
    theta, H, q = _run_exact(natural=False)
    resid = theta - H[:, None] * q
    assert np.abs(resid - resid.mean(axis=1, keepdims=True)).max() > 1e-3


# ---------------------------------------------------------------- slot bookkeeping


def _slots_numpy(theta, stream, S, age_bound):
    """Independent re-implementation of the slot rules (module docstring of npg.py)."""
    slot_r, slot_d = np.zeros(S), np.zeros(S)
    slot_n, slot_start = np.zeros(S, int), np.zeros(S, int)
    ptr, hist = 0, []
    for t, (x, a, r, d) in enumerate(stream):
        greedy = a == int(np.argmax(theta[int(x)]))
        for i in range(S):
            if slot_n[i] > 0 and t - slot_start[i] > age_bound:
                slot_r[i] = slot_d[i] = 0.0
                slot_n[i] = 0
        if greedy:
            if slot_n[ptr] == 0:
                slot_start[ptr] = t
            slot_r[ptr] += r
            slot_d[ptr] += d
            slot_n[ptr] += 1
            ptr = (ptr + 1) % S
        hist.append((slot_r.copy(), slot_d.copy(), slot_n.copy(), ptr))
    return hist


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_slot_bookkeeping_matches_numpy(seed):
    C, A, S, T, age_bound = 3, 3, 5, 400, 23
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(C, A))
    theta[1] = 0.0  # ties: the lowest index is greedy
    stream = np.stack(
        [
            rng.integers(0, C, T),
            rng.integers(0, A, T),
            rng.uniform(0, 1, T),
            rng.uniform(0.5, 2, T),
        ],
        axis=1,
    )
    init, _, fns = make_pg_fns(
        C, A, natural=True, num_slots=S, estimator=oracle_estimator(0.0), feeding="legacy"
    )
    hyper = _hyper(age_bound=age_bound)
    s0 = init(hyper, jax.random.key(0))._replace(theta=jnp.asarray(theta))

    def step(s, row):
        s = fns.update_stats(s, hyper, row[0].astype(jnp.int32), row[1].astype(jnp.int32), *row[2:])
        return s, (s.slot_r, s.slot_d, s.slot_n, s.slot_ptr)

    sT, (hr, hd, hn, hp) = jax.jit(lambda s: jax.lax.scan(step, s, jnp.asarray(stream)))(s0)
    ref = _slots_numpy(theta, stream, S, age_bound)
    np.testing.assert_allclose(np.asarray(hr), np.stack([h[0] for h in ref]), atol=1e-12)
    np.testing.assert_allclose(np.asarray(hd), np.stack([h[1] for h in ref]), atol=1e-12)
    np.testing.assert_array_equal(np.asarray(hn), np.stack([h[2] for h in ref]))
    np.testing.assert_array_equal(np.asarray(hp), [h[3] for h in ref])
    # the stream exercises greedy and non-greedy samples, wrap-around and resets
    greedy = stream[:, 1].astype(int) == theta.argmax(axis=1)[stream[:, 0].astype(int)]
    assert 0.15 * T < greedy.sum() < 0.6 * T
    counts = np.asarray(hn, np.int64)
    assert counts.max() >= 2 and (np.diff(counts, axis=0) < 0).any()
    assert int(sT.t) == T and np.asarray(sT.theta).tolist() == theta.tolist()


# ---------------------------------------------------------------- refit schedule


@pytest.mark.parametrize("refit_every", [8, 3])
def test_refit_exactly_every_k(refit_every):
    agent = make_pg_agent(
        2,
        3,
        natural=True,
        num_slots=4,
        refit_every=refit_every,
        estimator=oracle_estimator(0.3),
        feeding="legacy",
    )
    hyper = _hyper()
    s0 = agent.init(hyper, jax.random.key(0))

    def step(s, key):
        kx, ka, ku = jax.random.split(key, 3)
        x = jax.random.randint(kx, (), 0, 2)
        a = agent.act(s, hyper, x, ka)
        s = agent.update(s, hyper, x, a, 0.5, 1.0, ku)
        return s, s.est.num_refits

    _, counts = jax.lax.scan(step, s0, jax.random.split(jax.random.key(1), 50))
    np.testing.assert_array_equal(np.asarray(counts), np.arange(1, 51) // refit_every)


@pytest.mark.parametrize("feeding", ["legacy", "reference"])
def test_blocked_schedule_is_identical_to_update(feeding):
    """update_stats_and_theta x (k-1) then update_with_refit == agent.update x k, bit for bit."""
    C, A, k, blocks = 2, 3, 8, 6
    est = _RatioEstimator()
    agent = make_pg_agent(C, A, natural=True, num_slots=6, estimator=est, feeding=feeding)
    _, _, fns = make_pg_fns(C, A, natural=True, num_slots=6, estimator=est, feeding=feeding)
    hyper = _hyper(lr=0.4, age_bound=20)
    s0 = agent.init(hyper, jax.random.key(0))
    rng = np.random.default_rng(3)
    xs = rng.integers(0, C, k * blocks)
    rs, ds = rng.uniform(0, 1, k * blocks), rng.uniform(0.5, 2, k * blocks)
    keys = jax.random.split(jax.random.key(5), k * blocks)

    act = jax.jit(agent.act)
    upd, upd_refit = jax.jit(agent.update), jax.jit(fns.update_with_refit)
    upd_plain = jax.jit(fns.update_stats_and_theta)

    def run(blocked):
        s = s0
        for t in range(k * blocks):
            a = act(s, hyper, int(xs[t]), jax.random.fold_in(keys[t], 1))
            args = (s, hyper, int(xs[t]), a, rs[t], ds[t])
            if not blocked:
                s = upd(*args, keys[t])
            elif (t + 1) % k == 0:
                s = upd_refit(*args, keys[t])
            else:
                s = upd_plain(*args)
        return s

    a, b = run(False), run(True)
    assert int(a.est.num_refits) == blocks if feeding == "legacy" else 0 < int(a.est.num_refits)
    for la, lb in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(la), np.asarray(lb))
    assert float(a.est.rho_hat) > 0


def test_bad_config_raises():
    with pytest.raises(ValueError, match="num_slots"):
        make_pg_agent(2, 3, natural=True, num_slots=0, estimator=oracle_estimator(0.1))
    with pytest.raises(ValueError, match="n_actions"):
        make_pg_agent(2, 0, natural=True, estimator=oracle_estimator(0.1))
    with pytest.raises(ValueError, match="rho"):
        oracle_estimator(float("nan"))


# ---------------------------------------------------------------- learning with the real estimator


def _e1_params():
    envs = pytest.importorskip("rpg_jax.envs")
    return envs.make_reference_env("E1", 5, 4)


def _simulate_npg(params, seeds, n_steps, lr, age_bound, num_batches):
    """NPG-NIW with the real NIW estimator through the lead's simulator (agent.update path)."""
    from rpg_jax.agents.npg import reference_niw_estimator

    sim = pytest.importorskip("rpg_jax.simulate")
    C, A = params.rbar.shape
    agent = make_pg_agent(
        C, A, natural=True, estimator=reference_niw_estimator(128, num_batches=num_batches)
    )
    stacked = jax.tree.map(lambda v: np.stack([np.asarray(v)] * len(seeds)), params)
    return sim.simulate(agent, _hyper(lr, age_bound), stacked, seeds, n_steps)


def _uniform_pseudo_regret(params, n_steps):
    """Exact expected pseudo-regret of the uniformly random policy: n sum_x p(x) mean_a GAP."""
    return n_steps * float(np.dot(params.p, params.gap.mean(axis=1)))


@pytest.mark.slow
def test_npg_niw_learns_on_e1():
    params = _e1_params()
    res = _simulate_npg(params, [0, 1], 3000, lr=1.0, age_bound=2000, num_batches=50)
    uniform = _uniform_pseudo_regret(params, 3000)
    assert np.all(res.pseudo_regret < 0.3 * uniform), (res.pseudo_regret, uniform)
    assert np.all(np.isfinite(res.regret))


@pytest.mark.slow
def test_jax_matches_numpy_reference_in_distribution():
    """Same settings, 32 seeds each: final pseudo-regret means agree within 4 standard errors."""
    from testkit.numpy_ref_npg import run_npg_numpy

    params = _e1_params()
    n_seeds, n_steps, lr, age, nb = 32, 1000, 1.0, 500, 250
    pj = _simulate_npg(params, list(range(n_seeds)), n_steps, lr, age, nb).pseudo_regret
    pn = np.array(
        [
            run_npg_numpy(params, n_steps, lr, age, seed, num_batches=nb)["pseudo_regret"]
            for seed in range(n_seeds)
        ]
    )
    se = np.sqrt(pj.var(ddof=1) / n_seeds + pn.var(ddof=1) / n_seeds)
    assert abs(pj.mean() - pn.mean()) < 4 * se, (pj.mean(), pn.mean(), se)
    uniform = _uniform_pseudo_regret(params, n_steps)
    assert pn.mean() < 0.5 * uniform and pj.mean() < 0.5 * uniform


def test_numpy_niw_matches_jax_estimator():
    """The NumPy reference's NIW refits equal rpg_jax.estimator.update to 1e-10 (float64)."""
    est = pytest.importorskip("rpg_jax.estimator")
    from testkit.numpy_ref_npg import niw_init, niw_update

    rng = np.random.default_rng(4)
    S = 16
    js, ns = est.init_state(F64), niw_init()
    for i in range(6):
        slot_d = rng.uniform(0.5, 3.0, S) * (rng.uniform(size=S) < 0.7)
        if i == 2:
            slot_d[1:] = 0.0  # one usable slot: nothing changes
        slot_r = rng.uniform(0.0, 2.0, S) * (slot_d > 0)
        js = est.update(js, jnp.asarray(slot_r), jnp.asarray(slot_d))
        ns, updated = niw_update(ns, slot_r, slot_d)
        assert bool(js.fitted) == updated and int(js.num_fits) == ns.num_fits
        for a, b in ((js.mu, ns.mu), (js.kappa, ns.kappa), (js.nu, ns.nu), (js.psi, ns.psi)):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10, atol=1e-12)
    assert ns.num_fits == 5


def test_numpy_estimate_matches_jax_within_mc_error():
    est = pytest.importorskip("rpg_jax.estimator")
    from testkit.numpy_ref_npg import niw_estimate, niw_init, niw_update

    rng = np.random.default_rng(5)
    slot_d = rng.uniform(0.8, 2.5, 128)
    slot_r = 0.6 * slot_d + rng.normal(0, 0.2, 128)
    ns, _ = niw_update(niw_init(), slot_r, slot_d)
    js = est.update(est.init_state(F64), jnp.asarray(slot_r), jnp.asarray(slot_d))
    keys = jax.random.split(jax.random.key(0), 20)
    jr = np.asarray(jax.vmap(lambda k: est.estimate(js, k, 128))(keys))
    nr = np.array([niw_estimate(ns, np.random.default_rng(i)) for i in range(20)])
    se = np.sqrt(jr.var(ddof=1) / 20 + nr.var(ddof=1) / 20)
    assert abs(jr.mean() - nr.mean()) < 4 * se + 1e-12, (jr.mean(), nr.mean(), se)
    assert 0.5 < nr.mean() < 0.8


def test_numpy_reference_oracle_like_npg_learns():
    """The NumPy loop counts refits and, at lr = 1, beats the uniform policy clearly."""
    from testkit.numpy_ref_npg import run_npg_numpy

    params = _e1_params()
    legacy = run_npg_numpy(params, 1200, 1.0, 500, 0, num_batches=50, feeding="legacy")
    assert legacy["num_refits"] == 1200 // 8
    out = run_npg_numpy(params, 1200, 1.0, 500, 0, num_batches=50)
    assert 0 < out["num_refits"] < 1200 // 8  # reference: only due decisions with a fed sample
    assert 0 <= out["pseudo_regret"] < 0.5 * _uniform_pseudo_regret(params, 1200)
    assert 0.3 * float(params.rho_star) < out["rho_hat"] < 2.0 * float(params.rho_star)


def test_numpy_reference_rejects_bad_input():
    from testkit.numpy_ref_npg import run_npg_numpy

    with pytest.raises(ValueError, match="n_steps"):
        run_npg_numpy(_e1_params(), 0, 1.0, 60, 0)
    with pytest.raises(ValueError, match="feeding"):
        run_npg_numpy(_e1_params(), 10, 1.0, 60, 0, feeding="gage")


# ---------------------------------------------------------------- reference feeding, exactly


class _StubState(NamedTuple):
    rho_hat: jax.Array
    num_refits: jax.Array
    last_n: jax.Array


class _StubEstimator(NamedTuple):
    """Deterministic estimator: rho = (sum r / sum d) * n / (n + 1) over the masked slots, so a
    wrong mask, slot content or slot count changes rho."""

    def init(self, dtype=jnp.float32):
        return _StubState(jnp.zeros((), dtype), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))

    def refit(self, est, slot_r, slot_d, mask, key):
        del key
        w = mask.astype(slot_r.dtype)
        n = jnp.sum(w)
        rho = (w @ slot_r) / (w @ slot_d) * n / (n + 1.0)
        return _StubState(rho, est.num_refits + 1, jnp.sum(mask).astype(jnp.int32))


def _streams(T, C, A, seed):
    rng = np.random.default_rng(seed)
    contexts = rng.integers(0, C, T)
    scale = rng.uniform(0.3, 1.5, A)
    rewards = rng.uniform(0.0, 1.0, (T, A)) * scale
    durations = rng.uniform(0.5, 2.0, (T, A))
    keys = jax.random.split(jax.random.key(seed), T)
    k_act = jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys)
    k_upd = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    gumbels = np.asarray(jax.vmap(lambda k: jax.random.gumbel(k, (A,), F64))(k_act))
    return contexts, rewards, durations, k_act, k_upd, gumbels


def _run_jax_feeding(agent, hyper, contexts, rewards, durations, k_act, k_upd):
    def step(s, inp):
        x, rr, dd, ka, ku = inp
        a = agent.act(s, hyper, x, ka)
        s = agent.update(s, hyper, x, a, rr[a], dd[a], ku)
        return s, (a, s)

    s0 = agent.init(hyper, jax.random.key(0))
    inputs = (jnp.asarray(contexts, jnp.int32), jnp.asarray(rewards), jnp.asarray(durations))
    _, (acts, hist) = jax.jit(lambda s: jax.lax.scan(step, s, (*inputs, k_act, k_upd)))(s0)
    return np.asarray(acts), jax.tree.map(np.asarray, hist)


def _assert_same_trace(acts, hist, ref):
    np.testing.assert_array_equal(acts, ref.actions)
    np.testing.assert_array_equal(hist.fed, ref.fed)
    np.testing.assert_array_equal(hist.slot_n, ref.slot_n)
    np.testing.assert_array_equal(hist.slot_birth, ref.slot_birth)
    np.testing.assert_array_equal(hist.slot_ptr, ref.slot_ptr)
    np.testing.assert_allclose(hist.slot_r, ref.slot_r, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hist.slot_d, ref.slot_d, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hist.est.rho_hat, ref.rho, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hist.theta, ref.theta, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("natural", "S", "age_bound", "seed"),
    [(True, 128, 60, 0), (False, 128, 125, 1), (True, 7, 20, 2), (True, 128, 1e9, 3)],
)
def test_reference_feeding_equals_numpy_transcription(natural, S, age_bound, seed):
    """JAX agent == testkit transcription of DESIGN.md section 5, decision by decision."""
    from testkit.numpy_ref_feeding import run_reference_feeding

    C, A, T, lr = 2, 3, 700, 0.5
    contexts, rewards, durations, k_act, k_upd, gumbels = _streams(T, C, A, seed)
    agent = make_pg_agent(C, A, natural=natural, num_slots=S, estimator=_StubEstimator())
    hyper = _hyper(lr=lr, age_bound=age_bound)
    acts, hist = _run_jax_feeding(agent, hyper, contexts, rewards, durations, k_act, k_upd)

    def rho_fn(r, d, t):
        return r.sum() / d.sum() * r.size / (r.size + 1.0)

    ref = run_reference_feeding(
        contexts, gumbels, rewards, durations, lr, age_bound, rho_fn,
        n_contexts=C, natural=natural, num_slots=S,
    )  # fmt: skip
    _assert_same_trace(acts, hist, ref)
    # every refit (time and slot count n), hence the first one, is the transcription's
    refit_t = 1 + np.flatnonzero(np.diff(hist.est.num_refits, prepend=0))
    np.testing.assert_array_equal(refit_t, [t for t, _ in ref.refits])
    np.testing.assert_array_equal(hist.est.last_n[refit_t - 1], [n for _, n in ref.refits])
    assert np.all(refit_t % 8 == 0) and np.all(ref.fed[refit_t - 1])
    # every reset: the birth of slot i becomes t exactly at the resets of the transcription
    born = np.argwhere(np.diff(hist.slot_birth, axis=0, prepend=0) != 0)
    np.testing.assert_array_equal([(t + 1, i) for t, i in born], ref.resets)
    # the streams exercise what the rules distinguish
    assert 0.2 * T < ref.fed.sum() < T
    if age_bound < T:
        assert len(ref.resets) >= 3
    else:
        assert not ref.resets
    if S < 128:
        assert ref.slot_n.max() >= 2  # wrap-around without reset adds to a slot
    assert ref.refits and len(ref.refits) < T // 8  # some due decisions are skipped (not fed)


def test_reference_feeding_with_niw_estimator_refit_times():
    """The real NIW estimator under the reference feeding: refits (est.num_fits) happen exactly
    where the transcription refits; rho is injected from the JAX run so the rest is exact."""
    from testkit.numpy_ref_feeding import run_reference_feeding

    C, A, T, lr, age = 2, 3, 240, 1.0, 60
    contexts, rewards, durations, k_act, k_upd, gumbels = _streams(T, C, A, 7)
    agent = make_pg_agent(C, A, natural=True)
    acts, hist = _run_jax_feeding(
        agent, _hyper(lr, age), contexts, rewards, durations, k_act, k_upd
    )
    jax_rho = hist.est.rho_hat
    ref = run_reference_feeding(
        contexts, gumbels, rewards, durations, lr, age, lambda r, d, t: jax_rho[t - 1],
        n_contexts=C,
    )  # fmt: skip
    _assert_same_trace(acts, hist, ref)
    fits = 1 + np.flatnonzero(np.diff(hist.est.num_fits, prepend=0))
    np.testing.assert_array_equal(fits, [t for t, _ in ref.refits])
    assert jax_rho[: fits[0] - 1].max() == 0.0 and jax_rho[fits[0] - 1] > 0
    ratio = rewards.mean() / durations.mean()
    assert 0.3 * ratio < jax_rho[-1] < 3 * ratio


def _masked_slots(n, seed=11, S=128):
    rng = np.random.default_rng(seed)
    mask = np.zeros(S, bool)
    mask[rng.choice(S, n, replace=False)] = True
    slot_d = rng.uniform(0.8, 2.5, S)
    slot_r = 0.6 * slot_d + rng.normal(0, 0.2, S)
    return slot_r, slot_d, mask


@pytest.mark.parametrize("n", [2, 6, 100])
def test_fused_masked_refit_equals_draws_of_its_key_and_matches_numpy_masked_refit(n):
    """The agents' refit (fused estimator, batch = usable slots) on a masked set of n slots:
    (1) its posterior is the NumPy NIW update on the n masked slots (1e-12); (2) with the same
    key its rho_hat is exactly the 95 % quantile of the rates of the first n slot vectors of
    ``predictive_draws`` (the stored draws the fusion reduces); (3) its law over keys is the
    NumPy masked refit's (``niw_estimate`` with batches of n, NumPy draws: two-sample KS), and
    the same KS rejects batches of S (the law of the old all-slots rule)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    est = pytest.importorskip("rpg_jax.estimator")
    from rpg_core import niw
    from rpg_jax.agents.npg import reference_niw_estimator
    from testkit.numpy_ref_npg import niw_estimate, niw_init, niw_update

    S = 128
    slot_r, slot_d, mask = _masked_slots(n, S=S)
    s0 = est.init_state(F64)
    ref_est = reference_niw_estimator(S)
    refit = jax.jit(
        jax.vmap(lambda k: ref_est.refit(s0, jnp.asarray(slot_r), jnp.asarray(slot_d), mask, k))
    )
    keys = jax.random.split(jax.random.key(1), 400)
    fits = refit(keys)
    post, updated = niw_update(niw_init(), slot_r[mask], slot_d[mask])
    assert updated and int(fits.num_fits[0]) == 1
    for a, b in ((fits.mu[0], post.mu), (fits.kappa[0], post.kappa), (fits.nu[0], post.nu)):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(fits.psi[0]), post.psi, rtol=1e-12)
    # (2) exact: the same key's stored draws, first n slots of each batch
    fit = jax.tree.map(lambda v: v[0], fits)
    for i in (0, 1):
        draws = np.asarray(est.predictive_draws(fit, keys[i], S))[:, :n]
        want = max(
            0.0, float(np.quantile(draws[..., 0].sum(-1) / np.exp(draws[..., 1]).sum(-1), 0.95))
        )
        np.testing.assert_allclose(float(fits.rho_hat[i]), want, rtol=1e-12, atol=1e-15)
    # (3) law: 400 fused refits vs 400 NumPy masked refits
    rng = np.random.default_rng(5)
    mine = np.asarray(fits.rho_hat)
    ref_n = np.array([niw_estimate(post, rng, n, niw.NUM_BATCHES) for _ in range(400)])
    assert scipy_stats.ks_2samp(mine, ref_n).pvalue > 1e-3
    if n < S:  # power: batches of all S slots are another law, and the test sees it
        ref_s = np.array([niw_estimate(post, rng, S, niw.NUM_BATCHES) for _ in range(200)])
        assert scipy_stats.ks_2samp(mine, ref_s).pvalue < 1e-6


def test_reference_feeding_state_counts_from_one():
    agent = make_pg_agent(1, 2, natural=True, num_slots=4, estimator=_StubEstimator())
    hyper = _hyper()
    s = agent.init(hyper, jax.random.key(0))
    s = agent.update(s, hyper, 0, 0, 1.0, 1.0, jax.random.key(1))  # greedy (tie -> index 0)
    assert int(s.t) == 1 and bool(s.fed) and s.slot_n.tolist() == [1, 0, 0, 0]
    s = agent.update(s, hyper, 0, 1, 1.0, 1.0, jax.random.key(2))  # theta[0,0] > theta[0,1] now
    assert int(s.t) == 2 and not bool(s.fed) and int(s.slot_ptr) == 1


def test_unknown_feeding_raises():
    with pytest.raises(ValueError, match="feeding"):
        make_pg_agent(2, 3, natural=True, feeding="gage", estimator=oracle_estimator(0.1))


# ---------------------------------------------------------------- robustness


@pytest.mark.parametrize("natural", [True, False])
def test_pg_theta_step_all_minus_inf_row(natural):
    from rpg_jax.agents.npg import pg_theta_step

    q = jnp.asarray([0.3, -0.2, 0.1], F64)
    dead = jnp.full((3,), -jnp.inf, F64)
    out = pg_theta_step(dead, q, jnp.asarray(0.5, F64), natural)
    assert not np.any(np.isnan(np.asarray(out)))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(dead))
    # a partly -inf row keeps its -inf entries and steps the others as the closed form says
    part = jnp.asarray([0.2, -jnp.inf, -0.4], F64)
    got = np.asarray(pg_theta_step(part, q, jnp.asarray(0.5, F64), natural))
    pi = _softmax(np.array([0.2, -0.4]))
    qq = np.array([0.3, 0.1])
    adv = qq - pi @ qq
    expect = np.array([0.2, -0.4]) + 0.5 * (adv if natural else pi * adv)
    assert got[1] == -np.inf
    np.testing.assert_allclose(got[[0, 2]], expect, rtol=1e-14)


def test_make_agent_checks_hyper_parameters_in_their_dtype():
    from rpg_jax.agents.registry import make_agent

    with pytest.raises(ValueError, match="lr must be finite and > 0 in float32"):
        make_agent("npg-niw", 4, 6, {"lr": 1e39, "age_bound": 60})
    with pytest.raises(ValueError, match="lr must be finite and > 0 in float32"):
        make_agent("spg-niw", 4, 6, {"lr": 1e-50, "age_bound": 60})
    with pytest.raises(ValueError, match="c1 must be finite and > 0 in float32"):
        make_agent("cucb-tuned", 4, 6, {"c1": 1e39, "c2": 0.0})
    _, hyper, used = make_agent("npg-niw", 4, 6, {"lr": 1e39, "age_bound": 60}, dtype=F64)
    assert float(hyper.lr) == 1e39 and used["lr"] == 1e39  # representable in float64
    _, hyper, used = make_agent("npg-niw", 4, 6, {"lr": 0.1, "age_bound": 60})
    assert hyper.lr.dtype == jnp.float32 and used["lr"] == 0.1
    with pytest.raises(ValueError, match="dtype"):
        make_agent("npg-niw", 4, 6, {"lr": 0.1, "age_bound": 60}, dtype=jnp.int32)


def test_chex_shape_asserts_catch_mismatched_state():
    """A state of the wrong size is refused at trace time (chex), not silently clamped."""
    agent = make_pg_agent(2, 3, natural=True, num_slots=4, estimator=oracle_estimator(0.1))
    other = make_pg_agent(2, 5, natural=True, num_slots=4, estimator=oracle_estimator(0.1))
    hyper = _hyper()
    s = other.init(hyper, jax.random.key(0))
    with pytest.raises(AssertionError):
        agent.act(s, hyper, 0, jax.random.key(1))
    with pytest.raises(AssertionError):
        agent.update(s, hyper, 0, 1, 1.0, 1.0, jax.random.key(1))
