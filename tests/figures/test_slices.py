"""The slice ledger of a resumable table (paper_figures._slices)."""

from __future__ import annotations

import time

import pytest

from paper_figures import _slices as slices


def _slice(wall_s: float, runs=(), probes=(), load=(1.0, 2.0), outcome="complete", jobs=2):
    return slices.Slice(
        started_utc="2026-12-06T07:00:00+00:00", wall_s=wall_s, jobs=jobs, runs=tuple(runs),
        probes=tuple(probes), load_mean=load[0], load_max=load[1], cpus=2, outcome=outcome,
    )  # fmt: skip


def test_rows_round_trip_with_one_header(tmp_path):
    path = tmp_path / "ledger.csv"
    assert slices.read_slices(path) == []
    a = _slice(1800.0, runs=("t/rpg-seed0", "t/vanilla-seed0"), probes=("t/rpg-seed0",))
    b = _slice(30.5, probes=("t/vanilla-seed0",), outcome="interrupted", jobs=1)
    slices.append_slice(path, a)
    slices.append_slice(path, b)
    assert slices.read_slices(path) == [a, b]
    assert path.read_text().count("started_utc") == 1


def test_a_malformed_row_is_named_by_its_line(tmp_path):
    path = tmp_path / "ledger.csv"
    slices.append_slice(path, _slice(10.0))
    with open(path, "a") as fh:
        fh.write("2026-12-06T07:00:00+00:00,ten,2,,,1,1,2,complete\n")
    with pytest.raises(ValueError, match="line 3"):
        slices.read_slices(path)


@pytest.mark.parametrize(
    "kw, needle",
    [({"outcome": "done"}, "outcome 'done'"), ({"jobs": 0}, "jobs 0"), ({"wall_s": -1.0}, "-1")],
)
def test_a_bad_slice_is_refused(kw, needle):
    with pytest.raises(ValueError, match=needle):
        _slice(**({"wall_s": 1.0} | kw))


def test_the_text_sums_the_slices_and_counts_the_runs_they_made():
    ledger = [
        _slice(1800.0, runs=("t/rpg-seed0", "t/vanilla-seed0"), load=(1.9, 2.4)),
        _slice(3600.0, runs=("t/rpg-seed1", "u/rpg-seed0"), load=(2.1, 3.0), outcome="failed"),
    ]
    table = ["t/rpg-seed0", "t/vanilla-seed0", "t/rpg-seed1", "t/vanilla-seed1"]
    text = slices.slices_text(ledger, table)
    assert "2 that started work, 1.50 h of wall time in all" in text
    assert "1.9-2.1 on average per slice (max 3.0) on 2 CPUs" in text
    assert "1 of them was stopped or failed" in text
    both_stopped = slices.slices_text([ledger[1], ledger[1]], table)
    assert "2 of them were stopped or failed" in both_stopped
    assert "They started 3 of the table's 4 runs; the other runs" in text  # u/ is not the table's
    full = slices.slices_text(ledger, table[:3])
    assert "They started 3 of the table's 3 runs." in full and "other runs" not in full
    # a table still being made: the protocol's runs that have not finished
    partial = slices.slices_text(ledger, table[:3], unfinished=7, planned=10)
    assert partial.endswith(
        "They started 3 of the table's 3 runs; 7 runs of the protocol's 10 have not finished, so "
        "the sum is not yet the whole table's cost."
    )
    one = slices.slices_text(ledger, table[:3], unfinished=1, planned=4)
    assert "; 1 run of the protocol's 4 has not finished, so" in one
    assert "not finished" not in slices.slices_text(ledger, table[:3], unfinished=0, planned=3)
    assert slices.slices_text([], table) == ""


def test_the_load_sampler_keeps_every_sample():
    with pytest.raises(ValueError, match="interval_s 0"):
        slices.LoadSampler(0)
    sampler = slices.LoadSampler(0.01)
    time.sleep(0.1)
    mean, top = sampler.stop()
    assert len(sampler.samples) >= 3
    assert mean == pytest.approx(sum(sampler.samples) / len(sampler.samples))
    assert top == max(sampler.samples) and min(sampler.samples) <= mean <= top


def test_a_row_after_a_torn_last_line_stands_alone(tmp_path):
    """A slice killed while appending leaves half a row; the next slice's row is still read
    (the torn half is cut, not glued to the new row)."""
    path = tmp_path / "ledger.csv"
    a, b = _slice(10.0, runs=("t/rpg-seed0",)), _slice(20.0, runs=("t/rpg-seed1",))
    slices.append_slice(path, a)
    with open(path, "a") as fh:
        fh.write("2026-12-06T08:00:00+00:00,33.5,2,t/rpg")  # killed here
    slices.append_slice(path, b)
    assert slices.read_slices(path) == [a, b]


def test_two_slices_appending_to_a_new_ledger_write_one_header(tmp_path, monkeypatch):
    """Slice A opens a ledger that does not exist yet; slice B (another process) appends to it
    at that moment. B waits for A's lock (up to 1 s here), so the ledger holds one header and
    both rows."""
    import builtins
    import threading

    path = tmp_path / "ledger.csv"
    a, b = _slice(10.0, runs=("t/rpg-seed0",)), _slice(20.0, runs=("t/rpg-seed1",))
    other = threading.Thread(target=slices.append_slice, args=(path, b))

    def racing_open(file, *args, **kw):
        if threading.current_thread() is not other and not other.is_alive() and not other.ident:
            other.start()  # B's append, while A is inside its own
            other.join(timeout=1.0)
        return builtins.open(file, *args, **kw)

    monkeypatch.setattr(slices, "open", racing_open, raising=False)
    slices.append_slice(path, a)
    other.join(timeout=30)
    assert path.read_text().count("started_utc") == 1
    assert sorted(slices.read_slices(path), key=lambda s: s.wall_s) == [a, b]
