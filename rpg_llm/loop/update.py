"""Update stage: one PPO step on this process's rows (paper Algorithm 1, line 11).

Rows whose sample has status ``infra`` are dropped from the batch (their reward says nothing
about the script). With several processes every process must run the same number of optimiser
steps, so each keeps as many of its rows as the process with the fewest usable rows; when a
process has none, no process updates this step.
"""

from __future__ import annotations

import time

import numpy as np

from rpg_llm.learner.ppo import PPOBatch, PPOTrainer
from rpg_llm.loop.rollout import Rollout

__all__ = ["trainable_rows", "ppo_update"]


def trainable_rows(batch_size: int, world: int, rank: int, infra: np.ndarray) -> list[int]:
    """This process's rows to train on.

    Args:
        batch_size: ``B``; world, rank: the process group; infra: ``[B]`` bool mask.

    Returns:
        Rows ``rank, rank + world, ...`` without the infra rows, cut to the smallest such count
        over all processes (the same on every process, computed from the shared mask).
    """
    shards = [[i for i in range(r, batch_size, world) if not infra[i]] for r in range(world)]
    n = min(len(s) for s in shards)
    return shards[rank][:n]


def ppo_update(
    ppo: PPOTrainer, rollout: Rollout, rewards: np.ndarray, rows: list[int], pad_id: int
) -> tuple[dict[str, float], float]:
    """One PPO step on ``rows`` of ``rollout`` with scalar ``rewards`` ``[B]``; returns (the
    trainer's statistics, seconds). No rows: no update, ``({}, 0.0)``."""
    if not rows:
        return {}, 0.0
    batch = PPOBatch.from_lists(
        [rollout.query_ids[i] for i in rows],
        [rollout.response_ids[i] for i in rows],
        [float(rewards[i]) for i in rows],
        pad_id,
    )
    t0 = time.perf_counter()
    stats = ppo.step(batch)
    return stats, time.perf_counter() - t0
