"""Logits only where they are used: PPO's response logits
and the SFT answer loss with ``logits_to_keep`` equal the full-logit computations."""

from __future__ import annotations

import fixtures_llm
import pytest
import torch

from rpg_llm.learner.forward import PPOBatch, position_ids, response_logits
from rpg_llm.learner.sft import SFTExample, _collate, _loss_sum, tokenize_example

tiny_model_dir = fixtures_llm.tiny_model_dir
tiny_policy = fixtures_llm.tiny_policy

T = 0.7
EXAMPLES = [
    SFTExample("Improve the script: C = 1.0", "```python\nC = 3.0\n```"),
    SFTExample("short", "```python\nMAX_FEATURES = 5000\nC = 0.1\n```"),
    SFTExample("a somewhat longer prompt with more words in it", "C = 2"),
]


def _full_logit_loss(model, ids, mask, labels):
    """The answer tokens' summed cross-entropy from every position's logits."""
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels[:, 1:].reshape(-1),
        ignore_index=-100,
        reduction="sum",
    )


def test_response_logits_equal_the_full_logits_slice(tiny_policy):
    tok = tiny_policy.tokenizer
    q = [tok("import numpy as np", add_special_tokens=False)["input_ids"], [5, 6, 7]]
    r = [[10, 11, 12, 13], [14]]
    batch = PPOBatch.from_lists(q, r, [0.0, 1.0], tok.pad_token_id)
    model = tiny_policy.model.eval()
    Q, R = batch.query_ids.shape[1], batch.response_ids.shape[1]
    with torch.no_grad():
        got = response_logits(model, batch, T)
        mask = batch.attention_mask
        full = model(
            input_ids=batch.input_ids,
            attention_mask=mask,
            position_ids=position_ids(mask),
            use_cache=False,
        ).logits
    assert got.shape == (2, R, full.shape[-1])
    torch.testing.assert_close(got, full[:, Q - 1 : Q - 1 + R].float() / T, rtol=1e-6, atol=1e-6)


def test_sft_loss_equals_the_full_logit_cross_entropy(tiny_policy):
    tok = tiny_policy.tokenizer
    rows = [tokenize_example(tok, ex) for ex in EXAMPLES]
    ids, mask, labels = _collate(rows, tok.pad_token_id, torch.device("cpu"))
    model = tiny_policy.model.eval()
    loss, n = _loss_sum(model, ids, mask, labels)
    ref = _full_logit_loss(model, ids, mask, labels)
    assert n == sum(len(row) - n_prompt for row, n_prompt in rows)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-5)
    # and the same gradient
    g = torch.autograd.grad(loss, [model.lm_head.weight])[0]
    ref = _full_logit_loss(model, ids, mask, labels)
    g_ref = torch.autograd.grad(ref, [model.lm_head.weight])[0]
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-6)


def test_sft_micro_batches_accumulate_the_full_batch_gradient(tiny_policy):
    from rpg_llm.learner.sft import accumulate_answer_gradient

    tok = tiny_policy.tokenizer
    rows = [tokenize_example(tok, ex) for ex in EXAMPLES]
    model = tiny_policy.model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    results = []
    for micro in (1, 2, 3):
        model.zero_grad(set_to_none=True)
        loss = accumulate_answer_gradient(model, rows, tok.pad_token_id, torch.device("cpu"), micro)
        results.append((loss, [p.grad.clone() for p in params]))
    model.zero_grad(set_to_none=True)
    # the whole batch at once, computed by hand: mean over all answer tokens
    ids, mask, labels = _collate(rows, tok.pad_token_id, torch.device("cpu"))
    total, n = _loss_sum(model, ids, mask, labels)
    assert results[2][0] == pytest.approx(float(total / n), rel=1e-6)
    for loss, grads in results[:2]:
        assert loss == pytest.approx(results[2][0], rel=1e-6)
        for g, g_ref in zip(grads, results[2][1], strict=True):
            torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-6)
