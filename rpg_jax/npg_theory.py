"""Exact-expectation natural policy gradient (NPG) on relative value, for the theory checks.

This is the bandit NPG agent (``rpg_jax.agents.npg``) with every estimate replaced by its exact
value: every context is updated at every step with the exact relative value ``q_{rho_k}``, and the
rate fed to it is the exact rate of the current greedy policy ("exact greedy estimation"):

    theta_0 = 0,   pi_k(.|x) = softmax(theta_k(x, .)),
    theta_{k+1}(x, .) = theta_k(x, .) + eta_k (q_{rho_k}(x, .) - pi_k(.|x) . q_{rho_k}(x, .)),
    rho_0 given (0 in Algorithm 1 of the paper),  rho_k = rho(argmax_a theta_k(x, a))  for k >= 1,

with steps ``eta_k = eta0 (k + 1) ** -chi``. Decoupling (proofs/npg_decoupling.md, Theorem 1):
``pi_k(a|x) = softmax_a(H_k q_{rhobar_k}(x, a))`` with ``H_k = sum_{i<k} eta_i`` and
``rhobar_k = sum_{i<k} eta_i rho_i / H_k``. Everything is NumPy float64.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rpg_jax.rates import check_instance, policy_rate, relative_values

__all__ = [
    "NPGTrajectory",
    "step_sizes",
    "softmax",
    "boltzmann_logits",
    "npg_exact",
    "settle_index",
    "optimal_action_probability",
]


class NPGTrajectory(NamedTuple):
    """Trajectory of the exact NPG iteration for ``n = num_steps`` steps.

    Attributes:
      theta: ``(n + 1, C, A)`` float64 logits ``theta_0 .. theta_n`` (``None`` if not stored).
      rho: ``(n + 1,)`` float64, ``rho_0 .. rho_n`` (rates fed to the update; reward per time unit).
      rho_bar: ``(n + 1,)`` float64, ``rhobar_k`` (``nan`` at ``k = 0``, where ``H_0 = 0``).
      H: ``(n + 1,)`` float64, ``H_k = sum_{i<k} eta_i`` (``H_0 = 0``).
      eta: ``(n,)`` float64 step sizes ``eta_0 .. eta_{n-1}``.
      greedy: ``(n + 1, C)`` int64 greedy policies ``argmax theta_k`` (lowest index on ties).
      pi_greedy_min: ``(n + 1,)`` float64, ``min_x pi_k(u_k(x) | x)`` for the greedy action u_k.
    """

    theta: np.ndarray | None
    rho: np.ndarray
    rho_bar: np.ndarray
    H: np.ndarray
    eta: np.ndarray
    greedy: np.ndarray
    pi_greedy_min: np.ndarray


def step_sizes(eta0: float, chi: float, num_steps: int) -> np.ndarray:
    """``eta_k = eta0 (k + 1) ** -chi`` for ``k = 0 .. num_steps - 1``, float64 ``(num_steps,)``.

    Raises:
      ValueError: ``eta0 <= 0``, ``chi`` outside ``[0, 1)`` or ``num_steps < 1``.
    """
    if not (np.isfinite(eta0) and eta0 > 0):
        raise ValueError(f"eta0 must be finite and > 0, got {eta0}")
    if not 0.0 <= chi < 1.0:
        raise ValueError(f"chi must lie in [0, 1), got {chi}")
    if int(num_steps) < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    return float(eta0) * np.arange(1, int(num_steps) + 1, dtype=np.float64) ** (-float(chi))


def softmax(theta: np.ndarray) -> np.ndarray:
    """Row-wise softmax over the last axis (max-shifted), same shape and dtype as ``theta``."""
    z = theta - theta.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def boltzmann_logits(H: float, rho_bar: float, rbar: np.ndarray, dbar: np.ndarray) -> np.ndarray:
    """Closed-form logits ``H q_{rhobar}(x, a)``, ``(C, A)`` float64 (npg_decoupling.md, Thm 1)."""
    return float(H) * relative_values(rho_bar, rbar, dbar)


def npg_exact(
    p: np.ndarray,
    rbar: np.ndarray,
    dbar: np.ndarray,
    eta0: float,
    chi: float,
    num_steps: int,
    rho0: float = 0.0,
    store_theta: bool = True,
) -> NPGTrajectory:
    """Run the exact NPG iteration with exact greedy estimation (module docstring).

    Args:
      p: ``(C,)`` context probabilities; rbar, dbar: ``(C, A)`` mean rewards, durations (> 0).
      eta0, chi: step sizes ``eta_k = eta0 (k + 1) ** -chi`` (``eta0 > 0``, ``0 <= chi < 1``).
      num_steps: number of updates ``n >= 1``.
      rho0: the rate used by the first update (paper: ``rho_hat_1 = 0``).
      store_theta: keep all logits (memory ``(n + 1) C A`` floats).

    Returns:
      ``NPGTrajectory``. Source: paper, section "Natural policy gradient and reward-rate RL";
      proofs/npg_decoupling.md.

    Raises:
      ValueError: bad instance or bad step-size parameters.
    """
    p, rbar, dbar = check_instance(p, rbar, dbar)
    eta = step_sizes(eta0, chi, num_steps)
    if not np.isfinite(rho0):
        raise ValueError(f"rho0 must be finite, got {rho0}")
    n = int(num_steps)
    C, A = rbar.shape
    rows = np.arange(C)
    theta = np.zeros((C, A))
    thetas = np.zeros((n + 1, C, A)) if store_theta else None
    rho = np.empty(n + 1)
    rho_bar = np.full(n + 1, np.nan)
    H = np.zeros(n + 1)
    greedy = np.zeros((n + 1, C), dtype=np.int64)
    pi_min = np.empty(n + 1)
    rho[0] = float(rho0)
    weighted = 0.0
    for k in range(n + 1):
        pi = softmax(theta)
        u = np.argmax(theta, axis=1)
        greedy[k] = u
        pi_min[k] = pi[rows, u].min()
        if k >= 1:
            rho[k] = policy_rate(u, p, rbar, dbar)
            rho_bar[k] = weighted / H[k]
        if k == n:
            break
        q = relative_values(rho[k], rbar, dbar)
        theta = theta + eta[k] * (q - (pi * q).sum(axis=1, keepdims=True))
        if thetas is not None:
            thetas[k + 1] = theta
        H[k + 1] = H[k] + eta[k]
        weighted += eta[k] * rho[k]
    return NPGTrajectory(thetas, rho, rho_bar, H, eta, greedy, pi_min)


def settle_index(rho: np.ndarray, rho_star: float, rtol: float = 1e-12) -> int:
    """Smallest ``K >= 1`` with ``rho_i = rho_star`` (to ``rtol``) for every ``i >= K`` in ``rho``.

    Returns ``len(rho)`` when the last entry is not optimal (not settled within the trajectory).
    """
    ok = np.abs(np.asarray(rho) - rho_star) <= rtol * max(1.0, abs(rho_star))
    ok[0] = False
    bad = np.flatnonzero(~ok)
    return int(bad[-1] + 1)


def optimal_action_probability(theta: np.ndarray, u_star: np.ndarray) -> np.ndarray:
    """``pi_k(u_star(x) | x)`` for logits ``theta`` of shape ``(..., C, A)``; shape ``(..., C)``."""
    pi = softmax(np.asarray(theta, np.float64))
    idx = np.broadcast_to(np.asarray(u_star, np.int64), pi.shape[:-1])[..., None]
    return np.take_along_axis(pi, idx, axis=-1)[..., 0]
