"""rpg_llm.learner.sft_cache: exact memoisation of the SFT warm start's weights."""

from __future__ import annotations

import json

import pytest
import torch

from rpg_llm.learner import sft_cache
from rpg_llm.learner.sft import SFTExample
from rpg_llm.loop.warm_start import weights_digest


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
    assert folder is not None
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


def test_old_entries_are_pruned_least_recently_used_first(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv(sft_cache.ENTRIES_ENV, "3")
    m = _model(1)
    info = {"weights_sha256": weights_digest(m)}
    for i, key in enumerate(("k0", "k1", "k2")):
        sft_cache.store_entry(key, m, info, root=tmp_path)
        os.utime(tmp_path / key / "info.json", (100.0 * (i + 1), 100.0 * (i + 1)))  # k0 oldest
    assert sft_cache.load_entry("k0", _model(2), weights_digest, root=tmp_path) == info  # used
    sft_cache.store_entry("k3", m, info, root=tmp_path)  # 4 entries > 3: the LRU one, k1, goes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k0", "k2", "k3"]
    # the entry just stored is never removed, even when its mtime is the oldest
    os.utime(tmp_path / "k3" / "info.json", (1.0, 1.0))
    removed = sft_cache.prune(tmp_path, keep=1, spare="k3")
    assert sorted(p.name for p in removed) == ["k0", "k2"] and [
        p.name for p in tmp_path.iterdir()
    ] == ["k3"]
    for bad in ("0", "many", "-2"):
        monkeypatch.setenv(sft_cache.ENTRIES_ENV, bad)
        with pytest.raises(ValueError, match=f"{sft_cache.ENTRIES_ENV}.*{bad!r}"):
            sft_cache.max_entries()
    monkeypatch.delenv(sft_cache.ENTRIES_ENV)
    assert sft_cache.max_entries() == sft_cache.DEFAULT_ENTRIES == 4


# -- the trainer: runs that share the SFT inputs compute the SFT once --------------------------


def test_runs_sharing_the_sft_seed_compute_the_sft_once(tmp_path, monkeypatch):
    import rpg_llm.learner.sft
    from rpg_llm.learner.ppo import PPOConfig
    from rpg_llm.loop import Trainer
    from testkit.tiny_model import build_tiny_model
    from testkit.tiny_trainer import bbc_backends, tiny_edit_config

    model_dir = build_tiny_model(tmp_path / "tiny")
    calls = []
    real = rpg_llm.learner.sft.sft_warm_start

    def spy(*args, **kw):
        calls.append(kw.get("seed"))
        return real(*args, **kw)

    monkeypatch.setattr(rpg_llm.learner.sft, "sft_warm_start", spy)
    backends = bbc_backends(["logreg_tfidf"])

    def run(name, seed, sft_seed):
        cfg = tiny_edit_config(
            model_dir,
            steps=1,
            seed=seed,
            sft_steps=2,
            sft_examples=4,
            sft_seed=sft_seed,
            ppo=PPOConfig(micro_batch_size=2, lora_rank=4),
        )
        trainer = Trainer(cfg, tmp_path / name, backends=backends, progress=False)
        trainer.close()
        return json.loads((tmp_path / name / "sft.json").read_text())

    a = run("a", seed=0, sft_seed=0)
    b = run("b", seed=1, sft_seed=0)  # another run seed, the same SFT: loaded from the cache
    assert calls == [0]
    assert b["weights_sha256"] == a["weights_sha256"] and b["losses"] == a["losses"]
    # each run names the cache entry of its SFT (what paper_figures.llm_table checks)
    assert len(a["sft_cache_key"]) == 64 and b["sft_cache_key"] == a["sft_cache_key"]
    root = sft_cache.cache_root()
    assert root is not None and (root / a["sft_cache_key"] / "info.json").is_file()
    lines = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [m["sft/loss"] for m in lines if "sft_step" in m] == pytest.approx(a["losses"])
    c = run("c", seed=1, sft_seed=None)  # the SFT seed is the run seed 1: computed
    assert calls == [0, 1] and c["weights_sha256"] != a["weights_sha256"]
    assert c["sft_cache_key"] != a["sft_cache_key"]
    monkeypatch.setenv(sft_cache.CACHE_ENV, "off")
    d = run("d", seed=2, sft_seed=0)  # no cache: computed again, bit-identical to a's
    assert calls == [0, 1, 0] and d["weights_sha256"] == a["weights_sha256"]
