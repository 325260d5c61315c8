"""The NanoGPT task wired into ``python -m rpg_llm.run``: presets, the
speedrun's set-up checks, task dispatch, the task's own rewards in the accounting stage, budget
curves of a NanoGPT run folder, and a 1-step ``--preset nanogpt-cpu`` run with the tiny policy."""

from __future__ import annotations

import csv
import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fixtures_llm
import numpy as np
import pytest
import torch

from rpg_llm.config import LoopConfig, RewardConfig
from rpg_llm.env import registry
from rpg_llm.env.actions import editable_constants
from rpg_llm.env.tasks import nanogpt
from rpg_llm.env.tasks.nanogpt.speedrun import SHARD_MAGIC
from rpg_llm.env.types import Task
from rpg_llm.loop import backends as loop_backends
from rpg_llm.loop import budget
from rpg_llm.loop.accounting import Accounts, RateTracker
from rpg_llm.loop.buffer import Sample
from rpg_llm.presets import get_preset
from rpg_llm.run import main as run_main
from testkit import REPO_ROOT
from testkit.samples import toy_sample

tiny_model_dir = fixtures_llm.tiny_model_dir

REPO = REPO_ROOT


# -- presets ------------------------------------------------------------------------------


def test_nanogpt_cpu_preset_uses_the_tasks_timeout():
    cfg = get_preset("nanogpt-cpu").config
    settings = nanogpt.cpu_settings()
    assert cfg.task == "nanogpt-cpu" and cfg.task in nanogpt.TASK_IDS
    assert cfg.timeout_s == settings.timeout_s == 300.0
    assert cfg.workers == 1 and cfg.seed_buffer is True and cfg.method == "rpg"
    # the CPU default's model, answer format, warm start, prompt sizes and PPO settings
    cpu = get_preset("cpu-default").config
    for name in ("model", "action", "sft_steps", "describe", "sampling", "ppo", "batch_size"):
        assert getattr(cfg, name) == getattr(cpu, name), name
    # the edit format has something to edit in the stand-in's baseline
    constants = editable_constants(nanogpt.baseline_solutions("nanogpt-cpu")[0][1])
    assert {"N_LAYER", "N_HEAD", "D_MODEL", "BATCH", "NUM_STEPS", "WARMUP", "LR"} <= set(constants)
    assert (constants["NUM_STEPS"].value, constants["LR"].value) == (250, 3e-3)


def test_nanogpt_speedrun_preset_settings():
    p = get_preset("nanogpt-speedrun")
    cfg = p.config
    assert cfg.task == registry.SPEEDRUN_ID
    assert cfg.timeout_s == nanogpt.SPEEDRUN.timeout_s == 1500.0
    assert cfg.batch_size == 64 and cfg.ppo.ppo_epochs == 2 and cfg.sandbox == "subprocess"
    assert p.gpus == registry.SPEEDRUN_GPUS == 8


# -- the speedrun's set-up checks: exit 2 naming the flag, before any model, no folder --------


def _shard(path: Path, n_tokens: int) -> None:
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [SHARD_MAGIC, 1, n_tokens]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.arange(n_tokens, dtype=np.uint16).tobytes())


@pytest.fixture
def speedrun(tmp_path):
    sdir = tmp_path / "modded-nanogpt"
    sdir.mkdir()
    (sdir / "train_gpt.py").write_text("print('record')\n")
    data = tmp_path / "fw"
    _shard(data / "data" / "fineweb10B" / "fineweb_train_000001.bin", 100)
    _shard(data / "data" / "fineweb10B" / "fineweb_val_000000.bin", 50)
    return sdir, data


