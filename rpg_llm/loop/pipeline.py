"""The environment side of a run and the stages after generation, written once for both engines.

An engine (the PPO :class:`rpg_llm.loop.trainer.Trainer`, or TRL's reward call in
:mod:`rpg_llm.engines.trl`) generates a step's answers its own way and hands them to
:class:`RunEnv` as :class:`Answers`; the rest of a step (paper Algorithm 1, lines 6-10;
DESIGN.md section 7) is here, in order:

1. :meth:`RunEnv.execute`: each answer becomes a script (its action format), runs in the task's
   sandbox and is graded -> :class:`Executed` (unsaved samples);
2. :meth:`RunEnv.store`: the step's samples go to the buffer in one transaction (main process;
   every process gets them back);
3. :meth:`RunEnv.score`: the slot sums are fed and ``rho_hat`` refitted, then the rewards
   ``r - rho_hat * delta`` (RPG) or ``r`` (vanilla), plus the improvement bonus
   (:meth:`rpg_llm.loop.accounting.Accounts.account`), written to ``samples.csv``;
4. the engine's update (PPO, or TRL's own after the reward call);
5. :meth:`RunEnv.stop_after`: whether the run ends after this step
   (:func:`rpg_llm.loop.budget.stop_reason`: its steps, or every chain's execution budget);
6. :meth:`RunEnv.record`: the step's metrics line, TensorBoard and the printed line.

:class:`RunEnv` also owns the set-up both engines share: the run folder (made, or checked for a
resume), the task, sandbox, executor, buffer and rate accounts, the seed solutions of step 0
(:meth:`RunEnv.seed`) and the replay of stored steps on resume (:meth:`RunEnv.rebuild`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rpg_llm.config import LoopConfig
from rpg_llm.env.actions import Action
from rpg_llm.env.outcome import Outcome
from rpg_llm.env.sandbox.workdir import remove_stale_workdirs
from rpg_llm.env.types import Task
from rpg_llm.loop.accounting import Accounts, RateTracker, check_task_rewards
from rpg_llm.loop.backends import Backends, default_backends
from rpg_llm.loop.budget import run_label, stop_reason
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.estimators import make_rate_estimator
from rpg_llm.loop.execution import execute_rows, execute_seeds, rollout_actions
from rpg_llm.loop.parents import ParentPool
from rpg_llm.loop.recording import Console, Recorder, StepRecord, step_record
from rpg_llm.loop.rewards import StepRewards
from rpg_llm.loop.rollout import Rollout, make_prompts
from rpg_llm.loop.runfolder import RunFolder

__all__ = [
    "SEED_STEP",
    "Answers",
    "Executed",
    "Prompts",
    "Scored",
    "RunEnv",
    "answer_counts",
]

log = logging.getLogger("rpg_llm.loop")

SEED_STEP = 0
"""Buffer step of the seed solutions; training steps are ``1 .. steps``."""


@dataclass(frozen=True)
class Prompts:
    """One step's prompts and their parents (row order).

    Attributes:
        prompts: prompt texts; parent_ids: buffer ids (None: a base or baseline prompt);
        parent_codes: the parents' scripts (None: the script format's base prompt).
    """

    prompts: list[str]
    parent_ids: list[int | None]
    parent_codes: list[str | None]


@dataclass(frozen=True)
class Answers:
    """Generated answers of one step: all its rows, or one process's share.

    Attributes:
        step: training step (>= 1).
        rows: the batch rows the answers belong to (``0 .. B-1``).
        prompts, parent_ids, parent_codes: per row, as :class:`Prompts` (``parent_codes``
            None: no parent scripts, the script format).
        texts: per row, the decoded answer.
        tokens: per row, the answer's length in tokens.
        gen_seconds: wall time of the generation, seconds (NaN: not measured).
        capped: answers cut at the token cap.
    """

    step: int
    rows: list[int]
    prompts: list[str]
    parent_ids: list[int | None]
    parent_codes: list[str | None] | None
    texts: list[str]
    tokens: list[int]
    gen_seconds: float
    capped: int

    @classmethod
    def of_rollout(cls, rollout: Rollout) -> Answers:
        """Every row of a PPO step's :class:`rpg_llm.loop.rollout.Rollout`."""
        n = len(rollout.texts)
        return cls(
            step=rollout.step,
            rows=list(range(n)),
            prompts=rollout.prompts,
            parent_ids=rollout.parent_ids,
            parent_codes=rollout.parent_codes,
            texts=rollout.texts,
            tokens=[len(r) for r in rollout.response_ids],
            gen_seconds=float(rollout.gen_seconds),
            capped=int(rollout.capped),
        )

    def actions(self, action_format: str) -> list[Action]:
        """Each row's :class:`rpg_llm.env.actions.Action` (pure: same answers, same actions)."""
        return rollout_actions(self.step, self.texts, self.parent_codes, action_format)


