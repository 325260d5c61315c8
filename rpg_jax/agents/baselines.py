"""Baseline agents that do not learn: uniformly random and fixed-action policies.

Used as reference points (a learning agent's regret must be well below the uniform policy's) and
by tests of the simulator, where their regret has a closed form.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rpg_jax.agents.base import Agent

__all__ = ["NoHyper", "make_uniform_agent", "make_fixed_agent"]


class NoHyper(NamedTuple):
    """Empty hyper-parameters."""


def _check_actions(n_actions: int) -> int:
    if int(n_actions) != n_actions or n_actions < 1:
        raise ValueError(f"n_actions must be a positive int, got {n_actions!r}")
    return int(n_actions)


def make_uniform_agent(n_actions: int) -> Agent:
    """Agent that picks each of ``n_actions`` actions with probability ``1 / n_actions``.

    Its expected pseudo-regret per decision is ``sum_x p(x) mean_a GAP(x, a)``.
    Raises ``ValueError`` if ``n_actions < 1``.
    """
    n = _check_actions(n_actions)

    def init(hyper, key):
        return jnp.zeros((), jnp.int32)

    def act(state, hyper, x, key):
        return jax.random.randint(key, (), 0, n, dtype=jnp.int32)

    def update(state, hyper, x, a, r, delta, key):
        return state + 1

    return Agent(init, act, update, n_actions=n)


def make_fixed_agent(n_actions: int, action: int) -> Agent:
    """Agent that always plays ``action`` (in ``0..n_actions-1``; ``ValueError`` otherwise)."""
    n = _check_actions(n_actions)
    if not 0 <= action < n:
        raise ValueError(f"action must be in 0..{n - 1}, got {action!r}")

    def init(hyper, key):
        return jnp.zeros((), jnp.int32)

    def act(state, hyper, x, key):
        return jnp.asarray(action, jnp.int32)

    def update(state, hyper, x, a, r, delta, key):
        return state + 1

    return Agent(init, act, update, n_actions=n)
