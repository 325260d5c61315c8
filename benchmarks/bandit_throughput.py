"""Throughput of the JAX bandit simulation against a plain NumPy per-seed loop of the same agent.

``python benchmarks/bandit_throughput.py`` measures decision.seeds per second on the same instance
(E1, K and |X| below) in one process, for NPG-NIW and C-UCB (exact lambda_t), with the JAX
simulator (``rpg_jax.simulate``: scan over decisions, vmap over seeds, sharded over all local
devices) at 1,000 and 4,096 seeds, and prints each as a ratio to the NumPy loop measured in the
same run (hyper-parameters: the tuned ones of ``paper_figures/hyper_small.json``).
Compilation is excluded: each JAX configuration is run once to compile and then timed on a
second call with the same shapes (the compile time is printed separately).

Targets (issue 2): >= 100x the NumPy loop for NPG-NIW at 4,096 seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit

import jax  # noqa: E402

from rpg_jax.config import setup_jax  # noqa: E402

setup_jax()


from rpg_jax.agents.registry import make_agent  # noqa: E402
from rpg_jax.envs import make_reference_env, make_trial_params  # noqa: E402
from rpg_jax.simulate import simulate  # noqa: E402
from testkit.numpy_ref_cucb import run_cucb_numpy  # noqa: E402
from testkit.numpy_ref_npg import run_npg_numpy  # noqa: E402

HYPER_FILE = Path(__file__).resolve().parents[1] / "paper_figures" / "hyper_small.json"


def _numpy_rate(name: str, env, steps: int, hyper: dict) -> float:
    t0 = time.perf_counter()
    if name == "npg-niw":
        run_npg_numpy(env, steps, hyper["lr"], hyper["age_bound"], seed=0)
    else:
        run_cucb_numpy(env, steps, hyper["c1"], hyper["c2"], seed=0)
    return steps / (time.perf_counter() - t0)


def _jax_rate(name: str, env_name: str, k: int, c: int, seeds: int, steps: int, hyper: dict):
    agent, h, _ = make_agent(name, c, k + 1, hyper)
    seed_list = list(range(seeds))
    params = make_trial_params(env_name, k, c, seed_list)
    t0 = time.perf_counter()
    simulate(agent, h, params, seed_list, steps)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    simulate(agent, h, params, seed_list, steps)
    timed = time.perf_counter() - t0
    return seeds * steps / timed, first - timed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--env", default="E1")
    ap.add_argument("--arms", type=int, default=10)
    ap.add_argument("--contexts", type=int, default=4)
    ap.add_argument("--seeds", default="1000,4096")
    ap.add_argument("--npg-steps", type=int, default=64, help="JAX decisions per seed (NPG)")
    ap.add_argument("--cucb-steps", type=int, default=256, help="JAX decisions per seed (C-UCB)")
    ap.add_argument("--numpy-steps", type=int, default=800, help="NumPy decisions (one seed)")
    ap.add_argument("--agents", default="npg-niw,cucb-tuned", help="subset of npg-niw,cucb-tuned")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    env = make_reference_env(args.env, args.arms, args.contexts)
    # The tuned settings of the figure (paper_figures/hyper_small.json).
    hypers = json.loads(HYPER_FILE.read_text())["agents"]
    print(
        f"instance {args.env}, K={args.arms}, |X|={args.contexts}; devices: {jax.local_devices()}"
    )
    print(
        f"{'agent':<12} {'seeds':>6} {'numpy dec/s':>12} {'jax dec.seeds/s':>16} "
        f"{'ratio':>8} {'compile s':>10}"
    )
    steps_of = {"npg-niw": args.npg_steps, "cucb-tuned": args.cucb_steps}
    for name in args.agents.split(","):
        steps = steps_of[name]
        ref = _numpy_rate(name, env, args.numpy_steps, hypers[name])
        for s in seeds:
            rate, compile_s = _jax_rate(
                name, args.env, args.arms, args.contexts, s, steps, hypers[name]
            )
            print(
                f"{name:<12} {s:>6} {ref:>12.1f} {rate:>16.1f} {rate / ref:>8.1f}x "
                f"{compile_s:>10.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
