"""Property tests of proofs/npg_decoupling.md (Lemma 1, Theorems 1-3).

Random instances: up to 6 contexts, 8 actions, positive durations; chi in {0, 0.3, 0.6}.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rpg_jax.dinkelbach import breakpoints
from rpg_jax.npg_theory import (
    boltzmann_logits,
    npg_exact,
    optimal_action_probability,
    settle_index,
    softmax,
    step_sizes,
)
from rpg_jax.rates import gaps, relative_values, rho_star_dinkelbach

SETTINGS = settings(max_examples=int(os.environ.get("RPG_THEORY_EXAMPLES", "30")), deadline=None)
CHIS = (0.0, 0.3, 0.6)


@st.composite
def instances(draw, max_contexts: int = 6, max_actions: int = 8):
    """``(p, rbar, dbar)``: rewards in [0, 5], durations in [0.05, 5], both rounded to 1e-3."""
    C = draw(st.integers(1, max_contexts))
    A = draw(st.integers(2, max_actions))
    fl: dict[str, Any] = dict(allow_nan=False, allow_infinity=False, allow_subnormal=False)
    w = draw(arrays(np.float64, C, elements=st.floats(0.05, 1.0, **fl)))
    rbar = np.round(draw(arrays(np.float64, (C, A), elements=st.floats(0.0, 5.0, **fl))), 3)
    dbar = np.round(draw(arrays(np.float64, (C, A), elements=st.floats(0.05, 5.0, **fl))), 3)
    assume(rbar.max() > 1e-3)
    return w / w.sum(), rbar, dbar


def _centered(z):
    return z - z.mean(axis=-1, keepdims=True)


@given(
    inst=instances(),
    chi=st.sampled_from(CHIS),
    eta0=st.floats(0.05, 3.0),
    rho0=st.floats(-1.0, 3.0),
)
@SETTINGS
def test_theory_npg_logit_identity(inst, chi, eta0, rho0):
    """Theorem 1: theta_k = H_k q_{rhobar_k} + c_k(x) (to 1e-10 relative to the logit scale)."""
    p, rbar, dbar = inst
    traj = npg_exact(p, rbar, dbar, eta0, chi, 150, rho0=rho0)
    assert traj.theta is not None
    eta = step_sizes(eta0, chi, 150)
    np.testing.assert_allclose(traj.H[1:], np.cumsum(eta), rtol=1e-13)
    assert traj.rho_bar[1] == pytest.approx(rho0, abs=1e-14)
    for k in range(1, 151):
        closed = boltzmann_logits(traj.H[k], traj.rho_bar[k], rbar, dbar)
        scale = max(1.0, np.abs(closed).max())
        err = np.abs(_centered(traj.theta[k]) - _centered(closed)).max()
        assert err <= 1e-10 * scale, (k, err, scale)
        # pi_k is the Boltzmann policy of the closed form
        np.testing.assert_allclose(softmax(traj.theta[k]), softmax(closed), atol=1e-10 * scale)
    # rhobar_k is the eta-weighted mean of rho_0 .. rho_{k-1}
    k = 150
    assert traj.rho_bar[k] == pytest.approx(np.dot(eta, traj.rho[:k]) / eta.sum(), rel=1e-12)


@given(inst=instances(), data=st.data())
@SETTINGS
def test_theory_npg_is_natural_gradient(inst, data):
    """Lemma 1: F(theta)^+ grad J(theta) = q - mean_a q per context (Kakade's NPG, softmax)."""
    p, rbar, dbar = inst
    C, A = rbar.shape
    theta = data.draw(arrays(np.float64, (C, A), elements=st.floats(-3.0, 3.0)))
    rho = data.draw(st.floats(0.0, 2.0))
    q = relative_values(rho, rbar, dbar)
    pi = softmax(theta)
    # score vectors: d log pi(a|x) / d theta(x', b) = [x = x'] ([a = b] - pi(b|x))
    fisher = np.zeros((C * A, C * A))
    grad = np.zeros(C * A)
    for x in range(C):
        for a in range(A):
            s = np.zeros((C, A))
            s[x] = -pi[x]
            s[x, a] += 1.0
            s = s.ravel()
            fisher += p[x] * pi[x, a] * np.outer(s, s)
            grad += p[x] * pi[x, a] * q[x, a] * s
    w = (np.linalg.pinv(fisher, rcond=1e-12, hermitian=True) @ grad).reshape(C, A)
    np.testing.assert_allclose(w, _centered(q), atol=1e-7 * (1 + np.abs(q).max()))
    # the agent's pi-centred step gives the same next policy
    step = q - (pi * q).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(softmax(theta + 0.7 * step), softmax(theta + 0.7 * w), atol=1e-7)


def _rho_b(rbar, dbar, rho_star):
    """Largest breakpoint strictly below rho_star (-inf if none)."""
    pts = breakpoints(rbar, dbar)
    pts = pts[pts < rho_star - 1e-12 * max(1.0, rho_star)]
    return float(pts[-1]) if pts.size else -np.inf


@given(inst=instances(), chi=st.sampled_from(CHIS), eta0=st.floats(0.1, 3.0))
@SETTINGS
def test_theory_npg_rate_and_monotone_policy(inst, chi, eta0):
    """Theorems 2-3 from rho_0 = 0: rhobar monotone, error bounds, settling time, pi(a*|x) rate."""
    p, rbar, dbar = inst
    n = 300
    rho_star, u_star, _ = rho_star_dinkelbach(p, rbar, dbar)
    traj = npg_exact(p, rbar, dbar, eta0, chi, n, rho0=0.0)
    assert traj.theta is not None
    H, rb = traj.H, traj.rho_bar
    slack = 1e-12 * (1 + rho_star)
    # rho_k <= rho*, rhobar_k non-decreasing and <= rho*  (k >= 1)
    assert np.all(traj.rho[1:] <= rho_star + slack)
    assert np.all(np.diff(rb[1:]) >= -slack) and np.all(rb[1:] <= rho_star + slack)
    # e_k <= e_1 (H_1 / H_k)^(1/(2 R ln 2))   [the exponent 1/R is false: see the proof, Remark]
    d_min, d_max = float(p @ dbar.min(axis=1)), float(p @ dbar.max(axis=1))
    R = d_max / d_min
    e = rho_star - rb[1:]
    kappa = 1.0 / (2.0 * R * np.log(2.0))
    assert np.all(e <= e[0] * (H[1] / H[1:]) ** kappa + slack)
    # settling time K and its bound k0 = min{k >= 1 : H_k > eta0 (e_1/(rho*-rho_b))^(1/kappa)}
    K = settle_index(traj.rho, rho_star, rtol=1e-12)
    rho_b = _rho_b(rbar, dbar, rho_star)
    thresh = eta0 * (e[0] / (rho_star - rho_b)) ** (1 / kappa) if np.isfinite(rho_b) else 0.0
    k0 = int(np.argmax(H > thresh)) if np.any(H > thresh) else n + 1
    if k0 <= n:
        assert K <= max(k0, 1)
    if K >= n:
        return
    # E_k = H_k (rho* - rhobar_k) = sum_{i<k} eta_i (rho* - rho_i) is constant from K on
    E = H[1:] * (rho_star - rb[1:])
    E_sum = np.cumsum(traj.eta * (rho_star - traj.rho[:-1]))
    np.testing.assert_allclose(E, E_sum, atol=1e-9 * (1 + H[-1] * rho_star))
    E_K = E_sum[K - 1]
    np.testing.assert_allclose(E[K - 1 :], E_K, atol=1e-9 * (1 + H[-1] * rho_star))
    assert E_K >= -slack
    # policy: for contexts with a unique optimal action, pi_k(a*|x) increases from K on,
    # and 1 - pi_k(a*|x) <= (A-1) exp(E_K (dmax(x) - dmin(x)) - H_k Delta(x))
    gap = gaps(p, rbar, dbar)
    A = rbar.shape[1]
    for x in range(rbar.shape[0]):
        others = np.delete(gap[x], u_star[x])
        delta = others.min()
        if delta < 1e-6:
            continue  # tied optimal actions: the theorem assumes a unique a*(x)
        th = traj.theta[K:, x, :]
        z = (th[:, [u_star[x]]] - np.delete(th, u_star[x], axis=1)).min(axis=1)
        assert np.all(np.diff(z) > 0)
        pi_star = optimal_action_probability(traj.theta[K:, x][:, None, :], u_star[[x]])[:, 0]
        assert np.all(np.diff(pi_star) >= -1e-15)
        pis = softmax(th)
        one_minus = np.delete(pis, u_star[x], axis=1).sum(axis=1)
        spread = dbar[x].max() - dbar[x].min()
        bound = (A - 1) * np.exp(E_K * spread - H[K:] * delta)
        assert np.all(one_minus <= bound * (1 + 1e-9) + 1e-300)


def _asymptotic_instance():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(4))
    return p, rng.uniform(0, 3, (4, 6)), rng.uniform(0.1, 5, (4, 6))


