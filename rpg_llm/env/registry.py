"""One registry of tasks: a task id names one kind of task, and the kind answers for it.

The kinds (:mod:`rpg_llm.env.kinds`, gymnax's ``make(id)`` pattern): the NanoGPT CPU stand-in
(``nanogpt.TASK_IDS``), the 8-GPU NanoGPT speedrun (:data:`SPEEDRUN_ID`, on a modded-nanogpt
checkout), the offline competitions built from PyPI data (prepared on first use), and MLE-Bench
competitions (a tree given by ``mlebench_dir``, a folder under ``data_root``, or the installed
mlebench registry). :func:`kind` is the only place that tells them apart by id; every other
function here asks the kind:

* before a run, without loading data: :func:`check_setup` (the task can run here),
  :func:`default_timeout_s`, :func:`starting_scripts`, :func:`needs_prepare` / :func:`prepare`;
* for a run: :func:`make_task` (a :class:`rpg_llm.env.types.Task`), :func:`baseline_solutions`;
* for a run folder, which names its task by id: :func:`is_loss_task`, :func:`loss_target` and
  :func:`loss_chains` (the budget curves of a NanoGPT run are its best crossing val loss, not a
  score).

Folders (``data_root``, ``mlebench_dir``, ``speedrun_dir``) are given as ``str`` or ``Path``; an
empty string counts as not given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rpg_llm.env import tasks
from rpg_llm.env.kinds import MLEBenchKind, NanoGPTCPUKind, OfflineKind, SpeedrunKind
from rpg_llm.env.tasks import nanogpt
from rpg_llm.env.tasks.nanogpt.speedrun import SPEEDRUN_GPUS, SPEEDRUN_ID
from rpg_llm.env.types import LossChains, ScoredSample, Task, TaskKind, TaskPlaces

__all__ = [
    "SPEEDRUN_GPUS",
    "SPEEDRUN_ID",
    "baseline_solutions",
    "check_setup",
    "default_timeout_s",
    "is_loss_task",
    "kind",
    "loss_chains",
    "loss_target",
    "make_task",
    "needs_prepare",
    "prepare",
    "starting_scripts",
]

Folder = str | Path | None
"""A folder argument: a path, or None / ``""`` for not given."""

_NAMED: dict[str, TaskKind] = {
    **{task_id: NanoGPTCPUKind(task_id) for task_id in nanogpt.TASK_IDS},
    SPEEDRUN_ID: SpeedrunKind(),
}
"""The kinds of the tasks that are not competitions, by id."""


def kind(task_id: str) -> TaskKind:
    """The kind of task ``task_id`` names (aliases resolved; nothing is loaded).

    Args:
        task_id: a NanoGPT task id, :data:`SPEEDRUN_ID`, an offline competition id or alias
            (``"text"``), or any other competition id (an MLE-Bench competition; whether it
            exists is :func:`check_setup`'s question).

    Raises:
        ValueError: not a task name (not a str, empty, or holding a path separator).
    """
    if not isinstance(task_id, str):
        raise ValueError(f"a task id must be a str, got {task_id!r}")
    if task_id in _NAMED:
        return _NAMED[task_id]
    comp_id = tasks.resolve_id(task_id)
    if comp_id in tasks.list_offline_competitions():
        return OfflineKind(comp_id)
    return MLEBenchKind(comp_id)


def _places(data_root: Folder, mlebench_dir: Folder, speedrun_dir: Folder) -> TaskPlaces:
    def path(value: Folder) -> Path | None:
        return Path(value) if value else None

    return TaskPlaces(path(data_root), path(mlebench_dir), path(speedrun_dir))


def make_task(
    task_id: str,
    data_root: Folder = None,
    mlebench_dir: Folder = None,
    speedrun_dir: Folder = None,
) -> Task:
    """The task ``task_id`` (:meth:`rpg_llm.env.types.TaskKind.make`).

    Args:
        task_id: as in :func:`kind`.
        data_root: folder of competition data (offline and MLE-Bench) or of the FineWeb shards
            (speedrun); ``None``: the default data root.
        mlebench_dir: an MLE-Bench tree read directly.
        speedrun_dir: a modded-nanogpt checkout (the speedrun only).

    Raises:
        ValueError: unknown or unprepared task, a bad tree, a speedrun set-up check failing.
    """
    return kind(task_id).make(_places(data_root, mlebench_dir, speedrun_dir))


def check_setup(
    task_id: str,
    *,
    data_root: Folder = None,
    mlebench_dir: Folder = None,
    speedrun_dir: Folder = None,
) -> str:
    """Check, before a model is loaded, that a run of ``task_id`` can start here: the speedrun's
    checkout, shards and GPUs; an MLE-Bench competition that loads and whose grader imports;
    nothing for the NanoGPT stand-in and the offline competitions (built on first use).

    Args:
        task_id: as in :func:`kind`; data_root, mlebench_dir, speedrun_dir: as in
            :func:`make_task`.

    Returns:
        The task id with aliases resolved (``"text"`` -> ``"bbc-news-logloss"``).

    Raises:
        ValueError: naming what is missing or wrong: a bad name; the speedrun without
            ``--speedrun-dir`` or ``--data-root`` or failing their check (the message then
            starts with the flag); an unknown or unprepared competition (naming the id, the data
            root and the tree); a grader that cannot be imported.
    """
    task = kind(task_id)
    task.check_setup(_places(data_root, mlebench_dir, speedrun_dir))
    return task.id


def default_timeout_s(task_id: str) -> float | None:
    """The task's own limit of one attempt, seconds, for a run that sets none (the NanoGPT
    stand-in: its settings' 300 s; the speedrun: 1500 s); None when it has none.

    Raises:
        ValueError: a bad name (:func:`kind`).
    """
    return kind(task_id).default_timeout_s


def baseline_solutions(task_id: str) -> list[tuple[str, str]]:
    """``[(name, code)]`` of the task's packaged baseline scripts (``[]`` when it has none).

    Raises:
        ValueError: a bad name (:func:`kind`).
    """
    return kind(task_id).baselines()


def starting_scripts(task_id: str, speedrun_dir: Folder = None) -> list[tuple[str, str]]:
    """``[(name, code)]`` a run of ``task_id`` starts from (before ``--seed-dir``, which a
    launcher applies over this): the speedrun's checkout's ``train_gpt.py``, else the task's
    baselines (:func:`baseline_solutions`).

    Raises:
        ValueError: a bad name (:func:`kind`).
        OSError: the checkout's script cannot be read.
    """
    return kind(task_id).starting_scripts(_places(None, None, speedrun_dir))


def needs_prepare(task_id: str, data_root: Folder = None) -> bool:
    """Whether the task's data must be built under ``data_root`` (None: the default data root)
    before a run: an offline competition whose folder is missing or outdated
    (``tasks.is_current``); False for every other task.

    Raises:
        ValueError: a bad name (:func:`kind`).
    """
    return kind(task_id).needs_prepare(_places(data_root, None, None).data_root)


def prepare(task_id: str, data_root: Folder = None) -> None:
    """Build the task's data under ``data_root`` (an offline competition: ``tasks.prepare``,
    about a minute; other tasks: nothing).

    Raises:
        ValueError: a bad name, or the data package is not installed.
        RuntimeError: a baseline of the competition's leaderboard failed.
    """
    kind(task_id).prepare(_places(data_root, None, None).data_root)


def is_loss_task(task_id: str | None) -> bool:
    """True for the NanoGPT tasks, whose chains are the best val loss (:func:`loss_chains`);
    False for a competition, and for ``None`` or a string that names no task."""
    if task_id is None:
        return False
    try:
        return kind(task_id).is_loss
    except ValueError:
        return False


def loss_target(task_id: str) -> float:
    """The target val loss ``L*`` of a NanoGPT task, nats: the calibrated CPU stand-in's
    (``nanogpt.cpu_settings()``) or the speedrun's 3.28 (``nanogpt.SPEEDRUN``).

    Raises:
        ValueError: ``task_id`` is not a NanoGPT task (or the stand-in has no calibration).
    """
    target = kind(task_id).loss_target()
    if target is None:
        raise ValueError(f"{task_id!r} is not a NanoGPT task")
    return target


def loss_chains(task_id: str, samples: Sequence[ScoredSample]) -> LossChains:
    """Per batch row, cumulative execution seconds and the best *crossing* val loss so far of a
    NanoGPT run's samples (``nanogpt.loss_chains`` at :func:`loss_target`).

    Raises:
        ValueError: ``task_id`` is not a NanoGPT task.
    """
    chains = kind(task_id).loss_chains(samples)
    if chains is None:
        raise ValueError(f"{task_id!r} is not a NanoGPT task")
    return chains
