"""Prompts, truncation of the parent's code, and extraction of the fenced script."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpg_llm.env.actions import extract_code
from rpg_llm.env.prompts import base_prompt, improve_prompt, truncate_code

WORDS = lambda s: len(s.split())  # a token counter that is easy to reason about

PARENT = "\n".join(
    [
        "import numpy as np",
        "from sklearn.linear_model import LogisticRegression",
        "LR = 0.1",
        "N_ESTIMATORS = 300",
        "LAYERS = (64, 32)",
    ]
    + [f"x{i} = np.arange({i}) * LR  # filler line {i}" for i in range(40)]
    + ["model = LogisticRegression(C=LR)", "model.fit(X, y)", "write(submission)"]
)


def test_base_prompt_has_description_rules_and_timeout():
    p = base_prompt("Predict the species of a penguin.", 60)
    assert "Predict the species of a penguin." in p
    assert "./input/" in p and "./submission.csv" in p and "60 seconds" in p
    with pytest.raises(ValueError, match="timeout_s"):
        base_prompt("x", 0)


def test_improve_prompt_carries_parent_and_outcome():
    outcome = "ZeroDivisionError at line 12: division by zero"
    p = improve_prompt("Task.", "print(1/0)\n", outcome, 30)
    assert "print(1/0)" in p and outcome in p and p.startswith(base_prompt("Task.", 30)[:40])


def test_truncation_keeps_imports_hyperparameters_and_tail_and_marks_the_cut():
    budget = 60
    out = truncate_code(PARENT, budget, WORDS)
    assert WORDS(out) <= budget
    lines = out.splitlines()
    for must in [
        "import numpy as np",
        "from sklearn.linear_model import LogisticRegression",
        "LR = 0.1",
        "N_ESTIMATORS = 300",
        "LAYERS = (64, 32)",
        "write(submission)",
        "model.fit(X, y)",
    ]:
        assert must in lines
    marks = [line for line in lines if line.startswith("# ... [")]
    assert len(marks) == 1
    n_omitted = int(marks[0].split("[")[1].split()[0])
    # every source line is either kept verbatim or counted as omitted
    kept = [line for line in lines if line not in marks]
    assert len(kept) + n_omitted == len(PARENT.splitlines())
    # the kept lines appear in source order
    src = PARENT.splitlines()
    positions = [src.index(line) for line in kept]
    assert positions == sorted(positions)


def test_truncation_leaves_short_code_alone_and_rejects_bad_budget():
    assert truncate_code("a = 1\n", 100, WORDS) == "a = 1\n"
    with pytest.raises(ValueError, match="max_tokens"):
        truncate_code("a = 1", 0, WORDS)


def test_truncation_of_unparsable_code_uses_line_patterns():
    code = "import os\nBATCH = 32\n" + "\n".join(f"def broken({i}:" for i in range(30)) + "\nend()"
    out = truncate_code(code, 25, WORDS)
    assert out.splitlines()[:2] == ["import os", "BATCH = 32"]
    assert out.splitlines()[-1] == "end()"


def test_improve_prompt_truncates_to_budget():
    p = improve_prompt("Task.", PARENT, "score 0.5", 60, max_tokens=250, count_tokens=WORDS)
    assert WORDS(p) <= 250
    assert "lines omitted" in p and "N_ESTIMATORS = 300" in p and "write(submission)" in p


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=8, max_value=400))
def test_truncation_respects_any_budget(budget):
    out = truncate_code(PARENT, budget, WORDS)
    assert WORDS(out) <= budget
    if budget >= WORDS(PARENT):
        assert out == PARENT


def test_extract_code_variants():
    assert extract_code("no code here") is None
    assert extract_code("```python\n\n```") is None
    ans = "Sure.\n```text\nnot this\n```\n```python\nimport os\nprint(1)\n```\nDone."
    assert extract_code(ans) == "import os\nprint(1)\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    # a block cut by the token cap still yields its code
    assert extract_code("Here:\n```python\nimport numpy\nx = 2") == "import numpy\nx = 2\n"
    code = extract_code("```py\nfor i in range(3):\n    print(i)\n```")
    assert code is not None
    ast.parse(code)


# ---------------------------------------------------------------------------- edit prompt


def _logreg() -> str:
    from rpg_llm.env.tasks import baseline_solutions

    return dict(baseline_solutions("bbc-news-logloss"))["logreg_tfidf"]


def test_edit_prompt_lists_constants_outcome_and_timeout():
    from rpg_llm.env.prompts import BASELINE_OUTCOME, edit_prompt

    outcome = "score 0.0812 (lower is better), ran 3.4 s"
    p = edit_prompt("Classify BBC articles.", _logreg(), outcome, 60)
    assert "Classify BBC articles." in p
    assert "Editable constants (current values):\n- C = 10.0\n- MAX_FEATURES = 5000\n" in p
    assert f"Outcome of the script: {outcome}" in p
    assert "stopped after 60 seconds" in p
    assert "```python\n" + _logreg().rstrip() + "\n```" in p  # the whole script is shown
    assert "```python\nNAME = value\n```" in p
    base = edit_prompt("", _logreg(), BASELINE_OUTCOME, 60)
    assert "# Competition" not in base and BASELINE_OUTCOME in base
    with pytest.raises(ValueError, match="timeout_s"):
        edit_prompt("x", _logreg(), "ok", 0)


def test_edit_prompt_lists_each_constants_comment():
    from rpg_llm.env.prompts import BASELINE_OUTCOME, edit_prompt
    from rpg_llm.env.tasks import baseline_solutions

    code = dict(baseline_solutions("diamonds-price-rmse"))["family"]
    p = edit_prompt("", code, BASELINE_OUTCOME, 60, max_tokens=400)
    listing = p.split("Editable constants (current values):\n")[1]
    assert listing.startswith(
        '- MODEL = \'ridge\'  # one of "hgb", "knn", "rf", "ridge", "tree"\n'
        "- LOG_SIZE = False  # use log(1 + x) of carat, x, y, z\n"
        "- ALPHA = 1.0  # ridge: L2 penalty\n"
    )
    assert "\n- SEED = 0\n" in listing  # no comment, nothing added


def test_edit_prompt_truncation_keeps_the_constants_listing():
    from rpg_llm.env.prompts import edit_prompt

    full = edit_prompt("Task.", PARENT, "score 0.5", 60, count_tokens=WORDS)
    assert "- LR = 0.1\n- N_ESTIMATORS = 300\n- LAYERS = (64, 32)\n" in full
    p = edit_prompt("Task.", PARENT, "score 0.5", 60, max_tokens=250, count_tokens=WORDS)
    assert WORDS(p) <= 250 < WORDS(full)
    assert "lines omitted" in p and "- N_ESTIMATORS = 300" in p
    # a long description is cut at its end
    long_desc = "Word " * 2000
    q = edit_prompt(long_desc, PARENT, "score 0.5", 60, max_tokens=400, count_tokens=WORDS)
    assert "[...]" in q and "- LR = 0.1" in q and WORDS(q) <= 400


def test_edit_prompt_without_constants_is_the_improve_prompt():
    from rpg_llm.env.prompts import edit_prompt

    code = "import os\nprint(os.getcwd())\n"
    assert edit_prompt("Task.", code, "error", 30) == improve_prompt("Task.", code, "error", 30)


def test_improve_prompt_cuts_a_long_description_to_any_counter():
    """The cut used to assume 4 characters per token; with 5-character words it overflowed."""
    long_desc = "Word " * 2000
    for budget in (300, 400, 800):
        q = improve_prompt(
            long_desc, PARENT, "score 0.5", 60, max_tokens=budget, count_tokens=WORDS
        )
        assert "[...]" in q and WORDS(q) <= budget and "N_ESTIMATORS = 300" in q


def test_edit_prompt_over_budget_shows_the_constants_once():
    """Over budget, the script's constant lines give way to one mark (the listing has them), so
    more of the script's other lines are shown instead of a second copy of the constants."""
    from rpg_llm.env.prompts import CONSTANTS_MARK, edit_prompt

    def script(p):
        return p.split("```python\n")[1].split("```")[0]

    full = edit_prompt("Task.", PARENT, "score 0.5", 60, count_tokens=WORDS)
    budget = WORDS(full) - 20  # room for all but a few filler lines
    shown = script(edit_prompt("Task.", PARENT, "score 0.5", 60, budget, WORDS))
    assert CONSTANTS_MARK.format(n=3) in shown and "N_ESTIMATORS = 300" not in shown
    assert "import numpy as np" in shown and "write(submission)" in shown
    kept = [f"# filler line {i}" in shown for i in range(40)]
    # without its constants (11 words) the script keeps all but the first few filler lines
    assert kept[5:] == [True] * 35 and not all(kept)
    tight = edit_prompt("Task.", PARENT, "score 0.5", 60, max_tokens=250, count_tokens=WORDS)
    assert "N_ESTIMATORS = 300" not in script(tight) and "- N_ESTIMATORS = 300" in tight
    assert WORDS(tight) <= 250


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=900), st.booleans())
def test_edit_prompt_fits_any_budget_that_holds_its_listing_and_rules(budget, describe):
    """A budget at least the floor (the prompt at ``max_tokens=1``: listing, outcome, rules,
    one omission line, ``[...]`` for a description) is respected; below it the prompt is the
    floor, never a prompt with the listing or the rules cut."""
    from rpg_llm.env.prompts import edit_prompt

    desc = "Word " * 300 if describe else ""
    floor = edit_prompt(desc, PARENT, "score 0.5", 60, max_tokens=1, count_tokens=WORDS)
    p = edit_prompt(desc, PARENT, "score 0.5", 60, max_tokens=budget, count_tokens=WORDS)
    full = edit_prompt(desc, PARENT, "score 0.5", 60, count_tokens=WORDS)
    listing = "- LR = 0.1\n- N_ESTIMATORS = 300\n- LAYERS = (64, 32)\n"
    assert listing in p and p.endswith("(it is stopped after 60 seconds).")
    if budget >= WORDS(full):
        assert p == full
    elif budget >= WORDS(floor):
        assert WORDS(p) <= budget
    else:
        assert p == floor


