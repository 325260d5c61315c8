"""A small MLE-Bench-layout tree for tests (not part of the installed packages).

:func:`build_mlebench_tree` writes, under a base folder::

    <base>/tree/mlebench/competitions/<id>/config.yaml       MLE-Bench's keys (no lower_is_better
                                                             unless asked for)
    <base>/tree/mlebench/competitions/<id>/grade.py          grade(submission, answers) -> MAE; it
                                                             imports nothing from mlebench and
                                                             uses a relative import (.metric)
    <base>/tree/mlebench/competitions/<id>/metric.py
    <base>/tree/mlebench/competitions/<id>/leaderboard.csv   Kaggle's columns, best first
    <base>/tree/mlebench/competitions/<id>/description.md
    <base>/tree/mlebench/competitions/<id>/checksums.yaml
    <base>/data/<id>/prepared/public/{train,test,sample_submission}.csv
    <base>/data/<id>/prepared/private/test.csv

The task: ``y = 2 x + 1`` exactly, ``x`` on a grid; the metric is the mean absolute error of the
``y`` column (lower is better). :data:`PERFECT_SOLUTION` scores 0, :data:`MEAN_SOLUTION` the MAE
of the training mean (:func:`mean_solution_mae` computes it from the files).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import yaml
from numpy.typing import ArrayLike

__all__ = [
    "BOARD",
    "DEFAULT_ID",
    "MEAN_SOLUTION",
    "PERFECT_SOLUTION",
    "MlebenchTree",
    "build_mlebench_tree",
    "mean_solution_mae",
    "write_submission",
]

DEFAULT_ID = "toy-tree-mae"

BOARD = (0.05, 0.1, 0.2, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8)
"""Default leaderboard scores, best first (lower is better)."""

GRADE_PY = '''"""Mean absolute error of column y: a test competition's own grader (no mlebench)."""

from .metric import mean_absolute_error


class InvalidSubmissionError(Exception):
    pass


def grade(submission, answers):
    if "id" not in submission.columns or "y" not in submission.columns:
        raise InvalidSubmissionError("submission needs columns id and y")
    if len(submission) != len(answers):
        raise InvalidSubmissionError(
            f"submission has {len(submission)} rows, expected {len(answers)}"
        )
    merged = answers.merge(submission, on="id", suffixes=("_true", "_pred"))
    if len(merged) != len(answers):
        raise InvalidSubmissionError("submission ids do not match the test ids")
    return mean_absolute_error(merged["y_true"].to_numpy(), merged["y_pred"].to_numpy(float))
