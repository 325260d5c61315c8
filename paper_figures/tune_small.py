"""Small hyper-parameter tuning run: one setting per agent for the regret-vs-arms figure.

``python -m paper_figures.tune_small`` evaluates each agent's grid on the tuning trials 900-929
(never the evaluation trials 0-99) in a few cells of the small setting (default E1 and E4,
K = 10, n = 10,000) and keeps, per agent, the point with the lowest median final regret averaged
over the tuning cells: the reference protocol (DESIGN.md section 5) on a reduced budget, giving ONE
setting per agent instead of one per cell (``python -m paper_figures.tune`` runs the per-cell
protocol). The result and the exact command go to ``paper_figures/hyper_small.json``, which the
figure reads for every cell that has no tuned point. Each (agent, env) is one vmapped batch of
grid points x trials (``paper_figures.tune.tune_unit``).
"""

from __future__ import annotations

import itertools
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from paper_figures._protocol import (
    EVAL_SEEDS,
    TUNE_SEEDS,
    Cell,
    check_contexts,
    check_env,
    check_trials,
)
from rpg_core.cli import ArgumentParser, UsageError, comma_list, run_cli

PROG = "python -m paper_figures.tune_small"
GRIDS = {
    "npg-niw": {"lr": [0.03, 0.1, 0.3, 1.0, 3.0], "age_bound": [60, 250, 1000, 4000, 32000]},
    "spg-niw": {"lr": [0.03, 0.1, 0.3, 1.0, 3.0], "age_bound": [60, 250, 1000, 4000, 32000]},
    "cucb-tuned": {"c1": [1e-2, 1e-1, 1.0, 10.0, 1e2], "c2": [1e-4, 1e-3, 1e-2, 1e-1, 1.0]},
}
HYPER_NAMES = ("lr", "age_bound", "c1", "c2")


def _parser() -> ArgumentParser:
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--envs", default="E1,E4")
    ap.add_argument("--arms", type=int, default=10)
    ap.add_argument("--contexts", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--seed-start", type=int, default=TUNE_SEEDS.start)
    ap.add_argument("--seeds", type=int, default=len(TUNE_SEEDS))
    ap.add_argument("--agents", default=",".join(GRIDS))
    ap.add_argument("--out", default=str(Path(__file__).with_name("hyper_small.json")))
    for name in HYPER_NAMES:
        flag = f"--{name.replace('_', '-')}-grid"
        ap.add_argument(flag, type=comma_list(float, "numbers"), default=None, metavar="V1,V2,...")
    return ap


def check_args(args) -> tuple[list[Cell], dict]:
    """Validate the flags (no JAX work); returns the tuning cells and the grids per agent.

    Raises:
      UsageError: naming the flag or value (unknown env or agent, sizes < 1, --contexts < 4 (the
        reference environments need >= 4 contexts), --seed-start < 0, trials that overlap the
        evaluation trials or go past the largest seed ``2**32 - 1``, a grid value an agent
        refuses).
    """
    from paper_figures._protocol import build_agent

    contexts = check_contexts(args.contexts, "--contexts")
    cells = [Cell(check_env(e, "--envs"), args.arms, contexts) for e in args.envs.split(",")]
    bad = [a for a in args.agents.split(",") if a not in GRIDS]
    if bad:
        raise UsageError(f"--agents: unknown tunable agent {bad[0]!r}; valid: {', '.join(GRIDS)}")
    for flag, value in (("--steps", args.steps), ("--arms", args.arms)):
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    last = check_trials(args.seed_start, args.seeds)[-1]
    if args.seed_start < EVAL_SEEDS.stop and last >= EVAL_SEEDS.start:
        raise UsageError(
            f"tuning seeds {args.seed_start}..{last} overlap the evaluation seeds "
            f"{EVAL_SEEDS.start}..{EVAL_SEEDS.stop - 1}"
        )
    grids = {a: dict(GRIDS[a]) for a in args.agents.split(",")}
    for name in HYPER_NAMES:
        values = getattr(args, f"{name}_grid")
        flag = f"--{name.replace('_', '-')}-grid"
        for a, g in grids.items():
            if values is not None and name in g:
                for v in values:  # each value of the flag on its own: the error names the flag
                    point = {k: (v if k == name else vs[0]) for k, vs in GRIDS[a].items()}
                    try:
                        build_agent(a, cells[0], point)
                    except ValueError as err:
                        raise UsageError(f"{flag} {v:g}: {err}") from None
                g[name] = values
    for a, g in grids.items():  # every grid point, before anything runs
        for point in itertools.product(*g.values()):
            hyper = dict(zip(g, point, strict=True))
            try:
                build_agent(a, cells[0], hyper)
            except ValueError as err:
                raise UsageError(f"--agents {a}: grid point {hyper}: {err}") from None
    return cells, grids


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    cells, grids = check_args(args)
    from rpg_jax.config import setup_jax

    setup_jax()
    import numpy as np

    from paper_figures.tune import tune_unit

    seeds = list(range(args.seed_start, args.seed_start + args.seeds))
    result: dict = {"agents": {}, "grid": {}}
    t0 = time.perf_counter()
    for name, grid in grids.items():
        units = [tune_unit(name, c, grid, seeds, args.steps) for c in cells]
        medians = np.array([[p["median_regret"] for p in u["grid"]] for u in units]).T
        score = medians.mean(axis=1)
        points = [p["hyper"] for p in units[0]["grid"]]
        result["agents"][name] = points[int(np.argmin(score))]
        result["grid"][name] = [
            {"hyper": p, "median_final_regret_per_env": m.tolist(), "score": float(s)}
            for p, m, s in zip(points, medians, score, strict=True)
        ]
    result["protocol"] = {
        "envs": [c.env for c in cells],
        "K": args.arms,
        "n_contexts": args.contexts,
        "n_steps": args.steps,
        "seeds": f"{seeds[0]}-{seeds[-1]}",
        "criterion": "lowest mean over envs of the median final regret over seeds",
        "grids": grids,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    argv = list(argv) if argv is not None else sys.argv[1:]
    result["command"] = f"{PROG} " + shlex.join(argv)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["agents"], indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``rpg_core.cli`` convention: 2 on usage errors, 1 on other failures)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
