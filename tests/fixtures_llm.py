"""Shared fixtures for the rpg_llm training tests: a tiny random qwen3_5_text model on disk.

Import the fixtures into a test module with ``from tests.fixtures_llm import tiny_model_dir``
(pytest picks up fixtures imported into a module's namespace).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised qwen3_5_text model + byte-level BPE tokenizer (built in ~1 s)."""
    from testkit.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_policy(tiny_model_dir: Path):
    """The tiny model loaded on CPU in float32."""
    from rpg_llm.learner.policy import load_policy

    return load_policy(str(tiny_model_dir), device="cpu")
