"""Rewards of the NanoGPT speedrun task for both arms (paper section 5.2).

With ``L`` the (official) best validation loss of a sample, ``L*`` the target (3.28 in the
speedrun), ``delta`` its wall time in seconds:

* RPG arm, before ``- rho_hat * delta``: valid and ``L <= L*``:
  ``max(0, 10 - L) + 5 + 100 min(L* - L, 0.03)``; valid and ``L > L*``: ``max(0, 10 - L)``;
  invalid: ``-10``.  The reward-rate estimator is fed ``max(0, 10 - L)`` for valid samples and
  ``0`` for invalid ones; invalid samples are charged the full timeout.
* vanilla arm: valid and ``L <= L*``: ``-delta + 20000 min(L* - L, 0.03)``; valid and
  ``L > L*``: ``-1500 - 20000 min(L - L*, 0.03)``; invalid: ``-3000``.
"""

from __future__ import annotations

import math

__all__ = [
    "RPG_INVALID_REWARD",
    "VANILLA_INVALID_REWARD",
    "rpg_reward",
    "rate_reward",
    "vanilla_reward",
    "charged_time",
]

RPG_INVALID_REWARD = -10.0
VANILLA_INVALID_REWARD = -3000.0
_MARGIN_CAP = 0.03


def _check_loss(loss: float | None, valid: bool) -> float:
    if not valid:
        return math.nan
    if loss is None or not isinstance(loss, int | float) or not math.isfinite(loss):
        raise ValueError(f"a valid sample needs a finite val loss, got {loss!r}")
    return float(loss)


def rpg_reward(loss: float | None, valid: bool, target: float) -> float:
    """RPG arm raw reward of one sample (before ``- rho_hat * delta``).

    Args:
      loss: best (official) validation loss, nats per token; ignored when ``valid`` is False.
      valid: the sample's validity (see ``env.validate``).
      target: ``L*``, nats per token.

    Raises:
      ValueError: a valid sample without a finite loss.
    """
    if not valid:
        return RPG_INVALID_REWARD
    L = _check_loss(loss, valid)
    base = max(0.0, 10.0 - L)
    if L <= target:
        return base + 5.0 + 100.0 * min(target - L, _MARGIN_CAP)
    return base


def rate_reward(loss: float | None, valid: bool) -> float:
    """The reward fed to the reward-rate estimator: ``max(0, 10 - L)`` if valid, else 0."""
    if not valid:
        return 0.0
    return max(0.0, 10.0 - _check_loss(loss, valid))


def vanilla_reward(loss: float | None, valid: bool, target: float, delta: float) -> float:
    """Vanilla arm reward of one sample (time enters only through ``-delta`` when it wins).

    Args:
      loss, valid, target: as in ``rpg_reward``.
      delta: wall time of the sample, seconds.

    Raises:
      ValueError: a valid sample without a finite loss, or a negative / non-finite ``delta``.
    """
    if not valid:
        return VANILLA_INVALID_REWARD
    L = _check_loss(loss, valid)
    if not math.isfinite(delta) or delta < 0:
        raise ValueError(f"delta must be a finite number of seconds >= 0, got {delta!r}")
    if L <= target:
        return -float(delta) + 20000.0 * min(target - L, _MARGIN_CAP)
    return -1500.0 - 20000.0 * min(L - target, _MARGIN_CAP)


def charged_time(valid: bool, delta: float, timeout_s: float) -> float:
    """Seconds charged to a sample in the RPG arm: ``delta`` if valid, else the full timeout."""
    return float(delta) if valid else float(timeout_s)
