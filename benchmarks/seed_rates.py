"""Which seeded baseline a reward rate favours: each run's step-0 scripts with their score,
leaderboard percentile, time ``delta`` (the run's ``--time`` measure) and ``r / delta`` for the
two raw rewards of ``--raw-reward``: DESIGN.md's (the score when higher is better, else the
leaderboard percentile; recomputed from the score, whatever the run used) and the leaderboard
percentile.

    python benchmarks/seed_rates.py RUN_DIR [RUN_DIR ...]

The rate ``r / delta`` is what RPG's relative reward ``r - rho_hat * delta`` ranks by once
``rho_hat`` is near the scripts' own rates: a script with ``r / delta > rho_hat`` has a positive
relative reward. A reward rate is not invariant to a shift of ``r``; on an AUC task a constant
prediction (AUC 0.5) is paid half of the best score for an interpreter start, and this script
shows where that makes it the top of the rate ranking.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rpg_core.cli import ArgumentParser, UsageError, run_cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from rpg_llm.config import LoopConfig
    from rpg_llm.env.tasks.format import Competition
    from rpg_llm.loop.runfolder import RunFolder

PROG = "python benchmarks/seed_rates.py"


def seed_rates(
    rows: Sequence[dict[str, str]],
    board: np.ndarray,
    lower_is_better: bool,
    time_floor_s: float | None = None,
) -> list[dict[str, float | int]]:
    """Rates of a run's valid step-0 samples.

    Args:
        rows: ``samples.csv`` rows (:data:`rpg_llm.loop.runfolder.SAMPLES_CSV_FIELDS`); those of
            step 0 with a score are used.
        board: the task's leaderboard scores, shape ``(n,)``, ``n >= 1``.
        lower_is_better: the score's direction.
        time_floor_s: smallest time charged, seconds (the run's ``--time-floor``; default
            :data:`rpg_llm.config.TIME_FLOOR_S`).

    Returns:
        One dict per valid seed, in row order: ``row``, ``score``, ``raw_reward`` (DESIGN.md's:
        the score, or the percentile when lower is better), ``percentile``, ``time_s``,
        ``rate_raw`` and ``rate_percentile`` (per second, the time floored at ``time_floor_s`` as
        the rewards floor it), ``rank_raw`` and ``rank_percentile`` (1: the highest rate).

    Raises:
        ValueError: no valid step-0 sample, or an empty board.
    """
    from rpg_llm.config import TIME_FLOOR_S
    from rpg_llm.env.tasks.grading import leaderboard_percentile

    floor = TIME_FLOOR_S if time_floor_s is None else time_floor_s

    out: list[dict[str, float | int]] = []
    for r in rows:
        if r["step"] != "0" or r["score"] in ("", None):
            continue
        score, t = float(r["score"]), max(float(r["time_s"]), floor)
        pct = leaderboard_percentile(score, board, lower_is_better)
        raw = pct if lower_is_better else score
        out.append(
            {
                "row": int(r["row"]),
                "score": score,
                "raw_reward": raw,
                "percentile": pct,
                "time_s": float(r["time_s"]),
                "rate_raw": raw / t,
                "rate_percentile": pct / t,
            }
        )
    if not out:
        raise ValueError("no valid step-0 sample")
    for key in ("raw", "percentile"):
        order = sorted(range(len(out)), key=lambda i: -float(out[i][f"rate_{key}"]))
        for place, i in enumerate(order, 1):
            out[i][f"rank_{key}"] = place
    return out


def main(argv: list[str] | None = None) -> int:
    """Print one markdown table per run (``rpg_core.cli``: exit 2 on a usage error)."""
    return run_cli(PROG, _main, argv)


def run_boards(
    run_dirs: Sequence[str],
) -> list[tuple[RunFolder, LoopConfig, Competition, np.ndarray]]:
    """Each run folder with its config, competition and leaderboard scores.

    Returns:
        ``(folder, cfg, competition, board)`` per run, in order: ``RunFolder``, ``LoopConfig``,
        ``rpg_llm.env.tasks`` competition and its leaderboard scores, float64 ``(n,)``.

    Raises:
        UsageError: a folder without ``config.json`` or ``samples.csv``, an unknown task, or a
            task without a leaderboard (each names the folder or the task).
    """
    from rpg_llm.config import LoopConfig
    from rpg_llm.env import tasks
    from rpg_llm.loop.runfolder import RunFolder

    folders = [RunFolder(d) for d in run_dirs]
    for f in folders:
        if not (f.config_path.exists() and f.samples_csv_path.exists()):
            raise UsageError(f"{f.root} is not a run folder (no config.json or samples.csv)")
    out = []
    for f in folders:
        cfg = LoopConfig.from_dict(f.load_config())
        root = Path(cfg.data_root) if cfg.data_root else None
        try:
            comp = tasks.load_competition(tasks.resolve_id(cfg.task), root)
        except ValueError as err:
            raise UsageError(str(err)) from None
        if comp.leaderboard is None or len(comp.leaderboard) == 0:
            raise UsageError(f"{f.root}: task {comp.id} has no leaderboard")
        out.append((f, cfg, comp, comp.leaderboard["score"].to_numpy(dtype=np.float64)))
    return out


def _main(argv: Sequence[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    p.add_argument("run_dirs", nargs="+", help="run folders (python -m rpg_llm.run --out)")
    args = p.parse_args(argv)
    for f, cfg, comp, board in run_boards(args.run_dirs):
        unit = "CPU-s" if cfg.reward.time_measure == "cpu" else "s"
        rows = f.read_samples_csv()
        rates = seed_rates(rows, board, comp.lower_is_better, cfg.reward.time_floor_s)
        print(f"\n{f.root} ({comp.id}, run's raw reward {cfg.reward.raw_reward}, time in {unit})\n")
        rate = f"/ {unit} (rank)"
        print(f"| row | score | percentile | {unit} | r {rate} | percentile {rate} |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rates:
            print(
                f"| {r['row']} | {r['score']:.4g} | {r['percentile']:.3f} | {r['time_s']:.2f} | "
                f"{r['rate_raw']:.3f} ({r['rank_raw']}) | "
                f"{r['rate_percentile']:.3f} ({r['rank_percentile']}) |"
            )
        best = max(rates, key=lambda r: (r["percentile"], -r["time_s"]))
        top = {k: next(r for r in rates if r[f"rank_{k}"] == 1) for k in ("raw", "percentile")}
        print(
            f"\nhighest rate: row {top['raw']['row']} by r, row {top['percentile']['row']} by "
            f"percentile; best score: row {best['row']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
