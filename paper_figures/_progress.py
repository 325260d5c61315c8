"""Progress inside one simulation call: a host callback every ``every`` decisions, with a tqdm bar.

``with_progress(agent, every)`` wraps an :class:`rpg_jax.agents.base.Agent` so that its state
carries an int32 decision counter. The counter starts at the same constant in every lane and
depends only on itself, so under the simulator's ``vmap`` it stays *unbatched*: the
``lax.cond(t % every == 0, ...)`` around the ``jax.debug.callback`` stays a real branch and the
callback (whose only argument is the unbatched counter) fires once per ``every`` decisions for the
whole batch, not once per seed (JAX applies a primitive's batching rule only to batched inputs).
With the seed axis sharded over ``D`` devices it fires once per device; the bar keeps the maximum.
The wrapped agent draws nothing and changes nothing in the inner agent: its trajectories equal the
unwrapped agent's exactly (tests/figures/test_regret_vs_arms_cli.py checks it).

Cost: JAX never writes an executable that carries host callbacks to the persistent compilation
cache (``jax/_src/compiler.py``), so a run with progress compiles every cell afresh; the
entry points' ``--no-progress`` runs the plain agent, whose compiled code is cached across runs.

``progress_bar(total, desc)`` installs the sink that the callback feeds; the bar's clock starts at
the first tick, so its ETA is measured on simulation time only (compilation excluded).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp

from rpg_jax.agents.base import Agent

__all__ = ["progress_bar", "tick_every", "with_progress"]

_SINKS: list[Callable[[int], None]] = []


def _tick(t) -> None:
    """Host side of the callback: pass the decision count to the innermost active sink."""
    if _SINKS:
        _SINKS[-1](int(t))


def tick_every(n_steps: int, ticks: int = 100) -> int:
    """Decisions between two callbacks: ``max(1, n_steps // ticks)``."""
    return max(1, int(n_steps) // int(ticks))


@functools.lru_cache(maxsize=64)
def with_progress(agent: Agent, every: int) -> Agent:
    """``agent`` with a decision counter that calls the active sink every ``every`` decisions.

    The state becomes ``(inner_state, t)`` with ``t`` an int32 scalar (decisions done); ``act``
    and ``update`` pass the inner state, hyper-parameters and keys through unchanged; the sizes
    ``n_contexts`` / ``n_actions`` are kept, so the simulator still checks them against the
    environment. Cached per ``(agent, every)`` so the simulator's compiled code is reused.
    """
    every = int(every)

    def init(hyper, key):
        return agent.init(hyper, key), jnp.zeros((), jnp.int32)

    def act(state, hyper, x, key):
        return agent.act(state[0], hyper, x, key)

    def update(state, hyper, x, a, r, delta, key):
        inner, t = state
        inner = agent.update(inner, hyper, x, a, r, delta, key)
        t = t + 1

        def fire(t):
            jax.debug.callback(_tick, t)

        jax.lax.cond(t % every == 0, fire, lambda t: None, t)
        return inner, t

    return agent._replace(init=init, act=act, update=update)


@contextlib.contextmanager
def progress_bar(total: int, desc: str, *, disable: bool = False) -> Iterator[Callable[[], int]]:
    """A tqdm bar of ``total`` decisions fed by :func:`with_progress` agents while active.

    Yields a function returning the largest decision count seen so far. The bar is created at the
    first tick (before it, a one-line "compiling" note is printed), so elapsed time and ETA
    exclude compilation.
    """
    from tqdm import tqdm

    state: dict = {"bar": None, "done": 0}
    t0 = time.perf_counter()

    def sink(t: int) -> None:
        if t <= state["done"]:
            return
        if state["bar"] is None and not disable:
            print(f"{desc}: compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            state["bar"] = tqdm(total=total, desc=desc, unit="dec", file=sys.stderr)
        if state["bar"] is not None:
            state["bar"].update(t - state["done"])
        state["done"] = t

    _SINKS.append(sink)
    try:
        yield lambda: state["done"]
    finally:
        _SINKS.remove(sink)
        if state["bar"] is not None:
            state["bar"].close()
