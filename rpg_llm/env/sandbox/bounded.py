"""Run a host-side function (e.g. a grader) in a forked child under a time and memory limit.

Grading runs on the host, on input the script produced; a pathological submission (a CSV that
parses into many GB, a grader stuck on it) must cost a bounded amount of time and memory and end
as a verdict, never as a hang or a host running out of memory.  :func:`call_bounded` forks, caps
the child's address space at what the parent had mapped plus ``memory_bytes`` (``RLIMIT_AS``),
runs the function there and sends back its return value or exception (pickled, through a pipe);
the parent kills the child when ``time_s`` passes.  Fork keeps it cheap (no interpreter start,
the parent's imported modules and loaded graders are shared copy-on-write) and POSIX-only, like
the sandbox backends.
"""

from __future__ import annotations

import os
import pickle
import resource
import selectors
import signal
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["LimitExceeded", "call_bounded"]

T = TypeVar("T")


class LimitExceeded(RuntimeError):
    """The bounded call passed a limit (or its child died without an answer).

    Attributes:
      limit: ``"time"``, ``"memory"`` or ``"crash"``.
      reason: one line for an outcome text, e.g. ``"took longer than 60 s"``.
    """

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (LimitExceeded, (self.limit, self.reason))


def _mapped_bytes() -> int:
    """Virtual memory this process has mapped now, bytes (``/proc/self/statm``)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _child(fn: Callable[..., Any], args: tuple, w: int, memory_bytes: int) -> None:
    """In the forked child: limit memory, call, send ``(ok, value)``; never returns."""
    code = 0
    try:
        try:
            limit = _mapped_bytes() + memory_bytes
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            payload = (True, fn(*args))
        except MemoryError:
            payload = (False, LimitExceeded("memory", f"needed more than {memory_bytes} bytes"))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            payload = (False, exc)
        try:
            data = pickle.dumps(payload)
        except Exception as exc:  # noqa: BLE001 - an unpicklable value or exception
            data = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        view = memoryview(data)
        while view:
            view = view[os.write(w, view) :]
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        os._exit(code)


def call_bounded(fn: Callable[..., T], *args: Any, time_s: float, memory_bytes: int) -> T:
    """``fn(*args)`` in a forked child limited to ``time_s`` seconds and ``memory_bytes`` more
    address space than the parent has mapped.

    Args:
      fn, args: the call; its return value and any exception it raises must be picklable.
      time_s: wall-clock limit, seconds (> 0).
      memory_bytes: address space the child may add, bytes (> 0); an allocation beyond it fails
        (``MemoryError`` in Python code, a crash in some native code).

    Returns:
      What ``fn`` returned.

    Raises:
      LimitExceeded: the time limit passed (the child is killed), the child ran out of memory,
        or it died without an answer (e.g. killed by a signal).
      Exception: whatever ``fn`` raised, re-raised in the parent.
      ValueError: a non-positive limit.
    """
    if not time_s > 0:
        raise ValueError(f"time_s must be > 0 seconds, got {time_s!r}")
    if not isinstance(memory_bytes, int) or memory_bytes <= 0:
        raise ValueError(f"memory_bytes must be a positive int, got {memory_bytes!r}")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(r)
        _child(fn, args, w, memory_bytes)
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + time_s
    timed_out = False
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(r, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if not sel.select(timeout=left):
                    continue
                data = os.read(r, 1 << 16)
                if not data:
                    break
                chunks.append(data)
    finally:
        os.close(r)
        if timed_out:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
    if timed_out:
        raise LimitExceeded("time", f"took longer than {time_s:g} s")
    if not chunks:
        how = os.waitstatus_to_exitcode(status)
        what = f"killed by signal {-how}" if how < 0 else f"exit status {how}"
        raise LimitExceeded("crash", f"died without an answer ({what})")
    ok, value = pickle.loads(b"".join(chunks))
    if ok:
        return value
    raise value
