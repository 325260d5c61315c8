"""tune_small CLI: usage errors exit 2 with one line naming the value, before anything runs."""

import pytest

from paper_figures import tune_small


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--seed-start", "0", "--seeds", "2"], "overlap the evaluation seeds"),
        (["--seed-start", "99", "--seeds", "5"], "99..103"),
        (["--seed-start", "-5", "--seeds", "2"], "--seed-start must be >= 0, got -5"),
        (["--seed-start", "4294967295", "--seeds", "3"], "4294967295..4294967297"),
        (["--seeds", "0"], "--seeds must be >= 1, got 0"),
        (["--contexts", "2"], "--contexts 2: the reference environments need >= 4 contexts"),
        (["--c1-grid", "abc"], "--c1-grid"),
        (["--c1-grid", "-1", "--agents", "cucb-tuned"], "c1"),
        (["--lr-grid", "0"], "lr"),
        (["--agents", "ucb"], "'ucb'"),
        (["--envs", "E5"], "E5"),
        (["--lr-grid", "0.1,0.1"], "--lr-grid: repeats a value: '0.1,0.1'"),
        (["--lr-grid", "nan"], "--lr-grid nan"),
        (["--age-bound-grid", "-1"], "--age-bound-grid -1"),
        (["--c1-grid", "nan", "--agents", "cucb-tuned"], "--c1-grid nan"),
        (["--steps", "0"], "--steps must be >= 1, got 0"),
        (["--arms", "0"], "--arms must be >= 1, got 0"),
    ],
)
def test_usage_errors_exit_2(argv, needle, capsys, tmp_path):
    assert tune_small.main([*argv, "--out", str(tmp_path / "h.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err and "--seeds, " not in err and "--npg-niw" not in err
    assert not (tmp_path / "h.json").exists()


@pytest.mark.slow
def test_tiny_run_picks_the_lowest_mean_of_per_env_medians(tmp_path):
    import json

    import numpy as np

    out = tmp_path / "h.json"
    argv = ["--agents", "cucb-tuned", "--c1-grid", "0.1,10", "--c2-grid", "0.001,1"]
    argv += ["--arms", "3", "--steps", "64", "--seeds", "3", "--out", str(out)]
    assert tune_small.main(argv) == 0
    data = json.loads(out.read_text())
    grid = data["grid"]["cucb-tuned"]
    assert len(grid) == 4 and all(len(p["median_final_regret_per_env"]) == 2 for p in grid)
    scores = [np.mean(p["median_final_regret_per_env"]) for p in grid]
    assert [p["score"] for p in grid] == pytest.approx(scores, rel=1e-12)
    assert data["agents"]["cucb-tuned"] == grid[int(np.argmin(scores))]["hyper"]
    assert data["command"] == "python -m paper_figures.tune_small " + " ".join(argv)
