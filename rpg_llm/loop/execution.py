"""Execution stage: scripts -> outcomes -> stored samples (paper Algorithm 1, lines 6-8).

Each response becomes a script through :func:`rpg_llm.env.actions.parse_action` in the run's action
format: ``script``, the fenced code block; ``edit``, the block's ``NAME = <literal>`` lines applied
to the row's parent script (a block holding a whole script runs as that script). An answer without
a block, or an edit that cannot be applied, is an ``invalid`` sample with the action's outcome
text (naming the line), not run. The buffer stores the complete script that ran. The scripts
run in parallel on the execution service (:mod:`rpg_llm.env.service`) and are graded; every
sample of the step is stored in one buffer transaction. :func:`make_sample` is the one place
a buffer sample is built.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rpg_llm.config import LoopConfig
from rpg_llm.env.actions import NO_BLOCK_TEXT, Action, parse_action
from rpg_llm.env.outcome import Outcome
from rpg_llm.env.service import ExecutionService
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.rewards import INVALID_REWARD
from rpg_llm.loop.rollout import prompt_hash

if TYPE_CHECKING:  # pragma: no cover
    from rpg_llm.loop.pipeline import Answers

__all__ = [
    "NO_CODE_TEXT",
    "make_sample",
    "sample_status",
    "outcome_time",
    "rollout_actions",
    "execute_rows",
    "execute_seeds",
]

NO_CODE_TEXT = NO_BLOCK_TEXT
_KEPT_STATUSES = ("timeout", "oom", "error", "infra")


def sample_status(outcome: Outcome) -> str:
    """The buffer status of an outcome: ``ok`` when valid, its own failure status when it is
    one of timeout / oom / error / infra, else ``invalid``."""
    if outcome.valid:
        return outcome.status
    return outcome.status if outcome.status in _KEPT_STATUSES else "invalid"


def outcome_time(outcome: Outcome, time_measure: str) -> float:
    """``delta`` of an outcome, seconds: its wall time, or its CPU time for ``"cpu"``.

    Raises:
        ValueError: ``"cpu"`` asked of an outcome without ``cpu_s``.
    """
    if time_measure == "cpu":
        cpu = getattr(outcome, "cpu_s", None)
        if cpu is None:
            raise ValueError("--time cpu needs outcomes with cpu_s (the executor does not give it)")
        return float(cpu)
    return float(outcome.delta)


def make_sample(
    sample_cls: type[Sample],
    *,
    run: str,
    step: int,
    row: int,
    task: str,
    parent_id: int | None,
    prompt: str,
    code: str,
    outcome: Outcome | None,
    time_measure: str,
    now: float,
    invalid_text: str = NO_CODE_TEXT,
    raw_reward: str = "design",
) -> Sample:
    """One buffer sample; ``outcome=None``: a response without a script (invalid, time 0),
    whose outcome text is ``invalid_text`` (the action's reason).

    ``raw_reward``: :attr:`rpg_llm.config.RewardConfig.raw_reward`; with
    ``"percentile"`` a valid sample's raw reward is its outcome's leaderboard percentile.

    Raises:
        ValueError: ``"percentile"`` for a valid outcome without one (names the task).
    """
    if outcome is None:
        text, score, raw, delta, status = invalid_text, None, INVALID_REWARD, 0.0, "invalid"
    else:
        text, score = outcome.outcome_text, outcome.score
        raw, delta = float(outcome.raw_reward), outcome_time(outcome, time_measure)
        status = sample_status(outcome)
        if raw_reward == "percentile" and outcome.valid:
            pct = getattr(outcome, "percentile", None)
            if pct is None:
                raise ValueError(
                    f"--raw-reward percentile: task {task} gave no leaderboard percentile (it "
                    "has no leaderboard or rewards of its own); use --raw-reward design"
                )
            raw = float(pct)
    return sample_cls(
        run=run,
        step=step,
        row=row,
        task=task,
        parent_id=parent_id,
        prompt_hash=prompt_hash(prompt),
        code=code,
        outcome_text=text,
        score=score,
        raw_reward=raw,
        exec_time=delta,
        status=status,
        created_at=now,
    )


def execute_rows(
    answers: Answers,
    actions: Sequence[Action],
    cfg: LoopConfig,
    task_id: str,
    sample_cls: type[Sample],
    service: ExecutionService,
) -> tuple[list[Sample], float]:
    """Run and grade the scripts of ``answers`` (their :class:`rpg_llm.env.actions.Action`
    ``actions``) on the execution service; returns (unsaved samples in row order, seconds). An
    answer without a script is an invalid sample that does not run.

    Args:
        answers: :class:`rpg_llm.loop.pipeline.Answers` (one step's rows, or a process's share);
        cfg: the run's settings; task_id: the task's id; sample_cls: the buffer's sample type;
        service: :class:`rpg_llm.env.service.ExecutionService` (the scripts run as one batch).
    """
    codes = [a.script for a in actions]
    scripts = {i: c for i, c in enumerate(codes) if c is not None}
    runnable = list(scripts)
    t0 = time.perf_counter()
    outcomes = [f.result() for f in service.submit(list(scripts.values()))]
    seconds = time.perf_counter() - t0
    by_index = dict(zip(runnable, outcomes, strict=True))
    now = time.time()
    samples = [
        make_sample(
            sample_cls,
            run=cfg.name,
            step=answers.step,
            row=row,
            task=task_id,
            parent_id=answers.parent_ids[i],
            prompt=answers.prompts[i],
            code=code if i in by_index and (code := codes[i]) is not None else text,
            outcome=by_index.get(i),
            time_measure=cfg.reward.time_measure,
            now=now,
            raw_reward=cfg.reward.raw_reward,
            invalid_text=actions[i].outcome_text or NO_CODE_TEXT,
        )
        for i, (row, text) in enumerate(zip(answers.rows, answers.texts, strict=True))
    ]
    return samples, seconds


def rollout_actions(
    step: int, texts: Sequence[str], parent_codes: Sequence[str | None] | None, action: str
) -> list[Action]:
    """The :class:`rpg_llm.env.actions.Action` of each answer (pure: the same answers and
    parents give the same actions, so the step metrics can recompute them).

    Raises:
        ValueError: the edit format and answers without parent scripts (a rollout file saved
            by an older version).
    """
    if action == "edit" and parent_codes is None:
        raise ValueError(f"step {step}: the edit format needs the rollout's parent scripts")
    parents = parent_codes if parent_codes is not None else [None] * len(texts)
    return [parse_action(t, action, p) for t, p in zip(texts, parents, strict=True)]


def execute_seeds(
    solutions: list[tuple[str, str]],
    cfg: LoopConfig,
    task_id: str,
    sample_cls: type[Sample],
    service: ExecutionService,
    step: int,
) -> list[Sample]:
    """Run and grade the task's baseline solutions on the execution service; unsaved samples of
    step ``step``."""
    codes = [code for _, code in solutions]
    outcomes = [f.result() for f in service.submit(codes)]
    now = time.time()
    return [
        make_sample(
            sample_cls,
            run=cfg.name,
            step=step,
            row=i,
            task=task_id,
            parent_id=None,
            prompt=f"seed:{name}",
            code=code,
            outcome=o,
            time_measure=cfg.reward.time_measure,
            now=now,
            raw_reward=cfg.reward.raw_reward,
        )
        for i, ((name, code), o) in enumerate(zip(solutions, outcomes, strict=True))
    ]
