"""SFT warm start: pairs from the real baselines, the answer-token loss, training lowering it."""

from __future__ import annotations

import math
import re

import fixtures_llm
import pytest
import torch

from rpg_llm.env.actions import (
    declared_choices,
    declared_numbers,
    declared_switches,
    editable_constants,
    parse_action,
)
from rpg_llm.env.prompts import BASELINE_OUTCOME, base_prompt
from rpg_llm.env.tasks import baseline_solutions, list_offline_competitions
from rpg_llm.learner.sft import (
    SFTExample,
    answer_loss,
    build_sft_examples,
    edit_answer,
    main,
    plausible_values,
    sft_warm_start,
    tokenize_example,
)

tiny_model_dir = fixtures_llm.tiny_model_dir
tiny_policy = fixtures_llm.tiny_policy

BBC = baseline_solutions("bbc-news-logloss")
# the baselines with a top-level ``NAME = literal`` line, found by a regex (not by the ast walk
# under test); prior.py has none
WITH_CONSTANTS = [n for n, c in BBC if re.search(r"(?m)^[A-Z][A-Z0-9_]* = [-\d.\"'T]", c)]
PRIOR = [(n, c) for n, c in BBC if n == "prior"]
_SCRIPT_RE = re.compile(r"# Script\n```python\n(.*?)\n```\nOutcome", re.DOTALL)


def _parent_of(prompt: str) -> str:
    """The script an edit prompt shows (untruncated prompts show it whole)."""
    found = _SCRIPT_RE.search(prompt)
    assert found is not None, prompt
    return found.group(1) + "\n"


# ---------------------------------------------------------------------------- values and pairs


def test_plausible_values_of_the_baselines_constants():
    assert plausible_values("C", 10.0) == [1.0, 3.0, 5.0, 20.0, 30.0, 100.0]
    assert plausible_values("MAX_FEATURES", 5000) == [1250, 2500, 10000, 20000]
    assert plausible_values("K", 3) == [1, 2, 4, 5]
    assert plausible_values("K", 1) == [2, 3]
    assert plausible_values("SEED", 0) == list(range(1, 10))
    assert plausible_values("ALPHA", 0.1) == [0.01, 0.03, 0.05, 0.2, 0.3]
    assert plausible_values("LEARNING_RATE", 0.5) == [0.05, 0.15, 0.25]  # a fraction stays < 1
    assert plausible_values("VAR_SMOOTHING", 1e-9)[0] == 1e-10
    assert plausible_values("FLAG", True) == [False]
    assert plausible_values("KERNEL", "rbf") == [] and plausible_values("X", None) == []
    assert plausible_values("SHIFT", -2) == [-3, -1]
    # a string switch takes the other values its comment declares
    assert plausible_values("MODEL", "knn", ("hgb", "knn", "rf")) == ["hgb", "rf"]
    # a number with declared values takes only those (FOLDS = 0 would otherwise get 1 and -1,
    # neither a valid fold count)
    assert plausible_values("FOLDS", 0) == [-1, 1]
    assert plausible_values("FOLDS", 0, (0, 3, 5)) == [3, 5]


def _switched(pairs):
    out = []
    for p in pairs:
        changes = parse_action(p.answer, "edit", _parent_of(p.prompt)).changes
        if "MODEL" in changes:
            out.append(changes["MODEL"])
    return out


def test_edit_pairs_switch_the_model_family_to_declared_values():
    code = dict(baseline_solutions("diamonds-price-rmse"))["family"]
    assert declared_switches(code) == ["MODEL"]
    families = {"hgb", "knn", "rf", "ridge", "tree"}
    uniform = _switched(
        build_sft_examples("", [("family", code)], "edit", 60, n=64, seed=0, switch_fraction=0.0)
    )
    # 12 constants, 1-2 changed per answer: MODEL in about 1 of 8 answers when drawn uniformly
    assert 3 <= len(uniform) <= 20 and set(uniform) <= families
    assert len(set(uniform)) >= 3
    # the default share: 1/4 forced plus 3/4 of the uniform eighth, about 22 of 64
    default = _switched(build_sft_examples("", [("family", code)], "edit", 60, n=64, seed=0))
    assert 12 <= len(default) <= 34 and set(default) <= families
    every = build_sft_examples("", [("family", code)], "edit", 60, n=64, seed=0, switch_fraction=1)
    switched = _switched(every)
    assert len(switched) == 64 and set(switched) == families
    # a forced switch still leaves room for a second change
    sizes = {len(parse_action(p.answer, "edit", _parent_of(p.prompt)).changes) for p in every}
    assert sizes == {1, 2}


