"""The seams between the environment and whatever drives it: a task, its kind, its outcomes.

An engine (our PPO loop, a TRL reward function) holds a :class:`Task` made by
:func:`rpg_llm.env.registry.make_task` and calls ``task.run_batch(codes, ...)``; every outcome is an
:class:`rpg_llm.env.outcome.Outcome` (the NanoGPT task's carries more fields).  A task whose reward
is not the grader's score (NanoGPT: a val loss against a target) says so through
:meth:`Task.own_rewards`; the engine never needs to know which kind of task it has.

What is known of a task by its id alone, without loading data (is its value a loss, its default
timeout, its starting scripts, its set-up check, whether it must be prepared), is its
:class:`TaskKind` (:func:`rpg_llm.env.registry.kind`); :class:`TaskPlaces` says where a run's
task inputs are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from rpg_llm.env.outcome import Outcome
    from rpg_llm.env.sandbox import BatchExecutor, Sandbox

__all__ = ["ScoredSample", "Task", "TaskKind", "TaskPlaces", "TaskRewards"]


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


@dataclass(frozen=True)
class TaskPlaces:
    """Where a run's task inputs are (each None when not given).

    Attributes:
        data_root: the folder of competition folders (offline, MLE-Bench; None: the default data
            root) or of the FineWeb shards (the NanoGPT speedrun; required there).
        mlebench_dir: the root of an MLE-Bench tree read directly.
        speedrun_dir: a modded-nanogpt checkout holding ``train_gpt.py`` (the speedrun only).
    """

    data_root: Path | None = None
    mlebench_dir: Path | None = None
    speedrun_dir: Path | None = None


class ScoredSample(Protocol):
    """What the budget curves read of a stored sample (:class:`rpg_llm.loop.buffer.Sample`).

    Attributes:
        row: batch row (its chain); step: training step (0: a seed);
        exec_time: execution seconds charged; score: the task's score (a NanoGPT task's val
        loss), None when not graded; status: the outcome's status (``"ok"``, ``"infra"``, ...).
    """

    @property
    def row(self) -> int: ...

    @property
    def step(self) -> int: ...

    @property
    def exec_time(self) -> float: ...

    @property
    def score(self) -> float | None: ...

    @property
    def status(self) -> str: ...


LossChains = dict[int, tuple[np.ndarray, np.ndarray]]
"""Per batch row: cumulative execution seconds and the best crossing loss so far (shape (n,))."""


@runtime_checkable
class TaskKind(Protocol):
    """What is known of a task by its id alone: one kind per family of tasks (the NanoGPT CPU
    stand-in, the NanoGPT speedrun, an offline competition, an MLE-Bench competition), made by
    :func:`rpg_llm.env.registry.kind`.  Nothing here loads a task's data.

    Attributes:
        id: the task id, aliases resolved (``"text"`` -> ``"bbc-news-logloss"``).
        is_loss: the task's value is a loss (its budget curves are the best crossing loss).
        lower_is_better: the direction of the task's score when its id tells it (a loss: True;
            an offline competition: its spec's), None when only its loaded data tells it (an
            MLE-Bench competition's config or leaderboard).
        default_timeout_s: the task's own time limit of one attempt, seconds, for a run that
            sets none; None when the task has none (the run's setting applies).
    """

    @property
    def id(self) -> str: ...

    @property
    def is_loss(self) -> bool: ...

    @property
    def lower_is_better(self) -> bool | None: ...

    @property
    def default_timeout_s(self) -> float | None: ...

    def loss_target(self) -> float | None:
        """The target loss ``L*`` (nats) of a task whose value is a loss; None otherwise."""
        ...

    def loss_chains(self, samples: Sequence[ScoredSample]) -> LossChains | None:
        """The budget curves of a loss task's run (training steps >= 1; None: not a loss)."""
        ...

    def baselines(self) -> list[tuple[str, str]]:
        """``[(name, code)]`` of the task's packaged baseline scripts (``[]``: none)."""
        ...

    def starting_scripts(self, places: TaskPlaces) -> list[tuple[str, str]]:
        """``[(name, code)]`` a run starts from: the baselines, or scripts found in ``places``."""
        ...

    def check_setup(self, places: TaskPlaces) -> None:
        """Check, before a model is loaded, that a run of the task can start on this machine.

        Raises:
            ValueError: naming what is missing or wrong.
        """
        ...

    def needs_prepare(self, data_root: Path | None) -> bool:
        """Whether the task's data must be built under ``data_root`` before a run."""
        ...

    def prepare(self, data_root: Path | None) -> None:
        """Build the task's data under ``data_root`` (nothing for a task without such data)."""
        ...

    def make(self, places: TaskPlaces) -> Task:
        """The task itself (data loaded, or built on first use)."""
        ...
