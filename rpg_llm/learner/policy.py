"""Policy loading and sampling: any causal LM by Hugging Face id or local folder, with its chat
template. Where the weights come from: :mod:`rpg_llm.learner.models` (:func:`resolve_model`).

Models load in bfloat16 on a GPU and float32 on a CPU. The tiny random model of the tests lives in
``testkit/tiny_model.py`` (outside the installed packages).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rpg_llm.learner.models import DEFAULT_MODEL, resolve_model

__all__ = [
    "DEFAULT_MODEL",
    "Policy",
    "Generation",
    "resolve_model",
    "load_policy",
    "chat_prompt_ids",
    "generate",
]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass
class Policy:
    """A loaded causal LM with its tokenizer.

    Attributes:
        model: ``transformers`` causal LM (eval mode), on ``device``.
        tokenizer: its tokenizer; ``padding_side='left'``, a pad token set, a chat template set.
        device: torch device.
        name: the id or folder it was loaded from.
        path: the local folder.
    """

    model: Any
    tokenizer: Any
    device: torch.device
    name: str
    path: Path


def _default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def load_policy(
    name: str = DEFAULT_MODEL,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    allow_download: bool = True,
) -> Policy:
    """Load a causal LM and its tokenizer (bf16 on GPU, fp32 on CPU unless ``dtype`` is given).

    Raises:
        ValueError: the model cannot be found (see :func:`resolve_model`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(name, allow_download=allow_download)
    device = torch.device(device) if device is not None else _default_device()
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model = model.to(device).eval()
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return Policy(model=model, tokenizer=tokenizer, device=device, name=name, path=Path(path))


# ----------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------


def chat_prompt_ids(tokenizer: Any, prompt: str, max_tokens: int | None = None) -> list[int]:
    """Token ids of ``prompt`` as one user turn in the tokenizer's chat template, ready to answer.

    Prompts longer than ``max_tokens`` keep their first ``max_tokens - 64`` and last 64 tokens (the
    prompt builder in :mod:`rpg_llm.env.prompts` normally keeps them within budget already).
    """
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if max_tokens is not None and len(ids) > max_tokens:
        tail = min(64, max_tokens // 2)
        ids = ids[: max_tokens - tail] + ids[-tail:]
    return list(ids)


@dataclass
class Generation:
    """Sampled responses, one per prompt.

    Attributes:
        query_ids: per prompt, its chat-formatted token ids (unpadded).
        response_ids: per prompt, the generated token ids up to and including the first EOS
            (at least one token).
        texts: decoded responses (special tokens removed).
        seconds: wall time of the generation call.
        new_tokens: total generated tokens (sum of response lengths).
        logprobs: per prompt, the log-probability of each response token under the sampler's
            model at the sampling temperature, ``log_softmax(logits / T)`` over the full
            vocabulary (not renormalised over the top-k / top-p set: the convention of
            :mod:`rpg_llm.learner.forward`, which computes the training log-probs the same way); one
            float
            per token of ``response_ids``, computed in float32 (float64 for a float64 model).
    """

    query_ids: list[list[int]]
    response_ids: list[list[int]]
    texts: list[str]
    seconds: float
    new_tokens: int
    logprobs: list[list[float]] = field(default_factory=list)


class _TokenLogprobs:
    """A ``transformers`` logits processor that records ``log_softmax(logits / T)`` of each
    sampled token and returns the scores unchanged.

    ``generate`` runs user processors before its temperature / top-k / top-p warpers, so the
    scores seen here are the model's raw logits (cast to float32 by ``generate``), after any
    processors the generation config itself asks for (suppressed tokens, repetition penalty;
    the loop asks for none), which the recorded values then include. At call ``k``
    the last column of ``input_ids`` is the token sampled at step ``k - 1``; :meth:`finish` picks
    the last step's token. Memory: one ``[B, V]`` row of log-probs at a time.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.prev: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        dtype = torch.promote_types(scores.dtype, torch.float32)
        self.prev = torch.log_softmax(scores.to(dtype) / self.temperature, dim=-1)
        return scores

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """``[B, N]`` log-probs of the ``[B, N]`` generated tokens."""
        if self.prev is not None and len(self.steps) < new_tokens.shape[1]:
            last = new_tokens[:, len(self.steps) : len(self.steps) + 1].to(self.prev.device)
            self.steps.append(self.prev.gather(1, last).squeeze(1))
        if not self.steps:
            return torch.zeros(new_tokens.shape, dtype=torch.float32)
        return torch.stack(self.steps, dim=1).cpu()


@contextlib.contextmanager
def _full_params(model: Any):
    """Gather FSDP-sharded parameters for generation; a no-op for unsharded models."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    except ImportError:  # pragma: no cover
        FSDP = None
    if FSDP is not None and isinstance(model, FSDP):
        with FSDP.summon_full_params(model, writeback=False):
            yield
    else:
        yield


@torch.no_grad()
def generate(
    policy: Policy,
    query_ids: list[list[int]],
    max_new_tokens: int,
    temperature: float = 0.7,
    top_k: int = 20,
    top_p: float = 0.8,
    seed: int | None = None,
    model: Any = None,
    batch_size: int | None = None,
    cpu_threads: int | None = 1,
) -> Generation:
    """Sample one response per query (left-padded batches, nucleus + top-k sampling).

    Args:
        policy: tokenizer and device (and the model unless ``model`` is given).
        query_ids: per prompt, token ids from :func:`chat_prompt_ids`.
        max_new_tokens: response length cap (tokens).
        temperature, top_k, top_p: sampling settings (paper: 0.7, 20, 0.8). The returned
            :attr:`Generation.logprobs` are at ``temperature`` over the full vocabulary.
        seed: seeds torch's RNG first (same seed, same samples on the same device).
        model: the model to sample from (e.g. the PPO actor); default ``policy.model``.
        batch_size: queries per ``generate`` call (None: all at once).
        cpu_threads: torch threads while decoding on a CPU (None: leave as is). Decoding is
            many small ops, and on a shared CPU the thread barriers between them dominate: one
            thread was 5x faster in wall time (10x in CPU time) than two on the 2-core machine
            under load.

    Raises:
        ValueError: empty ``query_ids``, ``max_new_tokens < 1`` or a temperature that is not a
            positive finite number.
    """
    from transformers import LogitsProcessorList

    if not query_ids or any(len(q) == 0 for q in query_ids):
        raise ValueError("generate needs at least one non-empty query")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not (isinstance(temperature, int | float) and 0 < temperature < float("inf")):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    model = policy.model if model is None else model
    tok = policy.tokenizer
    if seed is not None:
        torch.manual_seed(seed)
    eos = tok.eos_token_id
    pad = tok.pad_token_id
    was_training = model.training
    model.eval()
    threads = torch.get_num_threads()
    if cpu_threads is not None and policy.device.type == "cpu":
        torch.set_num_threads(cpu_threads)
    start = time.perf_counter()
    try:
        responses: list[list[int]] = []
        logprobs: list[list[float]] = []
        bs = batch_size or len(query_ids)
        for lo in range(0, len(query_ids), bs):
            chunk = query_ids[lo : lo + bs]
            width = max(len(q) for q in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, q in enumerate(chunk):
                ids[i, width - len(q) :] = torch.tensor(q)
                mask[i, width - len(q) :] = 1
            recorder = _TokenLogprobs(float(temperature))
            with _full_params(model):
                out = model.generate(
                    input_ids=ids.to(policy.device),
                    attention_mask=mask.to(policy.device),
                    do_sample=True,
                    temperature=temperature,
                    top_k=top_k,
                    top_p=top_p,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=pad,
                    eos_token_id=eos,
                    logits_processor=LogitsProcessorList([recorder]),
                )
            new = out[:, width:]
            lps = recorder.finish(new).tolist()
            for row, lp in zip(new.tolist(), lps, strict=True):
                cut = max(row.index(eos) + 1 if eos in row else len(row), 1)
                responses.append(row[:cut])
                logprobs.append(lp[:cut])
    finally:
        torch.set_num_threads(threads)
    seconds = time.perf_counter() - start
    if was_training:
        model.train()
    texts = [tok.decode(r, skip_special_tokens=True) for r in responses]
    return Generation(
        query_ids=[list(q) for q in query_ids],
        response_ids=responses,
        texts=texts,
        seconds=seconds,
        new_tokens=sum(len(r) for r in responses),
        logprobs=logprobs,
    )
