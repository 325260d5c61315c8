"""The SFT weights are stored once in the run folder and a resume loads them.

A resumed tiny-model run must not call the SFT again; its reference log-probs (full fine-tuning:
the frozen copy; LoRA: the actor with its adapters disabled) and, after a checkpoint, its actor
log-probs and values equal those of the run before the interruption.
"""

from __future__ import annotations

import json
from dataclasses import replace

import fixtures_llm
import pytest
import torch

import rpg_llm.learner.sft
from rpg_llm.learner.forward import response_logits, response_values
from rpg_llm.learner.losses import logprobs_from_logits
from rpg_llm.learner.ppo import PPOBatch, PPOConfig
from rpg_llm.loop import Trainer
from rpg_llm.loop.warm_start import weights_digest
from testkit.tiny_trainer import bbc_backends, tiny_edit_config

tiny_model_dir = fixtures_llm.tiny_model_dir

BBC = "bbc-news-logloss"
SEEDS = ("logreg_tfidf", "nb_tfidf")


def _backends():
    return bbc_backends(SEEDS)


def _cfg(model_dir, lora_rank):
    return tiny_edit_config(
        model_dir,
        sft_steps=2,
        sft_examples=4,
        ppo=PPOConfig(micro_batch_size=2, lora_rank=lora_rank, actor_lr=1e-2, critic_lr=1e-2),
    )


def _batch(trainer):
    tok = trainer.policy.tokenizer
    q = [tok("import numpy", add_special_tokens=False)["input_ids"], [5, 6, 7, 8]]
    return PPOBatch.from_lists(q, [[10, 11, 12], [13, 14]], [1.0, -0.5], tok.pad_token_id)


def _outputs(trainer, batch):
    """(reference log-probs, actor log-probs, values), each ``[B, R]``."""
    ppo = trainer.ppo
    with torch.no_grad():
        ref = ppo._rollout_stats(batch)["ref_logprobs"]
        lp = logprobs_from_logits(
            response_logits(ppo.actor, batch, ppo.temperature), batch.response_ids
        )
        return ref, lp, response_values(ppo.critic, batch)


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_resume_loads_the_sft_weights_instead_of_rerunning_the_sft(
    tiny_model_dir, tmp_path, monkeypatch, lora_rank
):
    calls = []
    real_sft = rpg_llm.learner.sft.sft_warm_start

    def spy(*args, **kw):
        calls.append(1)
        return real_sft(*args, **kw)

    monkeypatch.setattr(rpg_llm.learner.sft, "sft_warm_start", spy)
    cfg, run = _cfg(tiny_model_dir, lora_rank), tmp_path / "run"
    trainer = Trainer(cfg, run, backends=_backends(), progress=False)
    try:
        assert calls == [1]
        batch = _batch(trainer)
        ref0 = _outputs(trainer, batch)[0]
        trainer.ppo.step(batch)  # step 1's update, then its checkpoint
        trainer.checkpoint(1, last=False)
        before = _outputs(trainer, batch)
    finally:
        trainer.close()
    sft = json.loads((run / "sft.json").read_text())
    weights = run / "sft_weights.safetensors"
    assert weights.exists()
    from rpg_llm.learner.policy import load_policy

    pretrained = weights_digest(load_policy(str(tiny_model_dir), device="cpu").model)
    assert sft["weights_sha256"] != pretrained  # the SFT changed the weights

    resumed = Trainer(cfg, run, backends=_backends(), resume=True, progress=False)
    try:
        assert calls == [1]  # the SFT did not run again
        assert resumed.start_step == 2
        assert resumed.sft_losses == pytest.approx(sft["losses"])
        after = _outputs(resumed, batch)
        torch.testing.assert_close(after[0], ref0, rtol=0, atol=0)  # the SFT reference
        for a, b in zip(after, before, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    finally:
        resumed.close()

    # stored weights that do not match sft.json's digest are refused
    (run / "sft.json").write_text(json.dumps(sft | {"weights_sha256": "0" * 64}))
    with pytest.raises(RuntimeError, match="loaded SFT warm start gave other weights"):
        Trainer(cfg, run, backends=_backends(), resume=True, progress=False)
    assert calls == [1]


def test_resume_of_a_folder_without_the_weights_reruns_the_sft_and_stores_them(
    tiny_model_dir, tmp_path
):
    cfg, run = _cfg(tiny_model_dir, 4), tmp_path / "run"
    Trainer(cfg, run, backends=_backends(), progress=False).close()
    weights = run / "sft_weights.safetensors"
    stored = weights.read_bytes()
    weights.unlink()  # a run folder written before the weights were kept
    resumed = Trainer(cfg, run, backends=_backends(), resume=True, progress=False)
    try:
        assert weights.read_bytes() == stored  # re-run (deterministic) and stored again
        assert resumed.sft_losses == pytest.approx(
            json.loads((run / "sft.json").read_text())["losses"]
        )
    finally:
        resumed.close()


def test_a_run_killed_during_its_sft_records_every_sft_step_once_on_resume(
    tiny_model_dir, tmp_path, monkeypatch
):
    """Found by killing a run in its SFT warm start: the resumed SFT ran with recording off, so
    ``metrics.jsonl`` kept only the steps before the kill. The resume records the whole SFT
    again and drops the stopped one's lines: each SFT step once, with the losses ``sft.json``
    stores."""
    real_sft = rpg_llm.learner.sft.sft_warm_start

    def killed_after_step_2(*args, on_step=None, **kw):
        def step(k, loss):
            assert on_step is not None
            on_step(k, loss)
            if k == 2:
                raise KeyboardInterrupt  # the process dies here

        return real_sft(*args, on_step=step, **kw)

    cfg, run = replace(_cfg(tiny_model_dir, 4), sft_steps=3), tmp_path / "run"
    monkeypatch.setattr(rpg_llm.learner.sft, "sft_warm_start", killed_after_step_2)
    with pytest.raises(KeyboardInterrupt):
        Trainer(cfg, run, backends=_backends(), progress=False)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["sft_step"] for m in lines] == [1, 2] and not (run / "sft.json").exists()
    monkeypatch.setattr(rpg_llm.learner.sft, "sft_warm_start", real_sft)
    resumed = Trainer(cfg, run, backends=_backends(), resume=True, progress=False)
    resumed.close()
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["sft_step"] for m in lines] == [1, 2, 3]
    stored = json.loads((run / "sft.json").read_text())["losses"]
    assert [m["sft/loss"] for m in lines] == pytest.approx(stored)
