"""The NanoGPT environment end to end: real torchrun attempts, one per integrity attack.

Every attempt here is a real ``torchrun --nproc_per_node=1`` run (gloo) of a tiny script from
``testkit.nanogpt_scripts`` in the project's sandbox, with small test settings (val every step,
a (4, 16) evaluation batch) so that one attempt costs a few seconds of compute.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rpg_llm.env.sandbox import bwrap_works
from rpg_llm.env.tasks.nanogpt import load_task, run_attempt, run_batch
from rpg_llm.env.tasks.nanogpt.env import launcher_code
from rpg_llm.env.tasks.nanogpt.rewards import RPG_INVALID_REWARD, VANILLA_INVALID_REWARD
from rpg_llm.env.tasks.nanogpt.settings import cpu_settings
from testkit import nanogpt_scripts as scripts

pytestmark = pytest.mark.slow  # each attempt starts torchrun and a sandboxed evaluation

KIND = "bwrap" if bwrap_works() else "subprocess"
TEST_SETTINGS = scripts.small_settings()


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return load_task("nanogpt-cpu", tmp_path_factory.mktemp("ngdata"), TEST_SETTINGS)


def _heldout_loss(task) -> float:
    """Cross-entropy of the untrained tiny model on the held-out windows, computed here."""
    s = task.settings
    data = np.fromfile(task.private_dir / "heldout.bin", dtype=np.uint8).astype(np.int64)
    data = torch.from_numpy(data)
    per = s.eval_batch * s.seq_len
    model = scripts.tiny_model()
    losses = []
    with torch.no_grad():
        for b in range(s.heldout_tokens // per):
            win = data[b * per : (b + 1) * per + 1]
            x, y = win[:-1].view(s.eval_batch, s.seq_len), win[1:].view(s.eval_batch, s.seq_len)
            losses.append(F.cross_entropy(model(x).view(-1, 256), y.reshape(-1), reduction="sum"))
    return float(sum(losses)) / (s.heldout_tokens // per * per)


def test_honest_attempt_gets_the_official_heldout_loss(task):
    o = run_attempt(scripts.honest(), task, KIND)
    assert o.status == "ok", o.outcome_text
    want = _heldout_loss(task)
    assert o.score == pytest.approx(want, abs=1e-5)
    assert 5.0 < want < 6.5  # an untrained model: about ln 256 = 5.55 nats per byte
    assert o.raw_reward == pytest.approx(10.0 - want)  # missed the 5.0 target: no bonus
    assert o.rate_reward == pytest.approx(10.0 - want)
    assert o.vanilla_reward == pytest.approx(-1500 - 20000 * min(want - 5.0, 0.03))
    assert o.delta > 0 and o.charged_s == o.delta
    assert f"val loss {want:.4f}" in o.outcome_text


def test_fabricated_final_line_earns_no_reward(task):
    o = run_attempt(scripts.fabricated_line(), task, KIND)
    assert o.status == "invalid" and not o.valid
    assert "reported final val loss 1.0000 is below the official" in o.outcome_text
    assert o.raw_reward == RPG_INVALID_REWARD and o.rate_reward == 0.0
    assert o.vanilla_reward == VANILLA_INVALID_REWARD
    assert o.charged_s == task.settings.timeout_s


def test_changed_validation_budget_earns_no_reward(task):
    o = run_attempt(scripts.shrinks_val_budget(), task, KIND)
    assert o.status == "invalid"
    assert "val_tokens:64 instead of 128" in o.outcome_text
    assert o.raw_reward == RPG_INVALID_REWARD


def test_non_causal_checkpoint_earns_no_reward(task):
    o = run_attempt(scripts.non_causal(), task, KIND)
    assert o.status == "invalid" and "not causal" in o.outcome_text, o.outcome_text


def test_edited_guard_file_earns_no_reward(tmp_path):
    # As root without a private uid, the subprocess backend lets the script write its copy of the
    # guarded folder: the hash check after the run must catch it.
    if not _root():
        pytest.skip("needs root: a normal user cannot write the read-only copy either")
    settings = replace(TEST_SETTINGS, drop_privileges=False)
    t = load_task("nanogpt-cpu", tmp_path, settings)
    o = run_attempt(scripts.edits_guard(), t, "subprocess")
    assert o.status == "invalid" and "guarded files were changed: ngpt_eval.py" in o.outcome_text
    assert o.raw_reward == RPG_INVALID_REWARD


@pytest.mark.skipif(KIND != "bwrap", reason="only bubblewrap mounts the guard read-only")
def test_guard_is_read_only_and_heldout_hidden_under_bwrap(task):
    outs = run_batch(
        [scripts.edits_guard(), scripts.reads_heldout(str(task.private_dir / "heldout.bin"))],
        task,
        KIND,
    )
    # the write fails, nothing changed: an honest run; the held-out file does not exist inside
    assert [o.status for o in outs] == ["ok", "ok"], [o.outcome_text for o in outs]
    assert outs[0].score == pytest.approx(outs[1].score)


def test_crash_reports_the_scripts_exception(task):
    o = run_attempt(scripts.crashes(), task, KIND)
    assert o.status == "error"
    assert o.outcome_text.startswith("ZeroDivisionError at line"), o.outcome_text
    assert o.raw_reward == RPG_INVALID_REWARD


def test_timeout_is_charged_the_full_timeout(task):
    code = scripts.script(post="import time\ntime.sleep(600)\n")
    o = run_attempt(code, task, KIND, timeout_s=25.0)
    # val lines were printed with timing and the cadence kept, but no checkpoint was saved
    # before the kill: without it the official loss cannot be recomputed
    assert o.status == "timeout" and o.timed_out and o.delta == 25.0
    assert "saved no checkpoint" in o.outcome_text
    assert o.charged_s == task.settings.timeout_s


def test_bad_arguments_fail_before_launching(task):
    with pytest.raises(ValueError, match="timeout_s"):
        run_attempt("pass", task, KIND, timeout_s=-1)
    with pytest.raises(ValueError, match=r"codes\[1\]"):
        run_batch(["pass", 3], task, KIND)  # pyright: ignore[reportArgumentType]  # the bad input


def test_launcher_embeds_any_source_verbatim(task):
    import ast

    code = 'print("""quote\'s\\n""")\n# \u00fcn\u00efcode\n'
    tree = ast.parse(launcher_code(code, task.settings))
    writes = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "write"
    ]
    assert all(isinstance(n.args[0], ast.Constant) for n in writes)  # the source as a literal
    assert [n.args[0].value for n in writes if isinstance(n.args[0], ast.Constant)] == [code]
    assert "--nproc_per_node=1" in launcher_code(code, task.settings)


