"""``python -m rpg_llm.run``: usage errors exit 2 with one line; SIGKILL then --resume."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import fixtures_llm
import pytest

from rpg_llm import launch
from rpg_llm.flags import given_flags
from rpg_llm.run import main
from testkit.tiny_run import run_module, tiny_run_args

# fixtures (pytest finds them by name in this module)
tiny_model_dir = fixtures_llm.tiny_model_dir


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("python -m rpg_llm.run: error: ")
    return err


def test_unknown_model_offline_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RPG_MODEL_CACHE", str(tmp_path / "models"))
    assert main(["--model", "no-such-org/no-such-model", "--out", str(tmp_path / "r")]) == 2
    assert "no-such-org/no-such-model" in _one_line_error(capsys)
    assert not (tmp_path / "r").exists()  # nothing created


def test_missing_task_exits_2(tmp_path, capsys, tiny_model_dir):
    argv = ["--model", str(tiny_model_dir), "--task", "no-such-task", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = _one_line_error(capsys)
    assert "no-such-task" in err and "the offline competitions are ames-housing-rmse, " in err
    assert not (tmp_path / "r").exists()


def _spy_resolve_model(monkeypatch) -> list[str]:
    """Record the model names ``rpg_llm.run`` resolves (a hub id: cache, download, conversion)."""
    calls: list[str] = []
    real = launch.resolve_model

    def spy(name, *args, **kwargs):
        calls.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(launch, "resolve_model", spy)
    return calls


def test_missing_task_with_the_default_model_resolves_no_model(tmp_path, capsys, monkeypatch):
    """The task is checked before the default model is resolved (its GGUF converted)."""
    calls = _spy_resolve_model(monkeypatch)
    monkeypatch.setenv("RPG_MODEL_CACHE", str(tmp_path / "models"))
    assert main(["--task", "no-such-task", "--out", str(tmp_path / "r")]) == 2
    assert "no-such-task" in _one_line_error(capsys)
    assert calls == [] and not (tmp_path / "r").exists()


def test_bad_model_folder_is_named_before_the_task_is_checked(tmp_path, capsys, monkeypatch):
    def no_task_check(task, **places):
        raise AssertionError("the task was checked before the model folder")

    monkeypatch.setattr(launch.registry, "check_setup", no_task_check)
    argv = ["--model", str(tmp_path / "nope"), "--task", "no-such-task"]
    assert main([*argv, "--out", str(tmp_path / "r")]) == 2
    assert f"model folder {tmp_path / 'nope'} does not exist" in _one_line_error(capsys)


def test_out_holding_a_run_is_refused_before_the_model_is_resolved(tmp_path, capsys, monkeypatch):
    calls = _spy_resolve_model(monkeypatch)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text("{}")
    assert main(["--out", str(tmp_path / "r")]) == 2
    assert "already holds a run" in _one_line_error(capsys)
    assert calls == []


@pytest.mark.parametrize(
    "value, needle",
    [
        ("0", "--batch-size"),
        ("-3", "--batch-size must be an integer >= 1, got -3"),
        ("two", "--batch-size"),
    ],
)
def test_bad_batch_size_exits_2(tmp_path, capsys, tiny_model_dir, value, needle):
    argv = ["--model", str(tiny_model_dir), "--batch-size", value, "--out", str(tmp_path / "r")]
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    assert needle in _one_line_error(capsys)


@pytest.mark.parametrize(
    "preset, needs",
    [
        ("qwen3.5-4b-mlebench", ["1 CUDA GPU", "data folder", "weights of Qwen/Qwen3.5-4B"]),
        # nanogpt-speedrun: its real set-up checks are tested in tests/llm/test_run_nanogpt.py
    ],
)
def test_presets_with_missing_resources_say_what_is_missing(
    tmp_path, capsys, monkeypatch, preset, needs
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("RPG_MLEBENCH_DATA", raising=False)
    monkeypatch.delenv("RPG_NANOGPT_DATA", raising=False)
    import torch

    if torch.cuda.device_count() >= 8:
        pytest.skip("this machine has the GPUs")
    # an offline task, whose set-up (checked first) is fine here: the resources are missing
    assert main(["--preset", preset, "--task", "text", "--out", str(tmp_path / "r")]) == 2
    err = _one_line_error(capsys)
    for n in needs:
        assert n in err
    assert "TODO" not in err and "placeholder" not in err.lower()


def test_unknown_preset_exits_2(capsys):
    assert main(["--preset", "gpt-17"]) == 2
    assert "gpt-17" in _one_line_error(capsys)


def _run_cli(args, env_extra=None):
    return run_module("rpg_llm.run", args, env_extra)


# no seed buffer; the cpu-default's edit format with a short SFT warm start (re-run on resume)
UNSEEDED_SHORT_SFT = ("--no-seed-buffer", "--sft-steps", "2")


def _samples(run):
    import sqlite3

    con = sqlite3.connect(str(run / "buffer.sqlite"))
    try:
        return con.execute("SELECT id, step, row FROM samples ORDER BY id").fetchall()
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("every, kill_at", [(1, "2:stored"), (2, "2:updated")])
def test_sigkill_then_resume_loses_and_duplicates_nothing(
    tmp_path,
    tiny_model_dir,
    every,
    kill_at,
):
    run = tmp_path / "run"
    extra = [*UNSEEDED_SHORT_SFT, "--checkpoint-every", str(every)]
    args = tiny_run_args(tiny_model_dir, run, steps=3, extra=extra)
    killed = _run_cli(args, {"RPG_KILL_AT": kill_at})
    assert killed.returncode == -9, killed.stderr[-2000:]
    before = _samples(run)
    assert sorted((s, r) for _, s, r in before) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    resumed = _run_cli(["--resume", str(run), "--no-progress", "--no-plot"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # a run prints its own lines, not transformers' loading bar nor peft's deprecation warning
    assert "Loading weights" not in resumed.stderr, resumed.stderr[-2000:]
    assert "is_gradient_checkpointing" not in resumed.stderr, resumed.stderr[-2000:]
    after = _samples(run)
    assert after[: len(before)] == before  # stored samples kept, same ids
    assert sorted((s, r) for _, s, r in after) == [(s, r) for s in (1, 2, 3) for r in (0, 1)]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["sft_step"] for m in metrics if "sft/loss" in m] == [1, 2]  # once, not on resume
    metrics = [m for m in metrics if "sft/loss" not in m]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    replayed = {m["step"]: m["replayed"] for m in metrics}
    assert replayed[2] is True and replayed[3] is False
    assert (run / "checkpoints" / "step_000003" / "trainer.pt").exists()
    # what a user sees: the run folder first, one line per step; samples.csv without duplicates
    assert resumed.stdout.splitlines()[0] == f"run folder: {run}"
    step_lines = [x for x in resumed.stdout.splitlines() if x.startswith("step ")]
    assert [x.split(":")[0] for x in step_lines][-1] == "step 3/3"
    assert all("valid" in x and "rho_hat" in x and "best generated" in x for x in step_lines)
    import csv

    with open(run / "samples.csv") as fh:
        rows = [(int(r["step"]), int(r["row"])) for r in csv.DictReader(fh)]
    assert rows == [(s, r) for _, s, r in after]


@pytest.mark.slow
def test_two_processes_share_generation_and_training(tmp_path, tiny_model_dir):
    """torchrun with 2 CPU processes (accelerate MULTI_CPU, gloo): rows split across processes,
    one writer for the run folder, every sample stored once."""
    run = tmp_path / "run"
    extra = [*UNSEEDED_SHORT_SFT, "--checkpoint-every", "1"]
    args = ["--nproc_per_node", "2", "-m", "rpg_llm.run"]
    args += tiny_run_args(tiny_model_dir, run, steps=2, extra=extra)
    out = run_module("torch.distributed.run", args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted((s, r) for _, s, r in _samples(run)) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "sft/loss" not in m] == [1, 2]
    assert (run / "logs" / "run.rank1.log").exists()
    assert (run / "checkpoints" / "step_000002" / "trainer.pt").exists()
    assert out.stdout.count("run folder:") == 1  # only the main process reports


def test_bad_timeout_names_the_flag_and_makes_no_folder(tmp_path, capsys, tiny_model_dir):
    argv = ["--model", str(tiny_model_dir), "--timeout", "0", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = _one_line_error(capsys)
    assert "--timeout must be > 0 and at most 86400 seconds (24 h), got 0.0" in err
    assert "timeout_s" not in err
    assert not (tmp_path / "r").exists()


def test_resume_refuses_settings_it_would_ignore(tmp_path, capsys):
    from rpg_llm.config import LoopConfig
    from rpg_llm.loop.runfolder import RunFolder

    RunFolder(tmp_path / "r").create(LoopConfig().to_dict() | {"seeded": True})
    assert main(["--resume", str(tmp_path / "r"), "--batch-size", "8"]) == 2
    assert "--batch-size" in _one_line_error(capsys)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text('{"steps": 3, "stepz": 1}')
    assert main(["--resume", str(tmp_path / "bad")]) == 2
    assert "unknown config key(s) stepz" in _one_line_error(capsys)


@pytest.mark.parametrize("task", ["no-such-task", 5, "a/b"])
def test_resume_of_a_run_whose_stored_task_is_bad_exits_2(tmp_path, capsys, task):
    from rpg_llm.config import LoopConfig
    from rpg_llm.loop.runfolder import RunFolder

    run = tmp_path / "r"
    RunFolder(run).create(LoopConfig().to_dict() | {"task": task, "seeded": True})
    stored = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert main(["--resume", str(run), "--no-progress", "--no-plot"]) == 2
    err = _one_line_error(capsys)
    assert f"--resume {run}: the stored task {task!r}" in err
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == stored  # nothing changed


# -- docs-review fixes -----------------------------------------------------------------


def _record(**kw):
    from rpg_llm.loop.recording import StepRecord

    base: dict[str, Any] = dict(
        step=3,
        rho_hat=0.0123,
        rho_hat_parents=0.01,
        mean_reward=-4.25,
        mean_raw_reward=-3.5,
        mean_delta=2.0,
        valid_fraction=0.5,
        best_raw_reward=0.9876,  # a seed's score: the buffer's best, seeds included
        new_best=0,
        gen_seconds=1.0,
        exec_seconds=1.0,
        ppo_seconds=1.0,
        step_seconds=3.0,
        gen_tokens=10,
        replayed=False,
        ppo={},
        best_generated=0.4321,  # the policy's own best
    )
    return StepRecord(**(base | kw))


def test_closing_line_reports_the_best_generated_score_not_a_seeds():
    from rpg_llm.run import summary_line

    line = summary_line(_record(), "rpg")
    assert "0.4321" in line and "0.9876" not in line
    assert "best generated" in line
    none = summary_line(_record(best_generated=float("nan")), "rpg")
    assert "0.9876" not in none and "none" in none


def test_vanilla_lines_show_what_vanilla_uses():
    from rpg_llm.run import summary_line

    rec = _record()
    for line in (rec.line(10, 2, "vanilla"), summary_line(rec, "vanilla")):
        assert "rho_hat" not in line and "relative" not in line
        assert "mean reward -4.25" in line
    for line in (rec.line(10, 2, "rpg"), summary_line(rec, "rpg")):
        assert "rho_hat 0.0123/s" in line and "mean relative reward -4.25" in line


def _config_of(argv):
    from rpg_llm.run import _parser

    args = _parser().parse_args(argv)
    return launch.make_config(given_flags(args), preset=args.preset)


def test_nanogpt_task_without_its_preset_takes_the_tasks_timeout():
    from rpg_llm.env.tasks import nanogpt
    from rpg_llm.presets import get_preset

    task_timeout = nanogpt.cpu_settings(target_loss=1.0).timeout_s
    assert get_preset("cpu-default").config.timeout_s != task_timeout  # the bug's premise
    assert _config_of(["--task", "nanogpt-cpu"]).timeout_s == task_timeout == 300.0
    assert _config_of(["--task", "nanogpt-cpu", "--timeout", "90"]).timeout_s == 90.0
    assert _config_of(["--preset", "nanogpt-cpu"]).timeout_s == task_timeout
    assert _config_of(["--task", "text"]).timeout_s == get_preset("cpu-default").config.timeout_s


def test_cpu_default_is_the_edit_format_with_sft():
    cfg = _config_of([])
    assert (cfg.action, cfg.sft_steps, cfg.describe) == ("edit", 8, False)
    assert cfg.model == "HuggingFaceTB/SmolLM2-135M-Instruct" and cfg.steps >= 10
    assert cfg.sampling.max_new_tokens == 64 and cfg.sampling.max_prompt_tokens <= 400
    assert _config_of(["--action", "script", "--sft-steps", "0"]).action == "script"


def test_budget_curve_label_names_the_nanogpt_quantity(tmp_path):
    from paper_figures.budget_curves import y_label

    runs = {}
    for name, task in (("comp", "bbc-news-logloss"), ("ng", "nanogpt-cpu")):
        runs[name] = tmp_path / name
        runs[name].mkdir()
        (runs[name] / "config.json").write_text(json.dumps({"competition": task}))
    assert y_label([runs["comp"]]) == "best raw reward so far"
    assert "val loss" in y_label([runs["ng"]]) and "raw reward" not in y_label([runs["ng"]])
    assert "raw reward" in y_label([runs["comp"], runs["ng"]])


def test_cuda_device_without_a_gpu_exits_2_before_any_folder(tmp_path, capsys, tiny_model_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "X"
    argv = ["--model", str(tiny_model_dir), "--device", "cuda", "--out", str(out)]
    assert main(argv) == 2
    err = _one_line_error(capsys)
    assert "--device 'cuda'" in err and "no CUDA GPU" in err
    assert not out.exists()


def test_bad_device_name_exits_2(tmp_path, capsys, tiny_model_dir):
    out = tmp_path / "X"
    assert main(["--model", str(tiny_model_dir), "--device", "gpu7", "--out", str(out)]) == 2
    assert "--device 'gpu7'" in _one_line_error(capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--batch-size", "99999999999"),
        ("--steps", "99999999999"),
        ("--workers", "99999999999"),
        ("--estimator-batches", "99999999999"),
        ("--max-new-tokens", "99999999999"),
        ("--sft-examples", "99999999999"),
    ],
)
def test_huge_counts_exit_2(tmp_path, capsys, tiny_model_dir, flag, value):
    out = tmp_path / "X"
    assert main(["--model", str(tiny_model_dir), flag, value, "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    assert flag in err and value in err and "<=" in err
    assert not out.exists()


def test_out_that_is_a_file_exits_2(tmp_path, capsys, tiny_model_dir):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n")
    assert main(["--model", str(tiny_model_dir), "--out", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "run folder:" not in captured.out
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and f"--out {bad}" in err and "not a folder" in err
    assert bad.read_text() == "a,b\n"


def test_data_root_that_is_a_file_exits_2(tmp_path, capsys, tiny_model_dir):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n")
    out = tmp_path / "X"
    assert main(["--model", str(tiny_model_dir), "--data-root", str(bad), "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    assert f"--data-root {bad}" in err and "not a folder" in err
    assert not out.exists()


def test_empty_out_exits_2(tmp_path, capsys, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--model", str(tiny_model_dir), "--out", ""]) == 2
    assert "--out ''" in _one_line_error(capsys)
    assert not (tmp_path / "runs").exists()


def test_metrics_line_writes_null_for_no_best_generated(tmp_path):
    """``best_generated`` is nan before any valid generated sample: metrics.jsonl holds
    ``null`` there (strict JSON), never ``NaN``."""
    import math
    import time

    from rpg_llm.loop.recording import Recorder, json_metrics
    from rpg_llm.loop.runfolder import RunFolder

    rec = _record(best_generated=float("nan"), rho_hat=float("inf"))
    folder = RunFolder(tmp_path / "run")
    folder.root.mkdir(parents=True, exist_ok=True)
    Recorder(folder, main=True, rank=0).record(rec, time.perf_counter())
    text = folder.metrics_path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    line = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert line["best_generated"] is None and line["rho_hat"] is None
    assert line["best_raw_reward"] == pytest.approx(0.9876)
    assert math.isnan(rec.best_generated)  # the record itself keeps nan for the summary line
    assert json_metrics({"x": float("-inf"), "y": 1}) == {"x": None, "y": 1}


def test_prompt_budget_below_the_edit_prompts_floor_exits_2(tmp_path, capsys):
    """The cpu-default preset's 352 tokens cannot hold a frontier task's constants listing and
    answer rules (with SmolLM2's tokenizer and the room for edited values they need 466-504):
    refused before any folder, with the budget that would do; that budget then passes the
    check. A NanoGPT task's baseline is checked too."""
    import re

    from rpg_core.cli import UsageError
    from rpg_llm.env.tasks import baseline_solutions
    from rpg_llm.launch import check_prompt_budget
    from rpg_llm.learner.models import DEFAULT_MODEL, resolve_model

    out = tmp_path / "r"
    assert main(["--task", "diamonds-price-rmse", "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    assert "--max-prompt-tokens 352 is too small for the edit prompt of task diamonds-price" in err
    assert not out.exists()
    found = re.search(r"give --max-prompt-tokens (\d+) or more", err)
    assert found is not None
    need = int(found.group(1))
    assert 352 < need <= 512
    scripts, model = baseline_solutions("diamonds-price-rmse"), resolve_model(DEFAULT_MODEL)

    def cfg(budget):
        return _config_of(["--task", "diamonds-price-rmse", "--max-prompt-tokens", str(budget)])

    check_prompt_budget(cfg(need), model, scripts)
    with pytest.raises(UsageError, match=f"give --max-prompt-tokens {need} or more"):
        check_prompt_budget(cfg(need - 1), model, scripts)
    nanogpt = ["--preset", "nanogpt-cpu", "--max-prompt-tokens", "256", "--out", str(out)]
    assert main(nanogpt) == 2
    err = _one_line_error(capsys)
    assert "--max-prompt-tokens 256 is too small for the edit prompt of task nanogpt-cpu" in err
    assert not out.exists()


def test_an_unprepared_offline_task_is_built_with_a_message_first(tmp_path, capsys, monkeypatch):
    """The first run of an offline competition under a data root says it is preparing it
    (about a minute), then prepares it there; a folder of an older format is rebuilt the same
    way (``prepared/`` alone is not enough); a current one and a NanoGPT task are left alone."""
    import yaml

    from rpg_llm.env import tasks
    from rpg_llm.env.tasks import offline
    from rpg_llm.presets import get_preset

    built = []
    monkeypatch.setattr(tasks, "prepare", lambda comp_id, root: built.append((comp_id, root)))
    cfg = replace(get_preset("cpu-default").config, task="churn-auc", data_root=str(tmp_path))
    assert launch.prepare_task(cfg) is True
    assert built == [("churn-auc", tmp_path)]
    out = capsys.readouterr().out
    assert "preparing the offline competition churn-auc" in out and str(tmp_path) in out
    folder = tmp_path / "churn-auc"
    for side in ("public", "private"):
        (folder / "prepared" / side).mkdir(parents=True)
    rpg: dict[str, Any] = {"format_version": offline.FORMAT_VERSION - 1, "seed": 0}
    rpg["ladder_sha256"] = offline.ladder_hash(offline.SPECS["churn-auc"])
    (folder / "leaderboard.csv").write_text("teamName,score\n")
    (folder / "config.yaml").write_text(yaml.safe_dump({"id": "churn-auc", "rpg": rpg}))
    assert tasks.is_prepared("churn-auc", tmp_path) and not tasks.is_current("churn-auc", tmp_path)
    assert launch.prepare_task(cfg) is True and len(built) == 2  # older format: rebuilt
    capsys.readouterr()
    rpg["format_version"] = offline.FORMAT_VERSION
    (folder / "config.yaml").write_text(yaml.safe_dump({"id": "churn-auc", "rpg": rpg}))
    assert tasks.is_current("churn-auc", tmp_path)
    assert launch.prepare_task(cfg) is False
    assert launch.prepare_task(replace(cfg, task="nanogpt-cpu")) is False
    assert len(built) == 2 and capsys.readouterr().out == ""


def test_main_prepares_the_task_before_training_and_not_for_a_finished_resume(
    tmp_path, monkeypatch, capsys
):
    """``main`` builds a missing offline competition before training starts; a ``--resume`` of a
    run that has finished its steps returns before any preparing."""
    import rpg_llm.loop.trainer as trainer

    order: list[str] = []

    def prepare(cfg, say=print):
        order.append(f"prepare {cfg.task} {cfg.data_root}")
        return True

    def train(cfg, run_dir, **_):
        order.append(f"train {cfg.task}")
        raise RuntimeError("stop before loading a model")

    monkeypatch.setattr(launch, "prepare_task", prepare)
    monkeypatch.setattr(trainer, "train", train)
    data = tmp_path / "data"
    argv = ["--task", "churn-auc", "--data-root", str(data), "--out", str(tmp_path / "run")]
    assert main(argv) == 1
    assert order == [f"prepare churn-auc {data}", "train churn-auc"]

    order.clear()
    cfg = _config_of(argv)
    monkeypatch.setattr(launch, "resume_config", lambda run_dir, steps=None: cfg)
    finished = launch.RunStatus(tmp_path / "run", "finished", cfg.steps, "steps", cfg)
    monkeypatch.setattr(launch, "status", lambda run_dir, cfg=None: finished)
    assert main(["--resume", str(tmp_path / "run")]) == 0
    assert order == [] and "nothing to run" in capsys.readouterr().out


def test_a_bad_raw_reward_exits_2_naming_the_choices(tmp_path, capsys):
    assert main(["--raw-reward", "auc", "--out", str(tmp_path / "r")]) == 2
    err = _one_line_error(capsys)
    assert "--raw-reward" in err and "'auc'" in err and "percentile" in err
    assert not (tmp_path / "r").exists()
