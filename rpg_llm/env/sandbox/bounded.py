"""Run a host-side function (e.g. a grader) in a child under a time and memory limit.

Grading runs on the host, on input the script produced; a pathological submission (a CSV that
parses into many GB, a grader stuck on it) must cost a bounded amount of time and memory and end
as a verdict, never as a hang or a host running out of memory.  :func:`call_bounded` runs the
function in a child whose address space is capped at what it had mapped plus ``memory_bytes``
(``RLIMIT_AS``), sends back its return value or exception (pickled, through a pipe) and kills
it when ``time_s`` passes.

The child is never forked from the calling process: that process may run threads (torch's,
Ray's, JAX's, a busy executor's) and a fork copies the locks they hold at that moment, held
for ever in the child.  Each calling process instead starts, on first use, a *bounded server*
by ``exec`` (a fresh interpreter, one thread: no lock can be held there by another thread; BLAS
and pyarrow's allocator kept from starting threads), and the server forks the children.  A
server handles one call at a time; concurrent callers (threads) get a server each, kept for
later calls in a pool.  Each call
carries the caller's ``sys.path``, working folder and environment, which the server takes on
before it forks.  The server imports the function's module and unpickles its arguments, and runs
the caller's ``prepare`` (e.g. loading a competition's grader) in itself before forking, so that
the child finds it imported (copy-on-write).  POSIX-only, like the sandbox backends.
"""

from __future__ import annotations

import atexit
import os
import pickle
import resource
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["LimitExceeded", "call_bounded", "SERVER_GRACE_S"]

T = TypeVar("T")

SERVER_GRACE_S = 120.0
"""Seconds past ``time_s`` a caller waits for its server (which unpickles the call, imports the
function's module and runs ``prepare`` before the timed child starts) before it deems the server
stuck, kills it and reports the time limit."""

_SINGLE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",  # pyarrow's jemalloc (pandas imports it)
}
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from rpg_llm.env.sandbox.bounded import _serve; _serve(int(sys.argv[2]), int(sys.argv[3]))"
)
_HEADER = struct.Struct("!Q")


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


# -- framing: 8-byte length, then the bytes ---------------------------------------------------


def _send(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes | None:
    """``n`` bytes from ``fd``; None at end of file.

    Raises:
        TimeoutError: ``deadline`` (monotonic) passed first.
    """
    chunks, left = [], n
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while left:
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise TimeoutError
            if not sel.select(timeout=timeout):
                continue
            data = os.read(fd, min(left, 1 << 20))
            if not data:
                return None
            chunks.append(data)
            left -= len(data)
    return b"".join(chunks)


def _receive(fd: int, deadline: float | None = None) -> bytes | None:
    head = _read_exactly(fd, _HEADER.size, deadline)
    if head is None:
        return None
    return _read_exactly(fd, _HEADER.unpack(head)[0], deadline)


# -- in the server ------------------------------------------------------------------------------


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


def _call_forked(fn: Callable[..., Any], args: tuple, time_s: float, memory_bytes: int) -> bytes:
    """In the (single-threaded) server: ``fn(*args)`` in a forked child under the limits; the
    pickled ``(ok, value)`` reply (a limit passed: ``(False, LimitExceeded)``)."""
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
        return pickle.dumps((False, LimitExceeded("time", f"took longer than {time_s:g} s")))
    if not chunks:
        how = os.waitstatus_to_exitcode(status)
        what = f"killed by signal {-how}" if how < 0 else f"exit status {how}"
        return pickle.dumps((False, LimitExceeded("crash", f"died without an answer ({what})")))
    return b"".join(chunks)


def _serve(rfd: int, wfd: int) -> None:
    """The bounded server's loop: for each request, take on the caller's ``sys.path``, working
    folder and environment (as a fork of the caller would have them), unpickle
    ``(prepare, fn, args, time_s, memory_bytes)``, run ``prepare()`` here (its failure is the
    child's to report), fork the timed child and send its reply; ends at end of input."""
    while (request := _receive(rfd)) is not None:
        try:
            path, cwd, env, call = pickle.loads(request)
            sys.path[:] = path
            try:
                os.chdir(cwd)
            except OSError:  # the caller's folder is gone: the call may not need it
                pass
            os.environ.clear()
            os.environ.update(env)
            prepare, fn, args, time_s, memory_bytes = pickle.loads(call)
            if prepare is not None:
                try:
                    prepare()
                except Exception:  # noqa: BLE001, S110 - the child meets it again and reports it
                    pass
            sys.stdout.flush()
            sys.stderr.flush()
            reply = _call_forked(fn, args, time_s, memory_bytes)
        except Exception as exc:  # noqa: BLE001 - a request the server cannot read or run
            try:
                reply = pickle.dumps((False, exc))
            except Exception:  # noqa: BLE001
                reply = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        _send(wfd, reply)


# -- in the calling process ------------------------------------------------------------------------


class _Server:
    """One bounded server process and the pipes to it, owned by the process that started it."""

    def __init__(self) -> None:
        to_r, self._to = os.pipe()
        self._from, from_w = os.pipe()
        root = str(Path(__file__).resolve().parents[3])  # the folder holding rpg_llm
        env = {**os.environ, **_SINGLE_THREAD}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, root, str(to_r), str(from_w)],
                stdin=subprocess.DEVNULL,
                pass_fds=(to_r, from_w),
                env=env,
                start_new_session=True,  # its own group: killed with its child when stuck
            )
        finally:
            os.close(to_r)
            os.close(from_w)
        self.owner = os.getpid()

    def call(self, request: bytes, time_s: float) -> bytes:
        """Send ``request`` and wait for the reply.

        Raises:
            LimitExceeded: no reply within ``time_s + SERVER_GRACE_S`` (``"time"``; the server
                is killed) or the server ended (``"crash"``).
        """
        try:
            _send(self._to, request)
            reply = _receive(self._from, time.monotonic() + time_s + SERVER_GRACE_S)
        except TimeoutError:
            self.kill()
            raise LimitExceeded("time", f"took longer than {time_s:g} s") from None
        except OSError:  # the pipe broke: the server has ended
            reply = None
        if reply is not None:
            return reply
        self.kill()  # reaps it
        raise LimitExceeded("crash", f"its server ended (exit status {self.proc.returncode})")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.close()

    def close(self) -> None:
        """Let the server end (it reads end of input) and reap it."""
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        self._to = self._from = -1
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()

    def forget(self) -> None:
        """In a forked copy of the owner: drop the pipes, leave the server to its owner."""
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass


