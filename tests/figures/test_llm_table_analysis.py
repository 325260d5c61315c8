"""``paper_figures.llm_table.analysis``: what finished runs did, from hand-made run folders: step
means, step time, edits against their parents, probe rows (and their figures), raw-reward labels."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from paper_figures.llm_table import analysis, report
from paper_figures.llm_table.markdown import edits_markdown
from paper_figures.llm_table.plan import RunSpec
from rpg_core.cli import UsageError
from rpg_llm.config import LoopConfig
from rpg_llm.loop.buffer import Sample, SampleBuffer
from rpg_llm.loop.runfolder import RunFolder


def test_step_means_by_hand(tmp_path):
    def run(name, lines):
        folder = RunFolder(tmp_path / name)
        folder.create({"task": "churn-auc"})
        folder.append_metrics({"sft/loss": 1.0, "sft_step": 1, "step": 0})  # not a step
        for line in lines:
            folder.append_metrics(line)
        return folder.root

    def m(step, t, r, v):
        return {
            "step": step,
            "valid_mean_time_s": t,
            "valid_mean_raw_reward": r,
            "valid_fraction": v,
        }

    a0 = run("a0", [m(1, 2.0, 0.5, 1.0), m(2, 4.0, 0.7, 0.5)])
    a1 = run("a1", [m(1, 3.0, 0.3, 0.5), m(2, None, None, 0.0)])  # step 2: nothing valid
    b0 = run("b0", [m(1, 1.0, 0.2, 1.0)])
    rows = analysis.step_means("churn-auc", {"rpg": [a0, a1], "vanilla": [b0]})
    got = {(r["arm"], r["step"]): r for r in rows}
    assert sorted(got) == [("rpg", 1), ("rpg", 2), ("vanilla", 1)]
    assert float(got["rpg", 1]["valid_mean_time_s"]) == pytest.approx(2.5)
    assert float(got["rpg", 1]["valid_mean_raw_reward"]) == pytest.approx(0.4)
    assert float(got["rpg", 1]["valid_fraction"]) == pytest.approx(0.75)
    assert got["rpg", 2]["n_runs"] == 2 and float(got["rpg", 2]["valid_mean_time_s"]) == 4.0
    assert float(got["rpg", 2]["valid_fraction"]) == pytest.approx(0.25)
    assert got["vanilla", 1]["n_runs"] == 1
    png, pdf = report.plot_steps("churn-auc", rows, tmp_path / "fig")
    assert png.stat().st_size > 0 and pdf.exists()


def test_run_step_seconds_by_hand(tmp_path):
    """Steps 1-3 once each, step 2 again after a resume (its last record counts); SFT lines and
    a record without ``step_seconds`` add nothing: 10.5 + 4 + 2.25 s."""
    folder = RunFolder(tmp_path / "r")
    folder.create({"task": "churn-auc"})
    assert analysis.run_step_seconds(folder.root) == 0.0
    for line in (
        {"sft/loss": 1.0, "sft_step": 1, "step": 0, "step_seconds": 99.0},
        {"step": 1, "step_seconds": 10.5},
        {"step": 2, "step_seconds": 3.0},
        {"step": 2, "step_seconds": 4.0},
        {"step": 3, "step_seconds": 2.25},
        {"step": 4},
    ):
        folder.append_metrics(line)
    assert analysis.run_step_seconds(folder.root) == 16.75


def test_edit_rows_count_switches_dead_edits_and_time_ratios_on_a_hand_made_buffer(tmp_path):
    def code(model, lr):
        return (
            f'MODEL = "{model}"  # one of "hgb", "rf", "ridge"\n'
            f"LEARNING_RATE = {lr}  # hgb: shrinkage\nprint(MODEL, LEARNING_RATE)\n"
        )

    def sample(step, row, parent, src, raw, t, status="ok"):
        return Sample(
            run="r", step=step, row=row, task="diamonds-price-rmse", parent_id=parent,
            prompt_hash="h", code=src, outcome_text="", score=None, raw_reward=raw,
            exec_time=t, status=status, created_at=0.0,
        )  # fmt: skip

    def run(name, samples):
        folder = RunFolder(tmp_path / name)
        folder.create({"task": "diamonds-price-rmse"})
        with SampleBuffer(folder.buffer_path) as buf:
            buf.add_many(samples)
        return folder.root

    a = run(
        "a",
        [
            sample(0, 0, None, code("ridge", 0.1), 0.3, 1.0),  # id 1: the seed parent
            sample(1, 0, 1, code("hgb", 0.1), 0.9, 4.0),  # switch, better, 4x the time
            sample(1, 1, 1, code("ridge", 0.2), 0.3, 1.0),  # dead knob: same raw, same time
            sample(2, 0, 2, code("rf", 0.2), -10.0, 2.0, "error"),  # switch, invalid
            sample(2, 1, None, code("rf", 0.1), 0.5, 1.0),  # base prompt: no parent
            sample(
                3, 0, 2, 'MODEL = "xgb"  # one of "hgb", "rf", "ridge"\n', 0.9, 4.0
            ),  # undeclared
            sample(3, 1, 2, "print(1\n", -10.0, 0.1, "error"),  # does not parse: no switch
            sample(3, 2, 2, code("rf", 0.1), 0.0, 0.0, "infra"),  # the machine failed: left out
        ],
    )
    b = run("b", [sample(0, 0, None, code("hgb", 0.1), 0.9, 4.0)])  # seeds only: no answer
    rows = {
        r["arm"]: r for r in analysis.edit_rows("diamonds-price-rmse", {"rpg": [a], "vanilla": [b]})
    }
    got = {k: rows["rpg"][k] for k in analysis.EDIT_FIELDS[2:-1]}
    assert got == {
        "runs": 1, "answers": 6, "valid": 4, "switched": 3, "switched_valid": 2,
        "same_as_parent": 2, "better_than_parent": 1,
    }  # fmt: skip
    # valid pairs with a valid parent: 4 / 1, 1 / 1 and 4 / 4 -> geometric mean 4 ** (1 / 3)
    assert float(rows["rpg"]["time_ratio_geo_mean"]) == pytest.approx(4 ** (1 / 3), rel=1e-5)
    assert rows["vanilla"]["answers"] == 0 and rows["vanilla"]["time_ratio_geo_mean"] == "nan"
    md = edits_markdown(list(rows.values()))
    assert "| diamonds-price-rmse | rpg | 1 | 6 | 4 | 3 (2) | 2 | 1 | 1.5874 |" in md
    with pytest.raises(ValueError, match=r"missing/buffer\.sqlite: no sample buffer there"):
        analysis.edit_rows("diamonds-price-rmse", {"rpg": [tmp_path / "missing"]})


def test_probe_rows_and_figure_from_hand_made_probes(tmp_path):
    def write(arm, seed, sft, trained, **record):
        spec = RunSpec("churn-auc", arm, seed, tmp_path)
        (spec.run_dir / "probe").mkdir(parents=True)
        pols = [
            {"policy": "sft", "answers": 8, "valid_fraction": sft[0], "mean_time_s": sft[1],
             "mean_raw_reward": sft[2], "mean_score": None},
            {"policy": "trained (step 3)", "answers": 8, "valid_fraction": trained[0],
             "mean_time_s": trained[1], "mean_raw_reward": trained[2], "mean_score": 0.5},
        ]  # fmt: skip
        record["policies"] = pols
        (spec.run_dir / "probe" / "probe.json").write_text(json.dumps(record))
        return spec

    specs = [write("rpg", 0, (1.0, 4.0, 0.5), (1.0, 3.0, 0.6))]  # step from the label
    specs.append(write("vanilla", 0, (0.5, 2.0, 0.4), (0.75, 2.5, 0.4), trained_step=5))
    specs.append(RunSpec("churn-auc", "vanilla", 1, tmp_path))  # not probed: no rows
    # rpg seed 0's answers: 2 parents x 2 draws; one draw changed its score, one its status
    csv_rows = ["policy,parent_id,answer,status,score"]
    csv_rows += ["sft,5,0,ok,0.5", "sft,5,1,ok,0.6", "sft,7,0,error,", "sft,7,1,ok,0.7"]
    csv_rows += ["trained (step 3),5,0,ok,0.5", "trained (step 3),5,1,ok,0.65"]
    csv_rows += ["trained (step 3),7,0,ok,0.4", "trained (step 3),7,1,ok,0.7"]
    (specs[0].run_dir / "probe" / "probe.csv").write_text("\n".join(csv_rows) + "\n")
    rows = analysis.probe_rows(specs)
    assert [r["changed_outcomes"] for r in rows] == ["", "2/4", "", ""]  # vanilla: no probe.csv
    (specs[1].run_dir / "probe" / "probe.csv").write_text("\n".join(csv_rows[:-1]) + "\n")
    with pytest.raises(UsageError, match="cannot be read .*not paired"):
        analysis.probe_rows(specs)
    (specs[1].run_dir / "probe" / "probe.csv").unlink()
    assert [(r["arm"], r["policy"]) for r in rows] == [
        ("rpg", "sft"), ("rpg", "trained"), ("vanilla", "sft"), ("vanilla", "trained")
    ]  # fmt: skip
    assert [r["trained_step"] for r in rows] == ["", "3", "", "5"]
    assert rows[1]["mean_time_s"] == "3" and rows[0]["mean_score"] == "nan"
    assert float(rows[3]["valid_fraction"]) - float(rows[2]["valid_fraction"]) == 0.25
    png, pdf = report.plot_probe(rows, tmp_path)
    assert png.name == "llm_table_probe.png" and png.stat().st_size > 0 and pdf.exists()
    for bad in ({"trained_step": True}, {"trained_step": 2.5}, {}):
        write("rpg", 1, (1.0, 4.0, 0.5), (1.0, 3.0, 0.6), **bad)
        path = tmp_path / "runs" / "churn-auc" / "rpg-seed1" / "probe" / "probe.json"
        record = json.loads(path.read_text())
        if not bad:  # neither trained_step nor a "(step N)" label
            record["policies"][1]["policy"] = "trained"
            path.write_text(json.dumps(record))
        with pytest.raises(UsageError, match=f"{path} cannot be read"):
            analysis.probe_rows([RunSpec("churn-auc", "rpg", 1, tmp_path)])
        path.unlink()
        path.parent.rmdir()
    for key in ("mean_time_s", "answers"):  # a policy entry without one of its fields
        write("rpg", 1, (1.0, 4.0, 0.5), (1.0, 3.0, 0.6), trained_step=2)
        path = tmp_path / "runs" / "churn-auc" / "rpg-seed1" / "probe" / "probe.json"
        record = json.loads(path.read_text())
        del record["policies"][0][key]
        path.write_text(json.dumps(record))
        with pytest.raises(UsageError, match=f"{path} cannot be read .*{key}"):
            analysis.probe_rows([RunSpec("churn-auc", "rpg", 1, tmp_path)])
        path.unlink()
        path.parent.rmdir()


def test_the_raw_reward_label_follows_the_runs_raw_reward():
    cfg = LoopConfig()
    pct = replace(cfg, reward=replace(cfg.reward, raw_reward="percentile"))
    assert analysis.raw_reward_label("churn-auc", pct) == "leaderboard percentile"
    assert analysis.raw_reward_label("no-such-task", cfg) == "raw reward"
