"""One slice of the table: the runs left and the probes missing, each run probed as soon as it
finishes, and the slice's row of the ledger.

A finished run (its steps reach ``steps``, or its chains have used the execution budget) is
skipped; a killed or crashed one is continued with ``python -m rpg_llm.run --resume``. Each run
is probed as soon as it finishes, so a finished run's folder then holds all the table reads
(:data:`paper_figures.llm_table.settings.RUN_RECORD`, about 120 KB here). Keeping those files
(in git, say) and dropping the rest (the SFT weights, checkpoints, rollouts: several hundred MB
a run) keeps the run: a later slice on a new machine with the same ``--out`` skips it, and
``--table-only`` reads it. Each slice that starts a run or a probe appends a row to
``<out>/llm_table_slices.csv`` (its wall time, ``--jobs``, the runs and probes it started, the
machine's load: :mod:`paper_figures._slices`), and the table's text sums them, so a table made
across sessions states what it cost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from paper_figures import _slices as slices
from paper_figures.llm_table import jobs
from paper_figures.llm_table.plan import RunSpec, run_state
from paper_figures.llm_table.settings import TableSettings
from rpg_llm.config import LoopConfig
from rpg_llm.launch import RunStatus

__all__ = ["STATE_WORDS", "run_slice"]

STATE_WORDS = {"new": "new", "resumable": "resume", "finished": "done"}
"""How a run's state (``rpg_llm.launch.RunStatus.state``) is printed."""


def run_slice(
    s: TableSettings,
    specs: Sequence[RunSpec],
    cfgs: Mapping[RunSpec, LoopConfig],
    states: Mapping[RunSpec, RunStatus],
    out: Path,
    n_jobs: int,
) -> dict[RunSpec, bool]:
    """Run what is left of ``specs`` (``states``: each folder's state before the slice) and
    probe what is not probed yet, at most ``n_jobs`` runs at once (:func:`jobs.run_jobs`), and
    append the slice's row to the ledger when it started anything.

    Returns:
        For each run the slice worked on, whether it ended complete (finished and probed).

    Raises:
        KeyboardInterrupt: the slice was stopped (its ledger row then says ``interrupted``).
    """
    n = len(specs)
    work: list[tuple[int, RunSpec]] = []
    for i, p in enumerate(specs, 1):
        if states[p].finished:
            print(f"[{i}/{n}] {p}: skip (finished)")
            if not s.probe_answers:
                continue
            if jobs.probe_is_current(s, p, cfgs[p].engine):
                # not a job: a job's end marks its task warm (jobs.run_jobs), and a kept run's
                # record says nothing of this machine's caches (jobs.sft_warm_tasks)
                print(f"[{i}/{n}] {p}: probe skip (current)")
                continue
        work.append((i, p))  # a run to run, or one finished here and not yet probed

    started: dict[str, list[str]] = {"runs": [], "probes": []}

    def run_and_probe(i: int, p: RunSpec) -> bool:
        """Run (unless finished) and probe one spec; True when it ended complete."""
        st = states[p]
        if not st.finished:
            word = STATE_WORDS[st.state]
            print(f"[{i}/{n}] {p}: {word} -> {p.run_dir} (log {p.log_path})", flush=True)
            started["runs"].append(p.name)
            rc, wall = jobs.run_one(p, cfgs[p], st.state)
            print(f"[{i}/{n}] {p}: exit {rc} after {wall:.1f} s", flush=True)
            if rc != 0 or not run_state(p, cfgs[p]).finished:
                return False
        # probed at once, so that a finished run's folder is complete (RUN_RECORD) and can be kept
        if s.probe_answers:
            if jobs.probe_is_current(s, p, cfgs[p].engine):
                print(f"[{i}/{n}] {p}: probe skip (current)", flush=True)
                return True
            t0 = time.perf_counter()
            started["probes"].append(p.name)
            rc = jobs.probe_run(s, p, cfgs[p].engine)
            wall = time.perf_counter() - t0
            where = p.run_dir / "probe"
            print(f"[{i}/{n}] {p}: probe exit {rc} after {wall:.1f} s ({where})", flush=True)
            return rc == 0
        return True

    warm = jobs.sft_warm_tasks([p for p in specs if states[p].finished])
    t0, begun, load = time.perf_counter(), slices.now_utc(), slices.LoadSampler()
    outcome = "interrupted"
    try:
        with jobs.stop_on_signals():
            ended = dict(jobs.run_jobs(work, run_and_probe, n_jobs, warm=warm))
        outcome = "failed" if not all(ended.values()) else "complete"
    finally:
        load_mean, load_max = load.stop()
        if started["runs"] or started["probes"]:
            row = slices.Slice(
                started_utc=begun, wall_s=round(time.perf_counter() - t0, 1), jobs=n_jobs,
                runs=tuple(started["runs"]), probes=tuple(started["probes"]),
                load_mean=round(load_mean, 2), load_max=round(load_max, 2),
                cpus=os.cpu_count() or 1, outcome=outcome,
            )  # fmt: skip
            slices.append_slice(out / slices.SLICES_CSV, row)
    return ended
