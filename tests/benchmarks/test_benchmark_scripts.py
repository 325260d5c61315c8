"""The benchmark scripts: loop overhead arithmetic, the GPU PPO step and the engine comparison
checked on a CPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testkit import REPO_ROOT

ROOT = REPO_ROOT
sys.path.insert(0, str(ROOT / "benchmarks"))

from loop_overhead import main as overhead_main  # noqa: E402
from loop_overhead import overhead  # noqa: E402


def _m(step, total, gen, ex, ppo, replayed=False):
    return dict(
        step=step,
        step_seconds=total,
        gen_seconds=gen,
        exec_seconds=ex,
        ppo_seconds=ppo,
        replayed=replayed,
    )


def test_overhead_share_by_hand():
    metrics = [
        _m(1, 100.0, 40.0, 20.0, 36.0),
        _m(2, 50.0, 20.0, 10.0, 19.0),
        _m(3, 999.0, 0.0, 0.0, 1.0, replayed=True),
    ]
    o = overhead(metrics)
    assert o["steps"] == 2
    assert o["other_seconds"] == pytest.approx(5.0)
    assert o["overhead_fraction"] == pytest.approx(5.0 / 150.0)
    with pytest.raises(ValueError, match="no fresh steps"):
        overhead([_m(1, 1.0, 0.0, 0.0, 0.0, replayed=True)])


def test_overhead_cli_reads_a_run_folder(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(m) + "\n" for m in [_m(1, 10.0, 4.0, 3.0, 2.5)])
    )
    assert overhead_main([str(tmp_path)]) == 0
    assert "| 5.0 % |" in capsys.readouterr().out
    assert overhead_main([str(tmp_path / "nope")]) == 2


def test_seed_rates_rank_by_score_and_by_percentile_by_hand():
    """A chance-level AUC script (0.5 in 0.4 s) against a good one (0.9 in 2 s) on a board of
    four: by score the chance script has the higher rate (1.25 > 0.45 per s); by percentile
    (0 and 3.5 / 4 of the board) the good one does (0 < 0.4375 per s)."""
    import numpy as np
    from seed_rates import seed_rates

    def row(step, i, score, t):
        return {"step": str(step), "row": str(i), "score": score, "raw_reward": score or "-10",
                "time_s": str(t)}  # fmt: skip

    rows = [row(0, 0, "0.5", 0.4), row(0, 1, "0.9", 2.0), row(0, 2, "", 1.0), row(1, 0, "1", 1)]
    got = seed_rates(rows, np.array([0.6, 0.7, 0.8, 0.9]), lower_is_better=False)
    assert [r["row"] for r in got] == [0, 1]  # step 0, valid only
    assert [r["percentile"] for r in got] == [0.0, 0.875]
    assert got[0]["rate_raw"] == pytest.approx(1.25) and got[1]["rate_raw"] == pytest.approx(0.45)
    assert [r["rank_raw"] for r in got] == [1, 2]
    assert [r["rank_percentile"] for r in got] == [2, 1]
    with pytest.raises(ValueError, match="no valid step-0 sample"):
        seed_rates(rows[2:], np.array([0.5]), lower_is_better=False)


def test_seed_rates_use_designs_reward_and_the_runs_time_floor():
    """A percentile run stores raw rewards 0.01; the rates still use DESIGN.md's reward: the
    score (0.9 / 0.5 s floored at 1 s = 0.9 per s), or on a lower-is-better board [1, 2, 3, 4]
    the percentile of 2.5 (0.5; 0.5 / 2 s = 0.25 per s)."""
    import numpy as np
    from seed_rates import seed_rates

    rows = [{"step": "0", "row": "0", "score": "0.9", "raw_reward": "0.01", "time_s": "0.5"}]
    got = seed_rates(rows, np.array([0.6, 0.9]), lower_is_better=False, time_floor_s=1.0)
    assert got[0]["raw_reward"] == 0.9 and got[0]["rate_raw"] == pytest.approx(0.9)
    rows = [{"step": "0", "row": "0", "score": "2.5", "raw_reward": "0.01", "time_s": "2.0"}]
    got = seed_rates(rows, np.array([1.0, 2.0, 3.0, 4.0]), lower_is_better=True)
    assert got[0]["raw_reward"] == 0.5 and got[0]["rate_raw"] == pytest.approx(0.25)


def test_seed_rates_cli_reads_a_run_folder_and_refuses_others(tmp_path, capsys):
    from dataclasses import replace

    from seed_rates import main as seed_main

    from rpg_llm.config import LoopConfig
    from rpg_llm.loop.runfolder import RunFolder
    from testkit.toy_competition import ACCURACY, build_competition

    build_competition(tmp_path / "comps", "toy-board", ACCURACY, lower=False, board=[0.6, 0.9])
    cfg = replace(LoopConfig(), task="toy-board", data_root=str(tmp_path / "comps"))
    run = RunFolder(tmp_path / "run")
    run.create(cfg.to_dict())
    rows = [
        {"step": 0, "row": 0, "status": "ok", "score": 0.5, "raw_reward": 0.5, "time_s": 0.4,
         "script": "a.py"},
        {"step": 0, "row": 1, "status": "ok", "score": 0.9, "raw_reward": 0.9, "time_s": 2.0,
         "script": "b.py"},
    ]  # fmt: skip
    run.append_samples_csv(rows)
    assert seed_main([str(run.root)]) == 0
    out = capsys.readouterr().out
    assert "| 0 | 0.5 | 0.000 | 0.40 | 1.250 (1) | 0.000 (2) |" in out
    assert "| 1 | 0.9 | 0.750 | 2.00 | 0.450 (2) | 0.375 (1) |" in out
    assert "highest rate: row 0 by r, row 1 by percentile; best score: row 1" in out
    assert seed_main([str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err


def test_score_at_budget_reads_scores_not_the_stored_raw_reward(tmp_path, capsys):
    """A run trained on the percentile (its stored raw rewards are 0.01): chain 0 has 0.7 at
    1 s, an invalid script (-10) at 3 s, 0.8 at 4 s, so 0.7 at B = 3.5; chain 1's only sample
    ends at 4 s (no value); chain 2 is one invalid script (-10): (0.7 - 10) / 2 = -4.65.
    On a lower-is-better copy of the task, 2.5 beats half of the board [1, 2, 3, 4]. A run whose
    metrics stop before its steps is printed, marked unfinished, and left out of the mean."""
    from dataclasses import replace

    from score_at_budget import main as score_main

    from rpg_llm.config import LoopConfig
    from rpg_llm.loop.runfolder import RunFolder
    from testkit.toy_competition import ACCURACY, build_competition

    def run(name: str, task: str, scores: list, done: int = 3):
        cfg = replace(LoopConfig(), task=task, data_root=str(tmp_path / "comps"), steps=3)
        folder = RunFolder(tmp_path / name)
        folder.create(cfg.to_dict())
        folder.append_metrics({"step": done})
        folder.append_samples_csv(
            [
                {"step": s, "row": r, "status": "ok" if x != "" else "invalid", "score": x,
                 "raw_reward": 0.01, "time_s": t, "script": "a.py"}
                for s, r, x, t in scores
            ]
        )  # fmt: skip
        return folder.root

    build_competition(tmp_path / "comps", "toy-board", ACCURACY, lower=False, board=[0.6, 0.9])
    build_competition(tmp_path / "comps", "toy-loss", ACCURACY, lower=True, board=[1, 2, 3, 4])
    seed = (0, 0, 0.99, 0.1)  # step 0: never part of a chain
    hi = run("hi", "toy-board", [seed, (1, 0, 0.7, 1.0), (1, 1, 0.9, 4.0), (1, 2, "", 0.5),
                                 (2, 0, "", 2.0), (3, 0, 0.8, 1.0)])  # fmt: skip
    lo = run("lo", "toy-loss", [seed, (1, 0, 2.5, 1.0)])
    assert score_main(["--budget", "3.5", str(hi)]) == 0
    assert "-4.6500 (2 of 3 chains with a value at 3.5)" in capsys.readouterr().out
    assert score_main(["--budget", "3.5", str(lo), str(lo)]) == 0
    assert "mean 0.5000 +- 0.0000 over 2 of 2 finished runs" in capsys.readouterr().out
    assert score_main(["--budget", "0.5", str(lo), str(hi)]) == 0  # lo: no sample by 0.5 s
    assert "mean -10.0000 +- nan over 1 of 2 finished runs" in capsys.readouterr().out
    assert score_main(["--budget", "0.4", str(lo), str(hi)]) == 0
    assert "none of the 2 finished runs has a value at 0.4" in capsys.readouterr().out
    going = run("going", "toy-loss", [seed, (1, 0, 1.5, 1.0)], done=1)  # 0.75 so far
    assert score_main(["--budget", "3.5", str(lo), str(going)]) == 0
    out = capsys.readouterr().out
    assert f"{going}: 0.7500 (1 of 1 chains with a value at 3.5; unfinished, step 1 of 3" in out
    assert "mean 0.5000 +- nan over 1 of 1 finished runs" in out
    assert score_main(["--budget", "0", str(lo)]) == 2
    assert score_main(["--budget", "1", str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err


@pytest.mark.slow
def test_gpu_ppo_step_script_runs_tiny_on_cpu():
    script = ROOT / "benchmarks" / "gpu_ppo_step.py"
    args = [
        sys.executable,
        str(script),
        "--tiny",
        "--batch",
        "2",
        "--prompt-len",
        "8",
        "--response-len",
        "6",
        "--no-record",
        "--device",
        "cpu",
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    row = [line for line in out.stdout.splitlines() if "tiny qwen3_5_text" in line][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "2 x (8 + 6)"
    assert float(cells[5]) > 0 and float(cells[6]) > 0  # tokens/s and step seconds measured
    # without --tiny and without a GPU it refuses with exit 2
    import torch

    if not torch.cuda.is_available():
        no_gpu = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        assert no_gpu.returncode == 2 and "no CUDA GPU" in no_gpu.stderr


def _tiny_rows(script: Path, *flags: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run a timing script on the tiny model (answers of 6 tokens, nothing recorded); its
    output and the cells of its table rows."""
    args = [sys.executable, str(script), "--tiny", "--no-record", "--response-len", "6", *flags]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if "tiny qwen3_5_text" in line]
    return out, [[c.strip() for c in row.strip("|").split("|")] for row in rows]


