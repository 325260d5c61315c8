"""Measure a competition's seed baselines: CPU seconds, wall seconds, score and leaderboard place.

:func:`measure_baselines` runs every script of :func:`rpg_llm.env.tasks.offline.baseline_solutions`
(the scripts a training run seeds its buffer with) through the project's own executor
(:func:`rpg_llm.env.tasks.runner.run_batch`: the sandbox, the time limit and the grader of a
training run), so the seconds are those a run would charge: the whole script process, interpreter
start and imports included. CPU seconds (user + system of the script and the children it waited
for) are far less sensitive than wall seconds to other load on a shared machine.
:func:`markdown_table` renders the rows for ``benchmarks/RESULTS.md``; the CLI is ``python -m
rpg_llm.env.tasks baselines NAME|all``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from rpg_llm.env.sandbox import LocalExecutor, Sandbox
from rpg_llm.env.tasks.format import Competition
from rpg_llm.env.tasks.grading import leaderboard_percentile
from rpg_llm.env.tasks.offline import baseline_solutions
from rpg_llm.env.tasks.runner import run_batch

COLUMNS = ("task", "baseline", "status", "cpu_s", "wall_s", "score", "rank", "board", "percentile")


def board_rank(score: float, board_scores: np.ndarray, lower_is_better: bool) -> int:
    """The 1-based place ``score`` would take on a board: 1 + the entries strictly better.

    Args:
        score: a finite score.
        board_scores: the board's scores, shape ``(n,)``.
        lower_is_better: direction.

    Raises:
        ValueError: ``score`` is not finite.
    """
    if not math.isfinite(score):
        raise ValueError(f"score must be finite, got {score}")
    board = np.asarray(board_scores, dtype=np.float64).reshape(-1)
    better = board < score if lower_is_better else board > score
    return int(np.sum(better)) + 1


def measure_scripts(
    comp: Competition,
    scripts: Sequence[tuple[str, str]],
    sandbox: Sandbox,
    timeout_s: float,
    workers: int = 1,
) -> pd.DataFrame:
    """Run and grade named scripts on ``comp`` once each, as a training run would.

    Args:
        comp: a prepared competition (with a leaderboard for ranks; without one the rank and
            percentile columns are empty).
        scripts: ``(name, code)`` pairs, at least one.
        sandbox: a sandbox from :func:`rpg_llm.env.sandbox.make_sandbox`.
        timeout_s: limit of one run, seconds.
        workers: runs at once (1 keeps the runs from competing for the CPUs).

    Returns:
        One row per script in ``scripts`` order, columns :data:`COLUMNS`: ``baseline`` (the
        name), ``status`` (``"ok"`` or the failure), ``cpu_s`` / ``wall_s`` seconds of the
        script process, ``score`` (NaN unless ok), ``rank`` on a board of ``board`` entries (0
        when there is no board or no score), ``percentile`` (share of the board beaten, ties
        half; NaN likewise).

    Raises:
        ValueError: no scripts, or ``workers < 1``.
    """
    if not scripts:
        raise ValueError(f"no scripts to measure on {comp.id!r}")
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    with LocalExecutor(workers, kind="thread") as executor:
        outcomes = run_batch([code for _, code in scripts], comp, sandbox, timeout_s, executor)
    board = None if comp.leaderboard is None else comp.leaderboard["score"].to_numpy(float)
    rows = []
    for (name, _), o in zip(scripts, outcomes, strict=True):
        score = float("nan") if o.score is None else float(o.score)
        rank, pct = 0, float("nan")
        if board is not None and o.score is not None:
            rank = board_rank(score, board, comp.lower_is_better)
            pct = leaderboard_percentile(score, board, comp.lower_is_better)
        rows.append(
            {
                "task": comp.id,
                "baseline": name,
                "status": o.status,
                "cpu_s": float("nan") if o.cpu_s is None else float(o.cpu_s),
                "wall_s": float(o.delta),
                "score": score,
                "rank": rank,
                "board": 0 if board is None else len(board),
                "percentile": pct,
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def measure_baselines(
    comp: Competition, sandbox: Sandbox, timeout_s: float, workers: int = 1
) -> pd.DataFrame:
    """Run and grade ``comp``'s seed baselines once each (:func:`measure_scripts` on
    :func:`rpg_llm.env.tasks.offline.baseline_solutions`).

    Raises:
        ValueError: ``comp`` has no baselines (not an offline competition), or ``workers < 1``.
    """
    solutions = baseline_solutions(comp.id)
    if not solutions:
        raise ValueError(f"competition {comp.id!r} has no baseline scripts")
    return measure_scripts(comp, solutions, sandbox, timeout_s, workers)


def markdown_table(rows: pd.DataFrame) -> str:
    """``rows`` (from :func:`measure_baselines`, any number of tasks) as a markdown table:
    task, baseline, CPU s, wall s, score, rank / board size, percentile (in %)."""
    lines = [
        "| task | baseline | CPU s | wall s | score | rank | beats % of board |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows.to_dict("records"):
        score = f"{r['score']:.5g}" if r["status"] == "ok" else str(r["status"])
        rank = f"{r['rank']} / {r['board']}" if r["rank"] else "-"
        pct = "-" if math.isnan(r["percentile"]) else f"{100 * r['percentile']:.0f}"
        cpu = "-" if math.isnan(r["cpu_s"]) else f"{r['cpu_s']:.1f}"
        lines.append(
            f"| {r['task']} | `{r['baseline']}` | {cpu} | {r['wall_s']:.1f} | {score} | {rank} "
            f"| {pct} |"
        )
    return "\n".join(lines) + "\n"
