"""Parameters of a contextual continuous-time bandit and the exact means of its noise models.

Plain NumPy / SciPy in float64 (no JAX): instances are built, validated and permuted here, before
anything is traced or compiled. Sampling lives in ``rpg_jax.envs.sampling``.

Noise models (DESIGN.md section 3), with ``(Z1, Z2)`` standard normal of correlation ``corr``:

- Gaussian (E1-E3): ``r = max(loc_r + sigma_r Z1, r_floor)``,
  ``delta = max(loc_d + sigma_d Z2, d_floor)`` (the reference duration noise
  ``dbar (1 + 0.15 Z2)`` is ``loc_d = dbar``, ``sigma_d = 0.15 dbar``).
- Lognormal (E4): ``r = max(exp(log loc_r - sigma_r^2/2 + sigma_r Z1), r_floor)`` and the same for
  ``delta``; before clipping the mean is exactly ``loc``.
- An entry with ``sigma = 0`` is deterministic: ``max(loc, floor)`` (the SKIP action).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import ndtr

from rpg_jax import rates

__all__ = [
    "EnvParams",
    "NOISE_MODELS",
    "clipped_normal_mean",
    "clipped_lognormal_mean",
    "expected_outcomes",
    "make_custom_env",
    "permute_env",
    "as_dtype",
]

NOISE_MODELS = ("gaussian", "lognormal", "none")


class EnvParams(NamedTuple):
    """One bandit instance (gymnax style: parameters only, no state); a pytree that vmaps.

    Shapes for one instance (a leading seed axis is allowed, see ``make_trial_params``); ``C``
    contexts, ``A`` actions (reference envs: ``A = K + 1``, SKIP is the last index ``K``).
    Float fields are float64 when built; use ``as_dtype`` to change them.

    Attributes:
      p: ``(C,)`` context probabilities.
      loc_r, loc_d: ``(C, A)`` location of the reward / duration noise model (module docstring).
      sigma_r, sigma_d: ``(C, A)`` noise scales, ``>= 0`` (0: deterministic entry).
      corr: ``()`` correlation of ``Z1`` and ``Z2``, in ``[-1, 1]``.
      lognormal: ``()`` bool, False for the Gaussian model, True for the lognormal one.
      r_floor, d_floor: ``(C, A)`` clip floors of reward and duration (``-inf``: no clip).
      rbar, dbar: ``(C, A)`` exact expected reward / duration (time units) after clipping.
      gap: ``(C, A)`` ``GAP(x, a) = max_b q_{rho*}(x, b) - q_{rho*}(x, a)`` (DESIGN.md section 2).
      rho_star: ``()`` optimal reward rate of the exact means.
    """

    p: np.ndarray
    loc_r: np.ndarray
    loc_d: np.ndarray
    sigma_r: np.ndarray
    sigma_d: np.ndarray
    corr: np.ndarray
    lognormal: np.ndarray
    r_floor: np.ndarray
    d_floor: np.ndarray
    rbar: np.ndarray
    dbar: np.ndarray
    gap: np.ndarray
    rho_star: np.ndarray


def _phi(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


def _f64(*arrays):
    return np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in arrays))


def clipped_normal_mean(m, s, f) -> np.ndarray:
    """``E[max(m + s Z, f)]`` for ``Z ~ N(0, 1)``, elementwise, float64.

    With ``a = (f - m) / s``: ``f Phi(a) + m (1 - Phi(a)) + s phi(a)``, since
    ``E[(m + s Z) 1{Z > a}] = m (1 - Phi(a)) + s phi(a)``. ``s = 0`` gives ``max(m, f)``;
    ``f = -inf`` gives ``m``. Arrays broadcast; ``s >= 0`` assumed.
    """
    m, s, f = _f64(m, s, f)
    pos = s > 0
    a = np.divide(f - m, s, out=np.zeros_like(m), where=pos)
    with np.errstate(invalid="ignore"):
        floor_term = np.where(np.isfinite(f), f * ndtr(a), 0.0)
    smooth = floor_term + m * ndtr(-a) + s * _phi(a)
    return np.where(pos, smooth, np.maximum(m, f))


def clipped_lognormal_mean(m, s, f) -> np.ndarray:
    """``E[max(X, f)]`` for ``X = exp(log m - s^2/2 + s Z)`` (``E[X] = m``), elementwise, float64.

    With ``b = (log f - log m + s^2/2) / s`` (``X < f`` iff ``Z < b``):
    ``f Phi(b) + m Phi(s - b)``, since ``E[X 1{Z > b}] = m (1 - Phi(b - s))``.
    ``f <= 0`` gives ``m``; ``s = 0`` or ``m = 0`` gives ``max(m, f)``. Requires ``m >= 0, s >= 0``.
    """
    m, s, f = _f64(m, s, f)
    smooth = (s > 0) & (m > 0)
    clip = smooth & (f > 0)
    f1, m1, s1 = (np.where(clip, v, 1.0) for v in (f, m, s))
    b = (np.log(f1) - np.log(m1) + 0.5 * s1 * s1) / s1
    clipped = f * ndtr(b) + m * ndtr(s - b)
    return np.where(clip, clipped, np.where(smooth, m, np.maximum(m, f)))


def expected_outcomes(loc_r, loc_d, sigma_r, sigma_d, r_floor, d_floor, lognormal: bool):
    """Exact ``(rbar, dbar)`` of the clipped noise model, float64 arrays of the broadcast shape.

    Args:
      loc_r, loc_d, sigma_r, sigma_d, r_floor, d_floor: as in ``EnvParams`` (broadcastable).
      lognormal: False for the Gaussian model (``clipped_normal_mean``), True for the lognormal
        one (``clipped_lognormal_mean``).
    """
    mean = clipped_lognormal_mean if bool(lognormal) else clipped_normal_mean
    return mean(loc_r, sigma_r, r_floor), mean(loc_d, sigma_d, d_floor)


def _table(name: str, value, shape, *, allow_neg_inf: bool = False) -> np.ndarray:
    """Broadcast a scalar or array to ``shape`` as float64; ValueError naming a NaN / inf entry."""
    try:
        arr = np.broadcast_to(np.asarray(value, dtype=np.float64), shape).copy()
    except (ValueError, TypeError) as err:
        raise ValueError(f"{name} must broadcast to shape {shape}, got {value!r}") from err
    ok = np.isfinite(arr) | (allow_neg_inf & (arr == -np.inf))
    if not ok.all():
        idx = tuple(np.argwhere(~ok)[0].tolist())
        raise ValueError(f"{name}{list(idx)} = {arr[idx]} is not finite")
    return arr


def _require(name: str, arr: np.ndarray, ok: np.ndarray, what: str) -> None:
    if not np.all(ok):
        idx = tuple(np.argwhere(~np.broadcast_to(ok, arr.shape))[0].tolist())
        raise ValueError(f"{name}{list(idx)} = {arr[idx]}: {what}")


def make_custom_env(
    p,
    rbar_loc,
    dbar_loc,
    *,
    noise: str = "gaussian",
    sigma_r=None,
    sigma_d=None,
    corr: float = 0.0,
    r_floor=None,
    d_floor=None,
) -> EnvParams:
    """Build and validate an instance from its noise-model locations (NumPy, float64).

    Args:
      p: ``(C,)`` context probabilities (C >= 1, summing to 1).
      rbar_loc: ``(C, A)`` reward locations (A >= 1), finite; lognormal: ``>= 0``, ``> 0`` where
        ``sigma_r > 0``.
      dbar_loc: ``(C, A)`` duration locations, finite and ``> 0`` (time units).
      noise: "gaussian" (E1-E3 model), "lognormal" (E4 model) or "none" (deterministic).
      sigma_r, sigma_d: scalar or ``(C, A)`` scales ``>= 0``. Defaults: gaussian 0.2 and
        ``0.15 * dbar_loc``; lognormal 0.5 and 0.5; none 0.
      corr: correlation of ``Z1, Z2`` in ``[-1, 1]``.
      r_floor, d_floor: scalar or ``(C, A)`` clip floors. Defaults: 0 and 0.5 (the reference
        floors); for noise "none": ``-inf`` and 0 (no clipping). ``d_floor >= 0``, and ``> 0``
        where the duration is random, so every sampled duration is ``> 0``.

    Returns:
      ``EnvParams`` with exact ``rbar, dbar`` (``expected_outcomes``), ``gap`` and ``rho_star``
      (``rpg_jax.rates``), all NumPy arrays.

    Raises:
      ValueError: naming the bad value (unknown noise, shapes, zero contexts or actions, NaN/inf,
        non-positive durations, negative scales, ``|corr| > 1``, bad ``p``), before any JAX work.
    """
    if noise not in NOISE_MODELS:
        raise ValueError(f"unknown noise model {noise!r}; valid: {NOISE_MODELS}")
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or p.shape[0] < 1:
        raise ValueError(f"p must have shape (C,) with C >= 1 contexts, got shape {p.shape}")
    rbar_loc = np.asarray(rbar_loc, dtype=np.float64)
    if rbar_loc.ndim != 2 or rbar_loc.shape[0] != p.shape[0] or rbar_loc.shape[1] < 1:
        raise ValueError(
            f"rbar_loc must have shape (C={p.shape[0]}, A >= 1) actions, got {rbar_loc.shape}"
        )
    shape = rbar_loc.shape
    rbar_loc = _table("rbar_loc", rbar_loc, shape)
    dbar_loc = _table("dbar_loc", dbar_loc, shape)
    _require("dbar_loc", dbar_loc, dbar_loc > 0, "durations must be > 0")

    gaussian = noise == "gaussian"
    lognormal = noise == "lognormal"
    if sigma_r is None:
        sigma_r = 0.2 if gaussian else 0.5 if lognormal else 0.0
    if sigma_d is None:
        sigma_d = 0.15 * dbar_loc if gaussian else 0.5 if lognormal else 0.0
    if r_floor is None:
        r_floor = -np.inf if noise == "none" else 0.0
    if d_floor is None:
        d_floor = 0.0 if noise == "none" else 0.5
    sigma_r = _table("sigma_r", sigma_r, shape)
    sigma_d = _table("sigma_d", sigma_d, shape)
    _require("sigma_r", sigma_r, sigma_r >= 0, "noise scales must be >= 0")
    _require("sigma_d", sigma_d, sigma_d >= 0, "noise scales must be >= 0")
    r_floor = _table("r_floor", r_floor, shape, allow_neg_inf=True)
    d_floor = _table("d_floor", d_floor, shape)
    _require("d_floor", d_floor, d_floor >= 0, "duration floors must be >= 0")
    if gaussian:
        _require(
            "d_floor", d_floor, (d_floor > 0) | (sigma_d == 0), "must be > 0 for random durations"
        )
    if lognormal:
        _require("rbar_loc", rbar_loc, rbar_loc >= 0, "lognormal rewards need loc >= 0")
        _require(
            "rbar_loc", rbar_loc, (rbar_loc > 0) | (sigma_r == 0), "need loc > 0 if sigma_r > 0"
        )
    corr = float(corr)
    if not (np.isfinite(corr) and -1.0 <= corr <= 1.0):
        raise ValueError(f"corr = {corr} must lie in [-1, 1]")

    rbar, dbar = expected_outcomes(
        rbar_loc, dbar_loc, sigma_r, sigma_d, r_floor, d_floor, lognormal
    )
    p, rbar, dbar = rates.check_instance(p, rbar, dbar)
    return EnvParams(
        p=p,
        loc_r=rbar_loc,
        loc_d=dbar_loc,
        sigma_r=sigma_r,
        sigma_d=sigma_d,
        corr=np.asarray(corr, dtype=np.float64),
        lognormal=np.asarray(lognormal, dtype=np.bool_),
        r_floor=r_floor,
        d_floor=d_floor,
        rbar=rbar,
        dbar=dbar,
        gap=rates.gaps(p, rbar, dbar),
        rho_star=np.asarray(rates.rho_star(p, rbar, dbar), dtype=np.float64),
    )


def permute_env(params: EnvParams, seed: int, *, keep_last: bool = True) -> EnvParams:
    """Relabel contexts and arms of one instance with a per-trial seed (NumPy).

    One generator ``np.random.default_rng([seed, 1])`` draws a permutation of the ``C`` contexts,
    then one permutation of the arms shared by all contexts; with ``keep_last`` (reference envs)
    only the first ``A - 1`` actions are permuted and SKIP stays at index ``A - 1``. New context
    ``i`` is old context ``ctx[i]``, new action ``j`` is old action ``arm[j]``. ``rho_star`` is
    unchanged and ``gap`` is permuted with the means (DESIGN.md section 3: "each trial permutes
    context order and arm order with its own seed").

    Raises:
      ValueError: ``seed`` not a non-negative int, or ``params`` batched (``p.ndim != 1``).
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if np.ndim(params.p) != 1:
        raise ValueError(f"permute_env takes one instance, got p of shape {np.shape(params.p)}")
    C, A = np.shape(params.rbar)
    rng = np.random.default_rng([int(seed), 1])
    ctx = rng.permutation(C)
    arm = np.concatenate([rng.permutation(A - 1), [A - 1]]) if keep_last else rng.permutation(A)

    def relabel(field):
        field = np.asarray(field)
        if field.ndim == 2:
            return field[ctx][:, arm]
        return field[ctx] if field.ndim == 1 else field

    return EnvParams(*(relabel(f) for f in params))


def as_dtype(params: EnvParams, dtype) -> EnvParams:
    """Cast every floating field to ``dtype`` (NumPy); ``lognormal`` stays bool.

    Sampling then runs in ``dtype``; keep the float64 ``rho_star`` / ``gap`` of the original for
    exact regret totals.
    """
    return EnvParams(
        *(
            np.asarray(f, dtype=dtype) if np.issubdtype(np.asarray(f).dtype, np.floating) else f
            for f in params
        )
    )
