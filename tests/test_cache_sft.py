"""rpg_llm.sft_cache: exact memoisation of the SFT warm start's weights."""

from __future__ import annotations

import json

import pytest
import torch

from rpg_llm import sft_cache
from rpg_llm.loop.trainer import weights_digest
from rpg_llm.sft import SFTExample


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))


EXAMPLES = [SFTExample("prompt a", "C = 2.0"), SFTExample("prompt b", "N = 5")]
SETTINGS = {"steps": 8, "batch_size": 4, "lr": 4e-5, "seed": 0, "max_prompt_tokens": 352}


def test_key_depends_on_every_input():
    base = sft_cache.sft_key("abc", EXAMPLES, SETTINGS)
    assert base == sft_cache.sft_key("abc", list(EXAMPLES), dict(SETTINGS))  # deterministic
    others = {
        sft_cache.sft_key("abd", EXAMPLES, SETTINGS),
        sft_cache.sft_key("abc", EXAMPLES[:1], SETTINGS),
        sft_cache.sft_key("abc", [EXAMPLES[1], EXAMPLES[0]], SETTINGS),
        sft_cache.sft_key("abc", [SFTExample("prompt a", "C = 3.0"), EXAMPLES[1]], SETTINGS),
        sft_cache.sft_key("abc", EXAMPLES, {**SETTINGS, "seed": 1}),
        sft_cache.sft_key("abc", EXAMPLES, {**SETTINGS, "lr": 5e-5}),
    }
    assert base not in others and len(others) == 6


def test_store_then_load_gives_the_same_weights(tmp_path):
    trained = _model(1)
    info = {"losses": [0.9, 0.4], "weights_sha256": weights_digest(trained)}
    folder = sft_cache.store_entry("k1", trained, info, root=tmp_path)
    assert folder == tmp_path / "k1" and json.loads((folder / "info.json").read_text()) == info
    fresh = _model(2)
    assert weights_digest(fresh) != info["weights_sha256"]
    got = sft_cache.load_entry("k1", fresh, weights_digest, root=tmp_path)
    assert got == info
    assert weights_digest(fresh) == info["weights_sha256"]
    x = torch.randn(5, 4)
    assert torch.equal(fresh(x), trained(x))


def test_missing_or_tampered_entries_are_refused_and_the_model_kept(tmp_path):
    start = _model(2)
    before = weights_digest(start)
    assert sft_cache.load_entry("nope", start, weights_digest, root=tmp_path) is None
    trained = _model(1)
    sft_cache.store_entry("k2", trained, {"weights_sha256": "0" * 64}, root=tmp_path)  # wrong
    assert sft_cache.load_entry("k2", start, weights_digest, root=tmp_path) is None
    assert weights_digest(start) == before  # restored to its own weights
    other = torch.nn.Linear(4, 2)  # other parameter names and shapes
    sft_cache.store_entry("k3", other, {"weights_sha256": weights_digest(other)}, root=tmp_path)
    assert sft_cache.load_entry("k3", start, weights_digest, root=tmp_path) is None
    assert weights_digest(start) == before


def test_cache_off_and_bad_info(tmp_path, monkeypatch):
    monkeypatch.setenv(sft_cache.CACHE_ENV, "off")
    assert sft_cache.cache_root() is None
    m = _model(1)
    assert sft_cache.store_entry("k", m, {"weights_sha256": weights_digest(m)}) is None
    assert sft_cache.load_entry("k", m, weights_digest) is None
    monkeypatch.setenv(sft_cache.CACHE_ENV, str(tmp_path / "c"))
    assert sft_cache.cache_root() == tmp_path / "c"
    with pytest.raises(ValueError, match="weights_sha256"):
        sft_cache.store_entry("k", m, {"losses": []})
