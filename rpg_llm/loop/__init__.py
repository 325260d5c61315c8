"""The self-improvement loop (paper Algorithm 1): what turns (reward, delta) into training.

Owns the durable state of a run and the stages that string the environment and the learner
together: ``buffer`` (every sample, SQLite), ``runfolder`` (the run folder, its lock, resume
records), ``estimator`` (the NIW reward-rate estimator, torch backend), ``accounting`` (the rate
tracker: slot sums, refits of ``rho_hat``, relative rewards), ``rewards`` (the reward formulas),
``budget`` (execution budgets, the stop rule and budget curves), ``pipeline`` (:class:`RunEnv`:
the environment side of a run and the stages after generation, shared by both engines), one
module per stage: ``rollout`` (parents, prompts, generation), ``execution`` (scripts ->
samples), ``update`` (PPO), ``recording`` (metrics, TensorBoard, checkpoints); ``dist`` (several
processes), ``backends`` (the injectable environment), ``setup`` and ``warm_start`` (the PPO
learner) and ``trainer`` (:class:`Trainer`, :func:`train`: the PPO engine).

The names below are imported on first use, so ``rpg_llm.loop.buffer``, ``.runfolder``,
``.rewards`` and ``.budget`` can be read without torch (e.g. by ``paper_figures``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "LoopConfig": "rpg_llm.config",
    "SamplingConfig": "rpg_llm.config",
    "Accounts": "rpg_llm.loop.accounting",
    "RateTracker": "rpg_llm.loop.accounting",
    "Backends": "rpg_llm.loop.backends",
    "default_backends": "rpg_llm.loop.backends",
    "StepRecord": "rpg_llm.loop.recording",
    "Rollout": "rpg_llm.loop.rollout",
    "RunEnv": "rpg_llm.loop.pipeline",
    "Answers": "rpg_llm.loop.pipeline",
    "Executed": "rpg_llm.loop.pipeline",
    "SEED_STEP": "rpg_llm.loop.pipeline",
    "Trainer": "rpg_llm.loop.trainer",
    "train": "rpg_llm.loop.trainer",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import ``name`` from its module on first use (PEP 562)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rpg_llm.loop' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
