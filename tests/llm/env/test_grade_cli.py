"""``python -m rpg_llm.env.grade`` and ``python -m rpg_llm.env.tasks``: JSON reports and usage
errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from rpg_llm.env import grade as grade_cli
from rpg_llm.env.tasks import __main__ as tasks_cli
from testkit import REPO_ROOT

BOARD = [0.1, 0.2, 0.3, 0.4, 0.5]
REPO = REPO_ROOT


def _toy(root: Path) -> pd.DataFrame:
    comp = root / "toy-mae"
    (comp / "prepared" / "public").mkdir(parents=True)
    (comp / "prepared" / "private").mkdir(parents=True)
    answers = pd.DataFrame({"id": np.arange(1, 9), "y": np.linspace(0.0, 7.0, 8)})
    answers.to_csv(comp / "prepared" / "private" / "test.csv", index=False)
    config = {
        "id": "toy-mae",
        "description": "description.md",
        "dataset": {
            "answers": "toy-mae/prepared/private/test.csv",
            "sample_submission": "toy-mae/prepared/public/sample_submission.csv",
        },
        "grader": {"name": "mae", "grade_fn": "rpg_llm.env.tasks.metrics:grade_mae"},
        "lower_is_better": True,
    }
    (comp / "config.yaml").write_text(yaml.safe_dump(config))
    pd.DataFrame({"score": BOARD}).to_csv(comp / "leaderboard.csv", index=False)
    return answers


def test_grade_cli_prints_json_report(tmp_path, capsys):
    answers = _toy(tmp_path)
    sub = answers.assign(y=answers["y"] + 0.15)  # MAE 0.15: beats 0.2, 0.3, 0.4, 0.5
    path = tmp_path / "sub.csv"
    sub.to_csv(path, index=False)
    assert grade_cli.main(["toy-mae", str(path), "--data-root", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is True and out["reason"] == ""
    assert out["score"] == pytest.approx(0.15)
    assert out["percentile"] == pytest.approx(0.8)
    assert out["lower_is_better"] is True
    assert out["medal"] == "bronze"  # n = 5: gold / silver at position 1 (0.1), bronze at 2 (0.2)
    assert out["raw_reward"] == pytest.approx(0.8)
    assert grade_cli.main(["--help"]) == 0
    described = " ".join(capsys.readouterr().out.split()).split("print one JSON object: ")[1]
    assert described.split(". ")[0].split(", ") == list(out)  # the help names the keys, in order

    sub.drop(columns="y").to_csv(path, index=False)
    assert grade_cli.main(["toy-mae", str(path), "--data-root", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and "missing column" in out["reason"]
    assert out["raw_reward"] == -10.0


def test_grade_cli_missing_competition_or_file_exits_2_with_one_line(tmp_path, capsys):
    _toy(tmp_path)
    sub = tmp_path / "s.csv"
    sub.write_text("id,y\n1,0\n")
    root = ["--data-root", str(tmp_path)]
    missing = str(tmp_path / "missing.csv")
    cases = (
        (["no-such-comp", str(sub)], "no-such-comp"),
        (["toy-mae", missing], "missing.csv"),
        (["no-such-comp", missing], "no-such-comp"),  # both bad: the competition is named
    )
    for args, named in cases:
        assert grade_cli.main([*args, *root]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m rpg_llm.env.grade: error:")
        assert named in lines[0]
    # the module entry point behaves the same (one process, data root from the environment)
    env = dict(os.environ, RPG_DATA_ROOT=str(tmp_path), PYTHONPATH=str(REPO))
    env.pop("RPG_MLEBENCH_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "rpg_llm.env.grade", "no-such-comp", str(sub)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and str(tmp_path) in proc.stderr


def test_grade_cli_setup_error_exits_1_with_one_line(tmp_path, capsys):
    _toy(tmp_path)
    (tmp_path / "toy-mae" / "prepared" / "private" / "test.csv").unlink()
    sub = tmp_path / "s.csv"
    sub.write_text("id,y\n1,0\n")
    assert grade_cli.main(["toy-mae", str(sub), "--data-root", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1
    assert lines[0].startswith("python -m rpg_llm.env.grade: GradingSetupError:")
    assert "answers file" in lines[0]


def test_tasks_cli_unknown_name_exits_2(tmp_path, capsys):
    assert tasks_cli.main(["prepare", "no-such-task", "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-task" in err[0]
    assert tasks_cli.main(["prepare", "../x", "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'../x'" in err[0]
    assert tasks_cli.main(["prepare", "text", "--workers", "0", "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers" in err[0] and "0" in err[0]
    assert tasks_cli.main(["prepare", "text", "--seed", "-3", "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seed" in err[0] and "-3" in err[0]
    assert tasks_cli.main([]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert tasks_cli.main(["list", "--mlebench-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mlebench-dir" in err[0] and str(tmp_path) in err[0]


def test_tasks_cli_prepare_without_board(tmp_path, capsys):
    assert tasks_cli.main(["prepare", "digits", "--data-root", str(tmp_path)]) == 2
    capsys.readouterr()
    code = tasks_cli.main(
        ["prepare", "digits-accuracy", "--no-leaderboard", "--data-root", str(tmp_path)]
    )
    assert code == 0
    assert "digits-accuracy" in capsys.readouterr().out
    assert (tmp_path / "digits-accuracy" / "prepared" / "public" / "train.csv").is_file()
    assert tasks_cli.main(["list", "--data-root", str(tmp_path)]) == 0
    rows = dict(line.split("\t", 1) for line in capsys.readouterr().out.splitlines())
    assert rows["digits-accuracy"] == "offline\tprepared"
    assert rows["churn-auc"] == "offline\tnot prepared"


def test_grade_cli_folder_as_submission_says_it_is_not_a_file(tmp_path, capsys):
    folder = tmp_path / "SOME_FOLDER"
    folder.mkdir()
    assert grade_cli.main(["bbc-news-logloss", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m rpg_llm.env.grade: error: ")
    assert f"submission {folder} is a folder, not a CSV file" in err
    assert list(folder.iterdir()) == []


def test_grade_cli_device_as_submission_names_what_it_is(capsys):
    """Found by grading /dev/zero: it was said to be a folder."""
    assert grade_cli.main(["bbc-news-logloss", "/dev/zero"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "python -m rpg_llm.env.grade: error: submission /dev/zero is a character device, "
        "not a CSV file"
    )


def test_grade_cli_data_root_that_is_a_file_is_named(tmp_path, capsys):
    sub = tmp_path / "submission.csv"
    sub.write_text("id,label\n")
    root = tmp_path / "root.txt"
    root.write_text("x")
    assert grade_cli.main(["bbc-news-logloss", str(sub), "--data-root", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.endswith(f"--data-root {root}: exists and is not a folder"), err
    assert root.read_text() == "x"


def test_grade_cli_names_an_unprepared_offline_competition_and_how_to_prepare_it(tmp_path, capsys):
    sub = tmp_path / "sub.csv"
    sub.write_text("id,y\n1,0.0\n")
    for root, extra in ((tmp_path, ""), (tmp_path / "missing", " (the folder ")):
        assert grade_cli.main(["churn-auc", str(sub), "--data-root", str(root)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert f"offline competition 'churn-auc' is not prepared under data root {root}" in err
        assert f"python -m rpg_llm.env.tasks prepare churn-auc --data-root {root}" in err
        assert extra in err


@pytest.mark.parametrize("command", [["list"], ["prepare", "text"], ["baselines", "text"]])
def test_tasks_cli_data_root_that_is_a_file_exits_2_before_any_work(tmp_path, capsys, command):
    """Found with ``--data-root /etc/passwd``: it once exited 1, late."""
    not_a_folder = tmp_path / "passwd"
    not_a_folder.write_text("root:x:0:0\n")
    assert tasks_cli.main([*command, "--data-root", str(not_a_folder)]) == 2
    err = capsys.readouterr().err.strip()
    prog = "python -m rpg_llm.env.tasks"
    assert err == f"{prog}: error: --data-root {not_a_folder}: exists and is not a folder"
    assert not_a_folder.read_text() == "root:x:0:0\n"
