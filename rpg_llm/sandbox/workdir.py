"""Fresh working folders holding ``solution.py``, ``tmp/`` and a read-only ``input/``."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

SCRIPT_NAME = "solution.py"


def workdir_root(root: Path | None) -> Path:
    """The parent of all working folders (created mode 0711 so a private uid can reach its own)."""
    root = Path(root) if root is not None else Path(tempfile.gettempdir()) / "rpg-sandbox"
    root.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(root.stat().st_mode)
        if mode & 0o011 != 0o011 and root.stat().st_uid == os.geteuid():
            root.chmod(mode | 0o711)
    except OSError:
        pass
    return root.absolute()


def new_workdir(root: Path | None, code: str, owner: int | None) -> Path:
    """Create a fresh working folder holding ``solution.py`` and an empty ``tmp/``.

    Args:
      root: parent folder (``None``: ``<tmp>/rpg-sandbox``).
      code: the solution's source text.
      owner: uid (and gid) to own the folder, or ``None`` to keep the current user.

    Returns:
      The absolute path of the new folder.
    """
    wd = Path(tempfile.mkdtemp(prefix="run-", dir=workdir_root(root)))
    (wd / SCRIPT_NAME).write_text(code, encoding="utf-8")
    (wd / "tmp").mkdir()
    if owner is not None:
        for p in (wd, wd / SCRIPT_NAME, wd / "tmp"):
            os.chown(p, owner, owner)
    return wd


def copy_input_readonly(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` and make the copy read-only (files 0444, folders 0555).

    When the host is root the copy stays owned by root, so a child running under a private uid can
    neither change nor delete it; the host's original is never exposed to the child.
    """
    shutil.copytree(src, dest, symlinks=False)
    for dirpath, dirnames, filenames in os.walk(dest, topdown=False):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o444)
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o555)
    os.chmod(dest, 0o555)
