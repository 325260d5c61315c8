"""Start a child under resource limits, capture its output with a cap, enforce a wall-clock limit.

Shared by the subprocess and bubblewrap backends.  The child starts in a new session (its own
process group); on timeout or output flood the whole group receives SIGKILL.  Output is read as it
comes (so a chatty child never blocks on a full pipe) and only the first and last
``capture_bytes / 2`` bytes of each stream are kept, so memory stays bounded.
"""

from __future__ import annotations

import os
import resource
import selectors
import shutil
import signal
import stat
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rpg_llm.env.sandbox.base import MEMORY_KILL, SandboxLimits, allocated_bytes
from rpg_llm.env.sandbox.identity import files_of_uid
from rpg_llm.env.sandbox.tree import tree_usage

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
    "RAYON_NUM_THREADS",
    "POLARS_MAX_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


@dataclass(frozen=True)
class RawRun:
    """How a child ended: exit status, captured bytes, wall time (s) and why it was killed.

    Attributes:
      cpu_s: user + system CPU seconds of the child and of every descendant it (or, under
        bubblewrap, the sandbox's init) waited for, from ``wait4`` on that one child (so several
        runs in threads of one parent never mix); for a child killed for a limit, at least the
        whole tree's CPU seconds read just before the kill (``tree.tree_usage``), since killed
        processes may die unreaped; ``None`` when not measured.
      killed_for: reason given by the ``watch`` callback that had the child killed (e.g. the
        disk limit), else ``None``.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    delta: float
    timed_out: bool
    flooded: bool
    cpu_s: float | None = None
    killed_for: str | None = None


class CappedStream:
    """Keeps the first ``half`` and the last ``half`` bytes written, counts the rest."""

    def __init__(self, cap: int) -> None:
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail.append(data)
        self.tail_len += len(data)
        while self.tail_len - len(self.tail[0]) >= self.half:
            self.tail_len -= len(self.tail.popleft())

    def value(self) -> bytes:
        tail = b"".join(self.tail)[-self.half :] if self.tail else b""
        skipped = self.total - len(self.head) - len(tail)
        if skipped > 0:
            marker = f"\n[... {skipped} bytes not captured ...]\n".encode()
            return bytes(self.head) + marker + tail
        return bytes(self.head) + tail


def child_env(workdir: Path, input_dir: Path, limits: SandboxLimits, python: str) -> dict[str, str]:
    """A clean environment for the child (nothing inherited from the host but a plain PATH).

    ``HOME`` and ``TMPDIR`` point into the working folder; thread counts are pinned to
    ``limits.threads``.
    """
    bindir = str(Path(python).parent)
    env = {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir / "tmp"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        "RPG_INPUT_DIR": str(input_dir),
        "RPG_SUBMISSION_PATH": str(workdir / "submission.csv"),
    }
    for var in THREAD_VARS:
        env[var] = str(limits.threads)
    return env


def disk_watch(workdir: Path, limit_bytes: int, uid: int | None = None) -> Callable[[], str | None]:
    """A ``run_limited`` watch that reports when the run fills more than ``limit_bytes`` of disk.

    Counted: blocks allocated under ``workdir`` (its ``input`` left out) and, when ``uid`` is given
    (subprocess backend, private uid), the files that uid owns in the world-writable host folders
    (``identity.WORLD_WRITABLE``).
    """
    skip = workdir / "input"

    def check() -> str | None:
        used = allocated_bytes(workdir, skip=skip)
        if uid is not None:
            for path in files_of_uid(uid):
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                used += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    used += allocated_bytes(path)
        if used > limit_bytes:
            return f"disk limit exceeded: {used} bytes written, limit {limit_bytes}"
        return None

    return check


def _limit_pairs(limits: SandboxLimits, nproc: int) -> list[tuple[int, str, int]]:
    """``(resource, prlimit option, value)`` of the child's rlimits, each clamped to this
    process's hard limit (which the child inherits and cannot raise)."""
    pairs = [
        (resource.RLIMIT_AS, "--as", limits.memory_bytes),
        (resource.RLIMIT_NPROC, "--nproc", nproc),
        (resource.RLIMIT_FSIZE, "--fsize", min(limits.fsize_bytes, limits.disk_bytes)),
        (resource.RLIMIT_NOFILE, "--nofile", limits.nofile),
        (resource.RLIMIT_CORE, "--core", 0),
    ]
    out = []
    for which, option, value in pairs:
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        out.append((which, option, value))
    return out


