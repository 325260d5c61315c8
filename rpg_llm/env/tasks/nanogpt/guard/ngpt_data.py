"""Guarded data loader of the nanogpt-cpu task (read-only and hash-checked; do not edit).

Byte-level tokens (vocabulary 256) of the corpus split ``train`` and the public ``val`` split, as
written by ``rpg_llm.env.tasks.nanogpt.data``.  The held-out split used for the official score is
not
in this folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
SETTINGS = json.loads((HERE / "settings.json").read_text())
VOCAB_SIZE = int(SETTINGS["vocab_size"])
SEQ_LEN = int(SETTINGS["seq_len"])


def tokens(split: str) -> torch.Tensor:
    """All tokens of ``split`` ("train" or "val") as a 1-D int64 tensor."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    data = np.fromfile(HERE / f"{split}.bin", dtype=np.uint8)
    return torch.from_numpy(data.astype(np.int64))


class TrainLoader:
    """Random windows of the train split: ``next()`` -> ``(x, y)``, int64, shape (B, T).

    ``y`` is ``x`` shifted by one token.  Each rank draws its own windows from a generator seeded
    with ``seed * 1000 + rank``.
    """

    def __init__(self, batch_size: int, seq_len: int, rank: int = 0, world: int = 1, seed: int = 0):
        self.data = tokens("train")
        self.batch_size, self.seq_len = int(batch_size), int(seq_len)
        self.gen = torch.Generator().manual_seed(int(seed) * 1000 + int(rank))
        self.world = int(world)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        hi = len(self.data) - self.seq_len - 1
        start = torch.randint(0, hi, (self.batch_size,), generator=self.gen)
        offs = torch.arange(self.seq_len + 1)
        win = self.data[start[:, None] + offs[None, :]]
        return win[:, :-1], win[:, 1:]
