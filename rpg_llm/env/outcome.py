"""The result of one environment step: an :class:`Outcome` per executed script.

Paper section 4: an action is a generated script, executed in a sandbox to produce time delta and
reward r.  DESIGN section 7: the outcome text shows the score on success, the timeout, or the
exception type, line and message; an invalid submission earns ``INVALID_REWARD`` (-10).

Failure classes: ``"invalid" | "timeout" | "oom" | "error"`` are the script's own failures (reward
-10); ``"infra"`` is a failure of the sandbox, the grader set-up or the machine, never charged to
the script (the loop masks it out of PPO and out of the reward-rate estimator, as open-instruct
masks infrastructure failures).  Every task's ``run_batch`` returns these (the NanoGPT task a
subclass with more fields); nothing here knows a task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["INFRA_REWARD", "OUTCOME_STATUSES", "RUN_TIME_RE", "Outcome", "infra_outcome"]

OUTCOME_STATUSES = ("ok", "timeout", "oom", "error", "invalid", "infra")

INFRA_REWARD = 0.0
"""Placeholder ``raw_reward`` of an ``"infra"`` outcome: no reward was observed; mask by status."""

RUN_TIME_RE = re.compile(r", ran \d+(?:\.\d+)? s\b")
"""The wall time part (``", ran 3.2 s"``) of a success's ``outcome_text``."""


@dataclass(frozen=True)
class Outcome:
    """Result of running and grading one solution.

    Attributes:
      status: ``"ok" | "timeout" | "oom" | "error" | "invalid" | "infra"`` (invalid: ran but the
        submission is missing or rejected by the grader; infra: the sandbox, the grader set-up or
        the machine failed, not the script).
      delta: wall time of the child from start to exit, seconds (0.0 when it never started).
      score: the grader's score (``None`` unless ``status == "ok"``).
      raw_reward: DESIGN section 7 raw reward (score, or leaderboard percentile for
        lower-is-better tasks); ``INVALID_REWARD`` (-10) for the script's own failures;
        ``INFRA_REWARD`` (0.0, a placeholder never to be used as a reward) for ``"infra"``.
      valid: True iff ``status == "ok"``.
      outcome_text: text shown to the policy; on success
        ``"score <s> (<lower|higher> is better), ran <delta> s[, beats <p>% of the leaderboard]"``
        (:data:`RUN_TIME_RE` finds the time part).
      cpu_s: CPU seconds (user + system) of the script and every child it waited for, ``None``
        when not measured (docker backend, or the run never started); for ``--time cpu``.
      percentile: the score's leaderboard percentile in [0, 1] (``None`` when invalid or the
        task has no leaderboard); for ``--raw-reward percentile``.
    """

    status: str
    delta: float
    score: float | None
    raw_reward: float
    valid: bool
    outcome_text: str
    cpu_s: float | None = field(default=None, compare=False)
    percentile: float | None = field(default=None, compare=False)


def infra_outcome(reason: str, delta: float = 0.0, cpu_s: float | None = None) -> Outcome:
    """An ``"infra"`` outcome whose text says what failed (not the script).

    Args:
      reason: what failed (one line is kept, at most 500 characters with the ``infra:`` prefix).
      delta: seconds the attempt ran before the failure.
      cpu_s: CPU seconds it used, when measured.
    """
    text = " ".join(f"infra: {reason}".split())[:500]
    return Outcome("infra", float(delta), None, INFRA_REWARD, False, text, cpu_s)