def _root() -> bool:
    import os

    return os.geteuid() == 0


BASELINE_TEST_STEPS = 50  # one val cadence: val lines at steps 0 and 50 (~7 s of training)


def test_baseline_attempt_of_the_stand_in(tmp_path):
    """One real attempt of the CPU stand-in's baseline under the task's calibrated settings
    (sequence, batch, val and held-out budgets, timeout), shortened from 250 to 50 steps by the
    edit format (``NUM_STEPS = 50``): the full run costs 40-110 s here and is the seed of
    ``test_one_step_nanogpt_cpu_preset_run``."""
    from rpg_llm.env.actions import apply_edit, editable_constants
    from rpg_llm.env.tasks.nanogpt.task import baseline_solutions

    t = load_task("nanogpt-cpu", tmp_path)
    assert t.settings == cpu_settings()  # the stand-in's own settings, not TEST_SETTINGS
    ((name, code),) = baseline_solutions("nanogpt-cpu")
    assert editable_constants(code)["NUM_STEPS"].value == 250, "the baseline's schedule changed"
    short = apply_edit(code, {"NUM_STEPS": BASELINE_TEST_STEPS})
    o = run_attempt(short, t, KIND)
    assert o.status == "ok", o.outcome_text
    assert f"{BASELINE_TEST_STEPS}/{BASELINE_TEST_STEPS} steps" in o.outcome_text
    # an untrained byte model is at ~5.5 nats; 50 steps of the baseline reach ~2.9 (measured)
    assert o.score is not None and o.reported_loss is not None
    assert o.score < 3.5 and math.isfinite(o.score)
    assert abs(o.reported_loss - o.score) < t.settings.report_tolerance
