"""SampleBuffer: round trip, validation, top-k selection, active set, durability under SIGKILL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from rpg_llm.loop.buffer import Sample, SampleBuffer, read_samples
from testkit.samples import toy_sample

make = toy_sample  # testkit.samples: a valid toy sample numbered i


def test_read_samples_gives_what_the_buffer_stored_and_never_writes(tmp_path):
    path = tmp_path / "buf.sqlite"
    with SampleBuffer(path) as buf:
        ids = buf.add_many([make(0, 0.5, 2.0), make(1, 0.25, 3.0, status="error", score=None)])
        buf.add_many([make(2, 0.7, 1.5, parent_id=ids[0])])
        stored = buf.all()
    files = sorted(tmp_path.iterdir())
    before = [(f.name, f.read_bytes()) for f in files]
    got = read_samples(path)
    assert got == stored and [s.parent_id for s in got] == [None, None, 1]
    assert got[1].score is None and got[2].exec_time == 1.5
    assert [(f.name, f.read_bytes()) for f in sorted(tmp_path.iterdir())] == before
    live = tmp_path / "live" / "buf.sqlite"
    with SampleBuffer(live) as buf:  # still open: its samples are in the -wal
        buf.add_many([make(0, 0.5, 2.0), make(1, 0.6, 1.0)])
        assert (tmp_path / "live" / "buf.sqlite-wal").stat().st_size > 0
        assert read_samples(live) == buf.all()
    with pytest.raises(ValueError, match="no sample buffer there"):
        read_samples(tmp_path / "none.sqlite")
    (tmp_path / "junk.sqlite").write_text("not sqlite" * 100)
    with pytest.raises(ValueError, match="junk.sqlite is not a readable sample buffer"):
        read_samples(tmp_path / "junk.sqlite")


def test_round_trip_and_reopen(tmp_path):
    path = tmp_path / "sub" / "buf.sqlite"
    samples = [make(0, 0.5, 2.0), make(1, -10.0, 3.0, status="invalid", score=None, parent_id=None)]
    with SampleBuffer(path) as buf:
        ids = buf.add_many(samples)
        assert ids == [1, 2]
        child = make(2, 0.7, 1.5, parent_id=ids[0], code="print('é ✓')\n" * 50)
        (cid,) = buf.add_many([child])
        assert buf.get(cid) == Sample(**{**child.__dict__, "id": cid})
    with SampleBuffer(path) as buf:  # resumes from disk
        got = buf.all()
        assert [s.id for s in got] == [1, 2, 3]
        assert got[1].score is None and got[1].status == "invalid"
        assert got[2].parent_id == 1
        assert buf.count() == 3 and buf.count("r") == 3 and buf.count("other") == 0
        assert buf.max_step("r") == 0 and buf.max_step("nope") == -1
        mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
        assert buf.stored_at(3) > 1.6e9  # a real epoch time from the database clock
        with pytest.raises(KeyError):
            buf.get(99)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("status", "crashed"),
        ("exec_time", -1.0),
        ("raw_reward", float("nan")),
        ("step", -1),
        ("parent_id", 0),
        ("code", None),
    ],
)
def test_bad_samples_raise_and_store_nothing(tmp_path, field, value):
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        buf.add(make(0))
        bad = make(1, **{field: value})
        with pytest.raises(ValueError, match=field):
            buf.add_many([make(2), bad])
        assert buf.count() == 1


WRITER = textwrap.dedent(
    """
    import sys, time
    from rpg_llm.loop.buffer import Sample, SampleBuffer, read_samples
    buf = SampleBuffer(sys.argv[1])
    batch = 0
    while True:
        samples = [
            Sample(run="w", step=batch, row=i, task="t", parent_id=None,
                   prompt_hash=f"{batch}-{i}", code=("x" * 2000) + f"{batch}-{i}",
                   outcome_text=f"o{batch}-{i}", score=float(batch), raw_reward=float(i),
                   exec_time=0.5 * i, status="ok", created_at=time.time())
            for i in range(50)
        ]
        ids = buf.add_many(samples)
        print(batch, ids[0], ids[-1], flush=True)
        batch += 1
    """
)


@pytest.mark.parametrize("kill_after", [3, 11, 25])
def test_sigkill_during_writes_loses_no_committed_sample(tmp_path, kill_after):
    path = tmp_path / "killed.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    committed = []
    try:
        for line in proc.stdout:
            committed.append(tuple(int(v) for v in line.split()))
            if len(committed) >= kill_after:
                os.kill(proc.pid, signal.SIGKILL)  # the writer is busy in its next transaction
                break
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert len(committed) == kill_after
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    with SampleBuffer(path) as buf:
        rows = buf.all()
        n = len(rows)
        # every reported batch is there; at most one more batch committed before the kill
        assert n % 50 == 0 and kill_after * 50 <= n <= (kill_after + 1) * 50
        by_id = {s.id: s for s in rows}
        for batch, first, last in committed:
            assert [by_id[i].step for i in range(first, last + 1)] == [batch] * 50
        for s in rows:  # no partial or mixed row
            tag = s.prompt_hash
            b, i = (int(v) for v in tag.split("-"))
            assert s.code == "x" * 2000 + tag and s.outcome_text == f"o{tag}"
            assert (s.step, s.row, s.score, s.raw_reward, s.exec_time) == (b, i, b, i, 0.5 * i)
        # and the buffer keeps working after the crash
        buf.add(make(0))
        assert buf.count() == n + 1


def test_step_samples_is_the_filtered_history(tmp_path):
    """One step's samples by one indexed query = all() filtered and sorted in Python."""
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        # rows stored out of order, two runs, a duplicate (row, step) in another run
        samples = [make(i, reward=0.1 * i) for i in (5, 4, 7, 6, 1, 0)]
        samples += [make(5, run="other"), make(9, run="r", status="infra", score=None)]
        buf.add_many(samples)
        for step in (0, 1, 2, 3):
            expect = sorted(
                (s for s in buf.all("r") if s.step == step), key=lambda s: (s.row, s.id)
            )
            assert buf.step_samples("r", step) == expect
        assert [s.row for s in buf.step_samples("r", 1)] == [0, 1, 2, 3]
        assert [s.status for s in buf.step_samples("r", 2)] == ["infra"]
        by_row = buf.by_row(min_step=1)
        assert [(s.row, s.step) for s in by_row] == sorted((s.row, s.step) for s in by_row)
        assert all(s.step >= 1 for s in by_row) and len(by_row) == 6
