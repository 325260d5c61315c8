"""A content-addressed cache of SFT warm-start weights (exact memoisation, no approximation).

The SFT warm start (:func:`rpg_llm.learner.sft.sft_warm_start`) is deterministic on a CPU: the same
starting weights, pairs, steps, batch size, learning rate, seed, prompt cap and library versions
give bit-identical weights. Runs that share all of these (both arms of
``paper_figures.llm_table`` at one SFT seed, a re-run of the CPU default) can therefore load the
result instead of recomputing it (8 steps of SmolLM2-135M: ~4-8 minutes on 2 cores). The key is a
SHA-256 over every input; an entry holds the fine-tuned weights (``model.safetensors``), their
digest and the SFT losses (``info.json``), written atomically (a temporary folder renamed into
place). A loaded entry whose weights do not hash to the stored digest is refused (and ignored).

Location: ``$RPG_SFT_CACHE`` or ``~/.cache/rpg/sft``; ``RPG_SFT_CACHE=off`` disables the cache.
Size: an entry is the model's weights (~540 MB for SmolLM2-135M); the cache keeps the
``$RPG_SFT_CACHE_ENTRIES`` (default 4) most recently stored or loaded entries and removes older
ones after each store (:func:`prune`).
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

__all__ = [
    "CACHE_ENV",
    "ENTRIES_ENV",
    "DEFAULT_ENTRIES",
    "cache_root",
    "max_entries",
    "sft_key",
    "load_entry",
    "store_entry",
    "prune",
]

CACHE_ENV = "RPG_SFT_CACHE"
ENTRIES_ENV = "RPG_SFT_CACHE_ENTRIES"
DEFAULT_ENTRIES = 4


def max_entries() -> int:
    """How many entries the cache keeps (``$RPG_SFT_CACHE_ENTRIES``, default 4).

    Raises:
        ValueError: the variable is not an integer >= 1 (names the variable and the value).
    """
    value = os.environ.get(ENTRIES_ENV)
    if value is None or value.strip() == "":
        return DEFAULT_ENTRIES
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENTRIES_ENV} must be an integer >= 1, got {value!r}")
    return n


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
    _touch(folder)
    return info


def _touch(folder: Path) -> None:
    """Mark an entry as just used (its ``info.json`` mtime orders :func:`prune`)."""
    try:
        os.utime(folder / "info.json")
    except OSError:
        pass


def prune(
    root: Path | None = None, keep: int | None = None, spare: str | None = None
) -> list[Path]:
    """Remove all but the ``keep`` (default :func:`max_entries`) most recently used entries
    (by the mtime of their ``info.json``); the entry ``spare`` (a key) is never removed.
    Returns the removed folders (none when the cache is off).

    Raises:
        ValueError: ``keep < 1``, or a bad ``$RPG_SFT_CACHE_ENTRIES``.
    """
    keep = max_entries() if keep is None else keep
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep!r}")
    root = cache_root() if root is None else root
    if root is None or not root.is_dir():
        return []
    entries = []
    for d in root.iterdir():
        try:
            entries.append((d.joinpath("info.json").stat().st_mtime, d.name, d))
        except OSError:
            continue  # not an entry (a temporary folder being written, a stray file)
    entries.sort(reverse=True)  # newest first
    kept = [e for e in entries if e[1] == spare][:1]
    removed = []
    for e in entries:
        if e[1] == spare:
            continue
        if len(kept) < keep:
            kept.append(e)
            continue
        shutil.rmtree(e[2], ignore_errors=True)
        removed.append(e[2])
    return removed


def store_entry(
    key: str, model: Any, info: dict[str, Any], root: Path | None = None
) -> Path | None:
    """Store ``model``'s parameters and ``info`` (must hold ``weights_sha256``) under ``key``;
    returns the entry's folder (None when the cache is off). An existing entry is kept. Then
    entries beyond :func:`max_entries` are removed, the oldest first (:func:`prune`).

    Raises:
        ValueError: ``info`` without ``weights_sha256``, or a bad ``$RPG_SFT_CACHE_ENTRIES``.
    """
    if "weights_sha256" not in info:
        raise ValueError("info must hold the weights' weights_sha256")
    root = cache_root() if root is None else root
    if root is None:
        return None
    folder = root / key
    if (folder / "info.json").exists():
        _touch(folder)
        return folder
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=root))
    try:
        state = {n: p.detach().to("cpu").contiguous() for n, p in model.named_parameters()}
        save_file(state, str(tmp / "model.safetensors"))
        (tmp / "info.json").write_text(json.dumps(info, indent=1) + "\n")
        os.replace(tmp, folder)
    except Exception:  # a full disk reaches here as OSError or as safetensors' own error
        shutil.rmtree(tmp, ignore_errors=True)
        if not (folder / "info.json").exists():
            raise
    prune(root, spare=key)
    return folder
