"""rpg_llm.probe: the trained and the SFT-only policy on the same fixed parents, on a real tiny run
(bbc-news-logloss baselines run and graded; the answers scripted so that the two policies are
told apart: the first generation call is the SFT policy's, the second the trained one's)."""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import replace

import fixtures_llm
import pytest

from rpg_llm import probe as probe_mod
from rpg_llm.loop import train
from rpg_llm.loop.buffer import SampleBuffer
from testkit.tiny_trainer import bbc_backends, tiny_edit_config

tiny_model_dir = fixtures_llm.tiny_model_dir

SEEDS = ("logreg_tfidf", "nb_tfidf")
BAD_EDIT = "```python\nNO_SUCH_NAME = 3\n```"


def _scripted(answer):
    from rpg_llm.learner.policy import Generation

    def fake(policy, query_ids, max_new_tokens, temperature=0.7, **kw):
        tok = policy.tokenizer
        texts = [answer(tok.decode(q)) for q in query_ids]
        ids = [tok(t, add_special_tokens=False)["input_ids"][:max_new_tokens] for t in texts]
        return Generation(query_ids, ids, texts, 0.01, sum(map(len, ids)))

    return fake


def _good_edit(prompt: str) -> str:
    if "\n- C = " in prompt:
        return "```python\nC = 3.0\n```"
    assert "\n- ALPHA = " in prompt
    return "```python\nALPHA = 0.2\n```"


def test_fixed_parents_spread_over_the_ranking():
    from testkit.samples import toy_sample

    seeds = [toy_sample(i, r, 1.0, code=f"K = {i}\n") for i, r in enumerate([0.5, 0.1, 0.9, 0.3])]
    seeds.append(toy_sample(9, -10.0, 1.0, status="error", code="K = 9\n"))  # never a parent
    seeds.append(toy_sample(8, 0.95, 1.0, code="print(8)\n"))  # no constants: edit skips it
    ids = lambda ps: [p.row + 4 * p.step for p in ps]  # noqa: E731  (toy ids are i)
    assert ids(probe_mod.fixed_parents(seeds, 3, "edit")) == [1, 0, 2]  # ranks 0, 2 (of 0-3), 3
    assert ids(probe_mod.fixed_parents(seeds, 1, "edit")) == [3]  # the median rank, (4-1)//2 = 1
    assert ids(probe_mod.fixed_parents(seeds, 2, "script")) == [1, 8]
    with pytest.raises(ValueError, match="5 parents asked for, but the run has 4 candidate"):
        probe_mod.fixed_parents(seeds, 5, "edit")


@pytest.mark.slow
def test_probe_compares_the_two_policies_on_the_same_parents(tiny_model_dir, tmp_path, monkeypatch):
    import rpg_llm.loop.rollout

    run = tmp_path / "run"
    cfg = tiny_edit_config(tiny_model_dir, steps=1, workers=2, seed_buffer=True)
    backends = bbc_backends(SEEDS)
    monkeypatch.setattr(rpg_llm.loop.rollout, "generate", _scripted(_good_edit))
    train(cfg, run, backends=backends, progress=False)
    before = SampleBuffer(run / "buffer.sqlite").all()

    calls: list[int] = []

    def by_policy(prompt: str) -> str:  # one batch per policy: SFT first, then trained
        return BAD_EDIT if len(calls) == 1 else _good_edit(prompt)

    real = _scripted(by_policy)

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(rpg_llm.loop.rollout, "generate", counted)
    sft, trained = probe_mod.probe(run, answers=2, parents=2, seed=3, backends=backends)
    assert len(calls) == 2
    assert (sft.policy, trained.policy) == ("sft", "trained (step 1)")
    assert (sft.answers, sft.valid_fraction) == (4, 0.0) and math.isnan(sft.mean_time_s)
    assert (trained.answers, trained.valid_fraction) == (4, 1.0)

    rows = list(csv.DictReader(open(run / "probe" / "probe.csv")))
    assert len(rows) == 8
    seeds = sorted((s for s in before if s.step == 0), key=lambda s: (s.raw_reward, s.id))
    want_parents = [str(s.id) for s in seeds for _ in range(2)]
    for name in ("sft", "trained (step 1)"):
        mine = [r for r in rows if r["policy"] == name]
        assert [r["parent_id"] for r in mine] == want_parents  # the same parents, in rule order
    good = [r for r in rows if r["policy"] == "trained (step 1)"]
    assert trained.mean_time_s == pytest.approx(sum(float(r["time_s"]) for r in good) / 4)
    assert trained.mean_raw_reward == pytest.approx(sum(float(r["raw_reward"]) for r in good) / 4)
    assert all(r["status"] == "invalid" for r in rows if r["policy"] == "sft")
    assert probe_mod.changed_outcomes(rows) == (4, 4)  # every draw went invalid -> ok
    same = [r for r in rows if r["policy"] == "sft"]
    assert probe_mod.changed_outcomes(same + [r | {"policy": "trained"} for r in same]) == (0, 4)
    summary = json.loads((run / "probe" / "probe.json").read_text())
    assert summary["policies"][0]["mean_time_s"] is None
    assert summary["parent_ids"] == sorted(s.id for s in seeds if s.id is not None)
    after = SampleBuffer(run / "buffer.sqlite").all()
    assert after == before  # the probe stores nothing


