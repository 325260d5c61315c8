"""The edit action format and the SFT warm start wired into the loop.

The tiny model's own answers are noise, so the end-to-end runs script the answers (a fake
``rpg_llm.learner.policy.generate`` returning real token ids of fixed texts): one valid edit, one
invalid
edit per step. Everything else is the real loop: the bbc-news-logloss baselines run and are
graded, the PPO update runs on the scripted tokens.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import fixtures_llm
import pytest

from rpg_llm.config import RewardConfig
from rpg_llm.env import tasks
from rpg_llm.env.actions import apply_edit, editable_baselines, editable_constants, parse_action
from rpg_llm.env.prompts import BASELINE_OUTCOME, edit_prompt
from rpg_llm.loop import LoopConfig, Trainer, train
from rpg_llm.loop.execution import execute_rows
from rpg_llm.loop.pipeline import Answers, RunEnv
from rpg_llm.loop.rollout import CHAT_TEMPLATE_ROOM, Rollout
from rpg_llm.loop.warm_start import weights_digest
from testkit import REPO_ROOT
from testkit.tiny_trainer import bbc_backends, tiny_edit_config

tiny_model_dir = fixtures_llm.tiny_model_dir

BBC = "bbc-news-logloss"
SEEDS = ("logreg_tfidf", "nb_tfidf")  # two baselines with editable constants
BAD_EDIT = "```python\nNO_SUCH_NAME = 3\n```"


def _baselines():
    return [(n, c) for n, c in tasks.baseline_solutions(BBC) if n in SEEDS]


def _backends():
    return bbc_backends(SEEDS)


def _cfg(model_dir, method="rpg", **kw):
    """testkit's tiny edit config, seeded, two workers, arm ``method``."""
    base = {"workers": 2, "seed_buffer": True, "reward": RewardConfig(method, timeout_s=60.0)}
    return tiny_edit_config(model_dir, **(base | kw))


def _scripted_generate(answers_for, calls):
    """A stand-in for ``rpg_llm.learner.policy.generate`` answering ``answers_for(prompt_ids)``."""
    from rpg_llm.learner.policy import Generation

    def fake(policy, query_ids, max_new_tokens, temperature=0.7, **kw):
        calls.append(temperature)
        tok = policy.tokenizer
        texts = [answers_for(i, q) for i, q in enumerate(query_ids)]
        ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
        ids = [r[:max_new_tokens] for r in ids]
        return Generation(query_ids, ids, texts, 0.01, sum(map(len, ids)))

    return fake


def _edit_of(prompt_text: str, k: int) -> str:
    """The ``k``-th valid edit (a new value each time) of the parent shown in an edit prompt."""
    for name, new in (("C", 1.5 * (k + 2)), ("ALPHA", 0.05 * (k + 3)), ("MAX_FEATURES", 2000 + k)):
        if f"\n- {name} = " in prompt_text:  # the listing of editable constants
            return f"New values:\n```python\n{name} = {new}\n```"
    raise AssertionError("no known constant in the prompt")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["rpg", "vanilla"])
def test_both_arms_end_to_end_in_edit_mode(tiny_model_dir, tmp_path, monkeypatch, method):
    import rpg_llm.loop.rollout

    calls: list[float] = []
    edits: list[str] = []  # the valid edit answered in row 0 of each step

    def answers_for(i, q):
        return BAD_EDIT if i == 1 else edits[-1]

    real_make = RunEnv.prompts

    def prompts_spy(self, n, tokenizer):
        out = real_make(self, n, tokenizer)
        edits.append(_edit_of(out.prompts[0], len(edits)))
        return out

    monkeypatch.setattr(RunEnv, "prompts", prompts_spy)
    monkeypatch.setattr(rpg_llm.loop.rollout, "generate", _scripted_generate(answers_for, calls))
    run = tmp_path / method
    cfg = _cfg(tiny_model_dir, method)
    records = train(cfg, run, backends=_backends(), progress=False)
    assert [r.step for r in records] == [1, 2]
    assert calls == [0.9, 0.9]  # the sampler's temperature ...
    from rpg_llm.loop.buffer import SampleBuffer

    samples = SampleBuffer(run / "buffer.sqlite").all()
    by_id = {s.id: s for s in samples}
    seeds = [s for s in samples if s.step == 0]
    assert sorted(s.code for s in seeds) == sorted(c for _, c in _baselines())
    assert all(s.status == "ok" for s in seeds)
    for step in (1, 2):
        row0, row1 = sorted((s for s in samples if s.step == step), key=lambda s: s.row)
        parent = by_id[row0.parent_id]
        action = parse_action(edits[step - 1], "edit", parent.code)
        assert action.kind == "edit" and action.changed
        # the buffer stores the complete script that ran: the parent with the edit applied
        assert row0.code == apply_edit(parent.code, action.changes) != parent.code
        assert row0.status == "ok" and row0.score is not None and row0.exec_time > 0
        assert row1.status == "invalid" and row1.exec_time == 0.0
        assert "NO_SUCH_NAME" in row1.outcome_text  # the action's reason, naming the name
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(m["answers/edit"], m["answers/changed"], m["answers/invalid"]) for m in metrics] == [
        (1, 1, 1),
        (1, 1, 1),
    ]
    for m in metrics:
        assert math.isfinite(m["ppo/pg_loss"]) and math.isfinite(m["ppo/vf_loss"])
    stored = json.loads((run / "config.json").read_text())
    assert stored["action"] == "edit" and stored["sft_steps"] == 0


