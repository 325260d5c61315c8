"""Log parsing of the NanoGPT task on the format drift of public speedrun logs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rpg_llm.env.tasks.nanogpt.env import grade_log, script_error
from rpg_llm.env.tasks.nanogpt.logparse import check_cadence, parse_val_lines
from rpg_llm.env.tasks.nanogpt.settings import NanoGPTSettings

FMT = (
    'f"step:{step}/{train_steps} val_loss:{val_loss:.4f} '
    'train_time:{training_time_ms:.0f}ms step_avg:{training_time_ms/max(step, 1):.2f}ms"'
)
SOURCE = (
    "import torch\n"
    "def log(step, train_steps, val_loss, training_time_ms):\n"
    f"    print0({FMT}, console=True)\n"
    "# example: step:0/10 val_loss:0.1000 train_time:0ms step_avg:0.00ms\n"
)


def test_standard_line():
    (ln,) = parse_val_lines("step:125/1750 val_loss:4.2031 train_time:30125ms step_avg:241.00ms")
    assert (ln.step, ln.total, ln.val_loss) == (125, 1750, 4.2031)
    assert ln.train_time_s == pytest.approx(30.125)
    assert ln.step_avg_s == pytest.approx(0.241)
    assert ln.extra == {}


def test_train_time_in_seconds():
    (ln,) = parse_val_lines("step:1750/1750 val_loss:3.2781 train_time:492.485s step_avg:281.42ms")
    assert ln.train_time_s == pytest.approx(492.485)
    assert ln.step_avg_s == pytest.approx(0.28142)


def test_nan_step_avg_at_step_zero():
    (ln,) = parse_val_lines("step:0/1750 val_loss:10.8258 train_time:0ms step_avg:nanms")
    assert ln.step == 0 and ln.val_loss == 10.8258 and ln.train_time_s == 0.0
    assert ln.step_avg_s is not None and math.isnan(ln.step_avg_s)


def test_extra_trailing_fields():
    (ln,) = parse_val_lines(
        "step:250/1750 val_loss:3.9000 train_time:60000ms step_avg:240.00ms ema_beta:0.9950"
    )
    assert ln.val_loss == 3.9 and ln.extra == {"ema_beta": "0.9950"}


def test_training_lines_are_not_val_lines():
    log = (
        "step:1/1750 train_time:241ms step_avg:241.00ms\nstep:2/1750 train_loss:5.1 train_time:1ms"
    )
    assert parse_val_lines(log) == []


def test_log_starting_with_its_own_source():
    body = (
        "step:0/10 val_loss:10.8000 train_time:0ms step_avg:nanms\n"
        "step:5/10 val_loss:6.0000 train_time:500ms step_avg:100.00ms\n"
        "step:10/10 val_loss:4.5000 train_time:1000ms step_avg:100.00ms\n"
    )
    log = SOURCE + "=" * 100 + "\n" + body
    got = [ln.val_loss for ln in parse_val_lines(log, SOURCE)]
    assert got == [10.8, 6.0, 4.5]
    # without the source the format string (placeholders) and the indented comment still fail
    assert [ln.val_loss for ln in parse_val_lines(log)] == [10.8, 6.0, 4.5]


def test_source_with_a_column_zero_example_is_skipped_when_the_source_is_known():
    source = 'DOC = """\nstep:10/10 val_loss:0.0100 train_time:1ms step_avg:0.10ms\n"""\n'
    log = source + "step:0/10 val_loss:9.0000 train_time:0ms step_avg:nanms\n"
    assert [ln.val_loss for ln in parse_val_lines(log, source)] == [9.0]
    assert len(parse_val_lines(log)) == 2  # the danger that stripping removes


@given(st.integers(1, 400), st.integers(1, 5000))
def test_cadence_accepts_exactly_the_reference_schedule(val_every, total):
    steps = [*range(0, total, val_every), total]
    lines = parse_val_lines(
        "\n".join(f"step:{s}/{total} val_loss:5.0 train_time:{s}ms step_avg:1.00ms" for s in steps)
    )
    assert check_cadence(lines, val_every, require_final=True).ok
    if len(steps) > 2:  # dropping a middle line breaks it
        assert not check_cadence(lines[:1] + lines[2:], val_every, require_final=True).ok
    assert not check_cadence(lines[:-1], val_every, require_final=True).ok
    assert check_cadence(lines[:-1], val_every, require_final=False).ok or len(steps) == 1


def test_cadence_reasons():
    def lines(*steps, total=250):
        return parse_val_lines(
            "\n".join(f"step:{s}/{total} val_loss:5.0 train_time:1ms step_avg:1ms" for s in steps)
        )

    assert check_cadence(lines(0, 125, 250), 125, require_final=True) == (True, "", True)
    bad = check_cadence(lines(0, 100, 250), 125, require_final=True)
    assert not bad.ok and "step 100 where step 125" in bad.reason
    assert "no final" in check_cadence(lines(0, 125), 125, require_final=True).reason
    assert "no validation line" in check_cadence([], 125, require_final=True).reason
    with pytest.raises(ValueError, match="val_every"):
        check_cadence(lines(0), 0, require_final=True)


SET = NanoGPTSettings("t", 1, 60.0, 3.28, 125, official=False)


def _log(steps, total, tt=True):
    t = " train_time:10ms step_avg:1.00ms" if tt else ""
    return "\n".join(f"step:{s}/{total} val_loss:{5 - s / 1000:.4f}{t}" for s in steps)


def test_validity_rules_of_the_reference():
    ok = grade_log(_log([0, 125, 250], 250), "", "ok", SET, have_checkpoint=False)
    assert ok.valid and ok.loss == pytest.approx(4.75)
    # a timeout with timing, a val loss and the cadence kept is valid; its best loss counts
    to = grade_log(_log([0, 125], 250), "", "timeout", SET, have_checkpoint=False)
    assert to.valid and to.loss == pytest.approx(4.875)
    assert not grade_log(
        _log([0, 125], 250, tt=False), "", "timeout", SET, have_checkpoint=False
    ).valid
    assert not grade_log(_log([0, 125], 250), "", "ok", SET, have_checkpoint=False).valid
    assert not grade_log(_log([0, 125, 250], 250), "", "error", SET, have_checkpoint=False).valid
    assert not grade_log("no lines", "", "ok", SET, have_checkpoint=False).valid


def test_script_error_picks_the_workers_traceback_not_torchruns():
    stderr = (
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/w/train_gpt.py", line 12, in <module>\n'
        "[rank0]:     x = 1 / 0\n"
        "[rank0]: ZeroDivisionError: division by zero\n"
        "E1201 12:00:00 torch/distributed/elastic/multiprocessing/api.py failed\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/torch/distributed/run.py", line 9, in main\n'
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    )
    assert script_error(stderr) == "ZeroDivisionError at line 12: division by zero"
