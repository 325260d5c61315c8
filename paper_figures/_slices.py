"""The slice ledger of a resumable table: one CSV row per invocation that started work.

A long table (``paper_figures.llm_table``) is made in resumable slices, often across sessions
and machines, so its cost is the sum of its slices' wall times, not any one process's. Each slice
that starts a run or a probe appends one row to ``<out>/llm_table_slices.csv``: when it started
(UTC), its wall seconds, how many runs it kept in flight (``--jobs``), the runs and probes it
started, and the machine's 1-minute load average sampled while it ran (``os.getloadavg``), so a
reader can tell a quiet machine from a shared one. :func:`slices_text` sums the ledger for the
table's text and says how many of the table's runs the recorded slices made.
"""

from __future__ import annotations

import csv
import io
import math
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

from rpg_core.filelock import FileLock, lock_path_for

__all__ = ["SLICES_CSV", "Slice", "LoadSampler", "append_slice", "read_slices", "slices_text"]

SLICES_CSV = "llm_table_slices.csv"


@dataclass(frozen=True)
class Slice:
    """One invocation's row of the ledger.

    ``started_utc``: ISO 8601, seconds; ``wall_s``: seconds the slice spent on its runs and
    probes (from before the first started to after the last ended); ``jobs``: runs in flight at
    once; ``runs`` / ``probes``: the run names (``<task>/<arm>-seed<k>``) whose run or probe
    this slice started, ``;``-joined in the CSV;
    ``load_mean`` / ``load_max``: the 1-minute load average over the slice's samples; ``cpus``:
    ``os.cpu_count()``; ``outcome``: ``complete`` (every run and probe ended well), ``failed``
    (one did not) or ``interrupted`` (the slice was stopped).
    """

    started_utc: str
    wall_s: float
    jobs: int
    runs: tuple[str, ...]
    probes: tuple[str, ...]
    load_mean: float
    load_max: float
    cpus: int
    outcome: str

    def __post_init__(self) -> None:
        if self.outcome not in ("complete", "failed", "interrupted"):
            raise ValueError(f"outcome {self.outcome!r}: complete, failed or interrupted")
        if not (self.wall_s >= 0 and self.jobs >= 1):
            raise ValueError(f"wall_s {self.wall_s} must be >= 0 and jobs {self.jobs} >= 1")


FIELDS = tuple(f.name for f in fields(Slice))


class LoadSampler:
    """Samples ``os.getloadavg()[0]`` now and every ``interval_s`` seconds in a daemon thread
    until :meth:`stop`, which takes a last sample and returns ``(mean, max)`` of all samples.

    Raises ValueError for ``interval_s <= 0``.
    """

    def __init__(self, interval_s: float = 60.0) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s {interval_s} must be > 0")
        self.interval_s = interval_s
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> tuple[float, float]:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])
        return math.fsum(self.samples) / len(self.samples), max(self.samples)


def now_utc() -> str:
    """The current time, ISO 8601 in UTC to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def append_slice(path: Path, row: Slice) -> None:
    """Append ``row`` to the ledger at ``path`` (written with its header when new), under the
    ledger's lock (``.<name>.lock`` beside it; another writer waits), so that two slices never
    both write a header or interleave their rows. A torn last line (a writer killed in its
    middle) is cut off first: it holds no whole row, and a row appended to it would be lost
    with it."""
    d = asdict(row)
    d["runs"], d["probes"] = ";".join(row.runs), ";".join(row.probes)
    text = io.StringIO()
    csv.DictWriter(text, fieldnames=FIELDS).writerow(d)
    data = text.getvalue().encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(lock_path_for(path), f"the slice ledger {path}"), open(path, "a+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size:
            fh.seek(0)
            body = fh.read()
            if not body.endswith(b"\n"):
                fh.truncate(body.rfind(b"\n") + 1)
                size = fh.seek(0, os.SEEK_END)
        if not size:
            head = io.StringIO()
            csv.DictWriter(head, fieldnames=FIELDS).writeheader()
            data = head.getvalue().encode() + data
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def read_slices(path: Path) -> list[Slice]:
    """The ledger's rows; ``[]`` when there is none. Raises ValueError naming the line of a
    malformed row."""
    if not path.exists():
        return []
    out = []
    with open(path, newline="") as fh:
        for n, d in enumerate(csv.DictReader(fh), 2):
            try:
                out.append(
                    Slice(
                        started_utc=d["started_utc"],
                        wall_s=float(d["wall_s"]),
                        jobs=int(d["jobs"]),
                        runs=tuple(x for x in d["runs"].split(";") if x),
                        probes=tuple(x for x in d["probes"].split(";") if x),
                        load_mean=float(d["load_mean"]),
                        load_max=float(d["load_max"]),
                        cpus=int(d["cpus"]),
                        outcome=d["outcome"],
                    )
                )
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ValueError(f"{path} line {n}: not a slice row ({e})") from e
    return out


def slices_text(
    slices: Sequence[Slice],
    table_runs: Iterable[str],
    *,
    unfinished: int = 0,
    planned: int | None = None,
) -> str:
    """One paragraph: the recorded slices' summed wall time (hours), their ``--jobs``, load and
    outcomes, and how many of ``table_runs`` (the finished runs in the table, by name) they
    started; with ``unfinished`` > 0 runs of the protocol's ``planned`` not finished yet, it
    says that the sum is not yet the whole table's cost. ``""`` when there are no slices."""
    if not slices:
        return ""
    table = set(table_runs)
    made = {r for sl in slices for r in sl.runs} & table
    hours = math.fsum(sl.wall_s for sl in slices) / 3600
    jobs = ", ".join(sorted({str(sl.jobs) for sl in slices}))
    load = (
        f"1-minute load {min(sl.load_mean for sl in slices):.1f}-"
        f"{max(sl.load_mean for sl in slices):.1f} on average per slice (max "
        f"{max(sl.load_max for sl in slices):.1f}) on {max(sl.cpus for sl in slices)} CPUs"
    )
    stopped = sum(sl.outcome != "complete" for sl in slices)
    text = (
        f"Slices ({SLICES_CSV}): {len(slices)} that started work, {hours:.2f} h of wall time "
        f"in all, --jobs {jobs}, {load}"
        + (
            f"; {stopped} of them {'was' if stopped == 1 else 'were'} stopped or failed"
            if stopped
            else ""
        )
        + f". They started {len(made)} of the table's {len(table)} runs"
    )
    if len(made) < len(table):
        text += (
            "; the other runs were made by slices before the ledger or elsewhere, and their "
            "time is not in this sum"
        )
    if unfinished > 0:
        of = f" of the protocol's {planned}" if planned is not None else ""
        text += (
            f"; {unfinished} run{'s' if unfinished != 1 else ''}{of} "
            f"{'have' if unfinished != 1 else 'has'} not finished, so the sum is not yet the "
            "whole table's cost"
        )
    return text + "."
