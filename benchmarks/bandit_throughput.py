"""Throughput of the JAX bandit simulation against a plain NumPy per-seed loop of the same agent.

``python benchmarks/bandit_throughput.py`` prints, in one run:

1. **ns per bivariate draw** of the NIW estimator's refit (``rpg_jax.estimator.estimate``, the
   default fused "polar" path: M = 1,000 synthetic batches of S = 128 Student-t slot vectors drawn
   and reduced to batch rates, then the 95th percentile), ``jit(vmap)`` over ``--draw-seeds``
   seeds sharded over all local devices, float32 (the agents' dtype), steady-state posterior;
   wall time and process CPU time (all threads: on an idle machine, wall x cores), next to the
   NumPy reference's ``niw_estimate`` (one seed) and the ratio;
2. **NPG-NIW decision.seeds/s** of ``rpg_jax.simulate`` (scan over decisions, vmap over seeds,
   sharded over all local devices) at 1,000 and 4,096 seeds, each as a ratio to the NumPy
   per-seed loop (``testkit.numpy_ref_npg.run_npg_numpy``, one core) measured in the same run,
   on the same instance (E1, K and |X| below) with the tuned hyper-parameters of
   ``paper_figures/hyper_small.json``; optionally C-UCB tuned (``--agents``). Both use the
   reference feeding (the default). The NumPy rate is its steady state (decisions after
   ``--numpy-warmup``, when the slots have filled); the "refit %" column is the share of the JAX
   decision time spent in refits (1 - rate / rate of the same run with the refit replaced by a
   constant, ``oracle_estimator``); every line states the load average.

Compilation is excluded: each JAX configuration is run once to compile, then timed on a second
call with the same shapes (the compile time is printed separately). The faithful estimator is
kept: M = 1,000 batches of the non-empty slot count, fresh draws at every refit (DESIGN.md
sections 4-5).

Targets: <= 5 ns per draw, NPG-NIW >= 30x the NumPy loop.
Keep runs short on a shared machine: ``--steps 64 --numpy-steps 400``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from rpg_jax.config import setup_jax  # noqa: E402

setup_jax()

from rpg_core.cli import ArgumentParser, UsageError, at_least, comma_list, run_cli  # noqa: E402
from rpg_jax import estimator as E  # noqa: E402
from rpg_jax.agents.npg import make_pg_agent, oracle_estimator  # noqa: E402
from rpg_jax.agents.registry import make_agent  # noqa: E402
from rpg_jax.envs import make_reference_env, make_trial_params  # noqa: E402
from rpg_jax.simulate import PRNG_IMPL, simulate  # noqa: E402
from testkit.numpy_ref_cucb import run_cucb_numpy  # noqa: E402
from testkit.numpy_ref_npg import niw_estimate, niw_init, niw_update, run_npg_numpy  # noqa: E402

HYPER_FILE = Path(__file__).resolve().parents[1] / "paper_figures" / "hyper_small.json"
PROG = "benchmarks/bandit_throughput.py"


def _slot_data(seeds: int, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Slot accumulators of 8 samples each (reward ~ 0.6, time ~ 1.2 per sample), float32."""
    rng = np.random.default_rng(0)
    r = rng.normal(0.6, 0.2, (seeds, slots, 8)).clip(0).sum(-1)
    t = np.maximum(rng.normal(1.2, 0.2, (seeds, slots, 8)), 0.5).sum(-1)
    return r.astype(np.float32), t.astype(np.float32)


