"""Agents by name, as used by the figure and benchmark entry points.

Names (DESIGN.md section 5): ``npg-niw`` (= RPG in the bandit), ``spg-niw``, ``cucb-tuned``,
``cucb-theory`` (constants from the true means, Gyorgy et al. 2007), ``cucb-sampled``
(M = 2,048 sampled policies in lambda_t, for |X| > 4); NPG with another reward-rate estimator
behind the same feeding: ``npg-niw-mean`` (the NIW posterior-mean rate) and ``npg-rm`` (the
Robbins-Monro running rate, ``rpg_jax.robbins_monro``) and ``npg-learned`` (a network fitted on
the labelled slots, then Dinkelbach iterations, ``rpg_jax.learned``); :data:`ESTIMATOR_AGENTS`
names them by estimator.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from rpg_jax.agents.base import Agent
from rpg_jax.agents.cucb import CUCBHyper, make_cucb, theory_constants
from rpg_jax.agents.npg import PGHyper, make_pg_agent, reference_estimator

__all__ = [
    "AGENT_NAMES",
    "PG_AGENTS",
    "ESTIMATOR_AGENTS",
    "check_agent_name",
    "make_agent",
    "validate_agent",
]

# policy-gradient agents: name -> (estimator, natural gradient)
PG_AGENTS = {
    "npg-niw": ("niw", True),
    "spg-niw": ("niw", False),
    "npg-niw-mean": ("niw-mean", True),
    "npg-rm": ("robbins-monro", True),
    "npg-learned": ("learned", True),
}
ESTIMATOR_AGENTS = {est: name for name, (est, natural) in PG_AGENTS.items() if natural}
"""NPG by reward-rate estimator (``rpg_jax.agents.npg.ESTIMATORS``): ``niw`` -> ``npg-niw``."""
AGENT_NAMES = (*PG_AGENTS, "cucb-tuned", "cucb-theory", "cucb-sampled")


def check_agent_name(name: str) -> str:
    """Return ``name`` if it is a known agent, else raise ``ValueError`` naming it."""
    if name not in AGENT_NAMES:
        raise ValueError(f"unknown agent {name!r}; valid agents: {', '.join(AGENT_NAMES)}")
    return name


def _check_positive(
    name: str,
    values: dict[str, float],
    dtypes: dict[str, Any],
    allow_zero: tuple[str, ...] = (),
) -> dict[str, float]:
    """Cast each hyper-parameter to the dtype the agent will use and check it THERE.

    Raises ``ValueError`` naming the first hyper-parameter that is not finite and > 0 (``>= 0``
    for names in ``allow_zero``) in its dtype: ``lr = 1e39`` is finite in float64 but ``inf`` in
    float32, and ``1e-50`` is 0 in float32. Returns ``values`` (the CSV keeps the values as
    given; the agent gets them cast to its dtype)."""
    used = {}
    for key, v in values.items():
        dt = np.dtype(dtypes[key])
        with np.errstate(over="ignore", under="ignore"):
            cast = float(np.asarray(v, np.float64).astype(dt))
        ok = np.isfinite(cast) and (cast >= 0 if key in allow_zero else cast > 0)
        if not ok:
            bound = ">= 0" if key in allow_zero else "> 0"
            raise ValueError(
                f"agent {name!r}: hyper-parameter {key} must be finite and {bound} in {dt.name}, "
                f"got {v} ({cast} in {dt.name})"
            )
        used[key] = float(v)
    return used


def _float_dtype(dtype: Any) -> np.dtype:
    """The float dtype JAX will really use for ``dtype`` (float64 -> float32 without x64)."""
    dt = jnp.zeros((), dtype).dtype
    if not jnp.issubdtype(dt, jnp.floating):
        raise ValueError(f"dtype must be a floating dtype, got {dtype!r}")
    return np.dtype(dt)


@functools.lru_cache(maxsize=64)
def _build(name: str, n_contexts: int, n_actions: int) -> Agent:
    """One Agent object per (name, C, A), so the simulator's compiled code is reused."""
    if name in PG_AGENTS:
        estimator, natural = PG_AGENTS[name]
        return make_pg_agent(
            n_contexts,
            n_actions,
            natural=natural,
            estimator=reference_estimator(estimator, n_contexts=n_contexts, n_actions=n_actions),
        )
    return make_cucb(n_contexts, n_actions, exact=(name != "cucb-sampled"))


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
        finite and positive in the dtype it is used in (``c2`` may be 0; e.g. ``lr = 1e39`` with
        float32), a non-float ``dtype``, or too many policies for exact C-UCB.
    """
    check_agent_name(name)
    hyper = dict(hyper or {})
    if name in PG_AGENTS:
        missing = {"lr", "age_bound"} - hyper.keys()
        if missing:
            raise ValueError(f"agent {name!r} needs hyper-parameters {sorted(missing)}")
        age_dtype = jnp.asarray(1.0).dtype  # the default float dtype (float64 only with x64)
        used = _check_positive(
            name,
            {"lr": float(hyper["lr"]), "age_bound": float(hyper["age_bound"])},
            {"lr": _float_dtype(dtype), "age_bound": age_dtype},
        )
        agent = _build(name, n_contexts, n_actions)
        return (
            agent,
            PGHyper(lr=jnp.asarray(used["lr"], dtype), age_bound=jnp.asarray(used["age_bound"])),
            used,
        )
    if name == "cucb-theory":
        if rbar is None or dbar is None:
            raise ValueError("agent 'cucb-theory' needs the true means rbar, dbar")
        c = theory_constants(np.asarray(rbar), np.asarray(dbar))
        dt = _float_dtype(dtype)
        used = _check_positive(
            name, {"c1": float(c.c1), "c2": float(c.c2)}, {"c1": dt, "c2": dt}, ("c2",)
        )
    else:
        missing = {"c1", "c2"} - hyper.keys()
        if missing:
            raise ValueError(f"agent {name!r} needs hyper-parameters {sorted(missing)}")
        dt = _float_dtype(dtype)
        used = _check_positive(
            name,
            {"c1": float(hyper["c1"]), "c2": float(hyper["c2"])},
            {"c1": dt, "c2": dt},
            allow_zero=("c2",),
        )
    agent = _build(name, n_contexts, n_actions)
    return (
        agent,
        CUCBHyper(c1=jnp.asarray(used["c1"], dtype), c2=jnp.asarray(used["c2"], dtype)),
        used,
    )
