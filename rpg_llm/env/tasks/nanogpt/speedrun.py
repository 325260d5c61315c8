"""The ``nanogpt-speedrun`` setting: set-up checks and budget curves of val loss.

Set-up facts (the public ``KellerJordan/modded-nanogpt`` layout, read, not copied): the record
script is ``train_gpt.py`` at the top of the checkout, launched with
``torchrun --standalone --nproc_per_node=8 train_gpt.py``; its data are FineWeb-10B token shards
``fineweb_train_*.bin`` / ``fineweb_val_*.bin`` under ``$DATA_PATH/data/fineweb10B/``, each a
256-int32 header (magic 20240520, version 1, token count) followed by uint16 tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rpg_llm.env.tasks.nanogpt.data import hash_files
from rpg_llm.env.tasks.nanogpt.settings import SPEEDRUN
from rpg_llm.env.tasks.nanogpt.task import NanoGPTTask, describe_speedrun

__all__ = [
    "SHARD_MAGIC",
    "SPEEDRUN_DATA_ENV",
    "SPEEDRUN_GPUS",
    "SPEEDRUN_ID",
    "check_speedrun_setup",
    "fineweb_dir",
    "budget_curve",
    "load_speedrun_task",
    "loss_chains",
]

SHARD_MAGIC = 20240520
SHARD_VERSION = 1

SPEEDRUN_ID = SPEEDRUN.name
"""The task id of the speedrun (``"nanogpt-speedrun"``)."""

SPEEDRUN_GPUS = 8
"""Processes per node of the speedrun (one per CUDA GPU)."""

SPEEDRUN_DATA_ENV = "RPG_NANOGPT_DATA"
"""The environment variable a launcher reads the FineWeb shard folder from (``--data-root``)."""


def fineweb_dir(data_root: Path) -> Path | None:
    """The folder holding the shards: ``data_root`` itself or ``data_root/data/fineweb10B``."""
    for d in (Path(data_root), Path(data_root) / "data" / "fineweb10B"):
        if any(d.glob("fineweb_train_*.bin")) and any(d.glob("fineweb_val_*.bin")):
            return d
    return None


def _check_shard(path: Path) -> None:
    try:
        header = np.fromfile(path, dtype=np.int32, count=256)
    except OSError as exc:
        raise ValueError(f"FineWeb shard {path} cannot be read: {exc}") from exc
    if header.size < 256 or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        raise ValueError(
            f"FineWeb shard {path} has no speedrun header (magic {SHARD_MAGIC}, version "
            f"{SHARD_VERSION}); re-download it with the checkout's data/cached_fineweb10B.py"
        )
    n_tokens = int(header[2])
    size = path.stat().st_size
    if size != 256 * 4 + 2 * n_tokens:
        raise ValueError(
            f"FineWeb shard {path} is truncated: header says {n_tokens} tokens, file has "
            f"{(size - 1024) // 2}"
        )


def check_speedrun_setup(
    speedrun_dir: Path | str, data_root: Path | str, nproc: int, gpus: int | None = None
) -> None:
    """Check the speedrun's inputs before any model is loaded.

    Args:
      speedrun_dir: the user's modded-nanogpt checkout (``--speedrun-dir``); must hold
        ``train_gpt.py``.
      data_root: the FineWeb shards (``--data-root``): the folder of ``fineweb_*.bin`` or the
        checkout-style root holding ``data/fineweb10B/``.
      nproc: processes per node (8 in the speedrun); that many CUDA GPUs are needed.
      gpus: GPUs present (default: ``torch.cuda.device_count()``).

    Raises:
      ValueError: naming the bad value (missing folder or script, no train/val shards, a shard
        without the speedrun header or truncated, ``nproc`` < 1, fewer GPUs than ``nproc``).
    """
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"nproc must be an int >= 1, got {nproc!r}")
    sdir = Path(speedrun_dir).expanduser()
    if not sdir.is_dir():
        raise ValueError(
            f"--speedrun-dir {str(sdir)!r} is not a folder (a modded-nanogpt checkout)"
        )
    if not (sdir / "train_gpt.py").is_file():
        raise ValueError(f"--speedrun-dir {str(sdir)!r} holds no train_gpt.py")
    root = Path(data_root).expanduser()
    if not root.is_dir():
        raise ValueError(f"--data-root {str(root)!r} is not a folder of FineWeb shards")
    shards = fineweb_dir(root)
    if shards is None:
        raise ValueError(
            f"--data-root {str(root)!r} holds no FineWeb shards fineweb_train_*.bin and "
            "fineweb_val_*.bin (directly or under data/fineweb10B/)"
        )
    for pattern in ("fineweb_train_*.bin", "fineweb_val_*.bin"):
        _check_shard(sorted(shards.glob(pattern))[0])
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < nproc:
        raise ValueError(f"nproc {nproc} needs {nproc} CUDA GPU(s), found {gpus}")


def budget_curve(
    deltas: Sequence[float],
    losses: Sequence[float | None],
    valid: Sequence[bool],
    target: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One chain's budget curve: cumulative time and best val loss so far.

    Args:
      deltas: charged seconds of each sample, in execution order (shape (n,)).
      losses: each sample's val loss ``L`` (``None`` for invalid samples).
      valid: each sample's validity.
      target: when given, only samples with ``L <= target`` count (the best *crossing* loss).

    Returns:
      ``(times, best)``: float64 arrays of shape (n,); ``times`` the cumulative seconds after each
      sample, ``best`` the lowest counted loss among samples ``0..k`` (``nan`` before the first).
      Lower is better; plot ``-best`` or flip the axis to reuse ``paper_figures.budget_curves``.

    Raises:
      ValueError: unequal lengths, or a negative / non-finite delta.
    """
    n = len(deltas)
    if len(losses) != n or len(valid) != n:
        raise ValueError(
            f"deltas, losses, valid differ in length: {n}, {len(losses)}, {len(valid)}"
        )
    d = np.asarray(deltas, dtype=np.float64)
    if n and (not np.isfinite(d).all() or (d < 0).any()):
        raise ValueError(f"deltas must be finite seconds >= 0, got {list(deltas)}")
    counted = np.full(n, np.inf)
    for k, (L, ok) in enumerate(zip(losses, valid, strict=True)):
        if ok and L is not None and math.isfinite(L) and (target is None or L <= target):
            counted[k] = float(L)
    best = np.minimum.accumulate(counted) if n else counted
    return np.cumsum(d), np.where(np.isinf(best), np.nan, best)


