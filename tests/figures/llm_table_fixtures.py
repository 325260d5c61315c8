"""Shared by the ``paper_figures.llm_table`` tests: hand-made run folders with values worked out
by hand, the tiny table's command line, and shortcuts to the settings and configs it builds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from paper_figures.llm_table import cli, plan
from paper_figures.llm_table.settings import PROG, TableSettings
from rpg_llm.config import LoopConfig
from rpg_llm.loop.buffer import Sample, SampleBuffer
from rpg_llm.loop.runfolder import RunFolder

# run -> rows of (exec_time s, raw reward) per batch row, steps 1, 2, ...
HAND = {
    ("rpg", 0): [[(2.0, 0.5), (3.0, 0.7)], [(1.0, -10.0), (1.0, 0.6)]],  # T_run 5
    ("rpg", 1): [[(4.0, 0.8)], [(1.0, 0.2), (2.0, 0.9)]],  # T_run 4 (the smallest)
    ("vanilla", 0): [[(6.0, 0.4), (6.0, 0.9)], [(3.0, 0.3)]],  # T_run 12; first sample 6 s
    ("vanilla", 1): [[(2.0, 0.5)], [(2.0, 0.1), (5.0, 0.6)]],  # T_run 7
}
# B = max(min T_run = 4, slowest first sample = 6) = 6 s:
# rpg0 (0.7 + 0.6)/2 = 0.65, rpg1 (0.8 + 0.9)/2 = 0.85 -> 0.75 +- 0.1;
# vanilla0 (0.4 + 0.3)/2 = 0.35, vanilla1 (0.5 + 0.1)/2 = 0.3 -> 0.325 +- 0.025;
# % improvement 100 * 0.425 / 0.325
HAND_BUDGET, HAND_RPG, HAND_RPG_SE, HAND_VAN, HAND_VAN_SE = 6.0, 0.75, 0.1, 0.325, 0.025
HAND_PCT = 100 * 0.425 / 0.325

# the other arms' runs (rows of (exec_time s, raw reward)); B stays 6 s (vanilla0's first sample)
ARM_HAND = {
    ("fixed-lambda", 0): [[(2.0, 0.4)], [(2.0, 0.6)]],  # 0.5
    ("fixed-lambda", 1): [[(1.0, 0.3)], [(1.0, 0.5)]],  # 0.4 -> 0.45 +- 0.05
    ("rpg-raw-parents", 0): [[(1.0, 0.6)], [(1.0, 0.4)]],  # 0.5
    ("rpg-raw-parents", 1): [[(1.0, 0.7)], [(1.0, 0.5)]],  # 0.6 -> 0.55 +- 0.05
    ("vanilla-rate-parents", 0): [[(1.0, 0.5)], [(1.0, 0.3)]],  # 0.4
    ("vanilla-rate-parents", 1): [[(1.0, 0.2)], [(1.0, 0.4)]],  # 0.3 -> 0.35 +- 0.05
}
ALL_ARMS = "rpg,vanilla,fixed-lambda,rpg-raw-parents,vanilla-rate-parents"

Rows = Sequence[Sequence[tuple[float, float]]]


def make_run(
    run_dir: Path,
    config: Mapping[str, object],
    rows: Rows,
    seed_sample: bool = True,
    steps: int | None = None,
) -> None:
    """A run folder holding ``config`` and, per batch row, the samples of ``rows`` at steps
    1, 2, ... (after a step-0 seed sample with a high score when ``seed_sample``), and a metrics
    line of ``step_seconds`` 100 * step for each of the first ``steps`` steps (default: all)."""
    folder = RunFolder(run_dir)
    folder.create(dict(config) | {"seeded": seed_sample})
    samples = []
    if seed_sample:  # a step-0 seed solution with a high score: never part of a chain
        samples.append(_sample(config, 0, 0, 0.1, 0.99))
    depth = max(len(r) for r in rows)
    for step in range(1, depth + 1):
        for row, chain in enumerate(rows):
            if step <= len(chain):
                samples.append(_sample(config, step, row, *chain[step - 1]))
    with SampleBuffer(folder.buffer_path) as buf:
        buf.add_many(samples)
    for step in range(1, (steps or depth) + 1):
        folder.append_metrics({"step": step, "step_seconds": 100.0 * step})


def _sample(config: Mapping[str, object], step: int, row: int, t: float, r: float) -> Sample:
    return Sample(
        run="hand",
        step=step,
        row=row,
        task=str(config.get("task", "churn-auc")),
        parent_id=None,
        prompt_hash="h",
        code="print(1)",
        outcome_text="",
        score=None if r == -10.0 else r,
        raw_reward=r,
        exec_time=t,
        status="invalid" if r == -10.0 else "ok",
        created_at=0.0,
    )


def cli_base(out: Path, model: Path, *extra: str) -> list[str]:
    """The tiny table's command line: churn-auc x seeds 0, 1, one step of 2 chains, no budget,
    no probe, the tiny model, no seeded buffer."""
    return [
        "--out",
        str(out),
        "--tasks",
        "churn-auc",
        "--seeds",
        "0,1",
        "--steps",
        "1",
        "--model",
        str(model),
        "--max-new-tokens",
        "8",
        "--exec-budget",
        "none",
        "--batch-size",
        "2",
        "--probe",
        "0",
        "--max-prompt-tokens",
        "768",
        "--run-args",
        "--no-seed-buffer --sandbox subprocess",
        *extra,
    ]


def settings(argv: Sequence[str]) -> TableSettings:
    """The table's settings of the command line ``argv``."""
    return cli.settings_from_args(cli.parser().parse_args(list(argv)))


def config(s: TableSettings, spec: plan.RunSpec) -> LoopConfig:
    """The config the table builds for ``spec``."""
    return plan.run_configs(s, [spec])[spec]


def make_hand_runs(
    s: TableSettings,
    out: Path,
    hand: Mapping[tuple[str, int], Rows],
    task: str = "churn-auc",
    steps: int | None = 1,
) -> None:
    """A hand-made run folder for each ``(arm, seed)`` of ``hand`` in ``out``, with the config
    the table builds for it."""
    for (m, k), rows in hand.items():
        spec = plan.RunSpec(task, m, k, out)
        make_run(spec.run_dir, config(s, spec).to_dict(), rows, steps=steps)


def one_line(err: str) -> str:
    """``err`` (captured stderr), checked to be one usage-error line of the table."""
    err = err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{PROG}: error: ")
    return err