@pytest.mark.parametrize("chi", CHIS)
def test_theory_npg_rate_exponent(chi):
    """Theorem 2: |rhobar_k - rho*| = E_K / H_k exactly after K; fitted log-log slope -(1-chi)."""
    p, rbar, dbar = _asymptotic_instance()
    rho_star = rho_star_dinkelbach(p, rbar, dbar)[0]
    n = 20_000
    traj = npg_exact(p, rbar, dbar, 1.0, chi, n, rho0=0.0, store_theta=False)
    K = settle_index(traj.rho, rho_star)
    assert K < 50
    err = np.abs(traj.rho_bar - rho_star)
    E_K = traj.H[K] * (rho_star - traj.rho_bar[K])
    np.testing.assert_allclose(err[K:], E_K / traj.H[K:], rtol=1e-6)
    k = np.arange(n + 1)
    sel = k >= max(10 * K, 100)
    slope = np.polyfit(np.log(k[sel]), np.log(err[sel]), 1)[0]
    assert abs(slope + (1 - chi)) <= 0.1, slope
    # H_k sandwich used in the proof: eta0((k+1)^(1-chi)-1)/(1-chi) <= H_k <= eta0 k^(1-chi)/(1-chi)
    kk = k[1:]
    lo = ((kk + 1) ** (1 - chi) - 1) / (1 - chi)
    hi = kk ** (1 - chi) / (1 - chi)
    assert np.all(traj.H[1:] >= lo * (1 - 1e-12)) and np.all(traj.H[1:] <= hi * (1 + 1e-12))


