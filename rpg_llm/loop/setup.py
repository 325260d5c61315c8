"""Setting the PPO engine's learner up: the policy, its warm start and PPO trainer, and what a
resume restores of them (the run's environment side is :class:`rpg_llm.loop.pipeline.RunEnv`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from rpg_llm.config import LoopConfig
from rpg_llm.learner.checkpoint import CheckpointDamaged
from rpg_llm.learner.memory import return_large_frees_to_os
from rpg_llm.learner.policy import Policy, load_policy
from rpg_llm.learner.ppo import PPOTrainer
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.recording import Recorder
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.loop.warm_start import WarmStart

__all__ = ["load_learner", "restore"]

log = logging.getLogger("rpg_llm.loop")


def load_learner(
    cfg: LoopConfig,
    dist: Dist,
    folder: RunFolder,
    recorder: Recorder,
    description: str,
    baselines: Callable[[], list[tuple[str, str]]],
    resume: bool,
) -> tuple[Policy, PPOTrainer, list[float]]:
    """Load the policy, warm-start it (:mod:`.warm_start`), then build the PPO trainer, whose
    reference is the warm-started weights and whose log-probs are taken at the sampling
    temperature (:mod:`rpg_llm.learner.ppo`).

    Returns:
        ``(policy, ppo_trainer, sft_losses)``.
    """
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


def restore(folder: RunFolder, ppo: PPOTrainer, recorder: Recorder, dist: Dist) -> int:
    """Load the last checkpoint and drop the metric lines after it; returns the first step to
    run (the estimator and best score are rebuilt by
    :meth:`rpg_llm.loop.pipeline.RunEnv.rebuild`).

    Raises:
        RuntimeError: the last checkpoint cannot be read: names its file and what to do
            (:meth:`RunFolder.damaged_checkpoint_advice`).
    """
    done = folder.latest_checkpoint() or 0
    if done:
        try:
            ppo.load(folder.checkpoint_path(done))
        except CheckpointDamaged as err:
            raise RuntimeError(f"{err}; {folder.damaged_checkpoint_advice(done)}") from None
    recorder.start_step = done + 1
    if dist.main:
        folder.truncate_metrics(done)
    log.info("resuming after step %d", done)
    return done + 1
