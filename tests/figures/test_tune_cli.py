"""paper_figures.tune: usage errors exit 2 before anything is stored; a tiny grid x trials batch
scores every point as separate simulator runs do; a killed run resumes at the first unfinished unit.
"""

import json

import numpy as np
import pytest

from paper_figures import tune
from paper_figures._protocol import SETTINGS, Cell, build_agent

TINY = ["--steps", "64", "--seeds", "3", "--no-progress"]
CUCB_GRID = ["--grid", "c1=0.1,10", "--grid", "c2=0.001,1"]
PG_GRID = ["--grid", "lr=0.3,3", "--grid", "age_bound=60,4000"]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--cells", "E9:5"], "--cells: unknown environment 'E9'; valid: E1, E2, E3, E4"),
        (["--cells", "E1:x"], "'E1:x'"),
        (["--cells", "E1:5:2"], "--cells 2"),
        (["--cells", "E1:0"], "'E1:0'"),
        (["--cells", "E1:1"], "--cells: K must be >= 2 (one arm has no regret), got 'E1:1'"),
        (["--cells", "E1:5,E1:5"], "repeats"),
        (["--agents", "cucb-theory"], "cucb-theory"),
        (["--grid", "foo=1"], "'foo'"),
        (["--grid", "c1=abc"], "c1=abc"),
        (["--grid", "c1=-1", "--agents", "cucb-tuned"], "c1"),
        (["--grid", "lr=0", "--agents", "npg-niw"], "lr"),
        (["--seed-start", "90"], "90..119"),
        (["--seed-start", "-1"], "--seed-start must be >= 0, got -1"),
        (["--seeds", "0"], "--seeds must be >= 1, got 0"),
        (["--seed-start", "4294967295", "--seeds", "3"], "4294967295..4294967297"),
        (["--steps", "0"], "--steps"),
        (["--setting", "huge"], "huge"),
    ],
)
def test_usage_errors_exit_2_and_store_nothing(argv, needle, capsys, tmp_path):
    out = tmp_path / "t.json"
    assert tune.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err and err.startswith(tune.PROG)
    assert not out.exists()


