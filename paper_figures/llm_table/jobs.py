"""The table's processes: each run and each probe is a subprocess (so that a crash of one run does
not end the table; its output goes to the run's log), at most ``--jobs`` at once, stopped cleanly
by SIGTERM or SIGINT.

``--jobs N`` keeps N runs (each with its probe) in flight at once, in the table's order, except
that a task's second run waits until its first has ended (:func:`next_startable`: the task's
offline competition and SFT start are then built once); every run uses one torch thread, so
``--jobs 2`` fills a 2-core machine. ``kill -TERM PID`` (or Ctrl-C) stops a slice cleanly: the
runs in flight are terminated and resume on the next slice (:func:`stop_on_signals`).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from paper_figures.llm_table.analysis import probed_step
from paper_figures.llm_table.plan import RunSpec, run_command
from paper_figures.llm_table.settings import TableSettings
from rpg_llm.config import LoopConfig
from rpg_llm.launch import write_config
from rpg_llm.learner.sft_cache import cache_root
from rpg_llm.loop.runfolder import RunFolder

__all__ = [
    "Children",
    "CHILDREN",
    "call",
    "stop_on_signals",
    "next_startable",
    "sft_warm_tasks",
    "run_jobs",
    "run_one",
    "probe_run",
    "probe_is_current",
]


class Children:
    """The run and probe processes in flight, so that a stopped table can end them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def stop(self) -> None:
        """Refuse new processes and terminate (SIGTERM) the live ones; a killed run resumes
        from its last finished step, a killed probe runs again."""
        with self.lock:
            self.stopping = True
            for proc in self.live:
                proc.terminate()


CHILDREN = Children()
"""The processes this table started (one table per process)."""


