"""``paper_figures.llm_table.jobs``: the scheduler of ``--jobs`` (order, cold and warm tasks), a
clean stop on SIGTERM, and when a stored probe is reused."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from dataclasses import replace

import pytest

from paper_figures.llm_table import jobs
from paper_figures.llm_table.plan import RunSpec
from paper_figures.llm_table.settings import FULL


@pytest.mark.slow
def test_next_startable_keeps_order_but_holds_a_second_run_of_a_cold_task(tmp_path):
    a0, a1, b0 = (RunSpec(t, "rpg", k, tmp_path) for t, k in (("a", 0), ("a", 1), ("b", 0)))
    assert jobs.next_startable([a0, a1, b0], [], set()) == 0
    assert jobs.next_startable([a1, b0], [a0], set()) == 1  # a is cold and busy: b0 goes first
    assert jobs.next_startable([a1], [a0], set()) is None
    assert jobs.next_startable([a1, b0], [a0], {"a"}) == 0  # a has ended a run: its caches exist
    assert jobs.next_startable([], [a0], set()) is None


def test_sft_warm_tasks_need_the_runs_cache_entry_on_this_machine(tmp_path, monkeypatch):
    """A kept run makes its task warm only where this machine's SFT cache holds the entry its
    sft.json names: a record brought from another machine (no sft.json), a pruned entry, a
    broken sft.json or a disabled cache leave the task cold."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RPG_SFT_CACHE", str(cache))
    (cache / "k-here").mkdir(parents=True)
    (cache / "k-here" / "info.json").write_text("{}")
    runs = {t: RunSpec(t, "rpg", 0, tmp_path / "out") for t in ("here", "pruned", "bad", "kept")}
    for task, text in (
        ("here", json.dumps({"sft_cache_key": "k-here"})),
        ("pruned", json.dumps({"sft_cache_key": "k-gone"})),
        ("bad", "{not json"),
    ):
        runs[task].run_dir.mkdir(parents=True)
        (runs[task].run_dir / "sft.json").write_text(text)
    runs["kept"].run_dir.mkdir(parents=True)  # a kept record: RUN_RECORD has no sft.json
    assert jobs.sft_warm_tasks(list(runs.values())) == ["here"]
    old = RunSpec("old", "rpg", 0, tmp_path / "out")  # sft.json from before the key
    old.run_dir.mkdir(parents=True)
    (old.run_dir / "sft.json").write_text(json.dumps({"losses": [1.0]}))
    assert jobs.sft_warm_tasks([old, runs["here"], runs["here"]]) == ["here"]
    monkeypatch.setenv("RPG_SFT_CACHE", "off")
    assert jobs.sft_warm_tasks(list(runs.values())) == []


def test_jobs_run_two_at_once_and_never_two_cold_runs_of_one_task(tmp_path):
    specs = [RunSpec(t, m, 0, tmp_path) for t in ("a", "b") for m in ("rpg", "vanilla")]
    lock, active, seen_beside = threading.Lock(), set(), {}
    b_started = threading.Event()

    def fn(i, p):
        with lock:
            seen_beside[repr(p)] = {repr(q) for q in active}
            active.add(p)
        if p.task == "b":
            b_started.set()
        # a's first run ends only once b's has started: two runs were in flight at once
        ok = b_started.wait(60) if repr(p) == "a rpg seed 0" else True
        with lock:
            active.discard(p)
        return ok and i != 4

    ended = jobs.run_jobs(list(enumerate(specs, 1)), fn, jobs=2)
    assert sorted(repr(p) for p, _ in ended) == sorted(repr(p) for p in specs)
    assert dict((repr(p), ok) for p, ok in ended)["b vanilla seed 0"] is False  # fn's result
    assert dict((repr(p), ok) for p, ok in ended)["a rpg seed 0"] is True
    assert "a rpg seed 0" not in seen_beside["a vanilla seed 0"]  # a was cold: one at a time
    assert "a rpg seed 0" in seen_beside["b rpg seed 0"]
    # a task warm from the start (sft_warm_tasks: its SFT start is cached): two runs at once
    a_only = [(1, specs[0]), (2, specs[1])]
    b_started.set()
    assert all(ok for _, ok in jobs.run_jobs(a_only, fn, jobs=1, warm=["a"]))
    both = threading.Barrier(2, timeout=60)
    ended = jobs.run_jobs(a_only, lambda i, p: both.wait() >= 0, jobs=2, warm=["a"])
    assert [ok for _, ok in ended] == [True, True]  # a lone run would break the barrier


