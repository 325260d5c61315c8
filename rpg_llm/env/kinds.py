"""The kinds of task, each answering by its id what a launcher asks before a run.

One frozen dataclass per kind, each a :class:`rpg_llm.env.types.TaskKind`:

==========================  =========  ===============  ===================  ====================
kind                        value      own timeout      starting scripts     set-up check
==========================  =========  ===============  ===================  ====================
:class:`NanoGPTCPUKind`     val loss   its settings'    its baseline         none
:class:`SpeedrunKind`       val loss   1500 s           the checkout's       the checkout, the
                                                        ``train_gpt.py``     shards, 8 GPUs
:class:`OfflineKind`        score      none             its baselines        none (prepared on
                                                                             first use)
:class:`MLEBenchKind`       score      none             none                 the competition
                                                                             loads, its grader
                                                                             imports
==========================  =========  ===============  ===================  ====================

Which id is which kind is :func:`rpg_llm.env.registry.kind`'s business; nothing here loads a
task's data until ``make`` (an offline competition is built there on first use). What kinds share
sits in three small bases: every kind's defaults (no set-up check, nothing to prepare, the
baselines as starting scripts), a loss task's answers and a score task's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rpg_llm.env import tasks
from rpg_llm.env.tasks import nanogpt
from rpg_llm.env.tasks.nanogpt.speedrun import (
    SPEEDRUN_DATA_ENV,
    SPEEDRUN_GPUS,
    SPEEDRUN_ID,
    load_speedrun_task,
)
from rpg_llm.env.tasks.specs import SPECS
from rpg_llm.env.types import LossChains, ScoredSample, Task, TaskPlaces

__all__ = ["MLEBenchKind", "NanoGPTCPUKind", "OfflineKind", "SpeedrunKind"]


class _Kind(ABC):
    """Every kind's defaults: nothing to check or prepare; a run starts from the baselines."""

    @abstractmethod
    def baselines(self) -> list[tuple[str, str]]:
        """``[(name, code)]`` of the task's packaged baseline scripts (``[]``: none)."""

    @abstractmethod
    def make(self, places: TaskPlaces) -> Task:
        """The task itself."""

    def starting_scripts(self, places: TaskPlaces) -> list[tuple[str, str]]:
        """The task's baselines."""
        return self.baselines()

    def check_setup(self, places: TaskPlaces) -> None:
        """Nothing to check before a run (the data is built or read when the task is made)."""
        return None

    def needs_prepare(self, data_root: Path | None) -> bool:
        """False: nothing is built before a run."""
        return False

    def prepare(self, data_root: Path | None) -> None:
        """Nothing to build."""
        return None


class _LossKind(_Kind):
    """A NanoGPT task: its value is a val loss (lower is better) against its target."""

    @property
    def is_loss(self) -> bool:
        """True: the value is a val loss."""
        return True

    @property
    def lower_is_better(self) -> bool:
        """True: a loss."""
        return True

    @abstractmethod
    def loss_target(self) -> float:
        """The target val loss ``L*``, nats."""

    def loss_chains(self, samples: Sequence[ScoredSample]) -> LossChains:
        """Per batch row, cumulative seconds and the best val loss so far that crossed the
        target (``nanogpt.loss_chains``)."""
        return nanogpt.loss_chains(list(samples), target=self.loss_target())


class _ScoreKind(_Kind):
    """A competition: its value is the grader's score, and the run's timeout applies."""

    @property
    def is_loss(self) -> bool:
        """False: the value is the grader's score."""
        return False

    @property
    def default_timeout_s(self) -> None:
        """None: the run's timeout applies."""
        return None

    def loss_target(self) -> None:
        """None: not a loss."""
        return None

    def loss_chains(self, samples: Sequence[ScoredSample]) -> None:
        """None: its budget curves are the raw rewards (:mod:`rpg_llm.loop.budget`)."""
        return None


@dataclass(frozen=True)
class NanoGPTCPUKind(_LossKind):
    """The NanoGPT CPU stand-in (``nanogpt-cpu``): the val loss against the calibrated target
    (``nanogpt.cpu_settings()``); its data is built on first use.

    Attributes:
        id: a NanoGPT task id (``nanogpt.TASK_IDS``).
    """

    id: str

    @property
    def default_timeout_s(self) -> float:
        """One attempt's limit of the stand-in's settings, seconds (an attempt takes minutes)."""
        return float(nanogpt.cpu_settings(target_loss=1.0).timeout_s)  # the limit only

    def loss_target(self) -> float:
        """The calibrated target val loss, nats per byte.

        Raises:
            ValueError: the calibration file is missing.
        """
        return float(nanogpt.cpu_settings().target_loss)

    def baselines(self) -> list[tuple[str, str]]:
        """The stand-in's baseline script."""
        return nanogpt.baseline_solutions(self.id)

    def make(self, places: TaskPlaces) -> Task:
        """The task, its data built under ``places.data_root`` on first use.

        Raises:
            ValueError: missing calibration, or a guarded file that differs from the package's.
        """
        return nanogpt.load_task(self.id, places.data_root)