def test_switch_fraction_outside_the_unit_interval_is_named():
    code = dict(baseline_solutions("diamonds-price-rmse"))["family"]
    for bad in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="switch_fraction must lie in"):
            build_sft_examples("", [("family", code)], "edit", 60, n=4, switch_fraction=bad)


def test_edit_answer_text():
    assert edit_answer({"C": 3.0, "MAX_FEATURES": 8000}) == (
        "```python\nC = 3.0\nMAX_FEATURES = 8000\n```"
    )
    with pytest.raises(ValueError, match="at least one change"):
        edit_answer({})


@pytest.mark.parametrize("comp", list_offline_competitions())
def test_edit_pairs_from_the_real_baselines_parse_and_change_a_value(comp):
    baselines = baseline_solutions(comp)
    pairs = build_sft_examples("Task text.", baselines, "edit", 60, n=24, seed=3)
    assert len(pairs) == 24
    shipped = {code for _, code in baselines}
    moved = 0
    for ex in pairs:
        parent = _parent_of(ex.prompt)
        moved += parent not in shipped
        assert BASELINE_OUTCOME in ex.prompt and "Task text." in ex.prompt
        for name, c in editable_constants(parent).items():
            note = f"  # {c.comment}" if c.comment else ""
            assert f"- {name} = {c.value!r}{note}\n" in ex.prompt
        action = parse_action(ex.answer, "edit", parent)
        assert action.kind == "edit" and 1 <= len(action.changed) <= 2, ex.answer
        assert action.changed == tuple(action.changes)  # every listed value is a change
        # every changed value is one of the plausible alternatives of the parent's value
        consts = editable_constants(parent)
        for name, value in action.changes.items():
            c = consts[name]
            declared = declared_choices(c) or declared_numbers(c)
            assert value in plausible_values(name, c.value, declared)
    assert 4 <= moved <= 20  # about half the parents have moved constants (fraction 0.5)


@pytest.mark.parametrize("comp", ["diamonds-price-rmse", "fine-foods-auc", "flights-delay-auc"])
def test_edit_pairs_set_fold_counts_cross_validation_accepts(comp):
    """The frontier baselines declare ``FOLDS``'s values; edit pairs never teach ``FOLDS = 1`` or
    ``-1`` (``cross_val_score`` rejects both: they made most invalid answers of a trained
    policy on diamonds)."""
    pairs = build_sft_examples("", baseline_solutions(comp), "edit", 60, n=200, seed=0)
    folds = [
        parse_action(p.answer, "edit", _parent_of(p.prompt)).changes.get("FOLDS") for p in pairs
    ]
    folds = [f for f in folds if f is not None]
    assert folds and set(folds) <= {0, 3, 5}, folds


def test_edit_pairs_cycle_over_editable_baselines_only():
    pairs = build_sft_examples("", BBC, "edit", 60, n=6, seed=0, moved_parent_fraction=0.0)
    names = []
    by_code = {code: name for name, code in BBC}
    for ex in pairs:
        names.append(by_code[_parent_of(ex.prompt)])
    n = len(WITH_CONSTANTS)
    assert n >= 2 and "prior" not in WITH_CONSTANTS
    assert names == (WITH_CONSTANTS * 2)[:6]  # in order, cycling; prior.py has no constants
    again = build_sft_examples("", BBC, "edit", 60, n=6, seed=0, moved_parent_fraction=0.0)
    assert again == pairs  # seeded


def test_script_pairs_are_the_base_prompt_and_the_baseline_script():
    pairs = build_sft_examples("Task.", BBC, "script", 30, n=len(BBC) + 1)
    assert [ex.prompt for ex in pairs] == [base_prompt("Task.", 30)] * (len(BBC) + 1)
    for ex, (_, code) in zip(pairs, BBC + BBC[:1], strict=True):
        assert parse_action(ex.answer, "script").script == code.rstrip() + "\n"


def test_pair_builder_rejects_bad_input():
    with pytest.raises(ValueError, match="action must be one of"):
        build_sft_examples("", BBC, "diff", 60, 4)
    with pytest.raises(ValueError, match="n must be >= 1"):
        build_sft_examples("", BBC, "edit", 60, 0)
    with pytest.raises(ValueError, match="no baseline script with editable constants"):
        build_sft_examples("", PRIOR, "edit", 60, 4)  # prior.py only


