"""A run folder's identity: the settings it was made with and its model's weights, fixed once.

``config.json`` is the run's settings as a reader sees them, and a text file anyone may edit.
``identity.json`` is written beside it once, when the folder is made (:meth:`RunFolder.create`,
mode 0444), and never again: the same settings and the SHA-256 of the model's weight files where
they are on this machine (:func:`model_digest`). A resume compares the two
(:func:`identity_difference`) and refuses any difference but what a resume may change
(:data:`RESUME_MAY_CHANGE`: more steps, a larger execution budget, the speed-only settings), so
that an edited ``config.json`` can never move a run to another task, engine, model, arm, seed,
batch size, answer format or reward; the model's weights are compared too, so another model
under the same name is refused. The comparison reads two small files: it runs before any
sample is written or any model loads.

A folder made before this record existed has only ``config.json``: it is accepted, and the
first resume launched on it writes the record from that ``config.json`` (:func:`adopt`), so
the run is fixed from then on.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rpg_llm.config import RUN_RECORD_KEYS, SPEED_ONLY_SETTINGS, LoopConfig

__all__ = [
    "IDENTITY_FILE",
    "RESUME_MAY_CHANGE",
    "WEIGHT_SUFFIXES",
    "Difference",
    "identity_difference",
    "identity_record",
    "model_digest",
    "folder_digest",
    "write_identity",
    "read_identity",
    "adopt",
]

IDENTITY_FILE = "identity.json"
"""The record's name in a run folder (beside ``config.json``)."""

RESUME_MAY_CHANGE = ("steps", "exec_budget_s", *SPEED_ONLY_SETTINGS)
"""Settings (dotted paths) a resume may change: the step cap (never below the checkpointed
steps), the execution budget (only to a larger one, or none) and the settings that change
only speed and memory. Every other setting is the run's identity."""

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
"""Files of a model folder whose bytes :func:`folder_digest` hashes."""

_BLOB = re.compile(r"[0-9a-f]{64}")


class Difference(NamedTuple):
    """The first setting in which a ``config.json`` differs from its folder's record."""

    field: str
    made: Any
    now: Any

    def text(self) -> str:
        """``"task: made with 'text', now 'iris'"``."""
        return f"{self.field}: made with {self.made!r}, now {self.now!r}"


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as the full settings it stands for (defaults filled, run-record keys left
    out), or, when it does not read as settings, as it is without the run-record keys."""
    try:
        return LoopConfig.from_dict(dict(config)).to_dict()
    except (ValueError, TypeError):
        return {k: v for k, v in config.items() if k not in RUN_RECORD_KEYS}


def _leaves(d: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k in sorted(d):
        v = d[k]
        if isinstance(v, Mapping):
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _larger_budget(made: Any, now: Any) -> bool:
    """Whether execution budget ``now`` is at least ``made`` (None: no budget, the largest)."""
    if now is None:
        return True
    if made is None:
        return False
    try:
        return float(now) >= float(made)
    except (TypeError, ValueError):
        return False


def identity_difference(record: Mapping[str, Any], config: Mapping[str, Any]) -> Difference | None:
    """The first setting (dotted path, sorted) in which ``config`` (a ``config.json``) differs
    from the ``record`` (:func:`identity_record`) other than what a resume may change
    (:data:`RESUME_MAY_CHANGE`); None when it is the same run."""
    made = dict(_leaves(_settings(record.get("settings", {}))))
    now = dict(_leaves(_settings(config)))
    for key in sorted(set(made) | set(now)):
        a, b = made.get(key), now.get(key)
        if a == b or key == "steps" or key in SPEED_ONLY_SETTINGS:
            continue
        if key == "exec_budget_s" and _larger_budget(a, b):
            continue
        return Difference(key, a, b)
    return None


def _file_sha256(path: Path) -> str:
    """SHA-256 of a weight file: the name of the Hugging Face cache blob it links to (the hub
    names blobs by their SHA-256), else its bytes hashed (memoised by size, time and inode)."""
    if path.is_symlink():
        blob = Path(os.readlink(path)).name
        if _BLOB.fullmatch(blob):
            return blob
    st = path.stat()
    return _hashed(str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


@functools.lru_cache(maxsize=64)
def _hashed(path: str, size: int, mtime_ns: int, inode: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def folder_digest(folder: Path) -> str | None:
    """SHA-256 over the weight files (:data:`WEIGHT_SUFFIXES`) at the top of a model folder,
    by name and content; None when there are none."""
    files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        return None
    h = hashlib.sha256()
    for p in files:
        h.update(f"{p.name} {_file_sha256(p)}\n".encode())
    return h.hexdigest()


def model_digest(model: str, allow_download: bool = False) -> str | None:
    """The :func:`folder_digest` of ``model`` (a local folder or a Hugging Face id) where it is
    on this machine; None where it is not (nor, with ``allow_download``, on the hub).

    A Hugging Face cache names its files by their SHA-256, so a cached model costs no hashing;
    a local folder's files are hashed once per process (about 1 s per GB).

    Raises:
        ValueError: with ``allow_download``, the model cannot be found (names it).
    """
    from rpg_llm.learner.models import resolve_model  # resolving imports neither torch nor a model

    try:
        folder = resolve_model(model, allow_download=allow_download)
    except ValueError:
        if allow_download:
            raise
        return None
    return folder_digest(folder)


def identity_record(config: Mapping[str, Any], weights_sha256: str | None) -> dict[str, Any]:
    """The record of a run made with ``config`` (its ``config.json``): its settings, the
    model's weights digest (None: not known) and the time."""
    return {
        "settings": {k: v for k, v in config.items() if k not in RUN_RECORD_KEYS},
        "weights_sha256": weights_sha256,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def write_identity(path: Path, record: Mapping[str, Any]) -> bool:
    """Write ``record`` to ``path`` once (read-only, mode 0444) unless a record is there;
    atomic (a temporary file, then a hard link that fails when ``path`` exists). Returns whether
    this call wrote it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    os.chmod(tmp, 0o444)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def read_identity(path: Path) -> dict[str, Any] | None:
    """The record at ``path``; None when there is none (a folder made before records).

    Raises:
        ValueError: the file is not a record (names it).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} cannot be read: {err}") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
        raise ValueError(f"{path} is not a run folder's identity record (no settings)")
    return record


def adopt(path: Path, config: Mapping[str, Any], model: str) -> bool:
    """Write the record of a folder made before records existed, from its ``config.json``
    (``config``) and the weights of ``model`` now; False when a record is there already."""
    if path.exists():
        return False
    return write_identity(path, identity_record(config, model_digest(model)))