'''

METRIC_PY = """import numpy as np


def mean_absolute_error(y_true, y_pred):
    return float(np.mean(np.abs(np.asarray(y_true, float) - np.asarray(y_pred, float))))
"""

PERFECT_SOLUTION = """import pandas as pd

test = pd.read_csv("input/test.csv")
pd.DataFrame({"id": test["id"], "y": 2.0 * test["x"] + 1.0}).to_csv("submission.csv", index=False)
"""

MEAN_SOLUTION = """import pandas as pd

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pd.DataFrame({"id": test["id"], "y": train["y"].mean()}).to_csv("submission.csv", index=False)
"""


class MlebenchTree(NamedTuple):
    """What :func:`build_mlebench_tree` wrote.

    Attributes:
        tree: the tree root (pass as ``--mlebench-dir``).
        data_root: the data root (pass as ``--data-root``).
        comp_id: the competition id.
        comp_dir: ``<tree>/mlebench/competitions/<id>``.
        answers: the private answers, columns ``id, y``, shape ``(n_test, 2)``.
        test: the public test table, columns ``id, x``.
        description: the text of description.md.
    """

    tree: Path
    data_root: Path
    comp_id: str
    comp_dir: Path
    answers: pd.DataFrame
    test: pd.DataFrame
    description: str


def build_mlebench_tree(
    base: Path,
    comp_id: str = DEFAULT_ID,
    *,
    board: tuple[float, ...] | None = BOARD,
    lower_is_better: bool | None = None,
    grade_source: str | None = None,
    prepared: bool = True,
    n_train: int = 40,
    n_test: int = 10,
) -> MlebenchTree:
    """Write the tree and its prepared data under ``base`` (module docstring).

    Args:
        base: an empty or new folder.
        comp_id: competition id.
        board: leaderboard scores written best first, or None for no leaderboard.csv.
        lower_is_better: written to config.yaml when not None (MLE-Bench's configs lack it).
        grade_source: replaces the default grade.py text (e.g. a grader returning NaN).
        prepared: write the data root's ``prepared/`` folders.
        n_train, n_test: row counts.

    Returns:
        The :class:`MlebenchTree`.
    """
    base = Path(base)
    tree = base / "tree"
    data_root = base / "data"
    comp_dir = tree / "mlebench" / "competitions" / comp_id
    comp_dir.mkdir(parents=True, exist_ok=True)
    x = np.linspace(0.0, 9.75, n_train + n_test)
    rng = np.random.default_rng(0)
    ids = rng.permutation(n_train + n_test) + 1
    frame = pd.DataFrame({"id": ids, "x": x, "y": 2.0 * x + 1.0})
    train = frame.iloc[:n_train].sort_values("id").reset_index(drop=True)
    test = frame.iloc[n_train:].sort_values("id").reset_index(drop=True)
    config = {
        "id": comp_id,
        "name": "Toy tree MAE",
        "competition_type": "simple",
        "awards_medals": True,
        "prizes": None,
        "description": f"mlebench/competitions/{comp_id}/description.md",
        "dataset": {
            "answers": f"{comp_id}/prepared/private/test.csv",
            "sample_submission": f"{comp_id}/prepared/public/sample_submission.csv",
        },
        "grader": {"name": "mae", "grade_fn": f"mlebench.competitions.{comp_id}.grade:grade"},
        "preparer": f"mlebench.competitions.{comp_id}.prepare:prepare",
    }
    if lower_is_better is not None:
        config["lower_is_better"] = lower_is_better
    (comp_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (comp_dir / "grade.py").write_text(GRADE_PY if grade_source is None else grade_source)
    (comp_dir / "metric.py").write_text(METRIC_PY)
    description = (
        f"# {comp_id}\n\nPredict `y` from `x` for every test id; mean absolute error, lower is "
        "better.\n"
    )
    (comp_dir / "description.md").write_text(description)
    (comp_dir / "checksums.yaml").write_text(yaml.safe_dump({"private": {}, "public": {}}))
    if board is not None:
        n = len(board)
        pd.DataFrame(
            {
                "scoreNullable": list(board),
                "teamId": range(1000, 1000 + n),
                "hasTeamName": [True] * n,
                "submissionDate": ["2020-01-01 00:00:00"] * n,
                "score": list(board),
                "hasScore": [True] * n,
            }
        ).to_csv(comp_dir / "leaderboard.csv", index=False)
    answers = test[["id", "y"]].copy()
    if prepared:
        public = data_root / comp_id / "prepared" / "public"
        private = data_root / comp_id / "prepared" / "private"
        public.mkdir(parents=True, exist_ok=True)
        private.mkdir(parents=True, exist_ok=True)
        train.to_csv(public / "train.csv", index=False)
        test[["id", "x"]].to_csv(public / "test.csv", index=False)
        test[["id"]].assign(y=float(train["y"].mean())).to_csv(
            public / "sample_submission.csv", index=False
        )
        answers.to_csv(private / "test.csv", index=False)
    else:
        data_root.mkdir(parents=True, exist_ok=True)
    return MlebenchTree(
        tree, data_root, comp_id, comp_dir, answers, test[["id", "x"]].copy(), description
    )


def mean_solution_mae(t: MlebenchTree) -> float:
    """MAE of :data:`MEAN_SOLUTION`, computed from the tree's files with NumPy."""
    train = pd.read_csv(t.data_root / t.comp_id / "prepared" / "public" / "train.csv")
    return float(np.mean(np.abs(t.answers["y"].to_numpy() - train["y"].mean())))


def write_submission(path: Path, ids: ArrayLike, y: ArrayLike) -> Path:
    """Write a submission CSV with columns ``id, y`` (array-likes of shape ``(n,)``: arrays,
    lists, pandas Series) and return its path."""
    pd.DataFrame({"id": ids, "y": y}).to_csv(path, index=False)
    return Path(path)
