"""benchmarks/equal_work.py: the machine-speed ratio from shared step-0 scripts, by hand."""

from __future__ import annotations

import math
import sys

import pytest

from testkit import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import equal_work  # noqa: E402


def test_speed_ratio_is_the_geometric_mean_over_identical_scripts():
    run = {0: ("a", 2.0), 1: ("b", 1.0), 2: ("c-edited", 9.0), 3: ("d", 1.0)}
    ref = {0: ("a", 4.0), 1: ("b", 4.0), 2: ("c", 1.0), 4: ("e", 1.0)}
    # rows 0 and 1 are shared with the same code: sqrt(0.5 * 0.25)
    assert equal_work.speed_ratio(run, ref) == pytest.approx(math.sqrt(0.5 * 0.25))
    assert math.isnan(equal_work.speed_ratio(run, {2: ("c", 1.0)}))


def test_seed_seconds_reads_ok_step0_scripts_of_a_real_buffer(tmp_path):
    from rpg_llm.loop.buffer import Sample, SampleBuffer

    def s(step, row, code, t, status="ok"):
        return Sample("r", step, row, "churn-auc", None, "h", code, "", 0.5, 0.5, t, status, 0.0)

    with SampleBuffer(tmp_path / "buffer.sqlite") as buf:
        buf.add_many([s(0, 0, "x", 1.5), s(0, 1, "y", 2.5, "error"), s(1, 0, "z", 3.0)])
    assert equal_work.seed_seconds(tmp_path) == {0: ("x", 1.5)}


def test_usage_errors_exit_2(tmp_path, capsys):
    assert equal_work.main(["--budget", "30", str(tmp_path)]) == 2
    assert "not a run folder named <arm>-seed<k>" in capsys.readouterr().err
    run = tmp_path / "t" / "fixed-lambda-seed0"
    run.mkdir(parents=True)
    assert equal_work.main(["--budget", "30", str(run)]) == 2
    assert "no reference run" in capsys.readouterr().err
    assert equal_work.main(["--budget", "0", str(run)]) == 2
