"""The table's course: a tiny table end to end (tiny model, ``tests/fixtures_llm.py``), skipping
finished runs, resuming a killed one, probing each run as it finishes, a kept record standing,
and the slice ledger (runs faked where only the course is tested)."""

from __future__ import annotations

import csv
import json
import math
import sqlite3
from pathlib import Path

import fixtures_llm
import llm_table_fixtures as fx
import numpy as np
import pytest

from paper_figures import _slices as slices
from paper_figures.llm_table import cli, jobs
from paper_figures.llm_table.plan import RunSpec
from paper_figures.llm_table.settings import METHODS, RUN_RECORD
from rpg_llm.launch import read_config

tiny_model_dir = fixtures_llm.tiny_model_dir


def _chain_value_by_sql(run_dir: Path, budget: float) -> float:
    """Mean over rows of the best raw reward within ``budget`` s, straight from SQLite."""
    con = sqlite3.connect(str(run_dir / "buffer.sqlite"))
    try:
        rows = con.execute(
            "SELECT row, exec_time, raw_reward FROM samples WHERE step >= 1 ORDER BY id"
        ).fetchall()
    finally:
        con.close()
    best: dict[int, float] = {}
    spent: dict[int, float] = {}
    for row, t, r in rows:
        spent[row] = spent.get(row, 0.0) + t
        if spent[row] <= budget:
            best[row] = max(best.get(row, -math.inf), r)
    return float(np.mean(list(best.values())))


def _count_by_sql(run_dir: Path, where: str) -> int:
    """Samples of a run's buffer matching the SQL condition ``where``, straight from SQLite."""
    con = sqlite3.connect(str(run_dir / "buffer.sqlite"))
    try:
        return int(con.execute(f"SELECT COUNT(*) FROM samples WHERE {where}").fetchone()[0])
    finally:
        con.close()


def _steps(run_dir: Path) -> list[int]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [m["step"] for m in lines if "sft_step" not in m]  # the SFT warm start logs step 0


