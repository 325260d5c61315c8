"""Fresh working folders holding ``solution.py``, ``tmp/`` and a read-only ``input/``.

A working folder is named ``run-<pid>-<random>`` after the process that made it, so the folders
of a process that died before it could remove them (``kill -9``, a crash) are found and removed
by :func:`remove_stale_workdirs` (a run calls it when it starts or resumes).  The docker backend's
folders are size-capped tmpfs mounts (``new_workdir(..., tmpfs_bytes=N)``, root only); removing one
(``base.remove_tree``) unmounts it first.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import tempfile
from pathlib import Path

from rpg_llm.env.sandbox.base import SandboxError, remove_tree
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


def mount_tmpfs(folder: Path, size_bytes: int, *, mode: int = 0o700, nodev: bool = True) -> None:
    """Mount a tmpfs of at most ``size_bytes`` bytes (and one inode per 4 KiB of it, at least
    1024) on ``folder``: no set-uid programs, and (``nodev``) no device files; its root has
    ``mode``.

    Raises:
      ValueError: ``size_bytes`` is not a positive int.
      SandboxError: the mount failed (e.g. not root: the message names the folder and errno).
    """
    if not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes <= 0:
        raise ValueError(f"size_bytes must be a positive int, got {size_bytes!r}")
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={size_bytes},nr_inodes={max(1024, size_bytes // 4096)},mode={mode:o}"
    flags = 0x2 | (0x4 if nodev else 0)  # MS_NOSUID | MS_NODEV
    if libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", flags, options.encode()) != 0:
        err = ctypes.get_errno()
        raise SandboxError(
            f"cannot mount a tmpfs of {size_bytes} bytes on {folder}: {os.strerror(err)}"
        )


def new_workdir(
    root: Path | None, code: str, owner: int | None, tmpfs_bytes: int | None = None
) -> Path:
    """Create a fresh working folder holding ``solution.py`` and an empty ``tmp/``.

    Args:
      root: parent folder (``None``: ``<tmp>/rpg-sandbox``).
      code: the solution's source text.
      owner: uid (and gid) to own the folder, or ``None`` to keep the current user.
      tmpfs_bytes: when given, the folder is a tmpfs of that many bytes (:func:`mount_tmpfs`):
        nothing written in it can pass that size.

    Returns:
      The absolute path of the new folder.

    Raises:
      SandboxError: the tmpfs could not be mounted (the folder is removed again).
    """
    wd = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=workdir_root(root)))
    if tmpfs_bytes is not None:
        try:
            mount_tmpfs(wd, tmpfs_bytes)
        except BaseException:
            wd.rmdir()
            raise
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
    return reachable_by_others(src) and readable_by_others(src, stat.S_IWOTH | stat.S_IWGRP)


def readable_by_others(folder: Path, forbidden: int = 0) -> bool:
    """Every entry below ``folder`` (itself included) is readable by other users, folders also
    searchable, none is a link, and none has a mode bit of ``forbidden`` (e.g. ``S_IWOTH``)."""
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [".", *dirnames, *filenames]:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                return False
            if stat.S_ISLNK(st.st_mode):
                return False
            need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
            if st.st_mode & need != need or st.st_mode & forbidden:
                return False
    return True


def pid_alive(pid: int) -> bool:
    """True while a process ``pid`` exists (also one of another user)."""
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
        if entry.is_symlink() or not entry.is_dir() or pid_alive(int(parts[1])):
            continue
        remove_tree(entry)
        removed.append(entry)
    return removed
