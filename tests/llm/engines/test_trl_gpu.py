"""The TRL engine on a GPU: one step of the Qwen3.5-4B MLE-Bench preset with vLLM colocated
(``benchmarks/trl_gpu_step.sh``). Skipped without CUDA, vLLM, the weights or the data."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess

import pytest

from testkit import REPO_ROOT


@pytest.mark.gpu
@pytest.mark.slow
def test_qwen_mlebench_preset_one_step_with_vllm(tmp_path):
    if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("trl") is None:
        pytest.skip("needs vllm and trl")
    if not os.environ.get("RPG_MLEBENCH_DATA"):
        pytest.skip("needs the MLE-Bench data folder in RPG_MLEBENCH_DATA")
    from rpg_llm.learner.policy import resolve_model

    try:
        resolve_model("Qwen/Qwen3.5-4B", allow_download=True)
    except ValueError:
        pytest.skip("needs the Qwen/Qwen3.5-4B weights")
    run = tmp_path / "run"
    env = {**os.environ, "OUT": str(run), "B": "8", "G": "4"}
    script = REPO_ROOT / "benchmarks" / "trl_gpu_step.sh"
    out = subprocess.run(
        ["bash", str(script), "--max-new-tokens", "512"],
        env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    con = sqlite3.connect(str(run / "buffer.sqlite"))
    try:
        rows = con.execute("SELECT step, row FROM samples WHERE step = 1 ORDER BY row").fetchall()
    finally:
        con.close()
    assert rows == [(1, r) for r in range(8)]
    assert "step 1/1" in out.stdout
