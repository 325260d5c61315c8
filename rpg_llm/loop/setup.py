"""Setting a run up: its folder, the learner, the buffer, and what a resume restores.

:class:`rpg_llm.loop.trainer.Trainer` calls these in order; each is a plain function of what it
needs, so the set-up reads top to bottom and a test can call one alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from rpg_llm.config import LoopConfig
from rpg_llm.env.sandbox import BatchExecutor, Sandbox
from rpg_llm.env.types import Task
from rpg_llm.loop.accounting import Accounts
from rpg_llm.loop.backends import Backends
from rpg_llm.loop.budget import run_label
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.execution import execute_seeds
from rpg_llm.loop.recording import Recorder
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.loop.types import Buffer
from rpg_llm.loop.warm_start import WarmStart

__all__ = ["create_folder", "load_learner", "open_buffer", "rebuild", "restore", "seed_buffer"]

log = logging.getLogger("rpg_llm.loop")


def create_folder(folder: RunFolder, cfg: LoopConfig, task_id: str, dist: Dist) -> None:
    """Make the run folder and its ``config.json`` (the settings and the run's facts) on the main
    process.

    Raises:
        ValueError: the folder already holds a run.
    """
    record = cfg.to_dict() | {
        "method": cfg.method,  # also at the top, for readers of the run folder
        "competition": task_id,
        "seeded": cfg.seed_buffer,
        "torch": torch.__version__,
    }
    record["label"] = run_label(record)  # the arm: method, parent ranking, raw reward, lambda
    if dist.main:
        folder.create(record)
    dist.barrier()


def load_learner(
    cfg: LoopConfig,
    dist: Dist,
    folder: RunFolder,
    recorder: Recorder,
    description: str,
    baselines: Callable[[], list[tuple[str, str]]],
    resume: bool,
) -> tuple[Any, Any, list[float]]:
    """Load the policy, warm-start it (:mod:`.warm_start`), then build the PPO trainer, whose
    reference is the warm-started weights and whose log-probs are taken at the sampling
    temperature (:mod:`rpg_llm.learner.ppo`).

    Returns:
        ``(policy, ppo_trainer, sft_losses)``.
    """
    from rpg_llm.learner.policy import load_policy
    from rpg_llm.learner.ppo import PPOTrainer, return_large_frees_to_os

    if (cfg.device or str(dist.acc.device)).startswith("cpu"):
        return_large_frees_to_os()  # peak RSS: freed tensors leave the process
    t0 = time.perf_counter()
    policy = load_policy(cfg.model, device=cfg.device or dist.acc.device)
    if policy.device.type == "cpu" and cfg.cpu_threads:
        torch.set_num_threads(cfg.cpu_threads)
    log.info("policy %s loaded in %.1f s", policy.path, time.perf_counter() - t0)
    losses = WarmStart(cfg, policy, folder, recorder, dist, description, baselines).run(resume)
    torch.manual_seed(cfg.seed)
    temperature = cfg.sampling.temperature
    ppo = PPOTrainer(policy.model, cfg.ppo, accelerator=dist.acc, temperature=temperature)
    return policy, ppo, losses


def open_buffer(
    buffer_cls: Callable[..., Buffer], folder: RunFolder, cfg: LoopConfig, dist: Dist
) -> Buffer:
    """The run's sample buffer (capacity ``buffer_capacity_factor * B``); the main process makes
    the database, the others open it after."""
    capacity = cfg.buffer_capacity_factor * cfg.batch_size
    buffer = buffer_cls(folder.buffer_path, capacity=capacity) if dist.main else None
    dist.barrier()
    return buffer or buffer_cls(folder.buffer_path, capacity=capacity)


def restore(folder: RunFolder, ppo: Any, recorder: Recorder, dist: Dist) -> int:
    """Load the last checkpoint and drop the metric lines after it; returns the first step to
    run (the estimator and best score are rebuilt by :func:`rebuild`)."""
    done = folder.latest_checkpoint() or 0
    if done:
        ppo.load(folder.checkpoint_path(done))
    recorder.start_step = done + 1
    if dist.main:
        folder.truncate_metrics(done)
    log.info("resuming after step %d", done)
    return done + 1


def rebuild(
    accounts: Accounts,
    step_samples: Callable[[int], list[Sample]],
    seed_step: int,
    start_step: int,
    batch_size: int,
) -> None:
    """Replay the estimator, slot sums and best score over the seeds and the checkpointed
    steps ``1 .. start_step - 1`` from the buffer (the same refits as the first time).

    Raises:
        RuntimeError: a checkpointed step does not hold ``batch_size`` samples.
    """
    accounts.feed_seeds(seed_step, step_samples(seed_step))
    for step in range(1, start_step):
        samples = step_samples(step)
        if len(samples) != batch_size:
            raise RuntimeError(f"buffer holds {len(samples)} samples for checkpointed {step}")
        accounts.account(step, samples)


def seed_buffer(
    cfg: LoopConfig,
    task: Task,
    backends: Backends,
    sandbox: Sandbox,
    executor: BatchExecutor | None,
    buffer: Buffer,
    dist: Dist,
    seed_step: int,
) -> int:
    """Execute, grade and store the task's baseline solutions as step ``seed_step`` on the main
    process, once per run (not when ``cfg.seed_buffer`` is off or the step is stored already);
    returns how many were stored."""
    n = 0
    if dist.main and cfg.seed_buffer and not buffer.step_samples(cfg.name, seed_step):
        solutions = backends.baseline_solutions(task.id)
        if not solutions:
            log.warning("task %s has no baselines: the run starts unseeded", task.id)
        else:
            seeds = execute_seeds(solutions, cfg, task, backends, sandbox, executor, seed_step)
            n = len(buffer.add_many(seeds))
            log.info("seeded the buffer with %d baseline solutions", n)
    dist.barrier()
    return n
