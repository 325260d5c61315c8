"""Action formats: how a model answer becomes the script that runs.

Two formats (``--action script|edit``):

* ``script`` (the paper's, section 5): the answer's fenced code block is the whole script.
* ``edit``: the answer's fenced block holds top-level assignments ``NAME = <literal>``, one per
  line, that replace the parent script's *editable constants* (:func:`editable_constants`: a
  top-level ``NAME = <literal>`` assigned exactly once, e.g. ``C = 10.0`` or
  ``MAX_FEATURES = 5000`` in the offline baselines). The rest of the parent's source is kept byte
  for byte. An unknown name, a non-literal value, a value of the wrong type or a syntax error
  makes the sample invalid, with an outcome text naming the edit's line and the reason. An answer
  whose block holds a whole script (any statement other than an assignment: an import, a
  function, a call ...) is run as a script.

Both formats return the complete script that will run (:class:`Action.script`); the buffer
stores that script, so an edited child is a full script that later edits start from.

Type rule of an edit (checked before anything runs, so a wrong type costs no execution time):
the new value keeps the kind of the current one -- bool stays bool, str stays str, a tuple /
list / dict / set stays the same container; a float constant accepts an int literal (``C = 1``:
Python's numeric tower, every consumer of a float accepts an int); an int constant does **not**
accept a float (``N_ESTIMATORS = 100.0`` is rejected: counts, seeds and sizes must be ints in
scikit-learn and numpy, so the run would fail after spending its time); ``None`` may replace or be
replaced by any value (``max_depth=None`` is the usual "no limit"). Floats must be finite.
"""

from __future__ import annotations

import ast
import io
import math
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

__all__ = [
    "ACTION_FORMATS",
    "ActionFormat",
    "Action",
    "Constant",
    "EditError",
    "NO_BLOCK_TEXT",
    "editable_constants",
    "declared_choices",
    "declared_numbers",
    "declared_switches",
    "switch_changed",
    "parse_edit",
    "apply_edit",
    "is_edit_block",
    "extract_code",
    "parse_action",
    "editable_baselines",
    "format_value",
]

ActionFormat = Literal["script", "edit"]
ACTION_FORMATS: tuple[str, ...] = ("script", "edit")

NO_BLOCK_TEXT = "invalid: the answer had no fenced ```python code block"


class Constant(NamedTuple):
    """One editable top-level constant of a script.

    Attributes:
        name: the assigned name.
        value: its value (``ast.literal_eval`` of the right-hand side).
        line: 1-based line of the assignment.
        start, end: byte offsets (UTF-8) of the value expression in the source: replacing
            ``source_bytes[start:end]`` changes the value and nothing else.
        comment: the comment that ends the assignment's last line, without ``#`` and stripped
            (``""`` for none), e.g. ``'one of "hgb", "knn", "ridge"'`` or ``"rf: trees"``.
    """

    name: str
    value: Any
    line: int
    start: int
    end: int
    comment: str = ""


class EditError(ValueError):
    """An edit that cannot be applied; ``line`` is the 1-based line of the edit block (0: none).

    ``str(error)`` is the outcome text shown to the policy.
    """

    def __init__(self, line: int, reason: str, source_line: str = ""):
        self.line = line
        self.reason = reason
        where = f"line {line}" if line else "the edit"
        shown = f" `{source_line.strip()}`" if source_line.strip() else ""
        super().__init__(f"invalid edit, {where}{shown}: {reason}")


@dataclass(frozen=True)
class Action:
    """What an answer becomes.

    Attributes:
        kind: ``"edit"`` (constants replaced in the parent), ``"script"`` (the block is the
            script) or ``"invalid"`` (nothing runs).
        script: the complete script that will run (None when invalid); the buffer stores it.
        outcome_text: when invalid, the reason shown to the policy (names the line); else None.
        changes: for an edit, ``name -> new value`` of every assignment in the block (values
            equal to the current ones included); empty otherwise.
        changed: for an edit, the names whose value differs from the parent's (``10 == 10.0``
            counts as unchanged); empty otherwise.
    """

    kind: str
    script: str | None
    outcome_text: str | None = None
    changes: dict[str, Any] = field(default_factory=dict)
    changed: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        """True when a script will run."""
        return self.script is not None


