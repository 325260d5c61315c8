"""A run's table value in DESIGN.md's raw reward, whatever raw reward it trained on: the mean over
its chains of the best DESIGN.md raw reward (the score of a higher-is-better task, the leaderboard
percentile of a lower-is-better one, -10 for an invalid sample) finished within ``B`` seconds of
the run's time measure, step-0 seeds excluded; then mean +- s.e. over the runs given that have a
value at ``B`` (a run none of whose chains finished a sample within ``B`` is left out, and the
count printed says so). An unfinished run (:func:`rpg_llm.launch.status` on its
stored config: a run still going, or one stopped before its steps or budget) prints its value so
far, marked, and is left out of the mean.

    python benchmarks/score_at_budget.py --budget 30 RUN_DIR [RUN_DIR ...]

Runs with ``--raw-reward percentile`` store the percentile as their raw reward, so
``paper_figures.llm_table`` reads them on another scale; this reads their samples' scores and
puts them on the table's scale, so they can be set beside the table's runs. The chains and the
budget rule are ``rpg_llm.loop.budget``'s (:func:`rpg_llm.loop.budget.curve`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rpg_core.cli import ArgumentParser, UsageError, run_cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROG = "python benchmarks/score_at_budget.py"


def design_chains(
    rows: Sequence[dict[str, str]], board: np.ndarray, lower_is_better: bool
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per chain (batch row, ascending), cumulative seconds and best DESIGN.md raw reward so far.

    Args:
        rows: ``samples.csv`` rows (:data:`rpg_llm.loop.runfolder.SAMPLES_CSV_FIELDS`); rows of
            step >= 1 are used, ``infra`` samples skipped (they have no script outcome).
        board: the task's leaderboard scores, shape ``(n,)``.
        lower_is_better: the score's direction.

    Returns:
        ``(times, best)`` per chain, each a float64 array of the chain's samples.
    """
    from rpg_llm.env.tasks.grading import leaderboard_percentile
    from rpg_llm.loop.rewards import INVALID_REWARD

    per_row: dict[int, list[tuple[float, float]]] = {}
    for r in rows:
        if r["step"] == "0" or r["status"] == "infra":
            continue
        if r["score"] in ("", None):
            raw = INVALID_REWARD
        elif lower_is_better:
            raw = leaderboard_percentile(float(r["score"]), board, True)
        else:
            raw = float(r["score"])
        per_row.setdefault(int(r["row"]), []).append((float(r["time_s"]), raw))
    out = []
    for row in sorted(per_row):
        t, raw = np.array(per_row[row], dtype=np.float64).T
        out.append((np.cumsum(t), np.maximum.accumulate(raw)))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print one line per run and the mean +- s.e. (``rpg_core.cli``: exit 2 on a usage error)."""
    return run_cli(PROG, _main, argv)


def _main(argv: Sequence[str] | None) -> int:
    from seed_rates import run_boards

    from rpg_llm.launch import status
    from rpg_llm.loop.budget import Chain, curve

    p = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    p.add_argument("run_dirs", nargs="+", help="run folders (python -m rpg_llm.run --out)")
    p.add_argument("--budget", type=float, required=True, help="B, seconds of the time measure")
    args = p.parse_args(argv)
    if not args.budget > 0:
        raise UsageError(f"--budget must be > 0 seconds, got {args.budget}")
    values = []
    for f, cfg, comp, board in run_boards(args.run_dirs):
        chains = design_chains(f.read_samples_csv(), board, comp.lower_is_better)
        if not chains:
            raise UsageError(f"{f.root} has no training sample")
        res = curve([Chain("", t, b) for t, b in chains], np.array([args.budget]))
        value, n = float(res["mean_best"][0]), int(res["n_chains"][0])
        at = f"{n} of {len(chains)} chains with a value at {args.budget:g}"
        st = status(f.root, cfg)
        if not st.finished:
            done = st.steps_done
            print(f"{f.root}: {value:.4f} ({at}; unfinished, step {done} of {cfg.steps}: left out)")
            continue
        values.append(value)
        print(f"{f.root}: {value:.4f} ({at})")
    v = np.array([x for x in values if np.isfinite(x)])
    if not len(v):
        print(f"mean: none of the {len(values)} finished runs has a value at {args.budget:g}")
        return 0
    se = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
    print(f"mean {v.mean():.4f} +- {se:.4f} over {len(v)} of {len(values)} finished runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
