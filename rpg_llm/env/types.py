"""The seams between the environment and whatever drives it: a task, its outcomes, its rewards.

An engine (our PPO loop, a TRL reward function) holds a :class:`Task` made by
:func:`rpg_llm.env.registry.make_task` and calls ``task.run_batch(codes, ...)``; every outcome is an
:class:`rpg_llm.env.execute.Outcome` (the NanoGPT task's carries more fields).  A task whose reward
is not the grader's score (NanoGPT: a val loss against a target) says so through
:meth:`Task.own_rewards`; the engine never needs to know which kind of task it has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from rpg_llm.env.execute import Outcome
    from rpg_llm.env.sandbox import BatchExecutor, Sandbox

__all__ = ["Task", "TaskRewards"]


class TaskRewards(NamedTuple):
    """A task's own rewards, where they are not the grader's score (NanoGPT: paper section 5.2).

    Attributes:
        rate: ``(score, valid) -> float``, what the reward-rate estimator's slots are fed.
        vanilla: ``(score, valid, delta_s) -> float``, the vanilla arm's reward.
    """

    rate: Callable[[Any, bool], float]
    vanilla: Callable[[Any, bool, float], float]


@runtime_checkable
class Task(Protocol):
    """What an engine needs of a task.

    Attributes:
        id: the task id (e.g. ``"bbc-news-logloss"``, ``"nanogpt-cpu"``).
        description: the task text the prompts show.
    """

    @property
    def id(self) -> str: ...

    @property
    def description(self) -> str: ...

    def run_batch(
        self,
        codes: Sequence[str],
        sandbox: Sandbox | str,
        timeout_s: float,
        executor: BatchExecutor | None = None,
    ) -> Sequence[Outcome]:
        """Run and grade ``codes`` (B scripts) in ``sandbox``; one outcome per code, in order."""
        ...

    def own_rewards(self) -> TaskRewards | None:
        """The task's own rewards, or ``None`` when the raw reward is the grader's."""
        ...
