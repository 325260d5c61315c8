"""Rollout stage: parents -> prompts -> one response per prompt (paper Algorithm 1, lines 3-5).

Parents are the top-``B`` buffer entries by ``raw_reward - rho_hat * time`` (vanilla: raw reward;
DESIGN.md section 7); the base prompt while the buffer is empty. In the ``edit`` action format
(:mod:`rpg_llm.env.actions`) the prompt is :func:`rpg_llm.env.prompts.edit_prompt` of the parent's
stored script, and while the buffer is empty of one of the task's baselines with editable
constants (row ``i``: baseline ``i mod n``). Every row keeps its parent's code, which the
execution stage applies the edit to. Generation is seeded per step (and per process), so a step's
responses depend only on the run seed, the step and the policy.

A parent's outcome in its prompt ends with the time its reward was charged (``exec_time``, in the
run's time measure); the offline tasks' executor wall time (``", ran 3.2 s"``) is taken out of the
text. (A NanoGPT task's text keeps its own wall time and train time: they describe the run.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rpg_llm.env.actions import editable_baselines, editable_constants
from rpg_llm.env.outcome import RUN_TIME_RE
from rpg_llm.env.prompts import BASELINE_OUTCOME, base_prompt, edit_prompt, improve_prompt
from rpg_llm.learner.policy import chat_prompt_ids, generate
from rpg_llm.loop.types import ParentSource

__all__ = [
    "Rollout",
    "prompt_hash",
    "make_prompts",
    "parent_prompts",
    "generate_rollout",
    "CHAT_TEMPLATE_ROOM",
    "min_edit_prompt_tokens",
    "EDIT_VALUE_ROOM",
]

CHAT_TEMPLATE_ROOM = 32  # tokens kept free for the chat template around a prompt


@dataclass(frozen=True)
class Rollout:
    """The prompts and responses of one step (saved before execution, replayed on resume).

    Attributes:
        step: training step.
        prompts: ``B`` prompt texts; parent_ids: ``B`` buffer ids (None: the base prompt).
        query_ids, response_ids: ``B`` token-id lists (int).
        texts: ``B`` decoded responses.
        gen_seconds: wall time of generation, seconds (the slowest process).
        gen_tokens: response tokens in all.
        capped: responses that reached ``max_new_tokens`` (cut at the token cap).
        parent_codes: ``B`` parent scripts (None: the base prompt of the script format); the
            edit format applies each row's answer to its parent's script.
    """

    step: int
    prompts: list[str]
    parent_ids: list[int | None]
    query_ids: list[list[int]]
    response_ids: list[list[int]]
    texts: list[str]
    gen_seconds: float
    gen_tokens: int
    capped: int = 0
    parent_codes: list[str | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Rollout:
        """From :meth:`to_dict` or a rollout file of an older run (no ``capped``)."""
        return cls(**{k: d[k] for k in d if k in cls.__dataclass_fields__})


def prompt_hash(text: str) -> str:
    """First 16 hex digits of the prompt's SHA-256 (stored with each sample)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _outcome_for_prompt(sample: Any) -> str:
    """``"<outcome text>, ran <exec_time> s"``: the executor's own wall time is taken out of the
    text, so the prompt states only the time the reward was charged."""
    text = RUN_TIME_RE.sub("", sample.outcome_text or sample.status)
    return f"{text}, ran {sample.exec_time:.1f} s"


def min_edit_prompt_tokens(
    tokenizer: Any, describe: bool, scripts: list[tuple[str, str]], timeout_s: float
) -> tuple[int, str]:
    """The smallest ``max_prompt_tokens`` at which the edit prompt of every script, and of its
    children, keeps what :func:`rpg_llm.env.prompts.edit_prompt` never cuts (the constants
    listing, the parent's outcome and the answer rules), with :data:`CHAT_TEMPLATE_ROOM` for the
    chat template and :data:`EDIT_VALUE_ROOM` tokens per constant for a child's longer values
    (``0.0125`` for ``0.01``); the script and the description are then cut to one omission line
    and ``[...]``. A child whose values are much longer than that (twelve-digit floats
    everywhere) can still exceed it, and :func:`rpg_llm.learner.policy.chat_prompt_ids` then
    keeps the prompt's first and last tokens.

    Args:
        tokenizer: the policy's tokenizer (``tokenizer(text)["input_ids"]``).
        describe: whether the prompts show the competition description (cut to ``[...]`` at
            this budget, so its text does not matter).
        scripts: ``(name, code)``; scripts without editable constants are skipped.
        timeout_s: the time limit stated in the prompt, seconds.

    Returns:
        ``(tokens, name)``: the budget and the script that needs it (``(0, "")`` when no script
        has editable constants).
    """

    def count(s: str) -> int:
        return len(tokenizer(s, add_special_tokens=False)["input_ids"])

    need, worst = 0, ""
    for name, code in scripts:
        constants = editable_constants(code)
        if not constants:
            continue
        room = CHAT_TEMPLATE_ROOM + EDIT_VALUE_ROOM * len(constants)
        for outcome in (BASELINE_OUTCOME, _LONG_OUTCOME):
            prompt = edit_prompt("[...]" if describe else "", code, outcome, timeout_s, 1, count)
            tokens = count(prompt) + room
            if tokens > need:
                need, worst = tokens, name
    return need, worst


EDIT_VALUE_ROOM = 2
"""Tokens per editable constant that :func:`min_edit_prompt_tokens` keeps for a child's values
being longer than its baseline's."""


