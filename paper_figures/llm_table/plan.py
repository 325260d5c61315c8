"""The table's runs: one :class:`RunSpec` per task x arm x seed, the
:class:`rpg_llm.config.LoopConfig` of each, the checks before any run starts, each folder's state
and the command that starts or resumes a run.

A run's config is the preset's (``rpg_llm.presets``) with the table's shared settings applied
(``rpg_llm.launch.make_config``, once per task), then ``dataclasses.replace`` of what differs
per run: the seed and the arm's reward fields (:data:`PER_RUN`). A new run is started as
``python -m rpg_llm.run --config FILE --out RUN_DIR`` with that config stored in ``FILE``
(:attr:`RunSpec.config_path`); a killed one is resumed with ``--resume RUN_DIR --steps N``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from paper_figures.llm_table.settings import ARMS, TableSettings
from rpg_core.cli import UsageError
from rpg_llm.config import LoopConfig, RewardConfig
from rpg_llm.launch import RunStatus, config_difference, make_config, plan, status, trl_flags_given

__all__ = [
    "PER_RUN",
    "RunSpec",
    "run_specs",
    "arm_reward",
    "task_config",
    "run_configs",
    "check_runs",
    "run_state",
    "run_command",
]

PER_RUN = ("task", "seed", "reward.method", "reward.fixed_lambda", "reward.parent_rank")
"""The settings (dotted ``LoopConfig`` paths) the table sets per run: ``--tasks``, ``--seeds``
and the arm (:data:`paper_figures.llm_table.settings.ARMS`, ``--fixed-lambda``)."""


@dataclass(frozen=True, repr=False)
class RunSpec:
    """One run of the table: ``task`` x ``method`` (the arm) x ``seed``, under the table's
    output folder ``out``."""

    task: str
    method: str
    seed: int
    out: Path

    @property
    def name(self) -> str:
        """``<task>/<method>-seed<seed>``, the run's folder under ``<out>/runs``."""
        return f"{self.task}/{self.method}-seed{self.seed}"

    @property
    def run_dir(self) -> Path:
        """The run folder, ``<out>/runs/<task>/<method>-seed<seed>``."""
        return self.out / "runs" / self.name

    @property
    def log_path(self) -> Path:
        """The run's log (its runs, resumes and probe), ``<out>/logs/<task>/<name>.log``."""
        return self.out / "logs" / f"{self.name}.log"

    @property
    def config_path(self) -> Path:
        """The config a new run starts from (``--config``), beside its log."""
        return self.out / "logs" / f"{self.name}.config.json"

    def __repr__(self) -> str:
        return f"{self.task} {self.method} seed {self.seed}"


def run_specs(s: TableSettings, out: Path) -> list[RunSpec]:
    """The table's runs in its order: by task, then seed, then arm."""
    return [RunSpec(t, m, k, out) for t in s.tasks for k in s.seeds for m in s.arms]


def arm_reward(reward: RewardConfig, arm: str, fixed_lambda: float | None = None) -> RewardConfig:
    """``reward`` with the fields that make ``arm`` (:data:`ARMS`): its method and parent
    ranking, and ``fixed_lambda`` (reward per second) for the fixed-lambda arm, 0 for the others.

    Raises:
        ValueError: an unknown arm, or fixed-lambda without a ``fixed_lambda`` > 0.
    """
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; arms: {', '.join(ARMS)}")
    a = ARMS[arm]
    price = 0.0
    if a.method == "fixed-lambda":
        if fixed_lambda is None or not fixed_lambda > 0:
            raise ValueError(f"arm fixed-lambda needs --fixed-lambda > 0, got {fixed_lambda}")
        price = float(fixed_lambda)
    return replace(reward, method=a.method, parent_rank=a.parent_rank, fixed_lambda=price)


