"""Errors name the cause and the file; what a resume reads is rebuilt from what is durable.

Found by attacking run folders (kill -9, full disks, damaged and removed files):

* a damaged checkpoint said ``UnpicklingError: invalid load key`` in ``--resume`` and the probe,
  naming no file;
* the probe compared the base model labelled "sft" when ``sft_weights.safetensors`` was gone
  although ``sft.json`` said the SFT ran;
* ``--resume`` left a missing ``samples.csv`` missing (7 rows against 11 in the buffer);
* a full disk said ``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos``
  (no ENOSPC, no path).
"""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import fixtures_llm
import pytest

from rpg_llm import probe as probe_mod
from rpg_llm.run import main
from testkit.tiny_run import run_module, tiny_run_args

tiny_model_dir = fixtures_llm.tiny_model_dir


@pytest.fixture(scope="module")
def sft_run(tiny_model_dir, tmp_path_factory) -> Path:
    """A finished one-step tiny run: seeded buffer, edit answers, a 2-step SFT warm start, two
    checkpoints kept."""
    run = tmp_path_factory.mktemp("made") / "run"
    extra = ["--sft-steps", "2", "--keep-checkpoints", "2"]
    done = run_module("rpg_llm.run", tiny_run_args(tiny_model_dir, run, extra=extra))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "sft.json").exists() and (run / "sft_weights.safetensors").exists()
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _csv_rows(run: Path) -> list[dict[str, str]]:
    with open(run / "samples.csv", newline="") as fh:
        return list(csv.DictReader(fh))


# -- the probe never mislabels -------------------------------------------------------------


