"""``python -m paper_figures.llm_table``'s usage errors: one line naming the flag, exit 2, before
any run folder exists."""

from __future__ import annotations

import fcntl
import importlib.util

import fixtures_llm
import llm_table_fixtures as fx
import pytest

from paper_figures.llm_table import cli, plan
from paper_figures.llm_table.settings import PROG

tiny_model_dir = fixtures_llm.tiny_model_dir


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--tasks", "no-such-task"], ["--tasks", "no-such-task"]),
        (["--seeds", "a,b"], ["--seeds", "a,b"]),
        (["--seeds", "0,0"], ["--seeds", "0,0"]),
        (["--steps", "0"], ["--steps", "0"]),
        (["--batch-size", "0"], ["--batch-size", "0"]),
        (["--timeout", "0"], ["--timeout", "0"]),
        (["--action", "poem"], ["--action", "poem"]),
        (["--sft-steps", "-1"], ["--sft-steps", "-1"]),
        (["--run-args", "--out elsewhere"], ["--run-args", "--out"]),
        (["--run-args", "--temperature hot"], ["--temperature", "hot"]),
        (["--run-args", "--nope 1"], ["--run-args", "rpg_llm.run", "--nope"]),
        (["--run-args", '"unclosed'], ["--run-args '\"unclosed'", "No closing quotation"]),
        (["--run-args", "--preset nanogpt-cpu"], ["--run-args", "table's own --preset"]),
        (["--run-args", "--seeds 3"], ["--run-args", "table's own --seeds"]),
        (["--run-args", "--seed 3"], ["--run-args", "--seed is not", "sets --task, --seed"]),
        (["--run-args", "--task churn-auc"], ["--run-args", "--task is not"]),
        (["--run-args", "--method vanilla"], ["--run-args", "--method is not"]),
        (["--run-args", "--max-prompt-tokens lots"], ["--run-args", "--max-prompt-tokens"]),
        (["--probe-parents", "0"], ["--probe-parents must be >= 1, got 0"]),
        (["--model", "/no/such/model"], ["--model", "/no/such/model"]),
        (["--points", "1"], ["--points", "1"]),
        (["--jobs", "0"], ["--jobs must be >= 1, got 0"]),
        (["--steps", "two"], ["--steps", "two"]),
        (["--exec-budget", "0"], ["--exec-budget", "'0'"]),
        (["--exec-budget", "soon"], ["--exec-budget", "soon"]),
        (["--run-args", "--exec-budget 0"], ["--run-args", "--exec-budget", "'0'"]),
        (["--run-args", "--seed-dir /no/such/seeds"], ["--seed-dir /no/such/seeds", "not a dir"]),
    ],
)
def test_usage_errors_exit_2_before_any_run(tmp_path, capsys, tiny_model_dir, extra, needles):
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir)
    for i in range(0, len(extra), 2):  # later flags win in argparse: append them
        argv += [extra[i], extra[i + 1]]
    assert cli.main(argv) == 2
    err = fx.one_line(capsys.readouterr().err)
    for n in needles:
        assert n in err
    assert not out.exists()  # no run started, nothing written


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--run-args", "--engine vllm"], ["--run-args", "--engine", "'vllm'"]),
        (["--run-args", "--num-generations 4"], ["--num-generations applies to --engine trl"]),
        (["--engine", "vllm"], ["--engine", "'vllm'"]),
        (["--arms", "vanilla,rpg"], ["--arms", "rpg first"]),
        (["--arms", "rpg,greedy"], ["--arms", "'greedy'"]),
        (["--arms", "rpg"], ["--arms", "at least one other"]),
        (["--arms", "rpg,fixed-lambda", "--fixed-lambda", "0"], ["--fixed-lambda > 0", "got 0"]),
        (["--arms", "rpg,fixed-lambda", "--fixed-lambda", "-0.01"], ["got -0.01"]),
        (["--fixed-lambda", "0.01"], ["--fixed-lambda 0.01", "--arms fixed-lambda only"]),
        (["--run-args", "--parent-rank raw"], ["--run-args", "--parent-rank"]),
        (["--run-args", "--fixed-lambda 0.1"], ["--run-args", "table's own --fixed-lambda"]),
    ],
)
def test_arm_usage_errors_exit_2_before_any_run(tmp_path, capsys, tiny_model_dir, extra, needles):
    out = tmp_path / "t"
    assert cli.main(fx.cli_base(out, tiny_model_dir, *extra)) == 2
    err = fx.one_line(capsys.readouterr().err)
    for n in needles:
        assert n in err
    assert not out.exists()


