"""The nanogpt-speedrun set-up checks and budget curves of val loss."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from rpg_llm.env.tasks.nanogpt.speedrun import (
    SHARD_MAGIC,
    budget_curve,
    check_speedrun_setup,
    loss_chains,
)


def _shard(path, n_tokens, magic=SHARD_MAGIC, extra=0):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [magic, 1, n_tokens]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.arange(n_tokens + extra, dtype=np.uint16).tobytes())


@pytest.fixture
def setup(tmp_path):
    sdir = tmp_path / "modded-nanogpt"
    sdir.mkdir()
    (sdir / "train_gpt.py").write_text("print('hi')\n")
    data = tmp_path / "fw"
    _shard(data / "data" / "fineweb10B" / "fineweb_train_000001.bin", 100)
    _shard(data / "data" / "fineweb10B" / "fineweb_val_000000.bin", 50)
    return sdir, data


def test_a_good_setup_passes_and_gpus_are_counted(setup):
    sdir, data = setup
    check_speedrun_setup(sdir, data, 8, gpus=8)  # checkout-style root
    check_speedrun_setup(sdir, data / "data" / "fineweb10B", 8, gpus=8)  # the shard folder
    with pytest.raises(ValueError, match="nproc 8 needs 8 CUDA GPU"):
        check_speedrun_setup(sdir, data, 8, gpus=1)


def test_each_bad_value_is_named(setup, tmp_path):
    sdir, data = setup
    with pytest.raises(ValueError, match="--speedrun-dir .*nope.* is not a folder"):
        check_speedrun_setup(tmp_path / "nope", data, 8, gpus=8)
    (sdir / "train_gpt.py").unlink()
    with pytest.raises(ValueError, match="holds no train_gpt.py"):
        check_speedrun_setup(sdir, data, 8, gpus=8)
    (sdir / "train_gpt.py").write_text("")
    with pytest.raises(ValueError, match="--data-root .* holds no FineWeb shards"):
        check_speedrun_setup(sdir, tmp_path, 8, gpus=8)
    with pytest.raises(ValueError, match="nproc must be"):
        check_speedrun_setup(sdir, data, 0, gpus=8)


def test_bad_shards_are_refused(setup):
    sdir, data = setup
    val = data / "data" / "fineweb10B" / "fineweb_val_000000.bin"
    _shard(val, 50, magic=123)
    with pytest.raises(ValueError, match="no speedrun header"):
        check_speedrun_setup(sdir, data, 8, gpus=8)
    _shard(val, 50, extra=-10)
    with pytest.raises(ValueError, match="truncated: header says 50 tokens, file has 40"):
        check_speedrun_setup(sdir, data, 8, gpus=8)


def test_budget_curve_hand_computed():
    times, best = budget_curve(
        [100, 1500, 200, 300], [3.40, None, 3.27, 3.30], [True, False, True, True]
    )
    assert times.tolist() == [100, 1600, 1800, 2100]
    assert best.tolist() == [3.40, 3.40, 3.27, 3.27]
    _, crossing = budget_curve(
        [100, 1500, 200, 300], [3.40, None, 3.27, 3.30], [True, False, True, True], target=3.28
    )
    assert math.isnan(crossing[0]) and math.isnan(crossing[1])
    assert crossing[2:].tolist() == [3.27, 3.27]


def test_loss_chains_group_rows_and_skip_seeds():
    S = SimpleNamespace
    samples = [
        S(row=0, step=0, exec_time=50.0, score=3.3, status="ok"),  # seed: not in a chain
        S(row=1, step=2, exec_time=20.0, score=3.1, status="ok"),
        S(row=0, step=1, exec_time=10.0, score=3.5, status="ok"),
        S(row=1, step=1, exec_time=30.0, score=None, status="invalid"),
    ]
    chains = loss_chains(samples)
    assert chains[0][0].tolist() == [10.0] and chains[0][1].tolist() == [3.5]
    assert chains[1][0].tolist() == [30.0, 50.0]
    assert math.isnan(chains[1][1][0]) and chains[1][1][1] == 3.1


def test_budget_curve_rejects_bad_input():
    with pytest.raises(ValueError, match="differ in length"):
        budget_curve([1.0], [], [])
    with pytest.raises(ValueError, match="deltas must be finite"):
        budget_curve([-1.0], [3.0], [True])


FAKE_RECORD = """import os, sys
import kernels
code = open(sys.argv[0]).read()
print(code)
print("=" * 100)
assert os.path.isdir(os.path.join(os.environ["DATA_PATH"], "data", "fineweb10B"))
# the format string as records hold it, with placeholders:
FMT = "step:{step}/{train_steps} val_loss:{val_loss:.4f} train_time:{t:.0f}ms step_avg:{a:.2f}ms"
print("step:0/250 val_loss:10.8258 train_time:0ms step_avg:nanms")
print("step:1/250 train_time:300ms step_avg:300.00ms")
print("step:125/250 val_loss:3.9000 train_time:37500ms step_avg:300.00ms ema_beta:0.9900")
print("step:250/250 val_loss:3.2700 train_time:75.000s step_avg:300.00ms ema_beta:0.9950")
"""


def test_speedrun_task_runs_a_record_style_script(setup, tmp_path):
    from rpg_llm.env.tasks.nanogpt import run_attempt
    from rpg_llm.env.tasks.nanogpt.speedrun import load_speedrun_task

    sdir, data = setup
    (sdir / "kernels.py").write_text("X = 1\n")
    (sdir / "train_gpt.py").write_text(FAKE_RECORD)
    # the shard folder itself as --data-root: DATA_PATH becomes a link farm
    task = load_speedrun_task(
        sdir, data / "data" / "fineweb10B", nproc=1, gpus=1, cache_dir=tmp_path / "c"
    )
    assert task.guarded == ("kernels.py",)
    o = run_attempt(FAKE_RECORD, task, "bwrap")  # the setting forces subprocess (GPUs)
    assert o.status == "ok", o.outcome_text
    assert o.score == pytest.approx(3.27)  # min over val lines, the logged one (no checkpoint)
    assert o.raw_reward == pytest.approx(6.73 + 5 + 100 * 0.01)
    assert o.vanilla_reward == pytest.approx(-o.delta + 20000 * 0.01)


def test_calibrate_cli_usage_errors_exit_2_with_one_line(capsys, tmp_path):
    from rpg_core.cli import run_cli
    from rpg_llm.env.tasks.nanogpt.calibrate import PROG, _main

    assert run_cli(PROG, _main, ["--seeds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seeds must be >= 1, got 0" in err[0]
    assert run_cli(PROG, _main, ["--out", str(tmp_path / "no" / "t.json")]) == 2
    assert "--out folder" in capsys.readouterr().err
