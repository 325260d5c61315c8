"""Plain NumPy per-seed reference of C-UCB (the baseline for benchmarks and a test oracle).

A direct, one-decision-at-a-time loop written the way the authors' NumPy code is described
(DESIGN.md sections 5 and 8): at every decision ``lambda_t`` is the maximum over ALL ``A**C``
deterministic policies, enumerated in full (joint sums of each half of the contexts, then every
pair, float32 by default), or over ``M``
sampled policies for the sampled variant. Same semantics, time index and tie-breaking as
``rpg_jax.agents.cucb`` (see its module docstring); with the same ``(x, r, delta)`` stream and the
same dtype the exact variants take the same actions. Never used inside JAX code.

Source: Gyorgy, Kocsis, Szabo, Szepesvari, "Continuous time associative bandit problems",
IJCAI 2007 (C-UCB).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rpg_jax import rates
from rpg_jax.agents.cucb_lambda import LAMBDA_FLOOR, log1p_int_power

__all__ = ["CUCBNumpy", "lambda_numpy", "run_cucb_numpy"]


def lambda_numpy(
    n: np.ndarray,
    sum_r: np.ndarray,
    sum_d: np.ndarray,
    c: float,
    dtype: Any = np.float32,
    policies: np.ndarray | None = None,
) -> float:
    """``max(max_u [R_u/D_u - c/sqrt(T_u)], 1e-9)`` by enumeration (``cucb_lambda`` semantics).

    Args:
      n, sum_r, sum_d: ``(C, A)`` statistics.
      c: ``sqrt(2 c1 L)``.
      dtype: float dtype of the enumeration (float32 as the reference).
      policies: optional int ``(M, C)`` policies to maximise over; default all ``A**C``.

    Returns:
      float ``lambda``.
    """
    C, A = n.shape
    sr, sd, nf = (np.asarray(v, dtype=dtype) for v in (sum_r, sum_d, n))
    if policies is None:
        # all policies: joint sums of each half of the contexts, then every pair (in place)
        h = (C + 1) // 2

        def half(ctx):
            out = []
            for v in (sr, sd, nf):
                acc = np.zeros(1, dtype)
                for x in ctx:
                    acc = np.add.outer(acc, v[x]).ravel()
                out.append(acc)
            return out

        (Rp, Dp, Tp), (Rq, Dq, Tq) = half(range(h)), half(range(h, C))
        if Tp.max() + Tq.max() <= 0:
            return LAMBDA_FLOOR
        T = np.add.outer(Tp, Tq)
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = np.add.outer(Rp, Rq)
            vals /= np.add.outer(Dp, Dq)
            np.sqrt(T, out=T)
            np.divide(dtype(c), T, out=T)
            vals -= T  # T_u = 0 gives nan (0/0 - inf) or -inf: never the maximum
        return max(float(np.nanmax(vals)), LAMBDA_FLOOR)
    rows = np.arange(C)[None, :]
    R, D, T = (v[rows, policies].sum(axis=1) for v in (sr, sd, nf))
    ok = T > 0
    if not np.any(ok):
        return LAMBDA_FLOOR
    with np.errstate(divide="ignore", invalid="ignore"):
        vals = R / D - dtype(c) / np.sqrt(T)
    return max(float(np.max(vals[ok])), LAMBDA_FLOOR)


class CUCBNumpy:
    """C-UCB for one seed in NumPy: call :meth:`act` then :meth:`update` once per decision.

    Args:
      n_contexts, n_actions: ``C``, ``A`` (incl. SKIP).
      c1, c2: C-UCB constants.
      exact: full enumeration; else ``num_sampled_policies`` policies drawn with ``rng``.
      dtype: float dtype of the statistics and of the enumeration (float32 as the reference).
      rng: ``np.random.Generator`` for the sampled variant.
    """

    def __init__(
        self,
        n_contexts: int,
        n_actions: int,
        c1: float,
        c2: float,
        *,
        exact: bool = True,
        num_sampled_policies: int = 2048,
        dtype: Any = np.float32,
        rng: np.random.Generator | None = None,
    ):
        if n_contexts < 1 or n_actions < 1:
            raise ValueError(f"need n_contexts, n_actions >= 1, got {n_contexts}, {n_actions}")
        if not exact and num_sampled_policies < 1:
            raise ValueError(f"num_sampled_policies must be >= 1, got {num_sampled_policies}")
        self.C, self.A = int(n_contexts), int(n_actions)
        self.c1, self.c2 = float(c1), float(c2)
        self.exact, self.M = bool(exact), int(num_sampled_policies)
        self.dtype = np.dtype(dtype).type
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.n = np.zeros((self.C, self.A), np.int64)
        self.sum_r = np.zeros((self.C, self.A), self.dtype)
        self.sum_d = np.zeros((self.C, self.A), self.dtype)
        self.t = 0  # decisions taken so far
        self.log1p_u = log1p_int_power(self.A, self.C)
        self.log1p_lam = self.log1p_u if self.exact else math.log1p(self.M)
        self.lam = LAMBDA_FLOOR

    def _sample_policies(self) -> np.ndarray:
        u = np.empty((self.M, self.C), np.int64)
        for x in range(self.C):
            tried = np.flatnonzero(self.n[x] > 0)
            if tried.size == 0:
                tried = np.arange(self.A)
            u[:, x] = tried[self.rng.integers(0, tried.size, size=self.M)]
        return u

    def act(self, x: int) -> int:
        """Action for context ``x`` at decision ``t = self.t + 1`` (also sets ``self.lam``)."""
        t = self.t + 1
        n_x = self.n[x]
        untried = np.flatnonzero(n_x == 0)
        L_lam = math.log(max(t, 2)) + 0.5 * self.log1p_lam
        c = math.sqrt(2.0 * self.c1 * L_lam)
        policies = None if self.exact else self._sample_policies()
        self.lam = lambda_numpy(self.n, self.sum_r, self.sum_d, c, self.dtype, policies)
        if untried.size:
            return int(untried[0])
        L = self.dtype(math.log(max(t, 2)) + 0.5 * self.log1p_u)
        nf = n_x.astype(self.dtype)
        lam, c2 = self.dtype(self.lam), self.dtype(self.c2)
        idx = (self.sum_r[x] - lam * self.sum_d[x]) / nf + c2 * np.sqrt(L / nf)
        return int(np.argmax(idx))

    def update(self, x: int, a: int, r: float, delta: float) -> None:
        """Record reward ``r`` and duration ``delta`` of action ``a`` in context ``x``."""
        self.n[x, a] += 1
        self.sum_r[x, a] += self.dtype(r)
        self.sum_d[x, a] += self.dtype(delta)
        self.t += 1


def run_cucb_numpy(
    params: Any,
    n_steps: int,
    c1: float,
    c2: float,
    seed: int,
    *,
    exact: bool = True,
    num_sampled_policies: int = 2048,
    dtype: Any = np.float32,
    sample: Callable | None = None,
) -> dict:
    """Run C-UCB for one seed in plain NumPy.

    Args:
      params: instance with ``p (C,)``, exact means ``rbar, dbar (C, A)``, optionally
        ``rho_star`` and ``gap`` (computed with ``rpg_jax.rates`` when absent); an
        ``rpg_jax.envs.EnvParams`` (single instance) works as is.
      n_steps: number of decisions ``n``; c1, c2: C-UCB constants; seed: ``default_rng`` seed.
      exact, num_sampled_policies, dtype: as in :class:`CUCBNumpy`.
      sample: ``(x, a, rng) -> (r, delta)``; default
        ``testkit.numpy_ref_npg.sample_env_numpy`` on ``params``.

    Returns:
      dict with ``regret`` (``rho_star sum delta - sum r``), ``pseudo_regret`` (``sum GAP``),
      ``lam`` (last ``lambda``), ``n`` ``(C, A)`` counts, ``seconds`` (wall time of the loop).

    Raises:
      ValueError: non-positive ``n_steps`` or a bad instance.
    """
    if int(n_steps) != n_steps or n_steps < 1:
        raise ValueError(f"n_steps must be a positive int, got {n_steps!r}")
    p, rbar, dbar = rates.check_instance(params.p, params.rbar, params.dbar)
    rho_star = getattr(params, "rho_star", None)
    rho_star = float(rho_star) if rho_star is not None else rates.rho_star(p, rbar, dbar)
    gap = getattr(params, "gap", None)
    gap = np.asarray(gap, np.float64) if gap is not None else rates.gaps(p, rbar, dbar)
    if sample is None:
        from testkit.numpy_ref_npg import sample_env_numpy

        sample = lambda x, a, rng: sample_env_numpy(params, x, a, rng)  # noqa: E731
    C, A = rbar.shape
    rng = np.random.default_rng(seed)
    agent = CUCBNumpy(
        C, A, c1, c2, exact=exact, num_sampled_policies=num_sampled_policies, dtype=dtype, rng=rng
    )
    cum_p = np.cumsum(p)
    total_r = total_d = pseudo = 0.0
    t0 = time.perf_counter()
    for _ in range(int(n_steps)):
        x = min(int(np.searchsorted(cum_p, rng.random(), side="right")), C - 1)
        a = agent.act(x)
        r, d = sample(x, a, rng)
        agent.update(x, a, r, d)
        total_r += r
        total_d += d
        pseudo += gap[x, a]
    return {
        "regret": rho_star * total_d - total_r,
        "pseudo_regret": pseudo,
        "lam": agent.lam,
        "n": agent.n.copy(),
        "seconds": time.perf_counter() - t0,
    }
