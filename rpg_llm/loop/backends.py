"""The environment side of the loop (task, sandbox, execution service, buffer, estimator),
injectable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rpg_llm.config import LoopConfig
from rpg_llm.env import registry
from rpg_llm.env.outcome import Outcome
from rpg_llm.env.sandbox import BatchExecutor, LocalExecutor, Sandbox, make_sandbox
from rpg_llm.env.service import (
    ExecutionService,
    JobResources,
    JobSpec,
    LocalService,
    RayService,
    TaskRef,
    check_ray_address,
)
from rpg_llm.env.tasks.seeds import seed_scripts
from rpg_llm.env.types import Task
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.types import Buffer, RateEstimator

__all__ = ["Backends", "default_backends", "job_resources", "make_service", "seed_solutions"]


@dataclass
class Backends:
    """The environment side, injectable for tests.

    Attributes:
        load_task: ``(task, data_root) -> Task`` (:func:`rpg_llm.env.registry.make_task`).
        baseline_solutions: ``comp_id -> [(name, code)]``.
        make_sandbox: ``kind -> Sandbox``.
        make_service: ``(cfg, task, sandbox, run_batch) -> ExecutionService``: where the run's
            scripts run and are graded (:func:`make_service`: this host's pool, or Ray).
        run_batch: ``(codes, task, sandbox, timeout_s, executor) -> [Outcome]`` (default: the
            task's own ``run_batch``), what this host's pool runs.
        buffer_cls: ``path -> SampleBuffer``; sample_cls: the buffer's ``Sample``.
        estimator: module with ``init_state`` and ``refit`` (rpg_llm.loop.estimator's contract).
    """

    load_task: Callable[..., Task]
    baseline_solutions: Callable[[str], list[tuple[str, str]]]
    make_sandbox: Callable[[str], Sandbox]
    make_service: Callable[..., ExecutionService]
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


def job_resources(cfg: LoopConfig) -> JobResources:
    """What one script of ``cfg``'s run reserves on a Ray node (``--job-cpus`` ...)."""
    custom = {cfg.job_resource: 1.0} if cfg.job_resource else {}
    return JobResources(cfg.job_cpus, cfg.job_gpus, cfg.job_memory_gb, custom)


def make_service(
    cfg: LoopConfig, task: Task, sandbox: Sandbox, run_batch: Callable[..., list[Outcome]]
) -> ExecutionService:
    """The run's execution service: ``cfg.executor == "ray"``: :class:`RayService` (jobs made on
    the nodes from the task's id and folders, :attr:`LoopConfig.ray_address`); else
    :class:`LocalService` running ``run_batch`` over ``cfg.workers`` threads here.

    Raises:
        ValueError: a Ray address that does not answer (:func:`check_ray_address`).
    """
    if cfg.executor == "ray":
        address = check_ray_address(cfg.ray_address or "local")
        ref = TaskRef(task.id, cfg.data_root, cfg.mlebench_dir, cfg.speedrun_dir)
        spec = JobSpec(ref, cfg.sandbox, cfg.timeout_s, cfg.docker_image)
        return RayService(spec, job_resources(cfg), address, init_kwargs=_local_ray(cfg, address))
    executor = LocalExecutor(max_workers=cfg.workers, kind="thread")

    def run(codes: list[str]) -> list[Outcome]:
        return run_batch(codes, task, sandbox, cfg.timeout_s, executor)

    return LocalService(run, on_close=executor.shutdown)


def _local_ray(cfg: LoopConfig, address: str | None) -> dict[str, Any]:
    """``ray.init`` arguments when Ray starts here (``--ray-address local``): this host's CPUs,
    ``cfg.workers`` units of the custom job resource, no dashboard."""
    if address is not None:
        return {}
    out: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if cfg.job_resource:
        out["resources"] = {cfg.job_resource: float(cfg.workers)}
    return out


def default_backends(cfg: LoopConfig | None = None) -> Backends:
    """The real environment: the task registry, sandbox, executor, buffer and estimator.

    With ``cfg`` (a :class:`rpg_llm.config.LoopConfig`) the task loader gets its
    ``mlebench_dir`` / ``speedrun_dir`` and the seeds follow ``cfg.seed_dir``
    (:func:`seed_solutions`).
    """
    from rpg_llm.loop import buffer, estimator  # torch: the estimator loads with the loop

    mlebench_dir = getattr(cfg, "mlebench_dir", None)
    speedrun_dir = getattr(cfg, "speedrun_dir", None)
    return Backends(
        load_task=partial(registry.make_task, mlebench_dir=mlebench_dir, speedrun_dir=speedrun_dir),
        baseline_solutions=seed_solutions(cfg),
        make_sandbox=partial(make_sandbox, image=cfg.docker_image if cfg is not None else None),
        make_service=make_service,
        run_batch=_run_batch,
        buffer_cls=buffer.SampleBuffer,
        sample_cls=buffer.Sample,
        estimator=estimator,
    )
