"""Prompts shown to the policy and extraction of the script from its answer.

Two prompts (paper, section 5; DESIGN.md section 7):

* the *base* prompt: the competition description and the execution rules (read ``./input/``,
  write ``./submission.csv``, time limit), asking for one fenced Python script;
* the *improve* prompt: the same, plus a parent script and its outcome text (score on success, the
  timeout, or the exception type, line and message), asking for an improved script.

The parent's code is cut to the prompt budget by :func:`truncate_code`, which keeps imports,
hyper-parameter assignments and the last statements and marks what it dropped. The answer's
script is the fenced code block found by :func:`rpg_llm.env.actions.extract_code` (none: the
sample is invalid).

For the ``edit`` action format (:mod:`rpg_llm.env.actions`) one more prompt, :func:`edit_prompt`:
the parent script, its outcome (score and time), and the list of its editable constants with
their current values, asking for one fenced block of ``NAME = <literal>`` lines. With an empty
buffer the parent is one of the task's baseline scripts (outcome :data:`BASELINE_OUTCOME`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any

from rpg_llm.env.actions import editable_constants, format_value

__all__ = [
    "base_prompt",
    "improve_prompt",
    "edit_prompt",
    "BASELINE_OUTCOME",
    "truncate_code",
    "OMITTED_MARK",
    "CONSTANTS_MARK",
]

OMITTED_MARK = "# ... [{n} lines omitted] ..."
BASELINE_OUTCOME = "not run yet (a baseline script)"

_RULES = (
    "Rules for the script:\n"
    "- It is run as `python solution.py` in an empty working folder, with no network access.\n"
    "- The competition data is in `./input/` (read-only).\n"
    "- It must write its predictions to `./submission.csv` in the format the description asks.\n"
    "- It is stopped after {timeout:g} seconds; faster scripts are better at the same score.\n"
    "- Use only common libraries (numpy, pandas, scikit-learn, scipy).\n"
    "Answer with the complete script in one fenced block: ```python ... ```"
)


def _check_text(name: str, value: str) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")


def base_prompt(description: str, timeout_s: float) -> str:
    """The prompt for a script from scratch.

    Args:
        description: the competition's description (markdown).
        timeout_s: execution time limit in seconds (> 0).

    Raises:
        ValueError: a non-string description or a non-positive timeout.
    """
    _check_text("description", description)
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    return (
        "You are an expert machine learning engineer. Write a Python script that solves this "
        "competition.\n\n"
        f"# Competition\n{description.strip()}\n\n" + _RULES.format(timeout=timeout_s)
    )


def improve_prompt(
    description: str,
    parent_code: str,
    outcome_text: str,
    timeout_s: float,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> str:
    """The prompt to improve a parent script, given how it went.

    Args:
        description: the competition's description.
        parent_code: the parent script.
        outcome_text: its outcome (e.g. ``"score 0.81 in 3.2 s"``, ``"timeout after 60 s"``,
            ``"ValueError at line 12: could not convert string to float"``).
        timeout_s: execution time limit in seconds.
        max_tokens: budget for the whole prompt (None: no truncation).
        count_tokens: token counter for the budget (default: characters / 4).

    Returns:
        The prompt; when over budget, the parent's code is cut by :func:`truncate_code` (and, if
        the rest alone is over budget, the description is cut at its end).
    """
    _check_text("parent_code", parent_code)
    _check_text("outcome_text", outcome_text)
    count = count_tokens or (lambda s: (len(s) + 3) // 4)
    head = base_prompt(description, timeout_s)

    def build(code: str, head: str = head) -> str:
        return (
            f"{head}\n\n# Previous attempt\n```python\n{code.rstrip()}\n```\n"
            f"Outcome of the previous attempt: {outcome_text.strip()}\n\n"
            "Write an improved script: a better score, or the same score in less time. If the "
            "previous attempt failed, fix the failure."
        )

    prompt = build(parent_code)
    if max_tokens is None or count(prompt) <= max_tokens:
        return prompt
    code_budget = max_tokens - count(build(""))
    if code_budget < _MIN_CODE_TOKENS:  # the description itself is too long: cut it
        cut_desc = _cut_description(
            description,
            lambda d: count(build("", base_prompt(d, timeout_s))),
            max_tokens - _MIN_CODE_TOKENS,
        )
        head = base_prompt(cut_desc, timeout_s)
        code_budget = max(_MIN_CODE_TOKENS, max_tokens - count(build("", head)))
    return build(truncate_code(parent_code, code_budget, count), head)


_MIN_CODE_TOKENS = 64
"""Room kept for the parent's code when a long description must be cut (tokens)."""


