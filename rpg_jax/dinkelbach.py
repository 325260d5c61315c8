"""Exact and approximate Dinkelbach iteration on a contextual continuous-time bandit.

Exact iteration (Dinkelbach, Management Science 13(7), 1967): ``rho_{k+1} = g(rho_k)`` with
``g(rho) = rho(u_rho)`` the rate of the greedy policy for ``rho`` (``rpg_jax.rates``).
Approximate iteration (paper, section "Approximate Dinkelbach iteration"): each ``rho_{k+1}`` is any
point of the band ``[g(rho_k) / (1 + gamma), (1 + gamma) g(rho_k)]``; a *rule* picks the point.

Bound (proofs/approximate_dinkelbach.md, checked by tests/theory/test_theory_dinkelbach.py): with
non-negative mean rewards and ``rho_star > 0``, for ``k >= 1``
``rho_k <= (1 + gamma) rho_star`` and
``liminf rho_k >= (1 - R gamma / (1 + gamma)) rho_star``, where ``R = D_max / D_min`` is the
spread of the expected cycle time ``D(u) = sum_x p(x) dbar(x, u(x))`` over deterministic policies;
``band_constants`` also returns a sharper instance-local constant.

Everything is NumPy float64: these are exact-expectation computations on the mean table.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rpg_jax.rates import (
    check_instance,
    greedy_policy,
    policy_rate,
    relative_values,
    rho_star_dinkelbach,
)

__all__ = [
    "RULES",
    "DinkelbachTrajectory",
    "BandConstants",
    "exact_dinkelbach",
    "approximate_dinkelbach",
    "band_constants",
    "band_lower",
    "cycle_time",
    "greedy_durations",
    "breakpoints",
    "greedy_policies_all",
    "num_greedy_policies",
    "tight_instance",
]

RULES = ("random", "low", "high", "adversarial")


class DinkelbachTrajectory(NamedTuple):
    """A (possibly approximate) Dinkelbach trajectory of ``num_steps`` steps.

    Attributes:
      rho: ``(num_steps + 1,)`` float64, ``rho_0 .. rho_n`` (abstract reward per time unit).
      g: ``(num_steps,)`` float64, greedy rates ``g(rho_0) .. g(rho_{n-1})``.
      policies: ``(num_steps, C)`` int64, greedy policies ``u_{rho_0} .. u_{rho_{n-1}}``.
    """

    rho: np.ndarray
    g: np.ndarray
    policies: np.ndarray


class BandConstants(NamedTuple):
    """Constants of the approximate-Dinkelbach bound for one instance and one ``gamma``.

    Attributes (all float):
      rho_star: optimal rate.
      gamma: band half-width parameter.
      D_min, D_max: smallest / largest expected cycle time ``D(u)`` over deterministic policies.
      R: ``D_max / D_min`` (global constant).
      R_local: sharper constant ``max(D_lo(rho*) / D_lo(U), D_hi(a) / D_hi(rho*))`` with
        ``U = (1 + gamma) rho*``, ``a = min(0, lower)``; ``D_lo`` / ``D_hi`` are the smallest /
        largest cycle time among greedy policies (all tie-breaks) at a given rate.
      upper: ``(1 + gamma) rho_star``.
      lower: ``(1 - R gamma / (1 + gamma)) rho_star``.
      lower_local: ``(1 - R_local gamma / (1 + gamma)) rho_star`` (``>= lower``).
    """

    rho_star: float
    gamma: float
    D_min: float
    D_max: float
    R: float
    R_local: float
    upper: float
    lower: float
    lower_local: float


def _check_gamma(gamma: float) -> float:
    gamma = float(gamma)
    if not np.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be finite and >= 0, got {gamma}")
    return gamma


def _check_nonneg_rewards(rbar: np.ndarray) -> None:
    if np.any(rbar < 0):
        bad = np.argwhere(rbar < 0)[0]
        raise ValueError(
            f"the multiplicative band needs non-negative mean rewards: "
            f"rbar{tuple(bad.tolist())} = {rbar[tuple(bad)]}"
        )


def cycle_time(u: np.ndarray, p: np.ndarray, dbar: np.ndarray) -> float:
    """Expected cycle time ``D(u) = sum_x p(x) dbar(x, u(x))`` (time units), ``u`` int ``(C,)``."""
    return float(np.dot(p, dbar[np.arange(dbar.shape[0]), u]))


def greedy_durations(
    rho: float, p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray, rtol: float = 1e-12
) -> tuple[float, float]:
    """Smallest and largest cycle time among all greedy policies at ``rho`` (every tie-break).

    These are ``-F'_+(rho)`` and ``-F'_-(rho)``, the one-sided derivatives of the convex function
    ``F`` (proofs/approximate_dinkelbach.md, Lemma 1). Actions within ``rtol * scale`` of the
    maximum of ``q_rho(x, .)`` count as tied.

    Returns:
      ``(D_lo, D_hi)`` floats, time units.
    """
    q = relative_values(rho, rbar, dbar)
    qmax = q.max(axis=1, keepdims=True)
    scale = np.abs(rbar).max() + abs(rho) * dbar.max() + 1.0
    tied = q >= qmax - rtol * scale
    d_lo = np.where(tied, dbar, np.inf).min(axis=1)
    d_hi = np.where(tied, dbar, -np.inf).max(axis=1)
    return float(np.dot(p, d_lo)), float(np.dot(p, d_hi))


def band_lower(rho_star: float, R: float, gamma: float, tighten: float = 1.0) -> float:
    """Lower end ``(1 - tighten * R gamma / (1 + gamma)) rho_star`` of the band.

    ``tighten < 1`` gives a deliberately *wrong* (too tight) bound, used to show that the tightness
    test can fail (tests/theory/test_theory_dinkelbach.py, ``RPG_TIGHTEN``).
    """
    return (1.0 - tighten * R * gamma / (1.0 + gamma)) * rho_star


def band_constants(
    p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray, gamma: float
) -> BandConstants:
    """Compute ``R``, the local constant and the band ends for an instance.

    Args:
      p: ``(C,)`` context probabilities.
      rbar, dbar: ``(C, A)`` mean rewards (>= 0) and durations (> 0).
      gamma: tolerance, ``>= 0``.

    Returns:
      ``BandConstants`` (see its docstring). Source: proofs/approximate_dinkelbach.md, Theorem 1.

    Raises:
      ValueError: bad instance, negative reward, ``rho_star <= 0`` or bad ``gamma``.
    """
    p, rbar, dbar = check_instance(p, rbar, dbar)
    gamma = _check_gamma(gamma)
    _check_nonneg_rewards(rbar)
    rho_star = rho_star_dinkelbach(p, rbar, dbar)[0]
    if rho_star <= 0:
        raise ValueError(f"the band needs rho_star > 0, got {rho_star}")
    d_min = float(np.dot(p, dbar.min(axis=1)))
    d_max = float(np.dot(p, dbar.max(axis=1)))
    R = d_max / d_min
    upper = (1.0 + gamma) * rho_star
    lower = band_lower(rho_star, R, gamma)
    d_lo_star, d_hi_star = greedy_durations(rho_star, p, rbar, dbar)
    d_lo_upper, _ = greedy_durations(upper, p, rbar, dbar)
    _, d_hi_a = greedy_durations(min(0.0, lower), p, rbar, dbar)
    R_local = max(d_lo_star / d_lo_upper, d_hi_a / d_hi_star, 1.0)
    R_local = min(R_local, R)  # equal in exact arithmetic when R_local would exceed R
    return BandConstants(
        rho_star=rho_star,
        gamma=gamma,
        D_min=d_min,
        D_max=d_max,
        R=R,
        R_local=R_local,
        upper=upper,
        lower=lower,
        lower_local=band_lower(rho_star, R_local, gamma),
    )


def breakpoints(rbar: np.ndarray, dbar: np.ndarray) -> np.ndarray:
    """Sorted rates where two actions of one context have equal relative value, float64 ``(M,)``.

    Between consecutive breakpoints the greedy policy ``u_rho`` is constant.
    """
    C, A = rbar.shape
    out = []
    for x in range(C):
        i, j = np.triu_indices(A, k=1)
        dd = dbar[x, i] - dbar[x, j]
        ok = dd != 0
        out.append((rbar[x, i][ok] - rbar[x, j][ok]) / dd[ok])
    pts = np.unique(np.concatenate(out)) if out else np.zeros(0)
    return pts[np.isfinite(pts)]


def greedy_policies_all(rbar: np.ndarray, dbar: np.ndarray) -> np.ndarray:
    """All distinct greedy policies ``{u_rho : rho real}`` (lowest-index ties), int64 ``(N, C)``."""
    rbar = np.asarray(rbar, np.float64)
    dbar = np.asarray(dbar, np.float64)
    pts = breakpoints(rbar, dbar)
    if pts.size == 0:
        probes = np.array([0.0])
    else:
        mids = 0.5 * (pts[1:] + pts[:-1])
        span = 1.0 + pts[-1] - pts[0]
        probes = np.concatenate([[pts[0] - span], pts, mids, [pts[-1] + span]])
    pols = np.stack([greedy_policy(r, rbar, dbar) for r in probes])
    return np.unique(pols, axis=0)


def num_greedy_policies(rbar: np.ndarray, dbar: np.ndarray) -> int:
    """Number ``N`` of distinct greedy policies (exact Dinkelbach reaches rho_star in N steps)."""
    return int(greedy_policies_all(rbar, dbar).shape[0])


def exact_dinkelbach(
    p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray, rho0: float = 0.0, num_steps: int = 50
) -> DinkelbachTrajectory:
    """Exact Dinkelbach iteration ``rho_{k+1} = g(rho_k)`` for ``num_steps`` steps (no early stop).

    Source: Dinkelbach (1967); proofs/approximate_dinkelbach.md, Theorem 2 (monotone from k = 1,
    equal to rho_star from step ``num_greedy_policies`` on).

    Returns:
      ``DinkelbachTrajectory`` with ``rho`` of shape ``(num_steps + 1,)``.

    Raises:
      ValueError: bad instance, non-finite ``rho0`` or ``num_steps < 1``.
    """
    return approximate_dinkelbach(p, rbar, dbar, 0.0, "low", num_steps, rho0=rho0, _allow_neg=True)


def _adversarial_next(lo: float, hi: float, gamma: float, p, rbar, dbar) -> float:
    """Point ``c`` of ``[lo, hi]`` minimising ``min(c, g(c) / (1 + gamma))`` (two-step lookahead).

    ``g`` is piecewise constant between breakpoints, so the candidates are the ends, the breakpoints
    inside and the midpoints between consecutive candidates; ties go to the smallest ``c``.
    """
    pts = breakpoints(rbar, dbar)
    inside = pts[(pts > lo) & (pts < hi)]
    cand = np.unique(np.concatenate([[lo, hi], inside]))
    cand = np.unique(np.concatenate([cand, 0.5 * (cand[1:] + cand[:-1])]))
    scores = [
        min(c, policy_rate(greedy_policy(c, rbar, dbar), p, rbar, dbar) / (1.0 + gamma))
        for c in cand
    ]
    return float(cand[int(np.argmin(scores))])


def approximate_dinkelbach(
    p: np.ndarray,
    rbar: np.ndarray,
    dbar: np.ndarray,
    gamma: float,
    rule: str,
    num_steps: int,
    rho0: float = 0.0,
    seed: int = 0,
    _allow_neg: bool = False,
) -> DinkelbachTrajectory:
    """Approximate Dinkelbach: ``rho_{k+1}`` in ``[g(rho_k)/(1+gamma), (1+gamma) g(rho_k)]``.

    Rules: ``"random"`` uniform in the band (NumPy ``default_rng(seed)``); ``"low"`` the lower end;
    ``"high"`` the upper end; ``"adversarial"`` the point of the band that minimises
    ``min(rho_{k+1}, g(rho_{k+1}) / (1 + gamma))`` (pushes toward the lower bound; attains it on
    ``tight_instance``). ``gamma = 0`` is the exact iteration for every rule.

    Args:
      p, rbar, dbar: instance (``(C,)``, ``(C, A)``, ``(C, A)``), rewards >= 0, durations > 0.
      gamma: tolerance >= 0. rule: one of ``RULES``. num_steps: >= 1. rho0: start (any real).
      seed: seed of the random rule.

    Returns:
      ``DinkelbachTrajectory`` (``rho`` shape ``(num_steps + 1,)``).

    Raises:
      ValueError: bad instance, negative reward, unknown rule, ``gamma < 0``, ``num_steps < 1``.
    """
    p, rbar, dbar = check_instance(p, rbar, dbar)
    gamma = _check_gamma(gamma)
    if not _allow_neg:
        _check_nonneg_rewards(rbar)
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; valid rules: {', '.join(RULES)}")
    if int(num_steps) < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if not np.isfinite(rho0):
        raise ValueError(f"rho0 must be finite, got {rho0}")
    num_steps = int(num_steps)
    rng = np.random.default_rng(seed)
    C = rbar.shape[0]
    rho = np.empty(num_steps + 1)
    g = np.empty(num_steps)
    pols = np.empty((num_steps, C), dtype=np.int64)
    rho[0] = float(rho0)
    for k in range(num_steps):
        u = greedy_policy(rho[k], rbar, dbar)
        gk = policy_rate(u, p, rbar, dbar)
        pols[k], g[k] = u, gk
        lo, hi = sorted((gk / (1.0 + gamma), (1.0 + gamma) * gk))
        if gamma == 0.0 or rule == "low":
            nxt = lo
        elif rule == "high":
            nxt = hi
        elif rule == "random":
            nxt = float(rng.uniform(lo, hi))
        else:
            nxt = _adversarial_next(lo, hi, gamma, p, rbar, dbar)
        rho[k + 1] = nxt
    return DinkelbachTrajectory(rho=rho, g=g, policies=pols)


def tight_instance(
    R: float, gamma: float, eps: float = 1e-4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One context, two actions: the lower bound is attained up to ``eps / (1 + gamma)``.

    Action 1 is optimal with ``dbar = R``, ``rbar = R`` (``rho_star = 1``); action 0 has
    ``dbar = 1`` and ``rbar = 1 + gamma - R gamma + eps``, so that at ``rho = (1 + gamma) rho_star``
    the short action is greedy with rate just above ``(1 + gamma) * lower``. From ``rho_0 = 1`` the
    adversarial rule alternates between the upper end and ``lower + eps / (1 + gamma)``
    (proofs/approximate_dinkelbach.md, Proposition 3).

    Returns:
      ``(p, rbar, dbar)`` with shapes ``(1,)``, ``(1, 2)``, ``(1, 2)``, float64.

    Raises:
      ValueError: unless ``R > 1``, ``gamma > 0``, ``0 < eps < gamma (R - 1)`` and the short
        action's reward is positive (``R gamma < 1 + gamma + eps``).
    """
    R, gamma, eps = float(R), float(gamma), float(eps)
    if not R > 1:
        raise ValueError(f"R must be > 1, got {R}")
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    if not 0 < eps < gamma * (R - 1):
        raise ValueError(f"eps must lie in (0, gamma (R - 1)) = (0, {gamma * (R - 1)}), got {eps}")
    r0 = 1.0 + gamma - R * gamma + eps
    if r0 <= 0:
        raise ValueError(f"R gamma = {R * gamma} too large: the short action's reward {r0} <= 0")
    return np.array([1.0]), np.array([[r0, R]]), np.array([[1.0, R]])
