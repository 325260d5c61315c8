"""A run on a multi-node Ray cluster made on this machine, asynchronous (``--max-staleness 2``):
kill -9 of the driver with scripts in flight, then ``--resume``: nothing lost, nothing stored or
trained twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import fixtures_llm
import pytest

pytest.importorskip("ray")

from rpg_llm.loop.asynchronous import LEDGER  # noqa: E402
from rpg_llm.loop.buffer import read_samples  # noqa: E402
from testkit import REPO_ROOT  # noqa: E402
from testkit.ray_cluster import grader_cluster  # noqa: E402
from testkit.toy_competition import ACCURACY, build_competition  # noqa: E402

tiny_model_dir = fixtures_llm.tiny_model_dir

DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    from rpg_llm.config import LoopConfig, RewardConfig, SamplingConfig, PPOConfig
    from rpg_llm.env.actions import Action
    from testkit.toy_competition import PERFECT
    import rpg_llm.loop.asynchronous as asynchronous

    model, data, address, out, resume = sys.argv[1:6]
    # the tiny model writes noise: every answer is taken as a script that waits 1-3 s
    def script(text, action, parent):
        wait = 1 + len(text) % 3
        return Action("script", f"import time\\ntime.sleep({wait})\\n" + PERFECT)
    asynchronous.parse_action = script
    cfg = LoopConfig(
        task="toy-acc", data_root=data, model=model, steps=4, batch_size=2, seed_buffer=False,
        action="script", sandbox="subprocess", executor="ray", ray_address=address,
        max_staleness=2, job_resource="grader", estimator_batches=50,
        sampling=SamplingConfig(max_prompt_tokens=512, max_new_tokens=8),
        reward=RewardConfig("rpg", timeout_s=60.0), ppo=PPOConfig(micro_batch_size=2),
    )
    def kill(step, stage):  # kill -9 when a chain stores its 2nd sample: others in flight
        if resume == "0" and stage == "stored" and step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    records = asynchronous.train_async(cfg, out, resume=resume == "1", progress=False,
                                       on_stage=kill)
    print("updates", [r.step for r in records])
    """
)


@pytest.mark.slow
@pytest.mark.cluster
def test_kill_9_of_the_driver_with_jobs_in_flight_then_resume(tiny_model_dir, tmp_path):
    cluster = grader_cluster()
    try:
        data = tmp_path / "data"
        build_competition(data, "toy-acc", ACCURACY, lower=False)
        out = tmp_path / "run"
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1")

        def driver(resume: str) -> subprocess.CompletedProcess:
            args = [str(tiny_model_dir), str(data), cluster.address, str(out), resume]
            return subprocess.run(
                [sys.executable, "-c", DRIVER, *args], env=env, capture_output=True, text=True,
                timeout=900,
            )  # fmt: skip

        killed = driver("0")
        assert killed.returncode == -9, killed.stderr[-2000:]
        answers = sorted((out / "rollouts" / "async").glob("row*_step*.json"))
        before = {(s.row, s.step) for s in read_samples(out / "buffer.sqlite")}
        in_flight = {_key(p) for p in answers} - before
        assert in_flight, "the kill left no script in flight"
        done = driver("1")
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1].endswith("4]")  # it ran to update 4
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    samples = [s for s in read_samples(out / "buffer.sqlite") if s.step >= 1]
    keys = [(s.row, s.step) for s in samples]
    assert len(keys) == len(set(keys))  # nothing stored twice
    assert in_flight <= set(keys)  # the scripts in flight were resubmitted and stored
    ledger = [json.loads(x) for x in (out / LEDGER).read_text().splitlines()]
    assert [e["update"] for e in ledger] == [1, 2, 3, 4]
    trained = [i for e in ledger for i in e["trained"]]
    assert len(trained) == len(set(trained)) == 8  # 4 updates of B = 2, each sample once
    assert all(s.status == "ok" and s.score == 1.0 for s in samples)  # graded on the nodes


def _key(path) -> tuple[int, int]:
    a = json.loads(path.read_text())
    return a["row"], a["step"]