def _draw_ns(seeds: int, slots: int, batches: int, repeats: int) -> tuple[float, float, float]:
    """(JAX wall ns per bivariate draw, JAX process-CPU ns per draw, NumPy reference ns per
    draw) of one estimator refit; the CPU figure sums all threads (= wall x cores when idle)."""
    r, t = _slot_data(seeds, slots)
    devices = jax.local_devices()
    mesh = jax.sharding.Mesh(np.array(devices), ("seeds",))
    spec = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("seeds"))
    warm = jax.jit(jax.vmap(lambda s, a, b: E.update(s, a, b)))
    state = jax.vmap(lambda _: E.init_state(jnp.float32))(jnp.arange(seeds))
    for _ in range(6):  # steady state: nu ~ 0.3 nu + S
        state = warm(state, r, t)
    state = jax.device_put(state, spec)
    # the simulation's key implementation (threefry), whatever JAX_DEFAULT_PRNG_IMPL says
    keys = jax.device_put(jax.random.split(jax.random.key(1, impl=PRNG_IMPL), seeds), spec)
    f = jax.jit(jax.vmap(lambda s, k: E.estimate(s, k, slots, batches)))
    jax.block_until_ready(f(state, keys))
    best = best_cpu = np.inf
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(f(state, keys))
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    jax_ns = best / (seeds * batches * slots) * 1e9
    cpu_ns = best_cpu / (seeds * batches * slots) * 1e9
    post, _ = niw_update(niw_init(), r[0].astype(np.float64), t[0].astype(np.float64))
    rng = np.random.default_rng(0)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        niw_estimate(post, rng, slots, batches)
        best = min(best, time.perf_counter() - t0)
    return jax_ns, cpu_ns, best / (batches * slots) * 1e9


def _numpy_rate(name: str, env, steps: int, hyper: dict, warmup: int) -> float:
    """Decisions/s of the NumPy loop (one seed) over decisions ``warmup + 1 .. warmup + steps``.

    Two runs with the same seed (one of ``warmup``, one of ``warmup + steps`` decisions: the same
    trajectory prefix); the rate is their difference, so the cheap first decisions (a refit of the
    NumPy reference costs ~ its slot count n, and n < S until S samples were fed) do not inflate
    it. The JAX refit costs the same at every n (all S slot columns are drawn and masked).
    """

    def run(n: int) -> float:
        if n == 0:
            return 0.0
        t0 = time.perf_counter()
        if name == "npg-niw":
            run_npg_numpy(env, n, hyper["lr"], hyper["age_bound"], seed=0)
        else:
            run_cucb_numpy(env, n, hyper["c1"], hyper["c2"], seed=0)
        return time.perf_counter() - t0

    return steps / (run(warmup + steps) - run(warmup))


def _jax_rate(
    name: str, env_name: str, k: int, c: int, seeds: int, steps: int, hyper: dict, oracle=False
):
    """(decision.seeds/s wall, decision.seeds per CPU-second, compile seconds) of ``simulate``.

    ``oracle=True``: the same NPG agent with the refit replaced by a constant
    (``oracle_estimator``), so the difference to the NIW run is the refit's time."""
    agent, h, _ = make_agent(name, c, k + 1, hyper)
    if oracle:
        agent = make_pg_agent(c, k + 1, natural=True, estimator=oracle_estimator(0.5))
    seed_list = list(range(seeds))
    params = make_trial_params(env_name, k, c, seed_list)
    t0 = time.perf_counter()
    simulate(agent, h, params, seed_list, steps)
    first = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    simulate(agent, h, params, seed_list, steps)
    timed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return seeds * steps / timed, seeds * steps / cpu, first - timed


def _load() -> str:
    return "load avg " + "/".join(f"{v:.1f}" for v in os.getloadavg())


def _agent(name: str) -> str:
    if name not in ("npg-niw", "cucb-tuned"):
        raise ValueError(f"unknown agent {name!r}")
    return name


