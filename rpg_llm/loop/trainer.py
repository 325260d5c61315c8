"""The self-improvement training loop on our PPO: parents -> prompts -> scripts -> rewards -> PPO.

:meth:`Trainer.step` is the paper's Algorithm 1 (DESIGN.md section 7), one stage per line; the
stages after generation are :class:`rpg_llm.loop.pipeline.RunEnv`'s, shared with the TRL engine:

1. sample (:mod:`.rollout`): the top-``B`` buffer entries by ``raw_reward - rho_hat * time``
   (vanilla: raw reward) become improve prompts (the base prompt while the buffer is empty); one
   response per prompt;
2. execute: the answers' scripts run in parallel in the task's sandbox and are graded;
3. store: every sample goes to the buffer in one transaction;
4. score: the estimator is refitted on the slot sums (this step's ``rho_hat``), then the reward
   ``r - rho_hat * delta`` (RPG) or raw (vanilla), plus the improvement bonus;
5. PPO (:mod:`.update`): one update, then a checkpoint every ``checkpoint_every`` steps and after
   the last one (its steps, or the step that spent every chain's execution budget);
6. record (:mod:`.recording`): metrics, TensorBoard, the step's line.

The SFT warm start before step 1 is :mod:`.warm_start`.

Durability and resume: the responses of a step are saved before execution, the step's samples
are stored in one transaction, and the trainer is checkpointed every ``checkpoint_every`` steps.
Resuming restores the last checkpoint, rebuilds the estimator, the slot sums and the best score
from the buffer, and replays later steps from their saved responses and stored outcomes, so that
no sample is lost or stored twice.

Several processes (``accelerate launch`` / ``torchrun``, e.g. FSDP over GPUs; :mod:`.dist`):
each process samples its share of the rows (``rank::world``), the main process executes, grades
and stores them and writes the run folder, every process gets the samples and computes the same
rewards, and each trains on its share of the batch (gradients synchronised by accelerate).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator

from rpg_llm.config import LoopConfig
from rpg_llm.learner.policy import Policy
from rpg_llm.learner.ppo import PPOTrainer
from rpg_llm.loop.accounting import infra_mask
from rpg_llm.loop.backends import Backends
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.pipeline import SEED_STEP, Answers, Executed, RunEnv, Scored, answer_counts
from rpg_llm.loop.recording import StepRecord
from rpg_llm.loop.rollout import Rollout, generate_rollout
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.loop.setup import load_learner, restore
from rpg_llm.loop.update import ppo_update, trainable_rows

__all__ = ["Trainer", "train", "SEED_STEP"]

log = logging.getLogger("rpg_llm.loop")


class Trainer:
    """One run on our PPO: the environment side (:class:`rpg_llm.loop.pipeline.RunEnv`), the
    policy and its PPO trainer, and the steps.

    Use :func:`train`; this class exists so the benchmark and tests can drive single steps.

    Attributes:
        env: the run's environment side (folder, task, buffer, accounts, stages).
        policy, ppo: the policy and its :class:`rpg_llm.learner.ppo.PPOTrainer`.
        start_step: the first step to run (after the last checkpoint when resuming).

    Raises:
        ValueError: ``batch_size`` not a multiple of the process count, a missing task or model,
            or (without ``resume``) a folder that already holds a run.
    """

    def __init__(
        self,
        cfg: LoopConfig,
        run_dir: Path,
        backends: Backends | None = None,
        resume: bool = False,
        progress: bool = True,
        on_stage: Callable[[int, str], None] | None = None,
    ):
        self.cfg, self.progress = cfg, progress
        on_cpu = cfg.device == "cpu" or not torch.cuda.is_available()
        d = Dist(Accelerator(cpu=on_cpu))  # cpu: several processes on CPUs (gloo)
        self.env = env = RunEnv(
            cfg, run_dir, dist=d, backends=backends, resume=resume, on_stage=on_stage
        )
        self.on_stage = env.on_stage
        self.policy: Policy
        self.ppo: PPOTrainer
        self.policy, self.ppo, self.sft_losses = load_learner(
            cfg, d, env.folder, env.recorder, env.description, env.baselines, resume
        )
        self.start_step = restore(env.folder, self.ppo, env.recorder, d) if resume else 1

    @property
    def dist(self) -> Dist:
        return self.env.dist

    def sample(self, step: int) -> tuple[Rollout, bool]:
        """The step's rollout (saved before it is executed) and whether it was replayed."""
        folder, d = self.env.folder, self.dist
        saved = d.on_main(folder.load_rollout, step)
        rollout = Rollout.from_dict(saved) if saved is not None else None
        if rollout is None:
            p = d.on_main(self.env.prompts, self.cfg.batch_size, self.policy.tokenizer)
            c = self.cfg
            rollout = generate_rollout(
                step, p.prompts, p.parent_ids, self.policy, self.ppo.policy, c.sampling, c.seed,
                d, c.cpu_threads, p.parent_codes,
            )  # fmt: skip
            if d.main:
                folder.save_rollout(step, rollout.to_dict())
        self.on_stage(step, "generated")
        return rollout, saved is not None

    def execute(self, answers: Answers) -> Executed:
        """Run and grade the step's scripts on the main process; no samples when the buffer
        holds the whole step already (a replayed step), or on the other processes."""
        stored = self.env.step_samples(answers.step) if self.dist.main else []
        if not self.dist.main or len(stored) == self.cfg.batch_size:
            counts = answer_counts(answers.actions(self.cfg.action))  # pure: recomputed
            return Executed([], counts, answers.tokens, 0.0, answers.gen_seconds, answers.capped)
        if stored:
            raise RuntimeError(
                f"buffer holds a partial step {answers.step} ({len(stored)} samples)"
            )
        return self.env.execute(answers)

    def update(self, rollout: Rollout, scored: Scored) -> tuple[dict[str, float], float]:
        """One PPO update on this process's rows (infra rows left out); ``(stats, seconds)``."""
        d, pad = self.dist, self.policy.tokenizer.pad_token_id
        rows = trainable_rows(self.cfg.batch_size, d.world, d.rank, infra_mask(scored.samples))
        stats, ppo_s = ppo_update(self.ppo, rollout, scored.rewards.rewards, rows, pad)
        self.on_stage(rollout.step, "updated")
        return stats, ppo_s

    def checkpoint(self, step: int, last: bool) -> None:
        """Checkpoint every ``checkpoint_every`` steps and after the ``last`` one (collective)."""
        if step % self.cfg.checkpoint_every == 0 or last:
            self.env.recorder.checkpoint(self.ppo, step, self.cfg.keep_checkpoints)
            self.on_stage(step, "checkpointed")

    def step(self, step: int) -> tuple[StepRecord, str | None]:
        """Run training step ``step`` (each stage idempotent, see the module docstring); its
        record and why the run ends after it (None: it goes on)."""
        t0, env = time.perf_counter(), self.env
        rollout, replayed = self.sample(step)  # parents -> prompts -> responses
        answers = Answers.of_rollout(rollout)
        executed = self.execute(answers)  # scripts -> graded outcomes
        samples = env.store(step, executed.samples)  # durable; on every process
        scored = env.score(step, samples, answers.tokens)  # refit rho_hat; r - rho * delta
        stats, ppo_s = self.update(rollout, scored)  # PPO
        stop = env.stop_after(step)  # its steps, or every chain's budget
        self.checkpoint(step, last=stop is not None)
        rec = env.record(
            scored, executed, t0=t0, update_seconds=ppo_s, update_stats=stats, replayed=replayed
        )
        return rec, stop

    def run(self) -> list[StepRecord]:
        """Seed (once), then steps ``start_step .. cfg.steps`` with a progress display; with
        ``cfg.exec_budget_s``, stop after the step at which every chain has used the budget
        (also when resuming such a run: then no step runs)."""
        env = self.env
        env.seed()
        env.rebuild(self.start_step)
        env.start(self.start_step, self.progress)
        records: list[StepRecord] = []
        stop = env.stop_after(self.start_step - 1)
        step = self.start_step
        while stop is None:
            rec, stop = self.step(step)
            records.append(rec)
            step += 1
        if stop == "budget" and env.console is not None:
            env.console.budget_spent(step - 1)
        return records

    def close(self) -> None:
        self.env.close()


def train(
    cfg: LoopConfig,
    run_dir: str | os.PathLike,
    resume: bool = False,
    backends: Backends | None = None,
    progress: bool = True,
    on_stage: Callable[[int, str], None] | None = None,
) -> list[StepRecord]:
    """Run (or resume) a training run in ``run_dir``; returns the records of the steps it ran.

    The main process (``RANK`` 0) holds the run folder's lock (``RunFolder.lock``) from before
    the model loads until the run ends.

    Raises:
        ValueError: bad settings, a missing task or model, or an existing run without ``resume``.
        RunFolderBusy: another process runs or resumes ``run_dir`` (a ``ValueError``).
    """
    main = int(os.environ.get("RANK", "0")) == 0
    lock = RunFolder(run_dir).lock() if main else None
    try:
        trainer = Trainer(cfg, Path(run_dir), backends, resume, progress, on_stage)
        try:
            return trainer.run()
        finally:
            trainer.close()
    finally:
        if lock is not None:
            lock.release()
