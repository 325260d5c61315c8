"""Property tests of proofs/approximate_dinkelbach.md (Lemma 1, Lemma 2, Theorems 1-2, Prop. 3).

Random instances: up to 6 contexts, 8 actions, rewards >= 0, durations > 0; gamma in [0, 0.5].
``RPG_TIGHTEN=0.95 pytest tests -k theory_tightness`` runs the tightness test against a bound
tightened by 5 % and must fail (the bound is attained, so it cannot be improved by 5 %).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rpg_jax.dinkelbach import (
    RULES,
    approximate_dinkelbach,
    band_constants,
    band_lower,
    cycle_time,
    exact_dinkelbach,
    greedy_policies_all,
    num_greedy_policies,
    tight_instance,
)
from rpg_jax.rates import F, greedy_policy, greedy_rate, policy_rate

# RPG_THEORY_EXAMPLES=1000 for a long hunt for counterexamples
SETTINGS = settings(max_examples=int(os.environ.get("RPG_THEORY_EXAMPLES", "40")), deadline=None)
TOL = 1e-11


@st.composite
def instances(draw, max_contexts: int = 6, max_actions: int = 8):
    """``(p, rbar, dbar)`` with rbar >= 0, dbar > 0, and some positive reward."""
    C = draw(st.integers(1, max_contexts))
    A = draw(st.integers(2, max_actions))
    fl: dict[str, Any] = dict(allow_nan=False, allow_infinity=False, allow_subnormal=False)
    # values rounded to 1e-3: distinct entries differ by >= 1e-3, so float rounding cannot flip
    # a comparison between parallel relative-value lines (exact ties stay possible and are tested)
    w = draw(arrays(np.float64, C, elements=st.floats(0.05, 1.0, **fl)))
    rbar = np.round(draw(arrays(np.float64, (C, A), elements=st.floats(0.0, 5.0, **fl))), 3)
    dbar = np.round(draw(arrays(np.float64, (C, A), elements=st.floats(0.05, 5.0, **fl))), 3)
    assume(rbar.max() > 1e-3)
    return w / w.sum(), rbar, dbar


def brute_force(p, rbar, dbar):
    """``(rho_star, D_min, D_max)`` from every deterministic policy at once (broadcasting)."""
    C, A = rbar.shape
    R = np.zeros((A,) * C)
    D = np.zeros((A,) * C)
    for x in range(C):
        shape = [1] * C
        shape[x] = A
        R = R + (p[x] * rbar[x]).reshape(shape)
        D = D + (p[x] * dbar[x]).reshape(shape)
    return float((R / D).max()), float(D.min()), float(D.max())


@given(inst=instances())
@SETTINGS
def test_theory_constants_match_brute_force(inst):
    """D_min, D_max, R over all policies; 1 <= R_local <= R; lower <= lower_local <= rho_star."""
    p, rbar, dbar = inst
    rho_star, d_min, d_max = brute_force(p, rbar, dbar)
    bc = band_constants(p, rbar, dbar, 0.3)
    assert bc.rho_star == pytest.approx(rho_star, rel=1e-12)
    assert bc.D_min == pytest.approx(d_min, rel=1e-12)
    assert bc.D_max == pytest.approx(d_max, rel=1e-12)
    assert 1.0 <= bc.R_local <= bc.R
    assert bc.lower <= bc.lower_local <= bc.rho_star < bc.upper


@given(inst=instances(), gamma=st.floats(0.0, 0.5), data=st.data())
@SETTINGS
def test_theory_slope_lemma(inst, gamma, data):
    """Lemma 2: g - rho >= (rho* - rho)/R' below rho*; g >= rho* - (R'-1)(rho - rho*) above."""
    p, rbar, dbar = inst
    bc = band_constants(p, rbar, dbar, gamma)
    a = min(0.0, bc.lower)
    for Rp in (bc.R, bc.R_local):
        below = data.draw(st.lists(st.floats(a, bc.rho_star), min_size=1, max_size=5))
        above = data.draw(st.lists(st.floats(bc.rho_star, bc.upper), min_size=1, max_size=5))
        for rho in below:
            g = greedy_rate(rho, p, rbar, dbar)
            assert g - rho >= (bc.rho_star - rho) / Rp - TOL * (1 + bc.rho_star)
        for rho in above:
            g = greedy_rate(rho, p, rbar, dbar)
            assert g >= bc.rho_star - (Rp - 1) * (rho - bc.rho_star) - TOL * (1 + bc.rho_star)


@given(inst=instances(), gamma=st.floats(0.0, 0.5), rule=st.sampled_from(RULES), data=st.data())
@SETTINGS
def test_theory_approximate_dinkelbach_band(inst, gamma, rule, data):
    """Theorem 1 (i)-(iv) for every rule, with both R and R_local, from any start rho_0."""
    p, rbar, dbar = inst
    bc = band_constants(p, rbar, dbar, gamma)
    rho0 = data.draw(st.floats(-2.0, 3.0 * bc.upper + 1.0))
    seed = data.draw(st.integers(0, 2**31 - 1))
    traj = approximate_dinkelbach(p, rbar, dbar, gamma, rule, 60, rho0=rho0, seed=seed)
    rho = traj.rho[1:]  # rho_1 .. rho_n
    slack = TOL * (1 + bc.rho_star)
    # the trajectory is a valid perturbation: every rho_{k+1} in the band around g(rho_k)
    assert np.all(traj.rho[1:] >= traj.g / (1 + gamma) - slack)
    assert np.all(traj.rho[1:] <= traj.g * (1 + gamma) + slack)
    # (i) upper bound and (ii) non-negativity for k >= 1
    assert np.all(rho <= bc.upper + slack)
    assert np.all(rho >= -slack)
    for Rp, lower in ((bc.R, bc.lower), (bc.R_local, bc.lower_local)):
        # (iii) forward invariance of [lower, upper]
        inside = rho >= lower - slack
        if inside.any():
            assert inside[int(np.argmax(inside)) :].all()
        # (iv) geometric approach: rho_k >= lower - c^(k-1) max(0, lower - rho_1)
        c = (1 - 1 / Rp) / (1 + gamma)
        e1 = max(0.0, lower - rho[0])
        envelope = lower - c ** np.arange(rho.size) * e1
        assert np.all(rho >= envelope - slack)


@given(inst=instances(), data=st.data())
@SETTINGS
def test_theory_exact_dinkelbach_finite_and_monotone(inst, data):
    """Theorem 2: gamma = 0 is monotone from k = 1 and equals brute-force rho* from k = N on."""
    p, rbar, dbar = inst
    rho_star, _, _ = brute_force(p, rbar, dbar)
    N = num_greedy_policies(rbar, dbar)
    rho0 = data.draw(st.floats(-2.0, 3.0 * rho_star + 1.0))
    traj = exact_dinkelbach(p, rbar, dbar, rho0=rho0, num_steps=N + 3)
    assert np.all(np.diff(traj.rho[1:]) >= -1e-13 * (1 + rho_star))
    assert np.all(traj.rho[1:] <= rho_star * (1 + 1e-12))
    np.testing.assert_allclose(traj.rho[N:], rho_star, rtol=1e-11)
    # the policies visited before rho* is reached are distinct greedy policies
    reached = int(np.argmax(np.abs(traj.rho - rho_star) <= 1e-11 * rho_star))
    assert reached <= N
    visited = traj.policies[:reached]
    assert np.unique(visited, axis=0).shape[0] == visited.shape[0]
    all_greedy = {tuple(u) for u in greedy_policies_all(rbar, dbar)}
    assert {tuple(u) for u in visited} <= all_greedy
    # approximate iteration with gamma = 0 is the exact one, for every rule
    for rule in RULES:
        other = approximate_dinkelbach(p, rbar, dbar, 0.0, rule, N + 3, rho0=rho0)
        np.testing.assert_array_equal(other.rho, traj.rho)


@given(inst=instances())
@SETTINGS
def test_theory_lemma1_identity(inst):
    """Lemma 1: g(rho) - rho = F(rho) / D(u_rho) and F(rho) >= D(u*) (rho* - rho)."""
    p, rbar, dbar = inst
    bc = band_constants(p, rbar, dbar, 0.0)
    u_star = greedy_policy(bc.rho_star, rbar, dbar)
    assert policy_rate(u_star, p, rbar, dbar) == pytest.approx(bc.rho_star, rel=1e-12)
    for rho in np.linspace(-1.0, 2.0 * bc.rho_star + 1.0, 9):
        u = greedy_policy(rho, rbar, dbar)
        lhs = policy_rate(u, p, rbar, dbar) - rho
        assert lhs == pytest.approx(F(rho, p, rbar, dbar) / cycle_time(u, p, dbar), abs=1e-10)
        d_star = cycle_time(u_star, p, dbar)
        assert F(rho, p, rbar, dbar) >= d_star * (bc.rho_star - rho) - 1e-10


TIGHT_CASES = [(3.0, 0.3), (2.0, 0.5), (1.5, 0.1), (4.0, 0.2)]


def _tight_run(R, gamma, rule):
    p, rbar, dbar = tight_instance(R, gamma, eps=1e-4)
    bc = band_constants(p, rbar, dbar, gamma)
    traj = approximate_dinkelbach(p, rbar, dbar, gamma, rule, 60, rho0=1.0)
    return bc, traj.rho[20:]  # tail: a proxy for liminf / limsup (the orbit is periodic)


@pytest.mark.parametrize(("R", "gamma"), TIGHT_CASES)
def test_theory_tightness(R, gamma):
    """Proposition 3: on tight_instance the bounds hold and are attained (to 1e-3).

    With ``RPG_TIGHTEN=f`` (f < 1) the bounds checked are tightened by the factor f
    (lower: ``1 - f R gamma/(1+gamma)``; upper: ``1 + f gamma``), and this test fails.
    """
    f = float(os.environ.get("RPG_TIGHTEN", "1.0"))
    bc, tail = _tight_run(R, gamma, "adversarial")
    assert bc.R == pytest.approx(R) and bc.R_local == pytest.approx(R)
    liminf = tail.min()
    assert liminf >= band_lower(bc.rho_star, bc.R, gamma, tighten=f) - 1e-12
    assert liminf <= bc.lower + 1e-3
    _, tail_hi = _tight_run(R, gamma, "high")
    limsup = tail_hi.max()
    assert limsup <= (1 + f * gamma) * bc.rho_star + 1e-12
    assert limsup >= bc.upper - 1e-3


@pytest.mark.parametrize(("R", "gamma"), TIGHT_CASES)
def test_theory_tightness_tightened_bound_is_violated(R, gamma):
    """A 5 % tighter lower (or upper) bound is violated on tight_instance: the checks can fail."""
    bc, tail = _tight_run(R, gamma, "adversarial")
    assert tail.min() < band_lower(bc.rho_star, bc.R, gamma, tighten=0.95)
    _, tail_hi = _tight_run(R, gamma, "high")
    assert tail_hi.max() > (1 + 0.95 * gamma) * bc.rho_star


def test_theory_bad_inputs():
    p, rbar, dbar = tight_instance(3.0, 0.3)
    with pytest.raises(ValueError, match="gamma"):
        band_constants(p, rbar, dbar, -0.1)
    with pytest.raises(ValueError, match="rule"):
        approximate_dinkelbach(p, rbar, dbar, 0.1, "sideways", 5)
    with pytest.raises(ValueError, match="non-negative"):
        approximate_dinkelbach(p, -rbar, dbar, 0.1, "low", 5)
    with pytest.raises(ValueError, match="eps"):
        tight_instance(3.0, 0.3, eps=1.0)


@pytest.mark.parametrize(
    ("R", "gamma", "r0", "liminf"),
    [
        (3.0, 0.25, 0.5, 0.4),  # R gamma < 1 + gamma, eps = 0: liminf = L = 1 - R gamma/(1+gamma)
        (3.0, 0.5, 0.0, 0.0),  # R gamma = 1 + gamma (tie at 1 + gamma): liminf = max(L, 0) = 0
        (4.0, 0.5, 0.0, 0.0),  # R gamma > 1 + gamma: L < 0, liminf = 0
    ],
)
def test_theory_tightness_exact_orbits(R, gamma, r0, liminf):
    """Proposition 3 with eps = 0 and the remark for R gamma >= 1 + gamma: the orbit
    1, 1+gamma, g(1+gamma)/(1+gamma), 1+gamma, ... satisfies (B) and reaches the bounds exactly
    (lowest-index ties in greedy_policy)."""
    p, rbar, dbar = np.array([1.0]), np.array([[r0, R]]), np.array([[1.0, R]])
    bc = band_constants(p, rbar, dbar, gamma)
    assert bc.rho_star == pytest.approx(1.0) and bc.R == pytest.approx(R)
    rho = [1.0]
    for k in range(40):
        g = greedy_rate(rho[-1], p, rbar, dbar)
        nxt = (1 + gamma) * g if k % 2 == 0 else g / (1 + gamma)
        assert g / (1 + gamma) - 1e-15 <= nxt <= (1 + gamma) * g + 1e-15  # condition (B)
        rho.append(nxt)
    tail = np.array(rho[10:])
    assert tail.max() == pytest.approx(1 + gamma, abs=1e-15)
    assert tail.min() == pytest.approx(liminf, abs=1e-15)
    assert tail.min() == pytest.approx(max(0.0, 1 - R * gamma / (1 + gamma)), abs=1e-15)
