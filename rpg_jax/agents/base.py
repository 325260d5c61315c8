"""The agent interface shared by every bandit agent (NPG-NIW, SPG-NIW, C-UCB).

An agent is three pure, single-seed functions bundled in an :class:`Agent`. The simulator
(``rpg_jax/simulate.py``) runs ``lax.scan`` over decisions and ``vmap`` over seeds (and over
hyper-parameter grids), so every function must be jittable and free of Python side effects.

Conventions (rlax / gymnax style):

- ``hyper`` is a ``NamedTuple`` of JAX scalars (shape ``()``), e.g. a learning rate. Because its
  leaves are arrays, a grid of hyper-parameters is simply a ``hyper`` with leading batch axes and
  can be vmapped without recompiling.
- Static configuration (numbers of contexts and actions, number of slots, which estimator, ...)
  is fixed by the ``make_*`` factory that closes over it and returns the :class:`Agent`.
- ``state`` is a ``NamedTuple`` pytree of arrays with fixed shapes and dtypes.
- ``x`` (context) and ``a`` (action) are int32 scalars; ``r`` (reward) and ``delta`` (duration,
  abstract time units in the bandits) are float scalars of the simulation dtype.
- ``key`` is a ``jax.random`` key; each function receives its own and must not reuse it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

__all__ = ["Agent"]


class Agent(NamedTuple):
    """A bandit agent as three pure functions (DESIGN.md section 5).

    Attributes:
      init: ``(hyper, key) -> state``; the state before the first decision.
      act: ``(state, hyper, x, key) -> a``; an int32 scalar action in ``0..A-1`` for context ``x``.
      update: ``(state, hyper, x, a, r, delta, key) -> state``; the state after observing reward
        ``r`` and duration ``delta`` of action ``a`` taken in context ``x``.
      n_contexts: number of contexts ``C`` the agent was built for, or None (unknown / any).
      n_actions: number of actions ``A`` the agent was built for, or None (unknown / any).
        ``rpg_jax.simulate.simulate`` refuses an environment of another size.
    """

    init: Callable
    act: Callable
    update: Callable
    n_contexts: int | None = None
    n_actions: int | None = None
