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

from rpg_llm.env.tasks import (
    INVALID_REWARD,
    SCORE_DECIMALS,
    GradeReport,
    InvalidSubmissionError,
    grade_submission,
    leaderboard_percentile,
    load_competition,
    medal_for,
    raw_reward,
)
from rpg_llm.env.tasks import metrics as M
from rpg_llm.env.tasks.grading import checked_score, medal_positions
from testkit.mlebench_tree import build_mlebench_tree, write_submission

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
    zero = sub.copy()
    zero[CLASSES] = 0.0  # every row sums to 0: the message names the id as a plain value
    msg = _invalid(M.grade_multiclass_logloss, zero, answers)
    assert f"row with id {int(zero.iloc[0, 0])} sums to 0" in msg and "np." not in msg, msg
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
        "grader": {"name": "rmse", "grade_fn": "rpg_llm.env.tasks.metrics:grade_rmse"},
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


def fake_registry_grade(submission, answers):
    """The grade_fn of the fake mlebench registry below: MAE of column y, not rounded."""
    return float(np.mean(np.abs(submission["y"].to_numpy() - answers["y"].to_numpy())))


def test_mlebench_registry_used_when_it_imports_completely(tmp_path, monkeypatch):
    comp_dir, answers = make_folder_competition(tmp_path / "data", "fake-mle")
    comp_dir_tree = tmp_path / "registry" / "fake-mle"
    comp_dir_tree.mkdir(parents=True)
    (comp_dir / "leaderboard.csv").rename(comp_dir_tree / "leaderboard.csv")
    (comp_dir / "config.yaml").unlink()  # mlebench keeps the config outside the data root
    calls = []
    mle_comp = SimpleNamespace(
        id="fake-mle",
        description="fake description",
        grader=SimpleNamespace(grade_fn=fake_registry_grade, name="fake"),
        answers=comp_dir / "prepared" / "private" / "test.csv",
        sample_submission=comp_dir / "prepared" / "public" / "sample_submission.csv",
        public_dir=comp_dir / "prepared" / "public",
        private_dir=comp_dir / "prepared" / "private",
        leaderboard=comp_dir_tree / "leaderboard.csv",
    )

    class FakeRegistry:
        def set_data_dir(self, data_dir):
            calls.append(("set_data_dir", Path(data_dir)))
            return self

        def get_competition(self, comp_id):
            calls.append(("get_competition", comp_id))
            return mle_comp

        def list_competition_ids(self):
            return ["fake-mle"]

    import importlib.machinery

    pkg = types.ModuleType("mlebench")
    pkg.__spec__ = importlib.machinery.ModuleSpec("mlebench", None, is_package=True)
    pkg.__path__ = []
    registry_mod = types.ModuleType("mlebench.registry")
    registry_mod.registry = FakeRegistry()  # pyright: ignore[reportAttributeAccessIssue]  # a stand-in module
    helpers_mod = types.ModuleType("mlebench.grade_helpers")
    monkeypatch.setitem(sys.modules, "mlebench", pkg)
    monkeypatch.setitem(sys.modules, "mlebench.registry", registry_mod)
    monkeypatch.setitem(sys.modules, "mlebench.grade_helpers", helpers_mod)

    comp = load_competition("fake-mle", tmp_path / "data")
    assert comp.source == "mlebench" and comp.description == "fake description"
    assert ("set_data_dir", tmp_path / "data") in calls
    assert comp.lower_is_better  # board listed best first, 0.1 < 0.9
    assert comp.grade_fn == f"{__name__}:fake_registry_grade"
    path = tmp_path / "good.csv"
    answers.assign(y=answers["y"] + 0.15).to_csv(path, index=False)
    report = grade_submission(comp, path)
    # the same rules as every source: 0.15 beats 9 of the 10 board entries (lower is better)
    assert report.valid and report.score == pytest.approx(0.15, abs=1e-12)
    assert report.percentile == pytest.approx(0.9) and report.medal == "silver"
    answers[["id"]].to_csv(path, index=False)
    invalid = grade_submission(comp, path)
    assert not invalid.valid and "KeyError" in invalid.reason and "\n" not in invalid.reason


# ----------------------------------------------------------------------------- MLE-Bench's rules


def _tree_comp(tmp_path: Path, grade_source: str | None = None, **kw):
    t = build_mlebench_tree(tmp_path, grade_source=grade_source, **kw)
    sub = write_submission(tmp_path / "sub.csv", t.answers["id"], t.answers["y"])
    return load_competition(t.comp_id, t.data_root, t.tree), sub


def _returning(expr: str, imports: str = "") -> str:
    return f"{imports}\n\ndef grade(submission, answers):\n    return {expr}\n"


@pytest.mark.parametrize(
    ("raw", "board", "rounded", "percentile"),
    [
        # 0.1234549 rounds to 0.12345 and ties the entry 0.12345: half credit for the tie
        ("0.1234549", (0.1, 0.12345, 0.2, 0.3), 0.12345, 0.625),
        # 0.1234551 rounds to 0.12346: no tie, the entry 0.12345 beats it
        ("0.1234551", (0.1, 0.12345, 0.2, 0.3), 0.12346, 0.5),
        ("0.3000000001", (0.1, 0.2, 0.3, 0.4), 0.3, 0.375),
    ],
)
def test_score_is_rounded_to_5_decimals_before_ranking(tmp_path, raw, board, rounded, percentile):
    comp, sub = _tree_comp(tmp_path, _returning(raw), board=board)
    report = grade_submission(comp, sub)
    assert report.valid and report.score == rounded == round(float(raw), SCORE_DECIMALS)
    assert report.percentile == pytest.approx(percentile)
    unrounded = leaderboard_percentile(float(raw), np.array(board), lower_is_better=True)
    if "4549" in raw:
        assert unrounded != report.percentile  # without the rounding the tie is lost