@pytest.mark.slow
def test_engine_step_compares_both_engines_on_the_tiny_model():
    """Both engines' rows, on the same B x (prompt + answer), and the ratio line, which must be
    the ratio of the rows' own numbers."""
    pytest.importorskip("trl")
    script = ROOT / "benchmarks" / "engine_step.py"
    out, cells = _tiny_rows(script, "--steps", "1", "--prompt-len", "12", "--batch", "4")
    assert len(cells) == 2 and "ours" in " ".join(cells[0]) and "TRL" in " ".join(cells[1])
    assert cells[0][3] == cells[1][3] == "4 x (12 + 6)"
    ours_aps, trl_aps = float(cells[0][5]), float(cells[1][5])
    ours_step, trl_step = float(cells[0][8]), float(cells[1][8])
    ratio = [line for line in out.stdout.splitlines() if line.startswith("TRL / ours")][0]
    aps, step = (float(x) for x in re.findall(r"([\d.]+)x", ratio)[:2])
    assert aps == pytest.approx(trl_aps / ours_aps, rel=0.02)
    assert step == pytest.approx(trl_step / ours_step, rel=0.02)
    bad = subprocess.run(
        [sys.executable, str(script), "--tiny", "--batch", "3"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--batch 3 must be a multiple of --num-generations 2" in bad.stderr


def test_ppo_update_times_the_four_update_paths_on_the_tiny_model():
    """Four rows on the same batch; each ratio is its row's seconds over micro 1's."""
    script = ROOT / "benchmarks" / "ppo_update.py"
    _, cells = _tiny_rows(script, "--rounds", "1", "--prompt-len", "40", "--batch", "3")
    assert [c[1] for c in cells] == [
        "general, micro 1",
        "critic in rollout, micro 1",
        "general, micro B",
        "single pass",
    ]
    assert all(c[3] == "3 x (40 + 6)" for c in cells)
    seconds = [float(c[5]) for c in cells]
    for c, s in zip(cells, seconds, strict=True):
        assert float(c[6].rstrip("x")) == pytest.approx(s / seconds[0], rel=0.02, abs=2e-3)


def _one_error_line(err: str, prog: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("script", "argv", "needle"),
    [
        ("estimator_sampler", ["--impl", "nope"], "--impl 'nope' is unknown"),
        ("estimator_sampler", ["--seeds", "4", "0"], "--seeds must be >= 1, got 0"),
        ("estimator_sampler", ["--slots", "1"], "--slots must be >= 2, got 1"),
        ("estimator_sampler", ["--chunk", "-1"], "--chunk must be >= 1, got -1"),
        ("sandbox_overhead", ["--work", "inf"], "--work must be in (0, 60] CPU seconds"),
        ("sandbox_overhead", ["--work", "nan"], "got nan"),
        ("sandbox_overhead", ["--batch", "0"], "--batch must be >= 1, got 0"),
        ("gpu_ppo_step", ["--tiny", "--device", "nope"], "--device 'nope' is not a torch device"),
        ("gpu_ppo_step", ["--tiny", "--config", "x"], "--config x: the shape of --tiny is fixed"),
        ("gpu_ppo_step", ["--config", "/nonexistent"], "--config /nonexistent: no config.json"),
        ("engine_step", ["--tiny", "--steps", "0"], "--steps must be >= 1, got 0"),
        ("ppo_update", ["--tiny", "--rounds", "0"], "--rounds must be >= 1, got 0"),
        ("ppo_update", ["--tiny", "--prompt-len", "20"], "--prompt-len 20 is too short"),
        ("ppo_update", ["--model", "/no/such/model"], "--model /no/such/model: model folder"),
        ("engine_step", ["--model", "/no/such/model"], "--model /no/such/model: model folder"),
    ],
)
def test_bad_flags_exit_2_naming_the_value_before_running(script, argv, needle, capsys):
    import importlib

    module = importlib.import_module(script)
    assert module.main(argv) == 2
    assert needle in _one_error_line(capsys.readouterr().err, module.PROG)


def test_gpu_ppo_step_tiny_checks_the_script_and_records_no_row(tmp_path, monkeypatch, capsys):
    """Found by running ``--tiny`` to check the script: it appended its tiny row to
    ``benchmarks/RESULTS.md``. A tiny run records nothing, with or without ``--no-record``."""
    import importlib

    module = importlib.import_module("gpu_ppo_step")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    (tmp_path / "benchmarks").mkdir()
    argv = ["--tiny", "--batch", "1", "--prompt-len", "4", "--response-len", "2", "--device", "cpu"]
    assert module.main(argv) == 0
    assert "tiny qwen3_5_text" in capsys.readouterr().out
    assert not (tmp_path / "benchmarks" / "RESULTS.md").exists()


def test_every_key_impl_the_sampler_accepts_is_one_jax_has():
    import jax
    from estimator_sampler import KEY_IMPLS

    for impl in KEY_IMPLS:
        jax.random.key(0, impl=impl)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--env", "E9"], "--env E9 --arms 10 --contexts 4: unknown environment 'E9'"),
        (["--arms", "0"], "--arms 0 --contexts 4: K must be an int >= 1, got 0"),
        (["--contexts", "-1"], "--contexts -1: n_contexts must be an int >= 4, got -1"),
        ("draw-seeds", "must be a multiple of the"),
    ],
)
def test_bandit_throughput_refuses_bad_values_before_any_benchmark(argv, needle):
    devices = os.cpu_count() or 1  # the script exposes one JAX CPU device per core
    if argv == "draw-seeds":
        if devices == 1:
            pytest.skip("one device: every seed count shards")
        argv = ["--draw-seeds", str(devices + 1)]
    # a subprocess: the script configures JAX (device count, float64) when imported
    script = ROOT / "benchmarks" / "bandit_throughput.py"
    out = subprocess.run(
        [sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 2 and out.stdout == "", (out.stdout, out.stderr)
    assert needle in _one_error_line(out.stderr, "benchmarks/bandit_throughput.py")


def test_estimator_cost_times_each_estimator_against_niw(capsys):
    from estimator_cost import main as cost_main

    assert cost_main(["--seeds", "2", "--repeats", "1", "--slots", "4"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][2:]
    names = [r.split("|")[1].strip() for r in rows]
    ratios = [float(r.split("|")[3]) for r in rows]
    assert names == ["niw", "niw-mean", "robbins-monro", "learned"] and ratios[0] == 1.0
    assert all(r > 0 for r in ratios)
