"""Small hyper-parameter tuning run for the regret-vs-arms figure.

``python -m paper_figures.tune_small`` evaluates each agent's grid on the tuning seeds 900-929
(never the evaluation seeds 0-99) in a few cells of the small setting and keeps, per agent, the
setting with the lowest median final regret (averaged over the tuning cells), as in the reference
protocol (DESIGN.md section 3) but on a reduced budget: fewer cells and fewer decisions. The result
and the exact command are written to ``paper_figures/hyper_small.json``, which the figure reads.

Grids (DESIGN.md section 5): learning rate {0.03, 0.1, 0.3, 1, 3}, age bound {60, 250, 1000,
4000, 32000} for NPG-NIW and SPG-NIW; c1 in {1e-2, 1e-1, 1, 10, 1e2} x c2 in {1e-4, 1e-3, 1e-2,
1e-1, 1} for C-UCB (tuned).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
import time
from pathlib import Path

from paper_figures._common import env_name

EVAL_SEEDS = range(0, 100)  # the figure's evaluation seeds: never used for tuning
GRIDS = {
    "npg-niw": {"lr": [0.03, 0.1, 0.3, 1.0, 3.0], "age_bound": [60, 250, 1000, 4000, 32000]},
    "spg-niw": {"lr": [0.03, 0.1, 0.3, 1.0, 3.0], "age_bound": [60, 250, 1000, 4000, 32000]},
    "cucb-tuned": {"c1": [1e-2, 1e-1, 1.0, 10.0, 1e2], "c2": [1e-4, 1e-3, 1e-2, 1e-1, 1.0]},
}


def _tile(tree, n: int):
    """Repeat every leaf's leading axis ``n`` times (grid point major)."""
    import jax
    import numpy as np

    return jax.tree.map(lambda v: np.concatenate([np.asarray(v)] * n), tree)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; exit 2 with one line on usage errors."""
    ap = argparse.ArgumentParser(prog="python -m paper_figures.tune_small", description=__doc__)
    ap.add_argument("--envs", default="E1,E4")
    ap.add_argument("--arms", type=int, default=10)
    ap.add_argument("--contexts", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--seed-start", type=int, default=900)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--agents", default=",".join(GRIDS))
    ap.add_argument("--out", default=str(Path(__file__).with_name("hyper_small.json")))
    for name in ("lr", "age_bound", "c1", "c2"):
        ap.add_argument(
            f"--{name.replace('_', '-')}-grid",
            default=None,
            metavar="V1,V2,...",
            help=f"override the {name} grid",
        )
    args = ap.parse_args(argv)
    grids = {a: dict(g) for a, g in GRIDS.items()}
    try:
        from rpg_jax.envs import ENV_NAMES

        envs = [env_name(e, ENV_NAMES) for e in args.envs.split(",")]
        agents = [a for a in args.agents.split(",") if a]
        for a in agents:
            if a not in GRIDS:
                raise ValueError(f"unknown tunable agent {a!r}; valid: {', '.join(GRIDS)}")
        for name in ("lr", "age_bound", "c1", "c2"):
            text = getattr(args, f"{name}_grid")
            if text is None:
                continue
            flag = f"--{name.replace('_', '-')}-grid"
            try:
                values = [float(v) for v in text.split(",") if v.strip()]
            except ValueError:
                raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}") from None
            if not values:
                raise ValueError(f"{flag} is empty")
            for g in grids.values():
                if name in g:
                    g[name] = values
        from rpg_jax.agents.registry import validate_agent

        for a in agents:  # every grid value, before anything runs
            for values in itertools.product(*grids[a].values()):
                validate_agent(
                    a, args.contexts, args.arms + 1, dict(zip(grids[a], values, strict=True))
                )
        if args.seed_start < EVAL_SEEDS.stop and args.seed_start + args.seeds > EVAL_SEEDS.start:
            raise ValueError(
                f"tuning seeds {args.seed_start}..{args.seed_start + args.seeds - 1} overlap the "
                f"evaluation seeds {EVAL_SEEDS.start}..{EVAL_SEEDS.stop - 1}"
            )
        if args.steps < 1 or args.seeds < 1 or args.arms < 1:
            raise ValueError(
                f"steps, seeds and arms must be >= 1: {args.steps}, {args.seeds}, {args.arms}"
            )
    except ValueError as err:
        print(f"tune_small: error: {err}", file=sys.stderr)
        return 2

    import jax

    from rpg_jax.config import setup_jax

    setup_jax()
    import numpy as np
    from tqdm import tqdm

    from rpg_jax.agents.registry import make_agent
    from rpg_jax.envs import make_trial_params
    from rpg_jax.simulate import simulate

    seeds = list(range(args.seed_start, args.seed_start + args.seeds))
    result: dict = {"agents": {}, "grid": {}}
    t0 = time.perf_counter()
    for name in tqdm(agents, desc="tuning", file=sys.stderr):
        points = [
            dict(zip(grids[name], v, strict=True)) for v in itertools.product(*grids[name].values())
        ]
        built = [make_agent(name, args.contexts, args.arms + 1, hp) for hp in points]
        agent = built[0][0]
        # One batch = every grid point x every tuning seed (common random numbers across points).
        hyper = jax.tree.map(
            lambda *leaves: np.repeat(np.stack([np.asarray(v) for v in leaves]), len(seeds)),
            *[b[1] for b in built],
        )
        medians = np.zeros((len(points), len(envs)))
        for j, env in enumerate(envs):
            params = make_trial_params(env, args.arms, args.contexts, seeds)
            params = _tile(params, len(points))
            res = simulate(
                agent, hyper, params, seeds * len(points), args.steps, per_seed_hyper=True
            )
            medians[:, j] = np.median(res.regret.reshape(len(points), len(seeds)), axis=1)
        score = medians.mean(axis=1)
        best = int(np.argmin(score))
        result["agents"][name] = built[best][2]
        result["grid"][name] = [
            {"hyper": b[2], "median_final_regret_per_env": m.tolist(), "score": float(sc)}
            for b, m, sc in zip(built, medians, score, strict=True)
        ]
    result["protocol"] = {
        "envs": envs,
        "K": args.arms,
        "n_contexts": args.contexts,
        "n_steps": args.steps,
        "seeds": f"{seeds[0]}-{seeds[-1]}",
        "criterion": "lowest mean over envs of the median final regret over seeds",
        "grids": {a: grids[a] for a in agents},
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    result["command"] = "python -m paper_figures.tune_small " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["agents"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
