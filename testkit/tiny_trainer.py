"""The in-process tiny-model loop settings the trainer tests share (edit format, text task).

``tiny_edit_config(model_dir, **changes)``: a :class:`rpg_llm.loop.LoopConfig` for the offline
text competition in the edit answer format with the tiny random model (``testkit.tiny_model``),
2 steps of B = 2, the subprocess sandbox, 100 estimator batches, short prompts and answers;
``changes`` are ``dataclasses.replace`` fields (``ppo=PPOConfig(...)`` etc.).
``bbc_backends(names)``: the loop's default backends with the bbc baselines limited to ``names``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

__all__ = ["tiny_edit_config", "bbc_backends"]


def tiny_edit_config(model_dir: Path | str, **changes: Any) -> Any:
    """The shared tiny edit-format LoopConfig, with ``changes`` applied."""
    from rpg_llm.config import RewardConfig
    from rpg_llm.learner.ppo import PPOConfig
    from rpg_llm.loop import LoopConfig, SamplingConfig

    base = LoopConfig(
        task="text",
        model=str(model_dir),
        steps=2,
        batch_size=2,
        workers=1,
        sandbox="subprocess",
        estimator_batches=100,
        action="edit",
        describe=False,
        seed_buffer=False,
        sampling=SamplingConfig(max_prompt_tokens=512, max_new_tokens=24, temperature=0.9),
        reward=RewardConfig("rpg", timeout_s=60.0),
        ppo=PPOConfig(micro_batch_size=2),
    )
    return replace(base, **changes)


def bbc_backends(names: Sequence[str]) -> Any:
    """``default_backends()`` whose baselines are bbc-news-logloss's ``names`` only."""
    from rpg_llm.env import tasks
    from rpg_llm.loop import default_backends

    b = default_backends()
    keep = set(names)
    b.baseline_solutions = lambda comp_id: [
        (n, c) for n, c in tasks.baseline_solutions("bbc-news-logloss") if n in keep
    ]
    return b