def test_a_prompt_budget_below_a_tasks_edit_prompt_exits_2_before_any_run(tmp_path, capsys):
    """The frontier tasks' constants listings need more than 300 tokens (SmolLM2): refused with
    the budget that would do, before any run folder (the runs used to start and fail one by
    one, the reason only in their logs)."""
    out = tmp_path / "t"
    argv = ["--tasks", "flights-delay-auc", "--seeds", "0", "--max-prompt-tokens", "300"]
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = fx.one_line(capsys.readouterr().err)
    assert (
        "--max-prompt-tokens 300 is too small for the edit prompt of task flights-delay-auc" in err
    )
    assert not out.exists()


def test_an_out_that_is_a_file_or_cannot_be_made_exits_2(tmp_path, capsys, tiny_model_dir):
    file = tmp_path / "file"
    file.write_text("kept\n")
    for out, needle in ((file, "exists and is not a folder"), (file / "t", "cannot make")):
        assert cli.main(fx.cli_base(out, tiny_model_dir)) == 2
        err = fx.one_line(capsys.readouterr().err)
        assert f"--out {out}" in err and needle in err
    assert file.read_text() == "kept\n"


def test_table_only_on_an_empty_out_is_a_usage_error(tmp_path, capsys, tiny_model_dir):
    """An --out without finished runs: one error line, and no per-run status lines before it."""
    out = tmp_path / "empty"
    assert cli.main([*fx.cli_base(out, tiny_model_dir), "--table-only"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"{PROG}: error: ")
    assert (
        f"--out {out}" in err
        and "no task has a finished rpg run and one of another arm (0 of 4 runs" in err
    )
    assert not (out / "llm_table.csv").exists()


def test_a_folder_with_other_settings_is_a_usage_error(tmp_path, capsys, tiny_model_dir):
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir)
    s = fx.settings(argv)
    spec = plan.RunSpec("churn-auc", "vanilla", 1, out)
    cfg = fx.config(s, spec)
    from dataclasses import replace

    fx.make_run(spec.run_dir, replace(cfg, batch_size=3).to_dict(), fx.HAND[("vanilla", 1)])
    assert cli.main(argv) == 2
    err = fx.one_line(capsys.readouterr().err)
    assert "--out" in err and "batch_size = 3" in err
    assert not (out / "runs" / "churn-auc" / "rpg-seed0").exists()  # nothing started


def test_quick_writes_to_its_own_default_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--quick", "--table-only"]) == 2
    assert "out/llm_table_quick" in fx.one_line(capsys.readouterr().err)


def test_a_second_table_on_the_same_out_is_refused(tmp_path, tiny_model_dir, capsys):
    """Found by launching the quick table twice: both resumed the same run folder at once."""
    out = tmp_path / "t"
    out.mkdir()
    with open(out / ".llm_table.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running table holds
        assert cli.main(fx.cli_base(out, tiny_model_dir)) == 2
        err = fx.one_line(capsys.readouterr().err)
        assert f"--out {out}" in err and "in use" in err
    assert not (out / "runs").exists()  # no run started


def test_the_refusal_names_the_table_that_holds_the_out_folder(tmp_path, tiny_model_dir, capsys):
    import os

    from rpg_core.filelock import FileLock

    out = tmp_path / "t"
    with FileLock(out / ".llm_table.lock"):  # what another running table holds
        assert cli.main(fx.cli_base(out, tiny_model_dir)) == 2
    err = fx.one_line(capsys.readouterr().err)
    assert f"--out {out}" in err and f"in use by pid {os.getpid()} on " in err
    assert not (out / "runs").exists()


def test_engine_trl_without_trl_exits_2_before_any_run_and_table_only_still_reads(
    tmp_path, tiny_model_dir, capsys, monkeypatch
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "trl" else real(n, *a)
    )
    out = tmp_path / "t"
    argv = fx.cli_base(out, tiny_model_dir, "--engine", "trl")
    assert cli.main(argv) == 2
    assert "--engine trl needs TRL" in fx.one_line(capsys.readouterr().err)
    assert not (out / "runs").exists()
    fx.make_hand_runs(fx.settings(argv), out, fx.HAND)
    assert cli.main([*argv, "--table-only"]) == 0  # reading trl runs needs no TRL


def test_probe_flags_are_checked(tmp_path, capsys, tiny_model_dir):
    out = tmp_path / "t"
    assert cli.main(fx.cli_base(out, tiny_model_dir, "--probe", "-1")) == 2
    assert "--probe must be >= 0" in fx.one_line(capsys.readouterr().err)
    s = fx.settings(fx.cli_base(out, tiny_model_dir, "--probe", "3", "--probe-parents", "2"))
    assert (s.probe_answers, s.probe_parents) == (3, 2)
