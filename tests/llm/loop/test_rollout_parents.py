"""make_prompts: in the edit format a parent must have constants to edit (quick-table finding:
RPG ranked the fastest baseline, a constant predictor without constants, first, and every answer
to its whole-script prompt was cut at the 64-token cap: -10)."""

from __future__ import annotations

from typing import Any

from rpg_llm.loop.buffer import SampleBuffer
from rpg_llm.loop.parents import ParentPool
from rpg_llm.loop.rollout import make_prompts
from testkit.samples import toy_sample

PRIOR = "import pandas as pd\nprint('constant prediction')\n"  # no top-level constant
LOGREG = "C = 1.0\nMAX_ITER = 200\nprint('fit', C, MAX_ITER)\n"


def _tokenizer(text, add_special_tokens=False):
    return {"input_ids": text.split()}


def _sample(i, code, reward, seconds):
    return toy_sample(i, reward, seconds, step=0, row=i, code=code)


def _pool(buf, samples) -> ParentPool:
    """The parent buffer of the stored ``samples`` (ranked by raw reward when kept)."""
    ids = buf.add_many(samples)
    pool = ParentPool(10)
    pool.add([buf.get(i) for i in ids], None)
    return pool


def test_edit_parents_have_constants_script_parents_need_not(tmp_path):
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        pool = _pool(buf, [_sample(0, PRIOR, 0.5, 1.0), _sample(1, LOGREG, 0.9, 4.0)])
        prior, logreg = sorted(s.id or 0 for s in pool.nodes)
        # rho = 0.2/s: prior 0.5 - 0.2 = 0.3 ranks above logreg 0.9 - 0.8 = 0.1
        args: dict[str, Any] = dict(
            description="", timeout_s=60.0, max_prompt_tokens=4096, tokenizer=_tokenizer
        )
        _, ids, codes = make_prompts(pool, 2, 0.2, action="script", **args)
        assert ids == [prior, logreg]
        prompts, ids, codes = make_prompts(pool, 2, 0.2, action="edit", **args)
        assert ids == [logreg, logreg] and codes == [LOGREG, LOGREG]
        assert all("- C = 1.0" in p and "- MAX_ITER = 200" in p for p in prompts)
        # vanilla (rho None) ranks logreg first anyway
        _, ids, _ = make_prompts(pool, 1, None, action="edit", **args)
        assert ids == [logreg]


def test_edit_format_without_any_editable_parent_keeps_the_ranking(tmp_path):
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        pool = _pool(buf, [_sample(0, PRIOR, 0.5, 1.0)])
        prior = pool.nodes[0].id
        prompts, ids, _ = make_prompts(pool, 2, 0.2, "", 60.0, 4096, _tokenizer, action="edit")
        assert ids == [prior, prior]  # the improve prompt (a whole script) is then the only way
        assert all("```python" in p for p in prompts)


def test_parent_prompt_states_the_charged_time_once(tmp_path):
    """Under ``--time cpu`` a parent's outcome text holds its wall time (``ran 3.2 s``) and its
    reward was charged 2.9 CPU-s: the prompt shows only the charged time."""
    text = "score 0.0812 (lower is better), ran 3.2 s, beats 80% of the leaderboard"
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        pool = _pool(buf, [toy_sample(0, 0.9, 2.9, step=0, row=0, code=LOGREG, outcome_text=text)])
        args: dict[str, Any] = dict(
            description="", timeout_s=60.0, max_prompt_tokens=4096, tokenizer=_tokenizer
        )
        (prompt,), _, _ = make_prompts(pool, 1, None, action="edit", **args)
    assert (
        "Outcome of the script: score 0.0812 (lower is better), beats 80% of the leaderboard, "
        "ran 2.9 s\n" in prompt
    )
    assert prompt.count(" ran ") == 1