def test_theory_npg_bad_inputs():
    p, rbar, dbar = _asymptotic_instance()
    with pytest.raises(ValueError, match="chi"):
        npg_exact(p, rbar, dbar, 1.0, 1.0, 10)
    with pytest.raises(ValueError, match="eta0"):
        npg_exact(p, rbar, dbar, 0.0, 0.3, 10)


def _rho_b_above(rbar, dbar, rho_star):
    """Smallest breakpoint strictly above rho_star (+inf if none)."""
    pts = breakpoints(rbar, dbar)
    pts = pts[pts > rho_star + 1e-12 * max(1.0, rho_star)]
    return float(pts[0]) if pts.size else np.inf


def test_theory_npg_rate_from_above_200_instances():
    """Theorem 2' (rho_0 > rho*), on 200 random instances: rho_k <= rho* for k >= 1, E_k
    non-decreasing from E_1 = eta0 (rho* - rho_0) < 0; K <= k_a when E stays negative; from K on
    |rhobar_k - rho*| = |E_K| / H_k exactly (rate O(k^-(1-chi)))."""
    rng = np.random.default_rng(12)
    n, settled, below = 400, 0, 0
    for i in range(200):
        C, A = int(rng.integers(1, 7)), int(rng.integers(2, 9))
        p = rng.dirichlet(np.ones(C))
        rbar = np.round(rng.uniform(0, 5, (C, A)), 3)
        dbar = np.round(rng.uniform(0.05, 5, (C, A)), 3)
        rho_star = rho_star_dinkelbach(p, rbar, dbar)[0]
        rho0 = rho_star + rng.uniform(0.01, 3.0) * (1 + rho_star)
        chi, eta0 = CHIS[i % 3], float(rng.uniform(0.1, 3.0))
        traj = npg_exact(p, rbar, dbar, eta0, chi, n, rho0=rho0, store_theta=False)
        H, rb = traj.H, traj.rho_bar
        slack = 1e-12 * (1 + rho_star) * (1 + H[-1])
        assert np.all(traj.rho[1:] <= rho_star + 1e-12 * (1 + rho_star))
        E = H[1:] * (rho_star - rb[1:])
        assert E[0] == pytest.approx(eta0 * (rho_star - rho0), rel=1e-12)
        assert np.all(np.diff(E) >= -slack)
        K = settle_index(traj.rho, rho_star, rtol=1e-12)
        if E[-1] < 0:  # never crossed below rho*: settled once rhobar < smallest breakpoint above
            below += 1
            gap_b = _rho_b_above(rbar, dbar, rho_star) - rho_star
            k_a = int(np.argmax(H > -E[0] / gap_b)) if np.any(H > -E[0] / gap_b) else n + 1
            assert K <= max(k_a, 1), (i, K, k_a)
        if K <= n:
            settled += 1
            np.testing.assert_allclose(E[K - 1 :], E[K - 1], atol=slack)
            err = np.abs(rb[K:] - rho_star)
            np.testing.assert_allclose(err, abs(E[K - 1]) / H[K:], rtol=1e-9, atol=1e-14)
    assert settled >= 180 and below >= 1, (settled, below)
