"""The parent buffer of Algorithm 1: the nodes the next prompts improve on.

Reference facts (DESIGN.md section 7): the parent buffer holds only *valid* samples (the seed
solutions included) as nodes. After each step's valid samples are added, it is trimmed to its
capacity (``10 B``) by the ranking key ``raw_reward - price * exec_time`` at the current price
(RPG: ``rho_hat``; vanilla: 0, the raw reward; ties: the older node stays), so it keeps the best
nodes ever seen, not the most recent ones, and a trimmed node is gone for good. The next ``B``
parents are its top ``B`` by the same key, repeated in order when it holds fewer.

The durable store (:class:`rpg_llm.loop.buffer.SampleBuffer`) keeps every sample; this buffer is
a view over it, rebuilt on resume by replaying the stored steps in order
(:meth:`rpg_llm.loop.pipeline.RunEnv.rebuild`), which gives the same nodes as the first time
because the prices are replayed too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.rewards import relative_reward

__all__ = ["ParentPool", "rank"]


def rank(samples: Sequence[Sample], price: float | None) -> list[Sample]:
    """``samples`` sorted by the ranking key ``raw_reward - price * exec_time``
    (:func:`rpg_llm.loop.rewards.relative_reward`; ``price=None``: the raw reward), highest
    first, ties to the smaller id (the older sample).

    Raises:
        ValueError: ``price`` negative or not finite.
    """
    if not samples:
        return []
    raw = np.array([s.raw_reward for s in samples], dtype=np.float64)
    times = np.array([s.exec_time for s in samples], dtype=np.float64)
    keys = relative_reward(raw, times, 0.0 if price is None else float(price))
    order = sorted(range(len(samples)), key=lambda i: (-keys[i], _id(samples[i])))
    return [samples[i] for i in order]


def _id(s: Sample) -> int:
    if s.id is None:
        raise ValueError(f"a parent must be a stored sample (an id): step {s.step} row {s.row}")
    return s.id


class ParentPool:
    """The parent buffer of one run (module docstring).

    Args:
        capacity: the most nodes it keeps (DESIGN.md: ``10 B``).

    Raises:
        ValueError: ``capacity < 1``.
    """

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.capacity = capacity
        self.nodes: list[Sample] = []

    def add(self, samples: Sequence[Sample], price: float | None) -> None:
        """Add the valid (``status == "ok"``) stored samples of one step, then keep the best
        ``capacity`` nodes by the key at ``price`` (reward per second; None: the raw reward).

        Raises:
            ValueError: a valid sample without an id, or a bad ``price``.
        """
        known = {_id(s) for s in self.nodes}
        fresh = [s for s in samples if s.status == "ok" and _id(s) not in known]
        self.nodes = rank([*self.nodes, *fresh], price)[: self.capacity]

    def top(
        self,
        k: int,
        rho: float | None,
        *,
        eligible: Callable[[Sample], bool] | None = None,
    ) -> list[Sample]:
        """The ``k`` parents for the next prompts: the nodes by the key at ``rho`` (None: raw
        reward), repeated in order to length ``k`` when fewer; ``[]`` when empty. ``eligible``
        (optional) keeps only the nodes it accepts (e.g. scripts the edit format can edit),
        unless it accepts none: then all stay.

        Raises:
            ValueError: ``k < 0`` or ``rho`` negative or not finite.
        """
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        if rho is not None and not (isinstance(rho, int | float) and math.isfinite(rho)):
            raise ValueError(f"rho must be a finite number or None, got {rho!r}")
        pool = self.nodes
        if not pool or k == 0:
            return []
        if eligible is not None:
            pool = [s for s in pool if eligible(s)] or pool
        ranked = rank(pool, rho)
        return [ranked[i % len(ranked)] for i in range(k)]
