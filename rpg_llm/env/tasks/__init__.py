"""Competitions in MLE-Bench format: loading, offline preparation, running, grading and rewards.

See DESIGN.md section 7. Modules by topic: ``format`` (reading competition folders into a
``Competition``), ``mlebench_api`` (grader names, the optional mlebench package), ``grading``
(scores, percentiles, medals, raw reward), ``runner`` (a script run on a competition and graded),
``specs`` (the offline competitions' ``solutions/<id>/spec.yaml``), ``pypi_data`` (their raw
tables), ``offline`` and ``ladder`` (building them and their leaderboards), ``seeds``,
``cliflags``, ``baselines``, ``nanogpt/`` (the NanoGPT tasks). Public API::

    Competition, default_data_root, default_mlebench_dir, load_competition,
    list_offline_competitions, list_tree_competitions, is_prepared, is_current,
    mlebench_status, prepare, split_hash,
    GradeReport, GradingSetupError, grade_submission, load_grader, raw_reward, INVALID_REWARD,
    SCORE_DECIMALS, baseline_solutions, seed_scripts, DEFAULT_TEXT_TASK, TASK_ALIASES
"""

from rpg_llm.env.tasks.format import (
    DEFAULT_TEXT_TASK,
    TASK_ALIASES,
    Competition,
    default_data_root,
    default_mlebench_dir,
    is_prepared,
    list_tree_competitions,
    load_competition,
    resolve_id,
)
from rpg_llm.env.tasks.grading import (
    INVALID_REWARD,
    SCORE_DECIMALS,
    GradeReport,
    GradingSetupError,
    grade_submission,
    leaderboard_percentile,
    load_grader,
    medal_for,
    raw_reward,
)
from rpg_llm.env.tasks.metrics import InvalidSubmissionError
from rpg_llm.env.tasks.mlebench_api import mlebench_status
from rpg_llm.env.tasks.offline import baseline_solutions, is_current, prepare, split_hash
from rpg_llm.env.tasks.seeds import seed_scripts
from rpg_llm.env.tasks.specs import list_offline_competitions

__all__ = [
    "DEFAULT_TEXT_TASK",
    "INVALID_REWARD",
    "SCORE_DECIMALS",
    "TASK_ALIASES",
    "Competition",
    "GradeReport",
    "GradingSetupError",
    "InvalidSubmissionError",
    "baseline_solutions",
    "default_data_root",
    "default_mlebench_dir",
    "grade_submission",
    "is_current",
    "is_prepared",
    "leaderboard_percentile",
    "list_offline_competitions",
    "list_tree_competitions",
    "load_competition",
    "load_grader",
    "medal_for",
    "mlebench_status",
    "prepare",
    "raw_reward",
    "resolve_id",
    "seed_scripts",
    "split_hash",
]
