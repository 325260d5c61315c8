"""--ray for paper_figures.tune and paper_figures.regret_vs_arms: an unreachable address exits 2
with one line before anything compiles or is written; a real local Ray instance (2 CPUs) gives the
in-process numbers exactly; a driver killed after its first stored slice resumes without running
that slice again; slices that finish out of order are stored as the in-process path stores them.

The workers run ``paper_figures._ray._call``, which only this worktree's ``paper_figures`` has, so
a task that ran at all ran the driver's code.
"""

import copy
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from paper_figures import _ray, regret_vs_arms, tune
from testkit import REPO_ROOT

TINY = ["--steps", "64", "--seeds", "3", "--no-progress"]
CUCB_GRID = ["--grid", "c1=0.1,10", "--grid", "c2=0.001,1"]
PG_GRID = ["--grid", "lr=0.3,3", "--grid", "age_bound=60,4000"]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module, started by the entry points' own
    ``_ray.connect("local")`` (Ray's start-up and each worker's JAX compilations are paid
    once). Its workers inherit the driver's environment: the tests' compilation cache and this
    checkout first on the import path."""
    import ray

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RPG_JAX_CACHE", os.environ["RPG_JAX_CACHE"])  # tests/conftest.py
        path = os.environ.get("PYTHONPATH")
        mp.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), *([path] if path else [])]))
        _ray.connect("local")
        try:
            yield ray
        finally:
            ray.shutdown()


class _Session:
    """What ``_ray.connect`` returns inside these tests: the module's Ray, whose ``shutdown``
    at the end of a command leaves it running for the next test."""

    def shutdown(self) -> None:
        pass


@pytest.fixture
def worker_env(local_ray, monkeypatch):
    """The entry points' ``--ray local`` joins the module's running instance."""
    connected = []

    def connect(value, flag="--ray"):
        assert value == "local" and local_ray.is_initialized()
        connected.append(value)
        return _Session()

    monkeypatch.setattr(_ray, "connect", connect)
    monkeypatch.setenv("RPG_JAX_CACHE", os.environ["RPG_JAX_CACHE"])
    return connected


@pytest.mark.parametrize("module", ["tune", "regret_vs_arms"])
def test_unreachable_address_exits_2_with_one_line_before_compiling(module, tmp_path):
    out = tmp_path / "out.json"
    env = os.environ | {"JAX_LOG_COMPILES": "1", "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", f"paper_figures.{module}", "--ray", "127.0.0.1:1", "--out", out],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert err.count("\n") == 0, err  # JAX_LOG_COMPILES=1 would log every compilation
    assert err.startswith(f"python -m paper_figures.{module}: error: --ray 127.0.0.1:1")
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["nowhere", "host:0", "host:70000", "ray://:80", "h:x"])
@pytest.mark.parametrize("main", [tune.main, regret_vs_arms.main])
def test_malformed_address_exits_2(main, value, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--ray", value, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--ray {value!r}" in err and not out.exists()


def _scores(path):
    cells = json.loads(path.read_text())["cells"]
    return {(c, a): u["grid"] for c, units in cells.items() for a, u in units.items()}


@pytest.mark.slow
def test_tune_on_ray_scores_equal_in_process(tmp_path, worker_env):
    argv = ["--cells", "E4:3", "--agents", "cucb-tuned,npg-niw", *CUCB_GRID, *PG_GRID, *TINY]
    here, there = tmp_path / "here.json", tmp_path / "ray.json"
    assert tune.main([*argv, "--out", str(here)]) == 0
    ray_argv = [*argv, "--points-per-call", "2", "--ray", "local", "--out", str(there)]
    assert tune.main(ray_argv) == 0
    a, b = json.loads(here.read_text()), json.loads(there.read_text())
    assert _scores(there) == _scores(here)  # every point's median, mean and s.e., exactly
    assert len(_scores(here)) == 2 and "partial" not in b
    for name in ("cucb-tuned", "npg-niw"):
        ua, ub = a["cells"]["E4:3:4"][name], b["cells"]["E4:3:4"][name]
        assert (ub["best"], ub["best_median_regret"], ub["lanes"]) == (
            ua["best"],
            ua["best_median_regret"],
            ua["lanes"],
        )
        assert ub["command"].endswith("--ray local --out " + str(there))
    assert a["grids"] == b["grids"] and a["protocol"] == b["protocol"]


@pytest.mark.slow
def test_killed_ray_driver_resumes_after_the_stored_slice(tmp_path, worker_env, monkeypatch):
    argv = ["--cells", "E4:3", "--agents", "cucb-tuned", *CUCB_GRID, *TINY]
    whole, sliced = tmp_path / "whole.json", tmp_path / "sliced.json"
    assert tune.main([*argv, "--out", str(whole)]) == 0
    ray_argv = [*argv, "--points-per-call", "1", "--ray", "local", "--out", str(sliced)]
    real_write = tune._write_atomic

    def killed_after_first_write(path, data):
        real_write(path, data)
        raise KeyboardInterrupt

    monkeypatch.setattr(tune, "_write_atomic", killed_after_first_write)
    assert tune.main(ray_argv) == 130
    killed = json.loads(sliced.read_text())
    stored = killed["partial"]["E4:3:4"]["cucb-tuned"]
    assert len(stored["grid"]) == 1 and killed["cells"] == {}

    monkeypatch.setattr(tune, "_write_atomic", real_write)
    real_run, ran = _ray.run_tasks, []

    def recording(module, function, jobs, **kw):
        for i, part in real_run(module, function, jobs, **kw):
            ran.append((jobs[i]["start"], jobs[i]["stop"], part["wall_s"]))
            yield i, part

    monkeypatch.setattr(_ray, "run_tasks", recording)
    assert tune.main(ray_argv) == 0
    assert sorted(r[:2] for r in ran) == [(1, 2), (2, 3), (3, 4)]  # slice 0 not run again
    unit = json.loads(sliced.read_text())["cells"]["E4:3:4"]["cucb-tuned"]
    assert unit["grid"] == json.loads(whole.read_text())["cells"]["E4:3:4"]["cucb-tuned"]["grid"]
    assert unit["grid"][0] == stored["grid"][0]
    wall = stored["wall_s"]
    for _, _, w in sorted(ran):
        wall = round(wall + w, 1)
    assert unit["wall_s"] == wall  # the stored slice's time, kept, plus the three new slices'
    assert unit["lanes"] == 4 * 3


def test_slices_finishing_out_of_order_are_stored_as_in_process(tmp_path, monkeypatch):
    """A fake ``run_tasks`` hands the slices back last first: the file goes through the same
    states as in-process (a growing prefix of the grid, then the unit)."""
    argv = [
        "--cells",
        "E4:2",
        "--agents",
        "cucb-tuned",
        *CUCB_GRID,
        *TINY,
        "--points-per-call",
        "1",
    ]
    real_write, states = tune._write_atomic, []

    def recording_write(path, data):
        states.append(copy.deepcopy(data))
        real_write(path, data)

    def last_first(module, function, jobs, **kw):
        assert (module, function) == ("paper_figures.tune", "tune_unit")
        for i in reversed(range(len(jobs))):
            yield i, tune.tune_unit(**jobs[i])

    class NoRay:
        def shutdown(self):
            pass

    monkeypatch.setattr(tune, "_write_atomic", recording_write)
    assert tune.main([*argv, "--out", str(tmp_path / "a.json")]) == 0
    here, states[:] = list(states), []
    monkeypatch.setattr(_ray, "run_tasks", last_first)
    monkeypatch.setattr(_ray, "connect", lambda value: NoRay())
    assert tune.main([*argv, "--ray", "local", "--out", str(tmp_path / "b.json")]) == 0

    def strip(state):
        for units in state["cells"].values():
            for unit in units.values():
                del unit["command"], unit["finished_utc"], unit["wall_s"]
        for units in state.get("partial", {}).values():
            for unit in units.values():
                del unit["wall_s"]
        return state

    assert [len(s.get("partial", {}).get("E4:2:4", {}).get("cucb-tuned", {"grid": []})["grid"])
            for s in here] == [1, 2, 3, 4, 0]  # fmt: skip
    assert [strip(s) for s in states] == [strip(s) for s in here]


def _rows(folder):
    with open(folder / "regret_vs_arms.csv") as fh:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(fh)]


@pytest.mark.slow
def test_regret_vs_arms_on_ray_rows_equal_in_process(tmp_path, worker_env):
    hyper = tmp_path / "h.json"
    hyper.write_text(json.dumps({"agents": {"cucb-tuned": {"c1": 0.1, "c2": 1e-4}}}))
    argv = ["--envs", "E4", "--arms", "2,3", "--steps", "50", "--seeds", "3"]
    argv += ["--agents", "cucb-tuned,cucb-theory", "--cell-seeds", "cucb-theory:3=2"]
    argv += ["--hyper", str(hyper), "--tuned", "none", "--no-progress"]
    here, there = tmp_path / "here", tmp_path / "ray"
    assert regret_vs_arms.main([*argv, "--out", str(here)]) == 0
    assert regret_vs_arms.main([*argv, "--ray", "local", "--out", str(there)]) == 0
    rows = _rows(there)
    assert rows == _rows(here) and len(rows) == 4  # same rows, same order, every digit
    assert [r["n_seeds"] for r in rows] == ["3", "3", "3", "2"]
    a, b = np.load(here / "curves.npz"), np.load(there / "curves.npz")
    assert sorted(a.files) == sorted(b.files) and len(a.files) == 5
    for key in a.files:
        np.testing.assert_array_equal(a[key], b[key])
    assert json.loads((there / "run.json").read_text())["finished"]
    assert (there / "regret_vs_arms.png").stat().st_size > 0


def test_a_failed_task_raises_one_line_naming_the_unit(worker_env):
    import ray

    from paper_figures._protocol import Cell

    job = {"agent_name": "cucb-tuned", "cell": Cell("E4", 3, 4), "grid": {"c1": [1.0], "c2": [1.0]}}
    job |= {"seeds": [900], "n_steps": 8, "start": 5, "stop": 6}  # no point there: ValueError
    _ray.connect("local")
    assert ray.is_initialized()
    with pytest.raises(RuntimeError) as info:
        list(_ray.run_tasks("paper_figures.tune", "tune_unit", [job], desc="t", progress=False))
    assert str(info.value) == "t: unit 0 failed on Ray: ValueError: no grid point in the slice 5:6"
