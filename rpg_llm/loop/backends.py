"""The environment side of the loop (task, sandbox, executor, buffer, estimator), injectable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

__all__ = ["Backends", "default_backends", "seed_solutions", "SPEEDRUN_ID"]


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
        estimator: module with ``init_state`` and ``refit`` (rpg_llm.loop.estimator's contract).
    """

    load_task: Callable[..., Any]
    baseline_solutions: Callable[[str], list[tuple[str, str]]]
    make_sandbox: Callable[[str], Any]
    make_executor: Callable[[str, int], Any]
    run_batch: Callable[..., list[Any]]
    buffer_cls: Any
    sample_cls: Any
    estimator: Any


SPEEDRUN_ID = "nanogpt-speedrun"
SPEEDRUN_GPUS = 8  # processes per node of the speedrun (one per GPU)


def _load_task(
    task: str,
    data_root: str | None,
    mlebench_dir: str | None = None,
    speedrun_dir: str | None = None,
) -> Any:
    """The task object of ``task``: a NanoGPT task (``nanogpt.TASK_IDS``, or the speedrun on
    ``speedrun_dir`` and the shards in ``data_root``), an offline competition (prepared on first
    use), or a competition of ``mlebench_dir`` / ``data_root`` / the mlebench registry.

    Raises:
        ValueError: unknown or unprepared task, a bad tree, a speedrun set-up check failing.
    """
    from rpg_llm.env import tasks
    from rpg_llm.env.tasks import nanogpt

    root = Path(data_root) if data_root else None
    if task in nanogpt.TASK_IDS:
        return nanogpt.load_task(task, root)
    if task == SPEEDRUN_ID:
        if speedrun_dir is None or root is None:
            raise ValueError(f"task {SPEEDRUN_ID} needs --speedrun-dir and --data-root")
        from rpg_llm.env.tasks.nanogpt.speedrun import load_speedrun_task

        return load_speedrun_task(speedrun_dir, root, nproc=SPEEDRUN_GPUS)
    comp_id = tasks.resolve_id(task)
    if comp_id in tasks.list_offline_competitions():
        return tasks.prepare(comp_id, root)
    tree = Path(mlebench_dir) if mlebench_dir else None
    return tasks.load_competition(comp_id, root, tree)


def _run_batch(
    codes: list[str], comp: Any, sandbox: Any, timeout_s: float, executor: Any = None
) -> list[Any]:
    """``nanogpt.run_batch`` for a NanoGPT task, else ``execute.run_batch`` (same contract)."""
    from rpg_llm.env import execute
    from rpg_llm.env.tasks import nanogpt

    if isinstance(comp, nanogpt.NanoGPTTask):
        return nanogpt.run_batch(codes, comp, sandbox, timeout_s, executor)
    return execute.run_batch(codes, comp, sandbox, timeout_s, executor)


def seed_solutions(cfg: Any) -> Callable[[str], list[tuple[str, str]]]:
    """``comp_id -> [(name, code)]`` of step 0 for ``cfg``: the scripts of ``cfg.seed_dir`` when
    set; for the speedrun the checkout's own ``train_gpt.py``; else the NanoGPT task's baseline
    or the competition's (``[]`` for a competition without baselines).

    The returned function raises ValueError when ``cfg.seed_dir`` is not a folder of valid
    ``.py`` scripts (``python -m rpg_llm.run`` checks it before the run folder is made).
    """
    from rpg_llm.env import tasks
    from rpg_llm.env.tasks import nanogpt

    seed_dir = getattr(cfg, "seed_dir", None) if cfg is not None else None
    if seed_dir is not None:  # read when the buffer is seeded (a resumed run never reads it)
        return lambda _id: tasks.seed_scripts(Path(seed_dir))
    speedrun_dir = getattr(cfg, "speedrun_dir", None) if cfg is not None else None
    if cfg is not None and cfg.task == SPEEDRUN_ID and speedrun_dir is not None:
        script = Path(speedrun_dir).expanduser() / "train_gpt.py"
        return lambda _id: [("train_gpt", script.read_text())]
    return lambda cid: nanogpt.baseline_solutions(cid) or tasks.baseline_solutions(cid)


def _make_executor(kind: str, workers: int) -> Any:
    from rpg_llm.env.sandbox import LocalExecutor, RayExecutor

    if kind == "ray":
        return RayExecutor()
    return LocalExecutor(max_workers=workers, kind="thread")


def default_backends(cfg: Any = None) -> Backends:
    """The real environment: rpg_llm.env.tasks (NanoGPT tasks included), sandbox, execute, buffer
    and
    estimator; with ``cfg`` (a :class:`rpg_llm.config.LoopConfig`) the task loader gets its
    ``mlebench_dir`` / ``speedrun_dir`` and the seeds follow ``cfg.seed_dir``
    (:func:`seed_solutions`).
    """
    from rpg_llm.env.sandbox import make_sandbox
    from rpg_llm.loop import buffer, estimator

    mlebench_dir = getattr(cfg, "mlebench_dir", None)
    speedrun_dir = getattr(cfg, "speedrun_dir", None)
    return Backends(
        load_task=partial(_load_task, mlebench_dir=mlebench_dir, speedrun_dir=speedrun_dir),
        baseline_solutions=seed_solutions(cfg),
        make_sandbox=make_sandbox,
        make_executor=_make_executor,
        run_batch=_run_batch,
        buffer_cls=buffer.SampleBuffer,
        sample_cls=buffer.Sample,
        estimator=estimator,
    )
