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

__all__ = ["AGENT_NAMES", "check_agent_name", "make_agent", "validate_agent"]

AGENT_NAMES = ("npg-niw", "spg-niw", "cucb-tuned", "cucb-theory", "cucb-sampled")


def check_agent_name(name: str) -> str:
    """Return ``name`` if it is a known agent, else raise ``ValueError`` naming it."""
    if name not in AGENT_NAMES:
        raise ValueError(f"unknown agent {name!r}; valid agents: {', '.join(AGENT_NAMES)}")
    return name


def _check_positive(name: str, values: dict[str, float], allow_zero: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` naming the first hyper-parameter that is not finite and > 0
    (``>= 0`` for names in ``allow_zero``)."""
    for key, v in values.items():
        ok = np.isfinite(v) and (v >= 0 if key in allow_zero else v > 0)
        if not ok:
            bound = ">= 0" if key in allow_zero else "> 0"
            raise ValueError(
                f"agent {name!r}: hyper-parameter {key} must be finite and {bound}, got {v}"
            )


@functools.lru_cache(maxsize=64)
def _build(name: str, n_contexts: int, n_actions: int) -> Agent:
    """One Agent object per (name, C, A), so the simulator's compiled code is reused."""
    if name in ("npg-niw", "spg-niw"):
        return make_pg_agent(n_contexts, n_actions, natural=(name == "npg-niw"))
    agent = make_cucb(n_contexts, n_actions, exact=(name != "cucb-sampled"))
    return agent._replace(n_contexts=n_contexts, n_actions=n_actions)


def validate_agent(
    name: str, n_contexts: int, n_actions: int, hyper: Mapping[str, float] | None = None
) -> None:
    """Check that agent ``name`` can be built for this size with these hyper-parameters, without
    compiling anything (``cucb-theory`` takes its constants from the means, so ``hyper`` is not
    needed for it). Raises ``ValueError`` as :func:`make_agent` does."""
    check_agent_name(name)
    if name == "cucb-theory":
        _build(name, n_contexts, n_actions)
    else:
        make_agent(name, n_contexts, n_actions, hyper)


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
      ValueError: unknown name, missing hyper-parameters or means, a hyper-parameter that is not
        finite and positive (``c2`` may be 0), or too many policies for exact C-UCB.
    """
    check_agent_name(name)
    hyper = dict(hyper or {})
    if name in ("npg-niw", "spg-niw"):
        missing = {"lr", "age_bound"} - hyper.keys()
        if missing:
            raise ValueError(f"agent {name!r} needs hyper-parameters {sorted(missing)}")
        agent = _build(name, n_contexts, n_actions)
        used = {"lr": float(hyper["lr"]), "age_bound": float(hyper["age_bound"])}
        _check_positive(name, used)
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
        _check_positive(name, used, allow_zero=("c2",))
    agent = _build(name, n_contexts, n_actions)
    return (
        agent,
        CUCBHyper(c1=jnp.asarray(used["c1"], dtype), c2=jnp.asarray(used["c2"], dtype)),
        used,
    )