def test_trainer_temperature_is_the_samplers(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, seed_buffer=False)
    trainer = Trainer(cfg, tmp_path / "run", backends=_backends(), progress=False)
    try:
        assert trainer.ppo.temperature == cfg.sampling.temperature == 0.9  # ... is the trainer's
    finally:
        trainer.close()


def test_empty_buffer_edit_prompts_show_the_baselines_in_turn(tiny_model_dir, tmp_path):
    cfg = _cfg(tiny_model_dir, seed_buffer=False, batch_size=3)
    trainer = Trainer(cfg, tmp_path / "run", backends=_backends(), progress=False)
    try:
        p = trainer.env.prompts(cfg.batch_size, trainer.policy.tokenizer)
        prompts, parent_ids, parent_codes = p.prompts, p.parent_ids, p.parent_codes
    finally:
        trainer.close()
    bases = editable_baselines(_baselines())
    assert list(parent_codes) == [bases[i % 2][1] for i in range(3)]
    assert parent_ids == [None] * 3
    assert prompts[0] != prompts[1] and prompts[0] == prompts[2]
    for p, code in zip(prompts, parent_codes, strict=True):
        assert BASELINE_OUTCOME in p and "# Competition" not in p  # --no-description
        assert all(f"{n} = " in p for n in editable_constants(code))  # its parent's listing
    tok = trainer.policy.tokenizer

    def count(s):
        return len(tok(s, add_special_tokens=False)["input_ids"])

    assert count(prompts[0]) <= cfg.sampling.max_prompt_tokens - CHAT_TEMPLATE_ROOM
    assert prompts[1] == edit_prompt(
        "", bases[1][1], BASELINE_OUTCOME, 60.0, 512 - CHAT_TEMPLATE_ROOM, count
    )


def test_invalid_edit_is_stored_with_its_outcome_text():
    """Execution without a model: a valid edit runs (the complete script is stored), an edit
    of an unknown name and an answer without a block are invalid with the action's text."""
    backends = _backends()
    cfg = LoopConfig(task="text", action="edit", sandbox="subprocess", workers=2)
    comp = backends.load_task("text", None)
    parent = dict(_baselines())["nb_tfidf"]
    texts = ["```python\nALPHA = 0.5\n```", BAD_EDIT, "no code here", "```python\nALPHA = 'x'\n```"]
    rollout = Rollout(
        step=1,
        prompts=["p"] * 4,
        parent_ids=[None] * 4,
        query_ids=[[1]] * 4,
        response_ids=[[2]] * 4,
        texts=texts,
        gen_seconds=0.0,
        gen_tokens=4,
        parent_codes=[parent, parent, parent, parent],
    )
    sandbox = backends.make_sandbox(cfg.sandbox)
    service = backends.make_service(cfg, comp, sandbox, backends.run_batch)
    try:
        answers = Answers.of_rollout(rollout)
        actions = answers.actions(cfg.action)
        samples, _ = execute_rows(answers, actions, cfg, comp.id, backends.sample_cls, service)
    finally:
        service.close()
    ok, unknown, none, wrong_type = samples
    assert ok.status == "ok" and ok.code == parent.replace("ALPHA = 0.1", "ALPHA = 0.5")
    assert ok.score is not None and ok.code != parent and 0 < ok.score < 2.0  # a real fit's loss
    assert unknown.status == "invalid" and unknown.raw_reward == -10.0
    assert unknown.outcome_text == parse_action(BAD_EDIT, "edit", parent).outcome_text
    assert "line 1" in unknown.outcome_text and "NO_SUCH_NAME" in unknown.outcome_text
    assert none.status == "invalid" and "no fenced" in none.outcome_text
    assert wrong_type.status == "invalid" and "ALPHA" in wrong_type.outcome_text
    assert ok.created_at <= time.time()


