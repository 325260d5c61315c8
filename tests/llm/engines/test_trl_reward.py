"""The TRL reward function and prompt source on hand-made outcomes (no model, no TRL step)."""

from __future__ import annotations

import csv
import math
import types
from dataclasses import replace
from typing import NamedTuple

import numpy as np
import pytest
import torch

pytest.importorskip("trl")

from rpg_llm.config import IMPROVEMENT_BONUS, LoopConfig, RewardConfig, SamplingConfig, TRLConfig  # noqa: E402  # noqa: E402
from rpg_llm.engines.trl import BufferPrompts, RPGRun, completion_text  # noqa: E402
from rpg_llm.loop import default_backends  # noqa: E402
from rpg_llm.loop.rewards import INVALID_REWARD  # noqa: E402

TIMEOUT_S = 30.0


class _Ratio(NamedTuple):
    rho_hat: torch.Tensor


def _ratio_estimator():
    """rho_hat = max(0, sum r / sum t) over the slots: a value to check by hand."""

    def init_state(dtype, device=None):
        return _Ratio(torch.tensor(0.0, dtype=dtype))

    def refit(state, r, t, generator, num_batches=1000):
        return _Ratio(torch.clamp(r.sum() / t.sum(), min=0.0)) if t.sum() > 0 else state

    return types.SimpleNamespace(init_state=init_state, refit=refit)


def _outcome(status, score, delta):
    valid = status == "ok"
    raw = score if valid else (0.0 if status == "infra" else INVALID_REWARD)
    return types.SimpleNamespace(
        status=status, delta=delta, score=score if valid else None, raw_reward=raw,
        valid=valid, outcome_text=f"{status} {score}", cpu_s=delta,
    )  # fmt: skip


# script name -> (status, score, seconds)
OUTCOMES = {
    "a": ("ok", 0.9, 3.0),
    "b": ("ok", 0.5, 1.0),
    "c": ("error", None, 2.0),
    "d": ("infra", None, 0.5),
    "e": ("ok", 0.7, 10.0),
    "f": ("ok", 0.8, 2.0),
    "g": ("ok", 0.95, 4.0),
    "h": ("ok", 0.1, 0.2),
}


def _backends():
    b = default_backends()
    b.estimator = _ratio_estimator()

    def run_batch(codes, task, sandbox, timeout_s, executor):
        return [_outcome(*OUTCOMES[code.split()[1]]) for code in codes]

    b.run_batch = run_batch
    return b


def _answer(name: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"```python\n# {name}\nprint(1)\n```"}]


def _cfg(method: str, **kw) -> LoopConfig:
    base = LoopConfig(
        task="text",
        batch_size=4,
        engine="trl",
        trl=TRLConfig(num_generations=2),
        seed_buffer=False,
        sandbox="subprocess",
        workers=1,
        estimator_batches=10,
        sampling=SamplingConfig(max_prompt_tokens=512, max_new_tokens=64),
        reward=RewardConfig(method, timeout_s=TIMEOUT_S),
    )
    return replace(base, **kw)


def _score(run: RPGRun, names: list[str]) -> list[float | None]:
    n = len(names)
    return run.reward(
        prompts=[[{"role": "user", "content": "improve"}]] * n,
        completions=[_answer(x) for x in names],
        completion_ids=[[1, 2, 3]] * n,
        parent_id=[-1] * n,
        parent_code=[""] * n,
    )


@pytest.fixture
def rpg_run(tmp_path):
    run = RPGRun(_cfg("rpg"), tmp_path / "run", backends=_backends())
    yield run
    run.close()


def test_relative_rewards_exact_on_hand_made_outcomes(rpg_run):
    """Step 1: a (0.9, 3 s), b (0.5, 1 s), c (error after 2 s), d (infra: None). The slots get
    the scores and measured times, c's score 0 (DESIGN.md section 7): r = 0.9 + 0.5 + 0,
    t = 3 + 1 + 2 -> rho_1 = 1.4 / 6; c's trained reward is -10 charged the 30 s timeout.
    Step 2: e, f, g, h all valid -> rho_2 = (1.4 + 0.7 + 0.8 + 0.95 + 0.1) / (6 + 16.2); g beats
    step 1's best 0.9: its bonus."""
    got1 = _score(rpg_run, ["a", "b", "c", "d"])
    rho1 = 1.4 / 6.0
    want1 = [0.9 + IMPROVEMENT_BONUS - rho1 * 3.0, 0.5 + IMPROVEMENT_BONUS - rho1 * 1.0]
    assert got1[:3] == pytest.approx([*want1, INVALID_REWARD - rho1 * TIMEOUT_S])
    assert got1[3] is None
    got2 = _score(rpg_run, ["e", "f", "g", "h"])
    rho2 = (1.4 + 0.7 + 0.8 + 0.95 + 0.1) / (6.0 + 10.0 + 2.0 + 4.0 + 0.2)
    assert rpg_run.env.accounts.rho_hat == pytest.approx(rho2)
    rows = [("e", 0.7, 10.0), ("f", 0.8, 2.0), ("g", 0.95, 4.0), ("h", 0.1, 0.2)]
    want = [r - rho2 * t + (IMPROVEMENT_BONUS if r > 0.9 else 0.0) for _, r, t in rows]
    assert got2 == pytest.approx(want)
    # stored: 8 samples, rows 0..3 of steps 1 and 2, infra kept with its status
    stored = rpg_run.env.step_samples(1) + rpg_run.env.step_samples(2)
    assert [(s.step, s.row) for s in stored] == [(k, r) for k in (1, 2) for r in range(4)]
    assert [s.status for s in rpg_run.env.step_samples(1)] == ["ok", "ok", "error", "infra"]
    with open(rpg_run.env.folder.root / "samples.csv") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert len(csv_rows) == 8 and csv_rows[3]["status"] == "infra"
    # the record is written before TRL's update: no update time in it, not a made-up 0
    assert [r.step for r in rpg_run.records] == [1, 2]
    assert all(math.isnan(r.ppo_seconds) for r in rpg_run.records)