def test_a_stopped_table_ends_its_runs_in_flight_and_raises(tmp_path):
    """SIGTERM during run_jobs: the live child processes are terminated, no new one starts,
    and KeyboardInterrupt reaches the caller (whose ledger then says interrupted)."""
    old = signal.getsignal(signal.SIGTERM)
    started: list[int] = []

    def fn(i, spec):
        started.append(i)
        cmd = [sys.executable, "-c", "import time; time.sleep(600)"]
        return jobs.call(cmd, tmp_path / f"{i}.log") == 0

    def kill_when_two_live():
        while True:
            with jobs.CHILDREN.lock:
                if len(jobs.CHILDREN.live) == 2:
                    break
            threading.Event().wait(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    work = [(i, RunSpec("churn-auc", "rpg", i, tmp_path)) for i in range(4)]
    threading.Thread(target=kill_when_two_live, daemon=True).start()
    with pytest.raises(KeyboardInterrupt), jobs.stop_on_signals():
        jobs.run_jobs(work, fn, jobs=2, warm=["churn-auc"])
    assert sorted(started) == [0, 1] and not jobs.CHILDREN.live  # both ended, none started after
    assert signal.getsignal(signal.SIGTERM) is old  # the handler restored on the way out
    # and later tables start processes again, each logged after its command line
    cmd = [sys.executable, "-c", "print('hi'); raise SystemExit(3)"]
    assert jobs.call(cmd, tmp_path / "x.log") == 3
    assert (tmp_path / "x.log").read_text().splitlines()[1:] == ["hi"]
    assert (tmp_path / "0.log").read_text().startswith(f"$ {sys.executable} -c ")


def test_a_stored_probe_is_reused_only_for_the_same_counts_and_checkpoint(tmp_path, monkeypatch):
    """Reused: the table's answers per parent and parent count, and the run's last checkpoint
    (``trained_step``, or an older file's ``(step N)`` label; a TRL run's own checkpoints).
    Probed again: another count, or a run extended since (the user's re-run found it stale)."""
    spec = RunSpec("churn-auc", "rpg", 0, tmp_path)

    def checkpoint(step: int) -> None:
        folder = spec.run_dir / "checkpoints" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        (folder / "trainer.pt").write_bytes(b"")

    checkpoint(3)
    (spec.run_dir / "probe").mkdir()
    pols = [{"policy": "sft"}, {"policy": "trained (step 3)"}]
    record = {"answers_per_parent": 2, "parent_ids": [1, 2, 3, 4], "policies": pols}
    (spec.run_dir / "probe" / "probe.json").write_text(json.dumps(record))
    calls = []
    monkeypatch.setattr(jobs, "call", lambda cmd, log: calls.append(cmd) or 0)
    two = replace(FULL, probe_answers=2)
    assert jobs.probe_run(two, spec) == 0 and calls == []  # label step 3 = last checkpoint
    assert jobs.probe_run(replace(FULL, probe_answers=4), spec) == 0
    assert len(calls) == 1 and calls[0][calls[0].index("--answers") + 1] == "4"
    assert calls[0][:4] == [sys.executable, "-m", "rpg_llm.probe", str(spec.run_dir)]
    assert jobs.probe_run(replace(two, probe_parents=3), spec) == 0 and len(calls) == 2
    checkpoint(5)  # the run was extended
    assert not jobs.probe_is_current(two, spec)
    (spec.run_dir / "probe" / "probe.json").write_text(json.dumps(record | {"trained_step": 5}))
    assert jobs.probe_is_current(two, spec)
    assert not jobs.probe_is_current(two, spec, "trl")  # no trl/checkpoint-5
    (spec.run_dir / "trl" / "checkpoint-5").mkdir(parents=True)
    assert jobs.probe_is_current(two, spec, "trl")