def _speedrun_error(capsys, tmp_path, extra: list[str], monkeypatch) -> str:
    # a model that cannot be resolved offline: the set-up check must come first
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RPG_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.delenv("RPG_NANOGPT_DATA", raising=False)
    out = tmp_path / "run"
    argv = ["--preset", "nanogpt-speedrun", "--model", "no-org/no-model", "--out", str(out)]
    assert run_main(argv + extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m rpg_llm.run: error: "), err
    assert not out.exists()
    assert "no-org/no-model" not in err  # failed before the model was looked at
    return err


def test_speedrun_needs_the_speedrun_dir(tmp_path, capsys, monkeypatch, speedrun):
    _, data = speedrun
    err = _speedrun_error(capsys, tmp_path, ["--data-root", str(data)], monkeypatch)
    assert "--speedrun-dir DIR" in err


def test_speedrun_missing_dir(tmp_path, capsys, monkeypatch, speedrun):
    _, data = speedrun
    nope = tmp_path / "no-checkout"
    extra = ["--speedrun-dir", str(nope), "--data-root", str(data)]
    err = _speedrun_error(capsys, tmp_path, extra, monkeypatch)
    assert "--speedrun-dir" in err and str(nope) in err and "not a folder" in err


def test_speedrun_dir_without_train_gpt(tmp_path, capsys, monkeypatch, speedrun):
    sdir, data = speedrun
    (sdir / "train_gpt.py").unlink()
    extra = ["--speedrun-dir", str(sdir), "--data-root", str(data)]
    err = _speedrun_error(capsys, tmp_path, extra, monkeypatch)
    assert "--speedrun-dir" in err and "no train_gpt.py" in err


def test_speedrun_missing_shards(tmp_path, capsys, monkeypatch, speedrun):
    sdir, _ = speedrun
    empty = tmp_path / "empty"
    empty.mkdir()
    extra = ["--speedrun-dir", str(sdir), "--data-root", str(empty)]
    err = _speedrun_error(capsys, tmp_path, extra, monkeypatch)
    assert "--data-root" in err and str(empty) in err and "FineWeb shards" in err


def test_speedrun_missing_data_root_names_the_flag_and_env(tmp_path, capsys, monkeypatch, speedrun):
    sdir, _ = speedrun
    err = _speedrun_error(capsys, tmp_path, ["--speedrun-dir", str(sdir)], monkeypatch)
    assert "--data-root DIR" in err and "RPG_NANOGPT_DATA" in err


def test_speedrun_good_folders_then_the_gpus(tmp_path, capsys, monkeypatch, speedrun):
    if torch.cuda.device_count() >= 8:
        pytest.skip("this machine has the GPUs")
    sdir, data = speedrun
    extra = ["--speedrun-dir", str(sdir), "--data-root", str(data)]
    err = _speedrun_error(capsys, tmp_path, extra, monkeypatch)
    assert f"--task {registry.SPEEDRUN_ID}" in err
    assert f"needs 8 CUDA GPU(s), found {torch.cuda.device_count()}" in err


def test_speedrun_seeds_are_the_checkouts_script(speedrun):
    sdir, _ = speedrun
    cfg = LoopConfig(task="nanogpt-speedrun", speedrun_dir=str(sdir))
    assert loop_backends.seed_solutions(cfg)("nanogpt-speedrun") == [
        ("train_gpt", "print('record')\n")
    ]
    cpu = LoopConfig(task="nanogpt-cpu")
    assert loop_backends.seed_solutions(cpu)("nanogpt-cpu") == nanogpt.baseline_solutions(
        "nanogpt-cpu"
    )


# -- dispatch ------------------------------------------------------------------------------


def test_each_task_runs_its_own_batch(monkeypatch, tmp_path):
    from rpg_llm.env.tasks import Competition, runner
    from rpg_llm.env.tasks.nanogpt import env as nanogpt_env

    calls = []
    monkeypatch.setattr(nanogpt_env, "run_batch", lambda *a: calls.append("nanogpt") or ["n"])
    monkeypatch.setattr(runner, "run_batch", lambda *a: calls.append("execute") or ["e"])
    task = nanogpt.NanoGPTTask("nanogpt-cpu", "d", nanogpt.cpu_settings(), tmp_path, tmp_path)
    comp = Competition("c", tmp_path, tmp_path, tmp_path, "d", False, "m:f", None)
    assert isinstance(task, Task) and isinstance(comp, Task)
    assert loop_backends.default_backends().run_batch(["x"], task, None, 1.0, None) == ["n"]
    assert loop_backends.default_backends().run_batch(["x"], comp, None, 1.0, None) == ["e"]
    assert calls == ["nanogpt", "execute"]
    assert comp.own_rewards() is None and task.own_rewards() is not None


def test_speedrun_task_load_runs_the_setup_check(tmp_path, speedrun):
    sdir, _ = speedrun
    with pytest.raises(ValueError, match="FineWeb shards"):
        registry.make_task("nanogpt-speedrun", str(tmp_path), None, str(sdir))
    with pytest.raises(ValueError, match="--speedrun-dir"):
        registry.make_task("nanogpt-speedrun", str(tmp_path), None, None)


# -- the task's own rewards in the accounting stage ------------------------------------------


class _RecordingEstimator:
    """Estimator stand-in: records the slot sums it is refitted on; rho_hat a fixed 0.01/s."""

    def __init__(self):
        self.slot_rewards = []

    def init_state(self, dtype: torch.dtype = torch.float64, device: Any = None) -> Any:
        return SimpleNamespace(rho_hat=torch.tensor(0.0, dtype=dtype))

    def refit(
        self,
        state: Any,
        slot_rewards: Any,
        slot_times: Any,
        generator: torch.Generator,
        num_batches: int = 1000,
    ) -> Any:
        self.slot_rewards.append(slot_rewards.clone())
        return SimpleNamespace(rho_hat=torch.tensor(0.01, dtype=torch.float64))


TARGET = 2.5


def _nanogpt_samples() -> list[Sample]:
    # (score L, status, delta): below target, above target, invalid
    spec = [(2.4, "ok", 100.0), (3.0, "ok", 120.0), (None, "error", 5.0)]
    return [
        toy_sample(i, nanogpt.rpg_reward(L, st == "ok", TARGET), d, row=i, score=L, status=st)
        for i, (L, st, d) in enumerate(spec)
    ]


@pytest.mark.parametrize("method", ["rpg", "vanilla"])
def test_nanogpt_rewards_in_the_accounting_stage(method):
    est = _RecordingEstimator()
    cfg = RewardConfig(method=method, timeout_s=300.0)
    task = nanogpt.NanoGPTTask(
        "nanogpt-cpu", "d", nanogpt.cpu_settings(target_loss=TARGET), Path("."), Path(".")
    )
    acc = Accounts(RateTracker(est, 4, 0, 10), cfg, task.own_rewards())
    samples = _nanogpt_samples()
    sr = acc.account(1, samples)
    # the estimator's slots get max(0, 10 - L) (0 for invalid), not the task's raw reward
    assert est.slot_rewards[-1].tolist() == pytest.approx([10 - 2.4, 10 - 3.0, 0.0, 0.0])
    assert sr.bonuses.tolist() == [0.0, 0.0, 0.0]  # the task has its own +5
    if method == "vanilla":
        expected = [
            -100.0 + 20000 * 0.03,  # reached: -delta + 20000 min(L* - L, 0.03)
            -1500.0 - 20000 * 0.03,  # missed: -1500 - 20000 min(L - L*, 0.03)
            -3000.0,  # invalid passes through unchanged
        ]
        assert sr.rewards.tolist() == pytest.approx(expected)
    else:
        raw = [s.raw_reward for s in samples]
        assert raw == pytest.approx([10 - 2.4 + 5 + 100 * 0.03, 7.0, -10.0])
        charged = [100.0, 120.0, 300.0]  # an invalid sample is charged the whole timeout
        expected = [r - 0.01 * t for r, t in zip(raw, charged, strict=True)]
        assert sr.rewards.tolist() == pytest.approx(expected)


def test_generic_tasks_keep_the_generic_bonus():
    est = _RecordingEstimator()
    acc = Accounts(RateTracker(est, 2, 0, 10), RewardConfig(method="vanilla", timeout_s=60.0))
    s = toy_sample(0, 0.7, 1.0, row=0)
    sr = acc.account(1, [s])
    assert sr.bonuses.tolist() == [0.5] and sr.rewards.tolist() == pytest.approx([1.2])
    assert est.slot_rewards[-1].tolist() == pytest.approx([0.7, 0.0])


# -- budget curves of a NanoGPT run folder ------------------------------------------------------


def test_budget_curves_of_a_nanogpt_run_folder(tmp_path):
    from rpg_llm.loop.buffer import Sample, SampleBuffer
    from rpg_llm.loop.runfolder import RunFolder

    run = tmp_path / "run"
    RunFolder(run).create({"competition": "nanogpt-cpu", "method": "rpg", "seeded": True})
    # L* of the stand-in: only losses <= L* count (the best *crossing* loss)
    ls = nanogpt.cpu_settings().target_loss
    # row 0: above L*, invalid, below; row 1: below, lower still. Step 0 (the seed) is no chain's.
    spec = [(0, 0, ls - 0.2, "ok", 50.0)]
    spec += [
        (1, 0, ls + 0.5, "ok", 10.0),
        (2, 0, None, "error", 5.0),
        (3, 0, ls - 0.01, "ok", 20.0),
    ]
    spec += [(1, 1, ls - 0.02, "ok", 30.0), (2, 1, ls - 0.05, "ok", 40.0)]
    with SampleBuffer(RunFolder(run).buffer_path) as buf:
        buf.add_many(
            [
                Sample(
                    run="rpg-seed0",
                    step=st,
                    row=r,
                    task="nanogpt-cpu",
                    parent_id=None,
                    prompt_hash="h",
                    code="c",
                    outcome_text="t",
                    score=L,
                    raw_reward=nanogpt.rpg_reward(L, status == "ok", TARGET),
                    exec_time=d,
                    status=status,
                    created_at=0.0,
                )
                for st, r, L, status, d in spec
            ]
        )
    chains = budget.read_chains(run)
    assert [c.times.tolist() for c in chains] == [[10.0, 15.0, 35.0], [30.0, 70.0]]
    assert np.allclose(chains[0].best, [np.nan, np.nan, -(ls - 0.01)], equal_nan=True)
    assert np.allclose(chains[1].best, [-(ls - 0.02), -(ls - 0.05)])
    path = budget.write_budget_csv([run], tmp_path / "curve.csv", points=3)  # budgets 0, 35, 70
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["budget_s"]) for r in rows] == [0.0, 35.0, 70.0]
    assert rows[0]["mean_best"] == "nan"  # no chain has finished a sample
    # 35 s: row 0 crossed at 35 s (ls - 0.01), row 1 at 30 s (ls - 0.02); 70 s: row 1 ls - 0.05
    assert float(rows[1]["mean_best"]) == pytest.approx(-((ls - 0.01) + (ls - 0.02)) / 2, abs=1e-5)
    assert float(rows[2]["mean_best"]) == pytest.approx(-((ls - 0.01) + (ls - 0.05)) / 2, abs=1e-5)
    assert registry.loss_target("nanogpt-speedrun") == 3.28
    assert registry.is_loss_task("nanogpt-speedrun") and not registry.is_loss_task("text")


