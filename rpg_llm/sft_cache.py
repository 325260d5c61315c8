"""A content-addressed cache of SFT warm-start weights (exact memoisation, no approximation).

The SFT warm start (:func:`rpg_llm.sft.sft_warm_start`) is deterministic on a CPU: the same
starting weights, pairs, steps, batch size, learning rate, seed, prompt cap and library versions
give bit-identical weights. Runs that share all of these (both arms of
``paper_figures.llm_table`` at one SFT seed, a re-run of the CPU default) can therefore load the
result instead of recomputing it (8 steps of SmolLM2-135M: ~4-8 minutes on 2 cores). The key is a
SHA-256 over every input; an entry holds the fine-tuned weights (``model.safetensors``), their
digest and the SFT losses (``info.json``), written atomically (a temporary folder renamed into
place). A loaded entry whose weights do not hash to the stored digest is refused (and ignored).

Location: ``$RPG_SFT_CACHE`` or ``~/.cache/rpg/sft``; ``RPG_SFT_CACHE=off`` disables the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CACHE_ENV", "cache_root", "sft_key", "load_entry", "store_entry"]

CACHE_ENV = "RPG_SFT_CACHE"


def cache_root() -> Path | None:
    """The cache folder (``$RPG_SFT_CACHE``, default ``~/.cache/rpg/sft``); None when the
    variable is ``off`` (or ``0`` / empty string)."""
    value = os.environ.get(CACHE_ENV)
    if value is not None and value.strip().lower() in ("", "0", "off", "none"):
        return None
    return Path(value).expanduser() if value else Path.home() / ".cache" / "rpg" / "sft"


def sft_key(
    start_digest: str,
    examples: Sequence[Any],
    settings: dict[str, Any],
) -> str:
    """SHA-256 (hex) naming one SFT computation.

    Args:
        start_digest: SHA-256 of the starting weights (``rpg_llm.loop.trainer.weights_digest``).
        examples: the prompt -> answer pairs (objects with ``prompt`` and ``answer``), in order.
        settings: every other input (steps, batch size, lr, seed, prompt cap, ...); JSON-able.

    Raises:
        TypeError: settings that JSON cannot encode.
    """
    import torch
    import transformers

    payload = {
        "start": start_digest,
        "examples": [[e.prompt, e.answer] for e in examples],
        "settings": settings,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def load_entry(
    key: str, model: Any, digest: Callable[[Any], str], root: Path | None = None
) -> dict[str, Any] | None:
    """Load the cached weights of ``key`` into ``model`` (in place) and return the entry's info
    (``{"losses": [...], "weights_sha256": ..., ...}``); None when there is no valid entry (no
    cache, no entry, unreadable files, other parameter names or shapes, or weights that do not
    hash to the stored digest: the model is then restored to its starting weights).

    Args:
        digest: the weights hash (``weights_digest``), to check what was loaded.
    """
    root = cache_root() if root is None else root
    if root is None:
        return None
    folder = root / key
    try:
        info = json.loads((folder / "info.json").read_text())
        from safetensors.torch import load_file

        state = load_file(str(folder / "model.safetensors"))
    except (OSError, ValueError, KeyError):
        return None
    params = dict(model.named_parameters())
    if set(state) != set(params) or any(
        tuple(state[n].shape) != tuple(p.shape) or state[n].dtype != p.dtype
        for n, p in params.items()
    ):
        return None
    import torch

    backup = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(state[n])
    if digest(model) != info.get("weights_sha256"):
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(backup[n])
        return None
    return info


def store_entry(
    key: str, model: Any, info: dict[str, Any], root: Path | None = None
) -> Path | None:
    """Store ``model``'s parameters and ``info`` (must hold ``weights_sha256``) under ``key``;
    returns the entry's folder (None when the cache is off). An existing entry is kept.

    Raises:
        ValueError: ``info`` without ``weights_sha256``.
    """
    if "weights_sha256" not in info:
        raise ValueError("info must hold the weights' weights_sha256")
    root = cache_root() if root is None else root
    if root is None:
        return None
    folder = root / key
    if (folder / "info.json").exists():
        return folder
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=root))
    try:
        state = {n: p.detach().to("cpu").contiguous() for n, p in model.named_parameters()}
        save_file(state, str(tmp / "model.safetensors"))
        (tmp / "info.json").write_text(json.dumps(info, indent=1) + "\n")
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (folder / "info.json").exists():
            raise
    return folder
