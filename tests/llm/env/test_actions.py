"""Action formats: the edit format (constants of the parent replaced) and the script format."""

from __future__ import annotations

import ast
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpg_llm.env.actions import (
    NO_BLOCK_TEXT,
    EditError,
    apply_edit,
    declared_choices,
    declared_numbers,
    declared_switches,
    editable_baselines,
    editable_constants,
    is_edit_block,
    parse_action,
    parse_edit,
    switch_changed,
)
from rpg_llm.env.tasks import baseline_solutions, list_offline_competitions

BBC = dict(baseline_solutions("bbc-news-logloss"))
LOGREG = BBC["logreg_tfidf"]


def fenced(body: str, lead: str = "Here are the new values:\n") -> str:
    return f"{lead}```python\n{body}\n```\n"


# ---------------------------------------------------------------------------- constants


def test_bbc_logreg_constants_and_their_byte_spans():
    consts = editable_constants(LOGREG)
    assert list(consts) == ["C", "MAX_FEATURES"]
    assert consts["C"].value == 10.0 and isinstance(consts["C"].value, float)
    assert consts["MAX_FEATURES"].value == 5000
    data = LOGREG.encode()
    assert data[consts["C"].start : consts["C"].end] == b"10.0"
    assert data[consts["MAX_FEATURES"].start : consts["MAX_FEATURES"].end] == b"5000"
    assert LOGREG.splitlines()[consts["C"].line - 1] == "C = 10.0"


_CONST_LINE = re.compile(r"^([A-Z][A-Z0-9_]*) = (.+)$")


@pytest.mark.parametrize("comp", list_offline_competitions())
def test_every_baseline_exposes_its_upper_case_constants(comp):
    """Computed another way: lines ``NAME = rhs`` at column 0 with an upper-case name."""
    for name, code in baseline_solutions(comp):
        expected = {}
        for line in code.splitlines():
            m = _CONST_LINE.match(line)
            if m:
                expected[m.group(1)] = ast.literal_eval(m.group(2))
        got = {k: c.value for k, c in editable_constants(code).items()}
        assert got == expected, (comp, name)


def test_which_assignments_are_editable():
    code = "\n".join(
        [
            "import numpy as np",
            "A = 1",
            "B = -2.5e-3",
            "C = (1, 'x', None)",
            "D = {'depth': 3, 'lr': 0.1}",
            "E = np.log(2)",  # not a literal
            "F = 1",
            "F = 2",  # assigned twice
            "G = 3",
            "G += 1",  # augmented
            "H: int = 4",  # annotated: not NAME = literal
            "I, J = 1, 2",  # tuple target
            "K = L = 5",  # two targets
            "for M in range(3):",
            "    pass",
            "M = 0",  # also a loop target
            "def f():",
            "    N = 1",  # local to f
            "    return N",
            "N = 6",
            "np = 7",  # shadows an import
            "O = True",
        ]
    )
    assert list(editable_constants(code)) == ["A", "B", "C", "D", "N", "O"]
    assert editable_constants("def broken(:\n") == {}


def test_line_comments_and_declared_choices():
    code = "\n".join(
        [
            'MODEL = "ridge"  # one of "hgb", \'knn\', "ridge", "hgb"',
            'KERNEL = "rbf"  # see "the docs"',  # one quoted string: no list of options
            'METRIC = "l2"  # one of "l1", "cosine"',  # the value is not among them
            "C = 1.0  # ridge: L2 penalty",
            "SIZES = (",
            "    1,",
            "    2,",
            ')  # "a", "b"',  # the comment of a multi-line value: its last line
            "# a comment line of its own",
            "SEED = 0",
            'NAME = "#not a comment"',
        ]
    )
    cs = editable_constants(code)
    assert [c.comment for c in cs.values()] == [
        'one of "hgb", \'knn\', "ridge", "hgb"',
        'see "the docs"',
        'one of "l1", "cosine"',
        "ridge: L2 penalty",
        '"a", "b"',
        "",
        "",
    ]
    assert declared_choices(cs["MODEL"]) == ("hgb", "knn", "ridge")
    for name in ("KERNEL", "METRIC", "C", "SIZES", "SEED", "NAME"):
        assert declared_choices(cs[name]) == (), name


