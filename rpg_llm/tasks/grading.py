"""Grading a submission CSV: score, validity with a reason, leaderboard percentile, medal, reward.

Percentile (our definition, used for the reward of lower-is-better tasks): the fraction of
leaderboard entries the submission beats, ties counting one half,
``(n_beaten + 0.5 * n_tied) / n`` in ``[0, 1]``; "beats" follows the competition's direction, and a
tie is an exactly equal score (a re-run of a leaderboard script ties with its own entry).

Medals: Kaggle's progression rules as MLE-Bench applies them (``kaggle.com/progression``): with
``n`` entries, the gold / silver / bronze thresholds are the scores at positions (1-based, best
first) ``max(1, int(0.1 n))`` / ``max(1, int(0.2 n))`` / ``max(1, int(0.4 n))`` for ``n < 100``;
``10`` / ``int(0.2 n)`` / ``int(0.4 n)`` for ``100 <= n < 250``; ``10 + int(0.002 n)`` / ``50`` /
``100`` for ``250 <= n < 1000``; ``10 + int(0.002 n)`` / ``int(0.05 n)`` / ``int(0.1 n)`` beyond.
A score at least as good as a threshold earns that medal (the best one that applies).

Reward (DESIGN.md section 7): raw reward = score for higher-is-better competitions, leaderboard
percentile for lower-is-better ones; an invalid submission gets ``INVALID_REWARD = -10``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rpg_llm.tasks.format import Competition, import_fn, mlebench_registry

INVALID_REWARD = -10.0
"""Raw reward of an invalid / missing submission (DESIGN.md section 7)."""


@dataclass(frozen=True)
class GradeReport:
    """Result of grading one submission.

    Attributes:
        score: metric value, None when invalid.
        valid: whether the submission could be scored.
        reason: one line; why it is invalid, or "" when valid.
        percentile: fraction of leaderboard entries beaten (ties half), in [0, 1]; None when
            invalid or the competition has no leaderboard.
        medal: "gold" | "silver" | "bronze" | None.
        lower_is_better: direction of ``score``.
    """

    score: float | None
    valid: bool
    reason: str
    percentile: float | None
    medal: str | None
    lower_is_better: bool

    def to_dict(self) -> dict:
        """JSON-ready dict of the fields."""
        return asdict(self)


def leaderboard_percentile(score: float, board_scores: np.ndarray, lower_is_better: bool) -> float:
    """Fraction of entries ``score`` beats, ties counting one half.

    Args:
        score: the submission's score.
        board_scores: leaderboard scores, shape ``(n,)``, float, ``n >= 1``.
        lower_is_better: direction.

    Returns:
        ``(n_beaten + 0.5 * n_tied) / n`` in ``[0, 1]``.

    Raises:
        ValueError: empty board or non-finite score.
    """
    board = np.asarray(board_scores, dtype=np.float64).reshape(-1)
    if board.size == 0:
        raise ValueError("leaderboard is empty")
    if not math.isfinite(score):
        raise ValueError(f"score must be finite, got {score}")
    beaten = np.sum(board > score) if lower_is_better else np.sum(board < score)
    tied = np.sum(board == score)
    return float((beaten + 0.5 * tied) / board.size)


def medal_positions(n: int) -> tuple[int, int, int]:
    """1-based leaderboard positions of the gold, silver and bronze thresholds for ``n`` entries.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"leaderboard must have at least one entry, got {n}")
    if n < 100:
        return max(1, int(0.1 * n)), max(1, int(0.2 * n)), max(1, int(0.4 * n))
    if n < 250:
        return 10, int(0.2 * n), int(0.4 * n)
    if n < 1000:
        return 10 + int(0.002 * n), 50, 100
    return 10 + int(0.002 * n), int(0.05 * n), int(0.1 * n)


