"""Reward hacks through the files a script leaves: every task kind, the default sandbox.

A script that cannot read the answers can still point its output at them: ``submission.csv`` as a
link to the private answers is graded against itself (a perfect score) by a host that follows it;
a link to an endless or blocking file (``/proc/kmsg``, a FIFO) hangs the host's grader; a huge
submission costs the host unbounded time and memory.  Each case must end as an invalid sample
with the reason, for offline competitions, MLE-Bench trees and the NanoGPT task alike, under the
default sandbox and docker.
"""

from __future__ import annotations

import time

import pytest

from rpg_llm.env.execute import run_and_grade
from rpg_llm.env.tasks import INVALID_REWARD, load_competition
from rpg_llm.env.tasks.grading import GradingLimits, grade_submission
from testkit.mlebench_tree import PERFECT_SOLUTION, build_mlebench_tree
from testkit.sandboxes import make_test_sandbox
from testkit.toy_competition import ACCURACY, PERFECT, build_competition

pytestmark = pytest.mark.timeout(600)  # a grader that blocked on a link would hang here
LONG = 600.0  # far above what any script here needs: no status races an import


def sleepy_accuracy(submission, answers) -> float:
    """A grader that never answers in time."""
    time.sleep(600)
    return 1.0


def greedy_accuracy(submission, answers) -> float:
    """A grader that needs far more memory than the limit."""
    return float(len(bytearray(3 << 30)))


@pytest.fixture(scope="module", params=["auto", "docker"])
def sandbox(request):
    return make_test_sandbox(request.param, nproc=64)


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline")
    build_competition(root, "toy", ACCURACY, lower=False)
    build_competition(root, "toy-sleepy", "test_reward_hacks:sleepy_accuracy", lower=False)
    build_competition(root, "toy-greedy", "test_reward_hacks:greedy_accuracy", lower=False)
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    t = build_mlebench_tree(tmp_path_factory.mktemp("tree"))
    return t, load_competition(t.comp_id, t.data_root, mlebench_dir=t.tree)


def _link_to(target: str) -> str:
    return f"import os\nos.symlink({target!r}, 'submission.csv')\n"


def _assert_refused(out, *parts: str) -> None:
    assert out.status == "invalid" and not out.valid and out.score is None, out.outcome_text
    assert out.raw_reward == INVALID_REWARD
    for part in parts:
        assert part in out.outcome_text, out.outcome_text


def _attacks(answers_path: str) -> list[tuple[str, str, str]]:
    """(name, script, expected text) of the file attacks that every task kind must refuse."""
    return [
        ("link to answers", _link_to(answers_path), "submission.csv is a symbolic link"),
        ("link to /proc/kmsg", _link_to("/proc/kmsg"), "submission.csv is a symbolic link"),
        ("link to /dev/zero", _link_to("/dev/zero"), "submission.csv is a symbolic link"),
        ("fifo", "import os\nos.mkfifo('submission.csv')\n", "submission.csv is a FIFO"),
        ("folder", "import os\nos.mkdir('submission.csv')\n", "submission.csv is a folder"),
    ]


def test_offline_competition_refuses_every_file_attack(offline, sandbox):
    comp = load_competition("toy", offline)
    honest = run_and_grade(PERFECT, comp, sandbox, LONG)
    assert honest.status == "ok" and honest.score == 1.0  # the answers are worth 1.0
    for name, code, text in _attacks(str(comp.answers)):
        out = run_and_grade(code, comp, sandbox, LONG)
        _assert_refused(out, text)
        assert name and out.delta > 0


def test_mlebench_tree_refuses_every_file_attack(tree, sandbox):
    t, comp = tree
    honest = run_and_grade(PERFECT_SOLUTION, comp, sandbox, LONG)
    assert honest.status == "ok" and honest.score == 0.0  # the answers are worth MAE 0
    for _name, code, text in _attacks(str(comp.answers)):
        _assert_refused(run_and_grade(code, comp, sandbox, LONG), text)


@pytest.mark.parametrize("kind", ["offline", "tree"])
def test_an_oversized_submission_is_refused_before_parsing(kind, offline, tree, sandbox):
    comp, code = (
        (load_competition("toy", offline), PERFECT)
        if kind == "offline"
        else (tree[1], PERFECT_SOLUTION)
    )
    padded = code + "\nopen('submission.csv', 'a').write('\\n' * 5000)\n"
    limits = GradingLimits(submission_bytes=4000)
    out = run_and_grade(padded, comp, sandbox, LONG, grading=limits)
    _assert_refused(out, "more than the limit of 4000")
    assert run_and_grade(code, comp, sandbox, LONG, grading=limits).status == "ok"


