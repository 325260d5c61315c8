"""run_and_grade / run_batch / the execute CLI on a tiny competition built in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from rpg_llm.execute import Outcome, main, run_and_grade, run_batch
from rpg_llm.sandbox import LocalExecutor, make_sandbox
from rpg_llm.sandbox.bwrap_backend import bwrap_path

pytest.importorskip("rpg_llm.tasks", reason="rpg_llm.tasks (competitions) not available")
from rpg_llm.tasks import INVALID_REWARD, load_competition  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parent
ANSWERS = [0, 1, 1, 0, 1, 0, 0, 1]


def toy_accuracy(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Grader of the toy competition: fraction of ids whose label matches."""
    if list(submission.columns) != ["id", "label"] or len(submission) != len(answers):
        raise ValueError("submission must have columns id,label and one row per test id")
    merged = answers.merge(submission, on="id", suffixes=("_true", "_pred"))
    return float((merged["label_true"] == merged["label_pred"]).mean())


def toy_mae(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Grader of the lower-is-better toy: mean absolute error of ``label``."""
    merged = answers.merge(submission, on="id", suffixes=("_true", "_pred"))
    return float((merged["label_true"] - merged["label_pred"]).abs().mean())


def build_competition(root: Path, comp_id: str, grade_fn: str, lower: bool, board=None) -> None:
    comp = root / comp_id
    pub, priv = comp / "prepared" / "public", comp / "prepared" / "private"
    pub.mkdir(parents=True)
    priv.mkdir(parents=True)
    ids = list(range(len(ANSWERS)))
    pd.DataFrame({"id": ids, "x": [2 * a + 0.1 * i for i, a in enumerate(ANSWERS)]}).to_csv(
        pub / "test.csv", index=False
    )
    pd.DataFrame({"id": ids, "label": 0}).to_csv(pub / "sample_submission.csv", index=False)
    pd.DataFrame({"id": ids, "label": ANSWERS}).to_csv(priv / "answers.csv", index=False)
    (comp / "description.md").write_text("Predict label from x.\n")
    config = {
        "id": comp_id,
        "name": comp_id,
        "description": "description.md",
        "lower_is_better": lower,
        "grader": {"name": grade_fn.split(":")[1], "grade_fn": grade_fn},
        "dataset": {
            "answers": f"{comp_id}/prepared/private/answers.csv",
            "sample_submission": f"{comp_id}/prepared/public/sample_submission.csv",
        },
    }
    (comp / "config.yaml").write_text(json.dumps(config))  # JSON is valid YAML
    if board is not None:
        pd.DataFrame({"teamName": [f"t{i}" for i in range(len(board))], "score": board}).to_csv(
            comp / "leaderboard.csv", index=False
        )


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("competitions")
    build_competition(root, "toy", "test_execute:toy_accuracy", lower=False)
    build_competition(
        root, "toy-mae", "test_execute:toy_mae", lower=True, board=[0.0, 0.25, 0.5, 0.75]
    )
    return root


@pytest.fixture(scope="module")
def comp(data_root):
    return load_competition("toy", data_root)


@pytest.fixture(scope="module")
def sandbox():
    return make_sandbox("auto", nproc=32)


PERFECT = """
import os, pandas as pd
test = pd.read_csv(os.path.join("input", "test.csv"))
pd.DataFrame({"id": test["id"], "label": (test["x"] > 1).astype(int)}).to_csv(
    "submission.csv", index=False)
"""
HALF = """
import pandas as pd
test = pd.read_csv("input/test.csv")
pd.DataFrame({"id": test["id"], "label": [0, 1] * 4}).to_csv("submission.csv", index=False)
"""


def expected_accuracy(pred):
    return sum(int(p == a) for p, a in zip(pred, ANSWERS, strict=True)) / len(ANSWERS)


def test_perfect_and_partial_solutions_are_scored(comp, sandbox):
    out = run_and_grade(textwrap.dedent(PERFECT), comp, sandbox, 30)
    assert out.status == "ok" and out.valid
    assert out.score == 1.0 and out.raw_reward == 1.0
    assert out.outcome_text.startswith("score 1 (higher is better), ran ")
    half = run_and_grade(textwrap.dedent(HALF), comp, sandbox, 30)
    assert half.score == pytest.approx(expected_accuracy([0, 1] * 4))
    assert half.raw_reward == half.score
    assert 0 < half.delta < 30


def test_lower_is_better_reward_is_leaderboard_percentile(data_root, sandbox):
    comp = load_competition("toy-mae", data_root)
    # predicting 0 everywhere: MAE = mean(ANSWERS) = 0.5; beats 0.75, ties 0.5 -> (1 + 0.5) / 4
    code = "import pandas as pd\nt = pd.read_csv('input/test.csv')\n"
    code += "pd.DataFrame({'id': t['id'], 'label': 0}).to_csv('submission.csv', index=False)\n"
    out = run_and_grade(code, comp, sandbox, 30)
    assert out.status == "ok"
    assert out.score == pytest.approx(sum(ANSWERS) / len(ANSWERS))
    assert out.raw_reward == pytest.approx(1.5 / 4)
    assert "lower is better" in out.outcome_text and "38% of the leaderboard" in out.outcome_text


@pytest.mark.parametrize(
    ("code", "status", "text_start"),
    [
        ("print('no file')\n", "invalid", "invalid: the script finished without writing"),
        ("open('submission.csv', 'w').write('a,b\\n1,2\\n')\n", "invalid", "invalid submission:"),
        (
            "import pandas as pd\n\nx = pd.read_csv('input/nope.csv')\n",
            "error",
            "FileNotFoundError",
        ),
        ("import time\ntime.sleep(30)\n", "timeout", "timeout after 2 s"),
        ("x = bytearray(8 * 1024**3)\n", "oom", "MemoryError at line 1"),
    ],
)
def test_failures_are_classified_with_invalid_reward(comp, sandbox, code, status, text_start):
    out = run_and_grade(code, comp, sandbox, 2)
    assert out == Outcome(status, out.delta, None, INVALID_REWARD, False, out.outcome_text)
    assert out.outcome_text.startswith(text_start), out.outcome_text


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap not installed")
def test_private_answers_are_hidden(comp):
    code = textwrap.dedent(
        f"""
        import shutil
        shutil.copy({str(comp.private_dir / "answers.csv")!r}, "submission.csv")
        """
    )
    out = run_and_grade(code, comp, make_sandbox("bwrap"), 10)
    assert out.status == "error" and out.outcome_text.startswith("FileNotFoundError")
    # the same cheat works without hiding, so the test above can fail
    res = make_sandbox("subprocess").run(code, comp.public_dir, 10)
    try:
        assert res.status == "ok"
    finally:
        res.cleanup()


def test_run_batch_keeps_order_and_workdirs_are_removed(comp, sandbox, tmp_path):
    codes = [textwrap.dedent(PERFECT), "raise KeyError('k')\n", textwrap.dedent(HALF)]
    sb = make_sandbox("auto", nproc=32, workdir_root=tmp_path / "wd")
    with LocalExecutor(max_workers=2) as ex:
        outs = run_batch(codes, comp, sb, 20, executor=ex)
    assert [o.status for o in outs] == ["ok", "error", "ok"]
    assert [o.score for o in outs] == [1.0, None, expected_accuracy([0, 1] * 4)]
    assert outs[1].outcome_text == "KeyError at line 1: 'k'"
    assert list((tmp_path / "wd").glob("run-*")) == []
    with pytest.raises(ValueError, match="timeout_s"):
        run_batch(codes, comp, sandbox, 0)
    with pytest.raises(ValueError, match=r"codes\[1\]"):
        run_batch(["print(1)", 3], comp, sandbox, 1)


def _cli(args, data_root):
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR)}
    return subprocess.run(
        [sys.executable, "-m", "rpg_llm.execute", *args, "--data-root", str(data_root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_cli_prints_outcome_delta_score(data_root, tmp_path):
    script = tmp_path / "sol.py"
    script.write_text(textwrap.dedent(HALF))
    proc = _cli([str(script), "--task", "toy", "--timeout", "30"], data_root)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.strip().splitlines())
    assert lines["outcome"] == "ok"
    assert float(lines["score"]) == pytest.approx(expected_accuracy([0, 1] * 4))
    assert 0 < float(lines["delta"].removesuffix(" s")) < 30
    proc = _cli([str(script), "--task", "toy", "--json"], data_root)
    report = json.loads(proc.stdout)
    assert report["task"] == "toy" and report["status"] == "ok" and report["valid"] is True


def test_cli_usage_errors_exit_2(data_root, tmp_path, capsys):
    script = tmp_path / "sol.py"
    script.write_text("print(1)\n")
    assert main([str(tmp_path / "missing.py"), "--task", "toy"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main([str(script), "--task", "no-such-task", "--data-root", str(data_root)]) == 2
    assert "no-such-task" in capsys.readouterr().err
    assert main([str(script), "--task", "toy", "--timeout", "-1"]) == 2
    with pytest.raises(SystemExit) as exc:
        main([str(script)])
    assert exc.value.code == 2
