"""run_and_grade / run_batch / the execute CLI on a tiny competition built in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from rpg_llm.env.execute import INFRA_REWARD, Outcome, main, run_and_grade, run_batch
from rpg_llm.env.sandbox import BwrapSandbox, LocalExecutor, SandboxError, make_sandbox
from rpg_llm.env.sandbox.base import ExecResult
from rpg_llm.env.sandbox.bwrap_backend import bwrap_path, bwrap_works
from rpg_llm.env.tasks import INVALID_REWARD, load_competition
from testkit import REPO_ROOT
from testkit.sandboxes import make_test_sandbox
from testkit.toy_competition import (
    ACCURACY,
    ANSWERS,
    MAE,
    PERFECT,
    build_competition,
)

# Every timeout is either far beyond what the script needs (so a slow machine, e.g. pandas taking
# seconds to import under load, cannot turn "error" into "timeout") or, for the timeout case, far
# below what it needs (sleep 600 s): no status depends on a timeout racing an import.
LONG = 600.0


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("competitions")
    build_competition(root, "toy", ACCURACY, lower=False)
    build_competition(root, "toy-mae", MAE, lower=True, board=[0.0, 0.25, 0.5, 0.75])
    build_competition(root, "toy-board", ACCURACY, lower=False, board=[0.25, 0.5, 0.75, 1.0])
    return root


@pytest.fixture(scope="module")
def comp(data_root):
    return load_competition("toy", data_root)


@pytest.fixture(scope="module", params=["auto", "docker"])
def sandbox(request):
    return make_test_sandbox(request.param, nproc=32)


HALF = """
import pandas as pd
test = pd.read_csv("input/test.csv")
pd.DataFrame({"id": test["id"], "label": [0, 1] * 4}).to_csv("submission.csv", index=False)
"""


def expected_accuracy(pred):
    return sum(int(p == a) for p, a in zip(pred, ANSWERS, strict=True)) / len(ANSWERS)


def test_perfect_and_partial_solutions_are_scored(comp, sandbox):
    out = run_and_grade(textwrap.dedent(PERFECT), comp, sandbox, LONG)
    assert out.status == "ok" and out.valid
    assert out.score == 1.0 and out.raw_reward == 1.0
    assert out.outcome_text.startswith("score 1 (higher is better), ran ")
    half = run_and_grade(textwrap.dedent(HALF), comp, sandbox, LONG)
    assert half.score == pytest.approx(expected_accuracy([0, 1] * 4))
    assert half.raw_reward == half.score
    assert 0 < half.delta
    assert out.percentile is None and half.percentile is None  # "toy" has no leaderboard


def test_a_higher_is_better_score_carries_its_percentile_beside_the_score_reward(
    data_root, sandbox
):
    """The raw reward stays the score (DESIGN.md section 7); ``percentile`` is what
    ``--raw-reward percentile`` uses instead."""
    half = run_and_grade(
        textwrap.dedent(HALF), load_competition("toy-board", data_root), sandbox, LONG
    )
    acc = expected_accuracy([0, 1] * 4)
    assert half.raw_reward == pytest.approx(acc)
    beaten, tied = sum(b < acc for b in (0.25, 0.5, 0.75, 1.0)), (0.25, 0.5, 0.75, 1.0).count(acc)
    assert half.percentile == pytest.approx((beaten + 0.5 * tied) / 4)
    assert (acc, half.percentile) == (0.5, 0.375)  # beats 0.25, ties 0.5: (1 + 0.5) / 4


def test_lower_is_better_reward_is_leaderboard_percentile(data_root, sandbox):
    comp = load_competition("toy-mae", data_root)
    # predicting 0 everywhere: MAE = mean(ANSWERS) = 0.5; beats 0.75, ties 0.5 -> (1 + 0.5) / 4
    code = "import pandas as pd\nt = pd.read_csv('input/test.csv')\n"
    code += "pd.DataFrame({'id': t['id'], 'label': 0}).to_csv('submission.csv', index=False)\n"
    out = run_and_grade(code, comp, sandbox, LONG)
    assert out.status == "ok"
    assert out.score == pytest.approx(sum(ANSWERS) / len(ANSWERS))
    assert out.raw_reward == pytest.approx(1.5 / 4) and out.percentile == out.raw_reward
    assert "lower is better" in out.outcome_text and "38% of the leaderboard" in out.outcome_text


@pytest.mark.parametrize(
    ("code", "timeout_s", "status", "text_start"),
    [
        ("print('no file')\n", LONG, "invalid", "invalid: the script finished without writing"),
        (
            "open('submission.csv', 'w').write('a,b\\n1,2\\n')\n",
            LONG,
            "invalid",
            "invalid submission:",
        ),
        (
            "import pandas as pd\n\nx = pd.read_csv('input/nope.csv')\n",
            LONG,
            "error",
            "FileNotFoundError",
        ),
        ("import time\ntime.sleep(600)\n", 2.0, "timeout", "timeout after 2 s"),
        ("x = bytearray(8 * 1024**3)\n", LONG, "oom", "MemoryError at line 1"),
        # a script cannot pass its own failure off as an infrastructure one
        (
            "import sys\nprint('bwrap: Creating new namespace failed', file=sys.stderr)\n"
            "sys.exit(1)\n",
            LONG,
            "error",
            "exit code 1: bwrap: Creating new namespace failed",
        ),
    ],
)
def test_failures_are_classified_with_invalid_reward(
    comp, sandbox, code, timeout_s, status, text_start
):
    out = run_and_grade(code, comp, sandbox, timeout_s)
    assert out == Outcome(status, out.delta, None, INVALID_REWARD, False, out.outcome_text)
    assert out.outcome_text.startswith(text_start), out.outcome_text
    assert out.cpu_s is not None and out.cpu_s >= 0


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap not installed")
def test_private_answers_are_hidden(comp):
    code = textwrap.dedent(
        f"""
        import shutil
        shutil.copy({str(comp.private_dir / "answers.csv")!r}, "submission.csv")
        """
    )
    out = run_and_grade(code, comp, make_sandbox("bwrap"), LONG)
    assert out.status == "error" and out.outcome_text.startswith("FileNotFoundError")
    # the same cheat works without hiding, so the test above can fail
    res = make_sandbox("subprocess").run(code, comp.public_dir, LONG)
    try:
        assert res.status == "ok"
    finally:
        res.cleanup()


def test_run_batch_keeps_order_and_workdirs_are_removed(comp, sandbox, tmp_path):
    codes = [textwrap.dedent(PERFECT), "raise KeyError('k')\n", textwrap.dedent(HALF)]
    sb = make_test_sandbox(sandbox.name, nproc=32, workdir_root=tmp_path / "wd")
    with LocalExecutor(max_workers=2) as ex:
        outs = run_batch(codes, comp, sb, LONG, executor=ex)
    assert [o.status for o in outs] == ["ok", "error", "ok"]
    assert [o.score for o in outs] == [1.0, None, expected_accuracy([0, 1] * 4)]
    assert outs[1].outcome_text == "KeyError at line 1: 'k'"
    assert list((tmp_path / "wd").glob("run-*")) == []
    with pytest.raises(ValueError, match="timeout_s"):
        run_batch(codes, comp, sandbox, 0)
    with pytest.raises(ValueError, match=r"codes\[1\]"):
        run_batch(["print(1)", 3], comp, sandbox, 1)  # pyright: ignore[reportArgumentType]  # the bad input


def _cli(args, data_root):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # testkit.toy_competition
    return subprocess.run(
        [sys.executable, "-m", "rpg_llm.env.execute", *args, "--data-root", str(data_root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_cli_prints_outcome_delta_score(data_root, tmp_path):
    script = tmp_path / "sol.py"
    script.write_text(textwrap.dedent(HALF))
    proc = _cli([str(script), "--task", "toy", "--timeout", "600"], data_root)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.strip().splitlines())
    assert lines["outcome"] == "ok"
    assert float(lines["score"]) == pytest.approx(expected_accuracy([0, 1] * 4))
    assert 0 < float(lines["delta"].removesuffix(" s"))
    proc = _cli([str(script), "--task", "toy", "--json"], data_root)
    report = json.loads(proc.stdout)
    assert report["task"] == "toy" and report["status"] == "ok" and report["valid"] is True
    assert report["cpu_s"] > 0


def test_cli_infra_outcome_exits_1(data_root, tmp_path, capsys, monkeypatch):
    pytest.importorskip("docker")
    if os.geteuid() != 0:
        pytest.skip("the docker sandbox needs root; its first failure would be that")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # no engine answers
    script = tmp_path / "sol.py"
    script.write_text(textwrap.dedent(HALF))
    args = [str(script), "--task", "toy", "--sandbox", "docker", "--data-root", str(data_root)]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "outcome: infra" in out and "no docker engine answers" in out


def test_cli_usage_errors_exit_2(data_root, tmp_path, capsys):
    script = tmp_path / "sol.py"
    script.write_text("print(1)\n")
    assert main([str(tmp_path / "missing.py"), "--task", "toy"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main([str(script), "--task", "no-such-task", "--data-root", str(data_root)]) == 2
    assert "no-such-task" in capsys.readouterr().err
    assert main([str(script), "--task", "toy", "--timeout", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "--timeout" in err and "-1" in err
    assert main([str(script)]) == 2  # --task missing: one line, no SystemExit
    err = capsys.readouterr().err
    assert err.startswith("python -m rpg_llm.env.execute: error:") and "--task" in err
    assert main([str(script), "--task", "toy", "--sandbox", "lxc"]) == 2
    assert "--sandbox" in capsys.readouterr().err
    not_a_folder = tmp_path / "root.txt"
    not_a_folder.write_text("x")
    assert main([str(script), "--task", "toy", "--data-root", str(not_a_folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--data-root {not_a_folder}: exists and is not a folder"), err


# --- failure class "infra": the sandbox, the grader set-up or the machine failed ------------------


def _assert_infra(out: Outcome, text_part: str) -> None:
    assert out.status == "infra" and out.valid is False and out.score is None
    assert out.raw_reward == INFRA_REWARD != INVALID_REWARD
    text = out.outcome_text
    assert text.startswith("infra: ") and text_part in text, text


@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap not usable here")
def test_bwrap_failing_to_start_is_infra(comp, tmp_path):
    # a bubblewrap that fails the way it does where namespaces are forbidden: message, exit 1,
    # no child started (it never writes "child-pid" to --json-status-fd)
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    sb = BwrapSandbox(bwrap=str(fake))
    with pytest.raises(SandboxError, match="Creating new namespace failed"):
        sb.run("print(1)\n", comp.public_dir, LONG)
    _assert_infra(run_and_grade("print(1)\n", comp, sb, LONG), "Creating new namespace failed")
    # the real bubblewrap on the same script: ok, so the fake is what made it infra
    real = run_and_grade(textwrap.dedent(PERFECT), comp, make_sandbox("bwrap"), LONG)
    assert real.status == "ok"


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap not installed")
def test_oserror_launching_is_infra(comp, tmp_path):
    sb = BwrapSandbox(bwrap=str(tmp_path / "no-such-bwrap"))
    _assert_infra(run_and_grade("print(1)\n", comp, sb, LONG), "No such file or directory")


def test_grading_setup_error_is_infra(tmp_path, sandbox):
    build_competition(tmp_path, "toy-lost", ACCURACY, lower=False)
    comp = load_competition("toy-lost", tmp_path)
    answers = tmp_path / "toy-lost" / "prepared" / "private" / "answers.csv"
    answers.unlink()  # lost after loading: the competition cannot be graded
    out = run_and_grade(textwrap.dedent(PERFECT), comp, sandbox, LONG)
    _assert_infra(out, f"grader set-up failed: competition 'toy-lost': answers file {answers}")
    assert out.delta > 0 and out.cpu_s is not None  # the script did run


class CrashingSandbox:
    """Kills the executor worker that runs it for code "crash" (a machine-side failure)."""

    name: ClassVar[str] = "crashing"

    def run(
        self, code: str, input_dir: Path, timeout_s: float, *, hide: Sequence[Path] = ()
    ) -> ExecResult:
        if code == "crash":
            os._exit(3)
        return make_sandbox("subprocess").run(code, input_dir, timeout_s, hide=hide)


def test_executor_worker_crash_is_infra(comp):
    with LocalExecutor(max_workers=1) as ex:
        outs = run_batch(["crash", textwrap.dedent(PERFECT)], comp, CrashingSandbox(), LONG, ex)
        _assert_infra(outs[0], "BrokenProcessPool")
        # the broken pool cancelled the rest: also infra, never charged -10
        assert all(o.status in ("infra", "ok") for o in outs)
        # the executor recovers: a fresh pool serves the next batch
        again = run_batch([textwrap.dedent(PERFECT)], comp, CrashingSandbox(), LONG, ex)
        assert again[0].status == "ok" and again[0].score == 1.0


# --- cpu_s: CPU seconds of the script and its children ----------------------------------------

BURN = """
import time
t = time.process_time()
while time.process_time() - t < {s}:
    pass
