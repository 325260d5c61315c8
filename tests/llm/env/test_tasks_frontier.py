"""Competitions with a time/quality frontier: their graders against values computed another way,
the ``family`` script's MODEL switch under the edit format (a valid switch runs and scores, an
unknown family is an invalid sample naming the value), the seeding of every family, and the
baselines table."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from rpg_llm.env.actions import editable_baselines, editable_constants, parse_action
from rpg_llm.env.execute import run_and_grade
from rpg_llm.env.sandbox import make_sandbox
from rpg_llm.env.tasks import INVALID_REWARD, baseline_solutions, grade_submission, prepare
from rpg_llm.env.tasks import __main__ as tasks_cli
from rpg_llm.env.tasks import baselines as baselines_mod
from rpg_llm.env.tasks.baselines import board_rank, markdown_table, measure_baselines
from rpg_llm.env.tasks.offline import SPECS

FRONTIER = [
    "diamonds-price-rmse",
    "fine-foods-auc",
    "flights-delay-auc",
    "credit-default-auc",
    "attrition-logloss",
    "flights-2013-auc",
]
FAMILIES = {
    "diamonds-price-rmse": {"hgb", "knn", "rf", "ridge", "tree"},
    "fine-foods-auc": {"hgb", "knn", "logreg", "nb", "rf"},
    "flights-delay-auc": {"hgb", "knn", "logreg", "nb", "rf"},
    "credit-default-auc": {"hgb", "knn", "logreg", "nb", "rf"},
    "attrition-logloss": {"hgb", "knn", "logreg", "nb", "rf"},
    "flights-2013-auc": {"hgb", "knn", "logreg", "nb", "rf"},
}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("frontier")


@pytest.fixture(scope="module")
def sandbox():
    return make_sandbox("auto", nproc=32)


def _edit(block: str) -> str:
    return f"Switching the family.\n```python\n{block}\n```\n"


@pytest.mark.parametrize("comp_id", FRONTIER)
def test_graders_agree_with_sklearn_and_numpy(data_root, comp_id):
    comp = prepare(comp_id, data_root, leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    answers = pd.read_csv(comp.answers)
    target = SPECS[comp_id].target
    rng = np.random.default_rng(7)
    if SPECS[comp_id].kind == "proba":  # one 0/1 column per class: a noisy probability
        classes = [c for c in answers.columns if c != "id"]
        onehot = answers[classes].to_numpy(dtype=float)
        p = np.clip(0.7 * onehot + rng.uniform(0.0, 0.6, onehot.shape), 1e-3, None)
        p /= p.sum(axis=1, keepdims=True)
        sub = pd.DataFrame(p, columns=classes).assign(id=answers["id"]).iloc[::-1]
        sub.to_csv(data_root / f"{comp_id}-sub.csv", index=False)
        report = grade_submission(comp, data_root / f"{comp_id}-sub.csv")
        assert report.valid, report.reason
        expected = log_loss(onehot.argmax(axis=1), p, labels=list(range(len(classes))))
        assert report.score == pytest.approx(expected, abs=1e-5)
        assert report.score is not None and 0.2 < report.score < 1.0
        return
    y = answers[target].to_numpy(dtype=float)
    if SPECS[comp_id].kind == "binary":
        pred = y + rng.normal(0.0, 0.8, len(y))  # a noisy score: AUC well inside (0.5, 1)
        expected = roc_auc_score(y, pred)
    else:
        pred = y * np.exp(rng.normal(0.0, 0.3, len(y)))  # log-normal error of sd 0.3
        expected = float(np.sqrt(np.mean((np.log(pred) - np.log(y)) ** 2)))
    # the submission's rows in another order than the answers': the grader aligns by id
    sub = pd.DataFrame({"id": answers["id"], target: pred}).iloc[::-1]
    path = data_root / f"{comp_id}-sub.csv"
    sub.to_csv(path, index=False)
    report = grade_submission(comp, path)
    assert report.valid, report.reason
    assert report.score == pytest.approx(expected, abs=1e-5)
    assert report.score is not None
    assert 0.55 < report.score < 0.95 if SPECS[comp_id].kind == "binary" else 0.2 < report.score


@pytest.mark.parametrize("comp_id", FRONTIER)
def test_family_script_has_model_and_cost_knobs_and_every_family_is_seeded(comp_id):
    seeds = dict(baseline_solutions(comp_id))
    default = editable_constants(seeds["family"])
    assert isinstance(default["MODEL"].value, str)
    assert {"SUBSAMPLE", "FOLDS", "SEED"} <= set(default)
    assert {"N_ESTIMATORS", "MAX_ITER"} <= set(default)  # rf trees, hgb iterations
    seeded = {
        editable_constants(code)["MODEL"].value for name, code in seeds.items() if name != "prior"
    }
    assert seeded == FAMILIES[comp_id]
    # one seed per family, no two seeds with the same code, all of them editable parents
    assert len({code for code in seeds.values()}) == len(seeds) == len(FAMILIES[comp_id]) + 1
    assert [n for n, _ in editable_baselines(list(seeds.items()))] == [
        n for n in seeds if n != "prior"
    ]
    # every variant differs from the default script in the MODEL line only
    for name, code in seeds.items():
        if name.startswith("family("):
            changed = [
                k for k, c in editable_constants(code).items() if c.value != default[k].value
            ]
            assert changed == ["MODEL"], name


@pytest.mark.parametrize("comp_id", FRONTIER)
def test_frontier_ladder_runs_every_family(comp_id):
    ladder = SPECS[comp_id].ladder
    models = {c.get("MODEL") for s, c in ladder if s == "family"} - {None}
    assert models == FAMILIES[comp_id]
    assert ("family", {}) in ladder  # the default script is on the board too


@pytest.mark.slow
def test_editing_model_turns_a_fast_weak_parent_into_a_strong_child(data_root, sandbox):
    comp = prepare("fine-foods-auc", data_root, leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    parent = dict(baseline_solutions(comp.id))["family"]
    assert editable_constants(parent)["MODEL"].value == "knn"
    action = parse_action(_edit('MODEL = "nb"\nNGRAM_MAX = 2'), "edit", parent)
    assert action.kind == "edit" and action.changed == ("MODEL", "NGRAM_MAX")
    assert action.script is not None
    parent_out = run_and_grade(parent, comp, sandbox, 120.0)
    child_out = run_and_grade(action.script, comp, sandbox, 120.0)
    assert parent_out.valid and child_out.valid, (parent_out, child_out)
    assert child_out.score is not None and parent_out.score is not None
    # measured here: knn 0.79, nb on word 1-2-grams 0.85 (AUC), both a few CPU seconds
    assert child_out.score > parent_out.score + 0.03
    assert child_out.cpu_s is not None and child_out.cpu_s < 30.0


def test_editing_model_to_the_nb_family_scores_what_sklearn_computes(data_root, sandbox, tmp_path):
    comp = prepare("fine-foods-auc", data_root, leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    parent = dict(baseline_solutions(comp.id))["family"]
    action = parse_action(_edit('MODEL = "nb"\nMAX_FEATURES = 2000'), "edit", parent)
    assert action.script is not None
    out = run_and_grade(action.script, comp, sandbox, 120.0)
    assert out.valid, out.outcome_text
    # the same model fitted here, scored with sklearn's roc_auc_score
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.naive_bayes import MultinomialNB

    train = pd.read_csv(comp.public_dir / "train.csv")
    test = pd.read_csv(comp.public_dir / "test.csv")
    answers = pd.read_csv(comp.answers).set_index("id").loc[test["id"]]
    vec = TfidfVectorizer(max_features=2000, sublinear_tf=True, min_df=2)
    model = MultinomialNB(alpha=0.1).fit(vec.fit_transform(train["review"]), train["great"])
    proba = model.predict_proba(vec.transform(test["review"]))[:, 1]
    assert out.score == pytest.approx(roc_auc_score(answers["great"], proba), abs=1e-5)


@pytest.mark.parametrize("comp_id", FRONTIER)
def test_an_unknown_family_is_an_invalid_sample_naming_the_value(data_root, sandbox, comp_id):
    comp = prepare(comp_id, data_root, leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    parent = dict(baseline_solutions(comp.id))["family"]
    action = parse_action(_edit('MODEL = "xgb"'), "edit", parent)
    # a str for a str passes the edit's type rule: the script itself rejects the value
    assert action.kind == "edit" and action.script is not None
    out = run_and_grade(action.script, comp, sandbox, 60.0)
    assert out.status == "error" and not out.valid
    assert out.raw_reward == INVALID_REWARD
    allowed = ", ".join(repr(m) for m in sorted(FAMILIES[comp_id]))
    assert "ValueError" in out.outcome_text
    assert f"MODEL 'xgb' is not one of {allowed}" in out.outcome_text
    # a value of the wrong type never runs: the edit itself is invalid and names the line
    bad = parse_action(_edit("MODEL = 3"), "edit", parent)
    assert bad.kind == "invalid" and bad.outcome_text is not None
    assert "MODEL = 3" in bad.outcome_text and "MODEL is a str" in bad.outcome_text


def test_board_rank_and_percentile_by_hand():
    board = np.array([0.9, 0.8, 0.8, 0.7])
    assert board_rank(0.85, board, lower_is_better=False) == 2
    assert board_rank(0.8, board, lower_is_better=False) == 2  # ties do not push it down
    assert board_rank(0.95, board, lower_is_better=False) == 1
    assert board_rank(0.75, board, lower_is_better=True) == 2
    assert board_rank(0.6, board, lower_is_better=True) == 1
    with pytest.raises(ValueError, match="nan"):
        board_rank(float("nan"), board, lower_is_better=True)


def test_measure_baselines_times_scores_and_ranks(data_root, sandbox, monkeypatch):
    comp = prepare("digits-accuracy", data_root, leaderboard=False)
    assert comp.answers is not None and comp.sample_submission is not None
    answers = pd.read_csv(comp.answers)
    # a perfect submission, the sample submission and a crash, on a hand-made board
    perfect = (
        "import pandas as pd\n"
        f"pd.DataFrame({{'id': {answers['id'].tolist()!r}, "
        f"'label': {answers['label'].tolist()!r}}}).to_csv('submission.csv', index=False)\n"
    )
    sample = "import shutil\nshutil.copy('input/sample_submission.csv', 'submission.csv')\n"
    crash = "raise ValueError(\"MODEL 'xgb' is not one of 'a', 'b'\")\n"
    scripts = [("perfect", perfect), ("sample", sample), ("crash", crash)]
    monkeypatch.setattr(baselines_mod, "baseline_solutions", lambda _id: scripts)
    sample_score = grade_submission(comp, comp.sample_submission).score
    assert sample_score is not None
    board = pd.DataFrame({"score": [1.0, 0.5, sample_score, 0.05]})
    comp = dataclasses.replace(comp, leaderboard=board)
    rows = measure_baselines(comp, sandbox, 60.0, workers=2)
    assert list(rows["baseline"]) == ["perfect", "sample", "crash"]
    assert list(rows["status"]) == ["ok", "ok", "error"]
    assert rows["score"].iloc[0] == 1.0 and rows["score"].iloc[1] == sample_score
    assert list(rows["rank"]) == [1, 3, 0]  # 1.0 ties the best; the sample ties the third
    assert rows["percentile"].iloc[0] == pytest.approx((3 + 0.5) / 4)
    assert rows["percentile"].iloc[1] == pytest.approx((1 + 0.5) / 4)
    assert np.isnan(rows["percentile"].iloc[2])
    assert (rows["cpu_s"].to_numpy() > 0).all() and (rows["wall_s"].to_numpy() > 0).all()
    table = markdown_table(rows).splitlines()
    assert len(table) == 2 + 3
    assert table[2].startswith("| digits-accuracy | `perfect` |") and "| 1 / 4 | 88 |" in table[2]
    assert "| error | - | - |" in table[4]
    with pytest.raises(ValueError, match="workers"):
        measure_baselines(comp, sandbox, 60.0, workers=0)
    monkeypatch.setattr(baselines_mod, "baseline_solutions", lambda _id: [])
    with pytest.raises(ValueError, match="no baseline scripts"):
        measure_baselines(comp, sandbox, 60.0)


def test_baselines_cli_usage_errors_name_the_value(tmp_path, capsys):
    root = ["--data-root", str(tmp_path)]
    assert tasks_cli.main(["baselines", "churn-auc,no-such-task", *root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'no-such-task'" in err[0]
    assert tasks_cli.main(["baselines", "churn-auc", "--workers", "0", *root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers" in err[0] and "0" in err[0]
    assert tasks_cli.main(["baselines", "churn-auc", "--timeout", "-1", *root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeout" in err[0] and "-1" in err[0]
    assert tasks_cli.main(["baselines", "churn-auc", "--sandbox", "nope", *root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sandbox nope" in err[0]


@pytest.mark.parametrize("command", [["list"], ["prepare", "text"], ["baselines", "text"]])
def test_a_data_root_that_is_a_file_exits_2_naming_it(tmp_path, capsys, command):
    path = tmp_path / "file"
    path.write_text("kept\n")
    for root in (path, path / "below"):
        assert tasks_cli.main([*command, "--data-root", str(root)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"{tasks_cli.PROG}: error: --data-root {root}")
        if command == ["list"]:
            break  # list only reads: a path below a file is a folder with nothing prepared
    assert path.read_text() == "kept\n"


def test_an_unwritable_data_root_exits_2_before_building(tmp_path, capsys, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != root)
    assert tasks_cli.main(["prepare", "text", "--data-root", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{tasks_cli.PROG}: error: --data-root {root}: the folder is not writable"]
    assert list(root.iterdir()) == []


REGIME_TASKS = ["credit-default-auc", "attrition-logloss", "flights-2013-auc"]


@pytest.mark.parametrize("comp_id", REGIME_TASKS)
def test_a_seed_of_each_regime_task_is_graded_by_rpg_grade_as_sklearn_scores_it(
    data_root, tmp_path, capsys, comp_id
):
    from rpg_llm.env import grade as grade_cli
    from rpg_llm.env.tasks.ladder import run_solution

    comp = prepare(comp_id, data_root, leaderboard=False)
    assert comp.answers is not None
    seed = dict(baseline_solutions(comp_id))["family(MODEL=logreg)"]
    _, rc, err = run_solution(seed, comp.public_dir, tmp_path, 300.0)
    assert rc == 0, err
    sub_path = tmp_path / "submission.csv"
    assert grade_cli.main([comp_id, str(sub_path), "--data-root", str(data_root)]) == 0
    report = json.loads(capsys.readouterr().out)
    answers = pd.read_csv(comp.answers).set_index("id")
    sub = pd.read_csv(sub_path).set_index("id").loc[answers.index]
    if SPECS[comp_id].kind == "proba":
        classes = [c for c in answers.columns]
        p = np.clip(sub[classes].to_numpy(float), 1e-15, 1 - 1e-15)
        p /= p.sum(axis=1, keepdims=True)
        expected = log_loss(answers[classes].to_numpy().argmax(axis=1), p, labels=[0, 1])
    else:
        target = SPECS[comp_id].target
        expected = roc_auc_score(answers[target], sub[target])
    assert report["valid"] is True
    assert report["score"] == pytest.approx(expected, abs=1e-5)
