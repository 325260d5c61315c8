"""Private uids for sandboxed children when the host runs as root.

Why: ``RLIMIT_NPROC`` is counted per uid and never applies to root, so a fork bomb started by a
root child is unbounded.  When the host is root, every run borrows a uid from a pool
(``UID_BASE .. UID_BASE + UID_COUNT - 1``, no passwd entry needed), held through an ``flock`` on a
lock file so that concurrent runs in other processes (a process pool, Ray workers) never share one.
The uid owns only the working folder, so it cannot write elsewhere, and its process limit is its
own.  After the run every process still owned by the uid is killed (``kill(-1, SIGKILL)`` sent
by a helper process that switched to that uid), which also reaches grandchildren that left the
process group, and the files it left in world-writable host folders (``/tmp``, ``/var/tmp``,
``/dev/shm``, ``/run/lock``) are deleted.
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rpg_llm.env.sandbox.base import SandboxError

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
    """``(pid, threads)`` of every live process whose real uid is ``uid`` (read from ``/proc``).

    Zombies (state ``Z``: already dead, waiting to be reaped by their parent) are not counted.
    """
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as fh:
                owner, threads, zombie = None, 1, False
                for line in fh:
                    if line.startswith(b"State:"):
                        zombie = line.split()[1] in (b"Z", b"X")
                    elif line.startswith(b"Uid:"):
                        owner = int(line.split()[1])
                        if owner != uid:
                            break
                    elif line.startswith(b"Threads:"):
                        threads = int(line.split()[1])
                if owner == uid and not zombie:
                    found.append((int(entry.name), threads))
        except (OSError, ValueError, IndexError):
            continue
    return found


def processes_of_uid(uid: int) -> list[int]:
    """Pids of the live processes whose real uid is ``uid`` (read from ``/proc``)."""
    return [pid for pid, _ in _scan(uid)]


_SIGNAL_AS = """
import os, sys
code = 5
try:
    uid, signum = int(sys.argv[1]), int(sys.argv[2])
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    except OSError:
        code = 4
    else:
        try:
            os.kill(-1, signum)
            code = 0
        except ProcessLookupError:
            code = 3
finally:
    os._exit(code)
"""


def signal_all_as(uid: int, signum: int = signal.SIGKILL) -> int:
    """Send ``signum`` to every process ``uid`` may signal, from a helper running as ``uid``.

    POSIX ``kill(-1, sig)`` sent by an unprivileged uid reaches every process with that real or
    saved uid (all of the run's processes, also those that called ``setsid`` or were re-parented),
    and none of anyone else's.  The helper is a fresh interpreter (``exec``, never a fork of this
    process, which may run other threads holding locks): it switches gid then uid
    (``setresgid`` / ``setresuid``, so no privilege is left to reach other processes), signals,
    and exits with 0 when ``kill`` ran (Linux returns success even when every process was out of
    reach), 3 on ``ESRCH`` (no other process at all), 4 when switching uid failed.
    No external ``kill`` program is used (procps-ng 4.0.2 rejects ``kill -s KILL -- -1``).

    Returns:
      The helper's exit status (0, 3 or 4; 5 for an unexpected error).

    Raises:
      ValueError: ``uid`` is 0 (that would signal every process of the machine).
    """
    if uid == 0:
        raise ValueError("refusing to signal every process as uid 0")
    argv = [sys.executable, "-I", "-S", "-c", _SIGNAL_AS, str(uid), str(int(signum))]
    done = subprocess.run(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return done.returncode if done.returncode >= 0 else 5


def kill_uid(uid: int, attempts: int = 50) -> bool:
    """Kill every process of ``uid``; returns True when none is left.

    ``kill(-1, SIGKILL)`` sent as ``uid`` (``signal_all_as``) reaches every process that uid may
    signal (all of its own, including ones that called ``setsid``); repeated until ``/proc`` shows
    none alive, since a fork bomb may create processes while the signal is delivered.

    Raises:
      ValueError: ``uid`` is 0.
    """
    if uid == 0:
        raise ValueError("refusing to kill every process of uid 0")
    for _ in range(attempts):
        if not processes_of_uid(uid):
            return True
        if signal_all_as(uid) == 4:  # could not switch uid: signal the pids found one by one
            for pid in processes_of_uid(uid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.01)
    return not processes_of_uid(uid)


WORLD_WRITABLE = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path("/run/lock"))
"""Host folders any uid may write (sticky, mode 1777 on Debian); searched by ``remove_files_of``."""


def files_of_uid(uid: int, roots: tuple[Path, ...] = WORLD_WRITABLE) -> list[Path]:
    """Top-most entries owned by ``uid`` under ``roots`` (symbolic links are not followed).

    A uid without groups can create entries only in folders writable by "other" or owned by it,
    so the walk descends only into such folders (and skips the rest): every file the uid could
    leave there is found without walking all of ``/tmp``.
    """
    found: list[Path] = []
    seen: set[tuple[int, int]] = set()

    def walk(folder: Path) -> None:
        try:
            st = os.lstat(folder)
        except OSError:
            return
        if (st.st_dev, st.st_ino) in seen:
            return
        seen.add((st.st_dev, st.st_ino))
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if est.st_uid == uid:
                found.append(Path(entry.path))
            elif stat.S_ISDIR(est.st_mode) and est.st_mode & stat.S_IWOTH:
                walk(Path(entry.path))

    for root in roots:
        if root.is_dir():
            walk(Path(os.path.realpath(root)))
    return found


def remove_files_of(uid: int, roots: tuple[Path, ...] = WORLD_WRITABLE) -> list[Path]:
    """Delete what ``uid`` left in the world-writable host folders ``roots``; returns the paths.

    Raises:
      ValueError: ``uid`` is 0.
    """
    if uid == 0:
        raise ValueError("refusing to remove every file of uid 0")
    found = files_of_uid(uid, roots)
    for path in found:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
        except OSError:
            pass
    return found


@contextmanager
def borrowed_uid(lock_dir: Path = LOCK_DIR) -> Iterator[int]:
    """Hold a private uid from the pool for the duration of the ``with`` block.

    The uid is free of processes on entry and on exit (leftovers of a crashed run are killed), and
    what it left in the world-writable host folders (``WORLD_WRITABLE``) is deleted on both.

    Raises:
      SandboxError: every uid of the pool is held (more than ``UID_COUNT`` concurrent runs).
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
            remove_files_of(uid)
            yield uid
        finally:
            kill_uid(uid)
            remove_files_of(uid)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    raise SandboxError(f"all {UID_COUNT} sandbox uids are in use (lock folder {lock_dir})")


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
      SandboxError: ``setpriv`` is not installed.
    """
    exe = shutil.which("setpriv")
    if exe is None:
        raise SandboxError("setpriv (util-linux) is needed to run children under a private uid")
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
