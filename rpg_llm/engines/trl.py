"""RPG on TRL: the relative reward and the self-improvement prompts as a plug-in for GRPOTrainer.

Three public pieces, usable in any TRL script (README, "RPG in your own TRL script"):

* :class:`RPGRun`: the environment side of one run: the run folder (same layout as
  ``python -m rpg_llm.run``: ``config.json``, ``buffer.sqlite``, ``samples.csv``, ``scripts/``,
  ``metrics.jsonl``), the task, the sandbox, the seeded buffer and the NIW rate estimator;
* :class:`RelativeReward` (``RPGRun.reward``): a TRL reward function. Each process runs its
  completions' scripts in the sandbox (concurrently), grades them, and the step's samples are
  gathered on every process; the main process stores them in one transaction; every process
  refits the estimator on the same samples with the same seeded draws, so all processes use the
  same ``rho_hat``; it returns ``r - rho_hat * delta`` (vanilla: ``r``), plus the improvement
  bonus, and ``None`` for a sample whose failure was the machine's (``infra``: TRL leaves it out
  of the group statistics with advantage 0);
* :class:`BufferPrompts`: the prompt source: every step's ``B / G`` prompts are the improve (or
  edit) prompts of the buffer's top entries by ``r - rho_hat * delta`` (vanilla: ``r``), each
  answered ``G`` times (``num_generations``).

Prompt source: an iterable dataset, not ``rollout_func``. ``rollout_func`` would take generation
away from TRL (vLLM, its batching), which is what a user comes to TRL for. But TRL's data loader
(accelerate) reads one batch ahead: a plain ``GRPOTrainer`` gets the prompts of step ``n + 1``
when step ``n`` starts, before step ``n``'s samples are stored, so its parents are one step
older than Algorithm 1's. :class:`RPGGRPOTrainer` (a ``GRPOTrainer`` with one hook) rebuilds a
step's prompts from the buffer just before generating them, which removes that lag;
``python -m rpg_llm.run --engine trl`` uses it.

Steps, resume and durability: a step is one generation round of ``B`` answers and one optimiser
step (``B`` = ``per_device_train_batch_size x steps_per_generation x processes``, with
``steps_per_generation`` = ``gradient_accumulation_steps``: :func:`grpo_config`). Step numbers
continue from the buffer (the largest stored step + 1), never from TRL's counter: after a kill,
TRL resumes from its last checkpoint while the samples of later steps stay stored (they feed the
estimator and the parents; the policy is not trained on them again), so no sample is lost or
stored twice (the buffer's ``UNIQUE (run, step, row)`` guards it too).

Source: paper section 4 (relative reward, Algorithm 1); GRPO: Shao et al. 2024,
arXiv:2402.03300; TRL 1.16 ``GRPOTrainer`` (reward functions get ``prompts``,
``completions``, ``completion_ids``, ``trainer_state`` and every dataset column).
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import trl
from accelerate import PartialState
from peft import LoraConfig, PeftModel
from transformers import AutoModelForCausalLM, TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl.trainer.grpo_config import GRPOConfig
from trl.trainer.grpo_trainer import GRPOTrainer

from rpg_llm.config import LoopConfig
from rpg_llm.learner.policy import load_policy
from rpg_llm.loop.accounting import INFRA
from rpg_llm.loop.backends import Backends
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.pipeline import SEED_STEP, Answers, Executed, Prompts, RunEnv
from rpg_llm.loop.recording import StepRecord
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.loop.warm_start import WarmStart

__all__ = [
    "SEED_STEP",
    "TRL_TESTED",
    "RPGRun",
    "RelativeReward",
    "BufferPrompts",
    "RPGGRPOTrainer",
    "check_trl_version",
    "grpo_config",
    "train_trl",
    "trained_model",
    "completion_text",
    "prompt_text",
]

log = logging.getLogger("rpg_llm.loop")

TRL_TESTED = "1.16"
"""The TRL release (major.minor) whose private ``GRPOTrainer._generate_and_score_completions``
:class:`RPGGRPOTrainer` overrides; :func:`check_trl_version` refuses another."""


def completion_text(completion: Any) -> str:
    """The answer text of a TRL completion: a string, or (conversational) a list of messages
    whose ``content`` (a string or a list of ``{"type": "text", "text": ...}`` parts) is
    joined.

    Raises:
        TypeError: anything else (names the type).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        parts: list[str] = []
        for message in completion:
            content = message.get("content", "") if isinstance(message, dict) else message
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(str(content))
        return "".join(parts)
    raise TypeError(f"a completion must be a string or a list of messages, got {type(completion)}")