# -- a 1-step run of the preset with the tiny policy (acceptance) -------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "executor", ["local", pytest.param("ray", marks=[pytest.mark.slow, pytest.mark.cluster])]
)
def test_one_step_nanogpt_cpu_preset_run(tmp_path, tiny_model_dir, executor):
    """``--preset nanogpt-cpu`` (B = 2), 1 step: the SFT warm start of the edit format, then the
    seed is a real torchrun attempt of the task's baseline; the tiny policy's answers are
    scored whatever they are (an invalid one is charged the whole 300 s). ``ray``: every attempt
    is a Ray task on a local Ray instance holding the preset's ``grader`` resource (the
    speedrun's path, grader nodes stood in for)."""
    run = tmp_path / "run"
    args = ["--preset", "nanogpt-cpu", "--model", str(tiny_model_dir), "--steps", "1"]
    if executor == "ray":
        args += ["--executor", "ray", "--ray-address", "local"]
    args += ["--max-new-tokens", "8", "--max-prompt-tokens", "768", "--estimator-batches", "100"]
    args += ["--no-progress"]
    args += ["--data-root", str(tmp_path / "data"), "--out", str(run)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "rpg_llm.run", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["competition"] == "nanogpt-cpu" and config["reward"]["timeout_s"] == 300.0
    assert (config["executor"], config["job_resource"]) == (executor, "grader")
    con = sqlite3.connect(str(run / "buffer.sqlite"))
    rows = con.execute(
        "SELECT step, row, status, score, raw_reward, exec_time FROM samples ORDER BY id"
    ).fetchall()
    con.close()
    target = nanogpt.cpu_settings().target_loss
    seed = [r for r in rows if r[0] == 0]
    assert len(seed) == 1
    _, _, status, L, raw, delta = seed[0]
    assert status == "ok" and 0 < L < 3.5 and delta > 0
    assert raw == pytest.approx(nanogpt.rpg_reward(L, True, target))  # from the stored score
    step1 = [r for r in rows if r[0] == 1]
    assert [r[1] for r in step1] == [0, 1]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    # the preset's SFT warm start (the CPU default's edit format) logs one line per SFT step
    sft = [m for m in lines if "sft_step" in m]
    assert [m["sft_step"] for m in sft] == list(range(1, config["sft_steps"] + 1))
    assert config["action"] == "edit" and config["sft_steps"] > 0
    assert all(math.isfinite(m["sft/loss"]) and m["sft/loss"] > 0 for m in sft)
    metrics = [m for m in lines if "sft_step" not in m]
    assert [m["step"] for m in metrics] == [1]
    rho = metrics[0]["rho_hat"]
    with open(run / "samples.csv") as fh:
        relative = {
            int(r["row"]): float(r["relative_reward"])
            for r in csv.DictReader(fh)
            if r["step"] == "1"
        }
    # slot 0: the seed (10 - L over delta s) + row 0; slot 1: row 1. Two usable slots: rho > 0
    assert math.isfinite(rho) and rho > 0
    for _, row, status1, L1, raw1, delta1 in step1:
        ok1 = status1 == "ok"
        assert raw1 == pytest.approx(nanogpt.rpg_reward(L1, ok1, target))
        charged = max(delta1, 0.1) if ok1 else 300.0  # invalid: the whole timeout
        assert relative[row] == pytest.approx(raw1 - rho * charged, rel=1e-5, abs=1e-4)
    # the budget-curve data of a nanogpt run folder: minus the best crossing val loss (NaN: none)
    assert "budget curve data" in proc.stdout
    chains = budget.read_chains(run)
    assert len(chains) == 2
    for chain, (_, _, status1, L1, _, delta1) in zip(chains, step1, strict=True):
        assert chain.times.tolist() == pytest.approx([delta1])
        crossed = status1 == "ok" and L1 <= target
        assert np.allclose(chain.best, [-L1 if crossed else np.nan], equal_nan=True)
