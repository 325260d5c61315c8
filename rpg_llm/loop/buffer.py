"""Durable sample buffer: every generated script and its outcome, in SQLite (WAL journal).

Paper section 4 (Algorithm 1): each step stores the action a_t (the script), its duration delta
and reward r in the buffer B. This is the durable store of every sample; the parents of the next
prompts come from a view over it, the parent buffer (:class:`rpg_llm.loop.parents.ParentPool`).

Durability: one transaction per ``add_many`` (``BEGIN IMMEDIATE`` ... ``COMMIT``) with
``synchronous=FULL``, so a process killed at any moment (even SIGKILL) loses no committed sample
and leaves no partial row; history is never deleted.
A sample is identified by ``(run, step, row)``: the database refuses a second one (a UNIQUE
index), so two processes replaying the same step cannot both store it.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields, replace
from pathlib import Path
from typing import Any

from rpg_core.diskfull import DiskFull, is_disk_full

SAMPLE_STATUSES = ("ok", "timeout", "oom", "error", "invalid", "infra")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    step INTEGER NOT NULL,
    row INTEGER NOT NULL,
    task TEXT NOT NULL,
    parent_id INTEGER,
    prompt_hash TEXT NOT NULL,
    code TEXT NOT NULL,
    outcome_text TEXT NOT NULL,
    score REAL,
    raw_reward REAL NOT NULL,
    exec_time REAL NOT NULL CHECK (exec_time >= 0),
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    stored_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
CREATE INDEX IF NOT EXISTS samples_run_id ON samples (run, id);
CREATE INDEX IF NOT EXISTS samples_run_task_id ON samples (run, task, id);
DROP INDEX IF EXISTS samples_run_step_row;
CREATE UNIQUE INDEX IF NOT EXISTS samples_run_step_row_unique ON samples (run, step, row);
"""


@dataclass(frozen=True)
class Sample:
    """One executed script.

    Attributes:
      run: run name (e.g. ``"rpg-seed0"``); step: training step; row: batch row (0..B-1).
      task: competition id.
      parent_id: id of the sample this one improves on (``None``: the base prompt).
      prompt_hash: hash of the prompt text; code: the script.
      outcome_text: what the policy is shown about this run.
      score: task score (``None`` when not graded); raw_reward: DESIGN section 7 raw reward.
      exec_time: delta, seconds (>= 0); status: one of ``SAMPLE_STATUSES``.
      created_at: seconds since the epoch; id: assigned by the buffer (``None`` before storing).
    """

    run: str
    step: int
    row: int
    task: str
    parent_id: int | None
    prompt_hash: str
    code: str
    outcome_text: str
    score: float | None
    raw_reward: float
    exec_time: float
    status: str
    created_at: float
    id: int | None = None


_COLUMNS = [f.name for f in fields(Sample) if f.name != "id"]


def _check(s: Sample) -> None:
    if not isinstance(s, Sample):
        raise ValueError(f"expected a Sample, got {type(s).__name__}")
    for name in ("run", "task", "prompt_hash", "code", "outcome_text", "status"):
        if not isinstance(getattr(s, name), str):
            raise ValueError(f"Sample.{name} must be a str, got {getattr(s, name)!r}")
    if s.status not in SAMPLE_STATUSES:
        raise ValueError(f"Sample.status {s.status!r} is not one of {SAMPLE_STATUSES}")
    for name in ("step", "row"):
        v = getattr(s, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"Sample.{name} must be an int >= 0, got {v!r}")
    for name in ("raw_reward", "exec_time", "created_at"):
        v = getattr(s, name)
        if not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"Sample.{name} must be a finite number, got {v!r}")
    if s.exec_time < 0:
        raise ValueError(f"Sample.exec_time must be >= 0 seconds, got {s.exec_time!r}")
    if s.score is not None and (not isinstance(s.score, int | float) or math.isnan(s.score)):
        raise ValueError(f"Sample.score must be a number or None, got {s.score!r}")
    if s.parent_id is not None and (not isinstance(s.parent_id, int) or s.parent_id < 1):
        raise ValueError(f"Sample.parent_id must be a positive int or None, got {s.parent_id!r}")


