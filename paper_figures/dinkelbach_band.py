"""Figure: approximate Dinkelbach trajectories inside the band (proofs/approximate_dinkelbach.md).

``python -m paper_figures.dinkelbach_band [--out DIR] [--steps N] [--seed S]`` writes
``dinkelbach_band.png``, ``.pdf`` and ``.csv`` (default folder ``out/dinkelbach_band``).

Panels: a seeded random instance for several ``gamma`` and the tight instance of Proposition 3.
Each panel shows ``rho_k / rho_star`` against ``k`` for the four perturbation rules of
``rpg_jax.dinkelbach.approximate_dinkelbach`` and the exact iteration, the band
``[(1 - R gamma/(1+gamma)), (1 + gamma)]`` (shaded) and the local lower end (dotted).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from paper_figures._common import out_dir, plt, save_figure, write_csv
from rpg_core.cli import ArgumentParser, at_least, out_folder, run_cli
from rpg_jax.dinkelbach import RULES, approximate_dinkelbach, band_constants, tight_instance

NAME = "dinkelbach_band"
PROG = "python -m paper_figures.dinkelbach_band"
GAMMAS = (0.1, 0.3, 0.5)
COLORS = {"random": "tab:blue", "low": "tab:green", "high": "tab:red", "adversarial": "tab:purple"}


def random_instance(seed: int, contexts: int = 4, actions: int = 6):
    """Seeded instance: ``p`` Dirichlet(1), ``rbar ~ U(0, 3)``, ``dbar ~ U(0.2, 4)`` (float64)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(contexts))
    return p, rng.uniform(0.0, 3.0, (contexts, actions)), rng.uniform(0.2, 4.0, (contexts, actions))


def compute(steps: int, seed: int) -> list[dict]:
    """All trajectories as CSV rows (one row per instance, gamma, rule, k)."""
    cases = [("random", g, random_instance(seed), 0.0) for g in GAMMAS]
    cases.append(("tight R=3", 0.3, tight_instance(3.0, 0.3, eps=1e-3), 1.0))
    rows = []
    for inst_name, gamma, (p, rbar, dbar), rho0 in cases:
        bc = band_constants(p, rbar, dbar, gamma)
        for rule in (*RULES, "exact"):
            g = 0.0 if rule == "exact" else gamma
            traj = approximate_dinkelbach(
                p, rbar, dbar, g, "low" if rule == "exact" else rule, steps, rho0=rho0, seed=seed
            )
            for k, rho in enumerate(traj.rho):
                rows.append(
                    dict(
                        instance=inst_name,
                        gamma=gamma,
                        rule=rule,
                        k=k,
                        rho=rho,
                        rho_over_rho_star=rho / bc.rho_star,
                        lower=bc.lower / bc.rho_star,
                        lower_local=bc.lower_local / bc.rho_star,
                        upper=bc.upper / bc.rho_star,
                        R=bc.R,
                        R_local=bc.R_local,
                    )
                )
    return rows


def plot(rows: list[dict]):
    """One panel per (instance, gamma); returns the matplotlib figure."""
    keys = list(dict.fromkeys((r["instance"], r["gamma"]) for r in rows))
    ncols = 2
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.4 * nrows), sharey=True)
    axes = np.atleast_1d(axes).ravel()
    for ax in axes[len(keys) :]:
        ax.set_visible(False)
    for ax, (inst_name, gamma) in zip(axes, keys, strict=False):
        sub = [r for r in rows if r["instance"] == inst_name and r["gamma"] == gamma]
        first = sub[0]
        ax.axhspan(first["lower"], first["upper"], color="0.9", label="band (R)")
        ax.axhline(first["lower_local"], color="0.4", ls=":", lw=1, label="lower, R_local")
        ax.axhline(1.0, color="k", lw=0.6)
        for rule in (*RULES, "exact"):
            pts = [r for r in sub if r["rule"] == rule]
            ax.plot(
                [r["k"] for r in pts],
                [r["rho_over_rho_star"] for r in pts],
                color=COLORS.get(rule, "k"),
                ls="--" if rule == "exact" else "-",
                marker="." if rule != "exact" else None,
                ms=3,
                lw=1,
                label=rule if rule != "exact" else "exact (gamma=0)",
            )
        ax.set_title(f"{inst_name}, gamma={gamma:g} (R={first['R']:.2f})", fontsize=9)
        ax.set_xlabel("k")
    for ax in axes[::ncols]:
        ax.set_ylabel("rho_k / rho*")
    axes[0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def _main(argv: Sequence[str] | None) -> int:
    parser = ArgumentParser(prog=PROG)
    parser.add_argument("--out", default=None, help=f"output folder (default out/{NAME})")
    parser.add_argument("--steps", type=int, default=30, help="iterations per trajectory")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random instance/rule")
    args = parser.parse_args(argv)
    at_least("--steps", args.steps, 1)
    at_least("--seed", args.seed, 0)
    if args.out is not None:
        out_folder("--out", args.out)
    rows = compute(args.steps, args.seed)
    folder = out_dir(args.out, NAME)
    write_csv(folder / f"{NAME}.csv", rows, list(rows[0].keys()))
    png, pdf = save_figure(plot(rows), folder, NAME)
    print(f"wrote {png}, {pdf}, {folder / (NAME + '.csv')}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``rpg_core.cli`` convention: 2 on usage errors, 1 on other failures)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