@pytest.mark.slow
def test_the_probe_refuses_a_run_whose_sft_weights_are_missing_or_others(sft_run, tmp_path, capsys):
    run = _copy(sft_run, tmp_path)
    weights = run / "sft_weights.safetensors"
    kept = weights.read_bytes()
    weights.unlink()
    assert probe_mod.main([str(run), "--answers", "1", "--parents", "1"]) == 2
    err = _one_line(capsys)
    assert f"{run / 'sft.json'} records an SFT warm start but {weights} is missing" in err
    assert not (run / "probe").exists()  # nothing probed, nothing written
    # the file back, but one of its weights changed: the SHA-256 in sft.json tells
    weights.write_bytes(kept[:-4] + bytes(b ^ 0x55 for b in kept[-4:]))
    assert probe_mod.main([str(run), "--answers", "1", "--parents", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the weights' loading bar
    assert err.startswith("python -m rpg_llm.probe: error: ")
    assert f"{weights} holds other weights than {run / 'sft.json'} records" in err
    assert not (run / "probe").exists()


# -- a damaged checkpoint is named, with what to do ----------------------------------------------


@pytest.mark.slow
def test_a_damaged_checkpoint_is_named_by_resume_and_probe_with_what_to_do(
    sft_run, tmp_path, capsys
):
    run = _copy(sft_run, tmp_path)
    ckpt = run / "checkpoints" / "step_000001" / "trainer.pt"
    ckpt.write_bytes(b"xx" + ckpt.read_bytes()[2:1000])  # overwritten and cut short
    assert main(["--resume", str(run), "--steps", "2", "--no-progress", "--no-plot"]) == 2
    err = _one_line(capsys)
    assert f"checkpoint {ckpt} cannot be read (BadZipFile: " in err
    assert "no earlier checkpoint" in err and "start a new run" in err  # step 1 is the first
    assert probe_mod.main([str(run), "--answers", "1", "--parents", "1"]) == 2
    err = _one_line(capsys)
    assert f"checkpoint {ckpt} cannot be read (BadZipFile: " in err
    assert not (run / "probe").exists()


@pytest.mark.slow
def test_a_damaged_last_checkpoint_resumes_from_the_one_before_it(sft_run, tmp_path, capsys):
    """Two checkpoints kept: the message says to move the damaged one aside; done so, the
    resume continues from step 1's and replays step 2 from the run folder (its rollout is kept
    while a checkpoint before it is), losing and duplicating nothing."""
    run = _copy(sft_run, tmp_path)
    assert main(["--resume", str(run), "--steps", "2", "--no-progress", "--no-plot"]) == 0
    rows = _csv_rows(run)
    assert (run / "rollouts" / "step_000002.pt").exists()  # kept: step 1's checkpoint is kept
    ckpt = run / "checkpoints" / "step_000002"
    (ckpt / "trainer.pt").write_bytes(b"\0" * 100)
    capsys.readouterr()
    assert main(["--resume", str(run), "--steps", "3", "--no-progress", "--no-plot"]) == 2
    err = _one_line(capsys)
    aside = f"mv {ckpt} {ckpt}.damaged"
    assert f"move it aside ({aside}) and resume again" in err
    assert "continues from step 1's checkpoint and replays steps 2..2" in err
    subprocess.run(aside.split(), check=True)
    assert main(["--resume", str(run), "--steps", "3", "--no-progress", "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "step 2/3:" in out and "(replayed)" in out and "step 3/3:" in out
    after = _csv_rows(run)
    assert after[: len(rows)] == rows and len(after) == len(rows) + 2  # step 3's two rows
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s for s in steps if s > 0] == [1, 2, 3]


# -- samples.csv is rebuilt from the buffer --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["missing", "short"])
def test_resume_rebuilds_a_missing_or_short_samples_csv_from_the_buffer(
    sft_run, tmp_path, capsys, damage
):
    run = _copy(sft_run, tmp_path)
    rows = _csv_rows(run)
    assert [r["step"] for r in rows] == ["0"] * 5 + ["1", "1"]  # five seeds, step 1's two
    if damage == "missing":
        (run / "samples.csv").unlink()
        shutil.rmtree(run / "scripts")
    else:  # a file cut after its fourth row
        text = (run / "samples.csv").read_text().splitlines(keepends=True)
        (run / "samples.csv").write_text("".join(text[:5]))
    assert main(["--resume", str(run), "--steps", "2", "--no-progress", "--no-plot"]) == 0
    after = _csv_rows(run)
    rows = [r | {"tokens": ""} if r["step"] == "1" else r for r in rows]  # only in the lost rows
    assert after[:7] == rows  # every column as the run wrote it: the replay's rewards
    assert [r["step"] for r in after[7:]] == ["2", "2"]
    for r in after:
        assert (run / r["script"]).is_file()


# -- a full disk is named ----------------------------------------------------------------------


def _inject_enospc(monkeypatch, after_bytes: int = 1000):
    """The next checkpoint write fails with ENOSPC after ``after_bytes`` bytes, as a full disk
    does (torch reports it as a RuntimeError)."""
    from rpg_core import diskfull

    real, left = diskfull.RecordingWriter.write, [after_bytes]

    def write(self, data):
        if not str(getattr(self.fh, "name", "")).endswith("trainer.pt"):
            return real(self, data)
        left[0] -= len(data)
        if left[0] < 0:
            self.error = OSError(errno.ENOSPC, "No space left on device")
            raise self.error
        return real(self, data)

    monkeypatch.setattr(diskfull.RecordingWriter, "write", write)


@pytest.mark.slow
def test_a_full_disk_names_enospc_and_the_file_and_the_resume_recovers(
    sft_run, tmp_path, capsys, monkeypatch
):
    run = _copy(sft_run, tmp_path)
    _inject_enospc(monkeypatch)
    assert main(["--resume", str(run), "--steps", "2", "--no-progress", "--no-plot"]) == 1
    err = _one_line(capsys)
    tmp = run / "checkpoints" / "step_000002.tmp" / "trainer.pt"
    assert err.startswith(
        f"python -m rpg_llm.run: DiskFull: no space left on device (ENOSPC) while writing {tmp}; "
    )
    assert f"then continue with python -m rpg_llm.run --resume {run}" in err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000001"]
    monkeypatch.undo()  # space again
    assert main(["--resume", str(run), "--steps", "2", "--no-progress", "--no-plot"]) == 0
    assert "step 2/2:" in capsys.readouterr().out
    assert (run / "checkpoints" / "step_000002" / "trainer.pt").exists()
    assert [r["step"] for r in _csv_rows(run)] == ["0"] * 5 + ["1", "1", "2", "2"]


def _mount_tmpfs(path: Path, size: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    return subprocess.run(cmd, capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_checkpoint_on_a_full_tmpfs_is_named_and_leaves_nothing_half_written(
    sft_run, tmp_path, capsys
):
    """The real thing: the run's checkpoints on a small tmpfs that holds step 1's checkpoint
    and not a second one."""
    run = _copy(sft_run, tmp_path)
    ckpts = run / "checkpoints"
    size = sum(p.stat().st_size for p in ckpts.rglob("*") if p.is_file())
    held = tmp_path / "held"
    shutil.move(ckpts, held)
    if not _mount_tmpfs(ckpts, size + size // 2 + 65536):
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    try:
        shutil.copytree(held / "step_000001", ckpts / "step_000001")
        assert main(["--resume", str(run), "--steps", "2", "--no-progress", "--no-plot"]) == 1
        err = _one_line(capsys)
        tmp = ckpts / "step_000002.tmp" / "trainer.pt"
        assert f"DiskFull: no space left on device (ENOSPC) while writing {tmp}; " in err
        assert sorted(p.name for p in ckpts.iterdir()) == ["step_000001"]  # no half file
        subprocess.run(["mount", "-o", f"remount,size={4 * size + 65536}", str(ckpts)], check=True)
        assert main(["--resume", str(run), "--steps", "2", "--no-progress", "--no-plot"]) == 0
        assert (ckpts / "step_000002" / "trainer.pt").exists()
    finally:
        subprocess.run(["umount", "-l", str(ckpts)], capture_output=True)


def test_appends_that_hit_a_full_disk_leave_no_half_line(tmp_path, monkeypatch):
    """metrics.jsonl and samples.csv: a failed append is cut off again (a resume then appends
    to whole lines), named as ENOSPC with the file."""
    from rpg_core.diskfull import DiskFull
    from rpg_llm.loop import runfolder
    from rpg_llm.loop.runfolder import RunFolder

    folder = RunFolder(tmp_path / "r")
    folder.root.mkdir()
    folder.append_metrics({"step": 1})
    before = folder.metrics_path.read_bytes()
    real_fsync = os.fsync

    def full(fd):  # the data is written, then the disk says it is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runfolder.os, "fsync", full)
    with pytest.raises(DiskFull, match=f"ENOSPC\\) while writing {folder.metrics_path}$"):
        folder.append_metrics({"step": 2, "x": "y" * 100})
    assert folder.metrics_path.read_bytes() == before
    with pytest.raises(DiskFull, match="samples.csv"):
        folder.append_samples_csv([{"step": 1, "row": 0, "script": "s.py"}])
    assert folder.samples_csv_path.read_bytes() == b""
    monkeypatch.setattr(runfolder.os, "fsync", real_fsync)
    folder.append_metrics({"step": 2})
    assert [m["step"] for m in folder.read_metrics()] == [1, 2]


# -- the printed plot command survives the shell -------------------------------------------------


@pytest.mark.slow
def test_the_printed_plot_command_runs_in_a_shell_for_a_folder_with_spaces_hash_and_dollar(
    sft_run, tmp_path, capsys
):
    from rpg_llm.run import _report

    run = tmp_path / "my runs #1 $HOME" / "run 'a'"
    shutil.copytree(sft_run, run)
    _report([], 0.0, run, True, "rpg")
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("plot it: ")][0]
    command = line.removeprefix("plot it: ")
    assert command.split(" ", 3)[:3] == ["python", "-m", "paper_figures.budget_curves"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "figures" / "budget_curves.csv").exists()
    assert str(run) in done.stdout  # it read this folder, not a word of its name