def test_declared_numbers_read_one_of_lists_of_numeric_constants_only():
    code = "\n".join(
        [
            "FOLDS = 0  # cross-validated score first: one of 0, 3, 5 (0: none)",
            "RATE = 0.5  # one of 0.1, 0.5 or 1e0",
            "LEAF = 5  # smaller: bigger forests; 1 may not fit in 2 GiB",  # numbers, no list
            "K = 4  # one of 1, 2",  # the value is not among them
            "N = 2  # one of 1, 2.5",  # an int knob listing a fraction
            "FLAG = True  # one of 0, 1",  # a bool is not a number here
            'MODEL = "rf"  # one of "rf", "hgb"',
            "DEPTH = 3  # One of 1, 2, or 3.",  # any case, an Oxford comma, a full stop
            "PCT = 5  # one of 5, 10%",  # a unit on the last number: not a list of values
            "BIG = 2  # one of 2, 1e30",  # an int knob listing an exponent
            "TOL = 0.5  # one of 1e400, 0.5",  # not finite
            "STEP = 2  # one of 2, -4, +8",
        ]
    )
    cs = editable_constants(code)
    assert declared_numbers(cs["FOLDS"]) == (0, 3, 5)
    assert all(type(v) is int for v in declared_numbers(cs["FOLDS"]))
    assert declared_numbers(cs["RATE"]) == (0.1, 0.5, 1.0)
    assert declared_numbers(cs["DEPTH"]) == (1, 2, 3)
    assert declared_numbers(cs["STEP"]) == (2, -4, 8)
    for name in ("LEAF", "K", "N", "FLAG", "MODEL", "PCT", "BIG", "TOL"):
        assert declared_numbers(cs[name]) == (), name
    # declared numbers are not switches: only string constants switch a family
    assert declared_switches(code) == ["MODEL"]


def test_switch_changed_reads_the_parents_declared_switches():
    parent = 'MODEL = "ridge"  # one of "hgb", "ridge"\nALPHA = 1.0\nprint(MODEL)\n'
    assert declared_switches(parent) == ["MODEL"]
    assert declared_switches("x = (") == []  # does not parse
    edit = parse_action("```python\nMODEL = 'hgb'\n```", "edit", parent)
    knob = parse_action("```python\nALPHA = 2.0\n```", "edit", parent)
    same = parse_action("```python\nMODEL = 'ridge'\n```", "edit", parent)
    assert edit.script is not None and knob.script is not None and same.script is not None
    assert edit.changed == ("MODEL",) and switch_changed(parent, edit.script)
    assert knob.changed == ("ALPHA",) and not switch_changed(parent, knob.script)
    assert same.changed == () and not switch_changed(parent, same.script)
    # an undeclared value is a change; the child's comment no longer declares it
    assert switch_changed(parent, parent.replace('"ridge"  #', '"xgb"  #'))
    assert switch_changed(parent, "ALPHA = 1.0\nprint(1)\n")  # a whole script without MODEL
    assert not switch_changed(parent, "print(1\n")  # the child does not parse
    assert not switch_changed("ALPHA = 1.0\n", "ALPHA = 2.0\n")  # no switch declared


def test_the_family_switches_declare_every_family_they_accept():
    # the choices read from the comment are exactly the keys of the script's families dict
    for comp in ("diamonds-price-rmse", "flights-delay-auc", "fine-foods-auc"):
        code = dict(baseline_solutions(comp))["family"]
        tree = ast.parse(code)
        fam = next(
            n
            for n in tree.body
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "families"
        )
        keys = sorted(k.value for k in fam.value.keys)  # type: ignore[attr-defined]
        assert sorted(declared_choices(editable_constants(code)["MODEL"])) == keys
        # the seeded variants family(MODEL=x) keep the declaration
        for name, variant in baseline_solutions(comp):
            if name.startswith("family"):
                assert sorted(declared_choices(editable_constants(variant)["MODEL"])) == keys


def test_editable_baselines_skip_scripts_without_constants():
    names = [name for name, _ in editable_baselines(baseline_solutions("bbc-news-logloss"))]
    # the same set found another way: a regex for a top-level ``NAME = literal`` line
    expected = [n for n, c in BBC.items() if re.search(r"(?m)^[A-Z][A-Z0-9_]* = [-\d.\"'T]", c)]
    assert names == expected and "prior" not in names and len(names) >= 3
    with pytest.raises(ValueError, match="no baseline script with editable constants"):
        editable_baselines([("prior", BBC["prior"])])


# ---------------------------------------------------------------------------- apply


