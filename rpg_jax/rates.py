"""Reward rates of stationary policies in a contextual continuous-time bandit.

All functions here work on the exact mean table of an instance and are plain NumPy in float64:
they are used to build instances and to score agents (``rho_star``), never inside a jitted loop.

Notation (DESIGN.md section 2): contexts ``x = 0..C-1`` with probabilities ``p`` (shape ``(C,)``),
actions ``a = 0..A-1``, mean reward ``rbar`` and mean duration ``dbar`` (shape ``(C, A)``, duration
strictly positive). A deterministic stationary policy ``u`` is an int array of shape ``(C,)``.

- ``rho(u) = sum_x p(x) rbar(x, u(x)) / sum_x p(x) dbar(x, u(x))``
- ``q_rho(x, a) = rbar(x, a) - rho * dbar(x, a)``, greedy policy ``u_rho(x) = argmax_a q_rho(x, a)``
- ``g(rho) = rho(u_rho)``, ``F(rho) = sum_x p(x) max_a q_rho(x, a)``; F is convex, strictly
  decreasing, and ``F(rho_star) = 0`` (Dinkelbach, Management Science 13(7), 1967).
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = [
    "check_instance",
    "relative_values",
    "greedy_policy",
    "policy_rate",
    "greedy_rate",
    "F",
    "rho_star_dinkelbach",
    "rho_star_bisection",
    "rho_star_bruteforce",
    "rho_star",
    "gaps",
]

# Ties in argmax are broken toward the lowest index, as np.argmax does.


def check_instance(p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray):
    """Validate and convert an instance's mean table to float64 arrays.

    Args:
      p: context probabilities, shape ``(C,)``, non-negative, summing to 1 (to 1e-9).
      rbar: mean rewards, shape ``(C, A)``, finite.
      dbar: mean durations (time units), shape ``(C, A)``, finite and > 0.

    Returns:
      ``(p, rbar, dbar)`` as float64 NumPy arrays.

    Raises:
      ValueError: naming the offending value on wrong shapes, NaN/inf, non-positive durations,
        negative probabilities or probabilities that do not sum to 1.
    """
    p = np.asarray(p, dtype=np.float64)
    rbar = np.asarray(rbar, dtype=np.float64)
    dbar = np.asarray(dbar, dtype=np.float64)
    if rbar.ndim != 2 or rbar.shape[0] < 1 or rbar.shape[1] < 1:
        raise ValueError(f"rbar must have shape (C >= 1, A >= 1), got {rbar.shape}")
    if dbar.shape != rbar.shape:
        raise ValueError(f"dbar shape {dbar.shape} differs from rbar shape {rbar.shape}")
    if p.shape != (rbar.shape[0],):
        raise ValueError(f"p must have shape ({rbar.shape[0]},), got {p.shape}")
    if not np.all(np.isfinite(rbar)):
        bad = np.argwhere(~np.isfinite(rbar))[0]
        raise ValueError(f"rbar{tuple(bad.tolist())} = {rbar[tuple(bad)]} is not finite")
    if not np.all(np.isfinite(dbar)) or np.any(dbar <= 0):
        bad = np.argwhere(~(np.isfinite(dbar) & (dbar > 0)))[0]
        raise ValueError(
            f"durations must be finite and > 0: dbar{tuple(bad.tolist())} = {dbar[tuple(bad)]}"
        )
    if not np.all(np.isfinite(p)) or np.any(p < 0) or abs(p.sum() - 1.0) > 1e-9:
        raise ValueError(f"p must be a probability vector, got {p.tolist()}")
    return p, rbar, dbar


def relative_values(rho: float, rbar: np.ndarray, dbar: np.ndarray) -> np.ndarray:
    """``q_rho(x, a) = rbar(x, a) - rho * dbar(x, a)``, shape ``(C, A)`` float64."""
    return np.asarray(rbar, np.float64) - float(rho) * np.asarray(dbar, np.float64)


def greedy_policy(rho: float, rbar: np.ndarray, dbar: np.ndarray) -> np.ndarray:
    """Greedy policy ``u_rho(x) = argmax_a q_rho(x, a)``, int64 ``(C,)``; lowest index on ties."""
    return np.argmax(relative_values(rho, rbar, dbar), axis=1)


def policy_rate(u: np.ndarray, p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray) -> float:
    """Reward rate ``rho(u)`` of the deterministic policy ``u`` (int array ``(C,)``).

    Returns:
      ``sum_x p(x) rbar(x, u(x)) / sum_x p(x) dbar(x, u(x))`` (reward per time unit) as a float;
      ``+-inf`` (no warning) when the ratio overflows float64, e.g. ``rbar = 1e308`` over
      ``dbar = 1e-10``. The callers that return rho_star refuse a non-finite result.
    """
    rows = np.arange(rbar.shape[0])
    num, den = np.dot(p, rbar[rows, u]), np.dot(p, dbar[rows, u])
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return float(num / den)


def _check_finite_rate(rho: float, u: np.ndarray, p, rbar, dbar) -> float:
    """``rho`` if finite, else ValueError naming the policy ``u`` and its two sums."""
    if not np.isfinite(rho):
        rows = np.arange(rbar.shape[0])
        num, den = float(np.dot(p, rbar[rows, u])), float(np.dot(p, dbar[rows, u]))
        raise ValueError(
            f"rho_star lies outside the float64 range: the rate of policy "
            f"{np.asarray(u).tolist()} is {num!r} / {den!r} = {rho!r}"
        )
    return rho


def greedy_rate(rho: float, p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray) -> float:
    """``g(rho) = rho(u_rho)``: the rate of the greedy policy for ``rho``."""
    return policy_rate(greedy_policy(rho, rbar, dbar), p, rbar, dbar)


def F(rho: float, p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray) -> float:
    """``F(rho) = sum_x p(x) max_a q_rho(x, a)``; convex, strictly decreasing, zero at rho_star."""
    return float(np.dot(p, relative_values(rho, rbar, dbar).max(axis=1)))


def rho_star_dinkelbach(
    p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray, rho0: float = 0.0, max_iter: int = 10_000
) -> tuple[float, np.ndarray, int]:
    """Optimal rate by exact Dinkelbach iteration ``rho_{k+1} = g(rho_k)``.

    Stops when the greedy policy repeats (then ``F(rho_k) = 0`` exactly in exact arithmetic).
    From ``rho0 <= rho_star`` the sequence is non-decreasing after step one and visits each greedy
    policy at most once, so it terminates (Dinkelbach 1967; proofs/approximate_dinkelbach.md).

    Returns:
      ``(rho_star, u_star, iterations)``: float, int64 ``(C,)``, int.

    Raises:
      ValueError: bad instance (see ``check_instance``), a final rate that is not finite in
        float64 (rho_star outside the float64 range), or no convergence within ``max_iter``.
    """
    p, rbar, dbar = check_instance(p, rbar, dbar)
    rho = float(rho0)
    u = greedy_policy(rho, rbar, dbar)
    for k in range(1, max_iter + 1):
        rho = policy_rate(u, p, rbar, dbar)
        u_next = greedy_policy(rho, rbar, dbar)
        if np.array_equal(u_next, u) or policy_rate(u_next, p, rbar, dbar) <= rho:
            return _check_finite_rate(rho, u, p, rbar, dbar), u, k
        u = u_next
    raise ValueError(f"Dinkelbach did not converge in max_iter={max_iter} steps")


def rho_star_bisection(
    p: np.ndarray,
    rbar: np.ndarray,
    dbar: np.ndarray,
    tol: float = 1e-13,
    max_iter: int = 10_000,
) -> float:
    """Optimal rate as the root of ``F`` by bisection (independent check of Dinkelbach).

    The root lies in ``[min rbar/dbar, max rbar/dbar]`` because rho_star is a weighted mean of
    per-action ratios of some policy; a ratio that overflows float64 is replaced by the largest
    finite float, which is right whenever rho_star itself is finite (a ratio of means can be
    when a per-action ratio is not); if rho_star lies outside the float64 range (``F`` has no
    root in ``[-max, max]``) a ValueError is raised. Bisection stops when the bracket
    is narrower than ``tol * max(1, |hi|)`` or when no float lies strictly inside it (so any
    ``tol >= 0``, even 0, terminates: at most ~2,100 halvings span the float64 range).

    Args:
      p, rbar, dbar: the instance (see :func:`check_instance`).
      tol: relative bracket width, finite and >= 0.
      max_iter: iteration cap (int >= 1).

    Returns:
      A float within ``tol * max(1, rho_star)`` (or one float spacing) of rho_star.

    Raises:
      ValueError: bad instance, ``tol`` NaN / infinite / negative, bad ``max_iter``, rho_star
        outside the float64 range, or no convergence within ``max_iter`` halvings.
    """
    p, rbar, dbar = check_instance(p, rbar, dbar)
    try:
        tol_f = float(tol)
    except (TypeError, ValueError):
        tol_f = float("nan")
    if not (np.isfinite(tol_f) and tol_f >= 0.0):
        raise ValueError(f"tol must be finite and >= 0, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int | np.integer) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive int, got {max_iter!r}")
    big = np.finfo(np.float64).max
    with np.errstate(over="ignore"):
        ratios = np.clip(rbar / dbar, -big, big)
    live = p > 0

    def f_value(rho: float) -> float:
        # rho * dbar has one sign for a given rho, so the terms are finite or +-inf of one sign
        with np.errstate(over="ignore", invalid="ignore"):
            best = (rbar[live] - rho * dbar[live]).max(axis=1)
            return float(np.dot(p[live], best))

    def f_positive(rho: float) -> bool:
        return f_value(rho) > 0.0

    for end, pick in ((big, np.argmax), (-big, np.argmin)):
        f_end = f_value(end)
        if (f_end > 0.0) if end > 0.0 else (f_end < 0.0):  # rho_star beyond end: outside float64
            x, a = np.unravel_index(pick(ratios), ratios.shape)
            raise ValueError(
                f"rho_star lies outside the float64 range: F({end:g}) = {f_end:g}; e.g. "
                f"rbar[{x}, {a}] / dbar[{x}, {a}] = {rbar[x, a]:g} / {dbar[x, a]:g}"
            )
    lo, hi = float(ratios.min()), float(ratios.max())
    for _ in range(int(max_iter)):
        mid = 0.5 * lo + 0.5 * hi
        if hi - lo <= tol_f * max(1.0, abs(hi)) or not lo < mid < hi:
            return mid
        if f_positive(mid):
            lo = mid
        else:
            hi = mid
    raise ValueError(f"bisection did not converge in max_iter={max_iter} steps (tol={tol_f})")


def rho_star_bruteforce(
    p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray, max_policies: int = 2_000_000
) -> tuple[float, np.ndarray]:
    """Optimal rate by enumerating all ``A**C`` deterministic policies (small instances only).

    Raises:
      ValueError: if ``A**C > max_policies``, or the best rate is not finite in float64
        (rho_star outside the float64 range).
    """
    p, rbar, dbar = check_instance(p, rbar, dbar)
    C, A = rbar.shape
    if A**C > max_policies:
        raise ValueError(f"A**C = {A}**{C} policies exceeds max_policies={max_policies}")
    best, best_u = -np.inf, None
    for u in itertools.product(range(A), repeat=C):
        val = policy_rate(np.asarray(u), p, rbar, dbar)
        if val > best:
            best, best_u = val, np.asarray(u)
    if best_u is None:  # every policy's rate is -inf or NaN: take the first, to name it
        best_u = np.zeros(C, np.int64)
        best = policy_rate(best_u, p, rbar, dbar)
    return _check_finite_rate(float(best), best_u, p, rbar, dbar), best_u


def rho_star(p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray) -> float:
    """Optimal reward rate ``rho_star = max_u rho(u)`` over deterministic stationary policies.

    Args:
      p: ``(C,)`` context probabilities; rbar: ``(C, A)`` mean rewards; dbar: ``(C, A)`` mean
        durations (time units, > 0).

    Returns:
      ``rho_star`` as a Python float (reward per time unit), by exact Dinkelbach iteration
      (:func:`rho_star_dinkelbach`; Dinkelbach, Management Science 13(7), 1967).

    Raises:
      ValueError: bad instance (see :func:`check_instance`) or a rate outside the float64 range
        (see :func:`rho_star_dinkelbach`).
    """
    return rho_star_dinkelbach(p, rbar, dbar)[0]


def gaps(p: np.ndarray, rbar: np.ndarray, dbar: np.ndarray) -> np.ndarray:
    """``GAP(x, a) = max_b q_{rho*}(x, b) - q_{rho*}(x, a) >= 0``, float64 ``(C, A)``."""
    q = relative_values(rho_star(p, rbar, dbar), rbar, dbar)
    return q.max(axis=1, keepdims=True) - q