def test_probe_cli_usage_errors(tmp_path, capsys):
    assert probe_mod.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run folder" in err
    assert probe_mod.main([str(tmp_path), "--answers", "0"]) == 2
    assert "--answers" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("lora_rank", [0, 4])
def test_probe_of_a_trl_run_loads_trls_last_checkpoint(
    lora_rank, tiny_model_dir, tmp_path, monkeypatch
):
    """An ``--engine trl`` run is probed with TRL's last checkpoint: its weights (full) or its
    adapter (LoRA) are what the trained policy runs with. The checkpoint's file is changed by
    hand first, so that loading it is told apart from keeping the start's weights."""
    pytest.importorskip("trl")
    import torch
    from safetensors.torch import load_file, save_file

    import rpg_llm.loop.rollout
    from rpg_llm.config import TRLConfig
    from rpg_llm.engines.trl import train_trl, trained_model
    from rpg_llm.learner.policy import load_policy

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = tmp_path / "run"
    ppo = replace(tiny_edit_config(tiny_model_dir).ppo, lora_rank=lora_rank)
    cfg = tiny_edit_config(
        tiny_model_dir, engine="trl", batch_size=4, steps=1, seed_buffer=True,
        trl=TRLConfig(num_generations=2), ppo=ppo,
    )  # fmt: skip
    backends = bbc_backends(SEEDS)
    train_trl(cfg, run, backends=backends, progress=False)
    ckpt = run / "trl" / "checkpoint-1"
    name = "adapter_model.safetensors" if lora_rank else "model.safetensors"
    weights = load_file(str(ckpt / name))
    key = sorted(k for k in weights if ("lora_B" in k) == bool(lora_rank))[0]
    weights[key] = weights[key] + 0.25
    save_file(weights, str(ckpt / name), metadata={"format": "pt"})

    start = load_policy(str(tiny_model_dir), device="cpu").model
    model, step = trained_model(start, run)
    assert step == 1
    params = dict(model.named_parameters())
    loaded = next(v for k, v in params.items() if k.replace(".default", "") == key)
    assert torch.equal(loaded.detach(), weights[key])

    def by_model(policy, query_ids, max_new_tokens, **kw):  # the SFT model's answers are bad
        sft_model = kw.get("model") is None or kw["model"] is policy.model
        fake = _scripted(lambda prompt: BAD_EDIT if sft_model else _good_edit(prompt))
        return fake(policy, query_ids, max_new_tokens, **kw)

    monkeypatch.setattr(rpg_llm.loop.rollout, "generate", by_model)
    sft, trained = probe_mod.probe(run, answers=1, parents=2, seed=3, backends=backends)
    assert (sft.policy, trained.policy) == ("sft", "trained (TRL step 1)")
    assert (sft.valid_fraction, trained.valid_fraction) == (0.0, 1.0)


def test_trained_model_names_a_missing_trl_checkpoint(tmp_path):
    """No ``trl/checkpoint-N`` at all, or none of the step asked for: a ValueError naming the
    run, raised before any weights are touched (``model`` is not used)."""
    pytest.importorskip("trl")
    from rpg_llm.engines.trl import trained_model

    with pytest.raises(ValueError, match="no TRL checkpoint"):
        trained_model(None, tmp_path)
    (tmp_path / "trl" / "checkpoint-1").mkdir(parents=True)
    with pytest.raises(
        ValueError, match=re.escape(f"{tmp_path}: no TRL checkpoint trl/checkpoint-2")
    ):
        trained_model(None, tmp_path, step=2)
    with pytest.raises(ValueError, match="neither a LoRA adapter nor model weights"):
        trained_model(None, tmp_path)


def test_probe_cli_names_a_missing_folder_a_file_and_a_negative_seed(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for path, needle in (
        (tmp_path / "nope", "does not exist"),
        (tmp_path / "file", "is not a folder"),
    ):
        assert probe_mod.main([str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{path} {needle}" in err
    assert probe_mod.main([str(tmp_path), "--seed", "-1"]) == 2
    assert "--seed" in capsys.readouterr().err
