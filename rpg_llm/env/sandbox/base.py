"""Types shared by the sandbox backends: limits, execution result, protocol, classification.

The execution convention (rpg_llm interfaces): a solution is one Python file run with cwd = a fresh
working folder; the competition's public data is readable at ``./input/`` (env ``RPG_INPUT_DIR``)
and predictions go to ``./submission.csv`` (env ``RPG_SUBMISSION_PATH``).  ``delta`` is the wall
time of the child from start to exit in seconds (paper section 4: the action's duration).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

STATUSES = ("ok", "timeout", "oom", "error")
"""What a script's run may end as; a sandbox that itself fails raises ``SandboxError`` instead."""

GiB = 1024**3
MiB = 1024**2

MAX_TIMEOUT_S = 24 * 3600.0
"""Ceiling on a script's time limit, seconds: a larger one is a usage error (an invalid sample
is charged the full timeout in the RPG arm, so an absurd limit gives absurd rewards)."""

MEMORY_KILL = "memory limit of the run exceeded"
"""How the outcome text of a run killed for ``SandboxLimits.tree_memory_bytes`` starts."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the script): e.g. bubblewrap could not set up the namespaces
    or mounts, no private uid is free, ``setpriv`` is missing, no docker engine answers.

    ``rpg_llm.env.tasks.runner.run_and_grade`` turns it (and an ``OSError`` raised while
    launching) into the outcome status ``"infra"``, which is never charged to the script.
    """


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied to every child process.

    Attributes:
      memory_bytes: address-space limit (``RLIMIT_AS``) of each process in bytes; an allocation
        beyond it raises ``MemoryError`` in Python and the run is classified ``"oom"``.
      tree_memory_bytes: resident memory of the run's whole process tree, bytes (summed RSS,
        sampled about every 0.25 s by ``tree.py``); past it the tree is killed and the run is
        classified ``"oom"``.  Not applied by the docker backend (its container has
        ``memory_bytes``).
      nproc: processes + threads the child may own (``RLIMIT_NPROC``, counted per uid; see
        ``identity.py`` for how a private uid makes this effective when the host runs as root).
      fsize_bytes: largest file the child may write (``RLIMIT_FSIZE``; at most ``disk_bytes``).
      disk_bytes: total bytes of disk the run may fill: blocks allocated in its working folder
        (the data at ``./input`` not counted) plus, under the subprocess backend with a private
        uid, the uid's files in the world-writable host folders.  Checked about every 0.25 s;
        past it the process group is killed (status ``"error"``, ``"disk limit exceeded"``), so a
        run can overshoot by what it writes in 0.25 s (bounded per file by ``fsize_bytes``).
      nofile: open file descriptors (``RLIMIT_NOFILE``).
      threads: value of OMP/MKL/OpenBLAS/... thread-count variables.
      capture_bytes: bytes kept per stream (first half and last half of the output).
      output_limit_bytes: total bytes on stdout+stderr after which the child is killed (status
        ``"error"``), so an output flood ends early and uses bounded memory.
      tmpfs_bytes: size of each private tmpfs, ``/tmp`` and ``/dev/shm`` (bubblewrap only; memory,
        not disk, so not counted in ``disk_bytes``).
      workdir_root: parent folder of the fresh working folders (default: ``<tmp>/rpg-sandbox``).
      python: interpreter that runs solutions (default: this interpreter).
      drop_privileges: when the host process is root, run children as a private uid from a pool
        (``None``: automatically when root).

    Raises:
      ValueError: on a non-positive limit.
    """

    memory_bytes: int = 2 * GiB
    tree_memory_bytes: int = 4 * GiB
    nproc: int = 128
    fsize_bytes: int = 1 * GiB
    disk_bytes: int = 1 * GiB
    nofile: int = 1024
    threads: int = 1
    capture_bytes: int = 1 * MiB
    output_limit_bytes: int = 64 * MiB
    tmpfs_bytes: int = 256 * MiB
    workdir_root: Path | None = None
    python: str | None = None
    drop_privileges: bool | None = None

    def __post_init__(self) -> None:
        for name in (
            "memory_bytes",
            "tree_memory_bytes",
            "nproc",
            "fsize_bytes",
            "disk_bytes",
            "nofile",
            "threads",
            "capture_bytes",
            "output_limit_bytes",
            "tmpfs_bytes",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class ExecResult:
    """What one sandboxed run produced.

    Attributes:
      status: ``"ok" | "timeout" | "oom" | "error"`` (grading may turn ``ok`` into ``invalid``).
      delta: wall time of the child from start to exit, seconds (float).
      cpu_s: CPU seconds (user + system) of the script and the children it waited for
        (``None``: not measured, e.g. docker).
      returncode: exit status (negative: killed by that signal), ``None`` if it never started.
      stdout, stderr: captured output, capped (first and last ``capture_bytes / 2`` bytes).
      outcome_text: short text for the policy, e.g. ``"timeout after 60 s"``,
        ``"ZeroDivisionError at line 12: division by zero"`` or ``"ok"``.
      workdir: the working folder, where ``submission.csv`` may be; remove with ``cleanup()``.
    """

    status: str
    delta: float
    returncode: int | None
    stdout: str
    stderr: str
    outcome_text: str
    workdir: Path
    backend: str = field(default="", compare=False)
    cpu_s: float | None = field(default=None, compare=False)

    @property
    def submission_path(self) -> Path:
        """``workdir / "submission.csv"`` (may not exist)."""
        return self.workdir / "submission.csv"

    def cleanup(self) -> None:
        """Delete the working folder (idempotent)."""
        remove_tree(self.workdir)


@runtime_checkable
class Sandbox(Protocol):
    """One way to run a solution script in isolation (subprocess, bubblewrap, docker)."""

    name: ClassVar[str]

    def run(
        self, code: str, input_dir: Path, timeout_s: float, *, hide: Sequence[Path] = ()
    ) -> ExecResult:
        """Run ``code`` with ``input_dir`` read-only at ``./input``; see the module docstring."""
        ...


def allocated_bytes(path: Path, skip: Path | None = None) -> int:
    """Bytes of disk allocated (``st_blocks * 512``) under ``path``, links not followed.

    ``skip`` (e.g. the working folder's ``input``) is left out.  Entries that vanish during the
    walk are ignored.
    """
    total = 0
    stack = [str(path)]
    skip_s = str(skip) if skip is not None else None
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.path == skip_s:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def unmount(path: Path) -> None:
    """Detach the file system mounted on ``path`` (``umount2(MNT_DETACH)``); its contents go once
    no process uses them.

    Raises:
      OSError: the call failed (e.g. not root, or nothing is mounted there).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(path), 2) != 0:  # MNT_DETACH
        err = ctypes.get_errno()
        raise OSError(err, f"cannot unmount {path}: {os.strerror(err)}")


