"""Private uids for sandboxed children when the host runs as root.

Why: ``RLIMIT_NPROC`` is counted per uid and never applies to root, so a fork bomb started by a
root child is unbounded.  When the host is root, every run borrows a uid from a pool
(``UID_BASE .. UID_BASE + UID_COUNT - 1``, no passwd entry needed), held through an ``flock`` on a
lock file so that concurrent runs in other processes (a process pool, Ray workers) never share one.
The uid owns only the working folder, so it cannot write elsewhere, and its process limit is its
own.  After the run every process still owned by the uid is killed (``kill(-1, SIGKILL)`` sent
as that uid), which also reaches grandchildren that left the process group.
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

UID_BASE = 2_000_000
UID_COUNT = 512
LOCK_DIR = Path("/tmp/rpg-sandbox-uids")


def is_root() -> bool:
    """True when this process has euid 0."""
    return os.geteuid() == 0


def reachable_by_others(path: Path) -> bool:
    """True when a uid other than the owner can reach and read ``path``.

    Every ancestor must be searchable by "other" (``o+x``) and ``path`` readable (``o+r``; for a
    folder also ``o+x``).
    """
    path = Path(os.path.realpath(path))
    for parent in reversed(path.parents):
        try:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & need == need


def first_unreachable_ancestor(path: Path) -> Path | None:
    """The highest ancestor of ``path`` (or itself) that "other" cannot search, else ``None``."""
    path = Path(os.path.realpath(path))
    for p in [*reversed(path.parents), path]:
        try:
            mode = os.stat(p).st_mode
        except OSError:
            return p
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return p
    return None


def _scan(uid: int) -> list[tuple[int, int]]:
    """``(pid, threads)`` of every process whose real uid is ``uid`` (read from ``/proc``)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as fh:
                owner, threads = None, 1
                for line in fh:
                    if line.startswith(b"Uid:"):
                        owner = int(line.split()[1])
                        if owner != uid:
                            break
                    elif line.startswith(b"Threads:"):
                        threads = int(line.split()[1])
                if owner == uid:
                    found.append((int(entry.name), threads))
        except (OSError, ValueError, IndexError):
            continue
    return found


def processes_of_uid(uid: int) -> list[int]:
    """Pids whose real uid is ``uid`` (read from ``/proc``)."""
    return [pid for pid, _ in _scan(uid)]


def kill_uid(uid: int, attempts: int = 20) -> bool:
    """Kill every process of ``uid``; returns True when none is left.

    ``kill -9 -1`` run as ``uid`` reaches every process that uid may signal (all of its own,
    including ones that called ``setsid``); repeated until ``/proc`` shows none, since a fork bomb
    may create processes while the signal is delivered.
    """
    if uid == 0:
        raise ValueError("refusing to kill every process of uid 0")
    kill_bin = shutil.which("kill") or "/bin/kill"
    for _ in range(attempts):
        if not processes_of_uid(uid):
            return True
        try:
            subprocess.run(
                [kill_bin, "-s", "KILL", "--", "-1"],
                user=uid,
                group=uid,
                extra_groups=[],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            for pid in processes_of_uid(uid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.01)
    return not processes_of_uid(uid)


@contextmanager
def borrowed_uid(lock_dir: Path = LOCK_DIR) -> Iterator[int]:
    """Hold a private uid from the pool for the duration of the ``with`` block.

    The uid is free of processes on entry and on exit (leftovers of a crashed run are killed).

    Raises:
      RuntimeError: every uid of the pool is held (more than ``UID_COUNT`` concurrent runs).
    """
    lock_dir.mkdir(parents=True, exist_ok=True)
    start = random.randrange(UID_COUNT)
    for i in range(UID_COUNT):
        uid = UID_BASE + (start + i) % UID_COUNT
        fd = os.open(lock_dir / f"uid-{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            kill_uid(uid)
            yield uid
        finally:
            kill_uid(uid)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    raise RuntimeError(f"all {UID_COUNT} sandbox uids are in use (lock folder {lock_dir})")


def nproc_limit(limit: int, uid: int | None) -> int:
    """``RLIMIT_NPROC`` value giving the child ``limit`` processes of its own.

    With a private uid the count starts at zero; otherwise the limit counts every process of the
    current user, so the ones already running are added.
    """
    if uid is not None:
        return limit
    return limit + sum(threads for _, threads in _scan(os.getuid()))


def setpriv_prefix(uid: int, *, read_search: bool = False) -> list[str]:
    """Command prefix (util-linux ``setpriv``) that runs the rest of the command as ``uid``.

    ``--no-new-privs`` stops setuid binaries from regaining root.  ``read_search=True`` keeps only
    ``CAP_DAC_READ_SEARCH`` (ambient), for hosts whose interpreter lies in a folder other users
    cannot enter (e.g. ``/root/.pyenv``): the child may then read any file but still write only its
    working folder, and its process limit still applies.

    Raises:
      RuntimeError: ``setpriv`` is not installed.
    """
    exe = shutil.which("setpriv")
    if exe is None:
        raise RuntimeError("setpriv (util-linux) is needed to run children under a private uid")
    cmd = [exe, "--reuid", str(uid), "--regid", str(uid), "--clear-groups", "--no-new-privs"]
    if read_search:
        cmd += [
            "--inh-caps=-all,+dac_read_search",
            "--ambient-caps=+dac_read_search",
            "--bounding-set=-all,+dac_read_search",
        ]
    else:
        cmd += ["--inh-caps=-all", "--bounding-set=-all"]
    return cmd + ["--"]


def should_drop(drop_privileges: bool | None) -> bool:
    """Whether children run under a private uid: as root by default, never otherwise."""
    if drop_privileges is None:
        return is_root()
    if drop_privileges and not is_root():
        raise ValueError("drop_privileges=True needs the host process to run as root")
    return drop_privileges
