"""Typed run settings (rpg_llm.config): generated flags, stored-config layouts, typed presets."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rpg_core.cli import ArgumentParser
from rpg_llm.config import LoopConfig, PPOConfig, RewardConfig, SamplingConfig
from rpg_llm.flags import add_flags, apply_flags, config_flags, given_flags, named_errors


def _leaf_paths(cls, prefix=""):
    """Every leaf field path, walked independently of config_flags."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += _leaf_paths(hints[f.name], prefix + f.name + ".")
        else:
            out.append(prefix + f.name)
    return out


def _parse(argv):
    p = ArgumentParser(prog="t", allow_abbrev=False)
    add_flags(p)
    return apply_flags(LoopConfig(), given_flags(p.parse_args(argv)))


def test_every_leaf_field_has_one_flag():
    specs = config_flags()
    assert [s.path for s in specs] == _leaf_paths(LoopConfig)
    names = {s.path: s.flag for s in specs}
    assert names["reward.timeout_s"] == "--timeout"
    assert names["sampling.max_new_tokens"] == "--max-new-tokens"
    assert names["ppo.lora_rank"] == "--lora-rank"
    assert names["reward.time_measure"] == "--time"
    assert len(set(names.values())) == len(names)


def test_flags_set_nested_fields_and_leave_the_rest():
    cfg = _parse(["--top-k", "5", "--timeout", "12", "--lora-rank", "4", "--no-seed-buffer"])
    assert cfg.sampling.top_k == 5 and cfg.sampling.top_p == SamplingConfig().top_p
    assert cfg.timeout_s == 12.0 and isinstance(cfg.timeout_s, float)
    assert cfg.ppo.lora_rank == 4 and cfg.ppo.kl_coef == PPOConfig().kl_coef
    assert cfg.seed_buffer is False
    assert cfg.method == "rpg"
    assert _parse(["--method", "vanilla"]).reward == RewardConfig("vanilla")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--timeout", "0"], "--timeout must be > 0 and at most 86400 seconds (24 h), got 0.0"),
        (["--clip-ratio", "-1"], "--clip-ratio must be > 0, got -1.0"),
        (["--max-prompt-tokens", "100"], "--max-prompt-tokens must be an integer >= 256, got 100"),
        (["--top-p", "1.5"], "--top-p must lie in (0, 1], got 1.5"),
        (["--sft-switch-fraction", "2"], "--sft-switch-fraction must lie in [0, 1], got 2.0"),
    ],
)
def test_bad_values_name_the_flag(argv, needle):
    with pytest.raises(ValueError) as err:
        _parse(argv)
    assert needle in str(err.value)
    assert "timeout_s" not in str(err.value) and "PPOConfig" not in str(err.value)


def test_named_errors_keeps_other_words():
    assert named_errors("timeout_s and batch_size, not timeouts") == (
        "--timeout and --batch-size, not timeouts"
    )


# a config.json as the flat-layout code wrote it (asdict of the old LoopConfig + run record)
OLD_FLAT = {
    "method": "vanilla",
    "task": "text",
    "model": "some/model",
    "steps": 5,
    "batch_size": 2,
    "timeout_s": 45.0,
    "max_prompt_tokens": 768,
    "max_new_tokens": 12,
    "temperature": 0.7,
    "top_k": 20,
    "top_p": 0.8,
    "seed": 3,
    "seed_buffer": False,
    "sandbox": "subprocess",
    "executor": "local",
    "workers": 2,
    "checkpoint_every": 1,
    "keep_checkpoints": 2,
    "buffer_capacity_factor": 10,
    "num_slots": None,
    "estimator_batches": 200,
    "gen_batch_size": None,
    "data_root": None,
    "device": None,
    "cpu_threads": 1,
    "run_name": None,
    "ppo": {"micro_batch_size": 2},
    "competition": "text-clf",
    "seeded": False,
    "label": "vanilla (unseeded)",
    "torch": "2.13.0",
}


