"""rpg_core.filelock: one writer at a time across processes; the refusal names the holder; a
killed holder leaves the lock free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rpg_core.filelock import FileLock, LockBusy, lock_path_for


def _holder(lock) -> subprocess.Popen:
    code = (
        "import sys, time; from pathlib import Path; from rpg_core.filelock import FileLock; "
        f"FileLock(Path({str(lock)!r})).acquire(); print('held', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_naming_the_holder_then_gets_it_once_killed(tmp_path):
    lock = lock_path_for(tmp_path / "results.json")
    assert lock == tmp_path / ".results.json.lock"
    proc = _holder(lock)
    try:
        with pytest.raises(LockBusy, match=f"--out x is in use by pid {proc.pid} on "):
            FileLock(lock, "--out x", wait=False).acquire()
        t0 = time.monotonic()
        with pytest.raises(LockBusy, match=f"pid {proc.pid}"):
            FileLock(lock, "--out x", timeout_s=0.3).acquire()
        assert time.monotonic() - t0 >= 0.3  # it waited, then gave up
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with FileLock(lock, "--out x", wait=False) as held:  # the kernel let go of the killed holder's
        assert held.held and f"pid {os.getpid()} on " in held.holder()
    assert not held.held and held.holder() == ""


def test_the_same_object_cannot_take_it_twice(tmp_path):
    lock = FileLock(tmp_path / ".l.lock")
    with lock, pytest.raises(RuntimeError, match="held by this object already"):
        lock.acquire()
