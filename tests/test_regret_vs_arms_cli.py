"""regret_vs_arms CLI: usage errors exit 2 with one line; a tiny run writes its outputs."""

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
        (["--contexts", "0"], "--contexts"),
        (["--agents", "npg,cucb-tuned"], "'npg'"),
        (["--agent-seeds", "npg-niw=0"], "got 0"),
        (["--hyper", "/nonexistent.json"], "/nonexistent.json"),
        (["--envs", ","], "','"),
        (["--envs", "E1,e1"], "repeats"),
        (["--arms", "5,5"], "repeats"),
        (["--arms", "100000"], "100001"),
        (["--agents", "cucb-tuned", "--arms", "5", "--out", __file__], "not a folder"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, needle, capsys):
    assert regret_vs_arms.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err


def test_bad_hyper_files_exit_2(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    broken = tmp_path / "broken.json"
    broken.write_text("{agents:")
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps({"agents": {"cucb-tuned": {"c1": float("nan"), "c2": 0.1}}}))
    for path, needle in ((empty, "empty.json"), (broken, "broken.json"), (nan, "c1")):
        argv = ["--agents", "cucb-tuned", "--hyper", str(path)]
        assert regret_vs_arms.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and needle in err


def test_usage_error_from_a_real_process():
    proc = subprocess.run(
        [sys.executable, "-m", "paper_figures.regret_vs_arms", "--envs", "E7"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "E7" in proc.stderr


def test_tiny_run_writes_figure_and_csv(tmp_path):
    hyper = tmp_path / "h.json"
    hyper.write_text(json.dumps({"agents": {"cucb-tuned": {"c1": 0.1, "c2": 1e-4}}}))
    out = tmp_path / "fig"
    argv = ["--envs", "E1,E4", "--arms", "2,3", "--steps", "200", "--seeds", "3"]
    argv += ["--agents", "cucb-tuned,cucb-theory", "--cell-seeds", "cucb-theory:3=2"]
    argv += ["--hyper", str(hyper), "--out", str(out), "--no-progress"]
    assert regret_vs_arms.main(argv) == 0
    for name in ("regret_vs_arms.png", "regret_vs_arms.pdf", "regret_vs_arms.csv", "curves.npz"):
        assert (out / name).stat().st_size > 0
    rows = list(csv.DictReader(open(out / "regret_vs_arms.csv")))
    assert len(rows) == 2 * 2 * 2
    reduced = [r for r in rows if r["agent"] == "cucb-theory" and r["K"] == "3"]
    assert all(r["n_seeds"] == "2" and "reduced seeds" in r["note"] for r in reduced)
    # The CSV's mean is the mean of the curves' final points (the numbers it plotted).
    curves = np.load(out / "curves.npz")
    row = next(r for r in rows if (r["env"], r["K"], r["agent"]) == ("E4", "2", "cucb-tuned"))
    final = curves["E4_K2_cucb-tuned"][:, -1]
    assert float(row["mean_regret"]) == pytest.approx(final.mean(), rel=1e-12)
    assert float(row["se_regret"]) == pytest.approx(final.std(ddof=1) / np.sqrt(3), rel=1e-9)
