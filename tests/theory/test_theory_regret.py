"""Exact check of proofs/regret_identity.md: E[R_n] = E[P_n] for an adaptive randomized policy.

Every arm has a four-point joint law of (reward, duration), so the whole tree of histories of
``n <= 3`` decisions can be enumerated and both expectations computed exactly (no sampling).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rpg_jax.rates import F, gaps, rho_star_dinkelbach

SETTINGS = settings(max_examples=int(os.environ.get("RPG_THEORY_EXAMPLES", "15")), deadline=None)
FL: dict[str, Any] = dict(allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def discrete_bandits(draw):
    """``(p, r_vals, d_vals, w)``: arm (x, a) gives (r_vals[x,a,i], d_vals[x,a,j]) w.p. w[x,a,i,j]

    (i indexes the reward value, j the duration value; rewards and durations are correlated).
    """
    C = draw(st.integers(1, 2))
    A = draw(st.integers(2, 3))
    w_ctx = draw(arrays(np.float64, C, elements=st.floats(0.1, 1.0, **FL)))
    r_vals = draw(arrays(np.float64, (C, A, 2), elements=st.floats(0.0, 3.0, **FL)))
    d_vals = draw(arrays(np.float64, (C, A, 2), elements=st.floats(0.1, 3.0, **FL)))
    w = draw(arrays(np.float64, (C, A, 2, 2), elements=st.floats(0.05, 1.0, **FL)))
    w = w / w.sum(axis=(2, 3), keepdims=True)
    return w_ctx / w_ctx.sum(), r_vals, d_vals, w


def _means(r_vals, d_vals, w):
    rbar = np.einsum("xaij,xai->xa", w, r_vals)
    dbar = np.einsum("xaij,xaj->xa", w, d_vals)
    return rbar, dbar


def _adaptive_policy(history, x, A, beta):
    """Softmax(beta * Qhat(x, .)) with Qhat from the history and rho_hat = sum r / sum delta."""
    sum_r = sum(h[2] for h in history)
    sum_d = sum(h[3] for h in history)
    rho_hat = sum_r / sum_d if sum_d > 0 else 0.0
    qhat = np.ones(A)  # optimistic value for untried arms
    for a in range(A):
        vals = [h[2] - rho_hat * h[3] for h in history if h[0] == x and h[1] == a]
        if vals:
            qhat[a] = np.mean(vals)
    z = np.exp(beta * (qhat - qhat.max()))
    return z / z.sum()


def _expectations(p, r_vals, d_vals, w, n, beta, rho, gap, budget=np.inf):
    """Exact ``(E[rho sum delta - sum r], E[sum GAP])`` over the tree of n-decision histories.

    With a finite ``budget`` the run stops at the bounded stopping time
    ``tau = min(n, first t with sum_{s<=t} delta_s >= budget)``.
    """
    C, A = r_vals.shape[:2]

    def node(history, t):
        if t == n or sum(h[3] for h in history) >= budget:
            return 0.0, 0.0
        exp_regret, exp_pseudo = 0.0, 0.0
        for x in range(C):
            pi = _adaptive_policy(history, x, A, beta)
            for a in range(A):
                for i in range(2):
                    for j in range(2):
                        prob = p[x] * pi[a] * w[x, a, i, j]
                        r, d = r_vals[x, a, i], d_vals[x, a, j]
                        sub_r, sub_p = node((*history, (x, a, r, d)), t + 1)
                        exp_regret += prob * (rho * d - r + sub_r)
                        exp_pseudo += prob * (gap[x, a] + sub_p)
        return exp_regret, exp_pseudo

    return node((), 0)


@given(
    bandit=discrete_bandits(),
    n=st.integers(1, 3),
    beta=st.floats(0.0, 5.0),
    budget=st.one_of(st.just(np.inf), st.floats(0.1, 6.0)),
)
@SETTINGS
def test_theory_regret_identity_exact(bandit, n, beta, budget):
    """E[R_tau] = E[P_tau] exactly for a history-dependent randomized policy (Theorem 1).

    ``tau = n`` (no budget) or the bounded stopping time of a time budget (Corollary 2).
    """
    p, r_vals, d_vals, w = bandit
    rbar, dbar = _means(r_vals, d_vals, w)
    rho_star = rho_star_dinkelbach(p, rbar, dbar)[0]
    gap = gaps(p, rbar, dbar)
    regret, pseudo = _expectations(p, r_vals, d_vals, w, n, beta, rho_star, gap, budget)
    assert regret == pytest.approx(pseudo, abs=1e-10 * (1 + abs(pseudo)))
    assert pseudo >= -1e-12
    # with a wrong rate rho' the two sides differ by exactly -n F(rho') != 0: the check can fail
    rho_w = rho_star * 1.05 + 0.01
    q_w = rbar - rho_w * dbar
    gap_w = q_w.max(axis=1, keepdims=True) - q_w
    regret_w, pseudo_w = _expectations(p, r_vals, d_vals, w, n, beta, rho_w, gap_w)
    f_w = F(rho_w, p, rbar, dbar)
    assert f_w < 0
    assert regret_w - pseudo_w == pytest.approx(-n * f_w, rel=1e-9, abs=1e-12)
    if np.isfinite(budget):  # E[R_tau] - E[P_tau] = -E[tau] F(rho'); E[tau] >= 1
        regret_b, pseudo_b = _expectations(p, r_vals, d_vals, w, n, beta, rho_w, gap_w, budget)
        assert -f_w * (1 - 1e-9) <= regret_b - pseudo_b <= -n * f_w * (1 + 1e-9)