@dataclass(frozen=True)
class Executed:
    """The executed and graded answers of one step (or of one process's rows).

    Attributes:
        samples: unsaved buffer samples, in row order (``Sample.row`` is the batch row).
        answers: the answers' counts by what they became (:func:`answer_counts`).
        tokens: per sample, the answer's length in tokens.
        exec_seconds: wall time of execution and grading, seconds.
        gen_seconds: wall time of the generation, seconds.
        capped: answers cut at the token cap.
    """

    samples: list[Sample]
    answers: dict[str, int]
    tokens: list[int]
    exec_seconds: float
    gen_seconds: float
    capped: int

    @classmethod
    def merge(cls, parts: Sequence[Executed]) -> Executed:
        """The processes' parts of one step as one: samples by row, the counts summed, the
        times of the slowest process."""
        pairs = sorted(
            ((s, t) for p in parts for s, t in zip(p.samples, p.tokens, strict=True)),
            key=lambda st: st[0].row,
        )
        answers: dict[str, int] = {}
        for p in parts:
            for k, v in p.answers.items():
                answers[k] = answers.get(k, 0) + v
        return cls(
            samples=[s for s, _ in pairs],
            answers=answers,
            tokens=[t for _, t in pairs],
            exec_seconds=max(p.exec_seconds for p in parts),
            gen_seconds=max(p.gen_seconds for p in parts),
            capped=sum(p.capped for p in parts),
        )


@dataclass(frozen=True)
class Scored:
    """A stored step with its rewards (what an engine trains on).

    Attributes:
        step: the step; samples: its stored samples in row order (ids set).
        rewards: :class:`rpg_llm.loop.rewards.StepRewards` (``rewards.rewards``: ``[B]``).
        rho_parents: the ``rho_hat`` the step's parents were ranked at (before its refit).
    """

    step: int
    samples: list[Sample]
    rewards: StepRewards
    rho_parents: float
    tokens: list[int] = field(default_factory=list)


def answer_counts(actions: Sequence[Action]) -> dict[str, int]:
    """Counts of a step's answers by what they became (:class:`rpg_llm.env.actions.Action`):
    ``edit`` (edits applied), ``changed`` (edits that change at least one value), ``script``
    (whole scripts), ``invalid`` (no block, or an edit that cannot be applied)."""
    return {
        "edit": sum(a.kind == "edit" for a in actions),
        "changed": sum(a.kind == "edit" and bool(a.changed) for a in actions),
        "script": sum(a.kind == "script" for a in actions),
        "invalid": sum(a.kind == "invalid" for a in actions),
    }