class SampleBuffer:
    """SQLite-backed store of every sample of a run folder (all runs and steps).

    Args:
      path: database file (created with its folder if missing; reopening resumes).

    Raises:
      ValueError: the file is not a usable SQLite sample buffer, or it holds two samples with the
        same ``(run, step, row)`` (the message names the file).

    Thread-safe (one connection behind a lock); several processes may read while one writes.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.IntegrityError as exc:
            self._db.close()
            raise ValueError(
                f"{self.path} holds two samples with the same (run, step, row): {exc}"
            ) from None
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            self._db.close()
            raise ValueError(f"{self.path} is not a usable sample buffer: {exc}") from None

    # -- writing -------------------------------------------------------------------------------

    def add_many(self, samples: Sequence[Sample]) -> list[int]:
        """Store ``samples`` in one transaction; returns their new ids (increasing, in order).

        Raises:
          ValueError: a sample is malformed (checked for all samples before anything is
            written), or the buffer already holds a sample with the same ``(run, step, row)``
            (then nothing of ``samples`` is written).
          DiskFull: the disk is full (nothing of ``samples`` is written; names the buffer).
        """
        samples = list(samples)
        for s in samples:
            _check(s)
        if not samples:
            return []
        sql = (
            f"INSERT INTO samples ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        )
        ids: list[int] = []
        with self._lock:
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                for s in samples:
                    values = astuple(s)[:-1]
                    cur.execute(sql, values)
                    assert cur.lastrowid is not None  # an INSERT sets it
                    ids.append(int(cur.lastrowid))
                cur.execute("COMMIT")
            except sqlite3.IntegrityError:
                cur.execute("ROLLBACK")
                raise ValueError(
                    f"{self.path} already holds run {s.run!r} step {s.step} row {s.row}; "
                    "a sample is stored once"
                ) from None
            except BaseException as err:
                cur.execute("ROLLBACK")
                if is_disk_full(err):  # SQLite: "database or disk is full", no path
                    raise DiskFull(self.path) from err
                raise
        return ids

    def add(self, sample: Sample) -> int:
        """Store one sample; returns its id."""
        return self.add_many([sample])[0]

    # -- reading -------------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    @staticmethod
    def _sample(row: tuple) -> Sample:
        return Sample(*row[1:], id=row[0])

    def _where(self, run: str | None, task: str | None) -> tuple[str, list[Any]]:
        conds, params = [], []
        if run is not None:
            conds.append("run = ?")
            params.append(run)
        if task is not None:
            conds.append("task = ?")
            params.append(task)
        return (" WHERE " + " AND ".join(conds)) if conds else "", params

    def get(self, sample_id: int) -> Sample:
        """The sample with this id.

        Raises:
          KeyError: no such id.
        """
        rows = self._query(
            f"SELECT id, {', '.join(_COLUMNS)} FROM samples WHERE id = ?", [sample_id]
        )
        if not rows:
            raise KeyError(f"no sample with id {sample_id} in {self.path}")
        return self._sample(rows[0])

    def all(self, run: str | None = None) -> list[Sample]:
        """Every stored sample (of ``run`` if given), in insertion order."""
        where, params = self._where(run, None)
        rows = self._query(
            f"SELECT id, {', '.join(_COLUMNS)} FROM samples{where} ORDER BY id", params
        )
        return [self._sample(r) for r in rows]

    def step_samples(self, run: str, step: int) -> list[Sample]:
        """The samples of one step of ``run``, by row (then id): one indexed query, used by
        resume and replay instead of loading the whole run."""
        rows = self._query(
            f"SELECT id, {', '.join(_COLUMNS)} FROM samples WHERE run = ? AND step = ? "
            "ORDER BY row, id",
            [run, step],
        )
        return [self._sample(r) for r in rows]

    def exec_seconds_by_row(self, run: str | None, max_step: int) -> dict[int, float]:
        """``{row: total exec_time}``, seconds, of the generated samples of steps
        ``1 .. max_step`` (of ``run``; None: every run in the buffer, as
        ``rpg_llm.loop.budget.read_chains`` reads a run folder): each chain's measured execution
        for the execution-budget stopping rule (``rpg_llm.loop.budget.budget_spent``). The step-0
        seeds are in no chain and ``infra`` samples (the machine failed, not the script) are
        left out, as in ``read_chains``."""
        where, params = self._where(run, None)
        cond = ("AND" if where else "WHERE") + " step BETWEEN 1 AND ? AND status != 'infra'"
        rows = self._query(
            f"SELECT row, SUM(exec_time) FROM samples{where} {cond} GROUP BY row",
            [*params, int(max_step)],
        )
        return {int(r): float(t) for r, t in rows}

    def by_row(self, min_step: int = 0, run: str | None = None) -> list[Sample]:
        """Every sample of steps >= ``min_step`` (of ``run`` if given), ordered by
        ``(row, step, id)``: the chains of the budget curves, one batch row after another."""
        where, params = self._where(run, None)
        cond = ("AND" if where else "WHERE") + " step >= ?"
        rows = self._query(
            f"SELECT id, {', '.join(_COLUMNS)} FROM samples{where} {cond} ORDER BY row, step, id",
            [*params, min_step],
        )
        return [self._sample(r) for r in rows]

    def count(self, run: str | None = None) -> int:
        """Number of stored samples (of ``run`` if given)."""
        where, params = self._where(run, None)
        return int(self._query(f"SELECT COUNT(*) FROM samples{where}", params)[0][0])

    def max_step(self, run: str) -> int:
        """Largest stored step of ``run``; -1 when the run has no sample (resume at ``+ 1``)."""
        value = self._query("SELECT MAX(step) FROM samples WHERE run = ?", [run])[0][0]
        return -1 if value is None else int(value)

    def stored_at(self, sample_id: int) -> float:
        """When the sample was committed, seconds since the epoch (database clock)."""
        rows = self._query("SELECT stored_at FROM samples WHERE id = ?", [sample_id])
        if not rows:
            raise KeyError(f"no sample with id {sample_id} in {self.path}")
        return float(rows[0][0])

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (committed data is already on disk)."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> SampleBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def with_id(sample: Sample, sample_id: int) -> Sample:
    """``sample`` with its id set (convenience for callers that keep the objects they stored)."""
    return replace(sample, id=sample_id)


def read_samples(path: Path) -> list[Sample]:
    """Every sample stored in the buffer file ``path``, in insertion order, read without writing.

    For reading a finished run (benchmarks, tables): the file is opened read-only, so unlike
    :class:`SampleBuffer` this neither creates nor migrates anything and never changes the file.
    When no write-ahead log with content lies beside it (a buffer closed cleanly, or one copied
    without its ``-wal``), it is opened as immutable, so SQLite leaves no ``-wal`` or ``-shm``
    file beside it either; otherwise the log's samples are read too.

    Raises:
        ValueError: ``path`` is missing or is not a readable sample buffer (the message names it).
    """
    rows = _read_only(path, f"SELECT id, {', '.join(_COLUMNS)} FROM samples ORDER BY id", ())
    return [SampleBuffer._sample(r) for r in rows]


def read_exec_seconds_by_row(path: Path, max_step: int) -> dict[int, float]:
    """:meth:`SampleBuffer.exec_seconds_by_row` of every run in the buffer file ``path``, read
    as :func:`read_samples` reads (nothing written): ``{row: seconds}`` over steps
    ``1 .. max_step``, ``infra`` samples left out.

    Raises:
        ValueError: as :func:`read_samples`.
    """
    sql = (
        "SELECT row, SUM(exec_time) FROM samples WHERE step BETWEEN 1 AND ? "
        "AND status != 'infra' GROUP BY row"
    )
    return {int(r): float(t) for r, t in _read_only(path, sql, (int(max_step),))}


def _read_only(path: Path, sql: str, params: Sequence[Any]) -> list[tuple]:
    """The rows of ``sql`` on the buffer file ``path``, opened read-only (immutable when no
    write-ahead log with content lies beside it)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no sample buffer there")
    wal = path.with_name(path.name + "-wal")
    live = wal.is_file() and wal.stat().st_size > 0
    uri = path.resolve().as_uri() + ("?mode=ro" if live else "?mode=ro&immutable=1")
    try:
        con = sqlite3.connect(uri, uri=True)
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{path} is not a readable sample buffer: {exc}") from None
