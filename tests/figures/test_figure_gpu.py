"""The bandit figure on a GPU: the same curves as on the CPU for the same trials, and
``benchmarks/figure_gpu.sh`` end to end. Skipped without a CUDA device visible to JAX."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from testkit import REPO_ROOT

ARGV = ["--envs", "E1", "--arms", "5", "--steps", "300", "--seeds", "4", "--no-progress"]


def _jax_gpu() -> bool:
    probe = "import jax; jax.devices('gpu')"
    env = os.environ | {"JAX_PLATFORMS": "cuda"}
    return (
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0
    )


def _figure(platform: str, out) -> dict:
    env = os.environ | {"JAX_PLATFORMS": platform, "RPG_JAX_CACHE": str(out) + "-cache"}
    args = [sys.executable, "-m", "paper_figures.regret_vs_arms", *ARGV, "--out", str(out)]
    proc = subprocess.run(args, env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(out / "curves.npz"))


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_curves_equal_cpu_curves(tmp_path):
    """float64 on both platforms and the same counter-based random streams: the regret curves of
    every agent agree to rounding (a different decision anywhere would show as a jump)."""
    if not _jax_gpu():
        pytest.skip("JAX sees no CUDA GPU (pip install -e '.[jax,cuda]')")
    cpu, gpu = _figure("cpu", tmp_path / "cpu"), _figure("cuda", tmp_path / "gpu")
    agents = [name for name in cpu if name != "checkpoints"]
    assert sorted(cpu) == sorted(gpu) and len(agents) == 4
    for name in cpu:
        np.testing.assert_allclose(gpu[name], cpu[name], rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.gpu
@pytest.mark.slow
def test_figure_gpu_script_measures_both_parts(tmp_path):
    if not _jax_gpu():
        pytest.skip("JAX sees no CUDA GPU (pip install -e '.[jax,cuda]')")
    env = os.environ | {"OUT": str(tmp_path / "run"), "ARMS": "5", "SEEDS": "4"}
    script = REPO_ROOT / "benchmarks" / "figure_gpu.sh"
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["platform"] == "cuda" and summary["figure_part_s"] > 0
    assert summary["npg_decision_seeds_per_s"] > 0 and summary["ns_per_draw"] > 0
