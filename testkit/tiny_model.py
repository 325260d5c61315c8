"""A tiny random policy model for tests and benchmarks (not part of the installed packages)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from rpg_llm.learner.policy import CHATML_TEMPLATE

__all__ = ["build_tiny_model"]


_TINY_CORPUS = [
    "import numpy as np\nimport pandas as pd\n",
    "from sklearn.linear_model import LogisticRegression\n",
    "train = pd.read_csv('./input/train.csv')\ntest = pd.read_csv('./input/test.csv')\n",
    "model = LogisticRegression(C=1.0, max_iter=200)\nmodel.fit(X, y)\n",
    "pd.DataFrame({'id': test['id'], 'label': pred}).to_csv('submission.csv', index=False)\n",
    "```python\nprint('hello world')\n```\n",
    "You are an expert machine learning engineer. Write one Python script.\n",
    "The previous solution scored 0.75 and ran for 12.3 seconds. Improve it.\n",
]


def build_tiny_model(
    folder: str | os.PathLike,
    seed: int = 0,
    vocab_size: int = 512,
    hidden_size: int = 32,
    dropout: float = 0.0,
) -> Path:
    """Write a tiny random ``qwen3_5_text`` causal LM and a byte-level BPE tokenizer to ``folder``.

    Two decoder layers (one linear-attention, one full-attention, as in Qwen3.5), hidden size
    ``hidden_size``, vocabulary trained with ``tokenizers`` on a small built-in corpus; ChatML
    template; EOS ``<|im_end|>``. Takes about a second; deterministic in ``seed``.
    ``dropout`` is the config's ``attention_dropout`` (probability dropout in the full-attention
    layer, active in train mode only).

    Returns:
        ``folder`` as a Path (loadable by :func:`load_policy`).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3_5TextConfig

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_TINY_CORPUS * 20, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    tok.chat_template = CHATML_TEMPLATE
    tok.save_pretrained(folder)
    heads = 2
    pad_id, eos_id = tok.pad_token_id, tok.eos_token_id
    assert isinstance(pad_id, int) and isinstance(eos_id, int), (pad_id, eos_id)
    config = Qwen3_5TextConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
        num_attention_heads=heads,
        num_key_value_heads=1,
        head_dim=hidden_size // heads,
        linear_num_key_heads=heads,
        linear_num_value_heads=heads,
        linear_key_head_dim=hidden_size // heads,
        linear_value_head_dim=hidden_size // heads,
        max_position_embeddings=8192,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        attention_dropout=dropout,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder, safe_serialization=True)
    return folder
