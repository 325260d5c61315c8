"""Competition metrics with MLE-Bench's grader signature and our validity rules.

Every ``grade_*`` function has the signature of an MLE-Bench ``grader.grade_fn``
(``grade(submission: pandas.DataFrame, answers: pandas.DataFrame) -> float``, see
openai/mle-bench ``grade_helpers.Grader``) so it can be named in a competition's ``config.yaml``
as ``rpg_llm.env.tasks.metrics:grade_rmse`` and so on. A submission that cannot be scored raises
:class:`InvalidSubmissionError` with a one-line reason (the same class name as MLE-Bench's, so a
caller can treat both alike).

Answers layout (the private ``test.csv`` of an offline competition): the first column is the id
column; the other columns are exactly the columns the submission must contain (one target column
for regression / labels / binary scores, one column per class holding a one-hot row for
multi-class log loss). The submission may carry extra columns; they are ignored.

Validity rules, checked in this order (each failure names what is wrong):
1. the id column and every answer column are present;
2. the row count equals the answers' row count;
3. ids are unique and equal, as a set, to the answers' ids (rows are then aligned by id);
4. prediction columns are numeric (labels for accuracy may be any type) and have no NaN / inf;
5. probabilities (log loss) lie in [0, 1] and each row sums to 1 within ``PROBA_SUM_ATOL``;
6. metric-specific: positive predictions for the log-price RMSE.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn import metrics as skm

PROBA_SUM_ATOL = 1e-3
"""Largest accepted ``|sum_k p_k - 1|`` per row for a probability submission."""

LOGLOSS_CLIP = 1e-15
"""Probabilities are clipped to ``[LOGLOSS_CLIP, 1 - LOGLOSS_CLIP]`` then renormalised (Kaggle)."""


class InvalidSubmissionError(Exception):
    """The submission cannot be graded; ``str(error)`` is the one-line reason."""


def _plain(value: object) -> object:
    """A NumPy scalar as the Python value it holds (``2``, not ``np.int64(2)``), for messages."""
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "ndim", None) == 0 else value


def _ids(series: pd.Series) -> pd.Series:
    """Ids in a comparable form: int64 when integral numbers, else strings."""
    if pd.api.types.is_numeric_dtype(series):
        values = series.to_numpy(dtype=float)
        if np.all(np.isfinite(values)) and np.all(values == np.round(values)):
            return pd.Series(values.astype(np.int64), index=series.index)
    return series.astype(str)


def align(submission: pd.DataFrame, answers: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Check rules 1-3 and return ``(submission, answers)`` restricted and aligned by id.

    Args:
        submission: the submitted table, shape ``(n_rows, >= 1 + n_targets)``.
        answers: id column first, then the target columns, shape ``(n, 1 + n_targets)``.

    Returns:
        Both frames with columns ``answers.columns`` and rows in the answers' order.

    Raises:
        InvalidSubmissionError: missing column, wrong row count, duplicate or wrong ids.
    """
    if not isinstance(submission, pd.DataFrame):
        raise InvalidSubmissionError("submission is not a table")
    id_col = answers.columns[0]
    missing = [c for c in answers.columns if c not in submission.columns]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
        raise InvalidSubmissionError(f"missing column(s): {shown}")
    if len(submission) != len(answers):
        raise InvalidSubmissionError(
            f"wrong number of rows: {len(submission)} (expected {len(answers)})"
        )
    sub_ids = _ids(pd.Series(submission[id_col]))
    ans_ids = _ids(pd.Series(answers[id_col]))
    if sub_ids.duplicated().any():
        dup = sub_ids.loc[sub_ids.duplicated()].iloc[0]
        raise InvalidSubmissionError(f"duplicate id {_plain(dup)!r} in column {id_col!r}")
    unknown = sorted(set(sub_ids) - set(ans_ids), key=str)
    if unknown:
        raise InvalidSubmissionError(
            f"{len(unknown)} id(s) in {id_col!r} not in the test set, e.g. {_plain(unknown[0])!r}"
        )
    sub = submission[list(answers.columns)].copy()
    sub.index = sub_ids.to_numpy()
    ans = answers.copy()
    ans.index = ans_ids.to_numpy()
    return sub.loc[ans.index], ans