def limited_argv(argv: Sequence[str], limits: SandboxLimits, nproc: int) -> list[str] | None:
    """``argv`` behind util-linux ``prlimit``, which sets the rlimits on itself and then
    ``exec``s ``argv``: the limits are in place before the command starts, and no Python code
    runs in a forked copy of this (possibly multi-threaded) process. None where ``prlimit`` is
    not installed."""
    exe = shutil.which("prlimit")
    if exe is None:
        return None
    opts = [f"{option}={value}:{value}" for _, option, value in _limit_pairs(limits, nproc)]
    return [exe, *opts, "--", *argv]


def _limits_preexec(limits: SandboxLimits, nproc: int) -> Callable[[], None]:
    """The ``preexec_fn`` that applies the rlimits in the child before ``exec`` (only where
    ``prlimit`` is missing: Python code in a fork of a threaded process can deadlock)."""
    pairs = _limit_pairs(limits, nproc)

    def apply() -> None:
        for which, _option, value in pairs:
            resource.setrlimit(which, (value, value))

    return apply


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(proc: subprocess.Popen, rusage: list, block: bool) -> bool:
    """``wait4`` the child (blocking or not); on exit set ``proc.returncode``, keep its rusage."""
    if proc.returncode is not None:
        return True
    try:
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere (should not happen): no rusage
        proc.returncode = proc.returncode if proc.returncode is not None else -1
        return True
    if pid == 0:
        return False
    proc.returncode = os.waitstatus_to_exitcode(status)
    rusage.append(usage)
    return True


