"""Offline competitions: deterministic seeded splits, private answers kept out of public data,
baseline scripts, caching, and (slow) a real leaderboard build."""

from __future__ import annotations

import ast

import numpy as np
import pandas as pd
import pytest

from rpg_llm.env.tasks import (
    DEFAULT_TEXT_TASK,
    SCORE_DECIMALS,
    baseline_solutions,
    grade_submission,
    list_offline_competitions,
    load_competition,
    load_grader,
    prepare,
    raw_reward,
    split_hash,
)
from rpg_llm.env.tasks.ladder import entry_name, set_constants
from rpg_llm.env.tasks.offline import SPECS
from rpg_llm.env.tasks.specs import solutions_dir

ALL = list_offline_competitions()


def test_at_least_six_offline_competitions_with_text_default():
    assert len(ALL) >= 6
    assert DEFAULT_TEXT_TASK in ALL
    kinds = {SPECS[c].grader_name for c in ALL}
    assert {"multi-class-log-loss", "rmse-log", "auc", "accuracy"} <= kinds


@pytest.mark.parametrize("comp_id", ALL)
def test_prepare_keeps_answers_private_and_sample_valid(tmp_path, comp_id):
    comp = prepare(comp_id, tmp_path, leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    spec = SPECS[comp_id]
    public_files = sorted(p.name for p in comp.public_dir.iterdir())
    assert public_files == ["sample_submission.csv", "test.csv", "train.csv"]
    train = pd.read_csv(comp.public_dir / "train.csv")
    test = pd.read_csv(comp.public_dir / "test.csv")
    answers = pd.read_csv(comp.answers)
    assert comp.answers.parent == comp.private_dir
    assert spec.target in train.columns and spec.target not in test.columns
    for col in answers.columns[1:]:
        assert col not in test.columns
    assert set(test["id"]) == set(answers["id"])
    assert not set(train["id"]) & set(test["id"])
    assert abs(len(test) / (len(train) + len(test)) - spec.test_fraction) < 0.01
    # ids are a random permutation: the row order of the source data does not leak through them
    assert train["id"].is_monotonic_increasing
    report = grade_submission(comp, comp.sample_submission)
    assert report.valid, report.reason
    assert report.percentile is None and report.lower_is_better == spec.lower_is_better
    assert comp.description.startswith("# ")


def test_prepare_is_deterministic_and_seeded(tmp_path):
    a = prepare("digits-accuracy", tmp_path / "a", leaderboard=False)
    assert a.answers is not None and a.sample_submission is not None
    b = prepare("digits-accuracy", tmp_path / "b", leaderboard=False)
    c = prepare("digits-accuracy", tmp_path / "c", leaderboard=False, seed=1)
    assert split_hash(a.root) == split_hash(b.root)
    assert split_hash(a.root) != split_hash(c.root)
    # stratified: every label keeps its share within one row
    train = pd.read_csv(a.public_dir / "train.csv")
    answers = pd.read_csv(a.answers)
    full = pd.concat([train["label"], answers["label"]])
    expected = full.value_counts() * SPECS["digits-accuracy"].test_fraction
    got = answers["label"].value_counts()
    assert np.all(np.abs(got.reindex(expected.index) - expected) <= 1.0)


def test_prepare_caches_and_resolves_alias(tmp_path):
    comp = prepare("text", tmp_path, leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    assert comp.id == DEFAULT_TEXT_TASK
    stamp = (comp.root / "config.yaml").stat().st_mtime_ns
    again = prepare(DEFAULT_TEXT_TASK, tmp_path, leaderboard=False)
    assert (again.root / "config.yaml").stat().st_mtime_ns == stamp
    assert load_competition("text", tmp_path).root == comp.root
    with pytest.raises(ValueError, match="unknown offline competition"):
        prepare("no-such-task", tmp_path)


@pytest.mark.parametrize("comp_id", ALL)
def test_baseline_solutions_are_scripts_of_the_ladder(comp_id):
    scripts = dict(baseline_solutions(comp_id))
    assert len(scripts) >= 3
    for name, code in scripts.items():
        ast.parse(code)
        assert "input/" in code and "submission.csv" in code, name
    for solution, constants in SPECS[comp_id].ladder:
        changed = set_constants(scripts[solution], constants)
        for key, value in constants.items():
            assert f"{key} = {value!r}" in changed
    families = {solution for solution, _ in SPECS[comp_id].ladder}
    files = {p.stem for p in solutions_dir(comp_id).glob("*.py")}
    assert families == files
    # the other baselines are the spec's seed variants of those scripts
    variants = [entry_name(solution, constants) for solution, constants in SPECS[comp_id].seeds]
    assert set(scripts) == files | set(variants)


def test_set_constants_keeps_the_rest_of_the_line():
    code = 'MODEL = "ridge"  # one of "hgb", "ridge"\nX = f(1)  # not a literal\nN = 3\n'
    got = set_constants(code, {"MODEL": "hgb", "X": 2, "N": 4})
    assert got == 'MODEL = \'hgb\'  # one of "hgb", "ridge"\nX = 2\nN = 4\n'


def test_set_constants_rejects_missing_name():
    with pytest.raises(ValueError, match="exactly once"):
        set_constants("A = 1\n", {"B": 2})
    assert entry_name("rf", {"SEED": 1}) == "rf(SEED=1)"


@pytest.mark.parametrize("comp_id", ALL)
def test_every_ladder_has_at_least_50_distinct_entries(comp_id):
    ladder = SPECS[comp_id].ladder
    names = [entry_name(solution, constants) for solution, constants in ladder]
    assert len(ladder) >= 50
    assert len(set(names)) == len(names)
    assert names[0] == "prior"


@pytest.mark.slow
def test_leaderboard_ladder_builds_ranks_and_is_deterministic(tmp_path):
    comp = prepare("digits-accuracy", tmp_path / "a")
    assert comp.answers is not None and comp.sample_submission is not None
    board = comp.leaderboard
    assert board is not None and len(board) == len(SPECS["digits-accuracy"].ladder) >= 50
    assert board["score"].is_monotonic_decreasing  # higher is better, best first
    assert list(board["rank"]) == list(range(1, len(board) + 1))
    assert not comp.lower_is_better
    # scores are stored as MLE-Bench grades them: rounded to 5 decimals
    assert all(s == round(s, SCORE_DECIMALS) for s in board["score"])
    # the prior (most frequent label) is the floor of the board
    assert board["teamName"].iloc[-1] == "prior"
    # re-grading a sample-like submission lands at the bottom of the board
    report = grade_submission(comp, comp.sample_submission)
    assert report.percentile is not None and report.percentile <= 1.5 / len(board)
    assert raw_reward(report) == report.score
    # a second build from scratch gives the same board (names, order and scores)
    again = prepare("digits-accuracy", tmp_path / "b").leaderboard
    assert again is not None
    cols = ["rank", "teamName", "score"]
    pd.testing.assert_frame_equal(board.loc[:, cols], again.loc[:, cols])


def test_run_ladder_grades_entries_and_reports_failures(tmp_path):
    from rpg_llm.env.tasks.ladder import run_ladder

    comp = prepare("digits-accuracy", tmp_path / "data", leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    sols = tmp_path / "sols"
    sols.mkdir()
    (sols / "copy.py").write_text(
        "import os, shutil\nOFFSET = 0\n"
        "assert os.environ['RPG_INPUT_DIR'] and os.path.isdir('input')\n"
        "shutil.copy('input/sample_submission.csv', 'submission.csv')\n"
    )
    (sols / "exit3.py").write_text("import sys\nsys.exit(3)\n")
    (sols / "boom.py").write_text("x = 1\ny = x / 0\n")
    board = run_ladder(comp, (("copy", {"OFFSET": 1}), ("copy", {})), sols, 2, preload=())
    expected = grade_submission(comp, comp.sample_submission).score
    assert list(board["score"]) == [expected, expected]
    assert list(board["rank"]) == [1, 2]
    assert set(board["teamName"]) == {"copy", "copy(OFFSET=1)"}
    with pytest.raises(RuntimeError, match="rc 3"):
        run_ladder(comp, (("exit3", {}),), sols, 1, preload=())
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        run_ladder(comp, (("boom", {}),), sols, 1, preload=())


def test_a_cached_folder_naming_the_grader_by_another_module_path_is_kept_and_fixed(tmp_path):
    comp = prepare("digits-accuracy", tmp_path, leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    config = comp.root / "config.yaml"
    text = config.read_text()
    assert comp.grade_fn.startswith("rpg_llm.env.tasks.metrics:")
    config.write_text(text.replace("rpg_llm.env.tasks.metrics:", "rpg_llm.tasks.metrics:"))
    answers = comp.root / "prepared" / "private" / "test.csv"
    built = answers.stat().st_mtime_ns
    again = prepare("digits-accuracy", tmp_path, leaderboard=False)
    assert again.grade_fn == comp.grade_fn  # the moved grader is named again
    assert answers.stat().st_mtime_ns == built  # no rebuild: the data did not change
    assert load_grader(again).__name__ == comp.grade_fn.split(":")[1]
    config.write_text(text.replace("rpg_llm.env.tasks.metrics:", "rpg_llm.tasks.metrics:"))
    loaded = load_competition("digits-accuracy", tmp_path)  # without prepare: fixed too
    assert loaded.grade_fn == comp.grade_fn and answers.stat().st_mtime_ns == built