def remove_tree(path: Path) -> None:
    """Remove a folder even where the sandbox made parts of it read-only or nested it deeper
    than Python's recursion limit; links inside are removed, never followed (not even to
    change a mode).  Falls back to ``rm -rf`` when ``shutil.rmtree`` cannot finish.  A folder
    that is a mount point (the docker backend's tmpfs working folder) is unmounted first."""

    def _onerror(func, p, _exc):  # noqa: ANN001 - shutil callback signature
        try:
            os.chmod(Path(p).parent, 0o700, follow_symlinks=False)
            if not Path(p).is_symlink():
                os.chmod(p, 0o700, follow_symlinks=False)
            func(p)
        except (OSError, NotImplementedError):
            pass

    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return
    if not path.is_symlink() and os.path.ismount(path):
        unmount(path)
    try:
        shutil.rmtree(path, onerror=_onerror)
    except RecursionError:
        pass
    if path.exists() or path.is_symlink():
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], check=False)
        subprocess.run(["rm", "-rf", "--", str(path)], check=False)


def validate_run_args(code: str, input_dir: Path, timeout_s: float) -> Path:
    """Check the arguments of ``Sandbox.run`` before anything is launched.

    Returns:
      ``input_dir`` as an absolute ``Path``.

    Raises:
      ValueError: ``code`` not a str, ``input_dir`` not an existing folder, ``timeout_s`` <= 0.
    """
    if not isinstance(code, str):
        raise ValueError(f"code must be a str, got {type(code).__name__}")
    if not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    input_dir = Path(input_dir).absolute()
    if not input_dir.is_dir():
        raise ValueError(f"input_dir {str(input_dir)!r} is not an existing folder")
    return input_dir


