"""``rpg_llm.launch``: the one contract between launchers and a run (config files, the status
of a run folder, the stop rule), and ``rpg-run --config``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rpg_core.cli import UsageError
from rpg_llm import launch
from rpg_llm.config import LoopConfig, PPOConfig, RewardConfig
from rpg_llm.loop.budget import stop_reason
from rpg_llm.loop.buffer import SampleBuffer, read_exec_seconds_by_row
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.presets import get_preset
from rpg_llm.run import main
from testkit.samples import toy_sample

# --- the stop rule ------------------------------------------------------------------------------


def test_stop_reason_by_steps_and_by_budget():
    cfg = LoopConfig(batch_size=2, steps=5, exec_budget_s=4.0)
    assert stop_reason(cfg, 0, {}) is None  # nothing run yet: even a zero budget row waits
    assert stop_reason(cfg, 2, {0: 3.9, 1: 10.0}) is None  # row 0 below 4 s
    assert stop_reason(cfg, 2, {0: 4.0, 1: 10.0}) == "budget"  # 4.0 >= 4.0 on both rows
    assert stop_reason(cfg, 2, {0: 9.0}) is None  # row 1 has used nothing
    assert stop_reason(cfg, 5, {0: 1.0, 1: 1.0}) == "steps"
    assert stop_reason(cfg, 5, {0: 4.0, 1: 4.0}) == "budget"  # both: the budget is named
    assert stop_reason(replace(cfg, exec_budget_s=None), 4, {0: 99.0, 1: 99.0}) is None


# --- status of a run folder ---------------------------------------------------------------------


def _folder(path: Path, cfg: LoopConfig, metrics_steps: int = 0, rows=()) -> RunFolder:
    """A hand-made run folder: ``config.json``, ``metrics.jsonl`` lines of steps ``1 ..
    metrics_steps`` and a buffer of ``rows``: ``(step, row, seconds)``."""
    folder = RunFolder(path)
    folder.create(cfg.to_dict() | {"competition": "toy", "seeded": False})
    for k in range(1, metrics_steps + 1):
        folder.append_metrics({"step": k})
    with SampleBuffer(folder.buffer_path) as buf:
        buf.add_many(
            [toy_sample(4 * step + row, 0.5, seconds, run=cfg.name) for step, row, seconds in rows]
        )
    return folder


def test_status_new_resumable_and_finished_by_steps(tmp_path):
    cfg = LoopConfig(batch_size=2, steps=3)
    assert launch.status(tmp_path / "none").state == "new"
    folder = _folder(tmp_path / "run", cfg, metrics_steps=2)
    st = launch.status(folder.root)
    assert (st.state, st.steps_done, st.reason) == ("resumable", 2, "")
    assert st.config == cfg
    folder.append_metrics({"step": 3})
    st = launch.status(folder.root)
    assert (st.state, st.steps_done, st.reason, st.finished) == ("finished", 3, "steps", True)
    assert launch.status(folder.root, replace(cfg, steps=5)).state == "resumable"  # extended


def test_status_finished_by_budget_reads_the_buffer(tmp_path):
    """Every chain used 4 s after step 2 (row 0: 1 + 3, row 1: 3 + 1.5); an infra sample's
    time is no chain's."""
    cfg = LoopConfig(batch_size=2, steps=10, exec_budget_s=4.0)
    rows = [(1, 0, 1.0), (1, 1, 3.0), (2, 0, 3.0), (2, 1, 1.5)]
    folder = _folder(tmp_path / "run", cfg, metrics_steps=2, rows=rows)
    assert read_exec_seconds_by_row(folder.buffer_path, 2) == {0: 4.0, 1: 4.5}
    assert read_exec_seconds_by_row(folder.buffer_path, 1) == {0: 1.0, 1: 3.0}
    st = launch.status(folder.root)
    assert (st.state, st.reason, st.steps_done) == ("finished", "budget", 2)
    assert launch.status(folder.root, replace(cfg, exec_budget_s=4.6)).state == "resumable"


