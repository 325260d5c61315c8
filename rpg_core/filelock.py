"""An exclusive lock on a file shared by processes (``flock``), that names its holder.

A results file that several processes may write (a tuning results file, a table's slice ledger)
is changed only under this lock: a writer takes it, reads the file as it is now, changes it and
writes it back, so no process writes from a stale copy. The lock lives on a separate lock file
(the results file itself is replaced atomically by a rename, which would drop a lock held on the
old file). The kernel releases an ``flock`` when its holder ends however it ends, so a killed
process never leaves the lock taken; the lock file holds the holder's pid, host and start time
for the message another process gets.

Usage::

    with FileLock(path.with_name(f".{path.name}.lock"), what=f"--out {path}"):
        ...  # read, change and write ``path``

``FileLock(..., wait=False)`` refuses at once with :class:`LockBusy` naming the holder.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from types import TracebackType

__all__ = ["FileLock", "LockBusy", "lock_path_for"]


class LockBusy(ValueError):
    """Another process holds the lock (the message names it)."""


def lock_path_for(path: Path) -> Path:
    """The lock file that guards ``path``: ``.<name>.lock`` beside it."""
    return path.with_name(f".{path.name}.lock")


class FileLock:
    """An exclusive ``flock`` on ``path``; a context manager (re-entry is an error).

    Args:
        path: the lock file (made, with its folder, when missing).
        what: how the message names what is locked (e.g. ``"--out results.json"``).
        wait: wait for the holder to let go (True), or raise :class:`LockBusy` at once.
        timeout_s: with ``wait``, the longest wait, seconds (None: no limit); past it,
            :class:`LockBusy`.
    """

    def __init__(
        self, path: Path, what: str = "", *, wait: bool = True, timeout_s: float | None = None
    ) -> None:
        self.path = Path(path)
        self.what = what or str(path)
        self.wait = wait
        self.timeout_s = timeout_s
        self._fd: int | None = None

    def holder(self) -> str:
        """The holder's line written in the lock file (``""`` when none is there)."""
        try:
            with open(self.path, "rb") as fh:
                return fh.read(400).decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def acquire(self) -> FileLock:
        """Take the lock (waiting as configured).

        Raises:
            LockBusy: not waiting (or past ``timeout_s``) and another process holds it.
            RuntimeError: this object holds it already.
        """
        if self._fd is not None:
            raise RuntimeError(f"{self.path}: the lock is held by this object already")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not self.wait or (deadline is not None and time.monotonic() >= deadline):
                        holder = os.pread(fd, 400, 0).decode("utf-8", "replace").strip()
                        raise LockBusy(
                            f"{self.what} is in use by {holder or 'another process'} "
                            f"(lock {self.path}); wait for it to end"
                        ) from None
                    time.sleep(0.05)
        except BaseException:
            os.close(fd)
            raise
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Let the lock go (idempotent)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
