"""Budget curves against values computed by hand on a small hand-made run folder."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from paper_figures.budget_curves import budget_curves, curve, main, read_chains
from rpg_llm.loop.buffer import Sample, SampleBuffer


@pytest.fixture
def saved_figures(monkeypatch):
    """The figures :func:`budget_curves` saves, in order (they are still written)."""
    import paper_figures.budget_curves as bc

    figs = []
    real_save = bc.save_figure
    monkeypatch.setattr(bc, "save_figure", lambda fig, *a: figs.append(fig) or real_save(fig, *a))
    return figs


def _run(tmp_path, name, method, rows):
    """rows: {row: [(exec_time, raw_reward), ...]} for steps 1, 2, ..."""
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"method": method, "seeded": True}))
    buf = SampleBuffer(d / "buffer.sqlite")
    samples = [
        Sample(name, 0, 0, "t", None, "h", "seed", "ok", 5.0, 5.0, 100.0, "ok", 0.0)
    ]  # a seed sample: never part of a chain
    for row, seq in rows.items():
        for k, (t, r) in enumerate(seq):
            samples.append(Sample(name, k + 1, row, "t", None, "h", "c", "o", r, r, t, "ok", 0.0))
    buf.add_many(samples)
    buf.close()
    return d


def test_chains_and_curve_by_hand(tmp_path):
    d = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.2), (2.0, 0.1), (1.0, 0.5)], 1: [(2.0, 0.4)]})
    chains = read_chains(d)
    assert len(chains) == 2
    np.testing.assert_allclose(chains[0].times, [1.0, 3.0, 4.0])
    np.testing.assert_allclose(chains[0].best, [0.2, 0.2, 0.5])
    budgets = np.array([0.5, 1.0, 2.5, 4.0, 10.0])
    res = curve(chains, budgets)
    # chain 0: nan, 0.2, 0.2, 0.5, 0.5 ; chain 1: nan, nan, 0.4, 0.4, 0.4
    np.testing.assert_allclose(res["mean_best"], [np.nan, 0.2, 0.3, 0.45, 0.45])
    np.testing.assert_array_equal(res["n_chains"], [0, 1, 2, 2, 2])
    np.testing.assert_array_equal(res["n_active"], [2, 2, 1, 1, 0])
    # s.e. of {0.2, 0.4}: sd = sqrt(0.02) -> se = 0.1
    assert res["se"][2] == pytest.approx(0.1)
    assert math.isnan(res["se"][1])


def test_two_arms_on_one_plot(tmp_path):
    a = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.2)], 1: [(2.0, 0.4)]})
    b = _run(tmp_path, "b", "vanilla", {0: [(3.0, 0.6)], 1: [(1.0, 0.1)]})
    png, pdf, csv = budget_curves([a, b], tmp_path / "out", points=5)
    assert png.stat().st_size > 0 and pdf.stat().st_size > 0
    lines = csv.read_text().splitlines()
    assert lines[0] == "label,budget_s,mean_best,se,n_chains,n_active"
    labels = {line.split(",")[0] for line in lines[1:]}
    assert labels == {"rpg (seeded)", "vanilla (seeded)"}
    last = [line.split(",") for line in lines[1:] if line.startswith("vanilla")][-1]
    assert float(last[1]) == pytest.approx(3.0) and float(last[2]) == pytest.approx(0.35)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a run folder" in err and len(err.splitlines()) == 1


def test_run_writes_the_same_curve_data_without_paper_figures(tmp_path):
    """rpg_llm.loop.budget.write_budget_csv (what python -m rpg_llm.run writes) = the plot's CSV."""
    from rpg_llm.loop.budget import write_budget_csv

    a = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.2), (2.0, 0.1)], 1: [(2.0, 0.4)]})
    _, _, csv = budget_curves([a], tmp_path / "plot", points=7)
    mine = write_budget_csv([a], tmp_path / "data" / "budget_curves.csv", points=7)
    assert mine.read_text().splitlines() == csv.read_text().splitlines()
    assert len(mine.read_text().splitlines()) == 1 + 7


def _cli_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m paper_figures.budget_curves: ")
    return err


def test_cli_out_that_is_a_file_exits_2(tmp_path, capsys):
    a = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.2)]})
    bad = tmp_path / "bad.csv"
    bad.write_text("x\n")
    assert main([str(a), "--out", str(bad)]) == 2
    err = _cli_error(capsys)
    assert f"--out {bad}" in err and "not a folder" in err
    assert bad.read_text() == "x\n" and not (a / "figures").exists()