def test_out_folder_exits_2(tmp_path, capsys):
    assert tune.main(["--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_reference_grids_and_sizes():
    small, large = SETTINGS["small"], SETTINGS["large"]
    assert np.allclose(small.grids["cucb-tuned"]["c1"], np.logspace(-2, 2, 5))
    assert np.allclose(small.grids["cucb-tuned"]["c2"], np.logspace(-4, 0, 5))
    assert len(small.grids["npg-niw"]["lr"]) * len(small.grids["npg-niw"]["age_bound"]) == 50
    assert (
        large.grids["npg-niw"]["lr"][-1] == 10 and large.grids["spg-niw"]["age_bound"][-1] == 4000
    )
    assert large.grids["cucb-tuned"]["c2"][0] == 0.0
    assert (small.arms, small.contexts) == ((5, 10, 20, 30), (4,))
    assert (large.arms, large.contexts) == ((70, 100, 130, 160), (8, 16, 32, 64))


def _independent_medians(name, cell, grid, seeds, n):
    """Each grid point as its own simulator call (shared hyper-parameters, plain agent)."""
    import itertools

    from rpg_jax.envs import make_trial_params
    from rpg_jax.simulate import simulate

    params = make_trial_params(cell.env, cell.K, cell.contexts, seeds)
    out = []
    for point in itertools.product(*grid.values()):
        agent, hyper, _ = build_agent(name, cell, dict(zip(grid, point, strict=True)))
        out.append(float(np.median(simulate(agent, hyper, params, seeds, n).regret)))
    return out


@pytest.mark.slow
def test_tiny_tune_scores_equal_separate_runs_and_selects_the_lowest_median(tmp_path):
    out = tmp_path / "t.json"
    argv = ["--cells", "E4:3", "--agents", "cucb-tuned,npg-niw", *CUCB_GRID, *PG_GRID]
    assert tune.main([*argv, *TINY, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["protocol"]["n_steps"] == 64 and data["protocol"]["seeds"] == [900, 902]
    grids = {"cucb-tuned": {"c1": [0.1, 10.0], "c2": [0.001, 1.0]},
             "npg-niw": {"lr": [0.3, 3.0], "age_bound": [60.0, 4000.0]}}  # fmt: skip
    assert data["grids"] == grids
    for name, grid in grids.items():
        unit = data["cells"]["E4:3:4"][name]
        assert unit["command"].startswith("python -m paper_figures.tune --cells E4:3")
        medians = [p["median_regret"] for p in unit["grid"]]
        expect = _independent_medians(name, Cell("E4", 3, 4), grid, [900, 901, 902], 64)
        np.testing.assert_allclose(medians, expect, rtol=1e-9, atol=1e-9)
        assert unit["best"] == unit["grid"][int(np.argmin(medians))]["hyper"]
        assert unit["best_median_regret"] == min(medians) and unit["lanes"] == 4 * 3


@pytest.mark.slow
def test_killed_run_resumes_at_the_first_unfinished_unit(tmp_path, monkeypatch, capsys):
    out = tmp_path / "t.json"
    argv = ["--cells", "E1:2,E4:2", "--agents", "cucb-tuned", *CUCB_GRID, *TINY]
    argv += ["--out", str(out)]
    real, calls = tune.tune_unit, []

    def dies_on_second(name, cell, *a, **kw):
        calls.append(cell.key)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(name, cell, *a, **kw)

    monkeypatch.setattr(tune, "tune_unit", dies_on_second)
    assert tune.main(argv) == 130
    first = json.loads(out.read_text())
    assert list(first["cells"]) == ["E1:2:4"]
    monkeypatch.setattr(tune, "tune_unit", real)
    capsys.readouterr()
    assert tune.main(argv) == 0
    assert "E1:2:4 cucb-tuned: stored" in capsys.readouterr().err
    second = json.loads(out.read_text())
    assert second["cells"]["E1:2:4"] == first["cells"]["E1:2:4"]  # kept, not rerun
    assert list(second["cells"]) == ["E1:2:4", "E4:2:4"]
    # Another protocol into the same file is refused, and the file is left as it was.
    assert tune.main([*argv[:-2], "--steps", "32", "--out", str(out)]) == 2
    assert "another protocol" in capsys.readouterr().err
    assert json.loads(out.read_text()) == second


@pytest.mark.slow
def test_a_unit_in_slices_scores_as_one_call_and_resumes_after_the_last_slice(
    tmp_path, monkeypatch, capsys
):
    argv = ["--cells", "E4:3", "--agents", "npg-niw", *PG_GRID, *TINY]
    whole, sliced = tmp_path / "whole.json", tmp_path / "sliced.json"
    assert tune.main([*argv, "--out", str(whole)]) == 0
    real, calls = tune.tune_unit, []

    def dies_on_third(name, cell, *a, **kw):
        calls.append((kw["start"], kw["stop"]))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(name, cell, *a, **kw)

    monkeypatch.setattr(tune, "tune_unit", dies_on_third)
    assert tune.main([*argv, "--points-per-call", "1", "--out", str(sliced)]) == 130
    killed = json.loads(sliced.read_text())
    assert "E4:3:4" not in killed["cells"]
    assert len(killed["partial"]["E4:3:4"]["npg-niw"]["grid"]) == 2  # two slices stored
    calls.clear()
    assert tune.main([*argv, "--points-per-call", "2", "--out", str(sliced)]) == 0
    assert calls == [(2, 4)]  # resumed after the stored slices, the rest in one call
    a = json.loads(whole.read_text())["cells"]["E4:3:4"]["npg-niw"]
    b = json.loads(sliced.read_text())
    assert "partial" not in b
    b = b["cells"]["E4:3:4"]["npg-niw"]
    assert b["grid"] == a["grid"]  # the same scores, point by point (exact)
    assert (b["best"], b["best_median_regret"], b["lanes"]) == (
        a["best"],
        a["best_median_regret"],
        a["lanes"],
    )
