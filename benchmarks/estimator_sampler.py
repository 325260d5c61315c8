"""Benchmark: one NIW refit per seed, numpyro vs fast vs polar Student-t samplers, under vmap.

A refit is ``rpg_jax.estimator.refit`` (conjugate update of S slots + M synthetic batches of S
predictive draws + quantile): S = 128 slots, M = 1000 batches (DESIGN.md sections 4 and 8). Both
samplers run in this process, interleaved, on the same states; the table gives the minimum over
repeats of wall time per call divided by the number of seeds, and the ratio numpyro / fast.

Usage::

    python benchmarks/estimator_sampler.py [--seeds 64 256] [--repeats 3] [--dtype float32]
        [--impl threefry2x32 rbg unsafe_rbg] [--chunk 50]

``--impl`` also times the fast sampler with other ``jax.random`` key implementations (the key
passed to ``refit``). Note: under ``vmap`` the ``rbg`` / ``unsafe_rbg`` implementations draw all
lanes from the first lane's key (``lax.rng_bit_generator`` batching rule), so a lane's draws
depend on the batch; the estimator's default keys are threefry.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from rpg_core.cli import ArgumentParser, UsageError, at_least, run_cli

PROG = "python benchmarks/estimator_sampler.py"
# the ``jax.random`` key implementations (``jax.random.key(..., impl=NAME)``)
KEY_IMPLS = ("threefry2x32", "threefry4x32", "philox2x32", "philox4x32", "rbg", "unsafe_rbg")


def _parse(argv):
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--impl", nargs="+", default=["threefry2x32"])
    ap.add_argument("--chunk", type=int, default=None, help="chunk_batches (default: module's)")
    ap.add_argument("--skip-numpyro", action="store_true", help="time the fast sampler only")
    args = ap.parse_args(argv)
    for seeds in args.seeds:
        at_least("--seeds", seeds, 1)
    at_least("--repeats", args.repeats, 1)
    at_least("--slots", args.slots, 2)
    at_least("--batches", args.batches, 1)
    if args.chunk is not None:
        at_least("--chunk", args.chunk, 1)
    for impl in args.impl:
        if impl not in KEY_IMPLS:
            raise UsageError(f"--impl {impl!r} is unknown; known: {', '.join(KEY_IMPLS)}")
    return args


def main(argv=None) -> int:
    """Print the table (``rpg_core.cli`` convention: exit 2 on a usage error)."""
    return run_cli(PROG, _main, argv)


def _main(argv) -> int:
    args = _parse(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    from rpg_jax import estimator as E

    dtype = jnp.dtype(args.dtype)
    chunk = args.chunk or E.CHUNK_BATCHES
    s, m = args.slots, args.batches
    rng = np.random.default_rng(0)
    print(f"devices={jax.devices()} dtype={args.dtype} S={s} M={m} chunk_batches={chunk}")
    print(f"{'seeds':>6} {'sampler':>8} {'key impl':>13} {'ms/refit/seed':>14} {'vs fast':>8}")
    for b in args.seeds:
        r = rng.normal(0.6, 0.2, (b, s, 8)).clip(0).sum(-1).astype(dtype)
        t = np.maximum(rng.normal(1.2, 0.2, (b, s, 8)), 0.5).sum(-1).astype(dtype)
        init = jax.vmap(lambda _: E.init_state(dtype))(jnp.arange(b))
        # steady state: several refits so that nu ~ 0.3 nu + S (df ~ 182 at S = 128)
        warm = jax.jit(jax.vmap(lambda st, a, c: E.update(st, a, c)))
        for _ in range(6):
            init = warm(init, r, t)
        cases = [(name, "threefry2x32") for name in (["numpyro"] if not args.skip_numpyro else [])]
        cases += [("fast", impl) for impl in args.impl]
        cases += [("polar", "threefry2x32")]
        runs = {}
        for sampler, impl in cases:
            keys = jax.random.split(jax.random.key(1, impl=impl), b)
            f = jax.jit(
                jax.vmap(
                    lambda st, a, c, k, smp=sampler: E.refit(
                        st, a, c, k, m, sampler=smp, chunk_batches=chunk
                    )
                )
            )
            jax.block_until_ready(f(init, r, t, keys))  # compile + warm up
            runs[(sampler, impl)] = (f, keys, [])
        for _ in range(args.repeats):  # interleaved, so that load changes hit every case
            for f, keys, times in runs.values():
                t0 = time.perf_counter()
                jax.block_until_ready(f(init, r, t, keys))
                times.append(time.perf_counter() - t0)
        best = {k: min(v[2]) / b * 1e3 for k, v in runs.items()}
        fast = best[("fast", "threefry2x32")] if ("fast", "threefry2x32") in best else None
        for (sampler, impl), ms in best.items():
            ratio = f"{ms / fast:8.2f}" if fast else f"{'-':>8}"
            print(f"{b:>6} {sampler:>8} {impl:>13} {ms:14.2f} {ratio}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
