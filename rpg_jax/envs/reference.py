"""The reference bandit instances E1-E4 (DESIGN.md section 3), in NumPy float64.

Layout of one instance with ``K`` arms and ``C = n_contexts >= 4`` contexts (actions ``0..K``):

- arms ``0..3`` are the base arms (rbar, dbar) (0.50, 1.0), (0.57, 1.2), (0.90, 3.0), (0.21, 0.6)
  with rewards scaled per context: 1.5 (context 0), 1.0 (context 2), 0.32 (context 3) and, for
  contexts ``4..C-1``, the midpoints of ``C - 4`` equal cells from 1.35 down to 0.42; context 1 is
  the coupling context with arms (1.8, 2.0), (1.0, 1.0), (1.6, 3.0), (0.2, 0.6) (unscaled);
- arms ``4..K-1`` are fillers: rate ``linspace(0.42, 0.18, K - 4) * scale`` (scale 1 in the
  coupling context), ``dbar ~ U(0.70, 2.00)``, ``rbar = rate * dbar``; the draws come from
  ``np.random.default_rng(reference_seed(K, C))``, one per filler arm, contexts in order, arms in
  order (this reproduces the reference instances);
- for ``K < 4`` only the first ``K`` base (coupling) arms are used, with no fillers (our choice:
  the reference layout needs ``K >= 4``);
- action ``K`` is SKIP: ``r = 0``, ``delta = 0.35``, deterministic (no floor applies).

Noise: E1/E2/E3 Gaussian with ``sigma_r = 0.2``, ``sigma_d = 0.15 dbar``, floors 0 and 0.5 and
``corr`` 0, +0.8, -0.8; E4 lognormal with ``s = 0.5`` for both, duration floor 0.5, ``corr`` 0.5.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from rpg_jax.envs.params import EnvParams, make_custom_env, permute_env

__all__ = [
    "ENV_NAMES",
    "BASE_ARMS",
    "COUPLING_ARMS",
    "SKIP_OUTCOME",
    "reference_seed",
    "context_scales",
    "reference_means",
    "make_reference_env",
    "make_trial_params",
]

ENV_NAMES = ("E1", "E2", "E3", "E4")
BASE_ARMS = ((0.50, 1.0), (0.57, 1.2), (0.90, 3.0), (0.21, 0.6))
COUPLING_ARMS = ((1.8, 2.0), (1.0, 1.0), (1.6, 3.0), (0.2, 0.6))
SKIP_OUTCOME = (0.0, 0.35)
_CORR = {"E1": 0.0, "E2": 0.8, "E3": -0.8, "E4": 0.5}
_REL_SIGMA_D = 0.15  # Gaussian duration noise: dbar * (1 + 0.15 Z2)
_SIGMA_R = 0.2
_S_LOGNORMAL = 0.5
_D_FLOOR = 0.5


def reference_seed(K: int, n_contexts: int) -> int:
    """Seed of the filler draws: first 8 bytes of SHA-256 of ``perm-v1|{K}|{n_contexts}``, read
    as a little-endian unsigned int."""
    digest = hashlib.sha256(f"perm-v1|{K}|{n_contexts}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def context_scales(n_contexts: int) -> np.ndarray:
    """Reward scale of each context, ``(C,)`` float64; the coupling context 1 gets 1.0."""
    extra = n_contexts - 4
    mids = 1.35 - (np.arange(extra) + 0.5) * (1.35 - 0.42) / max(extra, 1)
    return np.concatenate([[1.5, 1.0, 1.0, 0.32], mids])


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def reference_means(K: int, n_contexts: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Noise-model locations ``(rbar_loc, dbar_loc)`` of the reference layout, each ``(C, K + 1)``.

    Raises:
      ValueError: ``K < 1`` or ``n_contexts < 4`` (the reference layout has 4 fixed contexts).
    """
    K = _check_int("K", K, 1)
    C = _check_int("n_contexts", n_contexts, 4)
    rng = np.random.default_rng(reference_seed(K, C))
    scales = context_scales(C)
    n_fill = max(K - 4, 0)
    filler_rates = np.linspace(0.42, 0.18, n_fill)
    rbar = np.empty((C, K + 1))
    dbar = np.empty((C, K + 1))
    for x in range(C):
        arms = np.asarray(COUPLING_ARMS if x == 1 else BASE_ARMS)[: min(K, 4)]
        rbar[x, : len(arms)] = arms[:, 0] * scales[x]
        dbar[x, : len(arms)] = arms[:, 1]
        d_fill = rng.uniform(0.70, 2.00, size=n_fill)  # one draw per filler arm, in order
        rbar[x, 4:K] = filler_rates * scales[x] * d_fill
        dbar[x, 4:K] = d_fill
        rbar[x, K], dbar[x, K] = SKIP_OUTCOME
    return rbar, dbar


def make_reference_env(env: str, K: int, n_contexts: int = 4) -> EnvParams:
    """Reference instance ``env`` in {E1, E2, E3, E4} (case-insensitive), unpermuted, NumPy float64.

    ``A = K + 1`` actions, SKIP last; contexts uniform. Exact means, gaps and ``rho_star`` as in
    ``make_custom_env``. ``K < 4`` keeps the first ``K`` base / coupling arms and no fillers (our
    extension; module docstring). Source: DESIGN.md section 3 (facts of the paper's reference code).

    Raises:
      ValueError: unknown ``env`` (naming it and the valid names), ``K < 1``, ``n_contexts < 4``.
    """
    name = str(env).upper()
    if name not in ENV_NAMES:
        raise ValueError(f"unknown environment {env!r}; valid names: {ENV_NAMES}")
    rbar_loc, dbar_loc = reference_means(K, n_contexts)
    C = rbar_loc.shape[0]
    arm = np.ones_like(rbar_loc)
    arm[:, -1] = 0.0  # SKIP: deterministic, no floor on its duration
    if name == "E4":
        sigma_r = sigma_d = _S_LOGNORMAL * arm
        noise = "lognormal"
    else:
        sigma_r, sigma_d = _SIGMA_R * arm, _REL_SIGMA_D * dbar_loc * arm
        noise = "gaussian"
    return make_custom_env(
        np.full(C, 1.0 / C),
        rbar_loc,
        dbar_loc,
        noise=noise,
        sigma_r=sigma_r,
        sigma_d=sigma_d,
        corr=_CORR[name],
        r_floor=0.0,
        d_floor=_D_FLOOR * arm,
    )


def make_trial_params(env: str, K: int, n_contexts: int, seeds: Sequence[int]) -> EnvParams:
    """Per-trial permuted instances stacked on a leading seed axis (NumPy; ready to vmap/shard).

    Field ``f`` of the result has shape ``(len(seeds),) + f.shape``; row ``i`` is
    ``permute_env(make_reference_env(env, K, n_contexts), seeds[i])``.

    Raises:
      ValueError: as ``make_reference_env`` and ``permute_env``, or empty ``seeds``.
    """
    base = make_reference_env(env, K, n_contexts)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds is empty; give at least one trial seed")
    trials = [permute_env(base, s) for s in seeds]
    return EnvParams(*(np.stack(fields) for fields in zip(*trials, strict=True)))
