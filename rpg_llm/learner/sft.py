"""Supervised warm start of the actor on a task's baseline solutions, before RL (``--sft-steps``).

A small instruction model asked zero-shot for an edit (``--action edit``) rarely answers in the
format: the issue measured SmolLM2-135M-Instruct at 2 parseable answers of 8 on the bbc logistic-
regression baseline. So the format is taught first: supervised fine-tuning on prompt -> answer
pairs built from the task's own baseline scripts (:func:`build_sft_examples`), with the
cross-entropy on the answer tokens only (the prompt tokens are context), AdamW, then PPO starts
from the fine-tuned weights (the PPO reference is then the fine-tuned model, as in RLHF, Ouyang
et al. 2022: SFT, then PPO with a KL penalty to the SFT policy).

* ``edit`` pairs: the edit prompt (:func:`rpg_llm.env.prompts.edit_prompt`) of a baseline -- as it
  ships, or with its constants already moved to other plausible values, so the model reads the
  listed values instead of memorising one script -- and an answer ``NAME = value`` lines that
  change one or two constants to other plausible values (:func:`plausible_values`), a string
  switch such as ``MODEL`` to another of the values its comment declares, and a number whose
  comment lists its values (``FOLDS = 0  # ...: one of 0, 3, 5``) to another of those.
* ``script`` pairs: the base prompt and the baseline script as a fenced block.

``python -m rpg_llm.learner.sft`` measures the effect: the fraction of sampled answers (T 0.7,
top-k 20,
top-p 0.8) in the edit format and the fraction that change a value, before and after ``--steps``.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_llm.env import tasks
from rpg_llm.env.actions import (
    ACTION_FORMATS,
    apply_edit,
    declared_choices,
    declared_numbers,
    declared_switches,
    editable_baselines,
    editable_constants,
    format_value,
    parse_action,
    switch_changed,
)
from rpg_llm.env.prompts import BASELINE_OUTCOME, base_prompt, edit_prompt
from rpg_llm.learner.forward import update_mode
from rpg_llm.learner.memory import release_host_memory
from rpg_llm.learner.policy import (
    DEFAULT_MODEL,
    chat_prompt_ids,
    generate,
    load_policy,
    resolve_model,
)

__all__ = [
    "SFTExample",
    "plausible_values",
    "edit_answer",
    "build_sft_examples",
    "tokenize_example",
    "answer_loss",
    "sft_warm_start",
    "accumulate_answer_gradient",
    "FormatRates",
    "format_rates",
]


@dataclass(frozen=True)
class SFTExample:
    """One supervised pair: a user prompt and the assistant answer to learn.

    ``parent``: for an edit pair, the script its prompt shows (the answer's constants apply to
    it); ``""`` for a script pair. Not part of what is learned.
    """

    prompt: str
    answer: str
    parent: str = ""


# ----------------------------------------------------------------------------------------------
# Pairs from the baselines
# ----------------------------------------------------------------------------------------------

_SEED_NAMES = ("SEED", "RANDOM_STATE", "RANDOM_SEED")
_SCALE_FACTORS = (0.1, 0.3, 0.5, 2.0, 3.0, 10.0)


def _sig3(x: float) -> float:
    return float(f"{x:.3g}")


def plausible_values(name: str, value: Any, choices: Sequence[Any] = ()) -> list[Any]:
    """Other values a practitioner might try for a constant, same type, never ``value`` itself.

    ``choices``: the values the constant declares in its comment: a string's
    (:func:`rpg_llm.env.actions.declared_choices`, e.g. the model families of a ``MODEL``
    switch) or a number's (:func:`rpg_llm.env.actions.declared_numbers`, e.g. ``FOLDS``, whose
    neighbours 1 and -1 are not valid fold counts). When given, they are the only values offered.

    * bool: its negation;
    * a seed (``SEED``, ``RANDOM_STATE``, ``RANDOM_SEED``): the next nine integers;
    * int ``n >= 1``: for ``n <= 10`` the integers ``n-2 .. n+2`` (``>= 1``); else ``n`` scaled
      by 0.25, 0.5, 2 and 4, rounded; other ints: ``n +- 1``;
    * float ``x > 0``: ``x`` times 0.1, 0.3, 0.5, 2, 3 and 10 (3 significant digits); a fraction
      (``0 < x < 1``) only to values below 1; other floats: ``x +- 1``;
    * str: the other ``choices`` (none when the script declares none);
    * an int or float with ``choices``: the other ``choices`` (before the rules above);
    * anything else (None, containers): none (the builder leaves it alone).
    """
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, str) or (choices and isinstance(value, int | float)):
        return [c for c in choices if c != value]
    if isinstance(value, int):
        if name.upper() in _SEED_NAMES:
            return [value + k for k in range(1, 10)]
        if 1 <= value <= 10:
            out = [v for v in range(value - 2, value + 3) if v >= 1 and v != value]
        elif value > 10:
            out = sorted({max(1, round(value * f)) for f in (0.25, 0.5, 2.0, 4.0)} - {value})
        else:
            out = [value - 1, value + 1]
        return out
    if isinstance(value, float) and math.isfinite(value):
        if value > 0:
            out = sorted({_sig3(value * f) for f in _SCALE_FACTORS} - {value})
            if value < 1:
                out = [v for v in out if v < 1]
            return out
        return [value - 1.0, value + 1.0]
    return []


def edit_answer(changes: dict[str, Any]) -> str:
    """The edit-format answer for ``changes``: one fenced block of ``NAME = value`` lines."""
    if not changes:
        raise ValueError("an edit answer needs at least one change")
    lines = "\n".join(f"{name} = {format_value(v)}" for name, v in changes.items())
    return f"```python\n{lines}\n```"


def _edit_options(code: str) -> dict[str, list[Any]]:
    """Each editable constant of ``code`` that has plausible other values -> those values."""
    return {
        name: vals
        for name, c in editable_constants(code).items()
        if (vals := plausible_values(name, c.value, declared_choices(c) or declared_numbers(c)))
    }


def _random_changes(
    code: str, rng: random.Random, max_changes: int, switch: bool = False
) -> dict[str, Any]:
    """1 .. ``max_changes`` constants of ``code`` moved to plausible other values; with
    ``switch``, one of them is a declared switch that has other declared values (when ``code``
    has one)."""
    options = _edit_options(code)
    if not options:
        return {}
    forced = [n for n in declared_switches(code) if n in options] if switch else []
    k = rng.randint(1, min(max_changes, len(options)))
    if forced:
        first = rng.choice(forced)
        rest = [n for n in sorted(options) if n != first]
        names = [first, *rng.sample(rest, min(k - 1, len(rest)))]
    else:
        names = rng.sample(sorted(options), k)
    names.sort(key=list(options).index)
    return {name: rng.choice(options[name]) for name in names}


def build_sft_examples(
    description: str,
    baselines: Sequence[tuple[str, str]],
    action: str,
    timeout_s: float,
    n: int,
    seed: int = 0,
    max_prompt_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    max_changes: int = 2,
    moved_parent_fraction: float = 0.5,
    switch_fraction: float = 0.25,
) -> list[SFTExample]:
    """``n`` prompt -> answer pairs from a task's baseline scripts, in the given action format.

    Args:
        description: the competition description (as the loop's prompts show it; ``""`` for
            none).
        baselines: ``(name, code)`` of the task's baselines
            (:func:`rpg_llm.env.tasks.baseline_solutions`).
        action: ``"edit"`` or ``"script"``.
        timeout_s: execution limit shown in the prompt (seconds, > 0).
        n: number of pairs (>= 1). Baselines are used in turn.
        seed: seeds the choice of constants, values and moved parents.
        max_prompt_tokens, count_tokens: the prompt budget and counter, as in the loop.
        max_changes: an edit answer changes 1 .. ``max_changes`` constants.
        moved_parent_fraction: edit format: the share of pairs whose parent is the baseline with
            its constants already moved to other plausible values (the rest: as shipped).
        switch_fraction: edit format: the share of pairs forced to change one of their
            parent's declared switches that has other declared values
            (:func:`rpg_llm.env.actions.declared_switches`, e.g. the model family), so that
            the sampled policy proposes family changes at all; the other pairs may change a
            switch too, drawn like any constant (one constant of the ~12 on the frontier
            tasks' ``family`` scripts, so about one answer in eight). 0 draws no extra random
            number: the pairs are those of a build without forced switches.

    Returns:
        The pairs; an edit answer always parses (:func:`rpg_llm.env.actions.parse_action`) against
        its prompt's parent and changes at least one value.

    Raises:
        ValueError: unknown action, ``n < 1``, no baseline (or, for edit, none with editable
            constants), bad fraction.
    """
    if action not in ACTION_FORMATS:
        raise ValueError(f"action must be one of {', '.join(ACTION_FORMATS)}, got {action!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for name, frac in (
        ("moved_parent_fraction", moved_parent_fraction),
        ("switch_fraction", switch_fraction),
    ):
        if not (isinstance(frac, int | float) and not isinstance(frac, bool) and 0 <= frac <= 1):
            raise ValueError(f"{name} must lie in [0, 1], got {frac!r}")
    if max_changes < 1:
        raise ValueError(f"max_changes must be >= 1, got {max_changes}")
    if not baselines:
        raise ValueError("no baseline scripts to build SFT pairs from")
    rng = random.Random(seed)
    out: list[SFTExample] = []
    if action == "script":
        prompt = base_prompt(description, timeout_s)
        for i in range(n):
            _, code = baselines[i % len(baselines)]
            out.append(SFTExample(prompt, f"```python\n{code.rstrip()}\n```"))
        return out
    usable = [
        (name, code)
        for name, code in editable_baselines(baselines)
        if _random_changes(code, rng, 1)
    ]
    if not usable:
        raise ValueError("no baseline has a constant with plausible other values")
    for i in range(n):
        _, parent = usable[i % len(usable)]
        if rng.random() < moved_parent_fraction:
            parent = apply_edit(parent, _random_changes(parent, rng, max_changes))
        switch = switch_fraction > 0 and rng.random() < switch_fraction
        changes = _random_changes(parent, rng, max_changes, switch)
        prompt = edit_prompt(
            description, parent, BASELINE_OUTCOME, timeout_s, max_prompt_tokens, count_tokens
        )
        out.append(SFTExample(prompt, edit_answer(changes), parent))
    return out


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------


def tokenize_example(
    tokenizer: Any, example: SFTExample, max_prompt_tokens: int | None = None
) -> tuple[list[int], int]:
    """Token ids of ``chat(prompt) + answer + EOS`` and the number of prompt tokens.

    The prompt goes through :func:`rpg_llm.learner.policy.chat_prompt_ids` (the sampler's own prompt
    ids); the answer is tokenized without special tokens and closed with the tokenizer's EOS,
    so the model learns to stop where the sampler stops.
    """

    prompt_ids = chat_prompt_ids(tokenizer, example.prompt, max_prompt_tokens)
    answer_ids = tokenizer(example.answer, add_special_tokens=False)["input_ids"]
    return prompt_ids + list(answer_ids) + [tokenizer.eos_token_id], len(prompt_ids)


def _collate(
    rows: Sequence[tuple[list[int], int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 off the answer)."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (row, n_prompt) in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        labels[i, n_prompt : len(row)] = torch.tensor(row[n_prompt:])
    return ids.to(device), mask.to(device), labels.to(device)


def _loss_sum(model: Any, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor):
    """Summed answer-token cross-entropy and the number of answer tokens.

    The vocabulary projection runs only at the positions that predict an answer token
    (``transformers``' boolean ``logits_to_keep``): the prompt positions' logits -- ~90 % of a
    ``[B, L, V]`` float32 tensor and of the ``lm_head`` work, forward and backward -- are never
    formed. The loss is the same sum over the same positions as with full logits.
    """
    target = labels[:, 1:]
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = target != -100  # position t predicts token t + 1
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=keep).logits
    logits = logits.reshape(-1, logits.shape[-1])  # [N answer tokens, V]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    loss = torch.nn.functional.cross_entropy(logits, target[target != -100], reduction="sum")
    return loss, int((target != -100).sum())


def accumulate_answer_gradient(
    model: Any,
    rows: Sequence[tuple[list[int], int]],
    pad_id: int,
    device: torch.device,
    micro_batch_size: int = 1,
) -> float:
    """Backpropagate the mean answer-token cross-entropy of ``rows``, ``micro_batch_size`` rows
    per forward/backward pass; returns that mean (nats per answer token).

    Each micro-batch's summed loss is divided by the token count of *all* rows before its
    backward pass, so the accumulated gradient is the one of the whole batch's mean (rows do
    not interact: causal attention, right padding, dropout off), while only one micro-batch's
    activations are alive at a time (the CPU default's SFT: 4 rows of ~380 tokens; activations
    about a quarter) and no padding is computed.

    Args:
        model: the causal LM (gradients accumulate into its parameters' ``.grad``).
        rows: ``(token ids, prompt length)`` pairs from :func:`tokenize_example`.
        pad_id: padding token id.
        device: where the tensors go.
        micro_batch_size: rows per pass (>= 1).

    Raises:
        ValueError: no rows, no answer token, or ``micro_batch_size < 1``.
    """
    if not rows:
        raise ValueError("no rows to train on")
    if isinstance(micro_batch_size, bool) or not isinstance(micro_batch_size, int):
        raise ValueError(f"micro_batch_size must be an int >= 1, got {micro_batch_size!r}")
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be an int >= 1, got {micro_batch_size!r}")
    n_total = sum(len(ids) - n_prompt for ids, n_prompt in rows)
    if n_total < 1:
        raise ValueError("the rows hold no answer token")
    total = 0.0
    for start in range(0, len(rows), micro_batch_size):
        batch = _collate(rows[start : start + micro_batch_size], pad_id, device)
        loss_sum, _ = _loss_sum(model, *batch)
        (loss_sum / n_total).backward()
        total += float(loss_sum.detach())
    return total / n_total


def _check_examples(examples: Sequence[SFTExample]) -> None:
    if not examples:
        raise ValueError("no SFT examples")
    for i, ex in enumerate(examples):
        if not isinstance(ex, SFTExample) or not ex.answer:
            raise ValueError(f"examples[{i}] must be an SFTExample with a non-empty answer")


@torch.no_grad()
def answer_loss(
    policy: Any,
    examples: Sequence[SFTExample],
    model: Any = None,
    batch_size: int = 4,
    max_prompt_tokens: int | None = None,
) -> float:
    """Mean cross-entropy (nats per answer token, EOS included) of ``examples`` under the model.

    Eval mode (dropout off). ``model`` defaults to ``policy.model``.
    """
    _check_examples(examples)
    model = policy.model if model is None else model
    was_training = model.training
    model.eval()
    rows = [tokenize_example(policy.tokenizer, ex, max_prompt_tokens) for ex in examples]
    total, count = 0.0, 0
    for lo in range(0, len(rows), batch_size):
        batch = _collate(rows[lo : lo + batch_size], policy.tokenizer.pad_token_id, policy.device)
        loss, n = _loss_sum(model, *batch)
        total, count = total + float(loss), count + n
    model.train(was_training)
    return total / count


def sft_warm_start(
    policy: Any,
    examples: Sequence[SFTExample],
    steps: int,
    batch_size: int = 4,
    lr: float = 2e-5,
    seed: int = 0,
    weight_decay: float = 0.0,
    max_grad_norm: float = 1.0,
    max_prompt_tokens: int | None = None,
    model: Any = None,
    cpu_threads: int | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Supervised fine-tuning of the actor on ``examples``; the loss on answer tokens only.

    Each step draws ``batch_size`` examples (shuffled passes over the list, seeded), computes the
    mean cross-entropy over their answer tokens (EOS included; prompt tokens masked out), and
    takes one AdamW step with the global gradient norm clipped to ``max_grad_norm``. Dropout is
    off (eval mode, gradients kept), as in the PPO update. The optimiser is discarded afterwards
    (PPO builds its own).

    Args:
        policy: tokenizer and device (and the model unless ``model`` is given).
        examples: pairs from :func:`build_sft_examples`.
        steps: optimiser steps (0: nothing happens, ``[]`` is returned).
        batch_size: examples per step.
        lr, weight_decay: AdamW settings.
        seed: seeds the order of the examples.
        max_grad_norm: gradient clipping threshold.
        max_prompt_tokens: prompt budget (as the loop's).
        model: the model to train in place (default ``policy.model``). Build the PPO trainer
            *after* this call, so that its frozen reference and its critic start from the
            fine-tuned weights.
        cpu_threads: torch threads while training on a CPU (None: leave as is).
        on_step: called with ``(step, loss)`` after each step (1-based), e.g. to log metrics.

    Returns:
        The loss of each step (nats per answer token, before that step's update), ``steps``
        floats.

    Raises:
        ValueError: ``steps < 0``, ``batch_size < 1``, ``lr <= 0`` or no / malformed examples.
    """

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    _check_examples(examples)
    if steps == 0:
        return []
    model = policy.model if model is None else model
    rows = [tokenize_example(policy.tokenizer, ex, max_prompt_tokens) for ex in examples]
    params = [p for p in model.parameters() if p.requires_grad]
    # foreach=False: the multi-tensor AdamW forms temporaries the size of all parameters at
    # once (~0.5 GB each for a 135M model in float32); the per-tensor loop needs one tensor's
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=False)
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []
    losses: list[float] = []
    threads = torch.get_num_threads()
    if cpu_threads is not None and policy.device.type == "cpu":
        torch.set_num_threads(cpu_threads)
    try:
        with update_mode(model):
            for step in range(1, steps + 1):
                picked = []
                while len(picked) < batch_size:
                    if not order:
                        order = torch.randperm(len(rows), generator=gen).tolist()
                    picked.append(rows[order.pop()])
                opt.zero_grad(set_to_none=True)
                loss = accumulate_answer_gradient(
                    model, picked, policy.tokenizer.pad_token_id, policy.device
                )
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                opt.step()
                losses.append(loss)
                if on_step is not None:
                    on_step(step, losses[-1])
    finally:
        torch.set_num_threads(threads)
        opt.zero_grad(set_to_none=True)
        del opt  # its moments are twice the model; PPO builds its own optimisers
        if policy.device.type == "cpu":
            release_host_memory()
    return losses


# ----------------------------------------------------------------------------------------------
# Measuring the format
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormatRates:
    """How sampled answers parse in the edit format.

    Attributes:
        n: answers sampled.
        in_format: fraction that parse as an edit (``parse_action(...).kind == "edit"``).
        changed: fraction that parse as an edit *and* change at least one value.
        switched: fraction that parse as an edit and change a declared switch of their parent
            (:func:`rpg_llm.env.actions.switch_changed`, e.g. ``MODEL``).
        scripts: fraction whose block is a whole script (run as a script).
        answers: the decoded answers.
    """

    n: int
    in_format: float
    changed: float
    switched: float
    scripts: float
    answers: tuple[str, ...]


def format_rates(
    policy: Any,
    prompts: Sequence[str],
    parents: Sequence[str],
    max_new_tokens: int = 48,
    temperature: float = 0.7,
    top_k: int = 20,
    top_p: float = 0.8,
    seed: int = 0,
    max_prompt_tokens: int | None = None,
    cpu_threads: int | None = 1,
    batch_size: int | None = None,
) -> FormatRates:
    """Sample one answer per prompt and parse it as an edit of the matching parent.

    Raises:
        ValueError: ``prompts`` and ``parents`` differ in length or are empty.
    """

    if not prompts or len(prompts) != len(parents):
        raise ValueError(
            f"need as many parents as prompts (>= 1), got {len(prompts)} and {len(parents)}"
        )
    q = [chat_prompt_ids(policy.tokenizer, p, max_prompt_tokens) for p in prompts]
    gen = generate(
        policy,
        q,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        cpu_threads=cpu_threads,
        batch_size=batch_size,
    )
    actions = [parse_action(t, "edit", p) for t, p in zip(gen.texts, parents, strict=True)]
    n = len(actions)
    switched = sum(
        a.kind == "edit" and switch_changed(p, a.script or "")
        for a, p in zip(actions, parents, strict=True)
    )
    return FormatRates(
        n=n,
        in_format=sum(a.kind == "edit" for a in actions) / n,
        changed=sum(a.kind == "edit" and bool(a.changed) for a in actions) / n,
        switched=switched / n,
        scripts=sum(a.kind == "script" for a in actions) / n,
        answers=tuple(gen.texts),
    )


# ----------------------------------------------------------------------------------------------
# python -m rpg_llm.learner.sft
# ----------------------------------------------------------------------------------------------


def _main(argv: Sequence[str] | None) -> int:
    import sys
    import tempfile
    from pathlib import Path

    p = ArgumentParser(
        prog="python -m rpg_llm.learner.sft",
        description="Edit-format rates of sampled answers before and after an SFT warm start.",
    )
    p.add_argument("--task", default="bbc-news-logloss", help="offline competition id")
    p.add_argument("--model", default=DEFAULT_MODEL, help="HF id or local folder")
    p.add_argument("--steps", type=int, default=30, help="SFT steps")
    p.add_argument("--batch-size", type=int, default=4, help="examples per SFT step")
    p.add_argument("--lr", type=float, default=2e-5, help="AdamW learning rate")
    p.add_argument("--pairs", type=int, default=64, help="SFT pairs built from the baselines")
    p.add_argument(
        "--switch-fraction",
        type=float,
        default=0.25,
        help="share of edit pairs that change a declared switch such as MODEL",
    )
    p.add_argument("--samples", type=int, default=16, help="answers sampled before and after")
    p.add_argument("--max-new-tokens", type=int, default=48, help="answer cap (tokens)")
    p.add_argument("--max-prompt-tokens", type=int, default=1024, help="prompt budget (tokens)")
    p.add_argument("--timeout", type=float, default=60.0, help="time limit shown (seconds)")
    p.add_argument("--no-description", action="store_true", help="leave the description out")
    p.add_argument("--seed", type=int, default=0, help="seed of pairs, order and sampling")
    p.add_argument("--data-root", default=None, help="competitions folder (default: a temp one)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--out", default=None, help="write the measurement as JSON here")
    args = p.parse_args(argv)
    for flag, value, ok in [
        ("--steps", args.steps, 0 <= args.steps <= 10**6),
        ("--batch-size", args.batch_size, 1 <= args.batch_size <= 4096),
        ("--lr", args.lr, args.lr > 0),
        ("--pairs", args.pairs, 1 <= args.pairs <= 10**6),
        ("--samples", args.samples, 1 <= args.samples <= 4096),
        ("--max-new-tokens", args.max_new_tokens, 1 <= args.max_new_tokens <= 10**6),
        ("--max-prompt-tokens", args.max_prompt_tokens, 256 <= args.max_prompt_tokens <= 10**6),
        ("--timeout", args.timeout, args.timeout > 0),
        ("--threads", args.threads, 1 <= args.threads <= 4096),
        ("--seed", args.seed, args.seed >= 0),
        ("--switch-fraction", args.switch_fraction, 0.0 <= args.switch_fraction <= 1.0),
    ]:
        if not (ok):
            raise UsageError(f"{flag}: invalid value {value!r}")
    comp_id = tasks.resolve_id(args.task)
    if comp_id not in tasks.list_offline_competitions():
        raise UsageError(f"--task: unknown offline competition {args.task!r}")
    try:
        resolve_model(args.model)
    except ValueError as err:
        raise UsageError(f"--model {args.model}: {err}") from None
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="rpg-sft-") as tmp:
        root = Path(args.data_root) if args.data_root else Path(tmp)
        comp = tasks.prepare(comp_id, root, leaderboard=False)
        description = "" if args.no_description else comp.description
    baselines = editable_baselines(tasks.baseline_solutions(comp_id))
    t0 = time.perf_counter()
    policy = load_policy(args.model, device="cpu")
    tok = policy.tokenizer

    def count(s: str) -> int:
        return len(tok(s, add_special_tokens=False)["input_ids"])

    budget = args.max_prompt_tokens - 32
    # the loop's first step: base prompts showing the baselines in turn
    parents = [baselines[i % len(baselines)][1] for i in range(args.samples)]
    prompts = [
        edit_prompt(description, code, BASELINE_OUTCOME, args.timeout, budget, count)
        for code in parents
    ]
    examples = build_sft_examples(
        description,
        baselines,
        "edit",
        args.timeout,
        args.pairs,
        seed=args.seed,
        max_prompt_tokens=budget,
        count_tokens=count,
        switch_fraction=args.switch_fraction,
    )
    kw = dict(max_new_tokens=args.max_new_tokens, seed=args.seed, max_prompt_tokens=None)

    def say(text: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {text}", file=sys.stderr, flush=True)

    say(f"sampling {args.samples} answers before SFT")
    before = format_rates(policy, prompts, parents, **kw)
    say(f"before: {before.in_format:.2f} in format, {before.changed:.2f} change a value")
    t1 = time.perf_counter()
    losses = sft_warm_start(
        policy,
        examples,
        args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        max_prompt_tokens=None,
        on_step=lambda k, loss: say(f"SFT step {k}/{args.steps}: loss {loss:.3f}"),
    )
    sft_s = time.perf_counter() - t1
    say(f"sampling {args.samples} answers after SFT")
    after = format_rates(policy, prompts, parents, **kw)
    result = {
        "task": comp_id,
        "model": args.model,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "pairs": args.pairs,
        "switch_fraction": args.switch_fraction,
        "pairs_switching": sum(
            switch_changed(e.parent, parse_action(e.answer, "edit", e.parent).script or "")
            for e in examples
        ),
        "samples": args.samples,
        "prompt_tokens": [len(tok(pr)["input_ids"]) for pr in prompts[: len(baselines)]],
        "before": {
            "in_format": before.in_format,
            "changed": before.changed,
            "switched": before.switched,
        },
        "after": {
            "in_format": after.in_format,
            "changed": after.changed,
            "switched": after.switched,
        },
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "losses": losses,
        "sft_seconds": sft_s,
        "total_seconds": time.perf_counter() - t0,
        "answers_before": list(before.answers),
        "answers_after": list(after.answers),
    }
    print(
        f"{comp_id}, {args.model}: {args.steps} SFT steps (batch {args.batch_size}, lr {args.lr:g})"
        f" in {sft_s:.0f} s; loss {result['loss_first'] or float('nan'):.3f} -> "
        f"{result['loss_last'] or float('nan'):.3f}"
    )
    for name, r in (("before", before), ("after", after)):
        print(
            f"{name:>6}: {round(r.in_format * r.n)} of {r.n} in the edit format, "
            f"{round(r.changed * r.n)} of {r.n} change a value, "
            f"{round(r.switched * r.n)} of {r.n} change a declared switch, "
            f"{round(r.scripts * r.n)} whole scripts"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rpg_llm.learner.sft``: see :func:`_main`'s ``--help``."""

    return run_cli("python -m rpg_llm.learner.sft", _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