def prompt_text(prompt: Any) -> str:
    """The user text of a TRL prompt (a string, or the last message of a conversation)."""
    if isinstance(prompt, list) and prompt:
        return completion_text(prompt[-1:])
    return completion_text(prompt)


def _dist(cfg: LoopConfig) -> Dist:
    on_cpu = cfg.device == "cpu" or not torch.cuda.is_available()
    return Dist(PartialState(cpu=on_cpu))


class RPGRun:
    """The environment side of one RPG run for an outside engine (module docstring): a
    :class:`rpg_llm.loop.pipeline.RunEnv` (run folder, task, sandbox, buffer, rate accounts)
    whose stages the reward call drives.

    Makes (or, with ``resume``, reopens) the run folder ``run_dir``, stores the task's baseline
    solutions as step 0 (once), and replays the estimator and best score over the stored steps.

    Args:
        cfg: the run's settings (:class:`rpg_llm.config.LoopConfig`: task, method, ``B`` =
            ``batch_size`` answers per step, action format, sandbox, estimator, timeout).
        run_dir: the run folder.
        resume: reopen ``run_dir`` (its stored settings must be ``cfg``'s).
        backends: the environment side (:class:`rpg_llm.loop.backends.Backends`; tests inject
            hand-made outcomes through ``run_batch``).
        progress: draw a progress bar over ``cfg.steps`` (else plain step lines).
        dist: the processes (default: accelerate's ``PartialState``).
        on_stage: ``(step, stage)`` called after a step's samples are ``"stored"`` (tests kill
            the process there).

    Attributes:
        env: the :class:`rpg_llm.loop.pipeline.RunEnv`.
        reward: the TRL reward function (:class:`RelativeReward`).
        next_step: the step the next reward call scores (largest stored step + 1).
        records: the :class:`rpg_llm.loop.recording.StepRecord` of each scored step.
        stop: why the run ends after the last scored step (``"steps"``, ``"budget"``; None).

    Raises:
        ValueError: a folder that already holds a run (without ``resume``), a missing task,
            ``--raw-reward percentile`` for a task with rewards of its own (before the folder
            is created).
    """

    def __init__(
        self,
        cfg: LoopConfig,
        run_dir: str | Path,
        *,
        resume: bool = False,
        backends: Backends | None = None,
        progress: bool = False,
        dist: Dist | None = None,
        on_stage: Callable[[int, str], None] | None = None,
    ) -> None:
        self.cfg = cfg
        d = dist or _dist(cfg)
        self.env = env = RunEnv(
            cfg, Path(run_dir), dist=d, backends=backends, resume=resume, on_stage=on_stage
        )
        env.seed()
        done = max(0, d.on_main(env.buffer.max_step, cfg.name))
        env.rebuild(done + 1)
        env.start(done + 1, progress)
        self.next_step = done + 1
        self.records: list[StepRecord] = []
        self.stop: str | None = None
        self.reward = RelativeReward(self)
        self._generation_started: float | None = None

    def generation_started(self) -> None:
        """Mark the start of a step's generation (its ``gen_seconds`` end at the reward call)."""
        self._generation_started = time.perf_counter()

    def score(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None,
        parent_ids: Sequence[int | None],
        parent_codes: Sequence[str | None],
    ) -> list[float | None]:
        """Execute, grade, store and reward this process's share of one step (collective):
        :class:`rpg_llm.loop.pipeline.RunEnv`'s stages on every process's answers together.

        Args:
            prompts, completions: this process's ``n = B / processes`` prompts and answers (TRL
                strings or conversations), rows ``rank * n .. rank * n + n - 1`` of the step.
            completion_ids: their token ids (token counts and answers cut at the token cap).
            parent_ids: buffer ids of their parents (None: a base or baseline prompt).
            parent_codes: the parents' scripts (the edit format applies the answer to them).

        Returns:
            ``n`` rewards: ``r - rho_hat * delta`` (vanilla ``r``) + bonus; ``None`` for infra.

        Raises:
            ValueError: the step has not ``cfg.batch_size`` answers on all processes together.
        """
        cfg, env, step, n = self.cfg, self.env, self.next_step, len(completions)
        d = env.dist
        t0 = time.perf_counter()
        started = self._generation_started
        tokens = [len(ids) for ids in completion_ids] if completion_ids is not None else [0] * n
        answers = Answers(
            step=step,
            rows=[d.rank * n + k for k in range(n)],
            prompts=[prompt_text(p) for p in prompts],
            parent_ids=list(parent_ids),
            parent_codes=list(parent_codes),
            texts=[completion_text(c) for c in completions],
            tokens=tokens,
            gen_seconds=t0 - started if started is not None else math.nan,
            capped=sum(t >= cfg.sampling.max_new_tokens for t in tokens),
        )
        executed = Executed.merge(d.gather(env.execute(answers)))
        if len(executed.samples) != cfg.batch_size:
            raise ValueError(
                f"step {step} has {len(executed.samples)} answers but batch_size is "
                f"{cfg.batch_size}: per_device_train_batch_size x processes x "
                "steps_per_generation must equal B"
            )
        samples = env.store(step, executed.samples)
        scored = env.score(step, samples, executed.tokens)
        log.info("step %d: rho_hat %r on process %d", step, scored.rewards.rho_hat, d.rank)
        self.stop = env.stop_after(step)
        # TRL updates the policy after this reward call: no update time in the record (NaN)
        self.records.append(env.record(scored, executed, t0=t0))
        self.next_step += 1
        self._generation_started = None
        mine = slice(d.rank * n, (d.rank + 1) * n)
        return [
            None if s.status == INFRA else float(r)
            for s, r in zip(samples[mine], scored.rewards.rewards[mine], strict=True)
        ]

    def callbacks(self) -> list[TrainerCallback]:
        """TRL callbacks: stop once every chain has spent ``cfg.exec_budget_s``."""
        return [_BudgetStop(self)]

    def close(self) -> None:
        self.env.close()


