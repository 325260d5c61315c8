"""The self-improvement training loop: parents -> prompts -> scripts -> execution -> rewards -> PPO.

:meth:`Trainer.step` is the paper's Algorithm 1 (DESIGN.md section 7), one stage per line:

1. sample (:mod:`.rollout`): the top-``B`` buffer entries by ``raw_reward - rho_hat * time``
   (vanilla: raw reward) become improve prompts (the base prompt while the buffer is empty); one
   response per prompt;
2. execute (:mod:`.execution`): the fenced code blocks run in parallel in the task's sandbox and
   are graded (``Task.run_batch``);
3. store: every sample goes to the buffer in one transaction;
4. fit rho (:mod:`.accounting`): the estimator is refitted on the slot sums: this step's
   ``rho_hat``;
5. relative reward: ``r - rho_hat * delta`` (RPG) or raw (vanilla), plus the improvement bonus;
6. PPO (:mod:`.update`): one update, then a checkpoint every ``checkpoint_every`` steps;
7. record (:mod:`.recording`): metrics, TensorBoard, the step's line.

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

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rpg_llm.config import LoopConfig
from rpg_llm.env.actions import Action
from rpg_llm.env.sandbox.workdir import remove_stale_workdirs
from rpg_llm.loop.accounting import Accounts, RateTracker, check_task_rewards, infra_mask
from rpg_llm.loop.backends import Backends, default_backends
from rpg_llm.loop.budget import budget_spent
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.execution import execute_rollout, rollout_actions
from rpg_llm.loop.recording import Console, Recorder, StepRecord, step_record
from rpg_llm.loop.rewards import StepRewards
from rpg_llm.loop.rollout import Rollout, generate_rollout, make_prompts
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.loop.setup import (
    create_folder,
    load_learner,
    open_buffer,
    rebuild,
    restore,
    seed_buffer,
)
from rpg_llm.loop.update import ppo_update, trainable_rows

__all__ = ["Trainer", "train", "SEED_STEP", "answer_counts"]

log = logging.getLogger("rpg_llm.loop")

SEED_STEP = 0  # buffer step of the seed solutions; training steps are 1..steps


class Trainer:
    """One run: the policy, PPO trainer, buffer, estimator and run folder, and the stages.

    Use :func:`train`; this class exists so the benchmark and tests can drive single steps.

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
        from accelerate import Accelerator

        self.cfg, self.progress = cfg, progress
        on_cpu = cfg.device == "cpu" or not torch.cuda.is_available()
        self.dist = d = Dist(Accelerator(cpu=on_cpu))  # cpu: several processes on CPUs (gloo)
        if cfg.batch_size % d.world:
            msg = f"--batch-size {cfg.batch_size} must be a multiple of the {d.world} processes"
            raise ValueError(msg)
        self.folder, self.backends = RunFolder(run_dir), backends or default_backends(cfg)
        self.on_stage = on_stage or (lambda step, stage: None)
        self.comp = b = self.backends.load_task(cfg.task, cfg.data_root)
        check_task_rewards(cfg.reward, b.own_rewards())  # before the model loads
        if resume:
            self.folder.load_config()
            self.folder.check_resumable()  # before the model loads
        else:
            create_folder(self.folder, cfg, self.comp.id, d)
        self.recorder = Recorder(self.folder, d.main, d.rank)
        log.info("run %s: %s", self.folder.root, json.dumps(cfg.to_dict(), default=str))
        seeds = lambda: self.backends.baseline_solutions(self.comp.id)  # noqa: E731
        self.policy, self.ppo, self.sft_losses = load_learner(
            cfg, d, self.folder, self.recorder, self.description, seeds, resume
        )
        self.buffer = open_buffer(self.backends.buffer_cls, self.folder, cfg, d)
        self.sandbox = self.backends.make_sandbox(cfg.sandbox)
        limits = getattr(self.sandbox, "limits", None)
        if d.main and limits is not None and remove_stale_workdirs(limits.workdir_root):
            log.info("removed the working folders of ended processes")
        self.executor = self.backends.make_executor(cfg.executor, cfg.workers)
        slots = cfg.num_slots or min(128, cfg.batch_size)
        rates = RateTracker(self.backends.estimator, slots, cfg.seed, cfg.estimator_batches)
        self.accounts = Accounts(rates, cfg.reward, b.own_rewards())
        self.start_step = restore(self.folder, self.ppo, self.recorder, d) if resume else 1

    @property
    def description(self) -> str:
        """The description the prompts show (``""`` with ``--no-description``)."""
        return self.comp.description if self.cfg.describe else ""

    def step_samples(self, step: int) -> list[Sample]:
        """The stored samples of ``step`` of this run, in row order."""
        return self.buffer.step_samples(self.cfg.name, step)

    def rebuild(self) -> None:
        """The estimator, slot sums and best score of the seeds and checkpointed steps."""
        b = self.cfg.batch_size
        rebuild(self.accounts, self.step_samples, SEED_STEP, self.start_step, b)

    def seed_buffer(self) -> int:
        """Execute, grade and store the task's baseline solutions as step 0 (once per run)."""
        env = (self.comp, self.backends, self.sandbox, self.executor)
        return seed_buffer(self.cfg, *env, self.buffer, self.dist, SEED_STEP)

    def prompts(self) -> tuple[list[str], list[int | None], list[str | None]]:
        """This step's ``B`` prompts, parent ids and parent scripts (main process;
        :func:`.rollout.make_prompts`)."""
        c = self.cfg
        rho = c.reward.ranking_rho(self.accounts.rho_hat)
        empty = not self.buffer.top(1, rho, run=c.name)
        seeds = self.backends.baseline_solutions(self.comp.id) if empty else None
        budget, tok = c.sampling.max_prompt_tokens, self.policy.tokenizer
        return make_prompts(
            self.buffer, c.name, c.batch_size, rho, self.description, c.timeout_s, budget, tok,
            action=c.action, baselines=seeds,
        )  # fmt: skip

    def sample(self, step: int) -> tuple[Rollout, bool]:
        """The step's rollout (saved before it is executed) and whether it was replayed."""
        saved = self.dist.on_main(self.folder.load_rollout, step)
        rollout = Rollout.from_dict(saved) if saved is not None else None
        if rollout is None:
            prompts, parent_ids, parent_codes = self.dist.on_main(self.prompts)
            c = self.cfg
            rollout = generate_rollout(
                step, prompts, parent_ids, self.policy, self.ppo.policy, c.sampling, c.seed,
                self.dist, c.cpu_threads, parent_codes,
            )  # fmt: skip
            if self.dist.main:
                self.folder.save_rollout(step, rollout.to_dict())
        self.on_stage(step, "generated")
        return rollout, saved is not None

    def execute(self, step: int, rollout: Rollout) -> tuple[list[Sample], float]:
        """Run and grade the step's scripts on the main process: the new samples and seconds
        (none when the buffer holds the whole step already)."""
        stored = self.step_samples(step) if self.dist.main else []
        if not self.dist.main or len(stored) == self.cfg.batch_size:
            return [], 0.0
        if stored:
            raise RuntimeError(f"buffer holds a partial step {step} ({len(stored)} samples)")
        args = (self.cfg, self.comp, self.backends, self.sandbox, self.executor)
        return execute_rollout(rollout, *args)

    def store(self, step: int, fresh: list[Sample], exec_s: float) -> tuple[list[Sample], float]:
        """Store ``fresh`` in one transaction (main); every process gets the step's samples."""

        def on_main() -> tuple[list[Sample], float]:
            if fresh:
                self.buffer.add_many(fresh)
                self.on_stage(step, "stored")
            return self.step_samples(step), exec_s

        return self.dist.on_main(on_main)

    def relative_rewards(self, samples: list[Sample], rho: float, rollout: Rollout) -> StepRewards:
        """The step's rewards at ``rho`` (:meth:`Accounts.relative_rewards`), in samples.csv."""
        sr = self.accounts.relative_rewards(samples, rho)
        self.recorder.write_samples(samples, sr.rewards, [len(r) for r in rollout.response_ids])
        return sr

    def update(self, step: int, rollout: Rollout, samples: list[Sample], sr: StepRewards) -> Any:
        """One PPO update on this process's rows (infra rows left out), then a checkpoint every
        ``checkpoint_every`` steps and after the last one; returns ``(stats, seconds)``."""
        d, pad = self.dist, self.policy.tokenizer.pad_token_id
        rows = trainable_rows(self.cfg.batch_size, d.world, d.rank, infra_mask(samples))
        stats, ppo_s = ppo_update(self.ppo, rollout, sr.rewards, rows, pad)
        self.on_stage(step, "updated")
        self.checkpoint(step)
        return stats, ppo_s

    def checkpoint(self, step: int) -> None:
        """Checkpoint every ``checkpoint_every`` steps and after the last one: step ``steps``,
        or the step that spent the execution budget (collective)."""
        last = step == self.cfg.steps or self.budget_spent(step)
        if step % self.cfg.checkpoint_every == 0 or last:
            self.recorder.checkpoint(self.ppo, step, self.cfg.keep_checkpoints)
            self.on_stage(step, "checkpointed")

    def budget_spent(self, step: int) -> bool:
        """Whether every chain has used ``cfg.exec_budget_s`` seconds of execution over steps
        ``1 .. step`` (:func:`.budget.budget_spent`; False without a budget), decided on the main
        process so that every process stops at the same step (collective)."""
        budget = self.cfg.exec_budget_s
        if budget is None or step < 1:
            return False
        totals = self.dist.on_main(self.buffer.exec_seconds_by_row, self.cfg.name, step)
        return budget_spent(totals, self.cfg.batch_size, float(budget))

    def step(self, step: int) -> StepRecord:
        """Run training step ``step`` (each stage idempotent, see the module docstring)."""
        t0, rho_parents = time.perf_counter(), self.accounts.rho_hat
        rollout, replayed = self.sample(step)  # parents -> prompts -> responses
        fresh, exec_s = self.execute(step, rollout)  # scripts -> graded outcomes
        samples, exec_s = self.store(step, fresh, exec_s)  # durable; on every process
        rho = self.accounts.fit_rho(step, samples)  # NIW refit on the slot sums
        sr = self.relative_rewards(samples, rho, rollout)  # r - rho * delta (+ bonus)
        stats, ppo_s = self.update(step, rollout, samples, sr)  # PPO, checkpoint
        best = self.accounts.best_generated
        rec = step_record(
            step, samples, sr, rho_parents, rollout, exec_s, ppo_s, stats, replayed, best
        )
        rec.answers = answer_counts(rollout_actions(rollout, self.cfg.action))
        return self.recorder.record(rec, t0)  # metrics.jsonl, TensorBoard

    def run(self) -> list[StepRecord]:
        """Seed (once), then steps ``start_step .. cfg.steps`` with a progress display; with
        ``cfg.exec_budget_s``, stop before the first step at which every chain has used the
        budget (also when resuming such a run: then no step runs)."""
        self.seed_buffer()
        self.rebuild()
        self.recorder.reset_samples(self.step_samples(SEED_STEP), self.start_step - 1)
        console = Console(self.cfg, self.start_step, self.dist.main, self.progress)
        records: list[StepRecord] = []
        for step in range(self.start_step, self.cfg.steps + 1):
            if self.budget_spent(step - 1):
                console.budget_spent(step - 1)
                break
            records.append(self.step(step))
            console.step_done(records[-1])
        console.close()
        return records

    def close(self) -> None:
        for resource in (self.executor, self.buffer):
            close = getattr(resource, "shutdown", None) or getattr(resource, "close", None)
            if close is not None:
                close()
        self.recorder.close()


def answer_counts(actions: list[Action]) -> dict[str, int]:
    """Counts of a step's answers by what they became (:class:`rpg_llm.env.actions.Action`):
    ``edit`` (edits applied), ``changed`` (edits that change at least one value), ``script``
    (whole scripts), ``invalid`` (no block, or an edit that cannot be applied)."""
    return {
        "edit": sum(a.kind == "edit" for a in actions),
        "changed": sum(a.kind == "edit" and bool(a.changed) for a in actions),
        "script": sum(a.kind == "script" for a in actions),
        "invalid": sum(a.kind == "invalid" for a in actions),
    }


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
