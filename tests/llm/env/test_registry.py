"""The registry: each task id names one kind, and the kind answers by id without loading data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from rpg_llm.env import registry, tasks
from rpg_llm.env.kinds import MLEBenchKind, NanoGPTCPUKind, OfflineKind, SpeedrunKind
from rpg_llm.env.tasks import nanogpt
from rpg_llm.env.types import TaskKind
from testkit import REPO_ROOT
from testkit.mlebench_tree import build_mlebench_tree

SPOOKY = "spooky-author-identification"


class _Sample(NamedTuple):
    """A stored sample as the budget curves read it (``rpg_llm.env.types.ScoredSample``)."""

    row: int
    step: int
    exec_time: float
    score: float | None
    status: str


def test_each_id_names_its_kind():
    assert registry.kind("nanogpt-cpu") == NanoGPTCPUKind("nanogpt-cpu")
    assert registry.kind("nanogpt-speedrun") == SpeedrunKind()
    assert registry.kind("text") == OfflineKind("bbc-news-logloss")  # the alias, resolved
    assert registry.kind("churn-auc") == OfflineKind("churn-auc")
    assert registry.kind(SPOOKY) == MLEBenchKind(SPOOKY)
    for task_id in ("nanogpt-cpu", "nanogpt-speedrun", "text", SPOOKY):
        assert isinstance(registry.kind(task_id), TaskKind)
    assert registry.kind("nanogpt-speedrun").id == registry.SPEEDRUN_ID == "nanogpt-speedrun"


@pytest.mark.parametrize("bad", ["", "a/b", "..", None, 3])
def test_a_bad_name_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=repr(bad).replace(".", r"\.")):
        registry.kind(bad)  # pyright: ignore[reportArgumentType]  # the bad input
    assert not registry.is_loss_task(bad)  # pyright: ignore[reportArgumentType]  # the bad input


def test_loss_targets_are_the_tasks_own():
    assert registry.loss_target("nanogpt-cpu") == nanogpt.cpu_settings().target_loss
    assert registry.loss_target("nanogpt-speedrun") == nanogpt.SPEEDRUN.target_loss == 3.28
    assert registry.kind("text").loss_target() is None
    assert registry.kind(SPOOKY).loss_target() is None
    with pytest.raises(ValueError, match="'churn-auc' is not a NanoGPT task"):
        registry.loss_target("churn-auc")
    assert registry.is_loss_task("nanogpt-cpu") and registry.is_loss_task("nanogpt-speedrun")
    assert not registry.is_loss_task("text") and not registry.is_loss_task(SPOOKY)


def test_direction_is_known_by_id_where_the_id_tells_it():
    assert registry.kind("nanogpt-cpu").lower_is_better is True
    assert registry.kind("nanogpt-speedrun").lower_is_better is True
    assert registry.kind("bbc-news-logloss").lower_is_better is True  # log loss
    assert registry.kind("churn-auc").lower_is_better is False  # AUC
    assert registry.kind(SPOOKY).lower_is_better is None  # its config or board, once loaded


def test_default_timeouts():
    assert registry.default_timeout_s("nanogpt-cpu") == 300.0
    assert registry.default_timeout_s("nanogpt-cpu") == nanogpt.cpu_settings().timeout_s
    assert registry.default_timeout_s("nanogpt-speedrun") == nanogpt.SPEEDRUN.timeout_s == 1500.0
    assert registry.default_timeout_s("text") is None  # an offline competition has none
    assert registry.default_timeout_s(SPOOKY) is None


def test_loss_chains_count_only_crossings_and_refuse_a_score_task():
    target = nanogpt.SPEEDRUN.target_loss
    samples = [
        _Sample(row=0, step=1, exec_time=10.0, score=target + 0.5, status="ok"),
        _Sample(row=0, step=2, exec_time=5.0, score=target - 0.1, status="ok"),
        _Sample(row=1, step=1, exec_time=7.0, score=None, status="invalid"),
        _Sample(row=1, step=0, exec_time=99.0, score=1.0, status="ok"),  # a seed
    ]
    chains = registry.loss_chains("nanogpt-speedrun", samples)
    assert sorted(chains) == [0, 1]
    assert chains[0][0].tolist() == [10.0, 15.0] and chains[1][0].tolist() == [7.0]
    assert np.isnan(chains[0][1][0]) and chains[0][1][1] == pytest.approx(target - 0.1)
    assert registry.kind("text").loss_chains(samples) is None
    with pytest.raises(ValueError, match="not a NanoGPT task"):
        registry.loss_chains("text", samples)


def test_starting_scripts(tmp_path):
    checkout = tmp_path / "modded-nanogpt"
    checkout.mkdir()
    (checkout / "train_gpt.py").write_text("print('record')\n")
    assert registry.starting_scripts("nanogpt-speedrun", checkout) == [
        ("train_gpt", "print('record')\n")
    ]
    assert registry.starting_scripts("nanogpt-speedrun", str(checkout)) == [
        ("train_gpt", "print('record')\n")
    ]
    assert registry.starting_scripts("nanogpt-speedrun") == []  # no checkout given
    assert registry.baseline_solutions("nanogpt-speedrun") == []
    assert registry.starting_scripts("nanogpt-cpu") == nanogpt.baseline_solutions("nanogpt-cpu")
    bbc = tasks.baseline_solutions("bbc-news-logloss")
    assert len(bbc) == 5 and registry.starting_scripts("text", checkout) == bbc
    assert registry.baseline_solutions("text") == bbc
    assert registry.starting_scripts(SPOOKY) == registry.baseline_solutions(SPOOKY) == []


def test_speedrun_setup_names_what_is_missing(tmp_path):
    checkout = tmp_path / "modded-nanogpt"
    checkout.mkdir()
    (checkout / "train_gpt.py").write_text("print('record')\n")
    with pytest.raises(ValueError, match=r"needs --speedrun-dir DIR"):
        registry.check_setup("nanogpt-speedrun", data_root=tmp_path)
    with pytest.raises(ValueError, match=r"needs --data-root DIR .*RPG_NANOGPT_DATA"):
        registry.check_setup("nanogpt-speedrun", speedrun_dir=checkout)
    with pytest.raises(ValueError, match=r"^--data-root .* holds no FineWeb shards"):
        registry.check_setup("nanogpt-speedrun", speedrun_dir=checkout, data_root=tmp_path)
    with pytest.raises(ValueError, match=r"needs --speedrun-dir DIR"):
        registry.make_task("nanogpt-speedrun", str(tmp_path), None, "")  # "" is not given


def test_setup_of_the_stand_in_and_offline_competitions_loads_nothing(tmp_path):
    root = tmp_path / "absent"
    assert registry.check_setup("text", data_root=root) == "bbc-news-logloss"
    assert registry.check_setup("nanogpt-cpu", data_root=root) == "nanogpt-cpu"
    assert not root.exists()


def test_mlebench_setup_loads_the_competition_and_its_grader(tmp_path):
    t = build_mlebench_tree(tmp_path / "ok")
    got = registry.check_setup(t.comp_id, data_root=t.data_root, mlebench_dir=t.tree)
    assert got == t.comp_id
    with pytest.raises(ValueError, match=f"'{SPOOKY}' not found under data root {tmp_path}"):
        registry.check_setup(SPOOKY, data_root=tmp_path)
    broken = build_mlebench_tree(tmp_path / "broken", grade_source="import no_such_module_rpg\n")
    with pytest.raises(tasks.GradingSetupError, match="no_such_module_rpg"):
        registry.check_setup(broken.comp_id, data_root=broken.data_root, mlebench_dir=broken.tree)
    task = registry.make_task(t.comp_id, t.data_root, t.tree)
    assert isinstance(task, tasks.Competition) and task.lower_is_better is True


def test_only_offline_competitions_are_prepared(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(tasks, "prepare", lambda comp_id, root: built.append((comp_id, root)))
    assert registry.needs_prepare("text", tmp_path)  # nothing there yet
    assert registry.needs_prepare("churn-auc", str(tmp_path))
    registry.prepare("text", tmp_path)
    assert built == [("bbc-news-logloss", tmp_path)]
    for task_id in ("nanogpt-cpu", "nanogpt-speedrun", SPOOKY):
        assert not registry.needs_prepare(task_id, tmp_path)
        registry.prepare(task_id, tmp_path)
    assert built == [("bbc-news-logloss", tmp_path)] and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(tasks, "is_current", lambda comp_id, root: comp_id == "churn-auc")
    assert not registry.needs_prepare("churn-auc", tmp_path) and registry.needs_prepare("text")


def test_the_tasks_never_import_the_execute_module():
    """``execute`` depends on ``tasks``, never the reverse: the registry, every task kind and
    the competitions' own run load without it."""
    code = (
        "import sys; import rpg_llm.env.registry, rpg_llm.env.tasks.baselines; "
        "print('rpg_llm.env.execute' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(REPO_ROOT), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
