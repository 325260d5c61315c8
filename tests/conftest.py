"""Shared test set-up: two CPU devices for sharding, float64, a persistent compilation cache
(``$RPG_JAX_CACHE``, default ``~/.cache/rpg/jax-tests``: kept across runs and clones), a fresh
SFT weights cache per test."""

import os
import shutil
import tempfile

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# the SFT weights cache (rpg_llm.learner.sft_cache): never the user's; a fresh one per test (below)
os.environ["RPG_SFT_CACHE"] = tempfile.mkdtemp(prefix="rpg-test-sft-cache-")

try:
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_enable_x64", True)
    # compiled code kept across test runs and clones (rpg_jax.config.setup_jax reads the same
    # variable, so the figures the tests run in-process share it)
    os.environ.setdefault("RPG_JAX_CACHE", os.path.expanduser("~/.cache/rpg/jax-tests"))
    jax.config.update("jax_compilation_cache_dir", os.environ["RPG_JAX_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
except ImportError:  # the torch-only install runs its own tests
    pass


@pytest.fixture(autouse=True)
def _fresh_sft_cache(tmp_path_factory, monkeypatch):
    """Each test (and the runs it starts in subprocesses) gets an empty SFT weights cache, so
    that no test sees another's SFT results (a cache hit skips the SFT)."""
    monkeypatch.setenv("RPG_SFT_CACHE", str(tmp_path_factory.mktemp("sft-cache")))


def _has_cuda() -> bool:
    """torch sees a CUDA device, or (no torch here) an NVIDIA driver is installed."""
    try:
        import torch
    except ImportError:
        return shutil.which("nvidia-smi") is not None
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip on a machine without a CUDA device."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not _has_cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in gpu_items:
            item.add_marker(skip)