def test_apply_edit_changes_only_the_values():
    action = parse_action(fenced("C = 3.0\nMAX_FEATURES = 8000"), "edit", LOGREG)
    assert action.kind == "edit" and action.valid and action.outcome_text is None
    assert action.changes == {"C": 3.0, "MAX_FEATURES": 8000}
    assert action.changed == ("C", "MAX_FEATURES")
    new = action.script
    assert new is not None
    # byte for byte the parent, except the two values
    assert new.replace("C = 3.0\n", "C = 10.0\n").replace("= 8000\n", "= 5000\n") == LOGREG
    assert {k: c.value for k, c in editable_constants(new).items()} == {
        "C": 3.0,
        "MAX_FEATURES": 8000,
    }


def test_applied_edit_runs_with_the_new_values():
    parent = "A = 1\nSCALE = 0.5  # a comment stays\nB = A * SCALE\n"
    action = parse_action(fenced("A = 4"), "edit", parent)
    assert action.script == "A = 4\nSCALE = 0.5  # a comment stays\nB = A * SCALE\n"
    ns: dict = {}
    exec(action.script, ns)  # noqa: S102 - our own test script
    assert ns["B"] == 2.0


def test_apply_edit_with_non_ascii_text_before_the_value_and_multiline_literals():
    # ast column offsets count UTF-8 bytes: the replacement must too
    parent = "# é ü ✓\nÉTÉ = 1  # ünï\nGRID = {\n    'a': 1,\n    'b': 2,\n}\nZ = 'ß'\n"
    new = apply_edit(parent, {"ÉTÉ": 2, "GRID": {"a": 3}, "Z": "x"})
    assert new == "# é ü ✓\nÉTÉ = 2  # ünï\nGRID = {'a': 3}\nZ = 'x'\n"
    with pytest.raises(ValueError, match="not editable constants of the parent: Q"):
        apply_edit(parent, {"Q": 1})


def test_crlf_line_endings_are_kept():
    parent = "A = 1\r\nB = 2\r\nprint(A + B)\r\n"
    assert apply_edit(parent, {"B": 5}) == "A = 1\r\nB = 5\r\nprint(A + B)\r\n"


@settings(max_examples=60, deadline=None)
@given(
    c=st.floats(min_value=1e-6, max_value=1e6, allow_nan=False),
    n=st.integers(min_value=1, max_value=10**6),
)
def test_apply_roundtrips_any_values(c, n):
    action = parse_action(fenced(f"C = {c!r}\nMAX_FEATURES = {n}"), "edit", LOGREG)
    assert action.script is not None
    consts = editable_constants(action.script)
    assert consts["C"].value == c and consts["MAX_FEATURES"].value == n
    old, new = LOGREG.splitlines(), action.script.splitlines()
    assert len(old) == len(new)
    differing = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
    assert set(differing) <= {consts["C"].line - 1, consts["MAX_FEATURES"].line - 1}


def test_edit_with_comments_blank_lines_and_unchanged_values():
    body = "# smaller C\nC = 1.0\n\nMAX_FEATURES = 5000  # as before\n"
    action = parse_action(fenced(body), "edit", LOGREG)
    assert action.kind == "edit"
    assert action.changes == {"C": 1.0, "MAX_FEATURES": 5000}
    assert action.changed == ("C",)
    same = parse_action(fenced("C = 10"), "edit", LOGREG)  # 10 == 10.0: no change
    assert same.valid and same.changed == ()


# ---------------------------------------------------------------------------- types


def test_type_rules():
    parent = "F = 0.5\nI = 100\nB = True\nS = 'gini'\nT = (64, 32)\nN = None\nM = 3\n"
    consts = editable_constants(parent)
    ok = {
        "F = 2": 2,  # a float constant accepts an int literal
        "F = 1e-3": 1e-3,
        "I = -7": -7,
        "B = False": False,
        "S = 'entropy'": "entropy",
        "T = (128,)": (128,),
        "N = 10": 10,  # None may be replaced by anything
        "M = None": None,  # and may replace anything
    }
    for line, value in ok.items():
        assert parse_edit(line, consts) == {line.split(" =")[0]: value}, line
    bad = {
        "I = 100.0": "I is an int (now 100); got the float 100.0",
        "I = 1.5": "got the float 1.5",
        "I = True": "I is a int (now 100); got a bool",
        "B = 1": "B is a bool (now True); got a int",
        "S = 3": "S is a str",
        "T = [128]": "T is a tuple",
        "F = '0.1'": "F is a float",
        "F = 1e999": "F must be finite, got inf",
        "T = (1.0, 1e999)": "T must be finite",
    }
    for line, reason in bad.items():
        with pytest.raises(EditError, match=re.escape(reason)):
            parse_edit(line, consts)