def test_old_flat_config_json_loads():
    cfg = LoopConfig.from_dict(OLD_FLAT)
    assert cfg.method == "vanilla" and cfg.timeout_s == 45.0
    assert cfg.sampling == SamplingConfig(max_prompt_tokens=768, max_new_tokens=12)
    assert cfg.ppo == PPOConfig(micro_batch_size=2)
    assert (cfg.steps, cfg.seed, cfg.name) == (5, 3, "vanilla-seed3")


def test_a_stored_config_without_a_later_key_reads_as_the_run_that_made_it():
    # runs stored before forced switch edits existed had none: 0, not today's default
    assert LoopConfig().sft_switch_fraction == 0.25
    assert LoopConfig.from_dict(OLD_FLAT).sft_switch_fraction == 0.0
    stored = LoopConfig(sft_switch_fraction=0.5).to_dict()
    assert LoopConfig.from_dict(stored).sft_switch_fraction == 0.5


def test_nested_config_round_trips():
    cfg = dataclasses.replace(
        LoopConfig(), steps=7, sampling=SamplingConfig(top_k=3), ppo=PPOConfig(lora_rank=8)
    )
    record = cfg.to_dict() | {"competition": "x", "seeded": True, "label": "l", "torch": "t"}
    assert LoopConfig.from_dict(record) == cfg


@pytest.mark.parametrize(
    "bad, named",
    [
        ({"stepz": 3}, "stepz"),
        ({"ppo": {"kl": 0.1}}, "ppo.kl"),
        ({"sampling": {"top_k": 5, "beam": 2}}, "sampling.beam"),
    ],
)
def test_unknown_keys_are_an_error_naming_them(bad, named):
    with pytest.raises(ValueError, match="unknown config key") as err:
        LoopConfig.from_dict(bad)
    assert named in str(err.value)


@given(
    top_k=st.integers(1, 100),
    timeout=st.floats(0.01, 1e4),
    lora=st.integers(0, 64),
    steps=st.integers(1, 1000),
)
def test_flags_then_json_round_trip(top_k, timeout, lora, steps):
    argv = ["--top-k", str(top_k), "--timeout", repr(timeout), "--lora-rank", str(lora)]
    cfg = _parse([*argv, "--steps", str(steps)])
    assert (cfg.sampling.top_k, cfg.timeout_s, cfg.ppo.lora_rank, cfg.steps) == (
        top_k,
        timeout,
        lora,
        steps,
    )
    assert LoopConfig.from_dict(cfg.to_dict()) == cfg


def test_presets_are_typed_replacements_with_the_old_values():
    from rpg_llm.presets import BASE, PRESETS

    cpu = PRESETS["cpu-default"].config
    assert isinstance(cpu, LoopConfig)
    # the edit-format CPU default
    assert (cpu.batch_size, cpu.steps, cpu.keep_checkpoints, cpu.timeout_s) == (2, 10, 1, 60.0)
    assert (cpu.sampling.max_prompt_tokens, cpu.sampling.max_new_tokens) == (352, 64)
    assert (cpu.action, cpu.sft_steps, cpu.describe) == ("edit", 8, False)
    assert cpu.ppo == PPOConfig(
        micro_batch_size=1, lora_rank=16, lora_alpha=32.0, actor_lr=2e-5, critic_lr=1e-4
    )  # LoRA on the CPU default (notes/lean.md)
    mle = PRESETS["qwen3.5-4b-mlebench"].config
    assert (mle.batch_size, mle.timeout_s, mle.sampling.gen_batch_size) == (128, 600.0, 32)
    assert mle.ppo == PPOConfig(micro_batch_size=4, mini_batch_size=32, gradient_checkpointing=True)
    assert PRESETS["nanogpt-speedrun"].config.timeout_s == 1500.0
    assert BASE == LoopConfig()


def test_top_level_method_beside_the_nested_layout():
    cfg = LoopConfig(reward=RewardConfig("vanilla"))
    assert LoopConfig.from_dict(cfg.to_dict() | {"method": "vanilla"}) == cfg
    with pytest.raises(ValueError, match="method 'rpg' at the top and 'vanilla'"):
        LoopConfig.from_dict(cfg.to_dict() | {"method": "rpg"})
