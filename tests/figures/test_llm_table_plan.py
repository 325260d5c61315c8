"""``paper_figures.llm_table.plan``: the LoopConfig of each run, the command that starts or resumes
it, and each folder's state (finished by steps or budget, resumable, another experiment)."""

from __future__ import annotations

import sys
from dataclasses import replace

import fixtures_llm
import llm_table_fixtures as fx
import pytest

from paper_figures.llm_table import plan
from paper_figures.llm_table.markdown import protocol_text
from rpg_core.cli import UsageError
from rpg_llm.config import LoopConfig
from rpg_llm.launch import make_config, read_config, write_config
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.presets import get_preset

tiny_model_dir = fixtures_llm.tiny_model_dir


def _flat(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def _differences(a: LoopConfig, b: LoopConfig) -> dict[str, tuple[object, object]]:
    fa, fb = _flat(a.to_dict()), _flat(b.to_dict())
    return {k: (fa[k], fb[k]) for k in fa if fa[k] != fb[k]}


def test_a_run_that_spent_its_budget_is_finished(tmp_path, tiny_model_dir):
    """``run_state``: with a budget, a run is finished when every chain of its steps with
    metrics has used it, though it ran fewer than ``steps`` steps (it stopped on its budget)."""
    out = tmp_path / "t"
    rows = [[(3.0, 0.5), (3.0, 0.6)], [(6.0, 0.4), (1.0, 0.5)]]  # chains (3, 6) -> (6, 7) s

    def state(budget: str, metrics_steps: int) -> str:
        argv = [*fx.cli_base(out, tiny_model_dir), "--exec-budget", budget, "--steps", "8"]
        s = fx.settings(argv)
        spec = plan.RunSpec("churn-auc", "rpg", 0, out / budget / str(metrics_steps))
        cfg = fx.config(s, spec)
        fx.make_run(spec.run_dir, cfg.to_dict(), rows, steps=metrics_steps)
        return plan.run_state(spec, cfg).state

    assert state("5", 2) == "finished"  # 6 and 7 s >= 5 s
    assert state("5", 1) == "resumable"  # after step 1 row 0 has used 3 s < 5 s
    assert state("6.5", 2) == "resumable"  # row 0: 6 s < 6.5 s
    assert state("none", 2) == "resumable"  # no budget: 2 of 8 steps


def test_a_run_stored_with_another_micro_batch_is_the_same_run(tmp_path, tiny_model_dir):
    """A speed-only setting (the PPO micro-batch) may differ from the stored run's; a setting
    that changes the experiment (the learning rate) still refuses, naming it."""
    out = tmp_path / "t"
    s = fx.settings(fx.cli_base(out, tiny_model_dir))
    spec = plan.RunSpec("churn-auc", "rpg", 0, out)
    cfg = fx.config(s, spec)
    fx.make_run(spec.run_dir, cfg.to_dict(), [[(3.0, 0.5), (3.0, 0.6)]], steps=1)
    micro = cfg.ppo.micro_batch_size + 3
    assert plan.run_state(spec, replace(cfg, ppo=replace(cfg.ppo, micro_batch_size=micro))) == (
        plan.run_state(spec, cfg)
    )
    assert plan.run_state(spec, cfg).state == "finished"
    with pytest.raises(UsageError, match="other settings .ppo.actor_lr = "):
        plan.run_state(spec, replace(cfg, ppo=replace(cfg.ppo, actor_lr=0.5)))


def test_a_run_with_another_budget_more_steps_or_a_broken_config_is_refused(
    tmp_path, tiny_model_dir
):
    """The table reads every run at its own budget B: a folder stored with another execution
    budget, or with more steps than the table asks, is another experiment; an unreadable
    config is no run to read or resume. Each refusal names --out and the folder."""
    out = tmp_path / "t"
    s = fx.settings([*fx.cli_base(out, tiny_model_dir), "--exec-budget", "5", "--steps", "3"])
    spec = plan.RunSpec("churn-auc", "rpg", 0, out)
    cfg = fx.config(s, spec)
    fx.make_run(spec.run_dir, replace(cfg, exec_budget_s=7.0).to_dict(), [[(3.0, 0.5)]], steps=1)
    with pytest.raises(UsageError, match=r"^--out: .* other settings \(exec_budget_s = 7.0, "):
        plan.run_state(spec, cfg)
    other = plan.RunSpec("churn-auc", "rpg", 1, out)
    stored = replace(cfg, steps=4, seed=1)
    fx.make_run(other.run_dir, stored.to_dict(), [[(3.0, 0.5)]], steps=1)
    with pytest.raises(UsageError, match=r"other settings \(steps = 4 \(> 3\)\)"):
        plan.run_state(other, replace(cfg, seed=1))
    (other.run_dir / "config.json").write_text("{not json")
    with pytest.raises(UsageError, match=f"--out: {other.run_dir} holds a broken run"):
        plan.run_state(other, replace(cfg, seed=1))


def test_a_run_killed_between_its_last_checkpoint_and_metrics_is_finished(tmp_path, tiny_model_dir):
    """Found in review: killed after step 2's checkpoint, before its metrics line, a run that
    had spent its budget at step 2 was called "resume" for ever (the trainer resumes after the
    checkpoint and stops at once, writing no metrics)."""
    out = tmp_path / "t"
    s = fx.settings([*fx.cli_base(out, tiny_model_dir), "--exec-budget", "5", "--steps", "8"])
    spec = plan.RunSpec("churn-auc", "rpg", 0, out)
    cfg = fx.config(s, spec)
    rows = [[(3.0, 0.5), (3.0, 0.6)], [(6.0, 0.4), (1.0, 0.5)]]  # spent after step 2
    fx.make_run(spec.run_dir, cfg.to_dict(), rows, steps=1)
    assert plan.run_state(spec, cfg).state == "resumable"
    ckpt = spec.run_dir / "checkpoints" / "step_000002"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer.pt").write_bytes(b"")
    assert RunFolder(spec.run_dir).latest_checkpoint() == 2
    assert plan.run_state(spec, cfg).state == "finished"


def test_a_trl_run_killed_between_its_last_checkpoint_and_metrics_is_finished(
    tmp_path, tiny_model_dir
):
    """The same rule for an ``--engine trl`` run: TRL's ``trl/checkpoint-2`` counts as step 2
    run, a PPO checkpoint in it does not. (TRL itself writes a step's metrics line before its
    checkpoint, so this state is made by hand: the rule is a safeguard there.)"""
    out = tmp_path / "t"
    s = fx.settings([*fx.cli_base(out, tiny_model_dir), "--exec-budget", "5", "--steps", "8"])
    spec = plan.RunSpec("churn-auc", "rpg", 0, out)
    cfg = replace(fx.config(s, spec), engine="trl")
    rows = [[(3.0, 0.5), (3.0, 0.6)], [(6.0, 0.4), (1.0, 0.5)]]  # spent after step 2
    fx.make_run(spec.run_dir, cfg.to_dict(), rows, steps=1)
    (spec.run_dir / "checkpoints" / "step_000002").mkdir(parents=True)
    (spec.run_dir / "checkpoints" / "step_000002" / "trainer.pt").write_bytes(b"")
    assert RunFolder(spec.run_dir).latest_checkpoint() == 2
    assert plan.run_state(spec, cfg).state == "resumable"
    (spec.run_dir / "trl" / "checkpoint-2").mkdir(parents=True)
    assert RunFolder(spec.run_dir).trained_step("trl") == 2
    assert plan.run_state(spec, cfg).state == "finished"


def test_action_and_sft_steps_are_the_presets_unless_given(tmp_path, tiny_model_dir):
    """A setting the table is not given stays the preset's (and the settings name none); a
    given one reaches the run's config; both arms get the same config but the arm's reward
    method, and the same command but its config file and folder."""
    out = tmp_path / "t"
    preset = get_preset("cpu-default").config
    base = fx.settings(fx.cli_base(out, tiny_model_dir))
    spec = plan.RunSpec("churn-auc", "rpg", 0, out)
    assert "action" not in base.run and "sft_steps" not in base.run
    cfg = fx.config(base, spec)
    assert (cfg.action, cfg.sft_steps) == (preset.action, preset.sft_steps) == ("edit", 8)
    given = fx.settings(
        [*fx.cli_base(out, tiny_model_dir), "--action", "script", "--sft-steps", "3"]
    )
    cfg = fx.config(given, spec)
    assert (cfg.action, cfg.sft_steps) == ("script", 3)
    assert cfg.exec_budget_s is None  # --exec-budget none
    timed = fx.settings([*fx.cli_base(out, tiny_model_dir), "--exec-budget", "7.5"])
    assert fx.config(timed, spec).exec_budget_s == 7.5
    cmd = plan.run_command(spec, cfg, "new")
    assert cmd == [
        sys.executable, "-m", "rpg_llm.run", "--config", str(spec.config_path),
        "--out", str(spec.run_dir), "--no-progress",
    ]  # fmt: skip
    assert spec.config_path.parent == spec.log_path.parent == out / "logs" / "churn-auc"
    resume = plan.run_command(spec, cfg, "resumable")
    assert resume[-5:] == ["--resume", str(spec.run_dir), "--steps", "1", "--no-progress"]
    # both arms: the same config but the method, the same command but its file and folder
    vspec = plan.RunSpec("churn-auc", "vanilla", 0, out)
    van = fx.config(given, vspec)
    assert _differences(cfg, van) == {"reward.method": ("rpg", "vanilla")}
    diff = [(a, b) for a, b in zip(cmd, plan.run_command(vspec, van, "new"), strict=True) if a != b]
    assert diff == [
        (str(spec.config_path), str(vspec.config_path)),
        (str(spec.run_dir), str(vspec.run_dir)),
    ]


def test_the_config_file_a_run_starts_from_round_trips(tmp_path, tiny_model_dir):
    """The file a new run is launched with (``--config``) reads back as the table's config, and
    ``rpg_llm.run --config FILE`` (``make_config`` over it, no flags) builds that config."""
    s = fx.settings(fx.cli_base(tmp_path / "t", tiny_model_dir, "--arms", "rpg,fixed-lambda"))
    for arm in s.arms:
        spec = plan.RunSpec("churn-auc", arm, 1, tmp_path / "t")
        cfg = fx.config(s, spec)
        path = write_config(cfg, spec.config_path)
        assert read_config(path) == cfg
        assert make_config({}, base=read_config(path)) == cfg
        assert (cfg.seed, cfg.task, cfg.model) == (1, "churn-auc", str(tiny_model_dir))


def test_each_arm_runs_with_its_own_reward_settings(tmp_path, tiny_model_dir):
    argv = fx.cli_base(tmp_path / "t", tiny_model_dir, "--arms", fx.ALL_ARMS)
    s = fx.settings([*argv, "--fixed-lambda", "0.01"])
    got = {}
    for arm in s.arms:
        cfg = fx.config(s, plan.RunSpec("churn-auc", arm, 0, tmp_path))
        got[arm] = (cfg.method, cfg.reward.parent_rank, cfg.reward.fixed_lambda)
    assert got == {
        "rpg": ("rpg", "arm", 0.0),
        "vanilla": ("vanilla", "arm", 0.0),
        "fixed-lambda": ("fixed-lambda", "arm", 0.01),
        "rpg-raw-parents": ("rpg", "raw", 0.0),
        "vanilla-rate-parents": ("vanilla", "rate", 0.0),
    }
    with pytest.raises(ValueError, match="unknown arm 'greedy'"):
        plan.arm_reward(get_preset("cpu-default").config.reward, "greedy")
    with pytest.raises(ValueError, match="needs --fixed-lambda > 0, got None"):
        plan.arm_reward(get_preset("cpu-default").config.reward, "fixed-lambda")


def test_run_settings_add_to_the_protocols_and_the_protocol_names_them(tmp_path, tiny_model_dir):
    """Run flags come after the protocol's (so ``--time wall`` wins, given directly or in
    ``--run-args``), the run config measures CPU time by default, and the protocol line names
    tasks, seeds and the measure."""
    out = tmp_path / "t"
    base = fx.settings(fx.cli_base(out, tiny_model_dir))
    spec = plan.RunSpec("churn-auc", "rpg", 0, out)
    assert fx.config(base, spec).reward.time_measure == "cpu"
    wall = fx.cli_base(out, tiny_model_dir)
    wall[wall.index("--run-args") + 1] += " --time wall"
    s = fx.settings(wall)
    assert fx.config(s, spec).reward.time_measure == "wall"
    assert fx.config(fx.settings([*fx.cli_base(out, tiny_model_dir), "--time", "wall"]), spec) == (
        fx.config(s, spec)
    )
    text = protocol_text(base, fx.config(base, spec))
    assert "tasks churn-auc" in text and "run seeds 0, 1" in text and "CPU seconds" in text
    assert base.run["steps"] == 1 and "none (1 step for every run" in text  # --exec-budget none


def test_run_args_take_any_shared_run_setting(tmp_path, tiny_model_dir):
    """``--run-args`` holds the same flags as the table: a protocol flag in it (the prompt
    budget, the execution budget, the engine) sets what the table's own flag would; given
    both ways, ``--run-args`` wins."""
    out = tmp_path / "t"
    spec = plan.RunSpec("churn-auc", "rpg", 0, out)
    argv = fx.cli_base(out, tiny_model_dir)
    i = argv.index("--run-args")
    bare = argv[:i] + argv[i + 2 :]
    flags = "--seed-buffer --max-prompt-tokens=900 --exec-budget 3 --engine trl"
    a = fx.settings([*bare, "--run-args", flags])
    b = fx.settings([*bare, *flags.replace("=", " ").split()])
    cfg = fx.config(a, spec)
    assert (cfg.sampling.max_prompt_tokens, cfg.exec_budget_s, cfg.seed_buffer) == (900, 3.0, True)
    assert cfg.engine == "trl" and cfg == fx.config(b, spec)
    assert a.run["exec_budget_s"] == b.run["exec_budget_s"] == 3.0
    both = fx.settings([*argv, "--seed-buffer"])  # argv's --run-args say --no-seed-buffer
    assert fx.config(both, spec).seed_buffer is False