def loss_chains(
    samples: Iterable[Any], target: float | None = None
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Budget curves per chain (batch row) from buffer samples of training steps >= 1.

    Args:
      samples: objects with ``row``, ``step``, ``exec_time`` (s), ``score`` (val loss or None)
        and ``status`` (``rpg_llm.loop.buffer.Sample``); step-0 seeds are skipped.
      target: as in ``budget_curve``.

    Returns:
      ``{row: (times, best)}`` with rows' samples in step order.
    """
    per_row: dict[int, list[Any]] = {}
    for s in samples:
        if int(s.step) >= 1:
            per_row.setdefault(int(s.row), []).append(s)
    out = {}
    for row, items in sorted(per_row.items()):
        items.sort(key=lambda s: int(s.step))
        out[row] = budget_curve(
            [float(s.exec_time) for s in items],
            [s.score for s in items],
            [s.status == "ok" for s in items],
            target,
        )
    return out


def load_speedrun_task(
    speedrun_dir: Path | str,
    data_root: Path | str,
    nproc: int = 8,
    gpus: int | None = None,
    cache_dir: Path | str | None = None,
) -> NanoGPTTask:
    """The ``nanogpt-speedrun`` task on the user's checkout and shards (checked first).

    The checkout is the attempt's read-only ``./input`` (on ``PYTHONPATH``, so a record script's
    local imports such as its kernel modules resolve); its top-level ``*.py`` files other than
    ``train_gpt.py`` are guarded (hash-checked before and after each attempt).  ``DATA_PATH``
    points at a folder whose ``data/fineweb10B`` holds the shards (a link farm in ``cache_dir``
    when ``data_root`` is the shard folder itself).  Val losses are the record script's own
    (``SPEEDRUN.official`` is False: record scripts save no checkpoint).

    Args:
      speedrun_dir, data_root, nproc, gpus: as in ``check_speedrun_setup``.
      cache_dir: where the link farm goes (default: ``~/.cache/rpg/nanogpt-speedrun``).

    Returns:
      ``rpg_llm.env.tasks.nanogpt.task.NanoGPTTask``; baseline: the checkout's ``train_gpt.py``.

    Raises:
      ValueError: as ``check_speedrun_setup``.
    """
    check_speedrun_setup(speedrun_dir, data_root, nproc, gpus)
    sdir = Path(speedrun_dir).expanduser().resolve()
    root = Path(data_root).expanduser().resolve()
    shards = fineweb_dir(root)
    assert shards is not None  # checked above
    if shards == root / "data" / "fineweb10B":
        data_path = root
    else:
        base = Path(cache_dir or Path.home() / ".cache" / "rpg" / "nanogpt-speedrun")
        link = base / "data" / "fineweb10B"
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and link.resolve() != shards:
            link.unlink()
        if not link.exists():
            link.symlink_to(shards, target_is_directory=True)
        data_path = base
    guarded = tuple(sorted(p.name for p in sdir.glob("*.py") if p.name != "train_gpt.py"))
    settings = replace(SPEEDRUN, nproc=nproc)
    return NanoGPTTask(
        id=settings.name,
        description=describe_speedrun(settings),
        settings=settings,
        public_dir=sdir,
        private_dir=sdir / ".rpg-no-private",
        guard_hashes=hash_files(sdir, guarded),
        guarded=guarded,
        env=(("DATA_PATH", str(data_path)),),
    )
