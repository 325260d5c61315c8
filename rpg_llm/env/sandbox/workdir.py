"""Fresh working folders holding ``solution.py``, ``tmp/`` and a read-only ``input/``.

A working folder is named ``run-<pid>-<random>`` after the process that made it, so the folders
of a process that died before it could remove them (``kill -9``, a crash) are found and removed
by :func:`remove_stale_workdirs` (a run calls it when it starts or resumes).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from rpg_llm.env.sandbox.base import remove_tree
from rpg_llm.env.sandbox.identity import reachable_by_others

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
    wd = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=workdir_root(root)))
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


def shareable_readonly(src: Path) -> bool:
    """True when a private uid can read ``src`` but change nothing in it.

    Every folder must be ``o+rx`` and every file ``o+r``, nothing writable by group or others,
    and the folder reachable from ``/``; then a symbolic link can replace the copy.
    """
    if not reachable_by_others(src):
        return False
    for dirpath, dirnames, filenames in os.walk(src):
        for name in [".", *dirnames, *filenames]:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                return False
            if stat.S_ISLNK(st.st_mode):
                return False
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
            if st.st_mode & need != need or st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
                return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_workdirs(root: Path | None) -> list[Path]:
    """Remove the working folders under ``root`` whose making process has ended.

    Args:
      root: the parent of the working folders (``None``: ``<tmp>/rpg-sandbox``).

    Returns:
      The folders removed.  Folders of live processes (any run still executing) and names not
      of the form ``run-<pid>-...`` are left alone.
    """
    base = Path(root) if root is not None else Path(tempfile.gettempdir()) / "rpg-sandbox"
    if not base.is_dir():
        return []
    removed = []
    for entry in sorted(base.iterdir()):
        parts = entry.name.split("-")
        if len(parts) < 3 or parts[0] != "run" or not parts[1].isdigit():
            continue
        if entry.is_symlink() or not entry.is_dir() or _alive(int(parts[1])):
            continue
        remove_tree(entry)
        removed.append(entry)
    return removed
