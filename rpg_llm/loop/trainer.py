"""The self-improvement training loop: parents -> prompts -> scripts -> execution -> rewards -> PPO.

:meth:`Trainer.step` is the paper's Algorithm 1 (DESIGN.md section 7), one stage per line:

1. rollout (:mod:`.rollout`): the top-``B`` buffer entries by ``raw_reward - rho_hat * time``
   (vanilla: raw reward) become improve prompts (the base prompt while the buffer is empty); one
   response per prompt;
2. execution (:mod:`.execution`): the fenced code blocks run in parallel in the sandbox and are
   graded; every sample is stored durably;
3. accounting (:mod:`.accounting`): the estimator is refitted on the slot sums and gives this
   step's ``rho_hat``; rewards are relative ``r - rho_hat * delta`` (RPG) or raw (vanilla), plus
   the improvement bonus;
4. update (:mod:`.update`): one PPO step;
5. recording (:mod:`.recording`): metrics, TensorBoard, checkpoints.

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
from rpg_llm.env.sandbox.workdir import remove_stale_workdirs
from rpg_llm.loop.accounting import Accounts, RateTracker, TaskRewards, infra_mask, nanogpt_rewards
from rpg_llm.loop.backends import Backends, default_backends
from rpg_llm.loop.budget import budget_spent
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.execution import execute_rollout, execute_seeds, rollout_actions
from rpg_llm.loop.recording import Recorder, StepRecord, step_record
from rpg_llm.loop.rollout import Rollout, generate_rollout, make_prompts
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.loop.update import ppo_update, trainable_rows

__all__ = ["Trainer", "train", "SEED_STEP", "weights_digest", "answer_counts"]

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

        self.cfg = cfg
        on_cpu = cfg.device == "cpu" or not torch.cuda.is_available()
        self.dist = Dist(Accelerator(cpu=on_cpu))  # cpu=True: several processes on CPUs (gloo)
        if cfg.batch_size % self.dist.world:
            raise ValueError(
                f"--batch-size {cfg.batch_size} must be a multiple of the {self.dist.world} "
                "processes"
            )
        self.folder = RunFolder(run_dir)
        self.backends = backends or default_backends(cfg)
        self.progress = progress
        self.on_stage = on_stage or (lambda step, stage: None)
        self.comp = self.backends.load_task(cfg.task, cfg.data_root)
        if resume:
            self.folder.load_config()
            self.folder.check_resumable()  # before the model loads
        else:
            self._create_folder()
        self.recorder = Recorder(self.folder, self.dist.main, self.dist.rank)
        log.info("run %s: %s", self.folder.root, json.dumps(cfg.to_dict(), default=str))
        self._load_policy(resume)
        self.buffer = self._open_buffer()
        self.sandbox = self.backends.make_sandbox(cfg.sandbox)
        limits = getattr(self.sandbox, "limits", None)
        if self.dist.main and limits is not None:
            removed = remove_stale_workdirs(limits.workdir_root)
            if removed:
                log.info("removed %d working folders of ended processes", len(removed))
        self.executor = self.backends.make_executor(cfg.executor, cfg.workers)
        num_slots = cfg.num_slots or min(128, cfg.batch_size)
        rates = RateTracker(self.backends.estimator, num_slots, cfg.seed, cfg.estimator_batches)
        self.accounts = Accounts(rates, cfg.reward, _task_rewards(self.comp))
        self.start_step = self._restore() if resume else 1

    # -- set-up ---------------------------------------------------------------------------------
    def _create_folder(self) -> None:
        cfg = self.cfg
        seeded = "seeded" if cfg.seed_buffer else "unseeded"
        record = cfg.to_dict() | {
            "method": cfg.method,  # also at the top, for readers of the run folder
            "competition": self.comp.id,
            "seeded": cfg.seed_buffer,
            "label": f"{cfg.method} ({seeded})",
            "torch": torch.__version__,
        }
        if self.dist.main:
            self.folder.create(record)
        self.dist.barrier()

    def _load_policy(self, resume: bool) -> None:
        from rpg_llm.learner.policy import load_policy
        from rpg_llm.learner.ppo import PPOTrainer, return_large_frees_to_os

        if (self.cfg.device or str(self.dist.acc.device)).startswith("cpu"):
            return_large_frees_to_os()  # peak RSS: freed tensors leave the process
        t0 = time.perf_counter()
        self.policy = load_policy(self.cfg.model, device=self.cfg.device or self.dist.acc.device)
        if self.policy.device.type == "cpu" and self.cfg.cpu_threads:
            torch.set_num_threads(self.cfg.cpu_threads)
        log.info("policy %s loaded in %.1f s", self.policy.path, time.perf_counter() - t0)
        self.sft_losses = self._warm_start(resume)  # before the trainer: reference = SFT weights
        torch.manual_seed(self.cfg.seed)
        # the trainer's log-probs are taken at the sampler's temperature (rpg_llm.learner.ppo)
        self.ppo = PPOTrainer(
            self.policy.model,
            self.cfg.ppo,
            accelerator=self.dist.acc,
            temperature=self.cfg.sampling.temperature,
        )

    def prompt_description(self) -> str:
        """The description the prompts show (``""`` with ``--no-description``)."""
        return self.comp.description if self.cfg.describe else ""

    def _count_tokens(self, s: str) -> int:
        return len(self.policy.tokenizer(s, add_special_tokens=False)["input_ids"])

    def _warm_start(self, resume: bool) -> list[float]:
        """SFT warm start (``cfg.sft_steps`` steps; :mod:`rpg_llm.learner.sft`) of the actor in
        place.

        Fresh run: the losses go to ``metrics.jsonl`` (lines with ``step`` 0 and ``sft_step``)
        and TensorBoard (``sft/loss``); the fine-tuned weights are written once to
        ``sft_weights.safetensors`` and ``sft.json`` records the losses with their SHA-256.
        Resume: the stored weights are loaded instead of re-running the SFT (so the PPO
        reference -- and with LoRA the frozen base -- is the fine-tuned model again) and their
        SHA-256 checked against ``sft.json``. A run folder without the weights file (written
        before they were kept) re-runs the seeded SFT (CPU-deterministic), checks it the same
        way and then stores the weights.

        Raises:
            RuntimeError: on resume, the loaded or re-run SFT weights differ from the stored
                hash.
        """
        cfg = self.cfg
        if cfg.sft_steps == 0:
            return []
        t0 = time.perf_counter()
        path = self.folder.root / "sft.json"
        stored = json.loads(path.read_text()) if resume and path.exists() else None
        weights = self.folder.sft_weights_path
        if stored is not None and weights.exists():
            from safetensors.torch import load_model

            load_model(self.policy.model, str(weights), strict=True)
            self._check_sft_digest(stored, path, "loaded")
            log.info("SFT weights loaded from %s in %.1f s", weights, time.perf_counter() - t0)
            return list(stored.get("losses", []))
        losses, digest = self._run_sft(record=not resume)
        if stored is not None:
            self._check_sft_digest(stored, path, "re-run", digest)
        if self.dist.main:
            self._save_sft_weights()
            if stored is None:
                info = {"steps": cfg.sft_steps, "losses": losses, "weights_sha256": digest}
                path.write_text(json.dumps(info, indent=1) + "\n")
        self.dist.barrier()
        log.info(
            "SFT warm start: %d steps in %.1f s, loss %s",
            cfg.sft_steps,
            time.perf_counter() - t0,
            " ".join(f"{x:.3f}" for x in losses),
        )
        return losses

    def _run_sft(self, record: bool) -> tuple[list[float], str]:
        """Build the SFT examples and fine-tune the actor in place; returns the losses and the
        fine-tuned weights' :func:`weights_digest` (hashed once: ~0.5 GB for the 135M model).

        The result is memoised by :mod:`rpg_llm.learner.sft_cache` (keyed by the starting weights,
        the
        pairs and every SFT setting; bit-identical on a CPU), so runs that share them -- the
        arms and seeds of ``paper_figures.llm_table`` at one ``--sft-seed`` -- compute it once.
        """
        import gc

        from rpg_llm.learner import sft_cache
        from rpg_llm.learner.sft import build_sft_examples, sft_warm_start
        from rpg_llm.loop.rollout import CHAT_TEMPLATE_ROOM

        cfg = self.cfg
        seed = cfg.seed if cfg.sft_seed is None else cfg.sft_seed
        budget = cfg.sampling.max_prompt_tokens - CHAT_TEMPLATE_ROOM
        examples = build_sft_examples(
            self.prompt_description(),
            self.backends.baseline_solutions(self.comp.id),
            cfg.action,
            cfg.timeout_s,
            n=cfg.sft_examples,
            seed=seed,
            max_prompt_tokens=budget,
            count_tokens=self._count_tokens,
        )
        settings = {
            "steps": cfg.sft_steps,
            "batch_size": cfg.sft_batch_size,
            "lr": cfg.sft_lr,
            "seed": seed,
            "max_prompt_tokens": cfg.sampling.max_prompt_tokens,
            "cpu_threads": cfg.cpu_threads,
            "device": str(self.policy.device),
        }
        # exact memoisation needs a deterministic SFT: one process on a CPU
        use_cache = self.policy.device.type == "cpu" and self.dist.world == 1
        if use_cache:
            sft_cache.max_entries()  # a bad RPG_SFT_CACHE_ENTRIES fails before the SFT runs
        key = sft_cache.sft_key(weights_digest(self.policy.model), examples, settings)
        cached = sft_cache.load_entry(key, self.policy.model, weights_digest) if use_cache else None
        if cached is not None:
            losses = [float(x) for x in cached["losses"]]
            if record:
                for k, loss in enumerate(losses, start=1):
                    self.recorder.record_sft(k, loss)
            log.info("SFT warm start: %d steps loaded from the SFT cache (%s)", len(losses), key)
            return losses, str(cached["weights_sha256"])  # load_entry checked it
        losses = sft_warm_start(
            self.policy,
            examples,
            cfg.sft_steps,
            batch_size=cfg.sft_batch_size,
            lr=cfg.sft_lr,
            seed=seed,
            max_prompt_tokens=cfg.sampling.max_prompt_tokens,
            cpu_threads=cfg.cpu_threads,
            on_step=self.recorder.record_sft if record else None,
        )
        gc.collect()  # the SFT optimiser states and graphs go before PPO allocates its own
        digest = weights_digest(self.policy.model)
        if use_cache:
            info = {"losses": losses, "weights_sha256": digest}
            try:
                sft_cache.store_entry(key, self.policy.model, {**info, "settings": settings})
            except OSError as err:  # a full or read-only cache costs time, never the run
                log.warning("SFT cache not written: %s", err)
        return losses, digest

    def _check_sft_digest(
        self, stored: dict[str, Any], path: Path, how: str, digest: str | None = None
    ) -> None:
        """Raises RuntimeError when the actor's weights (``digest``, None: hash them now) are
        not the ones ``stored`` (``sft.json``) records."""
        digest = digest or weights_digest(self.policy.model)
        if stored.get("weights_sha256") != digest:
            raise RuntimeError(
                f"the {how} SFT warm start gave other weights than {path} records "
                f"(sha256 {digest[:12]}... != {str(stored.get('weights_sha256'))[:12]}...): "
                "the PPO reference would differ from the run's"
            )

    def _save_sft_weights(self) -> None:
        """Write the fine-tuned weights to the run folder atomically (safetensors)."""
        from safetensors.torch import save_model

        weights = self.folder.sft_weights_path
        tmp = weights.with_name(weights.name + ".tmp")
        save_model(self.policy.model, str(tmp))
        os.replace(tmp, weights)

    def _open_buffer(self) -> Any:
        capacity = self.cfg.buffer_capacity_factor * self.cfg.batch_size
        buffer = None
        if self.dist.main:  # the main process makes the database; the others open it after
            buffer = self.backends.buffer_cls(self.folder.buffer_path, capacity=capacity)
        self.dist.barrier()
        return buffer or self.backends.buffer_cls(self.folder.buffer_path, capacity=capacity)

    def _restore(self) -> int:
        """Load the last checkpoint; returns the first step to run (the estimator and best
        score are rebuilt in :meth:`rebuild`)."""
        last = self.folder.latest_checkpoint()
        if last is not None:
            self.ppo.load(self.folder.checkpoint_path(last))
        done = last or 0
        self.recorder.start_step = done + 1
        if self.dist.main:
            self.folder.truncate_metrics(done)
        log.info("resuming after step %d (checkpoint %s)", done, last)
        return done + 1

    # -- the buffer ----------------------------------------------------------------------------
    def step_samples(self, step: int) -> list[Any]:
        """The stored samples of ``step`` of this run, in row order."""
        return self.buffer.step_samples(self.cfg.name, step)

    def rebuild(self) -> None:
        """Replay the estimator, slot sums and best score over the seeds and the checkpointed
        steps ``1 .. start_step - 1`` from the buffer (the same refits as the first time)."""
        self.accounts.feed_seeds(SEED_STEP, self.step_samples(SEED_STEP))
        for step in range(1, self.start_step):
            samples = self.step_samples(step)
            if len(samples) != self.cfg.batch_size:
                raise RuntimeError(f"buffer holds {len(samples)} samples for checkpointed {step}")
            self.accounts.account(step, samples)

    def seed_buffer(self) -> int:
        """Execute, grade and store the task's baseline solutions as step 0 (once per run)."""
        n = self._seed_buffer() if self.dist.main else 0
        self.dist.barrier()
        return n

    def _seed_buffer(self) -> int:
        if not self.cfg.seed_buffer or self.step_samples(SEED_STEP):
            return 0
        solutions = self.backends.baseline_solutions(self.comp.id)
        if not solutions:
            log.warning("task %s has no baseline solutions: the run starts unseeded", self.comp.id)
            return 0
        samples = execute_seeds(
            solutions, self.cfg, self.comp, self.backends, self.sandbox, self.executor, SEED_STEP
        )
        self.buffer.add_many(samples)
        log.info("seeded the buffer with %d baseline solutions", len(samples))
        return len(samples)

    # -- stages ---------------------------------------------------------------------------------
    def prompts(self) -> tuple[list[str], list[int | None], list[str | None]]:
        """This step's ``B`` prompts, parent ids and parent scripts (main process; see
        :mod:`.rollout`)."""
        rho = self.accounts.rho_hat if self.cfg.method == "rpg" else None
        empty = not self.buffer.top(1, rho, run=self.cfg.name)
        baselines = self.backends.baseline_solutions(self.comp.id) if empty else None
        return make_prompts(
            self.buffer,
            self.cfg.name,
            self.cfg.batch_size,
            rho,
            self.prompt_description(),
            self.cfg.timeout_s,
            self.cfg.sampling.max_prompt_tokens,
            self.policy.tokenizer,
            action=self.cfg.action,
            baselines=baselines,
        )

    def rollout(self, step: int) -> tuple[Rollout, bool]:
        """The step's rollout and whether it was replayed from the run folder."""
        saved = self.dist.on_main(self.folder.load_rollout, step)
        if saved is not None:
            return Rollout.from_dict(saved), True
        prompts, parent_ids, parent_codes = self.dist.on_main(self.prompts)
        rollout = generate_rollout(
            step,
            prompts,
            parent_ids,
            self.policy,
            self.ppo.policy,
            self.cfg.sampling,
            self.cfg.seed,
            self.dist,
            self.cfg.cpu_threads,
            parent_codes,
        )
        if self.dist.main:
            self.folder.save_rollout(step, rollout.to_dict())
        return rollout, False

    def execute(self, step: int, rollout: Rollout) -> tuple[list[Any], float]:
        """Execute, grade and store on the main process; every process gets the samples."""
        return self.dist.on_main(self._execute_main, step, rollout)

    def _execute_main(self, step: int, rollout: Rollout) -> tuple[list[Any], float]:
        stored = self.step_samples(step)
        if len(stored) == self.cfg.batch_size:
            return stored, 0.0
        if stored:
            raise RuntimeError(f"buffer holds a partial step {step} ({len(stored)} samples)")
        samples, seconds = execute_rollout(
            rollout, self.cfg, self.comp, self.backends, self.sandbox, self.executor
        )
        self.buffer.add_many(samples)
        self.on_stage(step, "stored")
        return self.step_samples(step), seconds

    def checkpoint(self, step: int) -> None:
        """Checkpoint every ``checkpoint_every`` steps and after the last one: step ``steps``,
        or the step that spent the execution budget (collective)."""
        last = step == self.cfg.steps or self.budget_spent(step)
        if step % self.cfg.checkpoint_every == 0 or last:
            self.recorder.checkpoint(self.ppo, step, self.cfg.keep_checkpoints)
            self.on_stage(step, "checkpointed")

    def budget_spent(self, step: int) -> bool:
        """Whether every chain has used ``cfg.exec_budget_s`` seconds of execution over steps
        ``1 .. step`` (:func:`rpg_llm.loop.budget.budget_spent`; False without a budget). Decided on
        the main process and shared, so every process stops at the same step (collective)."""
        if self.cfg.exec_budget_s is None or step < 1:
            return False
        return bool(self.dist.on_main(self._budget_spent_main, step))

    def _budget_spent_main(self, step: int) -> bool:
        totals = self.buffer.exec_seconds_by_row(self.cfg.name, step)
        return budget_spent(totals, self.cfg.batch_size, float(self.cfg.exec_budget_s))

    # -- one step: Algorithm 1 -----------------------------------------------------------------
    def step(self, step: int) -> StepRecord:
        """Run training step ``step`` (each stage idempotent, see the module docstring)."""
        t_start = time.perf_counter()
        rho_parents = self.accounts.rho_hat
        rollout, replayed = self.rollout(step)  # parents -> prompts -> responses
        self.on_stage(step, "generated")
        samples, exec_s = self.execute(step, rollout)  # scripts -> outcomes, stored
        sr = self.accounts.account(step, samples)  # rho_hat of THIS step, rewards
        self.recorder.write_samples(samples, sr.rewards, [len(r) for r in rollout.response_ids])
        d = self.dist
        rows = trainable_rows(self.cfg.batch_size, d.world, d.rank, infra_mask(samples))
        pad = self.policy.tokenizer.pad_token_id
        stats, ppo_s = ppo_update(self.ppo, rollout, sr.rewards, rows, pad)  # PPO
        self.on_stage(step, "updated")
        self.checkpoint(step)
        best = self.accounts.best_generated
        rec = step_record(
            step, samples, sr, rho_parents, rollout, exec_s, ppo_s, stats, replayed, best
        )
        rec.answers = answer_counts(rollout_actions(rollout, self.cfg.action))
        return self.recorder.record(rec, t_start)

    def run(self) -> list[StepRecord]:
        """Seed (once), then steps ``start_step .. cfg.steps`` with a progress display; with
        ``cfg.exec_budget_s``, stop before the first step at which every chain has used the
        budget (also when resuming such a run: then no step runs)."""
        self.seed_buffer()
        self.rebuild()
        self.recorder.reset_samples(self.step_samples(SEED_STEP), self.start_step - 1)
        bar = self._progress_bar()
        records = []
        for step in range(self.start_step, self.cfg.steps + 1):
            if self.budget_spent(step - 1):
                if bar is not None:
                    bar.total = bar.n  # the bar ends full: no step is missing
                    bar.refresh()
                if self.dist.main:
                    self._say(self._budget_line(step - 1), bar)
                break
            rec = self.step(step)
            records.append(rec)
            if self.dist.main:
                self._say(rec.line(self.cfg.steps, self.cfg.batch_size, self.cfg.method), bar)
            if bar is not None:
                bar.set_postfix(
                    rho_hat=f"{rec.rho_hat:.3g}",
                    reward=f"{rec.mean_reward:.3g}",
                    delta=f"{rec.mean_delta:.1f}s",
                    valid=f"{rec.valid_fraction:.2f}",
                    refresh=False,
                )
                bar.update(1)
        if bar is not None:
            bar.close()
        return records

    def _budget_line(self, step: int) -> str:
        left = self.cfg.steps - step
        return (
            f"execution budget {self.cfg.exec_budget_s:g} s per chain spent after step {step}: "
            f"stopping ({left} of the {self.cfg.steps} steps not needed)"
        )

    def _say(self, line: str, bar: Any) -> None:
        log.info(line)
        if bar is not None:
            bar.write(line)
        else:
            print(line, flush=True)

    def _progress_bar(self) -> Any:
        if not (self.progress and self.dist.main):
            return None
        from tqdm.auto import tqdm

        return tqdm(
            total=self.cfg.steps,
            initial=self.start_step - 1,
            desc=f"{self.cfg.method} steps",
            unit="step",
            dynamic_ncols=True,
        )

    def close(self) -> None:
        shutdown = getattr(self.executor, "shutdown", None)
        if shutdown is not None:
            shutdown()
        close = getattr(self.buffer, "close", None)
        if close is not None:
            close()
        self.recorder.close()


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 (hex) of a model's parameters, in ``named_parameters`` order (names, shapes,
    dtypes and bytes): equal digests mean bit-identical weights."""
    import hashlib

    h = hashlib.sha256()
    for name, p in model.named_parameters():
        t = p.detach().to("cpu").contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def answer_counts(actions: list[Any]) -> dict[str, int]:
    """Counts of a step's answers by what they became (:class:`rpg_llm.env.actions.Action`):
    ``edit`` (edits applied), ``changed`` (edits that change at least one value), ``script``
    (whole scripts), ``invalid`` (no block, or an edit that cannot be applied)."""
    return {
        "edit": sum(a.kind == "edit" for a in actions),
        "changed": sum(a.kind == "edit" and bool(a.changed) for a in actions),
        "script": sum(a.kind == "script" for a in actions),
        "invalid": sum(a.kind == "invalid" for a in actions),
    }


def _task_rewards(comp: Any) -> TaskRewards | None:
    """The task's own rewards (a NanoGPT task: :func:`nanogpt_rewards` of its target), or None."""
    from rpg_llm.env.tasks import nanogpt

    if isinstance(comp, nanogpt.NanoGPTTask):
        return nanogpt_rewards(comp.settings.target_loss)
    return None


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
