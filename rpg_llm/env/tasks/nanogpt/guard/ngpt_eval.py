"""Guarded evaluation entry points of the nanogpt-cpu task (read-only and hash-checked).

* ``val_loss(model)``: mean cross-entropy (nats per token) on the first ``VAL_TOKENS`` predicted
  tokens of the public val split, in windows of shape ``(EVAL_BATCH, SEQ_LEN)``.
* ``log_val(step, num_steps, model, train_time_s)``: computes ``val_loss`` and prints
  ``step:N/M val_loss:X train_time:Yms step_avg:Zms val_tokens:K`` (rank 0).
* ``save_model(model, path)``: exports ``model`` (``idx -> logits``, int64 (B, T) -> float
  (B, T, VOCAB_SIZE)) with ``torch.export`` so that the environment can recompute the official
  loss on held-out tokens with its own code.  The run must end with a saved model.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
SETTINGS = json.loads((HERE / "settings.json").read_text())
VAL_TOKENS = int(SETTINGS["val_tokens"])
SEQ_LEN = int(SETTINGS["seq_len"])
EVAL_BATCH = int(SETTINGS["eval_batch"])
VOCAB_SIZE = int(SETTINGS["vocab_size"])
VAL_EVERY = int(SETTINGS["val_every"])
CHECKPOINT = "final_model.pt2"


def _dist() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _logits(out):
    return out[0] if isinstance(out, tuple | list) else out


@torch.no_grad()
def val_loss(model: torch.nn.Module) -> tuple[float, int]:
    """``(mean cross-entropy, tokens evaluated)`` on the public val split (all ranks)."""
    from ngpt_data import tokens

    data = tokens("val")
    per_batch = EVAL_BATCH * SEQ_LEN
    n_batches = VAL_TOKENS // per_batch
    rank, world = _dist()
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64)
    for b in range(rank, n_batches, world):
        win = data[b * per_batch : (b + 1) * per_batch + 1]
        x = win[:-1].view(EVAL_BATCH, SEQ_LEN)
        y = win[1:].view(EVAL_BATCH, SEQ_LEN)
        logits = _logits(model(x)).float()
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum")
        total += torch.tensor([loss.item(), y.numel()], dtype=torch.float64)
    if world > 1:
        torch.distributed.all_reduce(total)
    model.train(was_training)
    n = int(total[1].item())
    return (float(total[0] / total[1]) if n else math.nan), n


def log_val(step: int, num_steps: int, model: torch.nn.Module, train_time_s: float) -> float:
    """Evaluate and print the val line of ``step`` (rank 0); returns the val loss."""
    loss, n = val_loss(model)
    rank, _ = _dist()
    if rank == 0:
        t_ms = 1000.0 * train_time_s
        avg = t_ms / step if step > 0 else math.nan
        print(
            f"step:{step}/{num_steps} val_loss:{loss:.4f} train_time:{t_ms:.0f}ms "
            f"step_avg:{avg:.2f}ms val_tokens:{n}",
            flush=True,
        )
    return loss


class _LogitsOnly(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return _logits(self.model(idx)).float()


def save_model(model: torch.nn.Module, path: str = CHECKPOINT) -> None:
    """Export ``model`` for the official evaluation (rank 0; atomically replaces ``path``)."""
    rank, _ = _dist()
    if rank != 0:
        return
    inner = getattr(model, "module", model)  # DDP
    inner = getattr(inner, "_orig_mod", inner)  # torch.compile
    was_training = inner.training
    inner.eval()
    example = (torch.zeros(EVAL_BATCH, SEQ_LEN, dtype=torch.long),)
    program = torch.export.export(_LogitsOnly(inner), example)
    tmp = f"{path}.tmp"
    torch.export.save(program, tmp)
    os.replace(tmp, path)
    inner.train(was_training)
