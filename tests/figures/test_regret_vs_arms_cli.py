"""regret_vs_arms CLI: usage errors exit 2 with one line before --out exists; tiny runs (small and
large setting) write figure + CSV whose numbers are the curves' and whose hyper-parameters come
from the tuned file where it has the cell; the progress wrapper changes no trajectory."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from paper_figures import regret_vs_arms


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--envs", "E9"], "E9"),
        (["--arms", "0"], "got 0"),
        (["--arms", "5,x"], "5,x"),
        (["--seeds", "0"], "--seeds"),
        (["--steps", "-3"], "-3"),
        (["--contexts", "0"], "--contexts 0"),
        (["--contexts", "2"], "--contexts 2"),
        (["--contexts", "3", "--setting", "large"], "--contexts 3"),
        (["--setting", "medium"], "medium"),
        (["--agents", "npg,cucb-tuned"], "'npg,cucb-tuned'"),
        (["--agent-seeds", "npg-niw=0"], "npg-niw=0"),
        (["--cell-seeds", "npg-niw:x=3"], "npg-niw:x=3"),
        (["--hyper", "/nonexistent.json"], "/nonexistent.json"),
        (["--tuned", "/nonexistent.json"], "/nonexistent.json"),
        (["--envs", ","], "''"),
        (["--envs", "E1,e1"], "repeats"),
        (["--arms", "5,5"], "5,5"),
        (["--arms", "100000"], "100001"),
        (["--arms", "1"], "got 1"),
        (["--agent-seeds", "npg-niw=200"], "npg-niw=200"),
        (["--agent-seeds", "npg-niw=10", "--agent-seeds", "npg-niw=20"], "npg-niw=20"),
        (["--cell-seeds", "npg-niw:5=3", "--cell-seeds", "npg-niw:5=4"], "npg-niw:5=4"),
        (["--cell-seeds", "npg-niw:7=3"], "npg-niw:7=3"),
        (["--seed-start", "-1"], "--seed-start must be >= 0, got -1"),
        (["--seed-start", "4294967295", "--seeds", "3"], "4294967295..4294967297"),
        (["--estimators", "niw,rm"], "--estimators 'niw,rm'"),
        (["--estimators", "niw", "--agents", "npg-niw"], "not both"),
    ],
)
def test_usage_errors_exit_2_with_one_line_before_out_exists(argv, needle, capsys, tmp_path):
    out = tmp_path / "fig"
    assert regret_vs_arms.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err and err.startswith(regret_vs_arms.PROG)
    assert not out.exists()


def test_a_kill_in_the_first_cell_leaves_run_json_and_csv_header(monkeypatch, tmp_path, capsys):
    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(regret_vs_arms, "run_cell", killed)
    out = tmp_path / "fig"
    argv = ["--envs", "E1", "--arms", "2", "--steps", "50", "--seeds", "3"]
    argv += ["--agents", "cucb-tuned", "--agent-seeds", "cucb-tuned=2", "--out", str(out)]
    assert regret_vs_arms.main(argv) == 130
    info = json.loads((out / "run.json").read_text())
    assert info["command"] == " ".join([regret_vs_arms.PROG, *argv])
    assert info["cells"] == ["E1:2:4"] and info["agents"] == ["cucb-tuned"]
    assert info["n_steps"] == 50 and info["seeds"] == "0-2" and info["finished"] is None
    assert info["reduced_seeds"] == {"cucb-tuned:2": 2}
    header = (out / "regret_vs_arms.csv").read_text().splitlines()
    assert header == [",".join(regret_vs_arms.CSV_FIELDS)]


def test_cell_seeds_override_agent_seeds_at_their_k():
    args = regret_vs_arms._parser().parse_args(
        ["--cell-seeds", "npg-niw:5=3", "--agent-seeds", "npg-niw=10"]
    )
    assert regret_vs_arms._seed_map(args, ["npg-niw"], [5, 10]) == {
        ("npg-niw", 5): 3,
        ("npg-niw", 10): 10,
    }


def test_out_naming_a_file_exits_2(capsys):
    assert regret_vs_arms.main(["--agents", "cucb-tuned", "--out", __file__]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_bad_hyper_files_exit_2(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    broken = tmp_path / "broken.json"
    broken.write_text("{agents:")
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps({"agents": {"cucb-tuned": {"c1": float("nan"), "c2": 0.1}}}))
    for path, needle in ((empty, "empty.json"), (broken, "broken.json"), (nan, "c1")):
        argv = ["--agents", "cucb-tuned", "--hyper", str(path), "--tuned", "none"]
        assert regret_vs_arms.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and needle in err


def test_contexts_2_from_a_real_process(tmp_path):
    out = tmp_path / "fig"
    proc = subprocess.run(
        [sys.executable, "-m", "paper_figures.regret_vs_arms", "--contexts", "2", "--out", out],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "--contexts 2" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_progress_wrapper_keeps_trajectories_and_ticks_every_k_decisions():
    from paper_figures import _progress
    from rpg_jax.agents.registry import make_agent
    from rpg_jax.envs import make_trial_params
    from rpg_jax.simulate import simulate

    seeds, n = [3, 4, 5, 6], 120
    params = make_trial_params("E4", 5, 4, seeds)
    agent, hyper, _ = make_agent("npg-niw", 4, 6, {"lr": 1.0, "age_bound": 60})
    plain = simulate(agent, hyper, params, seeds, n)
    counted = _progress.with_progress(agent, 30)  # one object: both runs share one compilation
    seen = []
    _progress._SINKS.append(seen.append)
    try:
        wrapped = simulate(counted, hyper, params, seeds, n)
    finally:
        _progress._SINKS.remove(seen.append)
    with _progress.progress_bar(n, "test", disable=True) as done:
        simulate(counted, hyper, params, seeds, n)
    assert done() == n and _progress._SINKS == []
    np.testing.assert_array_equal(plain.regret_curve, wrapped.regret_curve)
    np.testing.assert_array_equal(plain.pseudo_regret, wrapped.pseudo_regret)
    assert sorted(set(seen)) == [30, 60, 90, 120]


def _rows(out):
    return list(csv.DictReader(open(out / "regret_vs_arms.csv")))


@pytest.mark.slow
def test_tiny_run_writes_figure_csv_and_uses_tuned_cells(tmp_path):
    hyper = tmp_path / "h.json"
    hyper.write_text(json.dumps({"agents": {"cucb-tuned": {"c1": 0.1, "c2": 1e-4}}}))
    tuned = tmp_path / "t.json"
    best = {"c1": 1.0, "c2": 0.01}
    protocol = {"n_steps": 30_000, "seeds": [900, 929]}
    cells = {"E4:3:4": {"cucb-tuned": {"best": best}}}
    tuned.write_text(json.dumps({"protocol": protocol, "cells": cells}))
    out = tmp_path / "fig"
    argv = ["--envs", "E1,E4", "--arms", "2,3", "--steps", "200", "--seeds", "3"]
    argv += ["--agents", "cucb-tuned,cucb-theory", "--cell-seeds", "cucb-theory:3=2"]
    argv += ["--hyper", str(hyper), "--tuned", str(tuned), "--out", str(out), "--no-progress"]
    assert regret_vs_arms.main(argv) == 0
    for name in ("regret_vs_arms.png", "regret_vs_arms.pdf", "regret_vs_arms.csv", "curves.npz"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "run.json").read_text())["finished"]
    rows = _rows(out)
    assert len(rows) == 2 * 2 * 2 and {r["run"] for r in rows} == {"full"}
    reduced = [r for r in rows if r["agent"] == "cucb-theory" and r["K"] == "3"]
    assert all(r["n_seeds"] == "2" and "reduced seeds" in r["note"] for r in reduced)
    sources = {(r["env"], r["K"], r["agent"]): r for r in rows}
    assert sources["E4", "3", "cucb-tuned"]["hyper_source"] == "tuned:t.json"
    assert json.loads(sources["E4", "3", "cucb-tuned"]["hyper"]) == best
    assert sources["E1", "3", "cucb-tuned"]["hyper_source"] == "one-setting:h.json"
    assert json.loads(sources["E1", "3", "cucb-tuned"]["hyper"]) == {"c1": 0.1, "c2": 1e-4}
    assert sources["E1", "3", "cucb-theory"]["hyper_source"] == "theory"
    # The CSV's mean is the mean of the curves' final points (the numbers it plotted).
    curves = np.load(out / "curves.npz")
    row = sources["E4", "2", "cucb-tuned"]
    final = curves["E4_K2_X4_cucb-tuned"][:, -1]
    assert float(row["mean_regret"]) == pytest.approx(final.mean(), rel=1e-12)
    assert float(row["se_regret"]) == pytest.approx(final.std(ddof=1) / np.sqrt(3), rel=1e-9)


def test_large_setting_tiny_run_samples_cucb_policies(tmp_path):
    """|X| = 8 and 16: C-UCB runs with M = 2,048 sampled policies (exact would need 6**16)."""
    from paper_figures._protocol import Cell, build_agent
    from rpg_jax.agents.registry import make_agent

    hyper = tmp_path / "h.json"
    hyper.write_text(json.dumps({"agents": {"cucb-tuned": {"c1": 0.1, "c2": 0.0}}}))
    out = tmp_path / "large"
    argv = ["--setting", "large", "--envs", "E2", "--arms", "5", "--contexts", "8,16"]
    argv += ["--steps", "60", "--seeds", "2", "--agents", "cucb-tuned,cucb-theory"]
    argv += ["--hyper", str(hyper), "--tuned", "none", "--out", str(out), "--no-progress"]
    assert regret_vs_arms.main(argv) == 0
    rows = _rows(out)
    assert sorted((r["n_contexts"], r["agent"]) for r in rows) == [
        ("16", "cucb-theory"), ("16", "cucb-tuned"), ("8", "cucb-theory"), ("8", "cucb-tuned")
    ]  # fmt: skip
    assert {r["setting"] for r in rows} == {"large"}
    sampled = make_agent("cucb-sampled", 16, 6, {"c1": 0.1, "c2": 0.0})[0]
    assert build_agent("cucb-tuned", Cell("E2", 5, 16), {"c1": 0.1, "c2": 0.0})[0] is sampled


@pytest.mark.slow
def test_quick_is_labelled_a_smoke_run(monkeypatch, tmp_path, capsys):
    """--quick sets the smoke sizes and labels CSV and output (run shortened to 40 decisions)."""
    real = regret_vs_arms.check_args

    def shorter(args):
        plan = real(args)
        assert (args.envs, args.steps, args.seeds) == ("E1,E4", 2_000, 8)
        assert plan["arms"] == [5, 10]
        args.steps = 40
        return plan

    monkeypatch.setattr(regret_vs_arms, "check_args", shorter)
    out = tmp_path / "q"
    argv = ["--quick", "--agents", "cucb-tuned", "--out", str(out), "--no-progress"]
    assert regret_vs_arms.main(argv) == 0
    assert {r["run"] for r in _rows(out)} == {"quick smoke run"}
    assert "quick smoke run" in capsys.readouterr().out


def test_large_setting_sizes_build_and_validate():
    """Every large-setting instance (K in 70..160, |X| in 8..64) builds with the layout's shapes and
    a rate between the best context's and the worst's; the whole setting validates without
    compiling (C-UCB sampled at |X| > 4)."""
    from rpg_jax.envs import make_reference_env

    for k in (70, 100, 130, 160):
        for x in (8, 16, 32, 64):
            env = make_reference_env("E3", k, x)
            assert np.shape(env.rbar) == (x, k + 1)
            best = np.max(np.asarray(env.rbar) / np.asarray(env.dbar), axis=1)
            assert best.min() <= env.rho_star <= best.max()
    plan = regret_vs_arms.check_args(regret_vs_arms._parser().parse_args(["--setting", "large"]))
    assert len(plan["cells"]) == 4 * 4 * 4 and plan["contexts"] == [8, 16, 32, 64]


def test_estimators_are_npg_agents_and_niw_is_todays_npg_niw(tmp_path):
    """``--estimators`` runs NPG once per estimator; ``niw`` gives npg-niw's numbers exactly."""
    hyper = tmp_path / "h.json"
    pg = {"lr": 1.0, "age_bound": 250.0}
    agents = dict.fromkeys(["npg-niw", "npg-niw-mean", "npg-rm"], pg)
    hyper.write_text(json.dumps({"agents": agents}))
    common = ["--envs", "E1", "--arms", "3", "--steps", "400", "--seeds", "3", "--no-progress"]
    common += ["--hyper", str(hyper), "--tuned", "none"]
    a, b = tmp_path / "a", tmp_path / "b"
    estimators = ["--estimators", "niw,niw-mean,robbins-monro"]
    assert regret_vs_arms.main([*common, *estimators, "--out", str(a)]) == 0
    assert regret_vs_arms.main([*common, "--agents", "npg-niw", "--out", str(b)]) == 0
    rows = {r["agent"]: r for r in _rows(a)}
    assert list(rows) == ["npg-niw", "npg-niw-mean", "npg-rm"]
    assert rows["npg-niw"]["mean_regret"] == _rows(b)[0]["mean_regret"]
    curves = np.load(a / "curves.npz")
    niw, rm = curves["E1_K3_X4_npg-niw"], curves["E1_K3_X4_npg-rm"]
    assert np.all(np.isfinite(rm)) and not np.array_equal(niw, rm)