def test_status_of_an_unreadable_folder_is_broken_naming_why(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.json").write_text('{"no_such_key": 1}')
    st = launch.status(folder)
    assert st.state == "broken" and "no_such_key" in st.reason
    cfg = LoopConfig()
    ok = _folder(tmp_path / "ok", cfg)
    (ok.checkpoint_path(1)).mkdir(parents=True)
    (ok.checkpoint_path(1) / "trainer.pt").write_bytes(b"")
    ok.buffer_path.write_bytes(b"")  # checkpointed, but the samples are gone
    st = launch.status(ok.root)
    assert st.state == "broken" and "buffer.sqlite" in st.reason and st.config == cfg


def test_trl_steps_are_trls_checkpoints_when_it_has_some(tmp_path):
    """TRL writes a step's metrics line before its update, so its metrics overcount a run
    killed between the two; its ``trl/checkpoint-N`` is what was trained. A kept record (no
    ``trl/`` folder) counts by its metrics."""
    cfg = LoopConfig(batch_size=2, steps=3, engine="trl")
    folder = _folder(tmp_path / "run", cfg, metrics_steps=3)
    assert launch.status(folder.root).state == "finished"  # a record: by metrics
    (folder.trl_dir / "checkpoint-2").mkdir(parents=True)
    st = launch.status(folder.root)
    assert (st.state, st.steps_done) == ("resumable", 2)


def test_config_difference_names_the_first_other_setting():
    cfg = LoopConfig(batch_size=2)
    assert launch.config_difference(cfg, replace(cfg, steps=99, exec_budget_s=5.0)) is None
    fast = replace(cfg, ppo=replace(cfg.ppo, micro_batch_size=2))  # speed only
    assert launch.config_difference(cfg, fast) is None
    other = replace(cfg, reward=RewardConfig("vanilla"))
    assert launch.config_difference(cfg, other) == "reward.method = 'rpg', asked 'vanilla'"


# --- config files -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["run.json", "run.yaml", "run.yml"])
def test_a_config_file_round_trips(tmp_path, name):
    cfg = replace(
        get_preset("cpu-default").config,
        seed=3,
        exec_budget_s=12.5,
        ppo=PPOConfig(lora_rank=8, mini_batch_size=None),
    )
    path = launch.write_config(cfg, tmp_path / name)
    assert launch.read_config(path) == cfg
    text = path.read_text()
    loaded = yaml.safe_load(text) if name != "run.json" else json.loads(text)
    assert loaded["seed"] == 3 and loaded["ppo"]["lora_rank"] == 8


def test_a_run_folders_config_json_reads_as_its_settings(tmp_path):
    cfg = LoopConfig(batch_size=2, seed=7)
    folder = _folder(tmp_path / "run", cfg)  # holds the run-record keys beside the settings
    assert launch.read_config(folder.config_path) == cfg
    assert launch.read_config(folder.root) == cfg  # the folder itself names its config.json


@pytest.mark.parametrize(
    "content, needle",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "holds no mapping"),
        ('{"batch_size": 0}', "batch_size must be an integer >= 1, got 0"),
        ('{"no_such": 1}', "unknown config key(s) no_such"),
    ],
)
def test_a_bad_config_file_is_a_usage_error_naming_it(tmp_path, content, needle):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(UsageError) as err:
        launch.read_config(path)
    assert str(err.value).startswith(f"--config {path}: ") and needle in str(err.value)
    with pytest.raises(UsageError, match="cannot read it"):
        launch.read_config(tmp_path / "missing.json")


def test_make_config_applies_flags_over_a_stored_config():
    base = replace(get_preset("cpu-default").config, seed=4, steps=7)
    cfg = launch.make_config({"steps": 2, "reward.method": "vanilla"}, base=base)
    assert (cfg.seed, cfg.steps, cfg.method) == (4, 2, "vanilla")
    with pytest.raises(UsageError, match="--steps"):
        launch.make_config({"steps": 0}, base=base)
    with pytest.raises(UsageError, match="--preset 'nope' is unknown"):
        launch.make_config({}, preset="nope")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_run_cli_refuses_config_with_preset_and_a_bad_config(tmp_path, capsys):
    path = launch.write_config(LoopConfig(), tmp_path / "c.json")
    out = tmp_path / "r"
    assert main(["--config", str(path), "--preset", "cpu-default", "--out", str(out)]) == 2
    assert "--config and --preset" in _one_line(capsys)
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [\n")
    assert main(["--config", str(bad), "--out", str(out)]) == 2
    assert f"--config {bad}: not valid YAML" in _one_line(capsys)
    assert not out.exists()


def test_resume_refuses_other_settings_naming_them(tmp_path, capsys):
    folder = _folder(tmp_path / "run", LoopConfig(batch_size=2))
    assert main(["--resume", str(folder.root), "--seed", "3", "--config", "x.json"]) == 2
    assert "--resume keeps the run's settings; drop --seed, --config" in _one_line(capsys)


def test_resuming_a_run_that_spent_its_budget_loads_no_model(tmp_path, capsys, monkeypatch):
    """A run that stopped on its execution budget has nothing left to do: ``--resume`` says so
    and returns before any model loads (the engine is never reached)."""
    cfg = LoopConfig(batch_size=2, steps=10, exec_budget_s=4.0, task="text")
    rows = [(1, 0, 5.0), (1, 1, 6.0)]
    folder = _folder(tmp_path / "run", cfg, metrics_steps=1, rows=rows)
    monkeypatch.setattr(launch, "launch", lambda *a, **k: pytest.fail("the engine was started"))
    monkeypatch.setattr(launch.registry, "check_setup", lambda task, **k: "bbc-news-logloss")
    assert main(["--resume", str(folder.root)]) == 0
    out = capsys.readouterr().out
    assert "nothing to run: the run spent its execution budget of 4 s per chain after step 1" in out
