"""Closing-note measurements of the reference feeding (issue 12 item 1); run from the worktree:
PYTHONPATH=$PWD python notes/feeding_measure.py early|regret [seeds] [n]"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from rpg_jax.config import setup_jax

setup_jax()
from rpg_jax.agents.npg import PGHyper, make_pg_agent  # noqa: E402
from rpg_jax.envs import make_trial_params, sample_context, sample_outcome  # noqa: E402
from rpg_jax.simulate import seed_keys, simulate, standard_error  # noqa: E402


def early(n_seeds=64, n=64):
    """First decision at which rho_hat > 0, per seed (same keys as rpg_jax.simulate)."""
    seeds = list(range(n_seeds))
    for env in ("E1", "E4"):
        params = make_trial_params(env, 5, 4, seeds)
        for feeding in ("reference", "legacy"):
            agent = make_pg_agent(4, 6, natural=True, feeding=feeding)
            hyper = PGHyper(jnp.asarray(1.0, jnp.float64), jnp.asarray(250.0))

            def run(p, key, agent=agent, hyper=hyper):
                k_init, k_run = jax.random.split(key)
                s = agent.init(hyper, k_init)

                def step(s, t):
                    kx, ka, ke, ku = jax.random.split(jax.random.fold_in(k_run, t), 4)
                    x = sample_context(p, kx)
                    a = agent.act(s, hyper, x, ka)
                    r, d = sample_outcome(p, ke, x, a)
                    s = agent.update(s, hyper, x, a, r, d, ku)
                    return s, s.est.rho_hat

                return jax.lax.scan(step, s, jnp.arange(n))[1]

            rho = np.asarray(jax.jit(jax.vmap(run))(params, seed_keys(seeds)))
            first = np.where((rho > 0).any(1), (rho > 0).argmax(1) + 1, n + 1)
            print(
                f"{env} K=5 {feeding:9s} first decision with rho_hat>0: "
                f"median {np.median(first):.0f} mean {first.mean():.1f} "
                f"min {first.min()} max {first.max()}  "
                f"rho_hat at decision 24: mean {rho[:, 23].mean():.3f}"
            )


def regret(n_seeds=10, n=30_000):
    seeds = list(range(n_seeds))
    for env in ("E1", "E4"):
        params = make_trial_params(env, 5, 4, seeds)
        agent = make_pg_agent(4, 6, natural=True)
        hyper = PGHyper(jnp.asarray(1.0, jnp.float64), jnp.asarray(250.0))
        t0 = time.perf_counter()
        res = simulate(agent, hyper, params, seeds, n)
        dt = time.perf_counter() - t0
        print(
            f"{env} K=5 npg-niw reference feeding lr=1 age=250, {n_seeds} seeds n={n}: "
            f"R_n {res.regret.mean():.1f} +- {standard_error(res.regret):.1f}  ({dt:.0f} s wall)"
        )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[2:]]
    {"early": early, "regret": regret}[sys.argv[1]](*args)
