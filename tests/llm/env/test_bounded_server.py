"""The bounded grader's children are never forked from the grading process.

Found by running the test suite in a fresh clone: the grader (``sandbox/bounded.py``) and the
uid-kill helper (``sandbox/identity.py``) called ``os.fork()`` in whatever process graded, which
may run torch's, Ray's or JAX's threads; a fork copies the locks those threads hold at that
moment, held for ever in the child ("os.fork() was called ... this will likely lead to a
deadlock"). Here the parent keeps busy threads, one of them holding the very lock the grader
takes: a fork of the parent would wait on it until the time limit; the bounded server's child
grades.
"""

from __future__ import annotations

import importlib
import os
import threading
import time

import pandas as pd
import pytest

from rpg_llm.env.sandbox import bounded
from rpg_llm.env.sandbox.bounded import call_bounded
from rpg_llm.env.tasks import grade_submission, load_competition
from rpg_llm.env.tasks.grading import GradingLimits
from testkit.toy_competition import ANSWERS, build_competition

GRADER = """
import threading

import numpy as np

LOCK = threading.Lock()


def grade(submission, answers):
    with LOCK:  # a lock the grading process's threads take too (a logger's, an allocator's)
        merged = answers.merge(submission, on="id", suffixes=("_true", "_pred"))
        return float(np.mean(merged["label_true"].to_numpy() == merged["label_pred"].to_numpy()))
"""


class BusyThreads:
    """Threads that keep the process busy; the first holds ``lock`` the whole time."""

    def __init__(self, lock: threading.Lock, n: int = 3) -> None:
        self.stop = threading.Event()
        self.held = threading.Event()
        self.lock = lock
        self.threads = [threading.Thread(target=self._hold, daemon=True)]
        self.threads += [threading.Thread(target=self._spin, daemon=True) for _ in range(n - 1)]

    def _hold(self) -> None:
        with self.lock:
            self.held.set()
            while not self.stop.is_set():
                sum(i * i for i in range(1000))

    def _spin(self) -> None:
        while not self.stop.is_set():
            sum(i * i for i in range(1000))

    def __enter__(self) -> BusyThreads:
        for t in self.threads:
            t.start()
        assert self.held.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(10)


def test_grading_while_busy_threads_hold_the_graders_lock(tmp_path, monkeypatch):
    module = f"locked_grader_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(GRADER)
    monkeypatch.syspath_prepend(str(tmp_path))
    build_competition(tmp_path, "toy-lock", f"{module}:grade", lower=False, board=[0.9, 0.5, 0.1])
    comp = load_competition("toy-lock", tmp_path)
    sub = tmp_path / "submission.csv"
    pd.DataFrame({"id": range(len(ANSWERS)), "label": ANSWERS}).to_csv(sub, index=False)
    grader = importlib.import_module(module)  # as the grading process has it (load_grader)
    limits = GradingLimits(time_s=8.0)
    with BusyThreads(grader.LOCK):
        t0 = time.monotonic()
        report = grade_submission(comp, sub, limits)
        took = time.monotonic() - t0
    assert report.valid, report.reason
    assert report.score == 1.0 and report.percentile == 1.0
    assert took < limits.time_s


def _pid_and_threads() -> tuple[int, int]:
    with open("/proc/self/status") as fh:
        threads = next(int(x.split()[1]) for x in fh if x.startswith("Threads:"))
    return os.getppid(), threads


def test_the_parent_never_forks_and_the_server_is_single_threaded(monkeypatch):
    def no_fork() -> int:
        raise AssertionError("os.fork() called in the grading process")

    monkeypatch.setattr(os, "fork", no_fork)
    with BusyThreads(threading.Lock()):
        server_pid, child_threads = call_bounded(_pid_and_threads, time_s=30, memory_bytes=1 << 30)
    assert server_pid != os.getpid() and child_threads == 1
    with open(f"/proc/{server_pid}/status") as fh:  # numpy and pandas imported there by now
        assert next(int(x.split()[1]) for x in fh if x.startswith("Threads:")) == 1


def _kill_my_server() -> None:
    os.kill(os.getppid(), 9)


def test_a_server_that_dies_is_replaced_and_one_killed_in_a_call_is_reported():
    assert call_bounded(os.getppid, time_s=30, memory_bytes=1 << 30) != os.getpid()
    for server in list(bounded._IDLE):  # idle servers that died: replaced on the next call
        os.kill(server.proc.pid, 9)
        server.proc.wait()
    assert call_bounded(sum, [1, 2], time_s=30, memory_bytes=1 << 30) == 3
    with pytest.raises(bounded.LimitExceeded) as err:  # its server killed during the call
        call_bounded(_kill_my_server, time_s=30, memory_bytes=1 << 30)
    assert err.value.limit == "crash" and "its server ended (exit status -9)" in err.value.reason
    assert call_bounded(sum, [3], time_s=30, memory_bytes=1 << 30) == 3


def test_an_unpicklable_call_is_refused_naming_it():
    with pytest.raises(TypeError, match="call_bounded needs a picklable function and arguments"):
        call_bounded(lambda: 1, time_s=30, memory_bytes=1 << 30)


def test_a_server_takes_the_callers_path_and_working_folder(tmp_path, monkeypatch):
    (tmp_path / "late_module_for_bounded.py").write_text(
        "def where():\n    import os\n    return os.getcwd()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # after the server started (earlier tests)
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module("late_module_for_bounded")
    assert call_bounded(module.where, time_s=30, memory_bytes=1 << 30) == str(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="private uids need root")
def test_the_uid_kill_helper_is_no_fork_of_the_busy_caller(monkeypatch):
    """``kill_uid`` signals as the run's uid from a helper process: an ``exec``, not a fork of
    the (threaded) caller. A sleeper in its own session, owned by the uid, is killed."""
    import subprocess

    from rpg_llm.env.sandbox.identity import borrowed_uid, kill_uid, processes_of_uid

    def no_fork() -> int:
        raise AssertionError("os.fork() called in the caller")

    with borrowed_uid() as uid:  # held: no other run uses this uid meanwhile
        sleeper = subprocess.Popen(
            ["sleep", "60"], user=uid, group=uid, extra_groups=[], start_new_session=True
        )
        with monkeypatch.context() as m, BusyThreads(threading.Lock()):
            m.setattr(os, "fork", no_fork)
            assert kill_uid(uid)
        assert processes_of_uid(uid) == []
        assert sleeper.wait(10) == -9