@pytest.mark.parametrize(
    ("expr", "imports", "reason"),
    [
        ("float('nan')", "", "non-finite score nan"),
        ("float('inf')", "", "non-finite score inf"),
        ("-np.inf", "import numpy as np", "non-finite score -inf"),
        ("np.float64('nan')", "import numpy as np", "non-finite"),
        ("True", "", "bool (True), not a number"),
        ("np.bool_(False)", "import numpy as np", "bool"),
        ("'0.7'", "", "str '0.7', not a number"),
        ("None", "", "NoneType None, not a number"),
        ("[0.5]", "", "list [0.5], not a number"),
        ("np.array([0.5])", "import numpy as np", "ndarray"),
    ],
)
def test_grader_returning_a_non_number_makes_the_submission_invalid(
    tmp_path, expr, imports, reason
):
    comp, sub = _tree_comp(tmp_path, _returning(expr, imports))
    report = grade_submission(comp, sub)
    assert not report.valid and report.score is None and reason in report.reason
    assert raw_reward(report) == INVALID_REWARD


@pytest.mark.parametrize(
    ("expr", "imports", "score"),
    [("np.float32(0.25)", "import numpy as np", 0.25), ("np.int64(2)", "import numpy as np", 2.0)],
)
def test_numpy_numbers_are_scores(tmp_path, expr, imports, score):
    comp, sub = _tree_comp(tmp_path, _returning(expr, imports))
    report = grade_submission(comp, sub)
    assert report.valid and report.score == score and isinstance(report.score, float)


def test_raising_grader_gives_invalid_with_the_reason(tmp_path):
    source = (
        "class InvalidSubmissionError(Exception):\n    pass\n\n"
        "def grade(submission, answers):\n"
        "    if len(submission) > 1:\n        raise InvalidSubmissionError('rows do not match')\n"
        "    return 1 / 0\n"
    )
    comp, sub = _tree_comp(tmp_path, source)
    report = grade_submission(comp, sub)
    assert not report.valid and report.reason == "rows do not match"
    write_submission(sub, [1], [0.0])
    report = grade_submission(comp, sub)
    assert not report.valid and report.reason.startswith("grader error ZeroDivisionError")


def test_direction_from_config_else_board_and_ambiguous_board_is_an_error(tmp_path):
    ascending = (0.1, 0.2, 0.3)
    comp, sub = _tree_comp(tmp_path / "a", _returning("0.25"), board=ascending)
    assert comp.lower_is_better  # first < last
    assert grade_submission(comp, sub).percentile == pytest.approx(1 / 3)
    comp, sub = _tree_comp(tmp_path / "b", _returning("0.25"), board=(0.3, 0.2, 0.1))
    assert not comp.lower_is_better
    assert grade_submission(comp, sub).percentile == pytest.approx(2 / 3)
    # config.yaml's key wins over the board's order
    comp, sub = _tree_comp(
        tmp_path / "c", _returning("0.25"), board=ascending, lower_is_better=False
    )
    assert not comp.lower_is_better
    assert grade_submission(comp, sub).percentile == pytest.approx(2 / 3)
    # first == last: ambiguous, an error naming the competition unless config.yaml says
    with pytest.raises(ValueError, match="'flat-board'.*ambiguous.*lower_is_better"):
        _tree_comp(tmp_path / "d", comp_id="flat-board", board=(0.5, 0.4, 0.5))
    comp, _ = _tree_comp(tmp_path / "e", board=(0.5, 0.5), lower_is_better=True)
    assert comp.lower_is_better
    with pytest.raises(ValueError, match="lower_is_better must be true or false"):
        t = build_mlebench_tree(tmp_path / "f")
        config = yaml.safe_load((t.comp_dir / "config.yaml").read_text())
        config["lower_is_better"] = "yes"
        (t.comp_dir / "config.yaml").write_text(yaml.safe_dump(config))
        load_competition(t.comp_id, t.data_root, t.tree)
    with pytest.raises(ValueError, match="no lower_is_better"):
        _tree_comp(tmp_path / "g", board=None)


def test_bbc_like_flat_board_no_longer_becomes_higher_is_better(tmp_path):
    # the case: a log-loss board whose first and last scores are equal used to be
    # read as higher-is-better, so the uniform sample got gold
    comp_dir, _ = make_folder_competition(tmp_path, "flat")
    pd.DataFrame({"score": [1.6, 0.06, 1.6]}).to_csv(comp_dir / "leaderboard.csv", index=False)
    with pytest.raises(ValueError, match="'flat'.*ambiguous"):
        load_competition("flat", tmp_path)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(10**9), 10**9), st.floats(-0.4, 0.4))
def test_checked_score_rounds_within_half_a_unit_to_the_5_decimal_value(k, frac):
    # any value within 0.4e-5 of the 5-decimal number k * 1e-5 is scored as that number, so it
    # ties a board entry holding it
    value = k * 1e-5 + frac * 1e-5
    score, reason = checked_score(value)
    assert reason == "" and score == round(k * 1e-5, SCORE_DECIMALS)
    assert checked_score(score) == (score, "")  # idempotent