class RunEnv:
    """The environment side of one run, shared by both engines (module docstring).

    Makes the run folder (or, with ``resume``, checks that its buffer is readable), loads the
    task, opens the buffer, the sandbox and the execution service (:mod:`rpg_llm.env.service`:
    this host, or Ray with ``--executor ray``), and sets up the rate accounts.
    Nothing here loads a model.

    Args:
        cfg: the run's settings; run_dir: the run folder.
        dist: the process group (:class:`rpg_llm.loop.dist.Dist`).
        backends: the environment side (:class:`rpg_llm.loop.backends.Backends`; tests inject
            hand-made outcomes); default :func:`rpg_llm.loop.backends.default_backends`.
        resume: reopen ``run_dir``.
        on_stage: ``(step, stage)`` called after a step's samples are ``"stored"`` (tests kill
            the process there; the PPO engine adds its own stages).

    Raises:
        ValueError: ``cfg.batch_size`` not a multiple of the process count, a missing task,
            ``--raw-reward percentile`` for a task with rewards of its own (before the folder
            is made), a folder that already holds a run (without ``resume``), an unreadable
            buffer (with ``resume``).
    """

    def __init__(
        self,
        cfg: LoopConfig,
        run_dir: str | Path,
        *,
        dist: Dist,
        backends: Backends | None = None,
        resume: bool = False,
        on_stage: Callable[[int, str], None] | None = None,
    ) -> None:
        if cfg.batch_size % dist.world:
            msg = f"--batch-size {cfg.batch_size} must be a multiple of the {dist.world} processes"
            raise ValueError(msg)
        self.cfg, self.dist = cfg, dist
        self.backends = backends or default_backends(cfg)
        self.on_stage = on_stage or (lambda step, stage: None)
        self.folder = RunFolder(run_dir)
        self.task: Task = self.backends.load_task(cfg.task, cfg.data_root)
        check_task_rewards(cfg.reward, self.task.own_rewards())  # before the folder is made
        if resume:
            self.folder.load_config()
            self.folder.check_resumable()
        else:
            self._create_folder()
        self.recorder = Recorder(self.folder, dist.main, dist.rank)
        log.info("run %s: %s", self.folder.root, json.dumps(cfg.to_dict(), default=str))
        buffer = self.backends.buffer_cls(self.folder.buffer_path) if dist.main else None
        dist.barrier()  # the main process makes the database, the others open it after
        self.buffer = buffer or self.backends.buffer_cls(self.folder.buffer_path)
        self.parents = ParentPool(cfg.buffer_capacity_factor * cfg.batch_size)
        self.sandbox = self.backends.make_sandbox(cfg.sandbox)
        limits = getattr(self.sandbox, "limits", None)
        if dist.main and limits is not None and remove_stale_workdirs(limits.workdir_root):
            log.info("removed the working folders of ended processes")

        def run_batch(*args: Any) -> list[Outcome]:  # read at each call: tests swap it
            return self.backends.run_batch(*args)

        self.service = self.backends.make_service(cfg, self.task, self.sandbox, run_batch)
        slots = cfg.num_slots or min(128, cfg.batch_size)
        estimator = make_rate_estimator(cfg.estimator, self.backends.estimator)
        rates = RateTracker(estimator, slots, cfg.seed, cfg.estimator_batches)
        self.accounts = Accounts(rates, cfg.reward, self.task.own_rewards())
        self.console: Console | None = None

    def _create_folder(self) -> None:
        """The run folder and its ``config.json`` (settings + the run's facts), main process."""
        cfg = self.cfg
        record = cfg.to_dict() | {
            "method": cfg.method,  # also at the top, for readers of the run folder
            "competition": self.task.id,
            "seeded": cfg.seed_buffer,
            "torch": torch.__version__,
        }
        record["label"] = run_label(record)  # the arm: method, parent ranking, raw reward
        if self.dist.main:
            self.folder.create(record)
        self.dist.barrier()

    @property
    def description(self) -> str:
        """The task description the prompts show (``""`` with ``describe=False``)."""
        return self.task.description if self.cfg.describe else ""

    def baselines(self) -> list[tuple[str, str]]:
        """The run's starting scripts ``(name, code)`` (the task's, or ``--seed-dir``'s)."""
        return self.backends.baseline_solutions(self.task.id)

    def step_samples(self, step: int) -> list[Sample]:
        """The stored samples of ``step`` of this run, in row order."""
        return self.buffer.step_samples(self.cfg.name, step)

    def ranking_price(self) -> float | None:
        """The price of time parents are ranked and kept by, reward per second
        (:meth:`rpg_llm.config.RewardConfig.ranking_rho` of the current ``rho_hat``; None: the
        raw reward)."""
        return self.cfg.reward.ranking_rho(self.accounts.rho_hat)

    # -- start and resume --------------------------------------------------------------------

    def seed(self) -> int:
        """Execute, grade and store the starting scripts as step 0 on the main process, once
        per run (not with ``seed_buffer`` off, nor when stored already); returns how many."""
        cfg, n = self.cfg, 0
        if self.dist.main and cfg.seed_buffer and not self.step_samples(SEED_STEP):
            solutions = self.baselines()
            if not solutions:
                log.warning("task %s has no baselines: the run starts unseeded", self.task.id)
            else:
                seeds = execute_seeds(
                    solutions, cfg, self.task.id, self.backends.sample_cls, self.service, SEED_STEP
                )
                n = len(self.buffer.add_many(seeds))
                log.info("seeded the buffer with %d baseline solutions", n)
        self.dist.barrier()
        return n

    def rebuild(self, start_step: int) -> None:
        """Replay the slot sums, ``rho_hat``, the best score and the parent buffer over the
        seeds and the steps ``1 .. start_step - 1`` from the buffer (the same refits and trims as
        the first time), and rewrite ``samples.csv`` up to there from the buffer and the
        replayed rewards (a missing or short ``samples.csv`` is whole again; the answers' token
        counts, which the buffer does not hold, are kept from the old file where it has the
        row).

        Raises:
            RuntimeError: such a step does not hold ``batch_size`` samples.
        """
        seeds = self.step_samples(SEED_STEP)
        self.accounts.feed_seeds(SEED_STEP, seeds)
        self.parents.add(seeds, self.ranking_price())
        replayed = []
        for step in range(1, start_step):
            samples = self.step_samples(step)
            if len(samples) != self.cfg.batch_size:
                raise RuntimeError(f"buffer holds {len(samples)} samples for checkpointed {step}")
            sr = self.accounts.account(step, samples)
            self.parents.add(samples, self.ranking_price())
            replayed.append((samples, sr.rewards))
        self.recorder.rebuild_samples(seeds, replayed)

    def start(self, first_step: int, progress: bool, planned_steps: int | None = None) -> None:
        """The progress display from ``first_step`` over ``planned_steps`` (default
        ``cfg.steps``)."""
        if self.console is not None:
            self.console.close()
        cfg = self.cfg if planned_steps is None else replace(self.cfg, steps=planned_steps)
        self.console = Console(cfg, first_step, self.dist.main, progress)

    # -- the stages of a step ------------------------------------------------------------------

    def prompts(self, n: int, tokenizer: object) -> Prompts:
        """The next ``n`` prompts: the parent buffer's top ``n`` at the arm's ranking price
        (:meth:`ranking_price`), the base prompt (the script format) or the baselines (the edit
        format) while it is empty (:func:`rpg_llm.loop.rollout.make_prompts`). Main process."""
        c = self.cfg
        rho = self.ranking_price()
        seeds = self.baselines() if not self.parents.nodes else None
        budget = c.sampling.max_prompt_tokens
        prompts, ids, codes = make_prompts(
            self.parents, n, rho, self.description, c.timeout_s, budget, tokenizer,
            action=c.action, baselines=seeds,
        )  # fmt: skip
        return Prompts(prompts, ids, codes)

    def execute(self, answers: Answers) -> Executed:
        """Run and grade ``answers`` (this process's rows) in the sandbox: unsaved samples."""
        actions = answers.actions(self.cfg.action)
        samples, seconds = execute_rows(
            answers, actions, self.cfg, self.task.id, self.backends.sample_cls, self.service
        )
        return Executed(
            samples, answer_counts(actions), answers.tokens, seconds, answers.gen_seconds,
            answers.capped,
        )  # fmt: skip

    def store(self, step: int, fresh: Sequence[Sample]) -> list[Sample]:
        """Store the step's samples in one transaction on the main process (none when ``fresh``
        is empty: the step is stored already); every process gets the stored samples back.

        Raises:
            RuntimeError: the buffer holds part of the step, or ``fresh`` while it holds all.
        """

        def on_main() -> list[Sample]:
            if fresh:
                stored = self.step_samples(step)
                if stored:
                    raise RuntimeError(f"buffer already holds step {step} ({len(stored)} samples)")
                self.buffer.add_many(list(fresh))
            return self.step_samples(step)

        samples = self.dist.on_main(on_main)
        if fresh:
            self.on_stage(step, "stored")
        return samples

    def score(self, step: int, samples: list[Sample], tokens: Sequence[int]) -> Scored:
        """Feed the step's samples, refit ``rho_hat`` and compute the rewards (one
        :meth:`rpg_llm.loop.accounting.Accounts.account`); add its valid samples to the parent
        buffer (trimmed at the new price); their ``samples.csv`` rows."""
        rho_parents = self.accounts.rho_hat
        sr = self.accounts.account(step, samples)
        self.parents.add(samples, self.ranking_price())  # valid nodes, trimmed at the new price
        self.recorder.write_samples(samples, sr.rewards, list(tokens))
        return Scored(step, samples, sr, rho_parents, list(tokens))

    def stop_after(self, step: int) -> str | None:
        """Why the run ends after ``step`` (:func:`rpg_llm.loop.budget.stop_reason`: ``"steps"``
        or ``"budget"``), or None; decided on the main process so that every process stops at
        the same step (collective)."""
        cfg = self.cfg

        def on_main() -> str | None:
            totals: dict[int, float] = {}
            if cfg.exec_budget_s is not None and step >= 1:
                totals = self.buffer.exec_seconds_by_row(cfg.name, step)
            return stop_reason(cfg, step, totals)

        return self.dist.on_main(on_main)

    def record(
        self,
        scored: Scored,
        executed: Executed,
        *,
        t0: float,
        update_seconds: float = math.nan,
        update_stats: dict[str, float] | None = None,
        replayed: bool = False,
    ) -> StepRecord:
        """The step's metrics (``metrics.jsonl``, TensorBoard, the log) and its printed line.

        Args:
            t0: ``time.perf_counter()`` when the step started.
            update_seconds: the engine's update time (NaN: the update comes after, TRL).
            update_stats: the update's statistics (PPO's losses, KL, clip fraction).
            replayed: the step's answers were read back from the run folder (a resume).
        """
        summary = Rollout(
            scored.step, [], [], [], [], [], executed.gen_seconds, sum(scored.tokens),
            executed.capped,
        )  # fmt: skip
        rec = step_record(
            scored.step, scored.samples, scored.rewards, scored.rho_parents, summary,
            executed.exec_seconds, update_seconds, update_stats or {}, replayed,
            self.accounts.best_generated,
        )  # fmt: skip
        rec.answers = dict(executed.answers)
        rec = self.recorder.record(rec, t0)
        if self.console is not None:
            self.console.step_done(rec)
        return rec

    def close(self) -> None:
        """End the display, the execution service, the buffer and the log."""
        if self.console is not None:
            self.console.close()
        self.service.close()
        self.buffer.close()
        self.recorder.close()
