"""The TRL engine end to end with the tiny model: training steps, resume after a kill, two
processes, the README example and the CLI's usage errors."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import fixtures_llm
import pytest

pytest.importorskip("trl")

from rpg_llm.config import TRLConfig  # noqa: E402
from rpg_llm.engines.trl import train_trl  # noqa: E402
from rpg_llm.loop.runfolder import RunFolder  # noqa: E402
from rpg_llm.run import main  # noqa: E402
from testkit import REPO_ROOT  # noqa: E402
from testkit.tiny_run import run_module, tiny_run_args  # noqa: E402
from testkit.tiny_trainer import tiny_edit_config  # noqa: E402

tiny_model_dir = fixtures_llm.tiny_model_dir

TRL_FLAGS = ("--engine", "trl", "--num-generations", "2", "--no-seed-buffer", "--action", "edit")


def _rows(run: Path) -> list[tuple[int, int, int, str]]:
    con = sqlite3.connect(str(run / "buffer.sqlite"))
    try:
        return con.execute("SELECT id, step, row, code FROM samples ORDER BY id").fetchall()
    finally:
        con.close()


def _cfg(model, **kw):
    base = tiny_edit_config(model, engine="trl", batch_size=4, trl=TRLConfig(num_generations=2))
    return replace(base, **kw)


@pytest.mark.slow
def test_two_steps_then_resume_after_a_lost_checkpoint(tiny_model_dir, tmp_path, monkeypatch):
    """Steps are generation rounds numbered from the buffer: losing TRL's checkpoint of step 2
    (a kill after step 2 was stored) keeps step 2's samples, and the resumed steps continue at
    3 with nothing stored twice."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = tmp_path / "run"
    records = train_trl(_cfg(tiny_model_dir, steps=2), run, progress=False)
    assert [r.step for r in records] == [1, 2]
    before = _rows(run)
    assert [(s, r) for _, s, r, _ in before] == [(k, i) for k in (1, 2) for i in range(4)]
    assert RunFolder(run).latest_trl_checkpoint() == 2
    import shutil

    shutil.rmtree(run / "trl" / "checkpoint-2")  # as if killed before the checkpoint of step 2
    records = train_trl(_cfg(tiny_model_dir, steps=3), run, resume=True, progress=False)
    assert [r.step for r in records] == [3, 4]  # TRL's global steps 2 and 3
    after = _rows(run)
    assert after[: len(before)] == before  # nothing lost or rewritten
    pairs = [(s, r) for _, s, r, _ in after]
    assert pairs == [(k, i) for k in (1, 2, 3, 4) for i in range(4)]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "sft/loss" not in m] == [1, 2, 3, 4]
    assert RunFolder(run).latest_trl_checkpoint() == 3
    # a finished run resumed again runs nothing
    assert train_trl(_cfg(tiny_model_dir, steps=3), run, resume=True, progress=False) == []


@pytest.mark.slow
def test_cli_killed_after_storing_resumes_without_loss(tiny_model_dir, tmp_path):
    """SIGKILL right after step 2's samples are stored; ``--resume`` finishes the run."""
    run = tmp_path / "run"
    args = tiny_run_args(tiny_model_dir, run, steps=3, batch_size=4, extra=TRL_FLAGS)
    out = run_module("rpg_llm.run", args, env_extra={"RPG_KILL_AT": "2:stored"})
    assert out.returncode == -9, out.stderr[-3000:]
    stored = _rows(run)
    assert sorted({s for _, s, _, _ in stored}) == [1, 2]
    out = run_module("rpg_llm.run", ["--resume", str(run), "--no-progress", "--no-plot"])
    assert out.returncode == 0, out.stderr[-3000:]
    after = _rows(run)
    assert after[: len(stored)] == stored
    pairs = [(s, r) for _, s, r, _ in after]
    assert len(pairs) == len(set(pairs))  # UNIQUE (run, step, row) and no replay
    # TRL resumed from its checkpoint of step 1: its steps 2 and 3 are our steps 3 and 4
    assert pairs == [(k, i) for k in (1, 2, 3, 4) for i in range(4)]
    assert "step 4/4" in out.stdout


@pytest.mark.slow
def test_two_processes_use_one_rho_and_store_each_sample_once(tiny_model_dir, tmp_path):
    """torchrun with 2 CPU processes (gloo): every process logs the same rho_hat each step, and
    the buffer holds each (step, row) once."""
    run = tmp_path / "run"
    extra = (*TRL_FLAGS, "--checkpoint-every", "1")
    args = ["--nproc_per_node", "2", "-m", "rpg_llm.run"]
    args += tiny_run_args(tiny_model_dir, run, steps=2, batch_size=4, extra=extra)
    out = run_module("torch.distributed.run", args, env_extra={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    pairs = [(s, r) for _, s, r, _ in _rows(run)]
    assert pairs == [(k, i) for k in (1, 2) for i in range(4)]
    pattern = re.compile(r"step (\d+): rho_hat (\S+) on process (\d)")
    seen: dict[int, dict[int, float]] = {}
    for name in ("run.log", "run.rank1.log"):
        for step, rho, rank in pattern.findall((run / "logs" / name).read_text()):
            seen.setdefault(int(rank), {})[int(step)] = float(rho)
    assert set(seen) == {0, 1}
    assert seen[0] == seen[1] and sorted(seen[0]) == [1, 2]
    assert out.stdout.count("run folder:") == 1


def _readme_example() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    match = re.search(r"<!-- trl-example -->\s*```python\n(.*?)```", text, re.S)
    assert match, "README lacks the TRL example block"
    return match.group(1)


@pytest.mark.slow
def test_readme_trl_example_runs_as_written(tiny_model_dir, tmp_path):
    """The README's "RPG in your own TRL script" code, unchanged, on the tiny model."""
    script = tmp_path / "example.py"
    script.write_text(_readme_example())
    env = {
        **os.environ,
        "MODEL": str(tiny_model_dir),
        "RUN_DIR": str(tmp_path / "run"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-3000:]
    pairs = [(s, r) for _, s, r, _ in _rows(tmp_path / "run")]
    assert [p for p in pairs if p[0] > 0] == [(k, i) for k in (1, 2) for i in range(4)]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--engine", "trl", "--batch-size", "4", "--num-generations", "3"),
         "--batch-size 4 must be a multiple of --num-generations 3"),
        (("--num-generations", "2",), "--num-generations applies to --engine trl only"),
        (("--beta", "0.1", "--loss-type", "grpo"),
         "--beta, --loss-type apply to --engine trl only"),
        (("--engine", "trl", "--num-generations", "1"), "--num-generations must be"),
        (("--engine", "trl", "--beta", "-1"), "--beta must be a finite number >= 0, got -1.0"),
    ],
)  # fmt: skip
def test_engine_flag_errors_exit_2_with_one_line(flags, message, tmp_path, capsys, monkeypatch):
    """Refused before the model is resolved (a cold model cache once converted the default
    model's GGUF, printing its progress, before the error)."""
    import rpg_llm.launch as launch

    calls: list[str] = []
    monkeypatch.setattr(launch, "resolve_model", lambda name, *a, **k: calls.append(name))
    out = tmp_path / "r"
    assert main([*flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists() and calls == []


def test_use_vllm_without_vllm_or_gpu_exits_2(tmp_path, capsys):
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        pytest.skip("this machine has vLLM and a GPU")
    argv = ["--engine", "trl", "--use-vllm", "--batch-size", "2", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--use-vllm needs" in err[0]
    assert not (tmp_path / "r").exists()
