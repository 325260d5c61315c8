"""MLE-Bench trees read natively: ``--mlebench-dir`` on the grade and tasks CLIs, without the
mlebench package; its grade.py loaded by file; partial mlebench installs reported; seed folders."""

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

from rpg_llm.env.tasks import (
    GradingSetupError,
    baseline_solutions,
    grade_submission,
    load_competition,
    load_grader,
    mlebench_status,
    seed_scripts,
)
from testkit import REPO_ROOT
from testkit.mlebench_tree import (
    BOARD,
    build_mlebench_tree,
    mean_solution_mae,
    write_submission,
)

REPO = REPO_ROOT

# Runs a module's main() with ``import mlebench`` made impossible, whatever is installed.
NO_MLEBENCH = (
    "import sys; sys.modules['mlebench'] = None; import importlib; "
    "mod = importlib.import_module(sys.argv[1]); raise SystemExit(mod.main(sys.argv[2:]))"
)


def _env(site: Path | None = None, **extra: str) -> dict:
    """The environment of a CLI subprocess: this worktree first on the path (``site`` before it)."""
    env = dict(os.environ)
    env.pop("RPG_MLEBENCH_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join([*([str(site)] if site else []), str(REPO)])
    env.update(extra)
    return env


def _run(args: list[str], env: dict | None = None, blocked: bool = False):
    if blocked:
        cmd = [sys.executable, "-c", NO_MLEBENCH, *args]
    else:
        cmd = [sys.executable, "-m", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env or _env(), cwd=REPO)


def _percentile_lower(score: float, board: tuple[float, ...]) -> float:
    b = np.asarray(board)
    return float((np.sum(b > score) + 0.5 * np.sum(b == score)) / b.size)


@pytest.mark.parametrize("blocked", [False, True], ids=["plain", "mlebench-blocked"])
def test_grade_cli_on_a_tree_end_to_end(tmp_path, blocked):
    t = build_mlebench_tree(tmp_path)
    sub = write_submission(tmp_path / "sub.csv", t.answers["id"], t.answers["y"] + 0.3)
    args = ["rpg_llm.env.grade", t.comp_id, str(sub), "--mlebench-dir", str(t.tree)]
    proc = _run([*args, "--data-root", str(t.data_root)], blocked=blocked)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["valid"] is True and out["competition"] == t.comp_id
    assert out["score"] == pytest.approx(0.3, abs=1e-12)
    assert out["lower_is_better"] is True  # inferred from the board (config has no key)
    assert out["percentile"] == pytest.approx(_percentile_lower(0.3, BOARD))
    assert out["raw_reward"] == out["percentile"]
    assert out["medal"] is None  # n = 10: bronze threshold is position 4 (0.2)

    # the environment variables stand in for both flags
    env = _env(RPG_MLEBENCH_DIR=str(t.tree), RPG_DATA_ROOT=str(t.data_root))
    proc = _run(["rpg_llm.env.grade", t.comp_id, str(sub)], env=env, blocked=blocked)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["score"] == out["score"]


def test_tree_competition_fields_come_from_the_tree(tmp_path):
    t = build_mlebench_tree(tmp_path)
    comp = load_competition(t.comp_id, t.data_root, mlebench_dir=t.tree)
    assert comp.source == "tree"
    assert comp.description == t.description  # resolved against the tree root, not the data
    assert comp.grade_file == t.comp_dir / "grade.py"
    assert comp.public_dir == t.data_root / t.comp_id / "prepared" / "public"
    assert comp.answers == t.data_root / t.comp_id / "prepared" / "private" / "test.csv"
    assert comp.leaderboard is not None and list(comp.leaderboard["score"]) == list(BOARD)
    assert "teamId" in comp.leaderboard.columns
    # the tree's grader (relative import of .metric) gives the MAE computed with NumPy
    train_mean = pd.read_csv(comp.public_dir / "train.csv")["y"].mean()
    y_mean = np.full(len(t.answers), train_mean)
    sub = write_submission(tmp_path / "mean.csv", t.answers["id"], y_mean)
    report = grade_submission(comp, sub)
    assert report.valid and report.score == pytest.approx(round(mean_solution_mae(t), 5))


def test_two_trees_with_the_same_id_keep_their_own_grader(tmp_path):
    a = build_mlebench_tree(tmp_path / "a")
    b = build_mlebench_tree(
        tmp_path / "b", grade_source="def grade(submission, answers):\n    return 0.75\n"
    )
    sub = write_submission(tmp_path / "s.csv", a.answers["id"], a.answers["y"] + 0.5)
    comp_a = load_competition(a.comp_id, a.data_root, a.tree)
    comp_b = load_competition(b.comp_id, b.data_root, b.tree)
    assert grade_submission(comp_a, sub).score == pytest.approx(0.5)
    assert grade_submission(comp_b, sub).score == 0.75
    assert grade_submission(comp_a, sub).score == pytest.approx(0.5)


def test_bad_mlebench_dir_and_unprepared_data_exit_2_with_one_line(tmp_path):
    t = build_mlebench_tree(tmp_path, prepared=False)
    sub = write_submission(tmp_path / "s.csv", t.answers["id"], t.answers["y"])
    proc = _run(
        ["rpg_llm.env.grade", t.comp_id, str(sub), "--mlebench-dir", str(tmp_path / "nope")]
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--mlebench-dir" in lines[0] and "mlebench/competitions" in lines[0]
    proc = _run(
        ["rpg_llm.env.grade", t.comp_id, str(sub), "--mlebench-dir", str(t.tree)]
        + ["--data-root", str(t.data_root)]
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not prepared" in lines[0] and str(t.data_root) in lines[0]
    assert "mlebench prepare -c toy-tree-mae" in lines[0]


def test_tree_grader_importing_absent_mlebench_is_a_setup_error(tmp_path):
    t = build_mlebench_tree(
        tmp_path,
        grade_source="from mlebench.grade_helpers import InvalidSubmissionError\n\n"
        "def grade(submission, answers):\n    return 0.5\n",
    )
    sub = write_submission(tmp_path / "s.csv", t.answers["id"], t.answers["y"])
    proc = _run(
        ["rpg_llm.env.grade", t.comp_id, str(sub), "--mlebench-dir", str(t.tree)]
        + ["--data-root", str(t.data_root)],
        blocked=True,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "GradingSetupError" in lines[0]
    assert "mlebench" in lines[0] and "not installed" in lines[0]


def _partial_mlebench(root: Path) -> Path:
    """A ``mlebench`` package whose registry and grade_helpers need a dependency that is absent."""
    pkg = root / "fake_site" / "mlebench"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "registry.py").write_text("import appdirs_not_installed_rpg\n")
    (pkg / "grade_helpers.py").write_text("import appdirs_not_installed_rpg\n")
    return pkg.parent


@pytest.mark.slow
def test_partial_mlebench_install_is_reported_not_swallowed(tmp_path):
    site = _partial_mlebench(tmp_path)
    env = _env(site)
    t = build_mlebench_tree(
        tmp_path,
        grade_source="from mlebench.grade_helpers import InvalidSubmissionError\n\n"
        "def grade(submission, answers):\n    return 0.5\n",
    )
    sub = write_submission(tmp_path / "s.csv", t.answers["id"], t.answers["y"])
    # an id found nowhere: the error says the registry was not searched, and why
    proc = _run(["rpg_llm.env.grade", "spooky-author-identification", str(sub)], env=env)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "partly installed" in line and "appdirs_not_installed_rpg" in line
    # the tree's grade.py imports mlebench: a set-up error naming the partial install
    proc = _run(
        ["rpg_llm.env.grade", t.comp_id, str(sub), "--mlebench-dir", str(t.tree)]
        + ["--data-root", str(t.data_root)],
        env=env,
    )
    assert proc.returncode == 1
    assert "GradingSetupError" in proc.stderr and "partly installed" in proc.stderr
    code = "from rpg_llm.env.tasks import mlebench_status; print(mlebench_status()[0])"
    status = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert status.stdout.strip() == "partial"


def test_mlebench_status_here_is_absent_or_complete():
    # this machine has no mlebench; wherever it is installed completely the status says so
    assert mlebench_status()[0] in {"absent", "complete"}


def test_load_grader_errors_are_setup_errors(tmp_path):
    t = build_mlebench_tree(tmp_path / "syntax", grade_source="def grade(:\n")
    comp = load_competition(t.comp_id, t.data_root, t.tree)
    with pytest.raises(GradingSetupError, match="SyntaxError"):
        load_grader(comp)
    t = build_mlebench_tree(tmp_path / "nofn", grade_source="def score(s, a):\n    return 1.0\n")
    comp = load_competition(t.comp_id, t.data_root, t.tree)
    with pytest.raises(GradingSetupError, match="no function 'grade'"):
        load_grader(comp)
    t = build_mlebench_tree(tmp_path / "noanswers")
    (t.data_root / t.comp_id / "prepared" / "private" / "test.csv").unlink()
    comp = load_competition(t.comp_id, t.data_root, t.tree)
    sub = write_submission(tmp_path / "s.csv", t.answers["id"], t.answers["y"])
    with pytest.raises(GradingSetupError, match="answers file") as info:
        grade_submission(comp, sub)
    assert isinstance(info.value, ValueError)


def test_malformed_grade_fn_is_a_clear_error(tmp_path):
    t = build_mlebench_tree(tmp_path)
    for bad in ("...grade:grade", "grade", "m:", ":grade", "a..b:grade"):
        config = yaml.safe_load((t.comp_dir / "config.yaml").read_text())
        config["grader"]["grade_fn"] = bad
        (t.comp_dir / "config.yaml").write_text(yaml.safe_dump(config))
        with pytest.raises(ValueError, match="grader.grade_fn must be 'module:function'"):
            load_competition(t.comp_id, t.data_root, t.tree)


def test_tasks_list_shows_what_is_prepared(tmp_path):
    t = build_mlebench_tree(tmp_path)
    build_mlebench_tree(tmp_path, "other-comp", prepared=False)
    proc = _run(
        [
            "rpg_llm.env.tasks",
            "list",
            "--mlebench-dir",
            str(t.tree),
            "--data-root",
            str(t.data_root),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in proc.stdout.splitlines()}
    assert rows["toy-tree-mae"] == ["mlebench", f"prepared (leaderboard {len(BOARD)})"]
    assert rows["other-comp"] == ["mlebench", "not prepared"]
    assert rows["digits-accuracy"] == ["offline", "not prepared"]
    proc = _run(["rpg_llm.env.tasks", "prepare", "toy-tree-mae", "--mlebench-dir", str(t.tree)])
    assert proc.returncode == 2 and "mlebench prepare -c toy-tree-mae" in proc.stderr


def test_seed_scripts_and_no_default_seeds_for_other_competitions(tmp_path):
    assert baseline_solutions("toy-tree-mae") == []
    assert baseline_solutions("spooky-author-identification") == []
    with pytest.raises(ValueError, match="bad competition name"):
        baseline_solutions("../x")
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "b_mean.py").write_text("print('mean')\n")
    (seeds / "a_zero.py").write_text("print('zero')\n")
    (seeds / "notes.txt").write_text("not a script")
    assert seed_scripts(seeds) == [("a_zero", "print('zero')\n"), ("b_mean", "print('mean')\n")]
    (seeds / "c_bad.py").write_text("def f(:\n")
    with pytest.raises(ValueError, match=r"c_bad\.py.*line 1"):
        seed_scripts(seeds)
    with pytest.raises(ValueError, match="not a directory"):
        seed_scripts(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no .py"):
        seed_scripts(empty)


def test_flag_helpers_name_the_flag_and_the_value(tmp_path, monkeypatch):
    from rpg_core.cli import UsageError
    from rpg_llm.env.tasks.cliflags import mlebench_dir_arg, seed_dir_arg

    t = build_mlebench_tree(tmp_path)
    monkeypatch.delenv("RPG_MLEBENCH_DIR", raising=False)
    assert mlebench_dir_arg(None) is None
    assert mlebench_dir_arg(t.tree) == t.tree
    monkeypatch.setenv("RPG_MLEBENCH_DIR", str(t.tree))
    assert mlebench_dir_arg(None) == t.tree
    # load_competition takes the tree from the environment too
    assert load_competition(t.comp_id, t.data_root).source == "tree"
    monkeypatch.setenv("RPG_MLEBENCH_DIR", str(tmp_path / "data"))
    with pytest.raises(UsageError, match="RPG_MLEBENCH_DIR .*data"):
        mlebench_dir_arg(None)
    assert seed_dir_arg(None) is None
    with pytest.raises(UsageError, match="--seed-dir .*nope"):
        seed_dir_arg(tmp_path / "nope")
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "s.py").write_text("x = 1\n")
    assert seed_dir_arg(seeds) == [("s", "x = 1\n")]
