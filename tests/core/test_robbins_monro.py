"""The Robbins-Monro reward-rate estimator (rpg_core.robbins_monro and its JAX and torch
backends): the NPG theorem's running rate, its closed forms, its error rate on a stationary
stream, the confidence quantile, and the three backends' agreement."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rpg_core import robbins_monro as rm
from rpg_jax import npg_theory
from rpg_jax import robbins_monro as rm_jax
from rpg_llm.loop import robbins_monro as rm_torch


def _numpy_state() -> rm.RMState:
    fields = {k: np.float64(v) for k, v in rm.initial_fields().items()}
    return rm.RMState(**fields, fitted=np.bool_(False), num_fits=np.int32(0))


def _weights(k: int, chi: float) -> np.ndarray:
    """``eta_0 .. eta_k`` = ``(i + 1) ** -chi``."""
    return np.arange(1, k + 2, dtype=np.float64) ** -chi


def test_the_running_rate_is_the_npg_theorems_rhobar():
    """Fed the exact greedy rates of the exact NPG iteration, the estimator's running rate is
    the theorem's ``rhobar_k = sum_{i<k} eta_i rho_i / H_k`` (eta0 cancels)."""
    rbar = np.array([[1.0, 2.0, 0.5], [0.3, 1.5, 1.0]])
    dbar = np.array([[1.0, 3.0, 0.4], [0.5, 2.0, 1.0]])
    chi = 0.6
    traj = npg_theory.npg_exact(np.array([0.5, 0.5]), rbar, dbar, 0.7, chi, 30)
    state = _numpy_state()
    for k in range(1, 30):
        state = rm.update(np, state, np.array([traj.rho[k]]), np.array([1.0]), chi)
        assert state.rho_bar == pytest.approx(traj.rho_bar[k + 1], rel=1e-12, abs=1e-15)


@settings(max_examples=30, deadline=None)
@given(
    rates=st.lists(st.floats(-5, 5), min_size=1, max_size=12),
    chi=st.floats(0.0, 0.95),
    q=st.floats(0.05, 0.99),
)
def test_mean_and_quantile_equal_the_weighted_closed_forms(rates, chi, q):
    """After fitting rates x_1..x_k: ``rho_bar`` is the eta-weighted mean of ``(0, x_1..x_k)``
    and ``rho_hat = max(0, rho_bar + z_q se)``, se the reliability-weighted standard error."""
    x = np.array([0.0, *rates])
    eta = _weights(len(rates), chi)
    mean = (eta * x).sum() / eta.sum()
    h, h2 = eta.sum(), (eta**2).sum()
    var = (eta * (x - mean) ** 2).sum() / (h - h2 / h)
    se = np.sqrt(var * h2) / h
    z = rm.normal_quantile(q)
    state = _numpy_state()
    for r in rates:
        state = rm.update(np, state, np.array([r]), np.array([1.0]), chi, z)
    assert state.rho_bar == pytest.approx(mean, rel=1e-9, abs=1e-12)
    assert state.rho_hat == pytest.approx(max(0.0, mean + z * se), rel=1e-9, abs=1e-12)
    assert int(state.num_fits) == len(rates)


def test_the_pooled_rate_reads_only_usable_slots():
    state = rm.update(
        np, _numpy_state(), np.array([3.0, 1.0, np.nan, 5.0]), np.array([2.0, 2.0, 1.0, 0.0]), 0.0
    )
    # usable slots 0 and 1: rate 4 / 4 = 1, averaged with rho_0 = 0 at equal weights (chi = 0)
    assert state.rho_bar == pytest.approx(0.5)
    empty = rm.update(np, state, np.zeros(4), np.zeros(4), 0.0)
    assert not empty.fitted and int(empty.num_fits) == 1
    assert (empty.rho_bar, empty.rho_hat, empty.weight_sum) == (
        state.rho_bar,
        state.rho_hat,
        state.weight_sum,
    )


