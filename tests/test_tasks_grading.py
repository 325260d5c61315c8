"""Grading: validity rules, metric values, percentile / medal, reward mapping, mlebench path."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from rpg_llm.tasks import (
    INVALID_REWARD,
    GradeReport,
    InvalidSubmissionError,
    grade_submission,
    leaderboard_percentile,
    load_competition,
    medal_for,
    raw_reward,
)
from rpg_llm.tasks import metrics as M
from rpg_llm.tasks.grading import medal_positions

CLASSES = ["a", "b", "c"]


def _proba_case(n: int = 30, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    ids = rng.permutation(n) + 100
    answers = pd.DataFrame({"id": ids})
    for k, c in enumerate(CLASSES):
        answers[c] = (y == k).astype(int)
    p = rng.dirichlet(np.ones(3), size=n)
    sub = pd.DataFrame({"id": ids})
    for k, c in enumerate(CLASSES):
        sub[c] = p[:, k]
    return sub, answers, y


def _reg_case(n: int = 25, seed: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    ids = np.arange(n) + 1
    answers = pd.DataFrame({"id": ids, "y": rng.uniform(1.0, 10.0, n)})
    sub = pd.DataFrame({"id": ids, "y": rng.uniform(1.0, 10.0, n)})
    return sub, answers


# ----------------------------------------------------------------------------- metric values


def test_logloss_equals_sklearn_and_formula():
    sub, answers, y = _proba_case()
    p = sub[CLASSES].to_numpy()
    expected = skm.log_loss(y, p, labels=[0, 1, 2])
    by_hand = -np.mean(np.log(p[np.arange(len(y)), y]))
    got = M.grade_multiclass_logloss(sub, answers)
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == pytest.approx(by_hand, rel=1e-9)


def test_logloss_aligns_rows_by_id():
    sub, answers, y = _proba_case()
    shuffled = sub.sample(frac=1.0, random_state=3).reset_index(drop=True)
    assert M.grade_multiclass_logloss(shuffled, answers) == pytest.approx(
        M.grade_multiclass_logloss(sub, answers), rel=1e-12
    )


def test_logloss_clips_zero_probability_like_kaggle():
    sub, answers, y = _proba_case(n=10)
    wrong = (y + 1) % 3
    hard = pd.DataFrame({"id": sub["id"]})
    for k, c in enumerate(CLASSES):
        hard[c] = (wrong == k).astype(float)
    got = M.grade_multiclass_logloss(hard, answers)
    # every row puts 1e-15 on the truth after clipping and renormalising (1 + 2e-15 in total)
    expected = -np.log(1e-15 / (1.0 + 1e-15 - 1e-15 + 1e-15))
    assert got == pytest.approx(expected, rel=1e-6)


def test_regression_metrics_equal_sklearn():
    sub, answers = _reg_case()
    y, yhat = answers["y"].to_numpy(), sub["y"].to_numpy()
    assert M.grade_rmse(sub, answers) == pytest.approx(
        np.sqrt(skm.mean_squared_error(y, yhat)), rel=1e-12
    )
    assert M.grade_mae(sub, answers) == pytest.approx(skm.mean_absolute_error(y, yhat), rel=1e-12)
    assert M.grade_rmse_log(sub, answers) == pytest.approx(
        np.sqrt(np.mean((np.log(y) - np.log(yhat)) ** 2)), rel=1e-12
    )


def test_auc_and_accuracy_equal_sklearn():
    rng = np.random.default_rng(5)
    ids = np.arange(40)
    y = rng.integers(0, 2, 40)
    s = rng.normal(size=40) + y
    answers = pd.DataFrame({"id": ids, "t": y})
    assert M.grade_auc(pd.DataFrame({"id": ids, "t": s}), answers) == pytest.approx(
        skm.roc_auc_score(y, s), rel=1e-12
    )
    labels = rng.integers(0, 4, 40)
    guess = np.where(rng.random(40) < 0.6, labels, (labels + 1) % 4)
    answers = pd.DataFrame({"id": ids, "label": labels})
    got = M.grade_accuracy(pd.DataFrame({"id": ids, "label": guess.astype(float)}), answers)
    assert got == pytest.approx(np.mean(guess == labels), rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(1, 40), st.integers(0, 2**31 - 1))
def test_logloss_matches_sklearn_for_random_valid_submissions(k, n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, size=n)
    p = rng.dirichlet(np.full(k, 0.5), size=n)
    p = np.clip(p, 1e-6, None)
    p /= p.sum(axis=1, keepdims=True)
    cols = [f"c{j}" for j in range(k)]
    ids = rng.permutation(n)
    answers = pd.DataFrame(np.eye(k, dtype=int)[y], columns=cols)
    answers.insert(0, "id", ids)
    sub = pd.DataFrame(p, columns=cols)
    sub.insert(0, "id", ids)
    order = rng.permutation(n)
    got = M.grade_multiclass_logloss(sub.iloc[order], answers)
    assert got == pytest.approx(skm.log_loss(y, p, labels=list(range(k))), rel=1e-9)


# ----------------------------------------------------------------------------- validity rules


def _invalid(fn, sub, answers) -> str:
    with pytest.raises(InvalidSubmissionError) as info:
        fn(sub, answers)
    return str(info.value)


def test_wrong_row_count_is_invalid():
    sub, answers, _ = _proba_case()
    assert "wrong number of rows" in _invalid(M.grade_multiclass_logloss, sub.iloc[:-1], answers)


def test_wrong_ids_are_invalid():
    sub, answers, _ = _proba_case()
    bad = sub.copy()
    bad.loc[0, "id"] = -7
    assert "not in the test set" in _invalid(M.grade_multiclass_logloss, bad, answers)
    dup = sub.copy()
    dup.loc[1, "id"] = dup.loc[0, "id"]
    assert "duplicate id" in _invalid(M.grade_multiclass_logloss, dup, answers)


def test_missing_column_is_invalid():
    sub, answers, _ = _proba_case()
    assert "missing column" in _invalid(M.grade_multiclass_logloss, sub.drop(columns="b"), answers)
    reg, reg_answers = _reg_case()
    assert "missing column" in _invalid(M.grade_rmse, reg.drop(columns="id"), reg_answers)


def test_nan_is_invalid():
    reg, answers = _reg_case()
    reg.loc[3, "y"] = np.nan
    assert "NaN" in _invalid(M.grade_rmse, reg, answers)
    sub, answers, _ = _proba_case()
    sub.loc[2, "a"] = np.nan
    assert "NaN" in _invalid(M.grade_multiclass_logloss, sub, answers)


def test_non_numeric_is_invalid():
    reg, answers = _reg_case()
    reg["y"] = reg["y"].astype(object)
    reg.loc[0, "y"] = "cheap"
    assert "non-numeric" in _invalid(M.grade_rmse, reg, answers)


def test_probabilities_not_summing_to_one_or_negative_are_invalid():
    sub, answers, _ = _proba_case()
    bad = sub.copy()
    bad[CLASSES] = bad[CLASSES] * 0.5
    assert "sum to 1" in _invalid(M.grade_multiclass_logloss, bad, answers)
    neg = sub.copy()
    neg.loc[0, ["a", "b", "c"]] = [-0.2, 0.6, 0.6]
    assert "[0, 1]" in _invalid(M.grade_multiclass_logloss, neg, answers)


def test_non_positive_price_is_invalid_for_log_rmse():
    reg, answers = _reg_case()
    reg.loc[0, "y"] = 0.0
    assert "> 0" in _invalid(M.grade_rmse_log, reg, answers)


# ----------------------------------------------------------------------------- percentile / medal

BOARD = np.array([0.10, 0.20, 0.20, 0.30, 0.40, 0.50, 0.60, 0.70, 0.80, 0.90])


def test_percentile_counts_beaten_entries_and_half_ties():
    # lower is better: 0.25 beats 0.3..0.9 (7 of 10)
    assert leaderboard_percentile(0.25, BOARD, lower_is_better=True) == pytest.approx(0.7)
    # tie with the two 0.2 entries: beats 7, ties 2 -> (7 + 1) / 10
    assert leaderboard_percentile(0.20, BOARD, lower_is_better=True) == pytest.approx(0.8)
    # higher is better: 0.25 beats 0.1, 0.2, 0.2
    assert leaderboard_percentile(0.25, BOARD, lower_is_better=False) == pytest.approx(0.3)
    assert leaderboard_percentile(-1.0, BOARD, lower_is_better=True) == 1.0
    assert leaderboard_percentile(99.0, BOARD, lower_is_better=True) == 0.0


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=30),
    st.floats(-6, 6, allow_nan=False),
)
def test_percentile_is_symmetric_under_direction_flip(board, score):
    lo = leaderboard_percentile(score, np.array(board), lower_is_better=True)
    hi = leaderboard_percentile(-score, -np.array(board), lower_is_better=False)
    assert lo == pytest.approx(hi)
    assert 0.0 <= lo <= 1.0


def test_medals_on_hand_made_board():
    # n = 10: gold at position 1 (0.1), silver at 2 (0.2), bronze at 4 (0.3) for lower-is-better
    assert medal_positions(10) == (1, 2, 4)
    assert medal_for(0.05, BOARD, lower_is_better=True) == "gold"
    assert medal_for(0.10, BOARD, lower_is_better=True) == "gold"
    assert medal_for(0.15, BOARD, lower_is_better=True) == "silver"
    assert medal_for(0.30, BOARD, lower_is_better=True) == "bronze"
    assert medal_for(0.31, BOARD, lower_is_better=True) is None
    # higher is better: thresholds 0.9 / 0.8 / 0.6
    assert medal_for(0.85, BOARD, lower_is_better=False) == "silver"
    assert medal_for(0.60, BOARD, lower_is_better=False) == "bronze"
    assert medal_for(0.55, BOARD, lower_is_better=False) is None
    assert medal_positions(150) == (10, 30, 60)
    assert medal_positions(2000) == (14, 100, 200)


# ----------------------------------------------------------------------------- reward mapping


def test_raw_reward_mapping():
    assert raw_reward(GradeReport(0.83, True, "", 0.4, None, False)) == 0.83
    assert raw_reward(GradeReport(0.12, True, "", 0.65, "bronze", True)) == 0.65
    assert (
        raw_reward(GradeReport(None, False, "missing column", None, None, True)) == INVALID_REWARD
    )
    assert INVALID_REWARD == -10.0
    with pytest.raises(ValueError, match="leaderboard"):
        raw_reward(GradeReport(0.12, True, "", None, None, True))


# ----------------------------------------------------------------------------- folder competition


def make_folder_competition(root: Path, comp_id: str = "toy-rmse") -> tuple[Path, pd.DataFrame]:
    """A hand-made MLE-Bench-format folder: RMSE, 10-entry board, lower is better."""
    comp = root / comp_id
    (comp / "prepared" / "public").mkdir(parents=True)
    (comp / "prepared" / "private").mkdir(parents=True)
    _, answers = _reg_case()
    answers.to_csv(comp / "prepared" / "private" / "test.csv", index=False)
    answers[["id"]].assign(y=5.0).to_csv(
        comp / "prepared" / "public" / "sample_submission.csv", index=False
    )
    config = {
        "id": comp_id,
        "name": "toy",
        "description": "description.md",
        "dataset": {
            "answers": f"{comp_id}/prepared/private/test.csv",
            "sample_submission": f"{comp_id}/prepared/public/sample_submission.csv",
        },
        "grader": {"name": "rmse", "grade_fn": "rpg_llm.tasks.metrics:grade_rmse"},
    }
    (comp / "config.yaml").write_text(yaml.safe_dump(config))
    (comp / "description.md").write_text("# toy\n")
    pd.DataFrame({"teamName": [f"t{i}" for i in range(10)], "score": BOARD}).to_csv(
        comp / "leaderboard.csv", index=False
    )
    return comp, answers


def test_grade_submission_on_folder_competition(tmp_path):
    _, answers = make_folder_competition(tmp_path)
    comp = load_competition("toy-rmse", tmp_path)
    assert comp.lower_is_better  # inferred from the board order as MLE-Bench does
    assert comp == load_competition("toy-rmse", tmp_path) and hash(comp)
    sub = answers.copy()
    sub["y"] = sub["y"] + 0.25  # RMSE exactly 0.25
    path = tmp_path / "sub.csv"
    sub.to_csv(path, index=False)
    report = grade_submission(comp, path)
    assert report.valid and report.reason == ""
    assert report.score == pytest.approx(0.25, rel=1e-9)
    assert report.percentile == pytest.approx(0.7)
    assert report.medal == "bronze"
    assert raw_reward(report) == pytest.approx(0.7)

    sub.drop(columns="y").to_csv(path, index=False)
    bad = grade_submission(comp, path)
    assert not bad.valid and "missing column" in bad.reason and bad.score is None
    assert raw_reward(bad) == INVALID_REWARD

    missing = grade_submission(comp, tmp_path / "nope.csv")
    assert not missing.valid and "no submission file" in missing.reason
    (tmp_path / "empty.csv").write_text("")
    empty = grade_submission(comp, tmp_path / "empty.csv")
    assert not empty.valid and "cannot read" in empty.reason


def test_load_competition_missing_names_id_and_root(tmp_path):
    with pytest.raises(ValueError, match="no-such-comp") as info:
        load_competition("no-such-comp", tmp_path)
    assert str(tmp_path) in str(info.value)
    with pytest.raises(ValueError, match="bad competition name"):
        load_competition("../etc", tmp_path)


# ----------------------------------------------------------------------------- mlebench path


def test_mlebench_registry_and_grader_used_when_importable(tmp_path, monkeypatch):
    comp_dir, _ = make_folder_competition(tmp_path, "fake-mle")
    calls = []

    def fake_grade_fn(submission, answers):  # never called by us: grade_csv is the grader
        raise AssertionError("our code must go through mlebench.grade.grade_csv")

    mle_comp = SimpleNamespace(
        id="fake-mle",
        description="fake description",
        grader=SimpleNamespace(
            grade_fn=fake_grade_fn, is_lower_better=lambda board: True, name="fake"
        ),
        answers=comp_dir / "prepared" / "private" / "test.csv",
        sample_submission=comp_dir / "prepared" / "public" / "sample_submission.csv",
        public_dir=comp_dir / "prepared" / "public",
        private_dir=comp_dir / "prepared" / "private",
        leaderboard=comp_dir / "leaderboard.csv",
    )

    class FakeRegistry:
        def __init__(self, data_dir=None):
            self.data_dir = data_dir

        def set_data_dir(self, data_dir):
            calls.append(("set_data_dir", Path(data_dir)))
            return FakeRegistry(data_dir)

        def get_competition(self, comp_id):
            calls.append(("get_competition", comp_id))
            return mle_comp

        def list_competition_ids(self):
            return ["fake-mle"]

    def grade_csv(path, competition):
        calls.append(("grade_csv", Path(path)))
        score = None if Path(path).name == "bad.csv" else 0.15
        return SimpleNamespace(score=score, valid_submission=score is not None)

    def validate_submission(path, competition):
        return False, "Submission invalid! The attempt to grade\nfailed: fake reason"

    pkg = types.ModuleType("mlebench")
    registry_mod = types.ModuleType("mlebench.registry")
    registry_mod.registry = FakeRegistry()
    grade_mod = types.ModuleType("mlebench.grade")
    grade_mod.grade_csv = grade_csv
    grade_mod.validate_submission = validate_submission
    monkeypatch.setitem(sys.modules, "mlebench", pkg)
    monkeypatch.setitem(sys.modules, "mlebench.registry", registry_mod)
    monkeypatch.setitem(sys.modules, "mlebench.grade", grade_mod)

    comp = load_competition("fake-mle", tmp_path)
    assert comp.source == "mlebench" and comp.description == "fake description"
    assert ("set_data_dir", tmp_path) in calls
    good = tmp_path / "good.csv"
    good.write_text("id,y\n1,1\n")
    report = grade_submission(comp, good)
    assert ("grade_csv", good) in calls
    assert report.valid and report.score == 0.15
    # 0.15 beats 9 of the 10 board entries (lower is better)
    assert report.percentile == pytest.approx(0.9) and report.medal == "silver"
    bad = tmp_path / "bad.csv"
    bad.write_text("id\n1\n")
    invalid = grade_submission(comp, bad)
    assert not invalid.valid and "fake reason" in invalid.reason and "\n" not in invalid.reason
