"""A run folder is one process's at a time, its buffer stores a sample once, and a broken folder
is refused early (before any model loads) with a message naming the file.

The folders here are made by hand (a ``config.json`` of the default settings, an empty
checkpoint marker), so every refusal is reached without loading a model.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import fixtures_llm
import pytest

from rpg_llm.config import LoopConfig
from rpg_llm.env.sandbox.workdir import new_workdir, remove_stale_workdirs
from rpg_llm.loop.buffer import SampleBuffer
from rpg_llm.loop.runfolder import RunFolder, RunFolderBusy
from testkit import REPO_ROOT
from testkit.samples import toy_sample
from testkit.tiny_run import run_module

tiny_model_dir = fixtures_llm.tiny_model_dir

ROOT = REPO_ROOT


def _run_folder(path: Path, steps: int = 3, checkpointed: int | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    cfg = LoopConfig().to_dict() | {"steps": steps}
    (path / "config.json").write_text(json.dumps(cfg))
    if checkpointed is not None:
        ck = path / "checkpoints" / f"step_{checkpointed:06d}"
        ck.mkdir(parents=True)
        (ck / "trainer.pt").write_bytes(b"")
        SampleBuffer(path / "buffer.sqlite").close()
    return path


def _cli(module: str, *args: str) -> subprocess.CompletedProcess:
    return run_module(module, args, {"HF_HUB_OFFLINE": "1"}, timeout=600)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --- the lock -------------------------------------------------------------------------------------


def test_a_second_process_is_refused_naming_the_holder(tmp_path):
    folder = _run_folder(tmp_path / "run")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from rpg_llm.loop.runfolder import RunFolder\n"
            f"RunFolder({str(folder)!r}).lock(); print('locked', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderBusy, match=f"is in use by pid {holder.pid} on "):
            RunFolder(folder).lock()
        line = _one_error_line(_cli("rpg_llm.run", "--resume", str(folder)))
        assert f"run folder {folder} is in use by pid {holder.pid}" in line
    finally:
        holder.kill()  # positive pid: only the process this test started
        holder.wait()
    # the kernel dropped the lock with the holder (it was SIGKILLed): a new process may take it
    lock = RunFolder(folder).lock()
    assert f"pid {os.getpid()} on " in (folder / ".lock").read_text()
    lock.release()
    with RunFolder(folder).lock():  # and again after a release
        pass


def test_train_refuses_a_locked_folder_before_loading(tmp_path):
    from rpg_llm.loop import train

    folder = _run_folder(tmp_path / "run")
    with RunFolder(folder).lock(), pytest.raises(RunFolderBusy):
        train(LoopConfig(), folder, resume=True)


# --- the buffer stores a sample once --------------------------------------------------------------


def test_the_buffer_refuses_a_second_sample_for_the_same_step_and_row(tmp_path):
    buf = SampleBuffer(tmp_path / "buffer.sqlite")
    buf.add_many([toy_sample(0), toy_sample(1)])
    with pytest.raises(ValueError, match="already holds run 'r' step 0 row 1"):
        buf.add_many([toy_sample(2), toy_sample(1, reward=9.0)])  # row 2 is new, row 1 is not
    assert [s.row for s in buf.all()] == [0, 1]  # nothing of the refused batch was stored
    buf.add(toy_sample(1, run="other"))  # another run may use the same step and row
    assert buf.count() == 3
    buf.close()


def test_a_buffer_that_already_holds_duplicates_is_refused_naming_it(tmp_path):
    path = tmp_path / "buffer.sqlite"
    SampleBuffer(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX samples_run_step_row_unique")
    columns = "run, step, row, task, prompt_hash, code, outcome_text, raw_reward, exec_time, "
    columns += "status, created_at"
    for _ in range(2):
        db.execute(
            f"INSERT INTO samples ({columns}) VALUES ('r', 4, 0, 't', 'h', 'c', 'o', 0, 1, 'ok', 0)"
        )
    db.commit()
    db.close()
    with pytest.raises(ValueError, match=f"{path} holds two samples with the same"):
        SampleBuffer(path)


# --- broken folders are refused before the model loads ----------------------------------------


def test_a_corrupted_buffer_is_refused_naming_the_file(tmp_path):
    folder = _run_folder(tmp_path / "run", checkpointed=1)
    (folder / "buffer.sqlite").write_bytes(b"\xff\xfe not a database" * 100)
    with pytest.raises(ValueError, match=f"{folder / 'buffer.sqlite'} is not a usable"):
        SampleBuffer(folder / "buffer.sqlite")
    line = _one_error_line(_cli("rpg_llm.run", "--resume", str(folder)))
    assert f"{folder / 'buffer.sqlite'} is not a readable sample buffer" in line


@pytest.mark.parametrize("name", ["a?b", "a#b", "a%3Fb", "a b", "x?mode=rwc#"])
def test_a_buffer_in_a_folder_with_uri_characters_is_read(tmp_path, name):
    folder = _run_folder(tmp_path / name / "run", checkpointed=1)
    RunFolder(folder).check_resumable()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no stray database made
    (folder / "buffer.sqlite").write_bytes(b"\xff\xfe not a database" * 100)
    with pytest.raises(ValueError, match="is not a readable sample buffer"):
        RunFolder(folder).check_resumable()


def test_an_empty_buffer_of_a_checkpointed_run_is_refused(tmp_path):
    folder = _run_folder(tmp_path / "run", checkpointed=2)
    (folder / "buffer.sqlite").write_bytes(b"")
    line = _one_error_line(_cli("rpg_llm.run", "--resume", str(folder)))
    assert f"{folder / 'buffer.sqlite'} is empty (0 bytes) but step 2 was checkpointed" in line


@pytest.mark.parametrize(
    ("content", "message"),
    [("[]", "must hold a JSON object of settings, not a list"), ("{", "is not valid JSON")],
)
def test_a_config_that_is_not_an_object_is_refused_naming_it(tmp_path, content, message):
    folder = _run_folder(tmp_path / "run")
    (folder / "config.json").write_text(content)
    line = _one_error_line(_cli("rpg_llm.run", "--resume", str(folder)))
    assert f"{folder / 'config.json'}" in line and message in line


def test_resuming_a_finished_run_says_why_nothing_runs(tmp_path):
    folder = _run_folder(tmp_path / "run", steps=3, checkpointed=3)
    line = _one_error_line(_cli("rpg_llm.run", "--resume", str(folder), "--steps", "2"))
    assert "--steps 2: the run in" in line and "already has 3 checkpointed steps" in line
    done = _cli("rpg_llm.run", "--resume", str(folder))
    assert done.returncode == 0, done.stderr
    assert "nothing to run: the run has finished its 3 steps" in done.stdout


# --- timeouts and scripts -------------------------------------------------------------------------


def test_an_absurd_timeout_is_a_usage_error(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    for module, args in (
        ("rpg_llm.env.execute", [str(script), "--task", "toy"]),
        ("rpg_llm.run", ["--out", str(tmp_path / "out")]),
    ):
        line = _one_error_line(_cli(module, *args, "--timeout", "1e9"))
        assert "--timeout" in line and "86400" in line, line
    assert not (tmp_path / "out").exists()


def test_a_script_that_is_not_utf8_is_a_usage_error_naming_it(tmp_path):
    script = tmp_path / "latin1.py"
    script.write_bytes("print('caf\u00e9')\n".encode("latin-1"))
    line = _one_error_line(_cli("rpg_llm.env.execute", str(script), "--task", "toy"))
    assert f"script {str(script)!r} is not UTF-8 text" in line


# --- working folders of ended processes -----------------------------------------------------------


def test_working_folders_of_ended_processes_are_removed(tmp_path):
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(ended.stdout)
    stale = tmp_path / f"run-{dead_pid}-abc123"
    (stale / "tmp").mkdir(parents=True)
    (stale / "solution.py").write_text("x")
    os.chmod(stale / "tmp", 0o500)  # parts a sandbox left read-only
    mine = new_workdir(tmp_path, "print(1)\n", None)
    other = tmp_path / "keep-me"
    other.mkdir()
    assert mine.name.startswith(f"run-{os.getpid()}-")
    assert remove_stale_workdirs(tmp_path) == [stale]
    assert not stale.exists() and mine.exists() and other.exists()


def test_a_starting_run_removes_working_folders_a_killed_run_left(tmp_path, tiny_model_dir):
    from rpg_llm.env.sandbox.workdir import workdir_root
    from rpg_llm.loop import Trainer
    from testkit.tiny_trainer import bbc_backends, tiny_edit_config

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    stale = workdir_root(None) / f"run-{ended.pid}-leftover"
    (stale / "tmp").mkdir(parents=True)
    cfg = tiny_edit_config(tiny_model_dir, sft_steps=0)
    trainer = Trainer(cfg, tmp_path / "run", backends=bbc_backends(["nb_tfidf"]), progress=False)
    try:
        assert not stale.exists()
    finally:
        trainer.close()
