"""One registry of tasks: ``make_task(id, ...)`` and what is known of a task by its id alone.

The kinds (gymnax's ``make(id)`` pattern): the NanoGPT CPU stand-in (``nanogpt.TASK_IDS``), the
8-GPU NanoGPT speedrun (:data:`SPEEDRUN_ID`, on a modded-nanogpt checkout), the offline
competitions built from PyPI data (prepared on first use), and MLE-Bench competitions (a tree
given by ``mlebench_dir``, a folder under ``data_root``, or the installed mlebench registry).
Every task returned is a :class:`rpg_llm.env.types.Task`.  A run folder names its task by id;
:func:`is_loss_task`, :func:`loss_target` and :func:`loss_chains` answer for it without loading
it (the budget curves of a NanoGPT run are its best crossing val loss, not a score).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rpg_llm.env.types import Task

__all__ = [
    "SPEEDRUN_GPUS",
    "SPEEDRUN_ID",
    "baseline_solutions",
    "is_loss_task",
    "loss_chains",
    "loss_target",
    "make_task",
]

SPEEDRUN_ID = "nanogpt-speedrun"
SPEEDRUN_GPUS = 8  # processes per node of the speedrun (one per GPU)


def make_task(
    task_id: str,
    data_root: str | Path | None = None,
    mlebench_dir: str | Path | None = None,
    speedrun_dir: str | Path | None = None,
) -> Task:
    """The task ``task_id``.

    Args:
        task_id: a NanoGPT task id, :data:`SPEEDRUN_ID`, an offline competition id or alias
            (``"text"``), or an MLE-Bench competition id.
        data_root: folder of competition data (offline and MLE-Bench) or of the FineWeb shards
            (speedrun); ``None``: the default data root.
        mlebench_dir: an MLE-Bench tree read directly.
        speedrun_dir: a modded-nanogpt checkout (the speedrun only).

    Raises:
        ValueError: unknown or unprepared task, a bad tree, a speedrun set-up check failing.
    """
    from rpg_llm.env import tasks
    from rpg_llm.env.tasks import nanogpt

    root = Path(data_root) if data_root else None
    if task_id in nanogpt.TASK_IDS:
        return nanogpt.load_task(task_id, root)
    if task_id == SPEEDRUN_ID:
        if speedrun_dir is None or root is None:
            raise ValueError(f"task {SPEEDRUN_ID} needs --speedrun-dir and --data-root")
        from rpg_llm.env.tasks.nanogpt.speedrun import load_speedrun_task

        return load_speedrun_task(speedrun_dir, root, nproc=SPEEDRUN_GPUS)
    comp_id = tasks.resolve_id(task_id)
    if comp_id in tasks.list_offline_competitions():
        return tasks.prepare(comp_id, root)
    tree = Path(mlebench_dir) if mlebench_dir else None
    return tasks.load_competition(comp_id, root, tree)


def baseline_solutions(task_id: str) -> list[tuple[str, str]]:
    """``[(name, code)]`` of the task's baseline scripts (``[]`` when it has none)."""
    from rpg_llm.env import tasks
    from rpg_llm.env.tasks import nanogpt

    return nanogpt.baseline_solutions(task_id) or tasks.baseline_solutions(task_id)


def is_loss_task(task_id: str | None) -> bool:
    """True for the NanoGPT tasks, whose chains are the best val loss (:func:`loss_chains`)."""
    from rpg_llm.env.tasks import nanogpt

    return task_id in nanogpt.TASK_IDS or task_id == SPEEDRUN_ID


def loss_target(task_id: str) -> float:
    """The target val loss ``L*`` of a NanoGPT task, nats: the calibrated CPU stand-in's
    (``nanogpt.cpu_settings()``) or the speedrun's 3.28 (``nanogpt.SPEEDRUN``).

    Raises:
        ValueError: ``task_id`` is not a NanoGPT task.
    """
    from rpg_llm.env.tasks import nanogpt

    if task_id in nanogpt.TASK_IDS:
        return float(nanogpt.cpu_settings().target_loss)
    if task_id == SPEEDRUN_ID:
        return float(nanogpt.SPEEDRUN.target_loss)
    raise ValueError(f"{task_id!r} is not a NanoGPT task")


def loss_chains(task_id: str, samples: Sequence[Any]) -> dict[int, tuple[Any, Any]]:
    """Per batch row, cumulative execution seconds and the best *crossing* val loss so far of a
    NanoGPT run's samples (``nanogpt.loss_chains`` at :func:`loss_target`).

    Raises:
        ValueError: ``task_id`` is not a NanoGPT task.
    """
    from rpg_llm.env.tasks import nanogpt

    return nanogpt.loss_chains(list(samples), target=loss_target(task_id))
