"""Competitions in MLE-Bench format: loading, offline preparation, grading and rewards.

See DESIGN.md section 7. Public API::

    Competition, default_data_root, load_competition, list_offline_competitions, prepare,
    GradeReport, grade_submission, raw_reward, INVALID_REWARD, baseline_solutions,
    DEFAULT_TEXT_TASK, TASK_ALIASES
"""

from rpg_llm.tasks.format import (
    DEFAULT_TEXT_TASK,
    TASK_ALIASES,
    Competition,
    default_data_root,
    load_competition,
    resolve_id,
)
from rpg_llm.tasks.grading import (
    INVALID_REWARD,
    GradeReport,
    grade_submission,
    leaderboard_percentile,
    medal_for,
    raw_reward,
)
from rpg_llm.tasks.metrics import InvalidSubmissionError
from rpg_llm.tasks.offline import (
    baseline_solutions,
    list_offline_competitions,
    prepare,
    split_hash,
)

__all__ = [
    "DEFAULT_TEXT_TASK",
    "INVALID_REWARD",
    "TASK_ALIASES",
    "Competition",
    "GradeReport",
    "InvalidSubmissionError",
    "baseline_solutions",
    "default_data_root",
    "grade_submission",
    "leaderboard_percentile",
    "list_offline_competitions",
    "load_competition",
    "medal_for",
    "prepare",
    "raw_reward",
    "resolve_id",
    "split_hash",
]
