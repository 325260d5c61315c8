"""paper_figures.learning_curves: per-step mean +- s.e. across run folders."""

from __future__ import annotations

import csv
import json
import math

import pytest

from paper_figures import learning_curves as lc


def _run(folder, lines):
    folder.mkdir(parents=True)
    text = "\n".join(json.dumps(m) for m in lines) + "\n"
    (folder / "metrics.jsonl").write_text(text)
    return folder


def _step(step, valid, reward, rho, best, exec_s):
    return {
        "step": step,
        "valid_fraction": valid,
        "mean_reward": reward,
        "rho_hat": rho,
        "best_generated": best,
        "exec_seconds": exec_s,
    }


@pytest.fixture
def runs(tmp_path):
    a = _run(
        tmp_path / "a",
        [
            {"step": 0, "sft_step": 1, "sft/loss": 0.9},  # SFT lines are not steps
            _step(1, 0.5, -1.0, 0.1, None, 10.0),
            _step(2, 1.0, 0.0, 0.2, 0.7, 20.0),
            _step(2, 1.0, 0.5, 0.3, 0.8, 30.0),  # a replayed step: the last line wins
        ],
    )
    b = _run(tmp_path / "b", [_step(1, 1.0, 1.0, 0.3, 0.6, 5.0), _step(2, 0.0, 2.0, 0.5, 0.6, 5.0)])
    return a, b


def test_read_steps_cumulates_exec_time_and_skips_sft_lines(runs):
    rows = lc.read_steps(runs[0])
    assert [r["step"] for r in rows] == [1, 2]
    assert math.isnan(rows[0]["best_generated"]) and rows[1]["best_generated"] == 0.8
    assert [r["cum_exec_s"] for r in rows] == [10.0, 40.0]
    assert rows[1]["mean_reward"] == 0.5 and rows[1]["rho_hat"] == 0.3


def test_summary_is_the_mean_and_standard_error_across_runs(runs):
    s = lc.summarise([lc.read_steps(r) for r in runs])
    assert [r["step"] for r in s] == [1, 2] and [r["n"] for r in s] == [2, 2]
    # step 2 valid fractions 1.0 and 0.0: mean 0.5, s.d. (ddof 1) sqrt(0.5), s.e. 0.5
    assert s[1]["valid_fraction_mean"] == pytest.approx(0.5)
    assert s[1]["valid_fraction_se"] == pytest.approx(0.5)
    # step 2 rewards 0.5 and 2.0: s.e. = |a - b| / 2 for two values
    assert s[1]["mean_reward_mean"] == pytest.approx(1.25)
    assert s[1]["mean_reward_se"] == pytest.approx(0.75)
    # step 1 best: only run b has one (NaN left out): its value, s.e. undefined
    assert s[0]["best_generated_mean"] == 0.6 and math.isnan(s[0]["best_generated_se"])
    assert s[1]["cum_exec_s_mean"] == pytest.approx((40.0 + 10.0) / 2)


def test_outputs_and_cli(runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert lc.main([str(runs[0]), str(runs[1]), "--out", str(out)]) == 0
    assert "| 2 | 2 | 0.50 ± 0.50 |" in capsys.readouterr().out
    for name in ("learning_curves.csv", "learning_curves.md", "learning_curves.png"):
        assert (out / name).stat().st_size > 0
    with open(out / "learning_curves.csv") as fh:
        rows = list(csv.DictReader(fh))
    mean2 = [r for r in rows if r["run"] == "mean" and r["step"] == "2"]
    assert float(mean2[0]["rho_hat"]) == pytest.approx(0.4)
    assert lc.main([str(tmp_path / "nothing")]) == 2
    assert "not a run folder" in capsys.readouterr().err
