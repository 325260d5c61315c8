"""A run folder's identity is fixed at creation: ``--resume`` refuses an edited ``config.json``
(task, engine, model, its weights, method, seed, batch size, action, reward) with exit 2 and one
line naming the setting, before anything is written or loaded; more steps and a larger budget
are allowed; a folder made before the record existed is adopted.

Found by hand-editing a run folder's ``config.json`` and resuming: a changed task appended its
samples to the old run's buffer, a changed engine let TRL take over the PPO folder, a changed
seed or method inserted five step-0 rows under a new label and then failed naming no cause.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import fixtures_llm
import pytest

from rpg_llm import launch
from rpg_llm.run import main
from testkit.tiny_run import run_module, tiny_run_args

tiny_model_dir = fixtures_llm.tiny_model_dir


@pytest.fixture(scope="module")
def made_run(tiny_model_dir, tmp_path_factory) -> Path:
    """A finished one-step tiny run of the RPG arm, seeded with the task's baselines."""
    run = tmp_path_factory.mktemp("made") / "run"
    args = tiny_run_args(
        tiny_model_dir, run, steps=1, extra=["--sft-steps", "0", "--action", "script"]
    )
    done = run_module("rpg_llm.run", args)
    assert done.returncode == 0, done.stderr[-2000:]
    return run


