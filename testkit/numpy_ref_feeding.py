"""NumPy transcription of the reference estimator feeding of the bandit PG agents (tests only).

A line-by-line transcription of DESIGN.md section 5 "Estimator feeding in the bandit PG agents"
(the reference's 'gage' mode), written independently of ``rpg_jax.agents.npg`` so the two can be
compared decision by decision on the same random streams. One decision, in this order:

1. ``t += 1`` (``t`` counts decisions from 1).
2. Feed only if ``a == argmax theta[x]`` (pre-update theta, lowest index on ties) into slot
   ``i = ptr``; first, if slot ``i`` holds >= 1 sample and ``t - birth[i] > age_bound``, empty it
   and set ``birth[i] = t`` (``birth`` starts at 0 and changes only here); add the sample;
   ``ptr = (i + 1) % S``.
3. Refit only right after a fed sample, only when ``t % refit_every == 0`` and >= 2 slots are
   non-empty, on the non-empty slots only; else ``rho`` keeps its value (starts at 0).
4. ``pi = softmax(theta[x])``; 5. arm statistics, ``Q = (sum_r - rho sum_d) / max(n, 1)``, 0 where
   ``n = 0``; 6. NPG ``theta[x] += lr (Q - pi.Q)`` or SPG ``theta[x] += lr pi (Q - pi.Q)``.
Acting: ``a = argmax(theta[x] + g_t)`` with the decision's Gumbel vector ``g_t`` (Gumbel-max, i.e.
``a ~ pi``); the caller supplies the streams (contexts, Gumbel vectors, per-action outcomes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

__all__ = ["FeedingTrace", "run_reference_feeding"]


class FeedingTrace(NamedTuple):
    """Per-decision record of :func:`run_reference_feeding` (``T`` decisions, ``S`` slots).

    Attributes:
      actions: int64 ``(T,)``. fed: bool ``(T,)``.
      slot_r, slot_d: float64 ``(T, S)`` slot sums after the decision. slot_n: int64 ``(T, S)``.
      slot_birth: int64 ``(T, S)``. slot_ptr: int64 ``(T,)``.
      rho: float64 ``(T,)`` the estimate used by the decision's step. theta: float64 ``(T, C, A)``.
      refits: list of ``(t, n)``: decision number and non-empty slot count of every refit.
      resets: list of ``(t, i)``: decision number and slot of every age reset.
    """

    actions: np.ndarray
    fed: np.ndarray
    slot_r: np.ndarray
    slot_d: np.ndarray
    slot_n: np.ndarray
    slot_birth: np.ndarray
    slot_ptr: np.ndarray
    rho: np.ndarray
    theta: np.ndarray
    refits: list
    resets: list


def run_reference_feeding(
    contexts: np.ndarray,
    gumbels: np.ndarray,
    rewards: np.ndarray,
    durations: np.ndarray,
    lr: float,
    age_bound: float,
    rho_fn: Callable[[np.ndarray, np.ndarray, int], float],
    *,
    n_contexts: int,
    natural: bool = True,
    num_slots: int = 128,
    refit_every: int = 8,
) -> FeedingTrace:
    """Run NPG-/SPG-NIW with the reference feeding on fixed streams (DESIGN.md section 5).

    Args:
      contexts: int ``(T,)`` context of each decision.
      gumbels: float ``(T, A)`` Gumbel noise of each decision (action = argmax(theta[x] + g)).
      rewards, durations: float ``(T, A)``: the outcome each action would get at that decision.
      lr: step size; age_bound: slot age bound in decisions.
      rho_fn: ``(slot_r, slot_d, t) -> rho`` called at each refit with the non-empty slots only
        (arrays of length ``n``) and the decision number ``t``; returns the new estimate.
      n_contexts: ``C``. natural: NPG (True) or SPG. num_slots: ``S``. refit_every: 8.

    Returns:
      :class:`FeedingTrace`.
    """
    T, A = gumbels.shape
    C, S = int(n_contexts), int(num_slots)
    theta = np.zeros((C, A))
    n = np.zeros((C, A), dtype=np.int64)
    sum_r = np.zeros((C, A))
    sum_d = np.zeros((C, A))
    slot_r, slot_d = np.zeros(S), np.zeros(S)
    slot_n, birth = np.zeros(S, dtype=np.int64), np.zeros(S, dtype=np.int64)
    ptr, rho, t = 0, 0.0, 0
    rec = {k: [] for k in ("a", "fed", "sr", "sd", "sn", "sb", "ptr", "rho", "theta")}
    refits, resets = [], []
    for step in range(T):
        x = int(contexts[step])
        a = int(np.argmax(theta[x] + gumbels[step]))
        r, d = float(rewards[step, a]), float(durations[step, a])
        t += 1
        fed = a == int(np.argmax(theta[x]))
        if fed:
            i = ptr
            if slot_n[i] >= 1 and t - birth[i] > age_bound:
                slot_r[i] = slot_d[i] = 0.0
                slot_n[i] = 0
                birth[i] = t
                resets.append((t, i))
            slot_r[i] += r
            slot_d[i] += d
            slot_n[i] += 1
            ptr = (i + 1) % S
            nonempty = slot_n >= 1
            if t % refit_every == 0 and nonempty.sum() >= 2:
                rho = float(rho_fn(slot_r[nonempty], slot_d[nonempty], t))
                refits.append((t, int(nonempty.sum())))
        z = theta[x] - theta[x].max()
        pi = np.exp(z) / np.exp(z).sum()
        n[x, a] += 1
        sum_r[x, a] += r
        sum_d[x, a] += d
        q = np.where(n[x] > 0, (sum_r[x] - rho * sum_d[x]) / np.maximum(n[x], 1), 0.0)
        adv = q - pi @ q
        theta[x] += lr * (adv if natural else pi * adv)
        for k, v in (
            ("a", a), ("fed", fed), ("sr", slot_r.copy()), ("sd", slot_d.copy()),
            ("sn", slot_n.copy()), ("sb", birth.copy()), ("ptr", ptr), ("rho", rho),
            ("theta", theta.copy()),
        ):  # fmt: skip
            rec[k].append(v)
    return FeedingTrace(
        actions=np.asarray(rec["a"]),
        fed=np.asarray(rec["fed"]),
        slot_r=np.asarray(rec["sr"]),
        slot_d=np.asarray(rec["sd"]),
        slot_n=np.asarray(rec["sn"]),
        slot_birth=np.asarray(rec["sb"]),
        slot_ptr=np.asarray(rec["ptr"]),
        rho=np.asarray(rec["rho"]),
        theta=np.asarray(rec["theta"]),
        refits=refits,
        resets=resets,
    )
