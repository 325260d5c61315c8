"""Named settings for ``python -m rpg_llm.run --preset NAME``, and the resources each needs.

* ``cpu-default`` (what ``python -m rpg_llm.run`` runs with no arguments): SmolLM2-135M-Instruct,
  the offline text competition, the edit answer format with an 8-step (full-weight) SFT warm
  start, prompts without the description (~350 tokens), answers up to 64 tokens, 10 PPO steps of
  B = 2 with LoRA (rank 16, alpha 32) on actor and critic, a checkpoint after every step, RPG
  arm, buffer seeded with the competition's baseline solutions.
* ``qwen3.5-4b-mlebench``: the paper's MLE-Bench settings (DESIGN.md section 7) with
  ``Qwen/Qwen3.5-4B`` on one GPU and the user's MLE-Bench data folder.
* ``nanogpt-cpu``: the NanoGPT CPU stand-in (``rpg_llm.env.tasks.nanogpt``) with the CPU default's
  model, edit answers, SFT warm start and PPO settings; seeded with the task's baseline, timeout
  300 s (the task's own), one attempt at a time, 3 PPO steps.
* ``nanogpt-speedrun``: the NanoGPT speedrun task on the user's modded-nanogpt checkout
  (``--speedrun-dir``) and FineWeb shards (``--data-root``): eight GPUs, ``torchrun``, timeout
  1500 s, batch 64, 2 PPO epochs, the subprocess sandbox; seeded with the checkout's script.

:func:`missing_resources` lists, in words, what a preset needs that this machine lacks (a GPU, a
data folder, model weights) and how to provide it; the CLI turns that into an exit-2 message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from rpg_llm.config import LoopConfig
from rpg_llm.env.tasks.nanogpt.speedrun import SPEEDRUN_DATA_ENV
from rpg_llm.learner.models import resolve_model

__all__ = ["Preset", "PRESETS", "DEFAULT_PRESET", "BASE", "get_preset", "missing_resources"]

MLEBENCH_ENV = "RPG_MLEBENCH_DATA"
NANOGPT_ENV = SPEEDRUN_DATA_ENV

BASE = LoopConfig()
"""The base every preset is a typed ``dataclasses.replace`` of (the dataclass defaults)."""


@dataclass(frozen=True)
class Preset:
    """A named :class:`rpg_llm.config.LoopConfig` and the resources it needs.

    Attributes:
        name: preset name.
        summary: one line for ``--help``.
        config: the settings (command-line flags override them).
        gpus: GPUs needed (0: runs on a CPU).
        data_env: environment variable naming the data folder it needs (None: none needed).
        data_hint: how to obtain that folder.
    """

    name: str
    summary: str
    config: LoopConfig = BASE
    gpus: int = 0
    data_env: str | None = None
    data_hint: str = ""


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset(
            "cpu-default",
            "SmolLM2-135M on the offline text competition (bbc-news-logloss), RPG, seeded "
            "buffer, edit answers, 8 SFT steps, 10 PPO steps of B = 2 with LoRA r16; measured "
            "on the shared 2-core machine: seed 0 beside another run (load ~2), its task built "
            "cold, 6.9 min, peak RSS 3.8 GB, run folder 627 MB, 19 of 20 answers valid",
            replace(
                BASE,
                task="text",
                model="HuggingFaceTB/SmolLM2-135M-Instruct",
                steps=10,
                batch_size=2,
                seed_buffer=True,
                checkpoint_every=1,
                keep_checkpoints=1,
                workers=2,
                estimator_batches=1000,
                action="edit",  # an edit answer is ~15-25 tokens; 135M rarely writes a script
                describe=False,  # short prompts (~300-350 tokens): the parent and its constants
                sft_steps=8,  # 8 steps: 0/16 -> 16/16 answers in the edit format (notes/learn.md)
                sampling=replace(BASE.sampling, max_prompt_tokens=352, max_new_tokens=64),
                reward=replace(BASE.reward, method="rpg", timeout_s=60.0),
                # LoRA: no reference copy, optimiser states and checkpoints
                # of the adapters only; the learning rates are LoRA-sized (notes/lean.md)
                ppo=replace(
                    BASE.ppo,
                    micro_batch_size=1,
                    lora_rank=16,
                    lora_alpha=32.0,
                    actor_lr=2e-5,
                    critic_lr=1e-4,
                ),
            ),
        ),
        Preset(
            "qwen3.5-4b-mlebench",
            "Qwen/Qwen3.5-4B on MLE-Bench with the paper's settings (1 GPU, MLE-Bench data)",
            replace(
                BASE,
                task="spooky-author-identification",
                model="Qwen/Qwen3.5-4B",
                steps=300,
                batch_size=128,
                seed_buffer=False,
                checkpoint_every=10,
                workers=16,
                sampling=replace(
                    BASE.sampling, max_prompt_tokens=2560, max_new_tokens=2500, gen_batch_size=32
                ),
                reward=replace(BASE.reward, timeout_s=600.0),
                ppo=replace(
                    BASE.ppo, micro_batch_size=4, mini_batch_size=32, gradient_checkpointing=True
                ),
                job_cpus=1.0,  # the paper's graders: 1 CPU and 16 GB per script
                job_memory_gb=16.0,
            ),
            gpus=1,
            data_env=MLEBENCH_ENV,
            data_hint=(
                "prepare the competitions with mle-bench (`mlebench prepare --lite`) and pass "
                "their data folder with --data-root DIR or the environment variable " + MLEBENCH_ENV
            ),
        ),
        Preset(
            "nanogpt-speedrun",
            "NanoGPT speedrun (train_gpt.py under torchrun on 8 GPUs, target val loss 3.28; "
            "--speedrun-dir CHECKOUT --data-root FINEWEB)",
            replace(
                BASE,
                task="nanogpt-speedrun",
                model="Qwen/Qwen3.5-4B",
                steps=300,
                batch_size=64,
                seed_buffer=True,
                sandbox="subprocess",  # bubblewrap's private /dev has no GPU device nodes
                workers=1,
                sampling=replace(BASE.sampling, max_prompt_tokens=8192, max_new_tokens=8192),
                reward=replace(BASE.reward, timeout_s=1500.0),
                ppo=replace(
                    BASE.ppo, ppo_epochs=2, micro_batch_size=1, gradient_checkpointing=True
                ),
                job_cpus=8.0,  # with --executor ray: an 8-GPU grader node per attempt
                job_gpus=8.0,
            ),
            gpus=8,
            data_env=NANOGPT_ENV,
            data_hint=(
                "download the FineWeb-10B token shards of the speedrun (its "
                "`data/cached_fineweb10B.py`) on a connected machine and pass the folder with "
                "--data-root DIR or the environment variable " + NANOGPT_ENV
            ),
        ),
    ]
}
DEFAULT_PRESET = "cpu-default"


def _nanogpt_cpu(cpu_default: LoopConfig) -> Preset:
    """The NanoGPT CPU stand-in with the CPU default's model, answer format, SFT warm start and
    PPO settings (so the two CPU presets differ only in the task): the stand-in's baseline
    exposes its constants (layers, width, batch, steps, warm-up, learning rate) one per line."""
    return Preset(
        "nanogpt-cpu",
        "SmolLM2-135M on the NanoGPT CPU stand-in (torchrun, gloo; ~1-2.5 min per attempt on 2 "
        "cores), the CPU default's edit answers and SFT warm start, 3 PPO steps of B = 2",
        replace(
            cpu_default,
            task="nanogpt-cpu",
            steps=3,
            workers=1,  # one attempt already uses a core; delta is the reward's time
            job_resource="grader",  # with --executor ray: grader nodes only, as the speedrun's
            # timeout = nanogpt.cpu_settings().timeout_s: invalid samples are charged the task's
            reward=replace(cpu_default.reward, timeout_s=300.0),
        ),
    )


PRESETS["nanogpt-cpu"] = _nanogpt_cpu(PRESETS["cpu-default"].config)
PRESETS = {
    name: PRESETS[name]
    for name in ("cpu-default", "qwen3.5-4b-mlebench", "nanogpt-cpu", "nanogpt-speedrun")
}


def get_preset(name: str) -> Preset:
    """The preset called ``name``. Raises ValueError listing the known names."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001
        return 0


def missing_resources(preset: Preset, model: str, data_root: str | None) -> list[str]:
    """What ``preset`` needs that is not here, each as "what is missing: how to provide it".

    Checks the GPU count, the data folder (``data_root`` or the preset's environment variable)
    and the model weights (a local folder, the Hugging Face cache or the hub).
    """
    missing = []
    gpus = _gpu_count()
    if gpus < preset.gpus:
        missing.append(
            f"{preset.gpus} CUDA GPU(s) (found {gpus}): run on a machine with "
            f"{preset.gpus} GPU(s) and a CUDA build of torch 2.13.0"
        )
    if preset.data_env is not None:
        folder = data_root or os.environ.get(preset.data_env)
        if not folder or not Path(folder).is_dir():
            where = f" ({folder} does not exist)" if folder else ""
            missing.append(f"the data folder{where}: {preset.data_hint}")
    try:
        resolve_model(model, allow_download=True)
    except ValueError:
        missing.append(
            f"weights of {model} (not a local folder, not in the Hugging Face cache, hub "
            f"unreachable): run `huggingface-cli download {model}` on a connected machine, copy "
            f"the cache or folder here and pass --model FOLDER"
        )
    return missing