_LONG_OUTCOME = "score -0.000123457 (higher is better), beats 100% of the leaderboard, ran 1234.5 s"
"""A parent's outcome text of the longest success form (the floor of a parent's prompt)."""


def make_prompts(
    parents: ParentSource,
    batch_size: int,
    rho: float | None,
    description: str,
    timeout_s: float,
    max_prompt_tokens: int,
    tokenizer: Any,
    action: str = "script",
    baselines: list[tuple[str, str]] | None = None,
) -> tuple[list[str], list[int | None], list[str | None]]:
    """``B`` prompts, their parents' ids and their parents' scripts.

    Args:
        rho: ``rho_hat`` for the RPG parent ranking; None ranks by raw reward (vanilla).
        description: the competition description (``""``: left out of the prompts).
        timeout_s: the time limit stated in the prompt, seconds.
        max_prompt_tokens: prompt budget in tokens (the parent's code is cut to fit).
        action: ``"script"`` or ``"edit"`` (:data:`rpg_llm.env.actions.ACTION_FORMATS`).
        baselines: ``(name, code)`` of the task's baselines: the parents of the edit format's
            base prompt (read only while the buffer is empty).

    Parents are ``parents.top(B, rho)`` (the parent buffer,
    :class:`rpg_llm.loop.parents.ParentPool`); in the edit format only among the scripts that
    have editable constants (all of them when none has).

    Raises:
        ValueError: edit format, empty buffer and no baseline with editable constants.
    """

    def count(s: str) -> int:
        return len(tokenizer(s, add_special_tokens=False)["input_ids"])

    budget = max_prompt_tokens - CHAT_TEMPLATE_ROOM
    # the edit format needs a parent with constants to edit: a script without any (e.g. a
    # constant-prediction baseline, often the fastest and so RPG's first choice) would ask for
    # a whole script, which a short answer cap cannot hold
    eligible = (lambda s: bool(editable_constants(s.code))) if action == "edit" else None
    chosen = parents.top(batch_size, rho, eligible=eligible)
    if not chosen:
        if action != "edit":
            prompt = base_prompt(description, timeout_s)
            return [prompt] * batch_size, [None] * batch_size, [None] * batch_size
        bases = editable_baselines(baselines or [])
        base_codes = [bases[i % len(bases)][1] for i in range(batch_size)]
        prompts = [
            edit_prompt(description, c, BASELINE_OUTCOME, timeout_s, budget, count)
            for c in base_codes
        ]
        return prompts, [None] * batch_size, list[str | None](base_codes)
    prompts = parent_prompts(chosen, description, timeout_s, max_prompt_tokens, tokenizer, action)
    return prompts, [p.id for p in chosen], [p.code for p in chosen]


def parent_prompts(
    parents: list[Any],
    description: str,
    timeout_s: float,
    max_prompt_tokens: int,
    tokenizer: Any,
    action: str = "script",
) -> list[str]:
    """The improve prompt (``action="script"``) or edit prompt (``"edit"``) of each stored
    parent sample: its script, its outcome and measured time, within ``max_prompt_tokens``
    tokens (the parent's code is cut to fit)."""

    def count(s: str) -> int:
        return len(tokenizer(s, add_special_tokens=False)["input_ids"])

    budget = max_prompt_tokens - CHAT_TEMPLATE_ROOM
    make = edit_prompt if action == "edit" else improve_prompt
    return [
        make(description, p.code, _outcome_for_prompt(p), timeout_s, budget, count) for p in parents
    ]


def generate_rollout(
    step: int,
    prompts: list[str],
    parent_ids: list[int | None],
    policy: Any,
    model: Any,
    sampling: Any,
    seed: int,
    dist: Any,
    cpu_threads: int | None,
    parent_codes: Sequence[str | None] | None = None,
) -> Rollout:
    """Generate one response per prompt, each process its rows, gathered in row order.

    Args:
        policy: :class:`rpg_llm.learner.policy.Policy` (tokenizer, device); model: the module to
        sample
            from (the PPO actor). sampling: :class:`rpg_llm.config.SamplingConfig`.
        seed: the run seed (the step's generator is seeded from it, the step and the rank).
        dist: :class:`rpg_llm.loop.dist.Dist`.
        parent_codes: the rows' parent scripts (kept in the rollout for the execution stage).
    """
    tok = policy.tokenizer
    query_ids = [chat_prompt_ids(tok, p, sampling.max_prompt_tokens) for p in prompts]
    mine = dist.shard(len(prompts))
    gen = generate(
        policy,
        [query_ids[i] for i in mine],
        max_new_tokens=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        seed=seed * 1_000_003 + step + 7919 * dist.rank,
        model=model,
        batch_size=sampling.gen_batch_size,
        cpu_threads=cpu_threads,
    )
    responses: list[Any] = [None] * len(prompts)
    texts: list[Any] = [None] * len(prompts)
    seconds = 0.0
    for rows, resp, txt, sec in dist.gather((mine, gen.response_ids, gen.texts, gen.seconds)):
        for i, r, t in zip(rows, resp, txt, strict=True):
            responses[i], texts[i] = r, t
        seconds = max(seconds, sec)
    return Rollout(
        step=step,
        prompts=prompts,
        parent_ids=parent_ids,
        query_ids=query_ids,
        response_ids=responses,
        texts=texts,
        gen_seconds=seconds,
        gen_tokens=sum(len(r) for r in responses),
        capped=sum(len(r) >= sampling.max_new_tokens for r in responses),
        parent_codes=list(parent_codes) if parent_codes is not None else None,
    )