def test_frontier_edit_prompts_fit_the_tables_budget_with_the_real_tokenizer():
    """With SmolLM2's tokenizer the frontier baselines' prompts fit 512 - CHAT_TEMPLATE_ROOM
    tokens, listing and rules whole; 352 (the cpu-default preset) is below their floor."""
    from transformers import AutoTokenizer

    from rpg_llm.env.actions import editable_constants
    from rpg_llm.env.prompts import BASELINE_OUTCOME, edit_prompt
    from rpg_llm.env.tasks import baseline_solutions
    from rpg_llm.learner.policy import DEFAULT_MODEL, resolve_model
    from rpg_llm.loop.rollout import CHAT_TEMPLATE_ROOM, min_edit_prompt_tokens

    tok = AutoTokenizer.from_pretrained(resolve_model(DEFAULT_MODEL))

    def count(s):
        return len(tok(s, add_special_tokens=False)["input_ids"])

    for task in ("diamonds-price-rmse", "fine-foods-auc", "flights-delay-auc"):
        scripts = baseline_solutions(task)
        need, _ = min_edit_prompt_tokens(tok, False, scripts, 60.0)
        assert 352 < need <= 512
        for _, code in scripts:
            if not editable_constants(code):
                continue
            p = edit_prompt("", code, BASELINE_OUTCOME, 60.0, 512 - CHAT_TEMPLATE_ROOM, count)
            assert count(p) <= 512 - CHAT_TEMPLATE_ROOM
            assert "- SEED = 0\n" in p and p.endswith("(it is stopped after 60 seconds).")


def test_edit_prompt_keeps_a_line_the_constant_shares_with_another_statement():
    """Only lines that hold nothing but editable constants give way to the mark; line numbers
    follow Python's (a Unicode line separator inside a comment is not a line break)."""
    from rpg_llm.env.prompts import CONSTANTS_MARK, edit_prompt

    code = "\n".join(
        [
            "import numpy as np",
            "# note \u2028 here",
            "LR = 0.1; print('side')",
            "N = 3",
            "A = 1",
            "B = 2",
            "C = 3",
            "D = 4",
            "M = (1,",
            " 2)",
        ]
        + [f"x{i} = fit(LR)  # filler line {i}" for i in range(40)]
    )
    full = edit_prompt("", code, "score 0.5", 60, count_tokens=WORDS)
    p = edit_prompt("", code, "score 0.5", 60, WORDS(full) - 5, WORDS)
    script = p.split("```python\n")[1].split("```")[0]
    assert "LR = 0.1; print('side')\n" + CONSTANTS_MARK.format(n=7) + "\n" in script
    assert "# note \u2028 here\n" in script and "- D = 4\n- M = (1, 2)\n" in p
