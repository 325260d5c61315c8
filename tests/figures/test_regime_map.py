"""The regime map (paper_figures.regime_map): the budget rule, the reward rate, the prediction's
verdict, the write-once protocol and the report from finished tables, by hand."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from paper_figures import regime_map as rm
from paper_figures.regime_map import MapRow


def test_budget_is_five_seed_medians_rounded_up_and_at_least_ten():
    assert rm.budget_from_prior([2.0, 3.1, 40.0]) == 16.0  # ceil(5 * 3.1)
    assert rm.budget_from_prior([1.0, 1.5, float("nan")]) == 10.0  # 6.25 -> the floor
    assert rm.budget_from_prior([12.2, 20.0]) == 81.0  # ceil(5 * 16.1)
    with pytest.raises(ValueError, match="at least one valid seed"):
        rm.budget_from_prior([float("nan"), 0.0])


def test_reward_rate_counts_invalid_time_and_leaves_the_seeds_out():
    samples = pd.DataFrame(
        {
            "step": [0, 1, 1, 2, 2, 3],
            "status": ["ok", "ok", "timeout", "ok", "error", "infra"],
            "raw_reward": [0.9, 0.5, -10.0, 0.7, -10.0, 0.0],
            "time_s": [100.0, 2.0, 60.0, 3.0, 0.0, 5.0],
        }
    )
    # the error answer's 0 s counts at the 0.1 s floor; the infra row and the seed not at all
    assert rm.reward_rate(samples) == pytest.approx((0.5 + 0.7) / 65.1)
    assert math.isnan(rm.reward_rate(samples.iloc[:1]))


def _row(task, prior, pct):
    return MapRow(task, prior, 10.0, (0.5, 0.01), (0.5, 0.01), pct, 0.1, 0.1)


def test_the_prediction_needs_a_negative_trend_and_rpg_ahead_where_the_prior_is_not_positive():
    assert rm.prediction_held([_row("a", 0.1, 1.0)])[1] is None
    rho, held, text = rm.prediction_held(
        [_row("a", -0.5, 4.0), _row("b", 0.0, 1.0), _row("c", 0.6, -3.0)]
    )
    assert rho == pytest.approx(-1.0) and held is True and "held" in text
    rho, held, _ = rm.prediction_held(
        [_row("a", -0.5, 4.0), _row("b", 0.0, -1.0), _row("c", 0.6, -3.0)]
    )
    assert rho == pytest.approx(-1.0) and held is False  # b has prior 0 and RPG behind
    assert (
        rm.prediction_held([_row("a", -0.5, -4.0), _row("b", 0.1, 1.0), _row("c", 0.6, 3.0)])[1]
        is False
    )


def test_the_protocol_is_written_once_from_the_priors(tmp_path):
    priors = tmp_path / "priors"
    priors.mkdir()
    summary = {}
    for task in ("credit-default-auc", "attrition-logloss"):
        rows = pd.DataFrame(
            {
                "task": task,
                "baseline": ["family", "family(MODEL=hgb)", "not-a-seed"],
                "status": ["ok", "ok", "ok"],
                "cpu_s": [2.0, 4.0, 100.0],
                "score": [0.9, 0.8, 0.7],
            }
        )
        rows.to_csv(priors / f"{task}.csv", index=False)
        summary[task] = {"spearman": -0.5}
    (priors / "priors.json").write_text(json.dumps(summary))
    path = tmp_path / "protocol.json"
    tasks = ("credit-default-auc", "attrition-logloss")
    protocol = rm.write_protocol(priors, path, tasks)
    entries = {e["task"]: e for e in protocol["tasks"]}
    # credit-default-auc's seeds are family and family(MODEL=hgb): median 3 s -> 15 s
    assert entries["credit-default-auc"]["exec_budget_s"] == 15.0
    # attrition-logloss's default is hgb, so family(MODEL=hgb) is not one of its seeds: 5 x 2 s
    assert entries["attrition-logloss"]["exec_budget_s"] == 10.0
    assert rm.read_protocol(path)["prediction"] == rm.PREDICTION
    with pytest.raises(ValueError, match="written once"):
        rm.write_protocol(priors, path, tasks)
    with pytest.raises(ValueError, match="no prior for fine-foods-auc"):
        rm.write_protocol(priors, tmp_path / "other.json", ("fine-foods-auc",))


def test_report_reads_finished_tables_and_cli_errors_exit_2(tmp_path, capsys):
    protocol = {
        "tasks": [
            {"task": "a", "prior": {"spearman": -0.4}, "exec_budget_s": 12.0},
            {"task": "b", "prior": {"spearman": 0.3}, "exec_budget_s": 20.0},
        ],
        "run_flags": rm.RUN_FLAGS,
    }
    path = tmp_path / "protocol.json"
    path.write_text(json.dumps(protocol))
    out = tmp_path / "out"
    run_dir = out / "a" / "runs" / "rpg-seed0"
    run_dir.mkdir(parents=True)
    pd.DataFrame(
        {"step": [1, 1], "status": ["ok", "ok"], "raw_reward": [0.6, 0.4], "time_s": [4.0, 6.0]}
    ).to_csv(run_dir / "samples.csv", index=False)
    pd.DataFrame(
        [
            {
                "task": "a",
                "rpg_mean": 0.6,
                "rpg_se": 0.02,
                "vanilla_mean": 0.5,
                "vanilla_se": 0.01,
                "pct_improvement": 20.0,
                "rpg_n": 2,
                "vanilla_n": 2,
            }
        ]
    ).to_csv(out / "a" / "llm_table.csv", index=False)
    pd.DataFrame([{"method": "rpg", "seed": 0, "run_dir": str(run_dir)}]).to_csv(
        out / "a" / "llm_table_runs.csv", index=False
    )
    # b's table has one vanilla run of two: not counted yet
    (out / "b").mkdir()
    pd.DataFrame([{"task": "b", "rpg_n": 2, "vanilla_n": 1}]).to_csv(
        out / "b" / "llm_table.csv", index=False
    )
    pd.DataFrame([{"method": "rpg", "seed": 0, "run_dir": str(run_dir)}]).to_csv(
        out / "b" / "llm_table_runs.csv", index=False
    )
    rows = rm.map_rows(out, protocol)
    assert [r.task for r in rows] == ["a"]
    assert rows[0].rpg_rate == pytest.approx(0.1) and math.isnan(rows[0].vanilla_rate)
    assert rows[0].prior == -0.4 and rows[0].pct_improvement == 20.0
    assert rm.main(["report", "--out", str(out), "--protocol", str(path)]) == 0
    assert "| a | -0.40 | 12 |" in capsys.readouterr().out
    assert (out / "regime_map.png").is_file() and (out / "regime_map.csv").is_file()
    for argv, needle in (
        (["run", "--protocol", str(path), "--tasks", "zz"], "not in the protocol: zz"),
        (["run", "--protocol", str(tmp_path / "none.json")], "no protocol file"),
        (["report", "--out", str(tmp_path / "empty"), "--protocol", str(path)], "no finished"),
        (["run", "--protocol", str(path), "--jobs", "0"], "--jobs must be >= 1"),
    ):
        assert rm.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
