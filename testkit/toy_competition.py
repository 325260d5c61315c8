"""A toy competition in the offline (MLE-Bench config.yaml) format, for tests.

:func:`build_competition` writes ``<root>/<id>/`` with ``config.yaml``, ``description.md``,
``prepared/public/{test,sample_submission}.csv`` (8 ids, feature ``x``), the private answers
``prepared/private/answers.csv`` (labels :data:`ANSWERS`) and, when given, ``leaderboard.csv``.
Graders: :func:`toy_accuracy` (higher is better), :func:`toy_mae` (lower is better) and
:func:`toy_hang` (never returns), named ``testkit.toy_competition:toy_accuracy`` / ``:toy_mae`` /
``:toy_hang`` in a config.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "ANSWERS",
    "ACCURACY",
    "HANG",
    "MAE",
    "build_competition",
    "toy_accuracy",
    "toy_hang",
    "toy_mae",
]

ANSWERS = [0, 1, 1, 0, 1, 0, 0, 1]
ACCURACY = "testkit.toy_competition:toy_accuracy"
HANG = "testkit.toy_competition:toy_hang"
MAE = "testkit.toy_competition:toy_mae"

PERFECT = """
import os, pandas as pd
test = pd.read_csv(os.path.join("input", "test.csv"))
pd.DataFrame({"id": test["id"], "label": (test["x"] > 1).astype(int)}).to_csv(
    "submission.csv", index=False)
"""
"""A script that predicts every label right (``x > 1`` exactly when the label is 1)."""


def toy_accuracy(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Grader of the toy competition: fraction of ids whose label matches."""
    if list(submission.columns) != ["id", "label"] or len(submission) != len(answers):
        raise ValueError("submission must have columns id,label and one row per test id")
    merged = answers.merge(submission, on="id", suffixes=("_true", "_pred"))
    return float(np.mean(merged["label_true"].to_numpy() == merged["label_pred"].to_numpy()))


def toy_hang(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """A grader that never returns (a hung grader): the grading time limit must end it."""
    while True:
        time.sleep(1.0)


def toy_mae(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Grader of the lower-is-better toy: mean absolute error of ``label``."""
    merged = answers.merge(submission, on="id", suffixes=("_true", "_pred"))
    err = np.abs(merged["label_true"].to_numpy(float) - merged["label_pred"].to_numpy(float))
    return float(np.nanmean(err))  # like pandas' mean, missing predictions are skipped


def build_competition(
    root: Path,
    comp_id: str,
    grade_fn: str,
    lower: bool,
    board: Sequence[float] | None = None,
    grading_time_s: float | None = None,
) -> Path:
    """Write the toy competition ``comp_id`` under ``root`` (``grading_time_s``: its
    ``grader.time_s``); returns its folder."""
    comp = Path(root) / comp_id
    pub, priv = comp / "prepared" / "public", comp / "prepared" / "private"
    pub.mkdir(parents=True)
    priv.mkdir(parents=True)
    ids = list(range(len(ANSWERS)))
    pd.DataFrame({"id": ids, "x": [2 * a + 0.1 * i for i, a in enumerate(ANSWERS)]}).to_csv(
        pub / "test.csv", index=False
    )
    pd.DataFrame({"id": ids, "label": 0}).to_csv(pub / "sample_submission.csv", index=False)
    pd.DataFrame({"id": ids, "label": ANSWERS}).to_csv(priv / "answers.csv", index=False)
    (comp / "description.md").write_text("Predict label from x.\n")
    config = {
        "id": comp_id,
        "name": comp_id,
        "description": "description.md",
        "lower_is_better": lower,
        "grader": {"name": grade_fn.split(":")[1], "grade_fn": grade_fn}
        | ({} if grading_time_s is None else {"time_s": grading_time_s}),
        "dataset": {
            "answers": f"{comp_id}/prepared/private/answers.csv",
            "sample_submission": f"{comp_id}/prepared/public/sample_submission.csv",
        },
    }
    (comp / "config.yaml").write_text(json.dumps(config))  # JSON is valid YAML
    if board is not None:
        pd.DataFrame({"teamName": [f"t{i}" for i in range(len(board))], "score": board}).to_csv(
            comp / "leaderboard.csv", index=False
        )
    return comp