def test_grading_past_its_time_limit_is_invalid_not_a_hang(offline, sandbox):
    comp = load_competition("toy-sleepy", offline)
    t0 = time.monotonic()
    out = run_and_grade(PERFECT, comp, sandbox, LONG, grading=GradingLimits(time_s=2.0))
    _assert_refused(out, "grading the submission took longer than 2 s")
    assert time.monotonic() - t0 < 300  # not the grader's 600 s


def test_grading_past_its_memory_limit_is_invalid(offline, tmp_path):
    comp = load_competition("toy-greedy", offline)
    (tmp_path / "submission.csv").write_text("id,label\n0,1\n")
    report = grade_submission(
        comp, tmp_path / "submission.csv", GradingLimits(memory_bytes=512 << 20)
    )
    assert not report.valid and report.reason.startswith("grading the submission needed more")


def test_the_grade_reason_shows_plain_ids(tree):
    import pandas as pd

    from rpg_llm.env.tasks.metrics import InvalidSubmissionError, align

    t, _comp = tree
    sub = t.answers.copy()
    sub.loc[1, "id"] = sub.loc[0, "id"]  # a duplicate id (int64 in pandas)
    with pytest.raises(InvalidSubmissionError) as err:
        align(sub, t.answers)
    assert str(err.value) == f"duplicate id {int(sub.loc[0, 'id'])} in column 'id'"
    assert isinstance(pd.Series(sub["id"]).iloc[0].item(), int)


# --- NanoGPT: the checkpoint and the guarded copy are untrusted too --------------------------


@pytest.fixture(scope="module")
def nanogpt_task(tmp_path_factory):
    from rpg_llm.env.tasks.nanogpt import load_task
    from testkit.nanogpt_scripts import small_settings

    settings = small_settings()
    return load_task("nanogpt-cpu", tmp_path_factory.mktemp("ngdata"), settings)


def _swap_checkpoint(target: str) -> str:
    from testkit import nanogpt_scripts as scripts

    return scripts.honest() + (
        f"import os\nos.remove('final_model.pt2')\nos.symlink({target!r}, 'final_model.pt2')\n"
    )


@pytest.mark.slow
def test_nanogpt_refuses_a_linked_or_oversized_checkpoint(nanogpt_task, monkeypatch):
    from rpg_llm.env.tasks.nanogpt import env, run_batch
    from testkit import nanogpt_scripts as scripts

    heldout = str(nanogpt_task.private_dir / "heldout.bin")
    codes = [_swap_checkpoint(heldout), _swap_checkpoint("/proc/kmsg")]
    for out in run_batch(codes, nanogpt_task, "auto"):
        assert out.status == "invalid", out.outcome_text
        assert "checkpoint refused: final_model.pt2 is a symbolic link" in out.outcome_text
    monkeypatch.setattr(env, "MAX_CHECKPOINT_BYTES", 100)  # the honest checkpoint is larger
    out = env.run_attempt(scripts.honest(), nanogpt_task, "auto")
    assert out.status == "invalid" and "more than the limit of 100" in out.outcome_text


@pytest.mark.slow
def test_nanogpt_guarded_copy_link_is_refused_not_followed(tmp_path):
    """Subprocess backend as root without a private uid: the script can rewrite its copy of the
    guarded folder; a link there to an endless file must not hang the host's hash check."""
    import os

    from rpg_llm.env.tasks.nanogpt import load_task, run_attempt
    from testkit import nanogpt_scripts as scripts

    if os.geteuid() != 0:
        pytest.skip("needs root: a normal user cannot write the read-only copy")
    settings = scripts.small_settings(drop_privileges=False)
    task = load_task("nanogpt-cpu", tmp_path, settings)
    swap = (
        "import os\nos.chmod('input', 0o755)\nos.remove('input/ngpt_eval.py')\n"
        "os.symlink('/proc/kmsg', 'input/ngpt_eval.py')\n"
    )
    out = run_attempt(scripts.honest() + swap, task, "subprocess")
    assert out.status == "invalid", out.outcome_text
    assert "guarded files were changed: ngpt_eval.py" in out.outcome_text