def test_tiny_table_end_to_end_then_skips_finished_runs(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "t"
    assert cli.main(fx.cli_base(out, tiny_model_dir)) == 0
    runs = {(m, k): out / "runs" / "churn-auc" / f"{m}-seed{k}" for m in METHODS for k in (0, 1)}
    for (m, k), d in runs.items():
        assert _steps(d) == [1]
        cfg = json.loads((d / "config.json").read_text())
        assert cfg["steps"] == 1 and cfg["batch_size"] == 2 and cfg["model"] == str(tiny_model_dir)
        # the run ran the config the table stored for it (--config FILE)
        assert read_config(d) == read_config(RunSpec("churn-auc", m, k, out).config_path)
    assert {
        json.loads((d / "config.json").read_text())["reward"]["method"] for d in runs.values()
    } == {
        "rpg",
        "vanilla",
    }
    with open(out / "llm_table.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    budget = float(row["budget_s"])
    for m in METHODS:
        vals = [_chain_value_by_sql(runs[(m, k)], budget) for k in (0, 1)]
        assert float(row[f"{m}_mean"]) == pytest.approx(np.mean(vals), abs=1e-6)
    assert (out / "figures" / "churn-auc" / "budget_curves.png").exists()
    assert (out / "llm_table.md").exists() and (out / "llm_table_runs.csv").exists()
    with open(out / "llm_table_edits.csv") as fh:
        edits = {r["arm"]: r for r in csv.DictReader(fh)}
    for m in METHODS:  # 2 runs x 1 step x batch 2 answers per arm
        assert int(edits[m]["answers"]) == 4 and int(edits[m]["runs"]) == 2
        assert int(edits[m]["switched"]) >= int(edits[m]["switched_valid"])
        # valid answers, counted straight from SQLite
        valid = sum(_count_by_sql(runs[(m, k)], "step >= 1 AND status = 'ok'") for k in (0, 1))
        assert int(edits[m]["valid"]) == valid
    md = (out / "llm_table.md").read_text()
    assert "What the answers did to their parents" in md
    seeded = _count_by_sql(runs[("rpg", 0)], "step = 0")
    assert seeded == 0 and "Seeding: no run's buffer was seeded (--no-seed-buffer)" in md
    capsys.readouterr()
    before = {d: (d / "buffer.sqlite").read_bytes() for d in runs.values()}
    assert cli.main(fx.cli_base(out, tiny_model_dir)) == 0
    printed = capsys.readouterr().out
    assert printed.count("skip (finished)") == 4 and "exit " not in printed
    assert all((d / "buffer.sqlite").read_bytes() == b for d, b in before.items())


@pytest.mark.slow
def test_a_tiny_trl_table_runs_and_probes_each_run(tmp_path, tiny_model_dir, capsys):
    """``--engine trl`` end to end: TRL runs (``trl/checkpoint-1``), each probed with TRL's
    checkpoint, and the table, its runs and its probe rows from them."""
    pytest.importorskip("trl")
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir, "--engine", "trl", "--seeds", "0", "--probe", "1")
    argv[argv.index("--run-args") + 1] = "--sandbox subprocess"  # seeded: the probe's parents
    argv += ["--probe-parents", "2"]
    assert cli.main(argv) == 0
    for m in METHODS:
        run = out / "runs" / "churn-auc" / f"{m}-seed0"
        assert json.loads((run / "config.json").read_text())["engine"] == "trl"
        assert (run / "trl" / "checkpoint-1").is_dir() and not any(run.glob("checkpoints/*"))
        probe = json.loads((run / "probe" / "probe.json").read_text())
        assert [p["policy"] for p in probe["policies"]] == ["sft", "trained (TRL step 1)"]
    with open(out / "llm_table.csv") as fh:
        assert [r["engine"] for r in csv.DictReader(fh)] == ["trl"]
    with open(out / "llm_table_probe.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 4  # 2 runs x (sft, trained)


@pytest.mark.slow
def test_a_killed_run_is_resumed(tmp_path, tiny_model_dir, capsys, monkeypatch):
    out = tmp_path / "t"
    argv = [*fx.cli_base(out, tiny_model_dir), "--seeds", "0", "--steps", "2"]
    monkeypatch.setenv("RPG_KILL_AT", "2:stored")  # rpg_llm.run's fault hook: SIGKILL at step 2
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "2 of 2 runs did not finish" in err and len(err.strip().splitlines()) == 1
    runs = [out / "runs" / "churn-auc" / f"{m}-seed0" for m in METHODS]
    con = {}
    for d in runs:
        assert _steps(d) == [1]  # killed after storing step 2's samples, before its metrics
        c = sqlite3.connect(str(d / "buffer.sqlite"))
        con[d] = c.execute("SELECT id, step, row FROM samples ORDER BY id").fetchall()
        c.close()
    monkeypatch.delenv("RPG_KILL_AT")
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count(": resume ->") == 2
    for d in runs:
        assert _steps(d) == [1, 2]
        assert "--resume" in (out / "logs" / "churn-auc" / f"{d.name}.log").read_text()
        c = sqlite3.connect(str(d / "buffer.sqlite"))
        after = c.execute("SELECT id, step, row FROM samples ORDER BY id").fetchall()
        c.close()
        assert after[: len(con[d])] == con[d]  # nothing lost, same ids
        assert sorted((s, r) for _, s, r in after) == [(s, r) for s in (1, 2) for r in (0, 1)]
    assert (out / "llm_table.csv").exists()


def test_probe_runs_after_the_finished_runs_and_feeds_the_table(
    tmp_path, tiny_model_dir, monkeypatch
):
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir, "--probe", "2")
    fx.make_hand_runs(fx.settings(argv), out, fx.HAND)
    probed = []

    def fake_probe(settings, spec, engine="ppo"):
        probed.append((spec.method, spec.seed, settings.probe_answers))
        pol = {"answers": 8, "valid_fraction": 1.0, "mean_time_s": 2.0, "mean_raw_reward": 0.5}
        pols = [pol | {"policy": "sft", "mean_score": 0.1}]
        pols.append(pol | {"policy": "trained (step 1)", "mean_score": 0.2, "mean_time_s": 1.0})
        (spec.run_dir / "probe").mkdir()
        (spec.run_dir / "probe" / "probe.json").write_text(json.dumps({"policies": pols}))
        return 0

    monkeypatch.setattr(jobs, "probe_run", fake_probe)
    assert cli.main(argv) == 0
    assert sorted(probed) == [("rpg", 0, 2), ("rpg", 1, 2), ("vanilla", 0, 2), ("vanilla", 1, 2)]
    with open(out / "llm_table_probe.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 8 and {r["mean_time_s"] for r in rows} == {"2", "1"}
    assert (out / "llm_table_probe.png").exists()


def test_each_run_is_probed_when_it_finishes_and_its_kept_record_stands(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    """Runs and probes alternate (run, its probe, next run); a copy of only RUN_RECORD of each
    folder (no checkpoint, no weights) is skipped as finished and probed by a later slice, which
    starts nothing and writes the same table and probe CSV."""
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir, "--probe", "2")
    events = []

    def fake_run(spec, cfg, state):
        assert state == "new" and cfg.seed == spec.seed and cfg.method == spec.method
        events.append(("run", spec.method, spec.seed))
        fx.make_run(spec.run_dir, cfg.to_dict(), fx.HAND[spec.method, spec.seed])
        checkpoint = spec.run_dir / "checkpoints" / f"step_{2:06d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "trainer.pt").write_bytes(b"weights")
        return 0, 0.0

    def fake_probe_cli(cmd):  # the probe CLI: writes what rpg_llm.probe writes
        run_dir = Path(cmd[cmd.index("rpg_llm.probe") + 1])
        events.append(("probe", run_dir.name))
        pol = {"answers": 8, "valid_fraction": 1.0, "mean_time_s": 2.0, "mean_raw_reward": 0.5}
        pol["mean_score"] = 0.1
        pols = [pol | {"policy": "sft"}, pol | {"policy": "trained (step 2)", "mean_time_s": 1.0}]
        record = {"answers_per_parent": 2, "parent_ids": [1, 2, 3, 4], "trained_step": 2}
        (run_dir / "probe").mkdir()
        (run_dir / "probe" / "probe.json").write_text(json.dumps(record | {"policies": pols}))
        answers = "policy,parent_id,answer,status,score\nsft,1,0,ok,0.1\n"
        answers += "trained (step 2),1,0,ok,0.1\n"
        (run_dir / "probe" / "probe.csv").write_text(answers)
        return 0

    monkeypatch.setattr(jobs, "run_one", fake_run)
    monkeypatch.setattr(jobs, "call", lambda cmd, log: fake_probe_cli(cmd))
    assert cli.main(argv) == 0
    assert events == [
        e
        for m, k in (("rpg", 0), ("vanilla", 0), ("rpg", 1), ("vanilla", 1))
        for e in (("run", m, k), ("probe", f"{m}-seed{k}"))
    ]
    (row,) = slices.read_slices(out / slices.SLICES_CSV)  # the slice that made the table
    names = [f"churn-auc/{m}-seed{k}" for k in (0, 1) for m in ("rpg", "vanilla")]
    assert (row.runs, row.probes) == (tuple(names), tuple(names))
    assert (row.jobs, row.outcome) == (1, "complete")
    assert row.wall_s >= 0 and row.load_max >= row.load_mean >= 0
    assert "They started 4 of the table's 4 runs." in (out / "llm_table.md").read_text()
    kept = tmp_path / "kept"
    for f in out.glob("runs/*/*/*"):
        rel = f.relative_to(out)
        if Path(*rel.parts[3:]).as_posix() in RUN_RECORD or rel.parts[3] in ("probe", "logs"):
            for g in [f] if f.is_file() else f.iterdir():
                target = kept / g.relative_to(out)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(g.read_bytes())
    assert not list(kept.glob("runs/*/*/checkpoints"))
    monkeypatch.setattr(jobs, "run_one", lambda *a: pytest.fail(f"ran {a[0]} again"))
    monkeypatch.setattr(jobs, "call", lambda cmd, log: pytest.fail(f"started {cmd}"))
    jobs_given = []
    real_run_jobs = jobs.run_jobs
    monkeypatch.setattr(
        jobs,
        "run_jobs",
        lambda work, *a, **kw: jobs_given.append((work, kw)) or real_run_jobs(work, *a, **kw),
    )
    capsys.readouterr()
    assert cli.main([*argv[:1], str(kept), *argv[2:]]) == 0
    printed = capsys.readouterr().out
    assert printed.count("probe skip (current)") == 4 and "probe exit" not in printed
    # kept records are no jobs and warm no task: they say nothing of this machine's caches
    assert jobs_given == [([], {"warm": []})]
    assert not (kept / slices.SLICES_CSV).exists()  # a slice that started nothing is no row
    for name in ("llm_table.csv", "llm_table_probe.csv"):
        assert (kept / name).read_text() == (out / name).read_text()


def test_a_stopped_slice_is_recorded_as_interrupted(tmp_path, tiny_model_dir, monkeypatch):
    """Ctrl-C during the second run: exit 130, and the ledger's row names both runs started."""
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir, "--probe", "0")

    def fake_run(spec, cfg, state):
        if spec.method == "vanilla":
            raise KeyboardInterrupt
        fx.make_run(spec.run_dir, cfg.to_dict(), fx.HAND[spec.method, spec.seed])
        return 0, 0.0

    monkeypatch.setattr(jobs, "run_one", fake_run)
    assert cli.main(argv) == 130
    (row,) = slices.read_slices(out / slices.SLICES_CSV)
    assert row.runs == ("churn-auc/rpg-seed0", "churn-auc/vanilla-seed0") and not row.probes
    assert row.outcome == "interrupted"
