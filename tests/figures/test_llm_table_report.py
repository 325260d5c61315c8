"""``paper_figures.llm_table.report`` and ``markdown``: the table's files from finished (hand-made)
run folders, with values worked out by hand: at the common final budget, at an execution budget,
five arms and the ablation, a task without some arms, the engine named, and the texts."""

from __future__ import annotations

import csv
from dataclasses import replace
from types import SimpleNamespace

import fixtures_llm
import llm_table_fixtures as fx
import pytest

from paper_figures.llm_table import cli, plan
from paper_figures.llm_table.markdown import budget_text, machine_time_text, protocol_text
from paper_figures.llm_table.settings import QUICK, TUNING_NOTE
from rpg_core.cli import UsageError

tiny_model_dir = fixtures_llm.tiny_model_dir


def test_table_only_writes_the_hand_values(tmp_path, tiny_model_dir, capsys):
    """The CLI's table from finished (hand-made) run folders: CSV, markdown, figure."""
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir)
    s = fx.settings(argv)
    for (m, k), rows in fx.HAND.items():
        spec = plan.RunSpec("churn-auc", m, k, out)
        cfg = fx.config(s, spec)
        fx.make_run(spec.run_dir, cfg.to_dict(), rows, steps=1)
        assert plan.run_state(spec, cfg).state == "finished"
    assert cli.main([*argv, "--table-only"]) == 0
    with open(out / "llm_table.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    assert float(row["budget_s"]) == fx.HAND_BUDGET
    assert float(row["rpg_mean"]) == pytest.approx(fx.HAND_RPG, rel=1e-5)
    assert float(row["rpg_se"]) == pytest.approx(fx.HAND_RPG_SE, rel=1e-5)
    assert float(row["vanilla_mean"]) == pytest.approx(fx.HAND_VAN, rel=1e-5)
    assert float(row["pct_improvement"]) == pytest.approx(fx.HAND_PCT, rel=1e-5)
    assert (row["rpg_n"], row["vanilla_n"]) == ("2", "2")
    with open(out / "llm_table_runs.csv") as fh:
        assert [float(r["step_seconds"]) for r in csv.DictReader(fh)] == [100.0] * 4
    md = (out / "llm_table.md").read_text()
    assert "0.750 ± 0.100" in md and "0.325 ± 0.025" in md and "+130.8" in md
    assert "training steps (generation, execution, update" in md
    assert "0.11 h over 4 runs, 100-100 s per run" in md  # 400 s
    assert TUNING_NOTE in md
    assert "extra run flags --time cpu --no-seed-buffer --sandbox subprocess." in md
    assert "model " + str(tiny_model_dir) in md and "action run default" in md
    assert (out / "figures" / "churn-auc" / "budget_curves.png").stat().st_size > 0
    assert (out / "figures" / "churn-auc" / "budget_curves.pdf").stat().st_size > 0
    assert (out / "llm_table.png").stat().st_size > 0 and (out / "llm_table.pdf").exists()
    assert "skip (finished)" in capsys.readouterr().out


# At an execution budget of 5 s (runs of at most 2 steps, all chains read at 5 s): B = 5;
# rpg0 (0.7 + 0.6)/2, rpg1 (0.8 + 0.9)/2 -> 0.75 +- 0.1 as above; vanilla0's row 0 has no
# sample within 5 s (its first took 6 s): left out, 0.3; vanilla1 (0.5 + 0.1)/2 = 0.3
# -> 0.3 +- 0; % improvement 100 * 0.45 / 0.3 = 150
def test_table_at_the_execution_budget_by_hand(tmp_path, tiny_model_dir):
    out = tmp_path / "t"
    argv = [*fx.cli_base(out, tiny_model_dir), "--exec-budget", "5", "--steps", "2"]
    s = fx.settings(argv)
    cfg = plan.task_config(s, "churn-auc")
    assert cfg.exec_budget_s == 5.0 and cfg.steps == 2  # the runs end at the cap or the budget
    fx.make_hand_runs(s, out, fx.HAND, steps=None)
    assert cli.main([*argv, "--table-only"]) == 0
    with open(out / "llm_table.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    assert float(row["budget_s"]) == 5.0
    assert float(row["rpg_mean"]) == pytest.approx(0.75, rel=1e-5)
    assert float(row["vanilla_mean"]) == pytest.approx(0.3, rel=1e-5)
    assert float(row["vanilla_se"]) == pytest.approx(0.0, abs=1e-9)
    assert float(row["pct_improvement"]) == pytest.approx(150.0, rel=1e-5)
    with open(out / "llm_table_runs.csv") as fh:
        n = {(r["method"], r["seed"]): int(r["n_chains"]) for r in csv.DictReader(fh)}
    assert n[("vanilla", "0")] == 1 and sum(n.values()) == 7
    with open(out / "llm_table_runs.csv") as fh:  # T_run rpg0 5, rpg1 4, vanilla0 12, 1 7
        short = {(r["method"], r["seed"]): int(r["n_ended_before_b"]) for r in csv.DictReader(fh)}
    # chains ending before 5 s: rpg0 row 1 (2 s), rpg1 both (4, 3 s), vanilla0 row 1 (3 s),
    # vanilla1 row 0 (2 s)
    assert short == {("rpg", "0"): 1, ("rpg", "1"): 2, ("vanilla", "0"): 1, ("vanilla", "1"): 1}
    md = (out / "llm_table.md").read_text()
    assert "B = 5 CPU-s per chain" in md and "churn-auc vanilla 1 of 4" in md
    assert "step cap first; read at their end): churn-auc rpg 3 of 4" in md


def test_table_of_five_arms_and_the_ablation_by_hand(tmp_path, tiny_model_dir):
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir, "--arms", fx.ALL_ARMS, "--fixed-lambda", "0.01")
    fx.make_hand_runs(fx.settings(argv), out, fx.HAND | fx.ARM_HAND)
    assert cli.main([*argv, "--table-only"]) == 0
    with open(out / "llm_table.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    assert float(row["budget_s"]) == fx.HAND_BUDGET
    assert float(row["fixed-lambda_mean"]) == pytest.approx(0.45, rel=1e-5)
    assert float(row["rpg-raw-parents_mean"]) == pytest.approx(0.55, rel=1e-5)
    assert float(row["vanilla-rate-parents_se"]) == pytest.approx(0.05, rel=1e-5)
    assert float(row["pct_improvement"]) == pytest.approx(fx.HAND_PCT, rel=1e-5)  # over vanilla
    assert float(row["pct_over_fixed-lambda"]) == pytest.approx(100 * 0.3 / 0.45, rel=1e-5)
    assert float(row["pct_over_vanilla-rate-parents"]) == pytest.approx(100 * 0.4 / 0.35, rel=1e-5)
    md = (out / "llm_table.md").read_text()
    assert "| RPG | vanilla | fixed-lambda | rpg-raw-parents | vanilla-rate-parents |" in md
    assert "Ablation: choosing parents vs learning" in md
    assert "0.550 ± 0.050 (rpg-raw-parents)" in md and "0.325 ± 0.025 (vanilla)" in md
    # parents ((0.75 - 0.55) + (0.35 - 0.325)) / 2; learning ((0.75 - 0.35) + (0.55 - 0.325)) / 2
    assert "interaction +0.175" in md
    assert "Average improvement over fixed-lambda: +66.7 %" in md
    assert "(fixed lambda 0.01 per s)" in md


def test_a_task_without_the_ablation_arms_keeps_its_row_with_n_a(tmp_path, tiny_model_dir):
    """The ablation may cover some tasks only: the other tasks keep their row, n/a in the
    arms they lack, and each baseline's average is over the tasks that have it."""
    out = tmp_path / "t"
    tasks = ("--tasks", "churn-auc,concrete-strength-mae")
    argv = fx.cli_base(out, tiny_model_dir, *tasks, "--arms", "all", "--fixed-lambda", "0.01")
    s = fx.settings(argv)
    plain = {k: v for k, v in fx.ARM_HAND.items() if k[0] == "fixed-lambda"}
    fx.make_hand_runs(s, out, fx.HAND | fx.ARM_HAND, task="churn-auc")
    fx.make_hand_runs(s, out, fx.HAND | plain, task="concrete-strength-mae")
    assert cli.main([*argv, "--table-only"]) == 0
    with open(out / "llm_table.csv") as fh:
        churn, concrete = list(csv.DictReader(fh))
    assert concrete["task"] == "concrete-strength-mae" and float(concrete["budget_s"]) == 6.0
    assert float(concrete["fixed-lambda_mean"]) == pytest.approx(0.45, rel=1e-5)
    assert concrete["rpg-raw-parents_n"] == "0" and concrete["rpg-raw-parents_mean"] == "nan"
    assert concrete["pct_over_vanilla-rate-parents"] == "nan"
    assert float(churn["pct_over_rpg-raw-parents"]) == pytest.approx(100 * 0.2 / 0.55, rel=1e-5)
    md = (out / "llm_table.md").read_text()
    assert "| 0.450 ± 0.050 | n/a | n/a |" in md
    assert "Average improvement over rpg-raw-parents: +36.4 % (" in md
    assert "over the 1 task with that arm" in md
    assert "no finished run of that arm on that task (concrete-strength-mae rpg-raw-parents; " in md
    assert md.count("**churn-auc** (mean best raw reward") == 1  # the ablation: churn only
    assert "**concrete-strength-mae**" not in md
    with open(out / "llm_table_edits.csv") as fh:
        arms_of = {(r["task"], r["arm"]) for r in csv.DictReader(fh)}
    assert ("concrete-strength-mae", "rpg-raw-parents") not in arms_of  # no empty edits row
    assert ("churn-auc", "rpg-raw-parents") in arms_of
    # --table-only on the task without the ablation arms alone still has its row
    only = [*argv, "--tasks", "concrete-strength-mae", "--table-only"]
    assert cli.main(only) == 0
    with open(out / "llm_table.csv") as fh:
        assert [r["task"] for r in csv.DictReader(fh)] == ["concrete-strength-mae"]


def test_the_engine_is_forwarded_named_in_the_protocol_and_in_each_csv(
    tmp_path, tiny_model_dir, capsys
):
    """``--engine trl`` reaches every run's config, the protocol says what that engine trains
    (GRPO's parents x answers from B and G), and the table's rows and runs name the engine."""
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir, "--engine", "trl")
    s = fx.settings(argv)
    for (m, k), rows in fx.HAND.items():
        spec = plan.RunSpec("churn-auc", m, k, out)
        cfg = fx.config(s, spec)
        assert cfg.engine == "trl" and cfg.trl.num_generations == 2
        fx.make_run(spec.run_dir, cfg.to_dict(), rows, steps=1)
    ppo = fx.settings(fx.cli_base(out, tiny_model_dir))
    rpg0 = plan.RunSpec("churn-auc", "rpg", 0, out)
    assert fx.config(ppo, rpg0).engine == "ppo"
    with pytest.raises(UsageError, match="other settings .*engine"):  # it holds a trl run
        plan.run_state(rpg0, fx.config(ppo, rpg0))
    assert cli.main([*argv, "--table-only"]) == 0
    printed = capsys.readouterr().out
    assert "training engine: trl (TRL's GRPOTrainer: 1 parent x 2 answers per step" in printed
    with open(out / "llm_table.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["engine"] == "trl"
    with open(out / "llm_table_runs.csv") as fh:
        assert [r["engine"] for r in csv.DictReader(fh)] == ["trl"] * 4
    md = (out / "llm_table.md").read_text()
    assert "Settings: engine trl;" in md and "training engine: trl (" in md
    text = protocol_text(ppo, fx.config(ppo, rpg0))
    assert "training engine: ppo (PPO with a critic" in text


def test_the_budget_text_counts_steps_in_words():
    q = plan.task_config(QUICK, QUICK.tasks[0])
    one = budget_text(replace(q, exec_budget_s=None, steps=1))
    assert one == "none (1 step for every run; read at the common final budget)"
    assert "(5 steps for every run" in budget_text(replace(q, exec_budget_s=None))
    assert budget_text(replace(q, steps=4)) == "6 CPU-s per chain, steps <= 4"
    wall = replace(q, reward=replace(q.reward, time_measure="wall"))
    assert budget_text(wall) == "6 s per chain, steps <= 5"


def test_the_machine_time_line_says_what_a_trl_run_times():
    """A TRL run's step time excludes TRL's generation and update: the line counts such runs."""
    runs = [{"step_seconds": "100", "engine": "ppo"}, {"step_seconds": "50", "engine": "trl"}]
    text = machine_time_text([SimpleNamespace(runs=runs)])  # type: ignore[list-item]
    assert "0.04 h over 2 runs, 50-100 s per run" in text  # 150 s
    assert "for the 1 TRL runs execution, grading and storage only" in text
    only_ppo = machine_time_text([SimpleNamespace(runs=runs[:1])])  # type: ignore[list-item]
    assert "TRL" not in only_ppo and "(generation, execution, update; not start-up" in only_ppo
