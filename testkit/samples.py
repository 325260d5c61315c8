"""Hand-made buffer samples for the buffer and parent-selection tests.

``toy_sample(i, reward, time_s, run="r", **changes)``: a valid :class:`rpg_llm.loop.buffer.Sample`
of task ``toy`` numbered ``i`` (step ``i // 4``, row ``i % 4``, code ``print(i)``, score =
raw reward = ``reward``, ``exec_time`` = ``time_s`` seconds, created at ``1000 + i``); the
``changes`` replace any field.
"""

from __future__ import annotations

from typing import Any

__all__ = ["toy_sample"]


def toy_sample(i: int, reward: float = 0.0, time_s: float = 1.0, run: str = "r", **changes: Any):
    """A toy Sample (fields as in the module docstring, ``changes`` applied)."""
    from rpg_llm.loop.buffer import Sample

    fields: dict[str, Any] = dict(
        run=run,
        step=i // 4,
        row=i % 4,
        task="toy",
        parent_id=None,
        prompt_hash=f"h{i}",
        code=f"print({i})",
        outcome_text=f"score {reward}",
        score=reward,
        raw_reward=reward,
        exec_time=time_s,
        status="ok",
        created_at=1000.0 + i,
    )
    return Sample(**(fields | changes))
