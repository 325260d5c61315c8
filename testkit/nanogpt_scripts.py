"""Tiny training scripts for the NanoGPT environment tests: honest, and one per attack.

Every script builds ``Tiny`` (an embedding and a linear head: logits at position t depend only on
token t, so it is causal) with ``torch.manual_seed(0)``, takes ``STEPS`` SGD steps and follows the
task's contract unless its attack says otherwise.  ``tiny_model()`` rebuilds the untrained model
in the test process so that its held-out loss can be computed another way.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

STEPS = 2


def small_settings(**changes: Any) -> Any:
    """Small NanoGPT test settings (val every step, a (4, 16) evaluation batch, 120 s limits,
    target loss 5.0), with ``changes`` (``NanoGPTSettings`` fields) applied."""
    from rpg_llm.env.tasks.nanogpt.settings import cpu_settings

    return replace(
        cpu_settings(target_loss=5.0),
        val_every=1,
        seq_len=16,
        eval_batch=4,
        val_tokens=4 * 16 * 2,
        heldout_tokens=4 * 16 * 3,
        timeout_s=120.0,
        eval_timeout_s=120.0,
        **changes,
    )


_HEADER = """
import os, sys
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import ngpt_data
import ngpt_eval

class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(ngpt_data.VOCAB_SIZE, 8)
        self.head = nn.Linear(8, ngpt_data.VOCAB_SIZE)

    def forward(self, idx):
        return self.head(self.emb(idx))

dist.init_process_group("gloo")
torch.manual_seed(0)
model = Tiny()
"""

_TRAIN = """
STEPS = {steps}
{pre}
for step in range(STEPS + 1):
    if {log_cond}:
        ngpt_eval.log_val(step, STEPS, model, 0.001 * step)
    if step == STEPS:
        break
{post}
ngpt_eval.save_model(model)
dist.destroy_process_group()
"""


def script(pre: str = "", post: str = "", log_cond: str = "True", steps: int = STEPS) -> str:
    """A script with ``pre`` before the loop and ``post`` after it (both at column 0)."""
    return _HEADER + _TRAIN.format(steps=steps, pre=pre, post=post, log_cond=log_cond)


def honest() -> str:
    """Follows the contract (no training: the official loss is the untrained model's)."""
    return script()


def fabricated_line() -> str:
    """Logs steps 0 .. STEPS-1 honestly, then prints a made-up final line of val loss 1.0."""
    fake = (
        f'print("step:{STEPS}/{STEPS} val_loss:1.0000 train_time:2ms step_avg:1.00ms '
        'val_tokens:" + str(ngpt_eval.VAL_TOKENS), flush=True)'
    )
    return script(post=fake, log_cond="step < STEPS")


def edits_guard() -> str:
    """Overwrites the guarded evaluator (if it can) and otherwise behaves honestly."""
    pre = (
        "try:\n"
        "    with open(os.path.join('input', 'ngpt_eval.py'), 'a') as f:\n"
        "        f.write('\\nVAL_TOKENS = 1\\n')\n"
        "    print('guard edited', flush=True)\n"
        "except OSError as exc:\n"
        "    print('guard edit failed:', type(exc).__name__, flush=True)\n"
    )
    return script(pre=pre)


def shrinks_val_budget() -> str:
    """Monkeypatches the guarded evaluator's budget to one batch."""
    return script(pre="ngpt_eval.VAL_TOKENS = ngpt_eval.EVAL_BATCH * ngpt_eval.SEQ_LEN\n")


def reads_heldout(path: str) -> str:
    """Exits with an error if it can read the held-out tokens at ``path``; else honest."""
    pre = (
        f"if os.path.exists({path!r}):\n"
        f"    open({path!r}, 'rb').read(1)\n"
        "    raise SystemExit('held-out tokens are readable')\n"
    )
    return script(pre=pre)


def non_causal() -> str:
    """Saves a model whose logits at position t are a one-hot of token t+1 (it sees the answer)."""
    pre = """
class Peek(nn.Module):
    def forward(self, idx):
        nxt = torch.roll(idx, -1, dims=1)
        return 20.0 * F.one_hot(nxt, ngpt_data.VOCAB_SIZE).float()
"""
    post = "model = Peek()\n"
    return script(pre=pre, post=post)


def crashes() -> str:
    """Raises ZeroDivisionError after the first val line."""
    return script(pre="x = 1 / 0\n", log_cond="step == 0")


def tiny_model() -> torch.nn.Module:
    """The untrained ``Tiny`` model exactly as the scripts build it (vocabulary 256)."""
    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(256, 8)
            self.head = torch.nn.Linear(8, 256)

        def forward(self, idx):
            return self.head(self.emb(idx))

    return Tiny()