# ---------------------------------------------------------------------------- loss and training


def _pairs():
    # short prompts (no description) keep the tiny model's sequences small
    return build_sft_examples("", BBC, "edit", 10, n=8, seed=1)


def test_labels_cover_the_answer_and_eos_only(tiny_policy):
    tok = tiny_policy.tokenizer
    ex = _pairs()[0]
    ids, n_prompt = tokenize_example(tok, ex)
    answer = tok(ex.answer, add_special_tokens=False)["input_ids"]
    assert ids[n_prompt:] == answer + [tok.eos_token_id]
    assert tok.decode(ids[:n_prompt]).endswith("<|im_start|>assistant\n")


def test_answer_loss_equals_a_direct_cross_entropy(tiny_policy):
    """Computed another way: log_softmax of one forward per example, summed over the answer."""
    pairs = _pairs()[:3]
    total, count = 0.0, 0
    with torch.no_grad():
        for ex in pairs:
            ids, n_prompt = tokenize_example(tiny_policy.tokenizer, ex)
            logp = torch.log_softmax(tiny_policy.model(torch.tensor([ids])).logits[0], -1)
            for pos in range(n_prompt, len(ids)):
                total -= float(logp[pos - 1, ids[pos]])
                count += 1
    assert answer_loss(tiny_policy, pairs, batch_size=2) == pytest.approx(total / count, rel=1e-5)


def test_sft_lowers_the_answer_loss_on_its_pairs(tiny_model_dir):
    from rpg_llm.learner.policy import load_policy

    policy = load_policy(str(tiny_model_dir), device="cpu")
    pairs = _pairs()
    before = answer_loss(policy, pairs)
    assert before > 5.0  # untrained tiny model: about log(vocab 512) = 6.2 nats per token
    losses = sft_warm_start(policy, pairs, steps=40, batch_size=4, lr=3e-3, seed=0)
    after = answer_loss(policy, pairs)
    assert len(losses) == 40 and all(math.isfinite(v) for v in losses)
    assert after < 0.6 * before, (before, after)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5


def test_first_step_loss_is_the_loss_of_the_first_batch(tiny_model_dir):
    """The step loss is the token-mean answer loss of the batch drawn (seeded order)."""
    from rpg_llm.learner.policy import load_policy

    policy = load_policy(str(tiny_model_dir), device="cpu")
    pairs = _pairs()
    order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(5)).tolist()
    first = [pairs[order.pop()] for _ in range(4)]
    expected = answer_loss(policy, first, batch_size=4)
    losses = sft_warm_start(policy, pairs, steps=1, batch_size=4, lr=1e-3, seed=5)
    assert losses[0] == pytest.approx(expected, rel=1e-5)


def test_sft_rejects_bad_input(tiny_policy):
    pairs = _pairs()
    assert sft_warm_start(tiny_policy, pairs, steps=0) == []
    for kw, msg in [
        (dict(steps=-1), "steps must be an int >= 0"),
        (dict(steps=2, lr=0.0), "lr must be > 0"),
        (dict(steps=2, batch_size=0), "batch_size must be >= 1"),
    ]:
        with pytest.raises(ValueError, match=msg):
            sft_warm_start(tiny_policy, pairs, **kw)
    with pytest.raises(ValueError, match="no SFT examples"):
        sft_warm_start(tiny_policy, [], steps=1)
    with pytest.raises(ValueError, match="non-empty answer"):
        answer_loss(tiny_policy, [SFTExample("p", "")])


# ---------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--steps", "-1"], "--steps: invalid value -1"),
        (["--lr", "0"], "--lr: invalid value 0.0"),
        (["--task", "no-such-task"], "--task: unknown offline competition 'no-such-task'"),
        (["--samples", "x"], "--samples"),
    ],
)
def test_cli_usage_errors_exit_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_cli_missing_model_exits_2(tmp_path, capsys):
    from rpg_llm.learner.sft import main

    out = tmp_path / "m.json"
    assert main(["--model", "/nonexist", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m rpg_llm.learner.sft: error: ")
    assert "--model /nonexist" in err
    assert not out.exists()


def test_cli_huge_batch_size_exits_2(tmp_path, capsys):
    from rpg_llm.learner.sft import main

    assert main(["--batch-size", "99999999999", "--out", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--batch-size: invalid value 99999999999" in err
