"""Checkpoints of what is trained: LoRA saves adapters + value head only.

Also the bounds of ``PPOConfig``'s integer fields.
"""

from __future__ import annotations

import fixtures_llm
import pytest
import torch

from rpg_llm.config import MAX_BATCH_SIZE, MAX_PPO_EPOCHS, PPOConfig
from rpg_llm.learner.forward import response_logits, response_values
from rpg_llm.learner.losses import logprobs_from_logits
from rpg_llm.learner.ppo import PPOBatch, PPOTrainer

tiny_model_dir = fixtures_llm.tiny_model_dir
tiny_policy = fixtures_llm.tiny_policy

LORA = PPOConfig(lora_rank=4, lora_alpha=8.0, actor_lr=1e-2, critic_lr=1e-2)


def _actor(model_dir):
    from rpg_llm.learner.policy import load_policy

    return load_policy(str(model_dir), device="cpu").model


def _batch(policy, scores):
    tok = policy.tokenizer
    q = [tok("import numpy", add_special_tokens=False)["input_ids"], [5, 6, 7, 8]]
    r = [[10, 11, 12], [13, 14]]
    return PPOBatch.from_lists(q, r, scores, tok.pad_token_id)


def _outputs(trainer, batch):
    with torch.no_grad():
        lp = logprobs_from_logits(
            response_logits(trainer.actor, batch, trainer.temperature), batch.response_ids
        )
        return lp, response_values(trainer.critic, batch)


def _trained(model_dir, policy, cfg):
    torch.manual_seed(0)
    trainer = PPOTrainer(_actor(model_dir), cfg)
    for scores in ([1.0, -1.0], [-0.5, 2.0]):
        trainer.step(_batch(policy, scores))
    return trainer


def test_lora_checkpoint_roundtrip_gives_identical_outputs_and_next_update(
    tiny_model_dir, tiny_policy, tmp_path
):
    trainer = _trained(tiny_model_dir, tiny_policy, LORA)
    batch = _batch(tiny_policy, [0.3, -0.7])
    lp0, v0 = _outputs(trainer, batch)
    trainer.save(tmp_path / "ckpt")
    torch.manual_seed(1)  # other adapter initialisation: load must overwrite it
    other = PPOTrainer(_actor(tiny_model_dir), LORA)
    lp_fresh, _ = _outputs(other, batch)
    assert not torch.allclose(lp_fresh, lp0)  # the training moved the adapters
    other.load(tmp_path / "ckpt")
    assert other.num_updates == 2
    lp1, v1 = _outputs(other, batch)
    torch.testing.assert_close(lp1, lp0, rtol=0, atol=0)
    torch.testing.assert_close(v1, v0, rtol=0, atol=0)
    s0, s1 = trainer.step(batch), other.step(batch)  # AdamW moments restored: same update
    assert s0 == s1
    lp0, v0 = _outputs(trainer, batch)
    lp1, v1 = _outputs(other, batch)
    torch.testing.assert_close(lp1, lp0, rtol=0, atol=0)
    torch.testing.assert_close(v1, v0, rtol=0, atol=0)


def test_lora_checkpoint_holds_no_base_weight(tiny_model_dir, tiny_policy, tmp_path):
    trainer = _trained(tiny_model_dir, tiny_policy, LORA)
    trainer.save(tmp_path / "ckpt")
    state = torch.load(tmp_path / "ckpt" / "trainer.pt", weights_only=False)
    base = sum(p.numel() for p in _actor(tiny_model_dir).parameters())
    for name, model in (("actor", trainer.policy), ("critic", trainer.critic)):
        keys = set(state[name])
        assert keys and all("lora_" in k or k.startswith("value_head.") for k in keys), keys
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert sum(t.numel() for t in state[name].values()) == trainable < base / 4
    assert {k for k in state["critic"] if k.startswith("value_head.")} == {
        "value_head.weight",
        "value_head.bias",
    }
    # the AdamW states cover the trainable tensors only
    for name, model in (("actor_opt", trainer.policy), ("critic_opt", trainer.critic)):
        n_trainable = sum(p.requires_grad for p in model.parameters())
        assert len(state[name]["state"]) == n_trainable


def test_full_finetuning_checkpoint_keeps_every_weight(tiny_model_dir, tiny_policy, tmp_path):
    cfg = PPOConfig(actor_lr=1e-3)
    trainer = _trained(tiny_model_dir, tiny_policy, cfg)
    trainer.save(tmp_path / "ckpt")
    state = torch.load(tmp_path / "ckpt" / "trainer.pt", weights_only=False)
    assert set(state["actor"]) == set(trainer.policy.state_dict())
    other = PPOTrainer(_actor(tiny_model_dir), cfg)
    other.load(tmp_path / "ckpt")
    batch = _batch(tiny_policy, [0.3, -0.7])
    for a, b in zip(_outputs(trainer, batch), _outputs(other, batch), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert trainer.step(batch) == other.step(batch)


def test_lora_checkpoint_into_a_full_trainer_is_refused(tiny_model_dir, tiny_policy, tmp_path):
    trainer = PPOTrainer(_actor(tiny_model_dir), LORA)
    trainer.save(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="LoRA"):
        PPOTrainer(_actor(tiny_model_dir), PPOConfig()).load(tmp_path / "ckpt")
    state = torch.load(tmp_path / "ckpt" / "trainer.pt", weights_only=False)
    state["actor"] = {k + "_x": v for k, v in state["actor"].items()}
    torch.save(state, tmp_path / "ckpt" / "trainer.pt")
    with pytest.raises(ValueError, match="parameters differ"):
        PPOTrainer(_actor(tiny_model_dir), LORA).load(tmp_path / "ckpt")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ppo_epochs", 0),
        ("ppo_epochs", MAX_PPO_EPOCHS + 1),
        ("ppo_epochs", 1.5),
        ("ppo_epochs", True),
        ("micro_batch_size", 0),
        ("micro_batch_size", MAX_BATCH_SIZE + 1),
        ("micro_batch_size", "4"),
        ("mini_batch_size", 0),
        ("mini_batch_size", MAX_BATCH_SIZE + 1),
        ("mini_batch_size", 2.0),
        ("lora_rank", -1),
        ("lora_rank", 10**6),
    ],
)
def test_integer_fields_are_bounded(field, value):
    with pytest.raises(ValueError, match=rf"PPOConfig\.{field} .*got {value!r}"):
        PPOConfig(**{field: value})


def test_integer_fields_at_their_bounds_are_accepted():
    cfg = PPOConfig(ppo_epochs=MAX_PPO_EPOCHS, micro_batch_size=MAX_BATCH_SIZE)
    assert (cfg.ppo_epochs, cfg.micro_batch_size, cfg.mini_batch_size) == (100, 65536, None)
    assert PPOConfig(mini_batch_size=1, lora_rank=0).mini_batch_size == 1
