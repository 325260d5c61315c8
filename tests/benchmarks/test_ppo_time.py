"""benchmarks/ppo_time.py: PPO seconds per step against the batch's length, by hand."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from testkit import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import ppo_time  # noqa: E402


def _steps(lengths, seconds, unit="chars"):
    n = len(lengths)
    return ppo_time.RunSteps(
        np.arange(1.0, n + 1), np.asarray(lengths, float), np.asarray(seconds, float), unit
    )


def test_steps_on_two_parallel_lines_give_their_offset_and_slope():
    a = _steps([100, 200, 300], [10 + 0.2 * x for x in (100, 200, 300)])
    b = _steps([150, 250], [8 + 0.2 * x for x in (150, 250)])
    f = ppo_time.fit({"a": [a], "b": [b]})
    assert f.slope == pytest.approx(0.2) and f.ref_length == 200.0
    assert f.at_ref["a"][0] == pytest.approx(50.0) and f.at_ref["b"][0] == pytest.approx(48.0)
    assert f.resid_sd == pytest.approx(0.0, abs=1e-9) and f.n == 5


def test_near_constant_lengths_compare_means_with_the_pooled_error():
    a = _steps([1000, 1001, 1002, 1000], [60.0, 64.0, 62.0, 66.0])  # mean 63
    b = _steps([1001, 1000], [59.0, 61.0])  # mean 60
    f = ppo_time.fit({"a": [a], "b": [b]})
    assert f.slope == 0.0
    resid = np.array([-3.0, 1.0, -1.0, 3.0, -1.0, 1.0])
    sd = math.sqrt(resid @ resid / (6 - 2))
    assert f.resid_sd == pytest.approx(sd)
    assert f.at_ref["a"] == pytest.approx((63.0, sd / 2.0))
    assert f.at_ref["b"] == pytest.approx((60.0, sd / math.sqrt(2.0)))


def test_a_fit_refuses_mixed_units_and_too_few_steps():
    with pytest.raises(ValueError, match="different units"):
        ppo_time.fit({"a": [_steps([1, 2], [1, 2])], "b": [_steps([1, 2], [1, 2], "tokens")]})
    with pytest.raises(ValueError, match="2 steps for 2 parameters"):
        ppo_time.fit({"a": [_steps([1], [1])], "b": [_steps([1], [1])]})


def _run(folder, metrics, parents=None):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    if parents is not None:  # (id, step, parent id, code, outcome), ids 1, 2, ... in order
        from rpg_llm.loop.buffer import Sample, SampleBuffer

        samples = [
            Sample("r", step, i, "t", parent, "h", code, text, None, 0.0, 1.0, "ok", 0.0)
            for i, (_, step, parent, code, text) in enumerate(parents)
        ]
        with SampleBuffer(folder / "buffer.sqlite") as buf:
            assert buf.add_many(samples) == [p[0] for p in parents]
    return folder


def test_a_run_is_read_by_its_parents_or_its_recorded_lengths(tmp_path):
    metrics = [
        {"step": 0, "ppo_seconds": None},  # seeding: no update
        {"step": 1, "ppo_seconds": 50.0},
        {"step": 2, "ppo_seconds": 70.0},
        {"step": 3, "ppo_seconds": 99.0, "replayed": True},  # after a resume: left out
    ]
    buffer = [
        (1, 0, None, "x" * 100, "ok"),  # a seed, 102 characters
        (2, 0, None, "y" * 300, "fine"),  # a seed, 304 characters
        (3, 1, 1, "z", ""),
        (4, 1, 2, "z", ""),  # step 1's longest parent: 304
        (5, 2, 1, "z", ""),  # step 2's: 102
        (6, 3, 2, "z", ""),
    ]
    run = ppo_time.read_run(_run(tmp_path / "r", metrics, buffer))
    assert run.unit == "chars" and run.steps.tolist() == [1.0, 2.0]
    assert run.length.tolist() == [304.0, 102.0] and run.seconds.tolist() == [50.0, 70.0]
    with pytest.raises(ValueError, match="no ppo/seq_len"):
        ppo_time.read_run(tmp_path / "r", "tokens")
    recorded = [m | {"ppo/seq_len": 500.0 + m["step"]} for m in metrics[1:]]
    tokens = ppo_time.read_run(_run(tmp_path / "t", recorded))  # no buffer needed
    assert tokens.unit == "tokens" and tokens.length.tolist() == [501.0, 502.0]


def test_the_cli_prints_each_label_and_refuses_bad_arguments(tmp_path, capsys):
    a = _run(
        tmp_path / "a",
        [{"step": s, "ppo_seconds": 10.0 + s, "ppo/seq_len": 500.0} for s in (1, 2, 3)],
    )
    b = _run(
        tmp_path / "b",
        [{"step": s, "ppo_seconds": 8.0 + s, "ppo/seq_len": 500.0} for s in (1, 2, 3)],
    )
    assert ppo_time.main([f"plain={a}", f"fast={b}"]) == 0
    out = capsys.readouterr().out
    assert "| plain | 1 | 3 | 500-500 | 11.0-13.0 | 12.0 | 12.0 ± 0.6 | 1.000x |" in out
    assert "| fast | 1 | 3 | 500-500 | 9.0-11.0 | 10.0 | 10.0 ± 0.6 | 0.833x |" in out
    for argv, needle in (
        (["nolabel"], "'nolabel' is not LABEL=RUN_DIR"),
        ([f"x={tmp_path / 'none'}"], "not a run folder"),
    ):
        assert ppo_time.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err