"""
BURN_WITH_CHILD = """
import multiprocessing as mp, time

def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass

if __name__ == "__main__":
    p = mp.get_context("fork").Process(target=burn, args=(1.0,))
    p.start()
    burn(1.0)
    p.join()
"""
SLEEP = "import time\ntime.sleep(1.5)\n"


@pytest.mark.parametrize("kind", ["subprocess", "bwrap", "docker"])
def test_cpu_s_counts_script_and_children_under_the_thread_executor(comp, kind):
    sb = make_test_sandbox(kind, nproc=32)
    codes = [BURN.format(s=1.5), SLEEP, BURN_WITH_CHILD]
    # threads: several runs at once in one parent process, so each run's CPU must be its own
    with LocalExecutor(max_workers=3, kind="thread") as ex:
        burn, sleep, both = run_batch(codes, comp, sb, LONG, executor=ex)
    assert [o.status for o in (burn, sleep, both)] == ["invalid"] * 3  # no submission written
    # process_time() of the loop alone reaches 1.5 s (resp. 1.0 s in each of two processes),
    # whatever the machine's speed; the sleeper uses only interpreter start-up CPU
    assert burn.cpu_s is not None and both.cpu_s is not None and sleep.cpu_s is not None
    assert burn.cpu_s >= 1.5
    assert both.cpu_s >= 2.0
    assert sleep.cpu_s < 1.0 < 1.5 <= sleep.delta


def test_cli_folder_as_script_says_it_is_not_a_file(tmp_path, capsys):
    folder = tmp_path / "FOLDER"
    folder.mkdir()
    assert main([str(folder), "--task", "toy"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m rpg_llm.env.execute: error: ")
    assert f"script {str(folder)!r} is a folder, not a regular file" in err
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("kind", ["device", "kernel-file link", "fifo"])
def test_cli_script_that_is_no_regular_file_exits_2_at_once_naming_what_it_is(tmp_path, kind):
    """Found by passing /dev/zero (said "is a folder") and a script linked to /proc/kmsg (the
    command blocked on reading it): each is refused at once, by what it is."""
    if kind == "device":
        script, said = Path("/dev/zero"), "'/dev/zero' is a character device, not a regular file"
    elif kind == "kernel-file link":
        script = tmp_path / "solution.py"
        script.symlink_to("/proc/kmsg")
        said = f"{str(script)!r} is the kernel file /proc/kmsg, not a regular file"
    else:
        script = tmp_path / "solution.py"
        os.mkfifo(script)  # nobody writes it: reading it would wait for ever
        said = f"{str(script)!r} is a FIFO (named pipe), not a regular file"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "rpg_llm.env.execute", str(script), "--task", "toy"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    err = proc.stderr.strip()
    assert err == f"python -m rpg_llm.env.execute: error: script {said}"