_IDLE: list[_Server] = []
_LOCK = threading.Lock()


def _take() -> _Server:
    """An idle live server of this process, or a new one (an idle one that died is reaped)."""
    dead = []
    with _LOCK:
        while _IDLE:
            server = _IDLE.pop()
            if server.proc.poll() is None:
                break
            dead.append(server)
        else:
            server = None
    for d in dead:
        d.close()
    return server if server is not None else _Server()


def _give_back(server: _Server) -> None:
    with _LOCK:
        _IDLE.append(server)


def _close_all() -> None:
    with _LOCK:
        servers, _IDLE[:] = list(_IDLE), []
    for server in servers:
        if server.owner == os.getpid():
            server.close()


def _after_fork_in_child() -> None:
    """In a forked copy of this process: a fresh lock (another thread may have held this one
    at the fork) and no server (they belong to the parent)."""
    global _LOCK
    _LOCK = threading.Lock()
    for server in _IDLE:
        server.forget()
    _IDLE.clear()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_after_fork_in_child)


def call_bounded(
    fn: Callable[..., T],
    *args: Any,
    time_s: float,
    memory_bytes: int,
    prepare: Callable[[], object] | None = None,
) -> T:
    """``fn(*args)`` in a child of a bounded server (module docstring), limited to ``time_s``
    seconds and ``memory_bytes`` more address space than the child starts with.

    Args:
      fn, args: the call; ``fn`` and ``args`` must be picklable (``fn`` a module-level
        function), and so must its return value and any exception it raises.
      time_s: wall-clock limit of the call, seconds (> 0).
      memory_bytes: address space the child may add, bytes (> 0); an allocation beyond it fails
        (``MemoryError`` in Python code, a crash in some native code).
      prepare: a picklable set-up call (trusted code, e.g. loading a grader) run in the server
        before the child forks, so that what it imports or caches is the child's already; its
        failure is ignored there (``fn`` meets it again and reports it).

    Returns:
      What ``fn`` returned.

    Raises:
      LimitExceeded: the time limit passed (the child is killed), the child ran out of memory,
        or it died without an answer (e.g. killed by a signal); also when its server ended or
        stayed silent past ``time_s + SERVER_GRACE_S``.
      Exception: whatever ``fn`` raised, re-raised here.
      ValueError: a non-positive limit.
      TypeError: ``fn`` or ``args`` cannot be pickled (names what).
    """
    if not time_s > 0:
        raise ValueError(f"time_s must be > 0 seconds, got {time_s!r}")
    if not isinstance(memory_bytes, int) or memory_bytes <= 0:
        raise ValueError(f"memory_bytes must be a positive int, got {memory_bytes!r}")
    try:
        call = pickle.dumps((prepare, fn, args, float(time_s), memory_bytes))
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        raise TypeError(f"call_bounded needs a picklable function and arguments: {err}") from None
    env = {**os.environ, **_SINGLE_THREAD}
    request = pickle.dumps((list(sys.path), os.getcwd(), env, call))
    server = _take()
    reply = server.call(request, time_s)  # LimitExceeded: the server was stuck or ended
    _give_back(server)
    ok, value = pickle.loads(reply)
    if ok:
        return value
    raise value