def test_edit_rollout_without_parent_scripts_is_refused():
    from rpg_llm.loop.execution import rollout_actions

    with pytest.raises(ValueError, match="parent scripts"):
        rollout_actions(1, [BAD_EDIT], None, "edit")
    assert rollout_actions(1, [BAD_EDIT], None, "script")[0].kind == "script"


def test_bad_action_is_a_usage_error(capsys):
    from rpg_llm.run import main

    assert main(["--action", "diff"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--action" in err and "diff" in err


@pytest.mark.slow
def test_sft_warm_start_through_the_cli_and_resume_keeps_the_sft_reference(
    tiny_model_dir, tmp_path
):
    import subprocess
    import sys

    repo = REPO_ROOT
    run = tmp_path / "run"
    args = ["--model", str(tiny_model_dir), "--action", "edit", "--sft-steps", "2"]
    args += ["--steps", "1", "--max-new-tokens", "8", "--max-prompt-tokens", "768"]
    args += ["--estimator-batches", "100"]
    args += ["--sandbox", "subprocess", "--no-progress", "--no-plot", "--out", str(run)]
    proc = subprocess.run(
        [sys.executable, "-m", "rpg_llm.run", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sft = json.loads((run / "sft.json").read_text())
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    sft_lines = [m for m in metrics if "sft/loss" in m]
    assert [m["sft_step"] for m in sft_lines] == [1, 2] and all(m["step"] == 0 for m in sft_lines)
    assert [m["sft/loss"] for m in sft_lines] == pytest.approx(sft["losses"])
    assert all(math.isfinite(x) and x > 0 for x in sft["losses"])
    assert [m["step"] for m in metrics if "sft/loss" not in m] == [1]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("sft/loss")] == pytest.approx(sft["losses"], rel=1e-6)
    cfg = LoopConfig.from_dict(json.loads((run / "config.json").read_text()))
    assert (cfg.action, cfg.sft_steps) == ("edit", 2)
    from rpg_llm.learner.policy import load_policy

    pretrained = weights_digest(load_policy(str(tiny_model_dir), device="cpu").model)
    assert sft["weights_sha256"] != pretrained  # the SFT changed the weights
    # resume: the reference is the fine-tuned model again, not the pretrained one
    trainer = Trainer(replace(cfg, steps=2), run, resume=True, progress=False)
    try:
        if trainer.ppo.ref is not None:  # full fine-tuning: the frozen copy
            assert weights_digest(trainer.ppo.ref) == sft["weights_sha256"]
        else:  # LoRA (the cpu-default): the actor with its adapters disabled, on the SFT weights
            import torch
            from safetensors.torch import load_model

            sft_model = load_policy(str(tiny_model_dir), device="cpu").model.eval()
            load_model(sft_model, str(run / "sft_weights.safetensors"))
            assert weights_digest(sft_model) == sft["weights_sha256"]
            ids = torch.tensor([[5, 6, 7, 8, 9]])
            with torch.no_grad(), trainer.ppo.policy.disable_adapter():
                ref = trainer.ppo.policy(input_ids=ids).logits
            torch.testing.assert_close(ref, sft_model(input_ids=ids).logits, rtol=0, atol=0)
        assert trainer.start_step == 2
    finally:
        trainer.close()
    # a resumed SFT that does not reproduce the recorded weights is refused
    (run / "sft.json").write_text(json.dumps(sft | {"weights_sha256": "0" * 64}))
    with pytest.raises(RuntimeError, match="other weights"):
        Trainer(replace(cfg, steps=2), run, resume=True, progress=False)