def _copy(made_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(made_run, run)
    return run


def _edit(run: Path, **changes) -> None:
    cfg = json.loads((run / "config.json").read_text())
    for path, value in changes.items():
        d = cfg
        *parents, leaf = path.split("__")
        for k in parents:
            d = d[k]
        d[leaf] = value
    (run / "config.json").write_text(json.dumps(cfg, indent=2))


def _snapshot(run: Path) -> dict[str, str]:
    """Every file of the folder by its SHA-256 (what a refused resume must leave alone)."""
    return {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _rows(run: Path) -> list[tuple]:
    con = sqlite3.connect(str(run / "buffer.sqlite"))
    try:
        return con.execute("SELECT run, step, row FROM samples ORDER BY id").fetchall()
    finally:
        con.close()


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.slow
@pytest.mark.parametrize(
    "field, value, made",
    [
        ("task", "churn-auc", "'text'"),
        ("engine", "trl", "'ppo'"),
        ("seed", 1, "0"),
        ("reward__method", "vanilla", "'rpg'"),
        ("batch_size", 4, "2"),
        ("action", "edit", "'script'"),
        ("reward__timeout_s", 30.0, "60.0"),
        ("run_name", "other", "None"),
    ],
)
def test_a_resume_of_an_edited_config_exits_2_naming_the_setting_and_writes_nothing(
    made_run, tmp_path, capsys, field, value, made
):
    run = _copy(made_run, tmp_path)
    rows = _rows(run)
    assert len(rows) == 7  # five seeds, then step 1's two samples
    _edit(run, **{field: value})
    if field == "reward__method":
        _edit(run, method=value)  # also the copy at the top, as a reader of the folder sees it
    before = _snapshot(run)
    assert main(["--resume", str(run), "--steps", "2", "--no-progress", "--no-plot"]) == 2
    err = _one_line(capsys)
    name = field.replace("__", ".")
    assert f"--resume {run}: {run / 'config.json'} changes {name}: made with {made}, now " in err
    assert f"put {name} back" in err and str(run / "identity.json") in err
    assert _snapshot(run) == before and _rows(run) == rows  # no stray rows, nothing rewritten
    assert launch.status(run).state == "broken"  # the table's planner refuses it too


@pytest.mark.slow
def test_another_model_or_other_weights_under_the_same_name_are_refused(
    made_run, tiny_model_dir, tmp_path, capsys
):
    from testkit.tiny_model import build_tiny_model

    run = _copy(made_run, tmp_path)
    other = build_tiny_model(tmp_path / "other", seed=1)  # the same architecture, other weights
    capsys.readouterr()
    _edit(run, model=str(other))
    assert main(["--resume", str(run), "--steps", "2"]) == 2
    assert f"changes model: made with {str(tiny_model_dir)!r}, now {str(other)!r}" in _one_line(
        capsys
    )
    # the run's own model folder, its weights replaced by another model's
    run = tmp_path / "run2"
    shutil.copytree(made_run, run)
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    cfg = json.loads((run / "config.json").read_text())
    identity = json.loads((run / "identity.json").read_text())
    for d in (cfg, identity["settings"]):
        d["model"] = str(model)  # as if the run had been made from this folder
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "identity.json").chmod(0o644)
    (run / "identity.json").write_text(json.dumps(identity))
    assert launch.resume_config(run, 2).steps == 2  # the same weights: accepted
    for weights in model.glob("*.safetensors"):
        shutil.copy(other / weights.name, weights)
    before = _snapshot(run)
    assert main(["--resume", str(run), "--steps", "2"]) == 2
    err = _one_line(capsys)
    assert f"the weights of model {str(model)!r} are not the run's (made with sha256 " in err
    assert _snapshot(run) == before


def test_more_steps_a_larger_budget_and_the_micro_batch_may_change(tmp_path):
    from rpg_llm.config import LoopConfig
    from rpg_llm.loop.runfolder import RunFolder

    run = tmp_path / "r"
    RunFolder(run).create(LoopConfig(exec_budget_s=100.0).to_dict() | {"seeded": True})
    _edit(run, steps=9, exec_budget_s=250.0, ppo__micro_batch_size=1)
    cfg = launch.resume_config(run)
    assert (cfg.steps, cfg.exec_budget_s, cfg.ppo.micro_batch_size) == (9, 250.0, 1)
    _edit(run, exec_budget_s=None)  # no budget: larger still
    assert launch.resume_config(run).exec_budget_s is None
    _edit(run, exec_budget_s=50.0)
    with pytest.raises(Exception, match="changes exec_budget_s: made with 100.0, now 50.0"):
        launch.resume_config(run)


def test_a_folder_made_before_the_record_is_adopted_on_its_first_resume(tmp_path, monkeypatch):
    """An older folder (no ``identity.json``) resumes as before; its first launched resume writes
    the record from its ``config.json`` and says so; later edits are refused."""
    from rpg_llm.config import LoopConfig
    from rpg_llm.loop import trainer
    from rpg_llm.loop.runfolder import RunFolder

    run = tmp_path / "r"
    RunFolder(run).create(LoopConfig(seed=3).to_dict() | {"seeded": True})
    (run / "identity.json").unlink()  # as made before records existed
    _edit(run, seed=4)  # accepted: there is nothing to compare with
    cfg = launch.resume_config(run)
    assert cfg.seed == 4
    monkeypatch.setattr(trainer, "train", lambda *a, **kw: [])
    said: list[str] = []
    plan = launch.RunPlan(cfg, run, True, "bbc-news-logloss", None)
    assert launch.launch(plan, say=said.append) == []
    assert said == [
        f"{run / 'identity.json'}: written from config.json (the folder had no identity "
        "record); a resume now refuses other settings"
    ]
    record = json.loads((run / "identity.json").read_text())
    assert (
        record["settings"]["seed"] == 4 and (run / "identity.json").stat().st_mode & 0o777 == 0o444
    )
    assert launch.launch(plan, say=said.append) == [] and len(said) == 1  # written once
    _edit(run, seed=5)
    with pytest.raises(Exception, match="changes seed: made with 4, now 5"):
        launch.resume_config(run)


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_record_linked_to_the_edited_config_is_refused(tmp_path, link):
    """Abuse: replace ``identity.json`` by a link to ``config.json`` (symbolic, or hard and then
    edited in place, keeping the inode), so that the record always agrees with the config."""
    import os

    from rpg_llm.config import LoopConfig
    from rpg_llm.loop.runfolder import RunFolder

    run = tmp_path / "r"
    RunFolder(run).create(LoopConfig(seed=3).to_dict() | {"seeded": True})
    record = run / "identity.json"
    record.unlink()
    if link == "symlink":
        record.symlink_to("config.json")
    else:
        os.link(run / "config.json", record)
    cfg = json.loads((run / "config.json").read_text()) | {"seed": 9}
    with open(run / "config.json", "r+") as fh:  # in place: a hard link sees it too
        fh.write(json.dumps(cfg))
        fh.truncate()
    with pytest.raises(Exception, match=f"{record} is not a run folder's identity record"):
        launch.resume_config(run)
    assert launch.status(run).state == "broken"