class RelativeReward:
    """TRL reward function of an :class:`RPGRun` (``reward_funcs=run.reward``).

    Called by TRL with this process's ``prompts``, ``completions``, ``completion_ids`` and the
    dataset columns of :class:`BufferPrompts` (``parent_id``: -1 for none, ``parent_code``: ""
    for none). See :meth:`RPGRun.score`.
    """

    __name__ = "relative_reward"

    def __init__(self, run: RPGRun) -> None:
        self.run = run
        if run.cfg.method == "vanilla":
            self.__name__ = "raw_reward"

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        parent_id: Sequence[int] | None = None,
        parent_code: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        n = len(completions)
        ids = [None if p is None or int(p) < 0 else int(p) for p in (parent_id or [None] * n)]
        codes = [c if c else None for c in (parent_code or [None] * n)]
        return self.run.score(prompts, completions, completion_ids, ids, codes)


class BufferPrompts:
    """The prompt source: each step's ``B / G`` prompts from the buffer's top entries.

    Rows are conversations (``[{"role": "user", "content": prompt}]``) with the columns
    ``slot`` (0 .. P-1), ``parent_id`` (-1: none) and ``parent_code`` ("": none). Parents are
    the buffer's top ``P = B / G`` by ``r - rho_hat * delta`` (vanilla: ``r``), as in the loop
    (:func:`rpg_llm.loop.rollout.make_prompts`: the base prompt, or the task's baselines in the
    edit format, while the buffer is empty).

    Args:
        run: the :class:`RPGRun`; tokenizer: the policy's (prompt budgets are in tokens).
        num_generations: ``G``, answers per prompt (TRL's ``num_generations``).

    Raises:
        ValueError: ``G`` does not divide ``run.cfg.batch_size``.
    """

    def __init__(self, run: RPGRun, tokenizer: Any, num_generations: int) -> None:
        b = run.cfg.batch_size
        if num_generations < 1 or b % num_generations:
            raise ValueError(f"num_generations {num_generations} must divide batch_size {b}")
        self.run, self.tokenizer, self.per_step = run, tokenizer, b // num_generations

    def parents(self) -> Prompts:
        """The current ``P`` prompts and their parents (read from the buffer; main process)."""
        return self.run.env.prompts(self.per_step, self.tokenizer)

    def rows(self) -> list[dict[str, Any]]:
        """One step's ``P`` dataset rows, built now."""
        p = self.parents()
        return [
            {
                "prompt": [{"role": "user", "content": text}],
                "slot": k,
                "parent_id": -1 if i is None else int(i),
                "parent_code": c or "",
            }
            for k, (text, i, c) in enumerate(
                zip(p.prompts, p.parent_ids, p.parent_codes, strict=True)
            )
        ]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            yield from self.rows()

    def dataset(self) -> Any:
        """A ``datasets.IterableDataset`` of the rows (endless: set TRL's ``max_steps`` and
        ``shuffle_dataset=False``, which would otherwise read ahead 1,000 rows)."""
        from datasets import IterableDataset

        key = id(self)
        _SOURCES[key] = self  # datasets pickles the generator's arguments: pass a key, not self
        return IterableDataset.from_generator(_source_rows, gen_kwargs={"key": key})

    def refresh(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``inputs`` (this process's rows of a step, by ``slot``) with prompts and parents
        rebuilt from the buffer now, on the main process (collective)."""
        rows = self.run.env.dist.on_main(self.rows)
        self.run.generation_started()
        return [{**x, **rows[int(x["slot"])]} for x in inputs]


_SOURCES: dict[int, BufferPrompts] = {}


def _source_rows(key: int) -> Iterator[dict[str, Any]]:
    yield from _SOURCES[key]


def check_trl_version(version: str | None = None) -> None:
    """Refuse a TRL other than :data:`TRL_TESTED` before :class:`RPGGRPOTrainer` is built.

    The one place this engine depends on TRL's internals is :class:`RPGGRPOTrainer`'s override
    of the private ``GRPOTrainer._generate_and_score_completions(inputs)`` (TRL has no public
    hook between its data loader, which reads one batch ahead, and generation); another TRL may
    have renamed it or changed what it receives, which would fail silently or deep inside.

    Args:
        version: the TRL version to check (default: the installed one).

    Raises:
        RuntimeError: naming the version found, the tested one and what to do.
    """
    found = version if version is not None else trl.__version__
    if ".".join(found.split(".")[:2]) != TRL_TESTED or not hasattr(
        GRPOTrainer, "_generate_and_score_completions"
    ):
        raise RuntimeError(
            f"rpg_llm.engines.trl is written against TRL {TRL_TESTED}.x (it overrides "
            f"GRPOTrainer._generate_and_score_completions); TRL {found} is installed: "
            "pip install trl==1.16.0, or use a plain GRPOTrainer (parents one step older)"
        )


class RPGGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose prompts are rebuilt from the buffer right before each generation
    (:meth:`BufferPrompts.refresh`), so that the parents of step ``n`` are chosen after step
    ``n - 1`` is stored (Algorithm 1), not one step earlier (module docstring).

    The override of the private ``_generate_and_score_completions`` is this engine's only tie
    to TRL's internals; :func:`check_trl_version` guards it when the trainer is built.

    Args:
        prompt_source: the :class:`BufferPrompts` of ``train_dataset``; other arguments are
            ``GRPOTrainer``'s.

    Raises:
        RuntimeError: another TRL release than :data:`TRL_TESTED`.
    """

    def __init__(self, *args: Any, prompt_source: BufferPrompts, **kwargs: Any) -> None:
        check_trl_version()
        super().__init__(*args, **kwargs)
        self.prompt_source = prompt_source

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.model is None or self.model.training:
            inputs = self.prompt_source.refresh(inputs)
        return super()._generate_and_score_completions(inputs)


class _BudgetStop(TrainerCallback):
    """Stop training after the step at which every chain spent the execution budget."""

    def __init__(self, run: RPGRun) -> None:
        self.run = run

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        console = self.run.env.console
        if self.run.stop == "budget":
            if console is not None:
                console.budget_spent(self.run.next_step - 1)
            control.should_training_stop = True
        return control


def grpo_config(cfg: LoopConfig, output_dir: str | Path, world: int = 1, **overrides: Any) -> Any:
    """TRL ``GRPOConfig`` of a run: ``B / world`` answers per process and step, ``G =
    cfg.trl.num_generations``, the run's sampling settings, the PPO section's learning rate,
    gradient clip and gradient checkpointing, checkpoints every ``cfg.checkpoint_every`` steps.

    One step is one generation of ``B`` answers and one optimiser step: each process computes
    the loss on micro-batches of ``gcd(B / world, cfg.ppo.micro_batch_size)`` answers and
    accumulates their gradients (``steps_per_generation`` = ``gradient_accumulation_steps``).

    Args:
        output_dir: TRL's folder (``<run folder>/trl``). overrides: other ``GRPOConfig`` fields.
    """
    on_cpu = cfg.device == "cpu" or not torch.cuda.is_available()
    t, s = cfg.trl, cfg.sampling
    local = cfg.batch_size // world
    micro = math.gcd(local, cfg.ppo.micro_batch_size)
    fields: dict[str, Any] = dict(
        output_dir=str(output_dir),
        max_steps=cfg.steps,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=local // micro,
        steps_per_generation=local // micro,
        num_generations=t.num_generations,
        max_completion_length=s.max_new_tokens,
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        learning_rate=cfg.ppo.actor_lr,
        max_grad_norm=cfg.ppo.max_grad_norm,
        activation_checkpointing=cfg.ppo.gradient_checkpointing,
        beta=t.beta,
        loss_type=t.loss_type,
        scale_rewards=t.scale_rewards,
        use_vllm=t.use_vllm,
        vllm_mode=t.vllm_mode,
        shuffle_dataset=False,
        ignore_data_skip=True,
        save_strategy="steps",
        save_steps=cfg.checkpoint_every,
        save_total_limit=cfg.keep_checkpoints,
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        seed=cfg.seed,
        use_cpu=on_cpu,
        bf16=not on_cpu,
    )
    fields.update(overrides)
    return GRPOConfig(**fields)


def _lora(cfg: LoopConfig) -> Any:
    if cfg.ppo.lora_rank == 0:
        return None

    rank, alpha = cfg.ppo.lora_rank, cfg.ppo.lora_alpha
    alpha_arg: Any = alpha  # peft types it int; a float scales the same
    return LoraConfig(
        r=rank, lora_alpha=alpha_arg, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def trained_model(model: Any, run_dir: str | Path, step: int | None = None) -> tuple[Any, int]:
    """The policy TRL trained in ``run_dir``: ``model`` (the run's start, its SFT warm-start
    weights loaded) with TRL's checkpoint of global step ``step`` applied (None: the last), and
    that step.

    A LoRA run's checkpoint holds the adapter (``adapter_config.json``), put on ``model`` with
    peft, **in place**: ``model`` itself then runs the trained policy, so take what is needed
    of the start first. A full fine-tuning run's checkpoint holds the whole model, loaded anew
    (transformers ``from_pretrained``, so tied and sharded weights load as saved) on ``model``'s
    device, in its dtype and with its generation config (pad token, sampling defaults).

    Raises:
        ValueError: ``run_dir`` has no TRL checkpoint (of ``step``), or one with neither an
            adapter nor model weights (names the folder).
    """
    run = RunFolder(Path(run_dir))
    asked = step
    step = run.latest_trl_checkpoint() if asked is None else asked
    folder = run.trl_checkpoint_path(step)
    if step == 0 or not folder.is_dir():
        which = "checkpoint-N" if asked is None else f"checkpoint-{asked}"
        raise ValueError(f"{run_dir}: no TRL checkpoint {run.trl_dir.name}/{which} to load")
    if (folder / "adapter_config.json").exists():
        return PeftModel.from_pretrained(model, str(folder)), step
    if not any(folder.glob("model*.safetensors")):
        raise ValueError(f"{folder}: neither a LoRA adapter nor model weights")

    full = AutoModelForCausalLM.from_pretrained(str(folder), dtype=model.dtype)
    full.generation_config = model.generation_config
    return full.to(model.device).eval(), step


def train_trl(
    cfg: LoopConfig,
    run_dir: str | Path,
    resume: bool = False,
    backends: Backends | None = None,
    progress: bool = True,
    on_stage: Callable[[int, str], None] | None = None,
) -> list[StepRecord]:
    """Run (or resume) ``cfg`` on TRL's GRPOTrainer in ``run_dir``; the step records.

    Order: the run folder and the seeded buffer (:class:`RPGRun`), the policy and the SFT
    warm start (:mod:`rpg_llm.loop.warm_start`, as in the PPO engine), then
    :class:`RPGGRPOTrainer` from TRL's last checkpoint (``<run_dir>/trl``) when resuming.

    Raises:
        ValueError: bad settings, a missing task or model, an existing run without ``resume``.
        RunFolderBusy: another process runs ``run_dir``.
    """
    main = int(os.environ.get("RANK", "0")) == 0
    lock = RunFolder(run_dir).lock() if main else None
    try:
        run = RPGRun(
            cfg, run_dir, resume=resume, backends=backends, progress=progress, on_stage=on_stage
        )
        env = run.env
        try:
            policy = load_policy(cfg.model, device=cfg.device or env.dist.acc.device)
            if policy.device.type == "cpu" and cfg.cpu_threads:
                torch.set_num_threads(cfg.cpu_threads)
            d = env.dist
            WarmStart(cfg, policy, env.folder, env.recorder, d, env.description, env.baselines).run(
                resume
            )
            tok = policy.tokenizer
            tok.padding_side = "left"
            source = BufferPrompts(run, tok, cfg.trl.num_generations)
            trainer = RPGGRPOTrainer(
                model=policy.model,
                reward_funcs=run.reward,
                args=grpo_config(cfg, env.folder.trl_dir, d.world),
                train_dataset=source.dataset(),
                processing_class=tok,
                peft_config=_lora(cfg),
                callbacks=run.callbacks(),
                prompt_source=source,
            )
            trainer.remove_callback(PrinterCallback)  # the step lines say what happens
            last = env.folder.latest_trl_checkpoint() if resume else 0
            if run.next_step - 1 > last:  # steps stored after TRL's last checkpoint
                env.start(run.next_step, progress, cfg.steps + run.next_step - 1 - last)
            checkpoint = str(env.folder.trl_checkpoint_path(last)) if last else None
            if last < cfg.steps:
                with warnings.catch_warnings():
                    # transformers 5 deprecates the name TRL 1.16 calls; nothing for a user to do
                    warnings.filterwarnings(
                        "ignore", r"`\w*gradient_checkpointing\w*` is deprecated", FutureWarning
                    )
                    trainer.train(resume_from_checkpoint=checkpoint)
            return run.records
        finally:
            run.close()
    finally:
        if lock is not None:
            lock.release()
