"""The environment side of the loop (task, sandbox, executor, buffer, estimator), injectable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from rpg_llm.config import LoopConfig
from rpg_llm.env import registry
from rpg_llm.env.outcome import Outcome
from rpg_llm.env.sandbox import BatchExecutor, Sandbox
from rpg_llm.env.tasks.seeds import seed_scripts
from rpg_llm.env.types import Task
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.types import Buffer, RateEstimator

__all__ = ["Backends", "default_backends", "seed_solutions"]


@dataclass
class Backends:
    """The environment side, injectable for tests.

    Attributes:
        load_task: ``(task, data_root) -> Task`` (:func:`rpg_llm.env.registry.make_task`).
        baseline_solutions: ``comp_id -> [(name, code)]``.
        make_sandbox: ``kind -> Sandbox``.
        make_executor: ``(kind, workers) -> executor`` with ``map`` (and optional ``shutdown``).
        run_batch: ``(codes, task, sandbox, timeout_s, executor) -> [Outcome]`` (default: the
            task's own ``run_batch``).
        buffer_cls: ``path -> SampleBuffer``; sample_cls: the buffer's ``Sample``.
        estimator: module with ``init_state`` and ``refit`` (rpg_llm.loop.estimator's contract).
    """

    load_task: Callable[..., Task]
    baseline_solutions: Callable[[str], list[tuple[str, str]]]
    make_sandbox: Callable[[str], Sandbox]
    make_executor: Callable[[str, int], BatchExecutor]
    run_batch: Callable[..., list[Outcome]]
    buffer_cls: Callable[..., Buffer]
    sample_cls: type[Sample]
    estimator: RateEstimator


def _run_batch(
    codes: list[str],
    task: Task,
    sandbox: Sandbox,
    timeout_s: float,
    executor: BatchExecutor | None = None,
) -> list[Outcome]:
    """The task's own ``run_batch`` (:class:`rpg_llm.env.types.Task`)."""
    return list(task.run_batch(codes, sandbox, timeout_s, executor))


def seed_solutions(cfg: LoopConfig | None) -> Callable[[str], list[tuple[str, str]]]:
    """``task_id -> [(name, code)]`` of step 0 for ``cfg``: the scripts of ``cfg.seed_dir`` when
    set, else the task's starting scripts (``registry.starting_scripts``: its baselines, the
    speedrun's checkout's ``train_gpt.py``; ``[]`` for a competition without baselines).

    The returned function raises ValueError when ``cfg.seed_dir`` is not a folder of valid
    ``.py`` scripts (``python -m rpg_llm.run`` checks it before the run folder is made).
    """
    seed_dir = getattr(cfg, "seed_dir", None) if cfg is not None else None
    if seed_dir is not None:  # read when the buffer is seeded (a resumed run never reads it)
        return lambda _id: seed_scripts(Path(seed_dir))
    speedrun_dir = getattr(cfg, "speedrun_dir", None) if cfg is not None else None
    return partial(registry.starting_scripts, speedrun_dir=speedrun_dir)


def _make_executor(kind: str, workers: int) -> BatchExecutor:
    from rpg_llm.env.sandbox import LocalExecutor, RayExecutor

    if kind == "ray":
        return RayExecutor()
    return LocalExecutor(max_workers=workers, kind="thread")


def default_backends(cfg: LoopConfig | None = None) -> Backends:
    """The real environment: the task registry, sandbox, executor, buffer and estimator.

    With ``cfg`` (a :class:`rpg_llm.config.LoopConfig`) the task loader gets its
    ``mlebench_dir`` / ``speedrun_dir`` and the seeds follow ``cfg.seed_dir``
    (:func:`seed_solutions`).
    """
    from rpg_llm.env.sandbox import make_sandbox
    from rpg_llm.loop import buffer, estimator

    mlebench_dir = getattr(cfg, "mlebench_dir", None)
    speedrun_dir = getattr(cfg, "speedrun_dir", None)
    return Backends(
        load_task=partial(registry.make_task, mlebench_dir=mlebench_dir, speedrun_dir=speedrun_dir),
        baseline_solutions=seed_solutions(cfg),
        make_sandbox=make_sandbox,
        make_executor=_make_executor,
        run_batch=_run_batch,
        buffer_cls=buffer.SampleBuffer,
        sample_cls=buffer.Sample,
        estimator=estimator,
    )
