"""The prior regime of a task (rpg_llm.env.tasks.regime): its fixed scripts and the Spearman
correlation of CPU time and score, against values computed by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rpg_llm.env.tasks import __main__ as tasks_cli
from rpg_llm.env.tasks import baseline_solutions
from rpg_llm.env.tasks.offline import SPECS
from rpg_llm.env.tasks.regime import RegimePrior, prior_scripts, regime_prior


def _rows(cpu, score, status=None):
    status = status or ["ok"] * len(cpu)
    return pd.DataFrame({"task": "t", "status": status, "cpu_s": cpu, "score": score})


def test_spearman_by_the_rank_difference_formula():
    # CPU ranks 1..5, score ranks (1, 5, 3, 4, 2): d = (0, -3, 0, 0, 3), 1 - 6 * 18 / 120 = 0.1
    prior = regime_prior(_rows([1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 0.9, 0.7, 0.8, 0.6]), False)
    assert prior.spearman == pytest.approx(0.1)
    assert prior.spearman_valid == pytest.approx(0.1)
    assert (prior.cpu_min_s, prior.cpu_max_s, prior.span) == (1.0, 5.0, 5.0)
    # lower is better turns the order round: the same scores give -0.1
    assert regime_prior(
        _rows([1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 0.9, 0.7, 0.8, 0.6]), True
    ).spearman == (pytest.approx(-0.1))


def test_a_script_that_did_not_score_ranks_below_every_score():
    # the slowest script times out: valid ones rise with time (+1), all of them do not
    rows = _rows([1.0, 2.0, 3.0, 60.0], [0.6, 0.7, 0.8, math.nan], ["ok", "ok", "ok", "timeout"])
    prior = regime_prior(rows, False)
    assert prior.spearman_valid == pytest.approx(1.0)
    # ranks: cpu (1, 2, 3, 4), score (2, 3, 4, 1): d = (-1, -1, -1, 3), 1 - 6 * 12 / 60 = -0.2
    assert prior.spearman == pytest.approx(-0.2)
    assert (prior.valid, prior.timeouts, prior.cpu_max_s) == (3, 1, 3.0)
    assert RegimePrior.from_json(prior.to_json()).to_json() == prior.to_json()
    assert prior.to_json()["spearman"] == -0.2


def test_bad_rows_are_refused_naming_the_problem():
    with pytest.raises(ValueError, match="one task"):
        regime_prior(pd.concat([_rows([1, 2], [1, 2]), _rows([1], [1]).assign(task="u")]), False)
    with pytest.raises(ValueError, match="CPU seconds"):
        regime_prior(_rows([1.0, math.nan, 3.0], [1.0, 2.0, 3.0]), False)
    with pytest.raises(ValueError, match="1 run\\(s\\) failed for the machine's sake"):
        regime_prior(_rows([1.0, 2.0, 3.0], [1.0, 2.0, math.nan], ["ok", "ok", "infra"]), False)
    with pytest.raises(ValueError, match="got 3 and 1"):
        regime_prior(_rows([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], ["ok", "error", "error"]), False)


@pytest.mark.parametrize("comp_id", ["credit-default-auc", "churn-auc"])
def test_prior_scripts_are_the_seeds_then_the_board_without_the_floor(comp_id):
    scripts = prior_scripts(comp_id)
    names = [n for n, _ in scripts]
    seeds = [n for n, _ in baseline_solutions(comp_id) if n != "prior"]
    assert names[: len(seeds)] == seeds
    codes = [c for _, c in scripts]
    assert len(set(codes)) == len(codes)
    assert "prior" not in names
    board = [s for s, _ in SPECS[comp_id].ladder if s != "prior"]
    # every board entry is there, unless its code is a seed's (the default script, say)
    assert len(board) - len(scripts) + len(seeds) >= 0
    assert len(scripts) >= len(board)
    with pytest.raises(ValueError, match="unknown offline competition 'nope'"):
        prior_scripts("nope")


def test_prior_cli_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    out = ["--out", str(tmp_path / "p")]
    for argv, needle in (
        (["prior", "nope", *out], "unknown competition 'nope'"),
        (["prior", "churn-auc", *out, "--workers", "0"], "--workers must be >= 1, got 0"),
        (["prior", "churn-auc", *out, "--timeout", "0"], "--timeout must be in"),
        (["prior", "churn-auc"], "--out"),
    ):
        assert tasks_cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "p").exists()
