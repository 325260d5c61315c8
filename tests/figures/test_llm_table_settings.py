"""``paper_figures.llm_table.settings``: the protocols, the arms' prices from their tuning records,
the recorded commands, and the defaults the help states."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import llm_table_fixtures as fx
import pytest

from paper_figures.llm_table import cli, plan
from paper_figures.llm_table import settings as st
from rpg_llm.env.actions import declared_switches
from rpg_llm.env.tasks import baseline_solutions, list_offline_competitions
from rpg_llm.presets import PRESETS


def test_the_tuning_record_matches_the_settings():
    """paper_figures/llm_table_tuning.json: seeds apart from the table's, the criterion
    recomputed from the arms, the winner chosen, and the preset running the winner."""
    rec = json.loads((st.RECORDS / "llm_table_tuning.json").read_text())
    assert not set(rec["seeds"]) & (set(st.FULL.seeds) | set(st.QUICK.seeds))
    crit = {k: (c["rpg"] + c["vanilla"]) / 2 for k, c in rec["candidates"].items()}
    for k, c in rec["candidates"].items():
        assert c["criterion"] == pytest.approx(crit[k], abs=1e-6)
    best = max(crit, key=lambda k: crit[k])
    assert float(best) == rec["chosen"]["actor_lr"]
    assert PRESETS[st.FULL.preset].config.ppo.actor_lr == rec["chosen"]["actor_lr"]
    assert f"{crit[best]:.3f}" in st.TUNING_NOTE and "900, 901" in st.TUNING_NOTE


def test_the_full_protocol_has_six_tasks_three_with_a_family_switch():
    """FULL: >= 6 offline tasks, >= 3 of whose baselines declare a ``MODEL`` family switch."""
    assert len(st.FULL.tasks) >= 6 and set(st.FULL.tasks) <= set(list_offline_competitions())
    switch = [
        t
        for t in st.FULL.tasks
        if any("MODEL" in declared_switches(code) for _, code in baseline_solutions(t))
    ]
    assert len(switch) >= 3


def test_the_quick_table_is_two_tasks_of_opposite_measured_regimes():
    """QUICK: two tasks whose measured prior correlations (paper_figures/regime_priors) have
    opposite signs, at the regime map's raw reward."""
    priors = json.loads((st.RECORDS / "regime_priors" / "priors.json").read_text())
    signs = sorted(priors[t]["spearman"] > 0 for t in st.QUICK.tasks)
    assert len(st.QUICK.tasks) == 2 and signs == [False, True]
    assert st.QUICK.run["reward.raw_reward"] == "percentile"


@pytest.mark.parametrize(
    "quick, record", [(False, "llm_table_lambda_full.json"), (True, "llm_table_lambda.json")]
)
def test_fixed_lambda_defaults_to_the_recorded_choice(quick, record):
    """Without --fixed-lambda the arm runs at the price its tuning record chose on held-out
    seeds; `--arms all` is every arm, in :data:`ARMS` order."""
    rec = json.loads((st.RECORDS / record).read_text())
    argv = ["--arms", "all", *(["--quick"] if quick else [])]
    s = fx.settings(argv)
    assert s.arms == tuple(st.ARMS) and s.arms[:3] == ("rpg", "vanilla", "fixed-lambda")
    assert s.fixed_lambda == rec["chosen"]["fixed_lambda"] == pytest.approx(1 / 3600, rel=1e-5)
    given = fx.settings([*argv, "--fixed-lambda", "0.01"])
    assert given.fixed_lambda == 0.01
    plain = fx.settings(["--arms", "rpg,vanilla"])
    assert plain.fixed_lambda is None


@pytest.mark.parametrize("text", ["{not json", '{"chosen": {"fixed_lambda": 0}}', '{"chosen": 3}'])
def test_a_bad_lambda_record_is_a_usage_error_naming_the_file(tmp_path, capsys, monkeypatch, text):
    (tmp_path / "llm_table_lambda_full.json").write_text(text)
    monkeypatch.setattr(st, "RECORDS", tmp_path)
    assert cli.main(["--arms", "rpg,fixed-lambda", "--out", str(tmp_path / "t")]) == 2
    err = fx.one_line(capsys.readouterr().err)
    assert "llm_table_lambda_full.json" in err and "--fixed-lambda" in err
    assert not (tmp_path / "t").exists()