def _main(argv: Sequence[str] | None) -> int:
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--env", default="E1")
    ap.add_argument("--arms", type=int, default=10)
    ap.add_argument("--contexts", type=int, default=4)
    seed_counts = comma_list(int, "integers")
    ap.add_argument("--seeds", type=seed_counts, default="1000,4096", help="seed counts, e.g. 1,2")
    ap.add_argument("--steps", type=int, default=64, help="JAX decisions per seed (NPG-NIW)")
    ap.add_argument("--cucb-steps", type=int, default=256, help="JAX decisions per seed (C-UCB)")
    ap.add_argument("--numpy-steps", type=int, default=800, help="NumPy decisions (one seed)")
    ap.add_argument(
        "--numpy-warmup",
        type=int,
        default=400,
        help="NumPy decisions before the timed ones (slots fill up: steady state)",
    )
    agent_names = comma_list(_agent, "agent names")
    ap.add_argument("--agents", type=agent_names, default="npg-niw", help="npg-niw,cucb-tuned")
    ap.add_argument("--draw-seeds", type=int, default=1000, help="seeds of the draw benchmark")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats of the draw benchmark")
    args = ap.parse_args(argv)
    seeds = args.seeds
    if min(seeds) < 1:
        raise UsageError(f"--seeds must be positive, got {seeds}")
    for flag in ("steps", "cucb_steps", "numpy_steps", "draw_seeds", "repeats"):
        at_least(f"--{flag.replace('_', '-')}", getattr(args, flag), 1)
    at_least("--numpy-warmup", args.numpy_warmup, 0)
    try:
        env = make_reference_env(args.env, args.arms, args.contexts)
    except ValueError as err:
        raise UsageError(
            f"--env {args.env} --arms {args.arms} --contexts {args.contexts}: {err}"
        ) from None
    agents = args.agents
    hypers = json.loads(HYPER_FILE.read_text())["agents"]
    devices = jax.local_devices()
    if args.draw_seeds % len(devices):
        raise UsageError(
            f"--draw-seeds {args.draw_seeds} must be a multiple of the {len(devices)} local "
            "devices (the seeds are sharded over them)"
        )
    print(
        f"devices: {len(devices)} x {devices[0].platform}; instance {args.env}, "
        f"K={args.arms}, |X|={args.contexts}; {_load()}"
    )

    jax_ns, cpu_ns, numpy_ns = _draw_ns(args.draw_seeds, E.NUM_SLOTS, E.NUM_BATCHES, args.repeats)
    print(
        f"estimator refit (M={E.NUM_BATCHES}, S={E.NUM_SLOTS}, float32, "
        f"{args.draw_seeds} seeds): {jax_ns:.3g} ns per bivariate draw (JAX wall, all "
        f"{len(devices)} devices), {cpu_ns:.3g} CPU-ns per draw ({cpu_ns / len(devices):.3g} ns "
        f"wall-equivalent on {len(devices)} idle cores); NumPy reference {numpy_ns:.1f} ns per "
        f"draw (one core); ratio {numpy_ns / jax_ns:.1f}x wall; {_load()}",
        flush=True,
    )

    print(
        f"{'agent':<12} {'seeds':>6} {'numpy dec/s':>12} {'jax dec.seeds/s':>16} "
        f"{'ratio':>8} {'per CPU-s':>10} {'refit %':>8} {'compile s':>10}  load avg"
    )
    steps_of = {"npg-niw": args.steps, "cucb-tuned": args.cucb_steps}
    for name in agents:
        ref = _numpy_rate(name, env, args.numpy_steps, hypers[name], args.numpy_warmup)
        for s in seeds:
            rate, cpu_rate, compile_s = _jax_rate(
                name, args.env, args.arms, args.contexts, s, steps_of[name], hypers[name]
            )
            share = float("nan")
            if name == "npg-niw":  # refit share of the decision time: against the oracle run
                o_rate = _jax_rate(
                    name, args.env, args.arms, args.contexts, s, steps_of[name], hypers[name], True
                )[0]
                share = 100 * (1 - rate / o_rate)
            print(
                f"{name:<12} {s:>6} {ref:>12.1f} {rate:>16.1f} {rate / ref:>8.1f}x "
                f"{cpu_rate:>10.1f} {share:>8.0f} {compile_s:>10.1f}  {_load()}",
                flush=True,
            )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (``rpg_core.cli`` convention: usage error exit 2, other failure exit 1)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