def test_cli_huge_points_exits_2(tmp_path, capsys):
    a = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.2)]})
    assert main([str(a), "--points", "99999999999"]) == 2
    err = _cli_error(capsys)
    assert "--points" in err and "99999999999" in err
    assert not (a / "figures").exists()


def test_cli_repeated_run_folder_exits_2(tmp_path, capsys):
    a = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.2)]})
    assert main([str(a), str(a), "--out", str(tmp_path / "o")]) == 2
    err = _cli_error(capsys)
    assert f"RUN_DIR {a} is given twice" in err
    assert not (tmp_path / "o").exists()


def test_the_figure_shows_how_many_chains_each_mean_averages(tmp_path, saved_figures):
    figs = saved_figures
    # chain 1 gets its first value at 2 s: the mean drops from 0.9 to 0.5 as it enters
    d = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.9)], 1: [(2.0, 0.1)]})
    budget_curves([d], tmp_path / "out", points=5)  # budgets 0, 0.5, 1, 1.5, 2
    top, counts = figs[0].axes
    np.testing.assert_allclose(top.lines[0].get_ydata(), [np.nan, np.nan, 0.9, 0.9, 0.5])
    np.testing.assert_array_equal(counts.lines[0].get_ydata(), [0, 0, 1, 1, 2])
    assert counts.get_ylabel() == "chains in\nthe mean"


def test_an_early_invalid_sample_does_not_stretch_the_axis(tmp_path, saved_figures):
    figs = saved_figures
    # chain 1 is invalid (-10) until 3 s: means 0.8, then (0.8 - 10) / 2 = -4.6, then 0.85
    d = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.8)], 1: [(2.0, -10.0), (1.0, 0.9)]})
    budget_curves([d], tmp_path / "out", points=4)  # budgets 0, 1, 2, 3
    top = figs[0].axes[0]
    np.testing.assert_allclose(top.lines[0].get_ydata(), [np.nan, 0.8, -4.6, 0.85])
    low, high = top.get_ylim()
    # s.e. at 3 s: sd of {0.8, 0.9} / sqrt(2) = 0.05 -> band 0.8 .. 0.9 plus the 5 % pad
    assert low == pytest.approx(0.8 - 0.005) and high == pytest.approx(0.9 + 0.005)
    assert "clipped below" in top.get_title()


def test_all_valid_curves_keep_matplotlib_limits(tmp_path, saved_figures):
    figs = saved_figures
    d = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.8)], 1: [(2.0, 0.6)]})
    budget_curves([d], tmp_path / "out", points=4)
    assert "clipped" not in figs[0].axes[0].get_title()


def test_valid_limits_by_hand():
    from paper_figures.budget_curves import valid_limits

    nan = np.nan
    # two chains: [nan, -10, 0.5] and [nan, 0.3, 0.7] -> means nan, -4.85, 0.6; s.e. 5.15, 0.1
    res = {
        "mean_best": np.array([nan, -4.85, 0.6]),
        "se": np.array([nan, 5.15, 0.1]),
        "n_invalid": np.array([0, 1, 0]),
    }
    limits = valid_limits([res])
    assert limits is not None
    low, high = limits
    # only the last budget has no chain at -10: band 0.5 .. 0.7, padded by 0.01
    assert (low, high) == (pytest.approx(0.49), pytest.approx(0.71))
    head = {k: v[:2] for k, v in res.items()}
    assert valid_limits([head]) is None


def test_curve_counts_the_chains_still_at_the_invalid_reward(tmp_path):
    d = _run(tmp_path, "a", "rpg", {0: [(1.0, 0.8)], 1: [(2.0, -10.0), (1.0, 0.9)]})
    res = curve(read_chains(d), np.array([0.0, 1.0, 2.0, 3.0]))
    # chain 1 is at -10 from 2 s until its valid sample at 3 s; chain 0 never is
    np.testing.assert_array_equal(res["n_invalid"], [0, 0, 1, 0])


@pytest.mark.parametrize(
    ("label", "color", "style"),
    [
        ("rpg (seeded)", "tab:red", "-"),
        ("vanilla (unseeded)", "tab:blue", "--"),
        ("fixed-lambda 0.000277778/s (seeded)", "tab:green", ":"),
        ("rpg, parents by raw (seeded)", "tab:orange", "-"),
        ("vanilla, parents by rate (seeded)", "tab:purple", "--"),
        ("rpg, r = percentile (seeded)", "tab:red", "-"),
        ("my-arm (seeded)", None, "-"),
    ],
)
def test_each_table_arm_has_its_own_curve_style(label, color, style):
    from paper_figures.budget_curves import arm_style

    assert arm_style(label) == (color, style)
