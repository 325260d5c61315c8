"""The NanoGPT task object the loop uses like a competition: id, description, folders, baselines."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rpg_llm.env.sandbox import BatchExecutor, Sandbox
from rpg_llm.env.tasks.format import default_data_root
from rpg_llm.env.tasks.nanogpt import env
from rpg_llm.env.tasks.nanogpt.data import (
    GUARD_DIR,
    GUARD_FILES,
    PUBLIC_FILES,
    build_cpu_data,
    hash_files,
)
from rpg_llm.env.tasks.nanogpt.rewards import rate_reward, vanilla_reward
from rpg_llm.env.tasks.nanogpt.settings import NanoGPTSettings, cpu_settings
from rpg_llm.env.types import TaskRewards

__all__ = ["NanoGPTTask", "TASK_IDS", "load_task", "baseline_solutions", "describe"]

TASK_IDS = ("nanogpt-cpu",)
SOLUTIONS = Path(__file__).with_name("solutions")


@dataclass(frozen=True)
class NanoGPTTask:
    """A prepared NanoGPT task.

    Attributes:
      id: task id (``"nanogpt-cpu"``).
      description: the task text for the base and improve prompts.
      settings: ``NanoGPTSettings``.
      public_dir: folder the script sees read-only at ``./input``.
      private_dir: folder holding ``heldout.bin``; hidden from the script.
      guard_hashes: SHA-256 of every guarded file when the task was loaded (checked before and
        after each attempt).
      guarded: names of the guarded files inside ``public_dir``.
      env: extra environment variables of the attempt, as ``((name, value), ...)``.
    """

    id: str
    description: str
    settings: NanoGPTSettings
    public_dir: Path
    private_dir: Path
    guard_hashes: dict[str, str] = field(default_factory=dict)
    guarded: tuple[str, ...] = PUBLIC_FILES
    env: tuple[tuple[str, str], ...] = ()

    def run_batch(
        self,
        codes: Sequence[str],
        sandbox: Sandbox | str,
        timeout_s: float,
        executor: BatchExecutor | None = None,
    ) -> list[env.NanoGPTOutcome]:
        """Run ``codes`` as attempts (:func:`rpg_llm.env.tasks.nanogpt.env.run_batch`)."""
        return list(env.run_batch(codes, self, sandbox, timeout_s, executor))

    def own_rewards(self) -> TaskRewards:
        """The speedrun's rewards for this task's target val loss (paper section 5.2): the
        estimator is fed ``rate_reward``; vanilla gets ``vanilla_reward`` (invalid: -3000); the
        RPG arm's raw reward is the stored ``rpg_reward`` (its own +5 bonus included)."""
        target = self.settings.target_loss
        return TaskRewards(
            rate=rate_reward,
            vanilla=lambda score, ok, delta: vanilla_reward(score, ok, target, delta),
        )


def describe(settings: NanoGPTSettings) -> str:
    """The task description shown to the policy (base and improve prompts)."""
    return (
        f"Task {settings.name}: edit the training script so that a byte-level GPT reaches "
        f"validation cross-entropy <= {settings.target_loss:.4f} nats per byte as fast as "
        f"possible. The script runs as `torchrun --standalone --nproc_per_node={settings.nproc} "
        f"train_gpt.py` on CPUs (use the gloo backend) with {settings.threads} thread(s), and "
        f"is killed after {settings.timeout_s:g} s of wall time (start-up included). The "
        "read-only folder ./input (on the import path) holds the guarded modules `ngpt_data` "
        "(ngpt_data.tokens('train'|'val') -> 1-D int64 byte tokens; ngpt_data.TrainLoader(batch, "
        "seq_len, rank, world, seed).next() -> (x, y) int64 (B, T); VOCAB_SIZE, SEQ_LEN) and "
        "`ngpt_eval`. Required: call ngpt_eval.log_val(step, num_steps, model, train_time_s) at "
        "step 0, every ngpt_eval.VAL_EVERY steps and at the last step (it prints the val line), "
        "and end with ngpt_eval.save_model(model) on a model mapping int64 (B, T) token ids to "
        "(B, T, 256) logits with causal attention. The score is the environment's own val loss "
        "of the saved model on held-out text; the reward grows as the loss falls and the run is "
        "faster. Answer with the complete script in one ```python block."
    )


def describe_speedrun(settings: NanoGPTSettings) -> str:
    """The task description of the speedrun setting (base and improve prompts)."""
    return (
        f"Task {settings.name}: edit the modded-nanogpt training script train_gpt.py so that the "
        f"GPT reaches FineWeb validation loss <= {settings.target_loss:g} as fast as possible. It "
        f"runs as `torchrun --standalone --nproc_per_node={settings.nproc} train_gpt.py`, killed "
        f"after {settings.timeout_s:g} s of wall time measured from launch (start-up and "
        "compilation included). The data shards are under $DATA_PATH/data/fineweb10B. Print "
        "`step:N/M val_loss:X train_time:Yms step_avg:Zms` at step 0, every "
        f"{settings.val_every} steps and at the last step; keep the validation token budget. "
        "Answer with the complete script in one ```python block."
    )


def load_task(
    name: str = "nanogpt-cpu",
    data_root: Path | str | None = None,
    settings: NanoGPTSettings | None = None,
) -> NanoGPTTask:
    """Prepare and return the task ``name`` (building its data folder on first use).

    Args:
      name: ``"nanogpt-cpu"``.
      data_root: folder of task folders (default: ``rpg_llm.env.tasks.default_data_root()``).
      settings: override (default: ``cpu_settings()``, the calibrated target).

    Raises:
      ValueError: unknown name, missing calibration, or a guarded file in the data folder that
        differs from the package's copy.
    """
    if name not in TASK_IDS:
        raise ValueError(f"unknown NanoGPT task {name!r}; expected one of {TASK_IDS}")
    settings = settings or cpu_settings()
    root = Path(data_root) if data_root else default_data_root()
    public, private = build_cpu_data(root, settings)
    hashes = hash_files(public, PUBLIC_FILES)
    expected = hash_files(GUARD_DIR, GUARD_FILES)
    for key, value in expected.items():
        if hashes[key] != value:
            raise ValueError(f"guarded file {public / key} differs from the package's copy")
    return NanoGPTTask(name, describe(settings), settings, public, private, hashes)


def baseline_code(seed: int = 0) -> str:
    """The CPU baseline script with ``SEED = seed``."""
    code = (SOLUTIONS / "baseline_cpu.py").read_text()
    if "\nSEED = 0\n" not in code:  # pragma: no cover - guards the template
        raise RuntimeError("baseline template lost its SEED line")
    return code.replace("\nSEED = 0\n", f"\nSEED = {int(seed)}\n", 1)


def baseline_solutions(task_id: str) -> list[tuple[str, str]]:
    """``[(name, code)]`` seeding the buffer: the task's own baseline (``[]`` for other ids)."""
    if task_id not in TASK_IDS:
        return []
    return [("baseline_cpu", baseline_code(0))]
