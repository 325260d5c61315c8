"""The self-improvement training loop: parents -> prompts -> scripts -> execution -> rewards -> PPO.

One step (DESIGN.md section 7; paper Algorithm 2):

1. parents: the top-``B`` buffer entries by ``raw_reward - rho_hat * time`` (vanilla: raw reward),
   over the active set (capacity ``10 B``), cycling when short; the base prompt while the buffer
   is empty;
2. one response per prompt from the policy; the fenced code block is the script (none: invalid);
3. the scripts run in parallel in the sandbox and are graded; every sample is stored durably;
4. the reward-rate estimator is refitted on the slot sums (slot ``i`` accumulates the raw reward
   and the charged time of batch row ``i``) and gives this step's ``rho_hat``;
5. rewards (:mod:`rpg_llm.rewards`): relative ``r - rho_hat * delta`` (RPG) or raw (vanilla), plus
   the improvement bonus; one PPO update (:mod:`rpg_llm.ppo`).

Durability and resume: the responses of a step are saved before execution, the step's samples
are stored in one transaction, and the trainer is checkpointed every ``checkpoint_every`` steps.
Resuming restores the last checkpoint, rebuilds the estimator, the slot sums and the best score
from the buffer, and replays later steps from their saved responses and stored outcomes, so that
no sample is lost or stored twice.

Several processes (``accelerate launch`` / ``torchrun``, e.g. FSDP over GPUs): each process
samples its share of the rows (``rank::world``), the main process executes, grades and stores
them and writes the run folder, every process gets the samples and computes the same rewards,
and each trains on its share of the batch (gradients synchronised by accelerate).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rpg_llm.ppo import PPOBatch, PPOConfig, PPOTrainer
from rpg_llm.prompts import base_prompt, extract_code, improve_prompt
from rpg_llm.rewards import INVALID_REWARD, RewardConfig, charged_time, step_rewards
from rpg_llm.runfolder import RunFolder

__all__ = ["LoopConfig", "Backends", "StepRecord", "train", "default_backends", "SEED_STEP"]

log = logging.getLogger("rpg_llm.loop")

SEED_STEP = 0  # buffer step of the seed solutions; training steps are 1..steps
NO_CODE_TEXT = "invalid: the answer had no fenced ```python code block"


@dataclass(frozen=True)
class LoopConfig:
    """Settings of one training run (stored in ``config.json``).

    Attributes:
        method: ``"rpg"`` or ``"vanilla"``.
        task: competition id or alias (``"text"``: the offline text competition).
        model: Hugging Face id or local folder of the policy.
        steps: PPO steps (>= 1).
        batch_size: prompts per step, ``B`` (one response each).
        timeout_s: execution time limit per script, seconds.
        max_prompt_tokens, max_new_tokens: prompt budget and response cap (tokens).
        temperature, top_k, top_p: sampling (paper: 0.7, 20, 0.8).
        seed: run seed (generation and estimator draws are seeded per step from it).
        seed_buffer: store the task's baseline solutions (executed and graded) as step 0.
        sandbox: sandbox kind (``auto``, ``subprocess``, ``bwrap``, ``docker``).
        executor: ``local`` (a process pool) or ``ray``.
        workers: parallel executions.
        checkpoint_every: checkpoint period in steps (the last step is always checkpointed).
        keep_checkpoints: newest checkpoints kept.
        buffer_capacity_factor: active buffer size as a multiple of ``B`` (paper: 10).
        num_slots: estimator slots (None: ``min(128, B)``).
        estimator_batches: synthetic batches ``M`` per estimate (1000).
        gen_batch_size: prompts per ``generate`` call (None: all).
        data_root: competitions folder (None: the tasks default).
        device: torch device (None: cuda if available, else cpu).
        cpu_threads: torch threads on a CPU (None: torch's default). One thread was 4-5x faster
            than two for both decoding and the PPO step on the shared 2-core machine
            (benchmarks/RESULTS.md): the many small ops make thread barriers dominate.
        run_name: label stored with each sample (default: ``<method>-seed<seed>``).
        ppo: :class:`rpg_llm.ppo.PPOConfig` fields.
    """

    method: str = "rpg"
    task: str = "text"
    model: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    steps: int = 3
    batch_size: int = 4
    timeout_s: float = 60.0
    max_prompt_tokens: int = 2560
    max_new_tokens: int = 2500
    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.8
    seed: int = 0
    seed_buffer: bool = True
    sandbox: str = "auto"
    executor: str = "local"
    workers: int = 2
    checkpoint_every: int = 10
    keep_checkpoints: int = 2
    buffer_capacity_factor: int = 10
    num_slots: int | None = None
    estimator_batches: int = 1000
    gen_batch_size: int | None = None
    data_root: str | None = None
    device: str | None = None
    cpu_threads: int | None = 1
    run_name: str | None = None
    ppo: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.method not in ("rpg", "vanilla"):
            raise ValueError(f"--method must be rpg or vanilla, got {self.method!r}")
        for name in ("steps", "batch_size", "max_prompt_tokens", "max_new_tokens", "workers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.checkpoint_every < 1 or self.buffer_capacity_factor < 1:
            raise ValueError("checkpoint_every and buffer_capacity_factor must be >= 1")
        if not (isinstance(self.timeout_s, int | float) and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be > 0 seconds, got {self.timeout_s!r}")
        if self.executor not in ("local", "ray"):
            raise ValueError(f"--executor must be local or ray, got {self.executor!r}")
        if self.max_prompt_tokens < 256:
            raise ValueError(f"max_prompt_tokens must be >= 256, got {self.max_prompt_tokens}")
        PPOConfig(**self.ppo)  # validates the PPO fields early

    @property
    def name(self) -> str:
        return self.run_name or f"{self.method}-seed{self.seed}"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoopConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


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


@dataclass
class StepRecord:
    """Metrics of one finished step (one line of ``metrics.jsonl``)."""

    step: int
    rho_hat: float
    rho_hat_parents: float
    mean_reward: float
    mean_raw_reward: float
    mean_delta: float
    valid_fraction: float
    best_raw_reward: float
    new_best: int
    gen_seconds: float
    exec_seconds: float
    ppo_seconds: float
    step_seconds: float
    gen_tokens: int
    replayed: bool
    ppo: dict[str, float]

    def flat(self) -> dict[str, Any]:
        d = asdict(self)
        d.update({f"ppo/{k}": v for k, v in d.pop("ppo").items()})
        return d


# ----------------------------------------------------------------------------------------------
# Estimator state (rebuilt from the buffer on resume)
# ----------------------------------------------------------------------------------------------


class RateTracker:
    """Slot sums and the NIW reward-rate estimator of one run (DESIGN.md section 4).

    Slot ``i % S`` accumulates the raw reward and the charged time of batch row ``i``; slots are
    never reset. :meth:`refit` runs the estimator's ``refit`` with a key derived from
    ``(seed, step)``, so replaying the same samples gives the same ``rho_hat``.
    """

    def __init__(self, estimator: Any, num_slots: int, seed: int, num_batches: int):
        self.est = estimator
        self.num_slots = num_slots
        self.seed = seed
        self.num_batches = num_batches
        self.state = estimator.init_state(torch.float64)
        self.slot_rewards = torch.zeros(num_slots, dtype=torch.float64)
        self.slot_times = torch.zeros(num_slots, dtype=torch.float64)

    @property
    def rho_hat(self) -> float:
        return float(self.state.rho_hat)

    def refit(self, step: int, rows: list[int], raw: np.ndarray, times: np.ndarray) -> float:
        for row, r, t in zip(rows, raw, times, strict=True):
            self.slot_rewards[row % self.num_slots] += float(r)
            self.slot_times[row % self.num_slots] += float(t)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        self.state = self.est.refit(
            self.state, self.slot_rewards, self.slot_times, gen, num_batches=self.num_batches
        )
        rho = self.rho_hat
        if not math.isfinite(rho) or rho < 0:
            raise RuntimeError(f"estimator returned an invalid rho_hat {rho!r} at step {step}")
        return rho


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


def _prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _outcome_for_prompt(sample: Any) -> str:
    text = sample.outcome_text or sample.status
    return f"{text} (ran {sample.exec_time:.1f} s)"


class Trainer:
    """One run: holds the policy, PPO trainer, buffer, estimator and run folder.

    Use :func:`train`; this class exists so the benchmark and tests can drive single steps.
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

        from rpg_llm.policy import load_policy

        self.cfg = cfg
        on_cpu = cfg.device == "cpu" or not torch.cuda.is_available()
        self.acc = Accelerator(cpu=on_cpu)  # cpu=True: several processes on CPUs (gloo)
        self.main = self.acc.is_main_process
        self.world, self.rank = self.acc.num_processes, self.acc.process_index
        if cfg.batch_size % self.world:
            raise ValueError(
                f"batch_size {cfg.batch_size} must be a multiple of the {self.world} processes"
            )
        self.folder = RunFolder(run_dir)
        self.backends = backends or default_backends()
        self.progress = progress
        self.on_stage = on_stage or (lambda step, stage: None)
        self.reward_cfg = RewardConfig(cfg.method, timeout_s=float(cfg.timeout_s))
        self.comp = self.backends.load_task(cfg.task, cfg.data_root)
        if not resume:
            record = asdict(cfg) | {
                "competition": self.comp.id,
                "seeded": cfg.seed_buffer,
                "label": f"{cfg.method} ({'seeded' if cfg.seed_buffer else 'unseeded'})",
                "torch": torch.__version__,
            }
            if self.main:
                self.folder.create(record)
            self.acc.wait_for_everyone()
        self._setup_logging()
        log.info("run %s: %s", self.folder.root, json.dumps(asdict(cfg), default=str))
        t0 = time.perf_counter()
        self.policy = load_policy(cfg.model, device=cfg.device or self.acc.device)
        if self.policy.device.type == "cpu" and cfg.cpu_threads:
            torch.set_num_threads(cfg.cpu_threads)
        torch.manual_seed(cfg.seed)
        self.ppo = PPOTrainer(self.policy.model, PPOConfig(**cfg.ppo), accelerator=self.acc)
        log.info("policy %s loaded in %.1f s", self.policy.path, time.perf_counter() - t0)
        capacity = cfg.buffer_capacity_factor * cfg.batch_size
        if self.main:  # the main process makes the database; the others open it after
            self.buffer = self.backends.buffer_cls(self.folder.buffer_path, capacity=capacity)
        self.acc.wait_for_everyone()
        if not self.main:
            self.buffer = self.backends.buffer_cls(self.folder.buffer_path, capacity=capacity)
        self.sandbox = self.backends.make_sandbox(cfg.sandbox)
        self.executor = self.backends.make_executor(cfg.executor, cfg.workers)
        num_slots = cfg.num_slots or min(128, cfg.batch_size)
        self.rates = RateTracker(
            self.backends.estimator, num_slots, cfg.seed, cfg.estimator_batches
        )
        self.best = -math.inf
        self.start_step = 1
        self._tb = None
        if resume:
            self._restore()

    # -- set-up ---------------------------------------------------------------------------------
    def _setup_logging(self) -> None:
        self.folder.log_path.parent.mkdir(parents=True, exist_ok=True)
        name = "run.log" if self.main else f"run.rank{self.rank}.log"
        handler = logging.FileHandler(self.folder.log_path.with_name(name))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        root = logging.getLogger("rpg_llm")
        root.setLevel(logging.INFO)
        root.addHandler(handler)
        self._log_handler = handler

    @property
    def tb(self) -> Any:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.folder.tb_dir), purge_step=self.start_step)
        return self._tb

    def _bcast(self, obj: Any) -> Any:
        """The main process's ``obj`` on every process (identity with one process)."""
        if self.world == 1:
            return obj
        from accelerate.utils import broadcast_object_list

        box = [obj]
        broadcast_object_list(box, from_process=0)
        return box[0]

    def _gather(self, obj: Any) -> list[Any]:
        """Every process's ``obj``, in rank order (``[obj]`` with one process)."""
        if self.world == 1:
            return [obj]
        from accelerate.utils import gather_object

        return gather_object([obj])

    def _samples(self, step: int | None = None) -> list[Any]:
        rows = self.buffer.all(self.cfg.name)
        if step is not None:
            rows = [s for s in rows if s.step == step]
        return sorted(rows, key=lambda s: (s.step, s.row))

    def _restore(self) -> None:
        """Load the last checkpoint (the estimator and best score are rebuilt in :meth:`run`)."""
        last = self.folder.latest_checkpoint()
        if last is not None:
            self.ppo.load(self.folder.checkpoint_path(last))
        done = last or 0
        self.start_step = done + 1
        if self.main:
            self.folder.truncate_metrics(done)
        log.info("resuming after step %d (checkpoint %s)", done, last)

    def _rebuild(self) -> None:
        """Replay the estimator, slot sums and best score over the seeds and the checkpointed
        steps ``1 .. start_step - 1`` from the buffer (the same refits as the first time)."""
        self._account_seeds()
        for step in range(1, self.start_step):
            samples = self._samples(step)
            if len(samples) != self.cfg.batch_size:
                raise RuntimeError(f"buffer holds {len(samples)} samples for checkpointed {step}")
            self._account(step, samples)

    def _account_seeds(self) -> None:
        """The seed solutions are historical samples: they set the best score and feed the
        estimator's slots (seed ``i`` into slot ``i % S``), so ``rho_hat`` before step 1 comes
        from them (paper, section 5: the estimator is fitted from the samples in the buffer)."""
        seeds = self._samples(SEED_STEP)
        if not seeds:
            return
        raw = np.array([s.raw_reward for s in seeds], dtype=np.float64)
        valid = np.array([s.status == "ok" for s in seeds])
        delta = np.array([s.exec_time for s in seeds], dtype=np.float64)
        self.rates.refit(
            SEED_STEP, [s.row for s in seeds], raw, charged_time(valid, delta, self.reward_cfg)
        )
        if valid.any():
            self.best = max(self.best, float(raw[valid].max()))

    def _account(self, step: int, samples: list[Any]) -> Any:
        """Refit the estimator and compute rewards for a step's stored samples."""
        raw = np.array([s.raw_reward for s in samples], dtype=np.float64)
        valid = np.array([s.status == "ok" for s in samples])
        delta = np.array([s.exec_time for s in samples], dtype=np.float64)
        times = charged_time(valid, delta, self.reward_cfg)
        rho = self.rates.refit(step, [s.row for s in samples], raw, times)
        sr = step_rewards(raw, valid, delta, rho, self.best, self.reward_cfg)
        self.best = sr.best
        return sr

    # -- seeding --------------------------------------------------------------------------------
    def seed_buffer(self) -> int:
        """Execute, grade and store the task's baseline solutions as step 0 (once per run)."""
        n = self._seed_buffer() if self.main else 0
        self.acc.wait_for_everyone()
        return n

    def _seed_buffer(self) -> int:
        if not self.cfg.seed_buffer or self._samples(SEED_STEP):
            return 0
        solutions = self.backends.baseline_solutions(self.comp.id)
        if not solutions:
            log.warning("task %s has no baseline solutions: the run starts unseeded", self.comp.id)
            return 0
        codes = [code for _, code in solutions]
        outcomes = self.backends.run_batch(
            codes, self.comp, self.sandbox, float(self.cfg.timeout_s), self.executor
        )
        now = time.time()
        samples = [
            self._sample(SEED_STEP, i, None, f"seed:{name}", code, o, now)
            for i, ((name, code), o) in enumerate(zip(solutions, outcomes, strict=True))
        ]
        self.buffer.add_many(samples)
        log.info("seeded the buffer with %d baseline solutions", len(samples))
        return len(samples)

    def _sample(self, step, row, parent_id, prompt, code, outcome, now) -> Any:
        return self.backends.sample_cls(
            run=self.cfg.name,
            step=step,
            row=row,
            task=self.comp.id,
            parent_id=parent_id,
            prompt_hash=_prompt_hash(prompt),
            code=code,
            outcome_text=outcome.outcome_text,
            score=outcome.score,
            raw_reward=float(outcome.raw_reward),
            exec_time=float(outcome.delta),
            status=outcome.status if outcome.valid else _invalid_status(outcome.status),
            created_at=now,
        )

    # -- one step -------------------------------------------------------------------------------
    def _prompts(self) -> tuple[list[str], list[int | None]]:
        B = self.cfg.batch_size
        rho = self.rates.rho_hat if self.cfg.method == "rpg" else None
        parents = self.buffer.top(B, rho, run=self.cfg.name)
        desc = self.comp.description
        if not parents:
            return [base_prompt(desc, self.cfg.timeout_s)] * B, [None] * B
        tok = self.policy.tokenizer

        def count(s: str) -> int:
            return len(tok(s, add_special_tokens=False)["input_ids"])

        budget = self.cfg.max_prompt_tokens - 32  # room for the chat template
        prompts = [
            improve_prompt(desc, p.code, _outcome_for_prompt(p), self.cfg.timeout_s, budget, count)
            for p in parents
        ]
        return prompts, [p.id for p in parents]

    def _rollout(self, step: int) -> tuple[dict[str, Any], float]:
        from rpg_llm.policy import chat_prompt_ids, generate

        saved = self._bcast(self.folder.load_rollout(step) if self.main else None)
        if saved is not None:
            return saved, 0.0
        prompts, parent_ids = self._bcast(self._prompts() if self.main else None)
        tok = self.policy.tokenizer
        query_ids = [chat_prompt_ids(tok, p, self.cfg.max_prompt_tokens) for p in prompts]
        mine = list(range(self.rank, len(prompts), self.world))  # this process's rows
        gen = generate(
            self.policy,
            [query_ids[i] for i in mine],
            max_new_tokens=self.cfg.max_new_tokens,
            temperature=self.cfg.temperature,
            top_k=self.cfg.top_k,
            top_p=self.cfg.top_p,
            seed=self.cfg.seed * 1_000_003 + step + 7919 * self.rank,
            model=self.ppo.policy,
            batch_size=self.cfg.gen_batch_size,
            cpu_threads=self.cfg.cpu_threads,
        )
        responses: list[Any] = [None] * len(prompts)
        texts: list[Any] = [None] * len(prompts)
        seconds = 0.0
        for rows, resp, txt, sec in self._gather((mine, gen.response_ids, gen.texts, gen.seconds)):
            for i, r, t in zip(rows, resp, txt, strict=True):
                responses[i], texts[i] = r, t
            seconds = max(seconds, sec)
        rollout = {
            "step": step,
            "prompts": prompts,
            "parent_ids": parent_ids,
            "query_ids": query_ids,
            "response_ids": responses,
            "texts": texts,
            "gen_seconds": seconds,
            "gen_tokens": sum(len(r) for r in responses),
        }
        if self.main:
            self.folder.save_rollout(step, rollout)
        return rollout, seconds

    def _execute(self, step: int, rollout: dict[str, Any]) -> tuple[list[Any], float]:
        """Execute, grade and store on the main process; every process gets the samples."""
        done = self._execute_main(step, rollout) if self.main else None
        return self._bcast(done)

    def _execute_main(self, step: int, rollout: dict[str, Any]) -> tuple[list[Any], float]:
        stored = self._samples(step)
        if len(stored) == self.cfg.batch_size:
            return stored, 0.0
        if stored:
            raise RuntimeError(f"buffer holds a partial step {step} ({len(stored)} samples)")
        codes = [extract_code(text) for text in rollout["texts"]]
        runnable = [i for i, c in enumerate(codes) if c is not None]
        t0 = time.perf_counter()
        outcomes = self.backends.run_batch(
            [codes[i] for i in runnable],
            self.comp,
            self.sandbox,
            float(self.cfg.timeout_s),
            self.executor,
        )
        exec_seconds = time.perf_counter() - t0
        by_row = dict(zip(runnable, outcomes, strict=True))
        now = time.time()
        samples = []
        for row, text in enumerate(rollout["texts"]):
            prompt = rollout["prompts"][row]
            parent = rollout["parent_ids"][row]
            if row in by_row:
                o = by_row[row]
                samples.append(self._sample(step, row, parent, prompt, codes[row], o, now))
            else:
                samples.append(
                    self.backends.sample_cls(
                        run=self.cfg.name,
                        step=step,
                        row=row,
                        task=self.comp.id,
                        parent_id=parent,
                        prompt_hash=_prompt_hash(prompt),
                        code=text,
                        outcome_text=NO_CODE_TEXT,
                        score=None,
                        raw_reward=INVALID_REWARD,
                        exec_time=0.0,
                        status="invalid",
                        created_at=now,
                    )
                )
        self.buffer.add_many(samples)
        self.on_stage(step, "stored")
        return self._samples(step), exec_seconds

    def step(self, step: int) -> StepRecord:
        """Run training step ``step`` (idempotent stages, see the module docstring)."""
        t_start = time.perf_counter()
        rho_parents = self.rates.rho_hat
        rollout, gen_s = self._rollout(step)
        replayed = gen_s == 0.0
        self.on_stage(step, "generated")
        samples, exec_s = self._execute(step, rollout)
        sr = self._account(step, samples)  # rho_hat of THIS step (refit on its slot sums)
        mine = list(range(self.rank, self.cfg.batch_size, self.world))  # data-parallel shard
        batch = PPOBatch.from_lists(
            [rollout["query_ids"][i] for i in mine],
            [rollout["response_ids"][i] for i in mine],
            [float(sr.rewards[i]) for i in mine],
            self.policy.tokenizer.pad_token_id,
        )
        t0 = time.perf_counter()
        ppo_stats = self.ppo.step(batch)
        ppo_s = time.perf_counter() - t0
        self.on_stage(step, "updated")
        if step % self.cfg.checkpoint_every == 0 or step == self.cfg.steps:
            self.ppo.save(self.folder.checkpoint_path(step))  # collective; main writes
            if self.main:
                self.folder.prune_checkpoints(self.cfg.keep_checkpoints)
                self.folder.prune_rollouts(step)
            self.on_stage(step, "checkpointed")
        valid = np.array([s.status == "ok" for s in samples])
        rec = StepRecord(
            step=step,
            rho_hat=sr.rho_hat,
            rho_hat_parents=rho_parents,
            mean_reward=float(np.mean(sr.rewards)),
            mean_raw_reward=float(np.mean([s.raw_reward for s in samples])),
            mean_delta=float(np.mean([s.exec_time for s in samples])),
            valid_fraction=float(valid.mean()),
            best_raw_reward=float(sr.best) if math.isfinite(sr.best) else float("nan"),
            new_best=int((sr.bonuses > 0).sum()),
            gen_seconds=float(rollout["gen_seconds"]),
            exec_seconds=exec_s,
            ppo_seconds=ppo_s,
            step_seconds=0.0,
            gen_tokens=int(rollout["gen_tokens"]),
            replayed=replayed,
            ppo=ppo_stats,
        )
        if not self.main:
            rec.step_seconds = time.perf_counter() - t_start
            return rec
        for k, v in rec.flat().items():
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                self.tb.add_scalar(k, v, step)
        rec.step_seconds = time.perf_counter() - t_start
        self.tb.add_scalar("step_seconds", rec.step_seconds, step)
        self.tb.flush()
        self.folder.append_metrics(rec.flat())
        log.info("step %d: %s", step, json.dumps(rec.flat(), default=float))
        return rec

    def run(self) -> list[StepRecord]:
        """Seed (once), then steps ``start_step .. cfg.steps`` with a progress display."""
        self.seed_buffer()
        self._rebuild()
        records = []
        bar = None
        if self.progress and self.main:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=self.cfg.steps,
                initial=self.start_step - 1,
                desc=f"{self.cfg.method} steps",
                unit="step",
                dynamic_ncols=True,
            )
        for step in range(self.start_step, self.cfg.steps + 1):
            rec = self.step(step)
            records.append(rec)
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

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        shutdown = getattr(self.executor, "shutdown", None)
        if shutdown is not None:
            shutdown()
        close = getattr(self.buffer, "close", None)
        if close is not None:
            close()
        logging.getLogger("rpg_llm").removeHandler(self._log_handler)
        self._log_handler.close()


def _invalid_status(status: str) -> str:
    return status if status in ("timeout", "oom", "error") else "invalid"


def train(
    cfg: LoopConfig,
    run_dir: str | os.PathLike,
    resume: bool = False,
    backends: Backends | None = None,
    progress: bool = True,
    on_stage: Callable[[int, str], None] | None = None,
) -> list[StepRecord]:
    """Run (or resume) a training run in ``run_dir``; returns the records of the steps it ran.

    Raises:
        ValueError: bad settings, a missing task or model, or an existing run without ``resume``.
    """
    trainer = Trainer(cfg, Path(run_dir), backends, resume, progress, on_stage)
    try:
        return trainer.run()
    finally:
        trainer.close()


def with_overrides(cfg: LoopConfig, **kw: Any) -> LoopConfig:
    """``cfg`` with the given fields replaced (None values ignored)."""
    return replace(cfg, **{k: v for k, v in kw.items() if v is not None})
