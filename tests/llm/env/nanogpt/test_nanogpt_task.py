"""The NanoGPT task object, its data folders and set-up failures (fast, nothing launched)."""

from __future__ import annotations

import numpy as np
import pytest

from rpg_llm.env.tasks import nanogpt
from rpg_llm.env.tasks.nanogpt import env
from rpg_llm.env.tasks.nanogpt.data import corpus_splits
from rpg_llm.env.tasks.nanogpt.settings import cpu_settings


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return nanogpt.load_task("nanogpt-cpu", tmp_path_factory.mktemp("d"), cpu_settings(2.5))


def test_splits_are_disjoint_bytes_of_the_corpus(task):
    splits = corpus_splits()
    sizes = {k: len(v) for k, v in splits.items()}
    assert sizes["train"] > 15 * sizes["heldout"] > 0 and sizes["val"] > 0
    train = np.fromfile(task.public_dir / "train.bin", dtype=np.uint8)
    assert train.tobytes() == splits["train"]
    assert (task.private_dir / "heldout.bin").read_bytes() == splits["heldout"]
    assert not (task.public_dir / "heldout.bin").exists()
    # no held-out article appears in train (split by article)
    first = splits["heldout"].split(b"\n")[0]
    assert first not in splits["train"] and first not in splits["val"]


def test_load_refuses_a_changed_guard_and_unknown_names(task, tmp_path):
    with pytest.raises(ValueError, match="unknown NanoGPT task 'nanogpt-gpu'"):
        nanogpt.load_task("nanogpt-gpu", tmp_path)
    t = nanogpt.load_task("nanogpt-cpu", tmp_path, cpu_settings(2.5))
    (t.public_dir / "ngpt_eval.py").write_text("VAL_TOKENS = 1\n")
    with pytest.raises(ValueError, match="ngpt_eval.py differs from the package's copy"):
        nanogpt.load_task("nanogpt-cpu", tmp_path, cpu_settings(2.5))


def test_a_guard_changed_before_the_attempt_is_infra(task, tmp_path):
    t = nanogpt.load_task("nanogpt-cpu", tmp_path, cpu_settings(2.5))
    (t.public_dir / "settings.json").write_text("{}")
    o = nanogpt.run_attempt("pass\n", t, "subprocess")
    assert o.status == "infra" and "settings.json" in o.outcome_text and not o.valid


def test_a_sandbox_that_cannot_start_is_infra(task, monkeypatch):
    class Broken:
        name = "broken"

        def run(self, *a, **k):
            raise OSError("no bwrap")

    monkeypatch.setattr(env, "make_sandbox", lambda *a, **k: Broken())
    o = nanogpt.run_attempt("pass\n", task, "bwrap")
    assert o.status == "infra" and "no bwrap" in o.outcome_text


def test_baselines_and_description(task):
    ((name, code),) = nanogpt.baseline_solutions("nanogpt-cpu")
    assert name == "baseline_cpu" and "ngpt_eval.save_model(model)" in code
    assert nanogpt.baseline_solutions("text") == []
    assert "2.5000" in task.description and "--nproc_per_node=1" in task.description