def _wait(proc: subprocess.Popen, rusage: list, timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds (``None``: forever) for the child; True when it exited."""
    if timeout is None:
        return _reap(proc, rusage, block=True)
    end = time.monotonic() + timeout
    while not _reap(proc, rusage, block=False):
        if time.monotonic() >= end:
            return False
        time.sleep(0.01)
    return True


def run_limited(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    limits: SandboxLimits,
    nproc: int,
    pass_fds: Sequence[int] = (),
    watch: Callable[[], str | None] | None = None,
    watch_every_s: float = 0.25,
    uid: int | None = None,
) -> RawRun:
    """Run ``argv`` to completion under ``limits``; never raises for what the child does.

    Args:
      argv: command (the interpreter, possibly behind setpriv / bwrap).
      cwd: working folder.
      env: complete environment of the child.
      timeout_s: wall-clock limit in seconds; the process group is killed when it passes.
      limits: rlimits and capture caps.
      nproc: the ``RLIMIT_NPROC`` value (see ``identity.nproc_limit``).
      pass_fds: descriptors inherited by the child (bubblewrap's ``--ro-bind-fd``).
      watch: called about every ``watch_every_s`` seconds while the child runs; a returned text
        (e.g. ``"disk limit exceeded: ..."``) kills the process group and is kept as
        ``RawRun.killed_for``.
      watch_every_s: seconds between ``watch`` calls and between samples of the process tree
        (``tree.tree_usage``): when its summed RSS passes ``limits.tree_memory_bytes`` the group
        is killed with ``killed_for`` starting ``MEMORY_KILL``.
      uid: the run's private uid (its processes count in the tree), or ``None``.

    Returns:
      ``RawRun`` with ``delta`` = seconds from start to exit of the child and ``cpu_s`` its CPU
      seconds (``wait4`` rusage, user + system, descendants it waited for included).

    Raises:
      OSError: the command could not be started (e.g. missing executable).
    """
    out, err = CappedStream(limits.capture_bytes), CappedStream(limits.capture_bytes)
    limited = limited_argv(argv, limits, nproc)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        limited if limited is not None else list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_limits_preexec(limits, nproc) if limited is None else None,
        pass_fds=tuple(pass_fds),
        close_fds=True,
    )
    deadline = t0 + timeout_s
    timed_out = flooded = False
    killed_for: str | None = None
    next_watch = t0 + watch_every_s
    rusage: list = []
    t_exit: float | None = None
    killed_cpu = 0.0

    def kill() -> None:
        """Sample the tree's CPU seconds (killed processes may die unreaped), then kill the
        group and every process of the tree (a process in a new session or pid namespace, such
        as the script under bubblewrap, is not in the group)."""
        nonlocal killed_cpu
        usage = tree_usage(proc.pid, uid)
        killed_cpu = max(killed_cpu, usage.cpu_s)
        _killpg(proc.pid)
        for pid in usage.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    assert proc.stdout is not None and proc.stderr is not None  # both are pipes
    stdout, stderr = proc.stdout, proc.stderr
    sel = selectors.DefaultSelector()
    for stream, sink in ((stdout, out), (stderr, err)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream.fileno(), selectors.EVENT_READ, sink)
    try:
        drain_until: float | None = None
        while sel.get_map():
            now = time.monotonic()
            if t_exit is None and _reap(proc, rusage, block=False):
                t_exit = now
                _killpg(proc.pid)  # leftovers holding the pipes open
                drain_until = now + 1.0
            if drain_until is not None and now > drain_until:
                break
            if t_exit is None and now >= deadline:
                timed_out = True
                kill()
                drain_until = now + 1.0
                deadline = float("inf")
            if t_exit is None and killed_for is None and not timed_out and now >= next_watch:
                next_watch = now + watch_every_s
                killed_for = _tree_over(proc.pid, uid, limits.tree_memory_bytes)
                if killed_for is None and watch is not None:
                    killed_for = watch()
                if killed_for is not None:
                    kill()
                    drain_until = now + 1.0
            wait = 0.05 if t_exit is None else 0.01
            for key, _ in sel.select(timeout=max(0.0, min(wait, deadline - now))):
                try:
                    data = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                key.data.feed(data)
                if not flooded and out.total + err.total > limits.output_limit_bytes:
                    flooded = True
                    kill()
                    drain_until = time.monotonic() + 1.0
        if t_exit is None:
            remaining = deadline - time.monotonic()
            limit = max(remaining, 0.0) if remaining != float("inf") else None
            if not _wait(proc, rusage, limit):
                timed_out = True
                kill()
                _wait(proc, rusage, None)
            t_exit = time.monotonic()
    finally:
        sel.close()
        stdout.close()
        stderr.close()
        if not _reap(proc, rusage, block=False):
            _killpg(proc.pid)
            _wait(proc, rusage, None)
    cpu_s = (rusage[0].ru_utime + rusage[0].ru_stime) if rusage else None
    if timed_out or flooded or killed_for is not None:
        cpu_s = max(cpu_s or 0.0, killed_cpu)
    return RawRun(
        returncode=proc.returncode,
        stdout=out.value(),
        stderr=err.value(),
        delta=t_exit - t0,
        timed_out=timed_out,
        flooded=flooded,
        cpu_s=cpu_s,
        killed_for=killed_for,
    )


def _tree_over(pid: int, uid: int | None, limit_bytes: int) -> str | None:
    """The kill reason when the run's processes hold more than ``limit_bytes`` resident."""
    usage = tree_usage(pid, uid)
    if usage.rss_bytes > limit_bytes:
        return (
            f"{MEMORY_KILL}: {usage.processes} processes held {usage.rss_bytes} bytes, "
            f"limit {limit_bytes}"
        )
    return None
