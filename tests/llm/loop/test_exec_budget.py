"""The execution-budget stopping rule (``LoopConfig.exec_budget_s``, ``--exec-budget``): a run
stops before the first step at which every chain has used the budget; ``steps`` is the cap."""

from __future__ import annotations

import types

import fixtures_llm
import numpy as np
import pytest

from rpg_llm.config import LoopConfig
from rpg_llm.flags import apply_flags
from rpg_llm.loop.budget import budget_spent
from rpg_llm.loop.buffer import SampleBuffer
from testkit.samples import toy_sample
from testkit.tiny_trainer import tiny_edit_config

tiny_model_dir = fixtures_llm.tiny_model_dir


def _s(i: int, step: int, row: int, t: float, status: str = "ok"):
    return toy_sample(i, 0.5, t, step=step, row=row, status=status)


def _python_sum(samples, max_step: int) -> dict[int, float]:
    """The reference: each row's exec_time over steps 1 .. max_step, infra left out."""
    totals: dict[int, float] = {}
    for s in samples:
        if 1 <= s.step <= max_step and s.status != "infra":
            totals[s.row] = totals.get(s.row, 0.0) + s.exec_time
    return totals


def test_row_exec_seconds_and_budget_spent_by_hand(tmp_path):
    samples = [_s(0, 0, 0, 50.0), _s(1, 1, 0, 1.0), _s(2, 1, 1, 3.0), _s(3, 2, 0, 2.0)]
    samples.append(_s(4, 2, 1, 0.5))
    samples.append(_s(5, 2, 2, 7.0, "infra"))  # the machine's time, not the script's: left out
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        buf.add_many(samples)
        # the step-0 seed (50 s) is in no chain; rows sum their generated samples
        totals = buf.exec_seconds_by_row("r", 2)
        assert totals == {0: 3.0, 1: 3.5}
        assert buf.exec_seconds_by_row("r", 1) == {0: 1.0, 1: 3.0}
        assert buf.exec_seconds_by_row(None, 2) == totals  # one run: the same
        assert buf.exec_seconds_by_row("other", 2) == {}
    assert budget_spent(totals, 2, 3.0)  # 3.0 >= 3.0 and 3.5 >= 3.0
    assert not budget_spent(totals, 2, 3.2)  # row 0 has used 3.0 < 3.2
    assert not budget_spent(totals, 3, 1.0)  # row 2 has no sample: 0 s
    assert not budget_spent({}, 1, 1e-9)
    with pytest.raises(ValueError, match="budget_s"):
        budget_spent(totals, 2, 0.0)
    with pytest.raises(ValueError, match="batch_size"):
        budget_spent(totals, 0, 1.0)


def test_the_sql_sum_equals_the_python_sum(tmp_path):
    rng = np.random.default_rng(3)
    samples = [
        toy_sample(
            i,
            time_s=float(rng.uniform(0, 5)),
            run=("a" if i % 5 else "b"),
            status=("infra" if i % 7 == 3 else "ok"),
        )
        for i in range(40)  # steps 0 .. 9, rows 0 .. 3, two runs
    ]
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        buf.add_many(samples)
        for k in (0, 1, 4, 9):
            for run in ("a", None):
                want = _python_sum([x for x in samples if run in (None, x.run)], k)
                got = buf.exec_seconds_by_row(run, k)
                assert got.keys() == want.keys()
                for row in want:
                    assert got[row] == pytest.approx(want[row], rel=1e-12)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), True, "5"])
def test_a_bad_budget_is_refused_by_flag_name(bad):
    with pytest.raises(ValueError, match="--exec-budget") as err:
        apply_flags(LoopConfig(), {"exec_budget_s": bad})
    assert repr(bad) in str(err.value)
    assert LoopConfig(exec_budget_s=2).exec_budget_s == 2  # an int number of seconds is fine


def _outcome(r: float, t: float):
    return types.SimpleNamespace(
        status="ok", delta=t, score=r, raw_reward=r, valid=True, outcome_text=f"ok {r}"
    )


# measured seconds per step and row; cumulative (1, 3) -> (3, 3.5) -> (4.5, 4.5): a 4 s
# budget is spent by both chains after step 3 (row 0 alone reaches it only there)
DELTAS = [(1.0, 3.0), (2.0, 0.5), (1.5, 1.0), (9.0, 9.0), (9.0, 9.0)]


def _trainer(cfg, run_dir, monkeypatch, resume=False):
    from rpg_llm.env.actions import Action
    from rpg_llm.loop import Trainer

    trainer = Trainer(cfg, run_dir, resume=resume, progress=False)
    fake = iter([_outcome(0.5, t) for pair in DELTAS for t in pair])
    trainer.env.backends.run_batch = lambda codes, *a: [next(fake) for _ in codes]
    monkeypatch.setattr(
        "rpg_llm.loop.execution.parse_action", lambda *a, **k: Action("script", "print(1)\n")
    )
    monkeypatch.setattr(trainer.ppo, "step", lambda batch: {})
    return trainer


@pytest.mark.slow
def test_a_run_stops_once_every_chain_has_used_its_budget(tiny_model_dir, tmp_path, monkeypatch):
    cfg = tiny_edit_config(tiny_model_dir, steps=5, exec_budget_s=4.0)
    run = tmp_path / "run"
    trainer = _trainer(cfg, run, monkeypatch)
    try:
        records = trainer.run()
    finally:
        trainer.close()
    assert [r.step for r in records] == [1, 2, 3]  # not 5: the budget ended it
    assert (run / "checkpoints" / "step_000003").exists()  # the last step run is checkpointed
    # resuming the stopped run runs no step (and loses nothing)
    again = _trainer(cfg, run, monkeypatch, resume=True)
    try:
        assert again.run() == []
        assert sorted((s.step, s.row) for s in again.env.buffer.all()) == [
            (k, r) for k in (1, 2, 3) for r in (0, 1)
        ]
    finally:
        again.close()
    # the same deltas with a budget no chain reaches: the step cap ends the run
    cap = tiny_edit_config(tiny_model_dir, steps=2, exec_budget_s=100.0)
    trainer = _trainer(cap, tmp_path / "cap", monkeypatch)
    try:
        assert [r.step for r in trainer.run()] == [1, 2]
    finally:
        trainer.close()


def test_infra_samples_are_in_no_chain(tmp_path):
    """Found in review: an infra sample's placeholder reward 0.0 became a chain's best score
    (a chain of infra then error read 0.0 instead of -10)."""
    from rpg_llm.loop.budget import read_chains
    from rpg_llm.loop.runfolder import RunFolder

    folder = RunFolder(tmp_path / "run")
    folder.create({"method": "rpg", "task": "toy", "seeded": False})
    bad = {"status": "error", "score": None}
    samples = [
        toy_sample(4, 0.0, 0.0, status="infra", score=None),  # step 1 row 0
        toy_sample(8, -10.0, 3.0, **bad),  # step 2 row 0
        toy_sample(5, 0.7, 2.0),  # step 1 row 1
    ]
    with SampleBuffer(folder.buffer_path) as buf:
        buf.add_many(samples)
    chains = read_chains(folder.root)
    assert [list(c.best) for c in chains] == [[-10.0], [0.7]]
    assert [list(c.times) for c in chains] == [[3.0], [2.0]]