def medal_for(score: float, board_scores: np.ndarray, lower_is_better: bool) -> str | None:
    """Medal earned by ``score`` against ``board_scores`` (shape ``(n,)``), or None."""
    board = np.sort(np.asarray(board_scores, dtype=np.float64).reshape(-1))
    if not lower_is_better:
        board = board[::-1]
    for name, pos in zip(("gold", "silver", "bronze"), medal_positions(board.size), strict=True):
        threshold = board[pos - 1]
        if (score <= threshold) if lower_is_better else (score >= threshold):
            return name
    return None


def _report(comp: Competition, score: float | None, reason: str) -> GradeReport:
    if score is None:
        return GradeReport(
            None, False, reason or "invalid submission", None, None, comp.lower_is_better
        )
    if comp.leaderboard is None or len(comp.leaderboard) == 0:
        return GradeReport(score, True, "", None, None, comp.lower_is_better)
    board = comp.leaderboard["score"].to_numpy(dtype=np.float64)
    return GradeReport(
        score=score,
        valid=True,
        reason="",
        percentile=leaderboard_percentile(score, board, comp.lower_is_better),
        medal=medal_for(score, board, comp.lower_is_better),
        lower_is_better=comp.lower_is_better,
    )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _grade_with_mlebench(comp: Competition, path: Path) -> GradeReport:
    registry = mlebench_registry()
    if registry is None:
        raise ValueError(f"competition {comp.id!r} comes from mlebench, which is not importable")
    from mlebench.grade import grade_csv, validate_submission  # type: ignore[import-not-found]

    mle = registry.set_data_dir(comp.root.parent).get_competition(comp.id)
    report = grade_csv(path, mle)
    if report.score is None or not report.valid_submission:
        _, message = validate_submission(path, mle)
        return _report(comp, None, _one_line(message))
    return _report(comp, float(report.score), "")


def grade_submission(comp: Competition, submission_csv: Path) -> GradeReport:
    """Grade a submission CSV against the competition's private answers.

    Competitions from the mlebench registry are graded by ``mlebench.grade.grade_csv`` as it is
    (its reason for an invalid submission comes from ``mlebench.grade.validate_submission``);
    folder competitions call ``config.yaml``'s ``grader.grade_fn(submission_df, answers_df)``.
    A missing / unreadable file, or a grader raising, gives an invalid report with the reason.

    Args:
        comp: a loaded competition.
        submission_csv: path of the CSV written by a solution.

    Returns:
        The :class:`GradeReport`.

    Raises:
        ValueError: the competition's answers or grader cannot be loaded (a set-up error, not
            the submission's fault).
    """
    path = Path(submission_csv)
    if comp.source == "mlebench":
        return _grade_with_mlebench(comp, path)
    if comp.answers is None or not Path(comp.answers).is_file():
        raise ValueError(f"competition {comp.id!r}: answers file {comp.answers} not found")
    grade_fn = import_fn(comp.grade_fn)
    if not path.is_file():
        return _report(comp, None, f"no submission file at {path}")
    try:
        submission = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure makes the submission invalid
        return _report(comp, None, _one_line(f"cannot read submission CSV: {exc}"))
    answers = pd.read_csv(comp.answers)
    try:
        score = grade_fn(submission, answers)
    except Exception as exc:  # noqa: BLE001 - MLE-Bench also treats grader errors as invalid
        if type(exc).__name__ == "InvalidSubmissionError":
            return _report(comp, None, _one_line(str(exc)))
        return _report(comp, None, _one_line(f"grader error {type(exc).__name__}: {exc}"))
    if score is None or not math.isfinite(float(score)):
        return _report(comp, None, f"grader returned a non-finite score {score!r}")
    return _report(comp, float(score), "")


def raw_reward(report: GradeReport) -> float:
    """Raw reward of DESIGN.md section 7.

    ``INVALID_REWARD`` (-10) when invalid; the score when higher is better; the leaderboard
    percentile in [0, 1] when lower is better.

    Raises:
        ValueError: a valid lower-is-better report without a percentile (no leaderboard).
    """
    if not report.valid or report.score is None:
        return INVALID_REWARD
    if not report.lower_is_better:
        return float(report.score)
    if report.percentile is None:
        raise ValueError("lower-is-better competition without a leaderboard: no percentile reward")
    return float(report.percentile)