def call(cmd: Sequence[str], log_path: Path) -> int:
    """Run ``cmd`` with stdout and stderr appended to ``log_path`` after a ``$ cmd`` line; its
    exit status (-15 when the table was stopped, 1 without starting it when the table is
    stopping)."""
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        with CHILDREN.lock:
            if CHILDREN.stopping:
                return 1
            proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env)
            CHILDREN.live.add(proc)
        try:
            return proc.wait()
        finally:
            with CHILDREN.lock:
                CHILDREN.live.discard(proc)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """While the table runs, SIGTERM and SIGINT raise KeyboardInterrupt in the main thread,
    SIGINT even when a shell started the table in the background with SIGINT ignored; so
    ``kill -TERM PID`` or ``kill -INT PID`` stops a slice cleanly: :func:`run_jobs` ends the
    runs in flight (they resume on the next slice) and the ledger records the slice as
    ``interrupted``. Off the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def next_startable(
    pending: Sequence[RunSpec], running: Sequence[RunSpec], warm: set[str]
) -> int | None:
    """Index in ``pending`` of the next run that may start beside ``running``, or None.

    A task is *warm* once one of its runs has ended: its offline competition and its SFT start
    (:mod:`rpg_llm.learner.sft_cache`) are then built. A run of a cold task waits while another
    run of the same task is in flight, so that two runs do not build the same caches at once;
    otherwise the table's order is kept. A slice starts with the tasks of :func:`sft_warm_tasks`
    warm: a run kept from another machine (its record only) leaves its task cold, since this
    machine's caches do not hold it.
    """
    busy = {p.task for p in running}
    for k, p in enumerate(pending):
        if p.task in warm or p.task not in busy:
            return k
    return None


def sft_warm_tasks(done: Sequence[RunSpec]) -> list[str]:
    """The tasks of ``done`` (finished runs) whose SFT start this machine's SFT cache holds.

    A run records its SFT computation's cache key in ``<run_dir>/sft.json`` (``sft_cache_key``,
    :mod:`rpg_llm.loop.warm_start`); the task is warm when the SFT cache
    (:func:`rpg_llm.learner.sft_cache.cache_root`, ``$RPG_SFT_CACHE``) holds that entry, which
    normally means its offline competition was built here too (the SFT reads its baselines). A
    kept record without ``sft.json`` (it is not part of
    :data:`paper_figures.llm_table.settings.RUN_RECORD`), an entry pruned from the cache, an
    unreadable file or a disabled cache leave the task cold. Returns the tasks sorted.
    """
    root = cache_root()
    if root is None:
        return []
    warm = set()
    for p in done:
        try:
            key = json.loads((p.run_dir / "sft.json").read_text()).get("sft_cache_key")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(key, str) and key and (root / key / "info.json").is_file():
            warm.add(p.task)
    return sorted(warm)


def run_jobs(
    work: Sequence[tuple[int, RunSpec]],
    fn: Callable[[int, RunSpec], bool],
    jobs: int,
    warm: Sequence[str] = (),
) -> list[tuple[RunSpec, bool]]:
    """Call ``fn(i, spec)`` for every ``(i, spec)`` of ``work``, at most ``jobs`` at once in
    threads (each call waits on its own subprocesses), in the order :func:`next_startable`
    allows (``warm``: tasks warm from the start); returns ``(spec, fn's result)`` in the order
    the calls ended.

    Raises:
        KeyboardInterrupt: the table was stopped (:func:`stop_on_signals`); the processes in
            flight are terminated first. An exception of ``fn`` likewise ends them, then
            propagates.
    """
    pending = list(work)
    running: dict[Future[bool], RunSpec] = {}
    warm_tasks = set(warm)
    ended: list[tuple[RunSpec, bool]] = []
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            try:
                while pending or running:
                    while len(running) < jobs and pending:
                        runs = list(running.values())
                        k = next_startable([p for _, p in pending], runs, warm_tasks)
                        if k is None:
                            break
                        i, p = pending.pop(k)
                        running[pool.submit(fn, i, p)] = p
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    for fut in done:
                        p = running.pop(fut)
                        warm_tasks.add(p.task)
                        ended.append((p, bool(fut.result())))
            except BaseException:  # stopped (KeyboardInterrupt) or failed: end what is in flight
                CHILDREN.stop()
                raise
    finally:  # every thread has ended here: later calls may start processes again
        with CHILDREN.lock:
            CHILDREN.stopping = False
    return ended


def run_one(spec: RunSpec, cfg: LoopConfig, state: str) -> tuple[int, float]:
    """Start (``state`` ``new``: from ``cfg`` stored at :attr:`RunSpec.config_path`) or resume
    (``resumable``) one run and wait for it; its exit status and wall seconds."""
    t0 = time.perf_counter()
    if state == "new":
        write_config(cfg, spec.config_path)
    rc = call(run_command(spec, cfg, state), spec.log_path)
    return rc, time.perf_counter() - t0


def probe_run(s: TableSettings, spec: RunSpec, engine: str = "ppo") -> int:
    """Probe one finished run (``python -m rpg_llm.probe``, ``s.probe_answers`` answers for
    each of ``s.probe_parents`` parents) unless its ``probe/probe.json`` is current
    (:func:`probe_is_current`); returns the exit status."""
    if probe_is_current(s, spec, engine):
        return 0
    cmd = [sys.executable, "-m", "rpg_llm.probe", str(spec.run_dir)]
    cmd += ["--answers", str(s.probe_answers), "--parents", str(s.probe_parents)]
    return call(cmd, spec.log_path)


def probe_is_current(s: TableSettings, spec: RunSpec, engine: str = "ppo") -> bool:
    """Whether ``<run>/probe/probe.json`` probed this run as the table asks: ``probe_answers``
    answers for each of ``probe_parents`` parents, with the policy of the run's last checkpoint
    of ``engine`` (a run extended since, or another count, is probed again). The step is
    ``trained_step``, or for an older file the ``(step N)`` of the trained policy's label
    (:func:`paper_figures.llm_table.analysis.probed_step`). A folder with no checkpoint of either
    engine is a kept record (:data:`paper_figures.llm_table.settings.RUN_RECORD`): its probe
    stands if the counts match."""
    try:
        record = json.loads((spec.run_dir / "probe" / "probe.json").read_text())
        step = probed_step(record)
        parents = len(record["parent_ids"])
        answers = record["answers_per_parent"]
    except (OSError, ValueError, AttributeError, KeyError, IndexError, StopIteration, TypeError):
        return False
    folder = RunFolder(spec.run_dir)
    current = folder.trained_step(engine)
    kept = folder.latest_checkpoint() is None and not folder.latest_trl_checkpoint()
    if current is None and kept:
        current = step  # a kept record (RUN_RECORD): no policy left to probe, the probe stands
    return (answers, parents, step) == (s.probe_answers, s.probe_parents, current)
