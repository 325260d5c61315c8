"""Benchmark: the cost of one refit of each reward-rate estimator, per seed, under vmap (JAX).

Estimators (``rpg_jax.agents.npg.reference_estimator``, as the bandit agents call them, masked
slots included): ``niw`` (conjugate update + M = 1000 synthetic batches + quantile), ``niw-mean``
(conjugate update + posterior-mean rate), ``robbins-monro`` (one weighted running-mean step) and
``learned`` (20 Adam steps on a 32-unit MLP over the |X| x A cells + 8 Dinkelbach iterations;
|X| = 4, A = 6: the K = 5 figure's cells with SKIP).
All run in this process on the same random slot sums (S = 128 slots, 90 % non-empty); the table
gives the minimum over repeats of wall time per call divided by the number of seeds, and each
estimator's ratio to ``niw`` measured in the same run.

Usage::

    python benchmarks/estimator_cost.py [--seeds 256] [--repeats 5] [--slots 128]
"""

from __future__ import annotations

import sys
import time

from rpg_core.cli import ArgumentParser, at_least, run_cli

PROG = "python benchmarks/estimator_cost.py"


def _parse(argv):
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--contexts", type=int, default=4, help="|X| of the learned estimator")
    ap.add_argument("--actions", type=int, default=6, help="A of the learned estimator")
    args = ap.parse_args(argv)
    at_least("--seeds", args.seeds, 1)
    at_least("--repeats", args.repeats, 1)
    at_least("--slots", args.slots, 2)
    at_least("--contexts", args.contexts, 1)
    at_least("--actions", args.actions, 1)
    return args


def _run(args) -> int:
    import jax
    import jax.numpy as jnp

    from rpg_jax.agents.npg import ESTIMATORS, reference_estimator

    n, s = args.seeds, args.slots
    k_r, k_d, k_m, k_key = jax.random.split(jax.random.PRNGKey(0), 4)
    slot_r = jax.random.normal(k_r, (n, s)) + 1.0
    slot_d = jax.random.exponential(k_d, (n, s)) + 0.1
    mask = jax.random.uniform(k_m, (n, s)) < 0.9
    keys = jax.random.split(k_key, n)
    c, a = args.contexts, args.actions
    # the learned estimator's cells: the masked slots' samples spread over the |X| x A cells
    count = jax.random.randint(k_m, (n, c, a), 0, 20).astype(jnp.float32)
    cells = jnp.stack([count, count * 1.0, count * 0.5, count * 0.5], axis=-1)
    seen = count.sum(axis=-1) * 2.0
    per_seed = {}
    for name in ESTIMATORS:
        est = reference_estimator(name, s, n_contexts=c, n_actions=a)
        one = est.init(jnp.float32)
        states = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), one)
        refit = jax.jit(jax.vmap(est.refit))
        extra = [cells, seen] if name == "learned" else []
        inputs = (states, slot_r, slot_d, mask, keys, *extra)
        jax.block_until_ready(refit(*inputs))  # compile
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(refit(*inputs))
            best = min(best, time.perf_counter() - t0)
        per_seed[name] = best / n
    print(f"one refit per seed, {n} seeds under vmap, S = {s}, min of {args.repeats} repeats")
    print("| estimator | ns per refit per seed | ratio to niw |")
    print("| --- | ---: | ---: |")
    for name, t in per_seed.items():
        print(f"| {name} | {t * 1e9:,.0f} | {t / per_seed['niw']:.4f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(PROG, lambda a: _run(_parse(a)), argv)


if __name__ == "__main__":
    sys.exit(main())