def _cut_description(description: str, cost: Callable[[str], int], budget: int) -> str:
    """The longest prefix of ``description`` (plus ``"\\n[...]"``) with ``cost <= budget``.

    Binary search over the prefix length (``cost`` grows with it), so any token counter works.
    """
    lo, hi = 0, len(description)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(description[:mid] + "\n[...]") <= budget:
            lo = mid
        else:
            hi = mid - 1
    return description[:lo] + "\n[...]"


_EDIT_RULES = (
    "Answer with one fenced block that sets new values for some of these constants, one line "
    "each, and nothing else:\n```python\nNAME = value\n```\n"
    "Only the names listed above; values are Python literals of the same type. The script "
    "itself stays as it is. Aim for a better score, or the same score in less time (it is "
    "stopped after {timeout:g} seconds)."
)


def edit_prompt(
    description: str,
    parent_code: str,
    outcome_text: str,
    timeout_s: float,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> str:
    """The prompt of the ``edit`` action format: new values for the parent's constants.

    Shows the competition description (omitted when ``description`` is empty), the parent
    script, its outcome (e.g. ``"score 0.081 (lower is better), ran 3.2 s"``, or
    :data:`BASELINE_OUTCOME` for the baseline of the base prompt), and every editable constant
    with its current value and its line comment (:func:`rpg_llm.env.actions.editable_constants`:
    the comment says what a knob controls and which values a switch takes, and it stays visible
    when the script is truncated), and asks for one fenced
    block of ``NAME = <literal>`` lines (parsed by :func:`rpg_llm.env.actions.parse_action`).

    A parent without editable constants gets :func:`improve_prompt` (a whole script is then
    the only possible answer, which the edit format runs as a script).

    Args:
        description: the competition's description (markdown; ``""`` leaves it out).
        parent_code: the script to edit (the complete one; only the shown copy is truncated).
        outcome_text: how the parent went (score and time on success).
        timeout_s: execution time limit in seconds (> 0).
        max_tokens: budget for the whole prompt (None: no truncation). Over budget, the shown
            script loses its constants' lines (the listing shows them; one
            :data:`CONSTANTS_MARK` line per run), a description that leaves less than 64
            tokens for the script is cut at its end, and the script is cut by
            :func:`truncate_code` to what remains (down to one omission line). The listing,
            outcome and answer rules are never cut, so a budget below their length returns a
            longer prompt: :func:`rpg_llm.loop.rollout.min_edit_prompt_tokens` finds the
            smallest budget that holds a task's baselines.
        count_tokens: token counter for the budget (default: characters / 4).

    Raises:
        ValueError: non-string inputs or a non-positive timeout.
    """
    _check_text("description", description)
    _check_text("parent_code", parent_code)
    _check_text("outcome_text", outcome_text)
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    constants = editable_constants(parent_code)
    if not constants:
        return improve_prompt(
            description, parent_code, outcome_text, timeout_s, max_tokens, count_tokens
        )
    count = count_tokens or (lambda s: (len(s) + 3) // 4)
    listing = "\n".join(
        f"- {c.name} = {format_value(c.value)}" + (f"  # {c.comment}" if c.comment else "")
        for c in constants.values()
    )

    def build(code: str, desc: str = description) -> str:
        head = (
            "You are an expert machine learning engineer. Improve this script for the "
            "competition by changing its constants.\n\n"
        )
        if desc.strip():
            head += f"# Competition\n{desc.strip()}\n\n"
        return (
            f"{head}# Script\n```python\n{code.rstrip()}\n```\n"
            f"Outcome of the script: {outcome_text.strip()}\n\n"
            f"Editable constants (current values):\n{listing}\n\n"
            + _EDIT_RULES.format(timeout=timeout_s)
        )

    prompt = build(parent_code)
    if max_tokens is None or count(prompt) <= max_tokens:
        return prompt
    shown = _without_constant_lines(parent_code, constants)  # the listing holds them
    desc = description
    if desc.strip() and max_tokens - count(build("")) < _MIN_CODE_TOKENS:
        desc = _cut_description(  # the description is too long: cut it
            description, lambda d: count(build("", d)), max_tokens - _MIN_CODE_TOKENS
        )
    # a tokenizer's count of the joined prompt can exceed the sum of its parts: shrink the
    # script's budget by the excess until the prompt fits (or the script is one omission line)
    code_budget = max_tokens - count(build("", desc))
    while True:
        prompt = build(truncate_code(shown, max(1, code_budget), count), desc)
        over = count(prompt) - max_tokens
        if over <= 0 or code_budget <= 1:
            return prompt
        code_budget -= over


CONSTANTS_MARK = "# ... [{n} constant lines: in the list below] ..."
"""What replaces a run of the editable constants' lines in a truncated edit prompt's script."""


def _without_constant_lines(code: str, constants: Mapping[str, Any]) -> str:
    """``code`` with the top-level assignments of ``constants`` (their whole line spans) replaced
    by one :data:`CONSTANTS_MARK` line per run of consecutive such lines; a line that also holds
    another statement (``LR = 0.1; fit()``) is kept."""
    names = set(constants)
    drop: set[int] = set()
    other: set[int] = set()
    for node in ast.parse(code).body:  # parses: editable_constants found the constants
        span = range(node.lineno - 1, node.end_lineno or node.lineno)
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in names for t in node.targets
        ):
            drop.update(span)
        else:
            other.update(span)
    drop -= other
    out: list[str] = []
    run = 0
    for i, line in enumerate([*_source_lines(code), ""]):
        if i in drop:
            run += 1
            continue
        if run:
            out.append(CONSTANTS_MARK.format(n=run))
            run = 0
        out.append(line)
    return "\n".join(out[:-1])


# ----------------------------------------------------------------------------------------------
# Truncation
# ----------------------------------------------------------------------------------------------

_CONSTANTS_MARK_RE = re.compile(re.escape(CONSTANTS_MARK).replace(r"\{n\}", r"\d+"))
_ASSIGN_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\s*(:[^=]+)?=\s*[-+\w.'\"()\[\], ]+$")
_IMPORT_RE = re.compile(r"^(import\s|from\s+\S+\s+import\s)")


def _priority_lines(code: str) -> tuple[list[str], set[int]]:
    """Lines of ``code`` and the indices of import / hyper-parameter lines (top level) and of
    :data:`CONSTANTS_MARK` lines."""
    lines = _source_lines(code)
    keep: set[int] = set()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in tree.body:
            span = range(node.lineno - 1, (node.end_lineno or node.lineno))
            if isinstance(node, ast.Import | ast.ImportFrom):
                keep.update(span)
            elif isinstance(node, ast.Assign | ast.AnnAssign) and _is_constant(node.value):
                keep.update(span)
    else:  # unparsable code: fall back to line patterns
        for i, line in enumerate(lines):
            if _IMPORT_RE.match(line) or _ASSIGN_RE.match(line):
                keep.add(i)
    keep.update(i for i, line in enumerate(lines) if _CONSTANTS_MARK_RE.fullmatch(line))
    return lines, keep


def _source_lines(code: str) -> list[str]:
    """The lines of ``code`` as Python numbers them (``ast`` line numbers): split at ``\n``,
    ``\r\n`` and ``\r`` only (``str.splitlines`` also splits at form feeds and Unicode line
    separators, which Python reads inside a line)."""
    lines = _NEWLINE_RE.split(code)
    return lines[:-1] if lines and lines[-1] == "" else lines


_NEWLINE_RE = re.compile(r"\r\n|\r|\n")


def _is_constant(node: ast.AST | None) -> bool:
    """A literal, or a tuple/list/dict/unary-op of literals (hyper-parameter style)."""
    if node is None:
        return False
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _is_constant(node.operand)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return all(_is_constant(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        pairs = zip(node.keys, node.values, strict=True)
        return all(_is_constant(k) and _is_constant(v) for k, v in pairs)
    return False


def truncate_code(code: str, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """Cut ``code`` to about ``max_tokens`` tokens, keeping what matters for an edit.

    Kept, in priority order: import statements, top-level hyper-parameter assignments (a name
    bound to a literal) and :data:`CONSTANTS_MARK` lines, then as many of the *last* lines as
    fit. Every dropped run of lines is replaced by one line ``# ... [N lines omitted] ...``.
    Code within budget is returned as is.

    Args:
        code: the script.
        max_tokens: token budget (>= 1).
        count_tokens: a token counter (e.g. the policy tokenizer's length).

    Raises:
        ValueError: ``max_tokens < 1``.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if count_tokens(code) <= max_tokens:
        return code
    lines, priority = _priority_lines(code)
    kept: set[int] = set()
    used = 0
    mark_cost = count_tokens(OMITTED_MARK.format(n=999) + "\n")

    def cost(i: int) -> int:
        return count_tokens(lines[i] + "\n")

    # priority lines first (in source order), leaving room for two omission marks
    for i in sorted(priority):
        c = cost(i)
        if used + c + 2 * mark_cost > max_tokens:
            break
        kept.add(i)
        used += c
    # then the tail, walking back from the last line
    for i in range(len(lines) - 1, -1, -1):
        if i in kept:
            continue
        c = cost(i)
        if used + c + 2 * mark_cost > max_tokens:
            break
        kept.add(i)
        used += c
    out: list[str] = []
    dropped = 0
    for i, line in enumerate(lines):
        if i in kept:
            if dropped:
                out.append(OMITTED_MARK.format(n=dropped))
                dropped = 0
            out.append(line)
        else:
            dropped += 1
    if dropped:
        out.append(OMITTED_MARK.format(n=dropped))
    return "\n".join(out)
