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
import signal
import subprocess
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rpg_llm.sandbox.base import SandboxLimits

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
    """How a child ended: exit status, captured bytes, wall time (s) and why it was killed."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    delta: float
    timed_out: bool
    flooded: bool


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


def _limits_preexec(limits: SandboxLimits, nproc: int):
    """The ``preexec_fn`` that applies the rlimits in the child before ``exec``."""
    pairs = [
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_FSIZE, limits.fsize_bytes),
        (resource.RLIMIT_NOFILE, limits.nofile),
        (resource.RLIMIT_CORE, 0),
    ]

    def apply() -> None:
        for which, value in pairs:
            _soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))

    return apply


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_limited(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    limits: SandboxLimits,
    nproc: int,
    pass_fds: Sequence[int] = (),
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

    Returns:
      ``RawRun`` with ``delta`` = seconds from start to exit of the child.

    Raises:
      OSError: the command could not be started (e.g. missing executable).
    """
    out, err = CappedStream(limits.capture_bytes), CappedStream(limits.capture_bytes)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_limits_preexec(limits, nproc),
        pass_fds=tuple(pass_fds),
        close_fds=True,
    )
    deadline = t0 + timeout_s
    timed_out = flooded = False
    t_exit: float | None = None
    sel = selectors.DefaultSelector()
    for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, sink)
    try:
        drain_until: float | None = None
        while sel.get_map():
            now = time.monotonic()
            if t_exit is None and proc.poll() is not None:
                t_exit = now
                _killpg(proc.pid)  # leftovers holding the pipes open
                drain_until = now + 1.0
            if drain_until is not None and now > drain_until:
                break
            if t_exit is None and now >= deadline:
                timed_out = True
                _killpg(proc.pid)
                drain_until = now + 1.0
                deadline = float("inf")
            wait = 0.05 if t_exit is None else 0.01
            for key, _ in sel.select(timeout=max(0.0, min(wait, deadline - now))):
                try:
                    data = os.read(key.fileobj.fileno(), 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                key.data.feed(data)
                if not flooded and out.total + err.total > limits.output_limit_bytes:
                    flooded = True
                    _killpg(proc.pid)
                    drain_until = time.monotonic() + 1.0
        if t_exit is None:
            remaining = deadline - time.monotonic()
            try:
                proc.wait(timeout=max(remaining, 0.0) if remaining != float("inf") else None)
            except subprocess.TimeoutExpired:
                timed_out = True
                _killpg(proc.pid)
                proc.wait()
            t_exit = time.monotonic()
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
        if proc.poll() is None:
            _killpg(proc.pid)
            proc.wait()
    return RawRun(
        returncode=proc.returncode,
        stdout=out.value(),
        stderr=err.value(),
        delta=t_exit - t0,
        timed_out=timed_out,
        flooded=flooded,
    )