# ---------------------------------------------------------------------------- invalid


@pytest.mark.parametrize(
    ("body", "line", "reason"),
    [
        ("C = 1.0\nLR = 0.1", 2, "unknown constant LR (editable: C, MAX_FEATURES)"),
        ("C = np.log(3)", 1, "the value of C is not a literal"),
        ("C = 2 * 3.0", 1, "the value of C is not a literal"),
        ("C = 1.0\nMAX_FEATURES = (8000", 2, "syntax error: '(' was never closed"),
        ("C = 1.0\nMAX_FEATURES 8000", 2, "syntax error"),
        ("C = 1.0\nC = 2.0", 2, "C is assigned twice"),
        ("C = MAX_FEATURES = 1", 1, "not of the form NAME = <literal>"),
        ("C += 1.0", 1, "not of the form NAME = <literal>"),
        ("C: float = 1.0", 1, "not of the form NAME = <literal>"),
        ("MAX_FEATURES = 7.5", 1, "MAX_FEATURES is an int (now 5000); got the float 7.5"),
        ("# nothing to change", 0, "the block holds no assignment"),
    ],
)
def test_invalid_edits_name_the_line_and_the_reason(body, line, reason):
    action = parse_action(fenced(body), "edit", LOGREG)
    assert action.kind == "invalid" and action.script is None and not action.valid
    text = action.outcome_text
    assert text is not None and text.startswith("invalid edit, ")
    assert reason in text
    if line:
        shown = body.splitlines()[line - 1].strip()
        assert f"line {line} `{shown}`" in text
    else:
        assert "invalid edit, the edit:" in text
    with pytest.raises(EditError) as info:
        parse_edit(body + "\n", editable_constants(LOGREG))
    assert info.value.line == line


def test_no_fenced_block_is_invalid_in_both_formats():
    for action in ("script", "edit"):
        got = parse_action("C = 1.0 would be better", action, LOGREG)
        assert got.kind == "invalid" and got.outcome_text == NO_BLOCK_TEXT


# ---------------------------------------------------------------------------- script fallback


def test_an_answer_holding_a_whole_script_runs_as_that_script():
    script = "import pandas as pd\nC = 1.0\nprint(pd.__name__, C)"
    action = parse_action(fenced(script), "edit", LOGREG)
    assert action.kind == "script" and action.script == script + "\n"
    assert action.changes == {} and action.changed == ()
    # a script with a syntax error is still a script attempt (it fails when it runs)
    broken = "import os\ndef f(:\n    pass"
    assert parse_action(fenced(broken), "edit", LOGREG).kind == "script"


def test_is_edit_block():
    assert is_edit_block("C = 1\nD = [1,\n  2]\n")
    assert is_edit_block("C = (1\n")  # broken edit: still an edit (invalid later)
    assert is_edit_block("# only a comment\n")
    assert not is_edit_block("print(1)\n")
    assert not is_edit_block("C = 1\nmodel.fit(x)\n")
    assert not is_edit_block("from x import (\n")


def test_script_format_runs_the_block_even_when_it_looks_like_an_edit():
    action = parse_action(fenced("C = 1.0"), "script")
    assert action.kind == "script" and action.script == "C = 1.0\n"


def test_caller_errors_raise():
    with pytest.raises(ValueError, match="action must be one of script, edit, got 'diff'"):
        parse_action(fenced("C = 1"), "diff", LOGREG)
    with pytest.raises(ValueError, match="needs the parent's code"):
        parse_action(fenced("C = 1"), "edit", None)
    with pytest.raises(ValueError, match="code must be a string"):
        editable_constants(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^answer must be a string, got NoneType$"):
        parse_action(None, "script")  # type: ignore[arg-type]


def test_parent_without_constants_accepts_only_scripts():
    prior = BBC["prior"]
    action = parse_action(fenced("C = 1.0"), "edit", prior)
    assert action.kind == "invalid" and action.outcome_text is not None
    assert "unknown constant C (editable: none)" in action.outcome_text
    whole = parse_action(fenced(prior), "edit", prior).script
    assert whole is not None and math.isclose(len(whole), len(prior))
