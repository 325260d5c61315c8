"""``--mlebench-dir`` / ``--seed-dir`` on ``python -m rpg_llm.run`` and ``python -m
rpg_llm.env.execute``: a small MLE-Bench-layout tree read without the mlebench package.

The CLI subprocesses run with ``import mlebench`` made impossible (``sys.modules['mlebench'] =
None``), whatever is installed.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import fixtures_llm
import pytest

from rpg_llm.config import LoopConfig
from rpg_llm.env import tasks
from rpg_llm.loop.backends import seed_solutions
from rpg_llm.run import main as run_main
from testkit.mlebench_tree import (
    BOARD,
    MEAN_SOLUTION,
    PERFECT_SOLUTION,
    build_mlebench_tree,
    mean_solution_mae,
)
from testkit.tiny_run import run_module, tiny_run_args

tiny_model_dir = fixtures_llm.tiny_model_dir

NO_MLEBENCH = (
    "import sys; sys.modules['mlebench'] = None; import importlib; "
    "mod = importlib.import_module(sys.argv[1]); raise SystemExit(mod.main(sys.argv[2:]))"
)


def _run(module: str, args: list[str], **env: str) -> subprocess.CompletedProcess:
    return run_module(
        module, args, env, python_args=("-c", NO_MLEBENCH), env_drop=("RPG_MLEBENCH_DIR",)
    )


@pytest.fixture
def tree(tmp_path):
    return build_mlebench_tree(tmp_path / "mle")


def _percentile_lower(score: float) -> float:
    """Share of the leaderboard beaten (ties half), lower is better: computed from BOARD."""
    return (sum(b > score for b in BOARD) + 0.5 * sum(b == score for b in BOARD)) / len(BOARD)


# -- python -m rpg_llm.env.execute -----------------------------------------------------------------


@pytest.mark.parametrize("via_env", [False, True], ids=["flag", "env"])
def test_execute_grades_the_trees_competition(tmp_path, tree, via_env):
    script = tmp_path / "perfect.py"
    script.write_text(PERFECT_SOLUTION)
    args = [str(script), "--task", tree.comp_id, "--data-root", str(tree.data_root)]
    args += ["--sandbox", "subprocess", "--timeout", "120", "--json"]
    env = {"RPG_MLEBENCH_DIR": str(tree.tree)} if via_env else {}
    if not via_env:
        args += ["--mlebench-dir", str(tree.tree)]
    proc = _run("rpg_llm.env.execute", args, **env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["task"] == tree.comp_id and out["status"] == "ok"
    assert out["score"] == 0.0  # y = 2x + 1 exactly: MAE 0


def test_execute_mean_solution_scores_its_mae(tmp_path, tree):
    script = tmp_path / "mean.py"
    script.write_text(MEAN_SOLUTION)
    args = [str(script), "--task", tree.comp_id, "--data-root", str(tree.data_root)]
    args += ["--mlebench-dir", str(tree.tree), "--sandbox", "subprocess", "--json"]
    proc = _run("rpg_llm.env.execute", args)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "ok"
    assert out["score"] == pytest.approx(mean_solution_mae(tree), abs=1e-4)


def test_execute_bad_mlebench_dir_is_a_usage_error(tmp_path, tree):
    script = tmp_path / "perfect.py"
    script.write_text(PERFECT_SOLUTION)
    nope = tmp_path / "nope"
    args = [str(script), "--task", tree.comp_id, "--mlebench-dir", str(nope)]
    proc = _run("rpg_llm.env.execute", args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--mlebench-dir" in lines[0] and str(nope) in lines[0]


# -- python -m rpg_llm.run: usage errors make no run folder ------------------------------------


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("python -m rpg_llm.run: error: ")
    return err


def _tree_args(tree) -> list[str]:
    """The flags that point a run at the tree's competition."""
    paths = ["--data-root", str(tree.data_root), "--mlebench-dir", str(tree.tree)]
    return ["--task", tree.comp_id, *paths]


def _base_args(tree, model: Path, out: Path) -> list[str]:
    return ["--model", str(model), *_tree_args(tree), "--out", str(out)]


def test_run_bad_seed_dir_exits_2_without_a_folder(tmp_path, tree, tiny_model_dir, capsys):
    empty = tmp_path / "seeds"
    empty.mkdir()
    (empty / "notes.txt").write_text("no scripts here\n")
    out = tmp_path / "run"
    assert run_main(_base_args(tree, tiny_model_dir, out) + ["--seed-dir", str(empty)]) == 2
    err = _one_line_error(capsys)
    assert "--seed-dir" in err and str(empty) in err
    assert not out.exists()


def test_run_broken_grader_exits_2_without_a_folder(tmp_path, tiny_model_dir, capsys):
    t = build_mlebench_tree(tmp_path / "mle", grade_source="import no_such_module_xyz\n")
    out = tmp_path / "run"
    assert run_main(_base_args(t, tiny_model_dir, out)) == 2
    err = _one_line_error(capsys)
    assert "--task toy-tree-mae" in err and "no_such_module_xyz" in err
    assert not out.exists()


def test_run_bad_mlebench_dir_exits_2_without_a_folder(tmp_path, tree, tiny_model_dir, capsys):
    out = tmp_path / "run"
    args = _base_args(tree, tiny_model_dir, out)
    args[args.index("--mlebench-dir") + 1] = str(tmp_path / "nope")
    assert run_main(args) == 2
    assert "--mlebench-dir" in _one_line_error(capsys)
    assert not out.exists()