@dataclass(frozen=True)
class SpeedrunKind(_LossKind):
    """The 8-GPU NanoGPT speedrun on the user's modded-nanogpt checkout and FineWeb shards: the
    record script's val loss against the speedrun's target (3.28)."""

    @property
    def id(self) -> str:
        """``"nanogpt-speedrun"``."""
        return SPEEDRUN_ID

    @property
    def default_timeout_s(self) -> float:
        """The speedrun's limit of one attempt, seconds (``nanogpt.SPEEDRUN.timeout_s``)."""
        return float(nanogpt.SPEEDRUN.timeout_s)

    def loss_target(self) -> float:
        """The speedrun's target val loss (``nanogpt.SPEEDRUN.target_loss``, 3.28)."""
        return float(nanogpt.SPEEDRUN.target_loss)

    def baselines(self) -> list[tuple[str, str]]:
        """None packaged: the record script is the user's checkout's (:meth:`starting_scripts`)."""
        return []

    def starting_scripts(self, places: TaskPlaces) -> list[tuple[str, str]]:
        """The checkout's ``train_gpt.py`` as ``[("train_gpt", code)]`` (``[]`` without a
        checkout).

        Raises:
            OSError: the script cannot be read.
        """
        if places.speedrun_dir is None:
            return []
        script = Path(places.speedrun_dir).expanduser() / "train_gpt.py"
        return [("train_gpt", script.read_text())]

    def check_setup(self, places: TaskPlaces) -> None:
        """The checkout, the shards and the GPUs (``nanogpt.check_speedrun_setup``).

        Raises:
            ValueError: no checkout or shard folder given, or one failing the check (naming
                ``--speedrun-dir`` / ``--data-root`` and the value), fewer than 8 CUDA GPUs.
        """
        speedrun_dir, data_root = _speedrun_places(places)
        nanogpt.check_speedrun_setup(speedrun_dir, data_root, SPEEDRUN_GPUS)

    def make(self, places: TaskPlaces) -> Task:
        """The task on the checkout and shards (checked first).

        Raises:
            ValueError: as :meth:`check_setup`.
        """
        speedrun_dir, data_root = _speedrun_places(places)
        return load_speedrun_task(speedrun_dir, data_root, nproc=SPEEDRUN_GPUS)


def _speedrun_places(places: TaskPlaces) -> tuple[Path, Path]:
    if places.speedrun_dir is None:
        raise ValueError(
            "needs --speedrun-dir DIR (a modded-nanogpt checkout holding train_gpt.py)"
        )
    if places.data_root is None:
        raise ValueError(f"needs --data-root DIR (the FineWeb shards; or env {SPEEDRUN_DATA_ENV})")
    return places.speedrun_dir, places.data_root


@dataclass(frozen=True)
class OfflineKind(_ScoreKind):
    """An offline competition built from PyPI data (:mod:`rpg_llm.env.tasks.offline`): a score
    in its spec's direction, prepared under the data root on first use.

    Attributes:
        id: an offline competition id (``tasks.list_offline_competitions()``).
    """

    id: str

    @property
    def lower_is_better(self) -> bool:
        """Its spec's direction."""
        return SPECS[self.id].lower_is_better

    def baselines(self) -> list[tuple[str, str]]:
        """The scripts behind its leaderboard (:func:`rpg_llm.env.tasks.baseline_solutions`)."""
        return tasks.baseline_solutions(self.id)

    def needs_prepare(self, data_root: Path | None) -> bool:
        """Whether ``<data_root>/<id>`` is missing or outdated (``tasks.is_current``; None: the
        default data root)."""
        return not tasks.is_current(self.id, data_root)

    def prepare(self, data_root: Path | None) -> None:
        """Build (or reuse) its folder under ``data_root`` (``tasks.prepare``; about a minute).

        Raises:
            ValueError: the data package is not installed.
            RuntimeError: a baseline of its leaderboard failed.
        """
        tasks.prepare(self.id, data_root)

    def make(self, places: TaskPlaces) -> Task:
        """The competition, prepared under ``places.data_root`` when it is not yet.

        Raises:
            ValueError, RuntimeError: as :meth:`prepare`.
        """
        return tasks.prepare(self.id, places.data_root)


@dataclass(frozen=True)
class MLEBenchKind(_ScoreKind):
    """A competition in MLE-Bench format (an MLE-Bench tree, a folder under the data root, or
    the installed mlebench registry): a score whose direction its loaded config or leaderboard
    gives; prepared by mle-bench (``mlebench prepare``), not here.

    Attributes:
        id: the competition id.
    """

    id: str

    @property
    def lower_is_better(self) -> None:
        """None: known once loaded (``Competition.lower_is_better``)."""
        return None

    def baselines(self) -> list[tuple[str, str]]:
        """None: the run starts unseeded unless given ``--seed-dir``."""
        return []

    def check_setup(self, places: TaskPlaces) -> None:
        """The competition loads from ``places`` and its grader imports.

        Raises:
            ValueError: unknown or unprepared competition (naming the id, the data root and the
                tree), a malformed config; ``tasks.GradingSetupError`` (a ValueError): the
                grader cannot be imported.
        """
        tasks.load_grader(self.make(places))

    def make(self, places: TaskPlaces) -> tasks.Competition:
        """The loaded competition.

        Raises:
            ValueError: as :func:`rpg_llm.env.tasks.load_competition`.
        """
        return tasks.load_competition(self.id, places.data_root, places.mlebench_dir)