def test_jax_torch_and_numpy_backends_agree():
    rng = np.random.default_rng(3)
    s_t = rm_torch.init_state(torch.float64)
    est = rm_torch.RobbinsMonroEstimator(chi=0.7, quantile=0.9)
    s_n = _numpy_state()
    z = rm.normal_quantile(0.9)
    s_j = rm_jax.init_state(jnp.float64)  # tests/conftest.py enables float64
    for k in range(40):
        r, t = rng.normal(1.0, 1.0, 6), rng.exponential(2.0, 6)
        if k % 7 == 3:
            t[:] = 0.0  # nothing usable: no fit
        s_j = rm_jax.refit(s_j, r, t, None, 0.7, 0.9)
        s_t = est.refit(s_t, torch.tensor(r), torch.tensor(t))
        s_n = rm.update(np, s_n, r, t, 0.7, z)
        assert float(s_j.rho_hat) == pytest.approx(float(s_n.rho_hat), rel=1e-12)
        assert float(s_t.rho_hat) == pytest.approx(float(s_n.rho_hat), rel=1e-12)
    assert int(s_j.num_fits) == int(s_t.num_fits) == 34


@pytest.mark.parametrize("chi", [0.6, 0.75])
def test_error_on_a_stationary_stream_shrinks_at_the_theorems_rate(chi):
    """Independent batch rates of mean 1 and sd 1: the Monte-Carlo RMS error of ``rho_bar``
    equals the closed form ``sqrt(mu^2 + s^2 sum_{i>=1} eta_i^2) / H`` (the rho_0 = 0 term and
    the noise), and the closed form's exponent at large k is the theorem's ``-(1 - chi)``."""
    K, trials = 3000, 300
    noise = jax.random.normal(jax.random.PRNGKey(0), (trials, K))

    def run(xs):
        def body(state, x):
            state = rm_jax.refit(state, x[None], jnp.ones(1), None, chi)
            return state, state.rho_bar

        return jax.lax.scan(body, rm_jax.init_state(jnp.float64), xs)[1]

    bars = np.asarray(jax.jit(jax.vmap(run))(1.0 + noise), np.float64)
    mc = np.sqrt(((bars - 1.0) ** 2).mean(0))
    eta = _weights(K, chi)
    h = np.cumsum(eta)[1:]
    closed = np.sqrt(1.0 + np.cumsum(eta[1:] ** 2)) / h
    ks = np.arange(1, K + 1)
    # 300 trials: the MC RMS is within ~8 % (4 standard errors) of the closed form
    sel = ks >= 20
    assert np.max(np.abs(mc[sel] / closed[sel] - 1.0)) < 0.12
    fit_mc = np.polyfit(np.log(ks[sel]), np.log(mc[sel]), 1)[0]
    fit_closed = np.polyfit(np.log(ks[sel]), np.log(closed[sel]), 1)[0]
    assert fit_mc == pytest.approx(fit_closed, abs=0.03)
    big = np.array([1e5, 1e6])
    eta_big = (np.arange(1, 1_000_002, dtype=np.float64)) ** -chi
    hb, h2b = np.cumsum(eta_big), np.cumsum(eta_big**2)
    at = [int(b) for b in big]
    asym = np.log(np.sqrt(h2b[at]) / hb[at])
    slope = (asym[1] - asym[0]) / np.log(10.0)
    assert slope == pytest.approx(-(1.0 - chi), abs=0.02)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chi": 1.0}, "chi must be a number in \\[0, 1\\), got 1.0"),
        ({"chi": -0.1}, "chi must be"),
        ({"quantile": 1.0}, "quantile must be None or a number in \\(0, 1\\), got 1.0"),
        ({"quantile": True}, "quantile must be"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rm_jax.make_rm_estimator(8, **kwargs)
    with pytest.raises(ValueError, match=match):
        rm_torch.RobbinsMonroEstimator(**kwargs)


def test_the_bound_jax_estimator_checks_the_slot_count():
    est = rm_jax.make_rm_estimator(4, chi=0.5)
    state = est.refit(est.init(jnp.float32), jnp.ones(4), jnp.ones(4), jax.random.PRNGKey(0))
    assert float(state.rho_hat) == pytest.approx(2**-0.5 / (1 + 2**-0.5), rel=1e-6)
    with pytest.raises(ValueError, match=r"shape \(4,\), got \(3,\)"):
        est.refit(state, jnp.ones(3), jnp.ones(3), jax.random.PRNGKey(0))