def test_run_unknown_competition_in_the_tree_exits_2(tmp_path, tree, tiny_model_dir, capsys):
    out = tmp_path / "run"
    args = _base_args(tree, tiny_model_dir, out)
    args[args.index("--task") + 1] = "not-in-the-tree"
    assert run_main(args) == 2
    assert "not-in-the-tree" in _one_line_error(capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--action", "edit"], "--action edit: task toy-tree-mae has no baseline script"),
        (["--action", "script", "--sft-steps", "2"], "--sft-steps 2: task toy-tree-mae has no"),
    ],
)
def test_edit_or_sft_on_a_competition_without_baselines_exits_2_without_a_folder(
    tmp_path, tree, tiny_model_dir, capsys, extra, needle
):
    out = tmp_path / "run"  # the cpu-default preset edits and fine-tunes: neither can start here
    assert run_main(_base_args(tree, tiny_model_dir, out) + extra) == 2
    assert needle in _one_line_error(capsys)
    assert not out.exists()


def test_edit_on_seed_dir_scripts_without_constants_exits_2(tmp_path, tree, tiny_model_dir, capsys):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "mean.py").write_text(MEAN_SOLUTION)  # no top-level NAME = literal line
    out = tmp_path / "run"
    args = _base_args(tree, tiny_model_dir, out) + ["--seed-dir", str(seeds), "--action", "edit"]
    assert run_main(args) == 2
    assert f"--action edit: --seed-dir {seeds} has no baseline script" in _one_line_error(capsys)
    assert not out.exists()


# -- seeds ---------------------------------------------------------------------------------------


def test_seed_solutions_follow_seed_dir_else_the_tasks_baselines(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "b.py").write_text(MEAN_SOLUTION)
    (seeds / "a.py").write_text(PERFECT_SOLUTION)
    cfg = LoopConfig(task="toy-tree-mae", seed_dir=str(seeds))
    assert seed_solutions(cfg)("toy-tree-mae") == tasks.seed_scripts(seeds)
    assert sorted(code for _, code in seed_solutions(cfg)("x")) == sorted(
        [MEAN_SOLUTION, PERFECT_SOLUTION]
    )
    plain = LoopConfig(task="toy-tree-mae")
    assert seed_solutions(plain)("toy-tree-mae") == []  # a competition without baselines
    text_id = tasks.resolve_id("text")
    assert seed_solutions(plain)(text_id) == tasks.baseline_solutions(text_id) != []


# -- 1-step runs with the tiny model (acceptance) ------------------------------------------------


def _tiny_run_args(tree, model: Path, out: Path) -> list[str]:
    extra = _tree_args(tree)
    extra += ["--estimator-batches", "50", "--workers", "1"]
    # the tree's competition has no baselines: nothing to edit or fine-tune on
    extra += ["--action", "script", "--sft-steps", "0"]
    return tiny_run_args(model, out, batch_size=1, extra=extra)


def _samples(run: Path) -> list[tuple]:
    con = sqlite3.connect(str(run / "buffer.sqlite"))
    try:
        q = (
            "SELECT step, row, task, status, score, raw_reward, code, id, parent_id FROM samples "
            "ORDER BY id"
        )
        return con.execute(q).fetchall()
    finally:
        con.close()


def test_one_step_run_on_the_tree_unseeded(tmp_path, tree, tiny_model_dir):
    run = tmp_path / "run"
    proc = _run("rpg_llm.run", _tiny_run_args(tree, tiny_model_dir, run) + ["--no-seed-buffer"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["competition"] == tree.comp_id
    assert Path(config["mlebench_dir"]) == tree.tree.resolve()
    assert config["seed_buffer"] is False and config["seed_dir"] is None
    rows = _samples(run)
    assert [(s, r, t) for s, r, t, *_ in rows] == [(1, 0, tree.comp_id)]
    assert rows[0][-1] is None  # no seed: the base prompt
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]


def test_one_step_run_seeded_from_seed_dir(tmp_path, tree, tiny_model_dir):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "perfect.py").write_text(PERFECT_SOLUTION)
    (seeds / "mean.py").write_text(MEAN_SOLUTION)
    run = tmp_path / "run"
    proc = _run(
        "rpg_llm.run", _tiny_run_args(tree, tiny_model_dir, run) + ["--seed-dir", str(seeds)]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["seed_dir"] == str(seeds) and config["seeded"] is True
    rows = _samples(run)
    seed_rows = {
        code: (status, score, raw) for step, _, _, status, score, raw, code, *_ in rows if step == 0
    }
    assert set(seed_rows) == {PERFECT_SOLUTION, MEAN_SOLUTION}
    status, score, raw = seed_rows[PERFECT_SOLUTION]
    assert status == "ok" and score == 0.0
    assert raw == pytest.approx(_percentile_lower(0.0)) == 1.0  # lower is better: percentile
    status, score, raw = seed_rows[MEAN_SOLUTION]
    assert status == "ok" and score == pytest.approx(mean_solution_mae(tree), abs=1e-4)
    assert raw == pytest.approx(_percentile_lower(score))
    assert raw < seed_rows[PERFECT_SOLUTION][2]  # a worse MAE earns less
    assert [s for s, *_ in rows].count(1) == 1
    # step 1 (B = 1) improves on the seed with the best raw reward: the perfect one
    ids = {row[6]: row[7] for row in rows if row[0] == 0}
    (step1,) = [row for row in rows if row[0] == 1]
    assert step1[-1] == ids[PERFECT_SOLUTION]
