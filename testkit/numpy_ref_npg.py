"""Plain NumPy per-seed reference loop of NPG-NIW / SPG-NIW (the baseline for benchmarks).

A direct, one-decision-at-a-time Python loop, deliberately written the way the authors' NumPy code
is described (DESIGN.md sections 4, 5 and 8): at the refit decisions of the feeding rule (default
the reference one, DESIGN.md section 5) the NIW posterior is refit from the slots and ``rho_hat``
is re-estimated by drawing ``num_batches`` batches of bivariate Student-t slot vectors. Same
semantics, step order and tie-breaking as ``rpg_jax.agents.npg`` (see its module docstring); only
the random streams differ, so the two agree in distribution, not sample by sample. Never used
inside JAX code.

NIW estimator (DESIGN.md section 4): ``y = (slot reward sum, log slot time sum)``, d = 2. State
starts at ``mu0 = 0, kappa0 = 1e-3, nu0 = 3, psi0 = 1e-3 I``; every successful refit, the first
one too, uses the prior ``(mu, lam kappa, max(lam nu, d + 2), lam psi)`` (as
``rpg_jax.estimator``), then the conjugate update on the usable slots (finite, ``slot_d >
0``); with fewer than 2 usable slots nothing changes. ``rho_hat`` = max(0, the
``quantile`` of mean(r)/mean(exp(y_2)) over ``num_batches`` batches of ``num_slots`` posterior
predictive draws); the predictive is multivariate Student-t with ``df = nu - d + 1`` and scale
``psi (kappa + 1) / (kappa df)`` (Murphy 2007, "Conjugate Bayesian analysis of the Gaussian
distribution", section 9).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from rpg_core import niw
from rpg_jax import rates

__all__ = [
    "NIWNumpy",
    "niw_init",
    "niw_update",
    "niw_estimate",
    "sample_env_numpy",
    "run_npg_numpy",
]

_D = niw.D


class NIWNumpy(NamedTuple):
    """NIW posterior in NumPy float64: ``mu (2,)``, ``kappa ()``, ``nu ()``, ``psi (2, 2)``, and
    ``num_fits`` (successful refits so far; every refit, the first too, forgets its prior)."""

    mu: np.ndarray
    kappa: float
    nu: float
    psi: np.ndarray
    num_fits: int = 0


def niw_init() -> NIWNumpy:
    """The first prior ``mu0 = 0, kappa0 = 1e-3, nu0 = 3, psi0 = 1e-3 I`` (DESIGN.md section 4)."""
    return NIWNumpy(np.full(_D, niw.MU0), niw.KAPPA0, niw.NU0, niw.PSI0_SCALE * np.eye(_D), 0)


def niw_update(
    state: NIWNumpy, slot_r: np.ndarray, slot_d: np.ndarray, lam: float = niw.LAM
) -> tuple[NIWNumpy, bool]:
    """Forgetting prior then conjugate NIW update on the usable slots (finite, ``slot_d > 0``).

    The algebra is :mod:`rpg_core.niw` with ``xp = numpy`` (the one both estimator backends
    use); the loop's control flow (skip the refit with < 2 usable slots) is Python here.

    Args:
      state: current posterior.
      slot_r, slot_d: slot reward / duration sums, float ``(S,)``.
      lam: forgetting factor in ``(0, 1]``.

    Returns:
      ``(posterior, updated)``; ``updated`` is False (and ``state`` returned unchanged) when
      fewer than 2 slots are usable.

    Raises:
      ValueError: on bad slot shapes or ``lam`` outside ``(0, 1]`` (or NaN, or not one number).

    Source: Murphy (2007), "Conjugate Bayesian analysis of the Gaussian distribution", NIW
    posterior; forgetting rule of DESIGN.md section 4.
    """
    niw.check_lam(lam)
    niw.check_slot_shapes(np.shape(slot_r), np.shape(slot_d))
    y, use = niw.slot_vectors(np, np.asarray(slot_r, np.float64), np.asarray(slot_d, np.float64))
    if int(use.sum()) < 2:
        return state, False
    mu, kappa, nu, psi = niw.niw_posterior(np, *niw.forgetting_prior(np, state, lam), y, use)
    return NIWNumpy(mu, float(kappa), float(nu), psi, state.num_fits + 1), True


def niw_estimate(
    state: NIWNumpy,
    rng: np.random.Generator,
    num_slots: int = niw.NUM_SLOTS,
    num_batches: int = niw.NUM_BATCHES,
    quantile: float = niw.QUANTILE,
) -> float:
    """``rho_hat`` from ``num_batches x num_slots`` posterior predictive Student-t draws.

    Draws: ``loc + L z / sqrt(w)``, ``z ~ N(0, I_2)``, ``w ~ chi2(df) / df`` (NumPy generator);
    the predictive parameters and the quantile are :mod:`rpg_core.niw` with ``xp = numpy``.

    Returns:
      ``max(0, quantile of the batch rates)``, a float.

    Raises:
      ValueError: on ``quantile`` outside ``[0, 1]`` (or NaN, or not one number).
    """
    niw.check_quantile(quantile)
    df, loc, _, chol = niw.predictive_params(np, state)
    z = rng.standard_normal((num_batches, num_slots, _D))
    w = rng.chisquare(df, (num_batches, num_slots, 1)) / df
    y = loc + (z @ chol.T) / np.sqrt(w)
    return float(niw.rate_quantile(np, niw.batch_rates(np, y), quantile))


def sample_env_numpy(params: Any, x: int, a: int, rng: np.random.Generator) -> tuple[float, float]:
    """One ``(r, delta)`` from an ``rpg_jax.envs.EnvParams`` instance (Gaussian or lognormal model).

    ``(Z1, Z2)`` standard normal with correlation ``params.corr``; Gaussian:
    ``r = max(loc_r + sigma_r Z1, r_floor)``; lognormal: ``r = max(exp(log loc_r - sigma_r^2/2 +
    sigma_r Z1), r_floor)``; the same for ``delta`` with ``Z2`` (DESIGN.md section 3).
    """
    z1, w = rng.standard_normal(2)
    c = float(params.corr)
    z2 = c * z1 + np.sqrt(max(0.0, 1.0 - c * c)) * w
    lr, ld = float(params.loc_r[x, a]), float(params.loc_d[x, a])
    sr, sd = float(params.sigma_r[x, a]), float(params.sigma_d[x, a])
    if bool(params.lognormal):
        r = np.exp(np.log(lr) - 0.5 * sr * sr + sr * z1) if lr > 0 else 0.0
        d = np.exp(np.log(ld) - 0.5 * sd * sd + sd * z2)
    else:
        r = lr + sr * z1
        d = ld + sd * z2
    return max(float(r), float(params.r_floor[x, a])), max(float(d), float(params.d_floor[x, a]))


def run_npg_numpy(
    params: Any,
    n_steps: int,
    lr: float,
    age_bound: float,
    seed: int,
    *,
    natural: bool = True,
    num_slots: int = 128,
    refit_every: int = 8,
    num_batches: int = 1000,
    quantile: float = 0.95,
    lam: float = 0.3,
    sample: Callable | None = None,
    feeding: str = "reference",
) -> dict:
    """Run NPG-NIW (``natural=True``) or SPG-NIW for one seed in plain NumPy.

    Args:
      params: instance with ``p (C,)``, exact means ``rbar, dbar (C, A)``, and optionally
        ``rho_star`` and ``gap`` (computed with ``rpg_jax.rates`` when absent); an
        ``rpg_jax.envs.EnvParams`` (single instance, no seed axis) works as is.
      n_steps: number of decisions ``n``.
      lr: step size; age_bound: slot age bound in decisions.
      seed: seed of ``np.random.default_rng`` (the whole trajectory).
      natural, num_slots, refit_every, num_batches, quantile, lam: as in ``rpg_jax.agents.npg``
        and DESIGN.md section 4.
      sample: ``(x, a, rng) -> (r, delta)``; default :func:`sample_env_numpy` on ``params``.
      feeding: ``"reference"`` (default; DESIGN.md section 5 "Estimator feeding": ``t`` from 1,
        age reset only of the slot being written, refit only right after a fed sample at
        ``t % refit_every == 0`` with >= 2 non-empty slots, on those ``n`` slots, batches of
        ``n``) or ``"legacy"`` (``rpg_jax.agents.npg`` ``feeding="legacy"``).

    Returns:
      dict with ``regret`` (``R_n = rho_star sum delta - sum r``), ``pseudo_regret``
      (``sum GAP(x_t, a_t)``), ``rho_hat`` (last estimate), ``theta`` ``(C, A)``, ``num_refits``
      and ``seconds`` (wall time of the loop, and ``refit_seconds`` of it in refits).

    Raises:
      ValueError: on a non-positive ``n_steps``, ``num_slots`` or ``refit_every``, an unknown
        ``feeding``, or a bad instance.
    """
    if feeding not in ("reference", "legacy"):
        raise ValueError(f"feeding must be 'reference' or 'legacy', got {feeding!r}")
    for name, v in (("n_steps", n_steps), ("num_slots", num_slots), ("refit_every", refit_every)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    p, rbar, dbar = rates.check_instance(params.p, params.rbar, params.dbar)
    if getattr(params, "rho_star", None) is not None:
        rho_star = float(params.rho_star)
    else:
        rho_star = rates.rho_star(p, rbar, dbar)
    if getattr(params, "gap", None) is not None:
        gap = np.asarray(params.gap, dtype=np.float64)
    else:
        gap = rates.gaps(p, rbar, dbar)
    if sample is None:
        sample = lambda x, a, rng: sample_env_numpy(params, x, a, rng)  # noqa: E731
    C, A = rbar.shape
    S = int(num_slots)
    rng = np.random.default_rng(seed)
    cum_p = np.cumsum(p)

    theta = np.zeros((C, A))
    n = np.zeros((C, A), dtype=np.int64)
    sum_r = np.zeros((C, A))
    sum_d = np.zeros((C, A))
    slot_r = np.zeros(S)
    slot_d = np.zeros(S)
    slot_n = np.zeros(S, dtype=np.int64)
    slot_start = np.zeros(S, dtype=np.int64)
    ptr = 0
    niw = niw_init()
    rho_hat = 0.0
    total_r = total_d = pseudo = 0.0
    num_refits = 0
    refit_seconds = 0.0
    t0 = time.perf_counter()
    for t in range(int(n_steps)):
        x = min(int(np.searchsorted(cum_p, rng.random(), side="right")), C - 1)
        logits = theta[x] - theta[x].max()
        pi = np.exp(logits)
        pi /= pi.sum()
        a = min(int(np.searchsorted(np.cumsum(pi), rng.random(), side="right")), A - 1)
        r, d = sample(x, a, rng)
        total_r += r
        total_d += d
        pseudo += gap[x, a]
        greedy = a == int(np.argmax(theta[x]))  # theta before this decision's step
        n[x, a] += 1
        sum_r[x, a] += r
        sum_d[x, a] += d
        if feeding == "reference":
            tt = t + 1  # decisions counted from 1
            if greedy:
                if slot_n[ptr] >= 1 and tt - slot_start[ptr] > age_bound:
                    slot_r[ptr] = slot_d[ptr] = 0.0
                    slot_n[ptr] = 0
                    slot_start[ptr] = tt  # birth: set only by a reset
                slot_r[ptr] += r
                slot_d[ptr] += d
                slot_n[ptr] += 1
                ptr = (ptr + 1) % S
                full = slot_n >= 1
                if tt % refit_every == 0 and full.sum() >= 2:
                    tr = time.perf_counter()
                    niw, updated = niw_update(niw, slot_r[full], slot_d[full], lam)
                    if updated:
                        rho_hat = niw_estimate(niw, rng, int(full.sum()), num_batches, quantile)
                    num_refits += 1
                    refit_seconds += time.perf_counter() - tr
        else:
            # legacy: every stale slot is zeroed, then the greedy sample round-robin
            stale = (slot_n > 0) & (t - slot_start > age_bound)
            slot_r[stale] = 0.0
            slot_d[stale] = 0.0
            slot_n[stale] = 0
            if greedy:
                if slot_n[ptr] == 0:
                    slot_start[ptr] = t
                slot_r[ptr] += r
                slot_d[ptr] += d
                slot_n[ptr] += 1
                ptr = (ptr + 1) % S
            if (t + 1) % refit_every == 0:
                tr = time.perf_counter()
                niw, updated = niw_update(niw, slot_r, slot_d, lam)
                if updated:
                    rho_hat = niw_estimate(niw, rng, S, num_batches, quantile)
                num_refits += 1
                refit_seconds += time.perf_counter() - tr
        # 5. policy step on the visited context.
        q = np.where(n[x] > 0, (sum_r[x] - rho_hat * sum_d[x]) / np.maximum(n[x], 1), 0.0)
        adv = q - pi @ q
        theta[x] += lr * (adv if natural else pi * adv)
    return {
        "regret": rho_star * total_d - total_r,
        "pseudo_regret": pseudo,
        "rho_hat": rho_hat,
        "theta": theta,
        "num_refits": num_refits,
        "seconds": time.perf_counter() - t0,
        "refit_seconds": refit_seconds,
    }