def test_positive_rate_prices_time(tmp_path):
    """With a positive rate the reward is r - rho_hat * delta, rho_hat refitted on this step."""
    run = RPGRun(_cfg("rpg", batch_size=2), tmp_path / "run", backends=_backends())
    try:
        got1 = _score(run, ["a", "b"])
        rho1 = (0.9 + 0.5) / (3.0 + 1.0)
        assert got1 == pytest.approx([0.9 + 0.5 - rho1 * 3.0, 0.5 + 0.5 - rho1 * 1.0])
        got2 = _score(run, ["e", "g"])
        rho2 = (0.9 + 0.7 + 0.5 + 0.95) / (3.0 + 10.0 + 1.0 + 4.0)
        assert got2 == pytest.approx([0.7 - rho2 * 10.0, 0.95 + 0.5 - rho2 * 4.0])
        assert run.records[-1].rho_hat == pytest.approx(rho2)
        assert run.records[0].rho_hat_parents == 0.0 and run.next_step == 3
    finally:
        run.close()


def test_vanilla_is_raw_reward_plus_bonus(tmp_path):
    run = RPGRun(_cfg("vanilla", batch_size=2), tmp_path / "run", backends=_backends())
    try:
        assert _score(run, ["b", "c"]) == pytest.approx([0.5 + IMPROVEMENT_BONUS, -10.0])
        assert _score(run, ["a", "h"]) == pytest.approx([0.9 + IMPROVEMENT_BONUS, 0.1])
        assert run.reward.__name__ == "raw_reward"
    finally:
        run.close()


def test_wrong_batch_is_refused(rpg_run):
    with pytest.raises(ValueError, match="3 answers but batch_size is 4"):
        _score(rpg_run, ["a", "b", "e"])


def test_prompt_source_follows_the_buffer(tmp_path):
    """Parents are the buffer's top P = B / G by r - rho_hat * delta (vanilla: r), re-read each
    time; refresh keeps each row's slot and swaps in the current parent."""
    import fixtures_llm  # noqa: F401  (tests/ on the path)
    from transformers import AutoTokenizer

    from testkit.tiny_model import build_tiny_model

    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tiny"))
    for method in ("rpg", "vanilla"):
        run = RPGRun(_cfg(method, batch_size=4), tmp_path / method, backends=_backends())
        try:
            source = BufferPrompts(run, tok, num_generations=2)

            def expected_top(run=run, method=method) -> list[int | None]:
                rho = run.env.accounts.rho_hat
                stored = [s for k in (1, 2) for s in run.env.step_samples(k)]
                key = (
                    (lambda s: s.raw_reward - rho * s.exec_time)
                    if method == "rpg"
                    else (lambda s: s.raw_reward)
                )
                return [s.id for s in sorted(stored, key=lambda s: -key(s))[:2]]

            _score(run, ["a", "b", "e", "h"])
            assert run.env.accounts.rho_hat == pytest.approx(
                (0.9 + 0.5 + 0.7 + 0.1) / 14.2 if method == "rpg" else 0.155, abs=1e-3
            )
            rows = source.rows()
            assert [r["parent_id"] for r in rows] == expected_top()
            assert [r["slot"] for r in rows] == [0, 1]
            first = run.env.buffer.get(rows[0]["parent_id"])
            assert first.code in rows[0]["prompt"][0]["content"]
            # at rho 0.155/s: rpg ranks a (0.435) > b (0.345) > h > e; vanilla a > e (0.7)
            second = run.env.buffer.get(rows[1]["parent_id"])
            assert (first.code.split()[1], second.code.split()[1]) == (
                ("a", "b") if method == "rpg" else ("a", "e")
            )
            # the next read follows the buffer: g (0.95) tops vanilla's ranking
            _score(run, ["g", "f", "c", "h"])
            top = source.rows()
            assert [r["parent_id"] for r in top] == expected_top()
            if method == "vanilla":
                assert run.env.buffer.get(top[0]["parent_id"]).code.split()[1] == "g"
            fresh = source.refresh([{"slot": 1, "prompt": "stale"}, {"slot": 0, "prompt": "x"}])
            assert [f["parent_id"] for f in fresh] == [top[1]["parent_id"], top[0]["parent_id"]]
            assert fresh[0]["prompt"] == top[1]["prompt"]
        finally:
            run.close()


def test_completion_text_forms():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "x"}]) == "x"
    content = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    parts = [{"role": "assistant", "content": content}]
    assert completion_text(parts) == "ab"
    with pytest.raises(TypeError, match="int"):
        completion_text(3)
    assert math.isfinite(float(np.float64(1.0)))


def test_percentile_for_a_task_with_its_own_rewards_is_refused_before_the_folder_exists(tmp_path):
    b = _backends()
    own = types.SimpleNamespace(id="own", own_rewards=lambda: object())  # e.g. the speedrun
    b.load_task = lambda task, data_root: own
    cfg = _cfg("rpg", reward=RewardConfig("rpg", timeout_s=TIMEOUT_S, raw_reward="percentile"))
    with pytest.raises(ValueError, match="--raw-reward percentile: this task has rewards"):
        RPGRun(cfg, tmp_path / "run", backends=b)
    assert not (tmp_path / "run").exists()