_OOM_PATTERNS = re.compile(
    r"MemoryError|Unable to allocate|Cannot allocate memory|std::bad_alloc|out of memory"
    r"|OutOfMemoryError|failed to allocate",
    re.IGNORECASE,
)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_EXC_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)?)"
    r"(?::\s?(?P<msg>.*))?$"
)


def describe_exception(stderr: str, script_name: str = "solution.py") -> str | None:
    """Summarise a Python traceback as ``"Type at line N: message"``.

    The line is that of the last traceback frame inside the solution script (for a SyntaxError,
    the line Python reports); ``None`` when ``stderr`` holds no traceback.
    """
    lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    if not lines:
        return None
    has_tb = any(ln.startswith("Traceback (most recent call last)") for ln in lines)
    frames = [m for m in (_FRAME.match(ln) for ln in lines) if m]
    if not has_tb and not frames:
        return None
    script_frames = [m for m in frames if Path(m["file"]).name == script_name]
    line_no = (script_frames or frames)[-1]["line"] if frames else None
    exc = None
    for ln in reversed(lines):
        if ln.startswith((" ", "\t")):
            continue
        m = _EXC_LINE.match(ln)
        if m and not ln.startswith(("Traceback", "During handling", "The above exception")):
            exc = m
            break
    if exc is None:
        return None
    exc_type = exc["type"].rsplit(".", 1)[-1]
    msg = (exc["msg"] or "").strip()
    where = f" at line {line_no}" if line_no is not None else ""
    text = f"{exc_type}{where}" + (f": {msg}" if msg else "")
    return text[:500]


def signal_name(signum: int) -> str:
    """``"SIGKILL"`` for 9, etc.; ``"signal N"`` when unknown."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def classify(
    returncode: int | None,
    stderr: str,
    *,
    timed_out: bool,
    timeout_s: float,
    flooded: bool,
    output_limit_bytes: int,
    killed_for: str | None = None,
) -> tuple[str, str]:
    """Map how a child ended to ``(status, outcome_text)``.

    Rules, in order: killed for the wall-clock limit -> ``timeout``; killed for an output flood ->
    ``error``; killed for the run's memory limit -> ``oom``; killed for another limit
    (``killed_for``, e.g. the disk limit) -> ``error`` with that reason; exit 0 -> ``ok``; a
    memory-error message on stderr or an unexplained SIGKILL (the kernel's OOM killer) -> ``oom``;
    anything else -> ``error`` with the exception type, line and
    message when stderr holds a Python traceback.
    """
    if timed_out:
        return "timeout", f"timeout after {timeout_s:g} s"
    if flooded:
        return "error", f"output limit exceeded: more than {output_limit_bytes} bytes written"
    if killed_for is not None:
        return ("oom" if killed_for.startswith(MEMORY_KILL) else "error"), killed_for
    if returncode == 0:
        return "ok", "ok"
    exc = describe_exception(stderr)
    if _OOM_PATTERNS.search(stderr or ""):
        return "oom", exc or "out of memory"
    if returncode is not None and returncode < 0:
        sig = -returncode
        if sig == signal.SIGKILL:
            return "oom", "killed by SIGKILL (out of memory)"
        if sig == signal.SIGXFSZ:
            return "error", "file size limit exceeded (SIGXFSZ)"
        return "error", exc or f"killed by {signal_name(sig)}"
    if exc is not None:
        return "error", exc
    last = (stderr or "").strip().splitlines()[-1:] or [""]
    tail = f": {last[0][:200]}" if last[0] else ""
    return "error", f"exit code {returncode}{tail}"
