"""The environment side of the loop (task, sandbox, executor, buffer, estimator), injectable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Backends", "default_backends"]


@dataclass
class Backends:
    """The environment side, injectable for tests.

    Attributes:
        load_task: ``(task, data_root) -> Competition``.
        baseline_solutions: ``comp_id -> [(name, code)]``.
        make_sandbox: ``kind -> Sandbox``.
        make_executor: ``(kind, workers) -> executor`` with ``map`` (and optional ``shutdown``).
        run_batch: ``(codes, comp, sandbox, timeout_s, executor) -> [Outcome]``.
        buffer_cls: ``(path, capacity) -> SampleBuffer``; sample_cls: the buffer's ``Sample``.
        estimator: module with ``init_state`` and ``refit`` (rpg_llm.estimator's contract).
    """

    load_task: Callable[..., Any]
    baseline_solutions: Callable[[str], list[tuple[str, str]]]
    make_sandbox: Callable[[str], Any]
    make_executor: Callable[[str, int], Any]
    run_batch: Callable[..., list[Any]]
    buffer_cls: Any
    sample_cls: Any
    estimator: Any


def _load_task(task: str, data_root: str | None) -> Any:
    from rpg_llm import tasks

    comp_id = tasks.resolve_id(task)
    root = Path(data_root) if data_root else None
    if comp_id in tasks.list_offline_competitions():
        return tasks.prepare(comp_id, root)
    return tasks.load_competition(comp_id, root)


def _make_executor(kind: str, workers: int) -> Any:
    from rpg_llm.sandbox import LocalExecutor, RayExecutor

    if kind == "ray":
        return RayExecutor()
    return LocalExecutor(max_workers=workers, kind="thread")


def default_backends() -> Backends:
    """The real environment: rpg_llm.tasks, sandbox, execute, buffer and estimator."""
    from rpg_llm import buffer, estimator, execute, tasks
    from rpg_llm.sandbox import make_sandbox

    return Backends(
        load_task=_load_task,
        baseline_solutions=tasks.baseline_solutions,
        make_sandbox=make_sandbox,
        make_executor=_make_executor,
        run_batch=execute.run_batch,
        buffer_cls=buffer.SampleBuffer,
        sample_cls=buffer.Sample,
        estimator=estimator,
    )