def test_the_help_states_the_defaults_the_parser_uses():
    """Each ``(default X, --quick Y)`` of ``--help`` is what a bare and a ``--quick`` parse give."""
    parser = cli.parser()
    helps = {a.option_strings[0]: a.help or "" for a in parser._actions if a.option_strings}
    bare = fx.settings([])
    quick = fx.settings(["--quick"])
    fields = {
        "--tasks": lambda s: s.tasks,
        "--seeds": lambda s: s.seeds,
        "--steps": lambda s: s.run["steps"],
        "--batch-size": lambda s: s.run["batch_size"],
        "--max-new-tokens": lambda s: s.run["sampling.max_new_tokens"],
        "--max-prompt-tokens": lambda s: s.run["sampling.max_prompt_tokens"],
        "--exec-budget": lambda s: s.run["exec_budget_s"],
        "--sft-seed": lambda s: s.run["sft_seed"],
        "--probe": lambda s: s.probe_answers,
    }
    for flag, read in fields.items():
        m = re.search(r"default (\S+?)[;,] --quick ([^;) ]+)", helps[flag])
        assert m, (flag, helps[flag])
        for text, settings in ((m[1], bare), (m[2], quick)):
            value = read(settings)
            values = value if isinstance(value, tuple) else (value,)
            assert text.split(",") == [f"{v:g}" if isinstance(v, float) else str(v) for v in values]


def test_a_bare_and_a_quick_parse_are_the_protocols():
    assert fx.settings(["--quick"]) == st.QUICK
    assert fx.settings([]) == st.FULL
    assert st.FULL.run["reward.time_measure"] == st.QUICK.run["reward.time_measure"] == "cpu"


def _recorded_settings(command: str) -> st.TableSettings:
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "paper_figures.llm_table"]
    return fx.settings(argv[3:])


@pytest.mark.parametrize(
    "record", ["llm_table_tuning.json", "llm_table_lambda.json", "llm_table_lambda_full.json"]
)
def test_the_tuning_records_commands_run_what_they_say(record, tmp_path: Path):
    """Each recorded command, parsed by today's llm_table, runs the recorded task on the
    recorded held-out seeds (none of the table's), at the recorded setting; the fixed-lambda
    record's choice is the best candidate by its criterion recomputed from the seed values."""
    rec = json.loads((st.RECORDS / record).read_text())
    assert not set(rec["seeds"]) & (set(st.FULL.seeds) | set(st.QUICK.seeds))
    for cmd in rec["commands"]:
        s = _recorded_settings(cmd)
        assert s.tasks == (rec["task"],) and s.seeds == tuple(rec["seeds"])
        cfg = fx.config(s, plan.RunSpec(rec["task"], "rpg", rec["seeds"][0], tmp_path))
        if record == "llm_table_tuning.json":
            assert (cfg.batch_size, cfg.exec_budget_s, cfg.steps) == (2, 12.0, 10)
            assert cfg.reward.time_measure == "wall" and s.probe_answers == 0
        elif record == "llm_table_lambda_full.json":  # the full protocol, no probe
            assert s == replace(
                st.FULL, tasks=("diamonds-price-rmse",), seeds=(900, 901), probe_answers=0,
                arms=("rpg", "fixed-lambda"), fixed_lambda=s.fixed_lambda,
            )  # fmt: skip
            assert "execution budget 30 CPU-seconds per chain" in rec["setting"]
        else:
            assert s == st.TableSettings(
                tasks=("diamonds-price-rmse",), seeds=(900, 901),
                run={"steps": 5, "batch_size": 2, "exec_budget_s": 10.0, **st.PROTOCOL_RUN},
                arms=("rpg", "fixed-lambda"), fixed_lambda=s.fixed_lambda,
            )  # fmt: skip
            assert "execution budget 10 CPU-seconds per chain" in rec["setting"]
        if record != "llm_table_tuning.json":
            assert f"{s.fixed_lambda:g}" in {f"{float(k):g}" for k in rec["candidates"]}
    if record != "llm_table_tuning.json":
        means = {k: sum(c["seed_values"]) / 2 for k, c in rec["candidates"].items()}
        for k, c in rec["candidates"].items():
            assert c["fixed_lambda"] == pytest.approx(means[k], abs=5e-4)
        best = max(means.values())
        chosen = f"{rec['chosen']['fixed_lambda']:g}"
        assert means[next(k for k in means if f"{float(k):g}" == chosen)] == best
        # ties go to the smallest price
        assert float(chosen) == min(float(k) for k in means if means[k] == best)
        # the protocol printed with the table quotes the record and its best value
        assert record in st.TUNING_NOTE and f"{best:.3f}" in st.TUNING_NOTE
