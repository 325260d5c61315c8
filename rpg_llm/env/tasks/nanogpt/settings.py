"""Settings of one NanoGPT-speedrun-style environment: the speedrun itself and the CPU stand-in.

Reference facts: 8 GPUs, ``torchrun --standalone --nproc_per_node=8``, timeout 1500 s,
target val loss 3.28, val lines at step 0, every 125 steps and at the end.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["NanoGPTSettings", "SPEEDRUN", "cpu_settings", "TARGET_FILE"]

TARGET_FILE = Path(__file__).with_name("target_cpu.json")
"""Calibrated target of the CPU stand-in (``python -m rpg_llm.env.tasks.nanogpt.calibrate``)."""


@dataclass(frozen=True)
class NanoGPTSettings:
    """Everything the environment needs to run and grade one attempt.

    Attributes:
      name: task id (``"nanogpt-speedrun"`` or ``"nanogpt-cpu"``).
      nproc: ``torchrun --nproc_per_node``.
      timeout_s: wall-clock limit of one attempt, seconds (a timeout is charged all of it).
      target_loss: ``L*``, nats per token.
      val_every: steps between val lines (cadence).
      official: True: the environment recomputes the val loss from the script's checkpoint on
        held-out tokens (integrity guard); False: the log's best val loss is used (the speedrun
        with unmodified record scripts, which save no checkpoint).
      val_tokens: tokens of the public val split each val line must be computed on (the guarded
        evaluator prints ``val_tokens:K``); 0 disables the check.
      heldout_tokens: tokens of the held-out split the official evaluation uses.
      seq_len, eval_batch: shape ``(eval_batch, seq_len)`` of the exported model's input.
      vocab_size: logits' last dimension.
      report_tolerance: a final reported val loss below the official one by more than this
        (nats) marks the sample invalid (a fabricated line).
      memory_bytes, nproc_limit, threads: sandbox limits (``SandboxLimits``) per attempt.
      eval_timeout_s: limit of the official evaluation, seconds (not charged to the sample).
      drop_privileges: ``SandboxLimits.drop_privileges`` (``None``: automatic).
      sandbox: backend forced for this setting (``None``: the caller's).  The speedrun needs
        ``"subprocess"``: bubblewrap's private ``/dev`` has no GPU device nodes and its private
        ``/tmp`` hides host files there.

    Raises:
      ValueError: a non-positive count or limit.
    """

    name: str
    nproc: int
    timeout_s: float
    target_loss: float
    val_every: int
    official: bool = True
    val_tokens: int = 0
    heldout_tokens: int = 0
    seq_len: int = 64
    eval_batch: int = 16
    vocab_size: int = 256
    report_tolerance: float = 0.15
    memory_bytes: int = 16 * 2**30
    nproc_limit: int = 1024
    threads: int = 1
    eval_timeout_s: float = 300.0
    drop_privileges: bool | None = None
    sandbox: str | None = None

    def __post_init__(self) -> None:
        for key in ("nproc", "val_every", "seq_len", "eval_batch", "vocab_size", "threads"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"NanoGPTSettings.{key} must be an int >= 1, got {v!r}")
        for key in ("timeout_s", "eval_timeout_s", "target_loss"):
            v = getattr(self, key)
            if not isinstance(v, int | float) or not 0 < v < float("inf"):
                raise ValueError(f"NanoGPTSettings.{key} must be a positive number, got {v!r}")
        if self.official and self.heldout_tokens < self.seq_len * self.eval_batch + 1:
            raise ValueError(
                f"NanoGPTSettings.heldout_tokens {self.heldout_tokens} is below one eval batch"
            )

    def to_json(self) -> str:
        """The settings as one JSON object (written into the guarded folder)."""
        return json.dumps(asdict(self), sort_keys=True)


SPEEDRUN = NanoGPTSettings(
    name="nanogpt-speedrun",
    nproc=8,
    timeout_s=1500.0,
    target_loss=3.28,
    val_every=125,
    official=False,
    seq_len=1024,
    vocab_size=50304,
    memory_bytes=1024 * 2**30,
    nproc_limit=65536,
    threads=8,
    sandbox="subprocess",
)
"""The reference setting (modded-nanogpt record scripts print their own val lines)."""


def cpu_settings(target_loss: float | None = None) -> NanoGPTSettings:
    """The CPU stand-in: 1 process (gloo), byte-level tokens, a few-layer GPT, ~1-2 min/attempt.

    Args:
      target_loss: ``L*``; default: the calibrated value in ``target_cpu.json``.

    Raises:
      ValueError: no calibration file and no ``target_loss``.
    """
    if target_loss is None:
        if not TARGET_FILE.is_file():
            raise ValueError(f"no calibrated target: {TARGET_FILE} is missing")
        target_loss = float(json.loads(TARGET_FILE.read_text())["target_loss"])
    return NanoGPTSettings(
        name="nanogpt-cpu",
        nproc=1,
        timeout_s=300.0,
        target_loss=target_loss,
        val_every=50,
        official=True,
        val_tokens=16 * 64 * 16,
        heldout_tokens=16 * 64 * 32,
        seq_len=64,
        eval_batch=16,
        vocab_size=256,
    )
