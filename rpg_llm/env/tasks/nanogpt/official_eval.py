"""The environment's own evaluation of a checkpoint on held-out tokens (integrity guard).

Run by the environment as a sandboxed script (its source is the sandbox's ``solution.py``) with
``./input/`` holding ``model.pt2`` (the script's ``torch.export`` checkpoint), ``heldout.bin``
(uint8 byte tokens the training script never saw) and ``settings.json``.  It prints one JSON line:
``{"ok": true, "loss": L, "tokens": N}`` or ``{"ok": false, "reason": "..."}``.

Checks, in order: the program loads; its output on an int64 batch of shape
``(eval_batch, seq_len)`` has shape ``(eval_batch, seq_len, vocab_size)`` and is finite; it is
causal (the logits up to position ``p`` do not change when every later token is replaced, for
several ``p``); then the mean cross-entropy (nats per token) over the first ``heldout_tokens``
predicted tokens in consecutive windows.  Self-contained: imports only torch and numpy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


def _fail(reason: str) -> None:
    print(json.dumps({"ok": False, "reason": reason}), flush=True)
    sys.exit(0)


def main() -> None:
    """Evaluate ``input/model.pt2`` on ``input/heldout.bin``; print the JSON result line."""
    torch.set_num_threads(1)
    inp = Path("input")
    cfg = json.loads((inp / "settings.json").read_text())
    B, T, V = int(cfg["eval_batch"]), int(cfg["seq_len"]), int(cfg["vocab_size"])
    budget = int(cfg["heldout_tokens"])
    try:
        model = torch.export.load(str(inp / "model.pt2")).module()
    except Exception as exc:  # noqa: BLE001 - any load failure is the script's fault
        _fail(f"the checkpoint does not load: {type(exc).__name__}: {str(exc)[:200]}")
    data = torch.from_numpy(np.fromfile(inp / "heldout.bin", dtype=np.uint8).astype(np.int64))
    per_batch = B * T
    n_batches = min(budget, len(data) - 1) // per_batch
    if n_batches < 1:
        _fail("held-out split shorter than one batch (set-up error)")
    gen = torch.Generator().manual_seed(1234)
    total, count = 0.0, 0
    with torch.no_grad():
        for b in range(n_batches):
            win = data[b * per_batch : (b + 1) * per_batch + 1]
            x = win[:-1].view(B, T)
            y = win[1:].view(B, T)
            try:
                logits = model(x)
            except Exception as exc:  # noqa: BLE001
                _fail(f"the checkpoint fails on a ({B}, {T}) batch: {type(exc).__name__}")
            if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (B, T, V):
                shape = tuple(getattr(logits, "shape", ()))
                _fail(f"the checkpoint returns shape {shape}, expected {(B, T, V)}")
            logits = logits.float()
            if not torch.isfinite(logits).all():
                _fail("the checkpoint returns non-finite logits")
            if b == 0:
                for p in sorted({0, T // 4, T // 2, (3 * T) // 4, T - 2}):
                    x2 = x.clone()
                    x2[:, p + 1 :] = torch.randint(0, V, (B, T - p - 1), generator=gen)
                    other = model(x2).float()
                    gap = (other[:, : p + 1] - logits[:, : p + 1]).abs().max().item()
                    if gap > 1e-4 * (1.0 + logits.abs().max().item()):
                        _fail(
                            f"the model is not causal: its logits at position {p} see later tokens"
                        )
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="sum")
            total += float(loss)
            count += y.numel()
    print(json.dumps({"ok": True, "loss": total / count, "tokens": count}), flush=True)


if __name__ == "__main__":
    main()
