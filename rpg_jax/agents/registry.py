"""Agents by name, as used by the figure and benchmark entry points.

Names (DESIGN.md section 5): ``npg-niw`` (= RPG in the bandit), ``spg-niw``, ``cucb-tuned``,
``cucb-theory`` (constants from the true means, Gyorgy et al. 2007), ``cucb-sampled``
(M = 2,048 sampled policies in lambda_t, for |X| > 4).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from rpg_jax.agents.base import Agent
from rpg_jax.agents.cucb import CUCBHyper, make_cucb, theory_constants
from rpg_jax.agents.npg import PGHyper, make_pg_agent

__all__ = ["AGENT_NAMES", "check_agent_name", "make_agent"]

AGENT_NAMES = ("npg-niw", "spg-niw", "cucb-tuned", "cucb-theory", "cucb-sampled")


def check_agent_name(name: str) -> str:
    """Return ``name`` if it is a known agent, else raise ``ValueError`` naming it."""
    if name not in AGENT_NAMES:
        raise ValueError(f"unknown agent {name!r}; valid agents: {', '.join(AGENT_NAMES)}")
    return name


@functools.lru_cache(maxsize=64)
def _build(name: str, n_contexts: int, n_actions: int) -> Agent:
    """One Agent object per (name, C, A), so the simulator's compiled code is reused."""
    if name in ("npg-niw", "spg-niw"):
        return make_pg_agent(n_contexts, n_actions, natural=(name == "npg-niw"))
    return make_cucb(n_contexts, n_actions, exact=(name != "cucb-sampled"))


def make_agent(
    name: str,
    n_contexts: int,
    n_actions: int,
    hyper: Mapping[str, float] | None = None,
    rbar: np.ndarray | None = None,
    dbar: np.ndarray | None = None,
    dtype: Any = jnp.float32,
) -> tuple[Agent, Any, dict[str, float]]:
    """Build agent ``name`` for ``n_contexts`` contexts and ``n_actions`` actions (incl. SKIP).

    Args:
      name: one of :data:`AGENT_NAMES`.
      hyper: hyper-parameters (``lr``, ``age_bound`` for the policy-gradient agents; ``c1``,
        ``c2`` for ``cucb-tuned`` / ``cucb-sampled``). Ignored by ``cucb-theory``.
      rbar, dbar: ``(C, A)`` exact means of the *unpermuted* instance; required by
        ``cucb-theory`` (its constants use only their extremes, which permutation keeps).
      dtype: float dtype of the hyper-parameter scalars.

    Returns:
      ``(agent, hyper_tuple, hyper_dict)``: the hyper-parameters actually used, as the
      NamedTuple the agent takes and as plain floats for the CSV.

    Raises:
      ValueError: unknown name, missing hyper-parameters or means.
    """
    check_agent_name(name)
    hyper = dict(hyper or {})
    if name in ("npg-niw", "spg-niw"):
        missing = {"lr", "age_bound"} - hyper.keys()
        if missing:
            raise ValueError(f"agent {name!r} needs hyper-parameters {sorted(missing)}")
        agent = _build(name, n_contexts, n_actions)
        used = {"lr": float(hyper["lr"]), "age_bound": float(hyper["age_bound"])}
        return (
            agent,
            PGHyper(lr=jnp.asarray(used["lr"], dtype), age_bound=jnp.asarray(used["age_bound"])),
            used,
        )
    if name == "cucb-theory":
        if rbar is None or dbar is None:
            raise ValueError("agent 'cucb-theory' needs the true means rbar, dbar")
        c = theory_constants(np.asarray(rbar), np.asarray(dbar))
        used = {"c1": float(c.c1), "c2": float(c.c2)}
    else:
        missing = {"c1", "c2"} - hyper.keys()
        if missing:
            raise ValueError(f"agent {name!r} needs hyper-parameters {sorted(missing)}")
        used = {"c1": float(hyper["c1"]), "c2": float(hyper["c2"])}
    agent = _build(name, n_contexts, n_actions)
    return (
        agent,
        CUCBHyper(c1=jnp.asarray(used["c1"], dtype), c2=jnp.asarray(used["c2"], dtype)),
        used,
    )