def _line_offsets(source: bytes) -> list[int]:
    """Byte offset of the start of each line (index 0 = line 1)."""
    offsets = [0]
    for i, b in enumerate(source):
        if b == 0x0A:
            offsets.append(i + 1)
    return offsets


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _assigned_names(node: ast.stmt) -> list[str]:
    """Names bound by a top-level assignment statement (plain names only)."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    names: list[str] = []
    for t in targets:
        for sub in ast.walk(t):
            if isinstance(sub, ast.Name):
                names.append(sub.id)
    return names


def editable_constants(code: str) -> dict[str, Constant]:
    """The editable constants of ``code``, in source order.

    A constant is editable when the script's top level assigns it exactly once, as
    ``NAME = <literal>`` (one plain name target; ``ast.literal_eval`` accepts the right-hand side:
    numbers, strings, bools, None, and tuples / lists / dicts / sets of those, negative numbers
    included). A name also bound elsewhere at the top level (a second assignment, ``+=``, an
    annotated assignment, a loop target ...) is not editable.

    Args:
        code: Python source.

    Returns:
        ``name -> Constant``; empty for code that does not parse or has no such assignment.
    """
    if not isinstance(code, str):
        raise ValueError(f"code must be a string, got {type(code).__name__}")
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {}
    counts: dict[str, int] = {}
    comments = _line_comments(code)
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            bound = _assigned_names(node)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound = [(a.asname or a.name).split(".")[0] for a in node.names]
        else:
            bound = [
                n.id
                for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            ]
            # names bound inside functions / classes are local to them
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound = [node.name]
        for name in bound:
            counts[name] = counts.get(name, 0) + 1
    offsets = _line_offsets(code.encode())
    out: dict[str, Constant] = {}
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            continue
        name = node.targets[0].id
        ok, value = _literal(node.value)
        if not ok or counts.get(name) != 1:
            continue
        v = node.value
        start = offsets[v.lineno - 1] + v.col_offset
        end = offsets[(v.end_lineno or v.lineno) - 1] + (v.end_col_offset or 0)
        last = v.end_lineno or v.lineno
        out[name] = Constant(name, value, node.lineno, start, end, comments.get(last, ""))
    return out


def _line_comments(code: str) -> dict[int, str]:
    """1-based line -> the text of the comment on it (without ``#``, stripped); ``{}`` when the
    source does not tokenize."""
    out: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string[1:].strip()
    except (tokenize.TokenError, SyntaxError):
        return {}
    return out


_QUOTED_RE = re.compile(r"\"([^\"\\]*)\"|'([^'\\]*)'")


def declared_choices(constant: Constant) -> tuple[str, ...]:
    """The values a string constant declares for itself in its line comment.

    A script states the options of a switch beside it, e.g.
    ``MODEL = "ridge"  # one of "hgb", "knn", "rf", "ridge", "tree"``: the choices are the quoted
    strings of the comment (either quote), in order, without repeats, when the constant's value
    is a ``str``, the comment quotes at least two strings and the current value is one of them
    (so a comment that merely quotes something is not read as a list of options).

    Returns:
        The declared values (the current one included), or ``()`` when there are none.
    """
    if not isinstance(constant.value, str) or not constant.comment:
        return ()
    found = [a or b for a, b in _QUOTED_RE.findall(constant.comment)]
    choices = tuple(dict.fromkeys(found))
    if len(choices) < 2 or constant.value not in choices:
        return ()
    return choices


_NUMBER = r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
_LIST_SEP = r"(?:\s*,\s*(?:or\s+)?|\s+or\s+)"  # "1, 2", "1 or 2", "1, 2, or 3"
_ONE_OF_NUMBERS_RE = re.compile(
    rf"\bone of\s+({_NUMBER}(?:{_LIST_SEP}{_NUMBER})+)(?![\w%]|\.\d)", re.IGNORECASE
)


def declared_numbers(constant: Constant) -> tuple[int | float, ...]:
    """The values a numeric constant declares for itself in its line comment.

    A script states the sensible settings of a knob whose neighbours are not all valid, e.g.
    ``FOLDS = 0  # cross-validated score first: one of 0, 3, 5 (0: none)`` (``cv=1`` and
    ``cv=-1`` fail): the numbers after ``one of`` (any case), separated by commas and/or
    ``or`` (``1, 2, or 3``), in order, without repeats, when the constant is an ``int`` (every
    listed number written as an integer) or a ``float`` (every listed number finite), not a
    ``bool``; at least two listed, the current value among them, and no unit glued to the last
    (``one of 5, 10%`` declares nothing). Unlike :func:`declared_choices` these are not switches:
    edits may still set other values.

    Returns:
        The declared values (the current one included), or ``()`` when there are none.
    """
    value = constant.value
    if isinstance(value, bool) or not isinstance(value, int | float) or not constant.comment:
        return ()
    found = _ONE_OF_NUMBERS_RE.search(constant.comment)
    if found is None:
        return ()
    texts = re.findall(_NUMBER, found.group(1))
    numbers: list[int | float]
    if isinstance(value, int):
        if not all(re.fullmatch(r"[-+]?\d+", x) for x in texts):
            return ()  # an int knob that lists fractions or exponents declares nothing usable
        numbers = [int(x) for x in texts]
    else:
        numbers = [float(x) for x in texts]
        if not all(math.isfinite(n) for n in numbers):
            return ()
    values = tuple(dict.fromkeys(numbers))
    if len(values) < 2 or value not in values:
        return ()
    return values


def declared_switches(code: str) -> list[str]:
    """Names of the top-level constants of ``code`` that declare their values
    (:func:`declared_choices`, e.g. the model family switch
    ``MODEL = "hgb"  # one of "hgb", "rf", ...``), in source order; ``[]`` when ``code`` does
    not parse."""
    return [name for name, c in editable_constants(code).items() if declared_choices(c)]


def switch_changed(parent_code: str, child_code: str) -> bool:
    """Whether ``child_code`` changed a declared switch of ``parent_code``
    (:func:`declared_switches`): the child parses and gives the switch another value, declared
    or not, or no longer assigns it (a whole new script). False when the parent declares no
    switch or the child does not parse."""
    switches = {
        n: c.value for n, c in editable_constants(parent_code).items() if declared_choices(c)
    }
    if not switches:
        return False
    child = editable_constants(child_code)  # {} when the child does not parse
    if not child:
        return False
    return any(n not in child or child[n].value != v for n, v in switches.items())


def format_value(value: Any) -> str:
    """Source text of a literal value (``repr``; round-trips through ``ast.literal_eval``)."""
    return repr(value)


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return type(value).__name__


def _check_value(name: str, old: Any, new: Any) -> str | None:
    """The reason ``new`` may not replace ``old`` (None: it may); see the module's type rule."""

    def finite(v: Any) -> bool:
        if isinstance(v, float):
            return math.isfinite(v)
        if isinstance(v, tuple | list | set | frozenset):
            return all(finite(e) for e in v)
        if isinstance(v, dict):
            return all(finite(k) and finite(e) for k, e in v.items())
        return True

    if not finite(new):
        return f"{name} must be finite, got {new!r}"
    k_old, k_new = _kind(old), _kind(new)
    if "None" in (k_old, k_new) or k_old == k_new or (k_old == "float" and k_new == "int"):
        return None
    if k_old == "int" and k_new == "float":
        return f"{name} is an int (now {old!r}); got the float {new!r}"
    return f"{name} is a {k_old} (now {old!r}); got a {k_new}"


_SCRIPT_LINE_RE = re.compile(
    r"^(?:(?:import|from|def|class|if|elif|else|for|while|with|try|except|finally|async|return|"
    r"raise|assert|del|global|print)\b|@|[A-Za-z_][\w.]*\s*\(|[A-Za-z_]\w*\.\w)"
)


def is_edit_block(block: str) -> bool:
    """Whether a fenced block is meant as an edit rather than a whole script.

    A block that parses is an edit when every top-level statement is an assignment (``=``,
    ``:``-annotated or augmented); a block of comments only counts as an (empty, invalid) edit.
    A block that does not parse is a script attempt when a line at column 0 starts like a
    script statement (a keyword such as ``import`` / ``def`` / ``for``, a decorator, a call
    ``name(`` or an attribute ``name.attr``); else it is a broken edit (invalid, with the line).
    """
    try:
        tree = ast.parse(block)
    except SyntaxError:
        lines = [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        return not any(_SCRIPT_LINE_RE.match(ln) for ln in lines)
    return all(isinstance(s, ast.Assign | ast.AnnAssign | ast.AugAssign) for s in tree.body)


def parse_edit(block: str, constants: dict[str, Constant]) -> dict[str, Any]:
    """Parse an edit block against a parent's editable constants.

    Args:
        block: the fenced block's text: lines ``NAME = <literal>``; blank lines and comments are
            allowed; a literal may span lines.
        constants: the parent's :func:`editable_constants`.

    Returns:
        ``name -> new value``, in the block's order.

    Raises:
        EditError: a syntax error; a statement that is not ``NAME = <literal>`` (several targets,
            ``+=``, an annotation, a tuple target); an unknown name; a non-literal value; a value
            of the wrong type (module docstring); a name assigned twice; no assignment at all.
            The message names the block's line and the reason.
    """
    lines = block.splitlines()

    def src(lineno: int) -> str:
        return lines[lineno - 1] if 0 < lineno <= len(lines) else ""

    try:
        tree = ast.parse(block)
    except SyntaxError as exc:
        line = exc.lineno or 0
        raise EditError(line, f"syntax error: {exc.msg}", src(line)) from None
    if not tree.body:
        raise EditError(0, "the block holds no assignment (expected lines NAME = <literal>)")
    known = ", ".join(constants) or "none"
    changes: dict[str, Any] = {}
    for node in tree.body:
        line = node.lineno
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            raise EditError(line, "not of the form NAME = <literal>", src(line))
        name = node.targets[0].id
        if name not in constants:
            raise EditError(line, f"unknown constant {name} (editable: {known})", src(line))
        if name in changes:
            raise EditError(line, f"{name} is assigned twice", src(line))
        ok, value = _literal(node.value)
        if not ok:
            raise EditError(
                line,
                f"the value of {name} is not a literal (a number, string, bool, None, or a "
                "tuple/list/dict of those)",
                src(line),
            )
        reason = _check_value(name, constants[name].value, value)
        if reason is not None:
            raise EditError(line, reason, src(line))
        changes[name] = value
    return changes


def apply_edit(parent_code: str, changes: dict[str, Any]) -> str:
    """The parent script with each named constant's value replaced by ``format_value(new)``.

    Every byte outside the replaced value expressions is kept as it was (comments on the same
    line, the rest of the script, line endings).

    Raises:
        ValueError: a name in ``changes`` is not an editable constant of ``parent_code``.
    """
    constants = editable_constants(parent_code)
    unknown = [n for n in changes if n not in constants]
    if unknown:
        raise ValueError(
            f"not editable constants of the parent: {', '.join(unknown)} "
            f"(editable: {', '.join(constants) or 'none'})"
        )
    data = parent_code.encode()
    # replace from the end so earlier offsets stay valid
    for name in sorted(changes, key=lambda n: constants[n].start, reverse=True):
        c = constants[name]
        data = data[: c.start] + format_value(changes[name]).encode() + data[c.end :]
    return data.decode()


def editable_baselines(baselines: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``(name, code)`` baselines that have at least one editable constant, in the given
    order (e.g. :func:`rpg_llm.env.tasks.baseline_solutions`, sorted by name): the parents of the
    edit format's base prompt (row ``i`` of a step shows ``baselines[i % len(baselines)]``).

    Raises:
        ValueError: none of them has an editable constant (the edit format cannot start).
    """
    out = [(name, code) for name, code in baselines if editable_constants(code)]
    if not out:
        names = ", ".join(name for name, _ in baselines) or "none"
        raise ValueError(f"no baseline script with editable constants (baselines: {names})")
    return out


_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(response: str) -> str | None:
    """The script in a model answer: the first fenced block tagged python (or py), else the first
    fenced block of any tag; a block left open at the end of the answer (the response hit its
    token cap) counts, up to the end. Returns None when there is no fenced block or it is empty.

    Raises:
        ValueError: ``response`` is not a string.
    """
    if not isinstance(response, str):
        raise ValueError(f"response must be a string, got {type(response).__name__}")
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE_RE.finditer(response)]
    blocks = [(tag, body) for tag, body in blocks if body.strip()]
    if not blocks:
        return None
    for tag, body in blocks:
        if tag in ("python", "py", "python3"):
            return body.rstrip() + "\n"
    return blocks[0][1].rstrip() + "\n"


def parse_action(answer: str, action: str, parent_code: str | None = None) -> Action:
    """Turn a model answer into the script that will run.

    Args:
        answer: the decoded model answer.
        action: ``"script"`` or ``"edit"``.
        parent_code: the script the edit applies to (edit format: the parent's code, or the
            baseline shown in the base prompt). Ignored for ``"script"``.

    Returns:
        An :class:`Action`. ``script`` format: the fenced block (``kind="script"``), or invalid
        without one. ``edit`` format: an edit block applied to the parent (``kind="edit"``); a
        block holding a whole script runs as that script (``kind="script"``); an edit that
        cannot be applied is invalid with the :class:`EditError` text.

    Raises:
        ValueError: an unknown ``action``, a non-string answer, or ``action="edit"`` without a
            parent (these are the caller's bugs, not the model's).
    """
    if action not in ACTION_FORMATS:
        raise ValueError(f"action must be one of {', '.join(ACTION_FORMATS)}, got {action!r}")
    if not isinstance(answer, str):
        raise ValueError(f"answer must be a string, got {type(answer).__name__}")
    block = extract_code(answer)
    if block is None:
        return Action("invalid", None, NO_BLOCK_TEXT)
    if action == "script":
        return Action("script", block)
    if not isinstance(parent_code, str):
        raise ValueError("the edit format needs the parent's code (parent_code)")
    if not is_edit_block(block):
        return Action("script", block)
    constants = editable_constants(parent_code)
    try:
        changes = parse_edit(block, constants)
    except EditError as exc:
        return Action("invalid", None, str(exc))
    changed = tuple(n for n, v in changes.items() if not _same_value(v, constants[n].value))
    return Action("edit", apply_edit(parent_code, changes), None, changes, changed)


def _same_value(a: Any, b: Any) -> bool:
    """Equal values of the same kind (True and 1 differ; 10 and 10.0 do not)."""
    kinds = {_kind(a), _kind(b)}
    if kinds <= {"int", "float"}:
        return a == b
    return _kind(a) == _kind(b) and a == b