def _numeric(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """Rule 4: float64 array of ``columns``, shape ``(n, len(columns))``, finite."""
    out = np.empty((len(frame), len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):
        raw = pd.Series(frame[col])
        values = pd.Series(pd.to_numeric(raw, errors="coerce"))
        bad = (values.isna() & raw.notna()).to_numpy()
        if bad.any():
            raise InvalidSubmissionError(
                f"non-numeric value {raw.loc[bad].iloc[0]!r} in column {col!r}"
            )
        arr = values.to_numpy(dtype=np.float64)
        if np.isnan(arr).any():
            raise InvalidSubmissionError(f"NaN / empty value in column {col!r}")
        if not np.all(np.isfinite(arr)):
            raise InvalidSubmissionError(f"infinite value in column {col!r}")
        out[:, j] = arr
    return out


def _single_target(
    submission: pd.DataFrame, answers: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Aligned ``(y_pred, y_true)`` float64 vectors, shape ``(n,)``, for one-target metrics."""
    if answers.shape[1] != 2:
        raise ValueError(f"answers must have an id and one target column, got {list(answers)}")
    sub, ans = align(submission, answers)
    col = answers.columns[1]
    return _numeric(sub, [col])[:, 0], ans[col].to_numpy(dtype=np.float64)


def grade_multiclass_logloss(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Multi-class log loss (natural log, lower is better), Kaggle / MLE-Bench style.

    ``answers``: id column + one one-hot column per class, shape ``(n, 1 + K)``. The submission's
    class columns hold probabilities (rule 5); they are clipped to ``[1e-15, 1 - 1e-15]`` and
    renormalised per row, then scored with :func:`sklearn.metrics.log_loss`.

    Raises:
        InvalidSubmissionError: by rules 1-5.
    """
    sub, ans = align(submission, answers)
    classes = list(answers.columns[1:])
    proba = _numeric(sub, classes)
    if (proba < 0).any() or (proba > 1).any():
        raise InvalidSubmissionError("probabilities must lie in [0, 1]")
    sums = proba.sum(axis=1)
    worst = int(np.argmax(np.abs(sums - 1.0)))
    if abs(sums[worst] - 1.0) > PROBA_SUM_ATOL:
        row_id = sub.index[worst]
        row_id = row_id.item() if isinstance(row_id, np.generic) else row_id  # 2, not np.int64(2)
        raise InvalidSubmissionError(
            f"probabilities of a row must sum to 1, row with id {row_id!r} sums to "
            f"{sums[worst]:.6g}"
        )
    proba = np.clip(proba, LOGLOSS_CLIP, 1.0 - LOGLOSS_CLIP)
    proba = proba / proba.sum(axis=1, keepdims=True)
    y_true = np.argmax(ans[classes].to_numpy(dtype=np.float64), axis=1)
    return float(skm.log_loss(y_true, proba, labels=list(range(len(classes)))))


def grade_rmse(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Root mean squared error of the one target column (lower is better).

    Raises:
        InvalidSubmissionError: by rules 1-4.
    """
    y_pred, y_true = _single_target(submission, answers)
    return float(np.sqrt(skm.mean_squared_error(y_true, y_pred)))


def grade_rmse_log(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """RMSE between ``log`` of predicted and true values (Kaggle House Prices metric).

    Raises:
        InvalidSubmissionError: by rules 1-4, or a prediction ``<= 0``.
    """
    y_pred, y_true = _single_target(submission, answers)
    if (y_pred <= 0).any():
        raise InvalidSubmissionError("predictions must be > 0 (the metric takes their log)")
    return float(np.sqrt(skm.mean_squared_error(np.log(y_true), np.log(y_pred))))


def grade_mae(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Mean absolute error of the one target column (lower is better).

    Raises:
        InvalidSubmissionError: by rules 1-4.
    """
    y_pred, y_true = _single_target(submission, answers)
    return float(skm.mean_absolute_error(y_true, y_pred))


def grade_auc(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Area under the ROC curve for a binary 0/1 target (higher is better).

    The submitted column is any real-valued score (a probability of class 1 typically).

    Raises:
        InvalidSubmissionError: by rules 1-4.
    """
    y_pred, y_true = _single_target(submission, answers)
    return float(skm.roc_auc_score(y_true.astype(np.int64), y_pred))


def grade_accuracy(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Fraction of exactly matching labels (higher is better).

    Numeric answers are compared numerically (so ``3`` and ``3.0`` match); others as strings.

    Raises:
        InvalidSubmissionError: by rules 1-3, or an empty label.
    """
    if answers.shape[1] != 2:
        raise ValueError(f"answers must have an id and one target column, got {list(answers)}")
    sub, ans = align(submission, answers)
    col = answers.columns[1]
    if pd.Series(sub[col]).isna().to_numpy().any():
        raise InvalidSubmissionError(f"NaN / empty value in column {col!r}")
    if pd.api.types.is_numeric_dtype(ans[col]):
        y_pred = _numeric(sub, [col])[:, 0]
        y_true = ans[col].to_numpy(dtype=np.float64)
    else:
        y_pred = sub[col].astype(str).to_numpy()
        y_true = ans[col].astype(str).to_numpy()
    return float(skm.accuracy_score(y_true, y_pred))
