"""One step of the training loop on the CPU stand-in with the tiny policy (issue 10 acceptance).

The loop is driven through ``rpg_llm.loop.Backends`` with the NanoGPT task's functions
(``load_task``, ``baseline_solutions``, ``run_batch``): what ``--preset nanogpt-cpu`` does once
the lead wires the preset.  The seed baseline is a real torchrun attempt.
"""

from __future__ import annotations

import json
import math

import fixtures_llm
import pytest

from rpg_llm.loop import LoopConfig, default_backends, train
from rpg_llm.sandbox import bwrap_works
from rpg_llm.tasks import nanogpt

tiny_model_dir = fixtures_llm.tiny_model_dir


@pytest.mark.slow
def test_one_loop_step_on_the_cpu_stand_in(tiny_model_dir, tmp_path):
    data_root = tmp_path / "data"
    b = default_backends()
    b.load_task = lambda task, root: nanogpt.load_task(task, data_root)
    b.baseline_solutions = nanogpt.baseline_solutions
    b.run_batch = nanogpt.run_batch
    timeout = nanogpt.cpu_settings().timeout_s
    cfg = LoopConfig(
        method="rpg",
        task="nanogpt-cpu",
        model=str(tiny_model_dir),
        steps=1,
        batch_size=1,
        timeout_s=timeout,
        max_prompt_tokens=4096,
        max_new_tokens=8,
        workers=1,
        sandbox="bwrap" if bwrap_works() else "subprocess",
        estimator_batches=100,
        ppo={"micro_batch_size": 1},
    )
    run = tmp_path / "run"
    records = train(cfg, run, backends=b, progress=False)
    assert [r.step for r in records] == [1]
    from rpg_llm.buffer import SampleBuffer

    samples = SampleBuffer(run / "buffer.sqlite", capacity=10).all()
    seed = [s for s in samples if s.step == 0]
    assert len(seed) == 1 and seed[0].status == "ok", seed[0].outcome_text
    assert seed[0].score < 3.5 and seed[0].exec_time > 0
    target = nanogpt.cpu_settings().target_loss
    assert seed[0].raw_reward == pytest.approx(nanogpt.rpg_reward(seed[0].score, True, target))
    step1 = [s for s in samples if s.step == 1]
    assert len(step1) == 1 and step1[0].parent_id == seed[0].id
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["step"] == 1 and math.isfinite(metrics[0]["ppo/pg_loss"])
