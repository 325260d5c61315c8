"""The execution-budget stopping rule (``LoopConfig.exec_budget_s``, ``--exec-budget``): a run
stops before the first step at which every chain has used the budget; ``steps`` is the cap."""

from __future__ import annotations

import types

import fixtures_llm
import pytest

from rpg_llm.budget import budget_spent, row_exec_seconds
from rpg_llm.config import LoopConfig, apply_flags
from testkit.tiny_trainer import tiny_edit_config

tiny_model_dir = fixtures_llm.tiny_model_dir


def _s(step: int, row: int, t: float):
    return types.SimpleNamespace(step=step, row=row, exec_time=t)


def test_row_exec_seconds_and_budget_spent_by_hand():
    samples = [_s(0, 0, 50.0), _s(1, 0, 1.0), _s(1, 1, 3.0), _s(2, 0, 2.0), _s(2, 1, 0.5)]
    # the step-0 seed (50 s) is in no chain; rows sum their generated samples
    assert row_exec_seconds(samples) == {0: 3.0, 1: 3.5}
    assert row_exec_seconds(samples, max_step=1) == {0: 1.0, 1: 3.0}
    assert budget_spent(samples, 2, 3.0)  # 3.0 >= 3.0 and 3.5 >= 3.0
    assert not budget_spent(samples, 2, 3.2)  # row 0 has used 3.0 < 3.2
    assert not budget_spent(samples, 3, 1.0)  # row 2 has no sample: 0 s
    assert not budget_spent([], 1, 1e-9)
    with pytest.raises(ValueError, match="budget_s"):
        budget_spent(samples, 2, 0.0)
    with pytest.raises(ValueError, match="batch_size"):
        budget_spent(samples, 0, 1.0)


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
    from rpg_llm.actions import Action
    from rpg_llm.loop import Trainer

    trainer = Trainer(cfg, run_dir, resume=resume, progress=False)
    fake = iter([_outcome(0.5, t) for pair in DELTAS for t in pair])
    trainer.backends.run_batch = lambda codes, *a: [next(fake) for _ in codes]
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
        assert sorted((s.step, s.row) for s in again.buffer.all()) == [
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
