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


# -- several processes on one results file ----------------------------------------------------

CUCB_ARGS = ["--agents", "cucb-tuned", *CUCB_GRID, *TINY]


def _fake_unit(name, cell, grid, seeds, n_steps, progress=True, start=0, stop=None):
    """A :func:`tune.tune_unit` stand-in (no simulator): point ``i`` scores ``K + i``."""
    points = tune.grid_points(grid)[start:stop]
    entries = [
        {
            "hyper": p,
            "median_regret": float(cell.K + start + i),
            "mean_regret": 0.0,
            "se_regret": 0.0,
        }
        for i, p in enumerate(points)
    ]
    best, med = tune.select_best(entries)
    return {"best": entries[best]["hyper"], "best_median_regret": med, "grid": entries,
            "lanes": len(points) * len(seeds), "wall_s": 0.5}  # fmt: skip


def test_two_tunings_into_one_file_keep_both_cells(tmp_path, monkeypatch, capsys):
    """A second tuning (other cells, same --out) stores its unit while the first is scoring its
    own from the file as it read it at the start: both units end in the file (the first one's
    write merges into the file as it is then, not its stale copy)."""
    out = tmp_path / "t.json"
    second = ["--cells", "E4:2", *CUCB_ARGS, "--out", str(out)]

    def unit(name, cell, *a, **kw):
        if cell.key == "E1:2:4":  # meanwhile, "another process" tunes its cell into the file
            assert tune.main(second) == 0
        return _fake_unit(name, cell, *a, **kw)

    monkeypatch.setattr(tune, "tune_unit", unit)
    assert tune.main(["--cells", "E1:2", *CUCB_ARGS, "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert sorted(data["cells"]) == ["E1:2:4", "E4:2:4"]
    assert data["cells"]["E4:2:4"]["cucb-tuned"]["command"].endswith("--cells E4:2 " + " ".join(
        [*CUCB_ARGS, "--out", str(out)]))  # fmt: skip
    assert data["cells"]["E1:2:4"]["cucb-tuned"]["best_median_regret"] == 2.0
    assert data["cells"]["E4:2:4"]["cucb-tuned"]["best_median_regret"] == 2.0
    assert not list(tmp_path.glob("*.tmp"))


def test_a_unit_finished_by_another_process_is_kept_as_it_stored_it(tmp_path, monkeypatch, capsys):
    """The first tuning scores one unit in slices; while it scores its second slice another
    process continues the unit from the stored first slice and finishes it. The first then
    stores no second copy: the unit stays as the other process stored it, no slice left over."""
    out = tmp_path / "t.json"
    other = ["--cells", "E4:2", *CUCB_ARGS, "--out", str(out)]
    calls = []

    def unit(name, cell, *a, **kw):
        calls.append((kw["start"], kw["stop"]))
        if len(calls) == 2:
            assert tune.main(other) == 0  # points 1..3 in one call (calls[2])
        return _fake_unit(name, cell, *a, **kw)

    monkeypatch.setattr(tune, "tune_unit", unit)
    argv = ["--cells", "E4:2", *CUCB_ARGS, "--points-per-call", "1", "--out", str(out)]
    assert tune.main(argv) == 0
    assert calls == [(0, 1), (1, 2), (1, 4)]  # the first stops after its second slice
    data = json.loads(out.read_text())
    assert "partial" not in data
    stored = data["cells"]["E4:2:4"]["cucb-tuned"]
    assert "--points-per-call" not in stored["command"]  # the other process's record
    assert [p["median_regret"] for p in stored["grid"]] == [2.0, 3.0, 4.0, 5.0]
    assert (stored["lanes"], stored["wall_s"]) == (4 * 3, 1.0)  # both slices it holds
    assert "(stored by another process)" in capsys.readouterr().out


def test_a_file_another_protocol_made_meanwhile_is_refused_and_kept(tmp_path, monkeypatch, capsys):
    out = tmp_path / "t.json"

    def unit(name, cell, *a, **kw):
        if cell.key == "E1:2:4":  # meanwhile, "another process" makes the file (--steps 32)
            assert (
                tune.main(["--cells", "E4:2", *CUCB_ARGS, "--steps", "32", "--out", str(out)]) == 0
            )
        return _fake_unit(name, cell, *a, **kw)

    monkeypatch.setattr(tune, "tune_unit", unit)
    assert tune.main(["--cells", "E1:2", *CUCB_ARGS, "--out", str(out)]) == 2
    made = json.loads(out.read_text())
    assert made["protocol"]["n_steps"] == 32 and list(made["cells"]) == ["E4:2:4"]
    assert "holds results of another protocol (differs in n_steps)" in capsys.readouterr().err


def test_a_writer_waits_for_the_results_files_lock(tmp_path, monkeypatch):
    """While another process holds the results file's lock, a finished unit's write waits for
    it, then lands."""
    import subprocess
    import sys
    import threading
    import time

    from rpg_core.filelock import lock_path_for

    out = tmp_path / "t.json"
    code = (
        "import sys; from pathlib import Path; from rpg_core.filelock import FileLock; "
        f"lock = FileLock(Path({str(lock_path_for(out))!r})).acquire(); print('held', flush=True); "
        "sys.stdin.readline()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdin is not None and holder.stdout is not None
    stdin = holder.stdin
    times = {}

    def let_go() -> None:
        time.sleep(1.0)
        times["released"] = time.monotonic()
        stdin.write("\n")
        stdin.flush()

    def unit(*a, **kw):
        threading.Thread(target=let_go).start()
        times["scored"] = time.monotonic()
        return _fake_unit(*a, **kw)

    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(tune, "tune_unit", unit)
        assert tune.main(["--cells", "E4:2", *CUCB_ARGS, "--out", str(out)]) == 0
        times["stored"] = time.monotonic()
    finally:
        assert holder.wait(timeout=30) == 0
    assert times["stored"] >= times["released"] > times["scored"] + 0.9  # it waited for it
    assert list(json.loads(out.read_text())["cells"]) == ["E4:2:4"]