def task_config(s: TableSettings, task: str) -> LoopConfig:
    """The settings every run of ``task`` shares: the preset's with ``s.run`` and the task
    applied (``rpg_llm.launch.make_config``); the seed and the arm are the preset's.

    Raises:
        UsageError: an unknown preset or a bad value (the message names the flag).
    """
    return make_config({**s.run, "task": task}, preset=s.preset)


def run_configs(s: TableSettings, specs: Sequence[RunSpec]) -> dict[RunSpec, LoopConfig]:
    """The config of every run of ``specs``: :func:`task_config` with the run's seed and arm.

    Raises:
        UsageError: a bad value (the message names the flag).
    """
    base = {t: task_config(s, t) for t in dict.fromkeys(p.task for p in specs)}
    cfgs = {}
    for p in specs:
        cfg = base[p.task]
        try:
            reward = arm_reward(cfg.reward, p.method, s.fixed_lambda)
        except ValueError as err:
            raise UsageError(f"--arms {p.method}: {err}") from None
        cfgs[p] = replace(cfg, seed=p.seed, reward=reward)
    return cfgs


def check_runs(
    s: TableSettings,
    specs: Sequence[RunSpec],
    cfgs: Mapping[RunSpec, LoopConfig],
    *,
    table_only: bool,
) -> None:
    """Every check a run needs (``rpg_llm.launch.plan``: task, engine and its flags, model,
    starting scripts, the edit prompt's token budget), once per task on its first run, before
    any run starts. ``table_only``: reading finished runs needs neither the engine's packages
    nor the preset's GPU and data.

    Raises:
        UsageError: the first problem found, naming the flag and the value.
    """
    for task in s.tasks:
        first = next(p for p in specs if p.task == task)
        plan(
            cfgs[first],
            first.run_dir,
            preset=None if table_only else s.preset,
            given_trl_flags=trl_flags_given(s.run),
            check_packages=not table_only,
            check_folder=False,
        )


def run_state(spec: RunSpec, cfg: LoopConfig) -> RunStatus:
    """The state of ``spec``'s folder under ``cfg`` (``rpg_llm.launch.status``): ``new``,
    ``resumable`` or ``finished`` (its steps reach ``cfg.steps``, or every chain has used the
    execution budget).

    Settings that change only speed and memory (``rpg_llm.config.SPEED_ONLY_SETTINGS``) may
    differ: the stored run resumes with its own.

    Raises:
        UsageError: the folder holds a run that cannot be read or resumed, or one with other
            settings (another execution budget, or more steps, count too); names ``--out``
            and the setting.
    """
    st = status(spec.run_dir, cfg)
    if st.state == "broken":
        raise UsageError(
            f"--out: {spec.run_dir} holds a broken run ({st.reason}); choose another --out or "
            "remove that folder"
        )
    stored = st.config
    if stored is None:
        return st
    what = config_difference(stored, cfg)
    if what is None and stored.exec_budget_s != cfg.exec_budget_s:
        what = f"exec_budget_s = {stored.exec_budget_s!r}, asked {cfg.exec_budget_s!r}"
    if what is None and stored.steps > cfg.steps:
        what = f"steps = {stored.steps} (> {cfg.steps})"
    if what is not None:
        raise UsageError(
            f"--out: {spec.run_dir} holds a run with other settings ({what}); choose another "
            f"--out or remove that folder"
        )
    return st


def run_command(spec: RunSpec, cfg: LoopConfig, state: str) -> list[str]:
    """The ``python -m rpg_llm.run`` command line of one run in ``state`` (:func:`run_state`):
    a new run starts from :attr:`RunSpec.config_path` (which must hold ``cfg``), a resumable
    one continues to ``cfg.steps``."""
    base = [sys.executable, "-m", "rpg_llm.run"]
    if state == "resumable":
        return base + ["--resume", str(spec.run_dir), "--steps", str(cfg.steps), "--no-progress"]
    return base + ["--config", str(spec.config_path), "--out", str(spec.run_dir), "--no-progress"]
