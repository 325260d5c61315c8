"""Figure: rate of the NPG running rate ``|rhobar_k - rho_star|`` (proofs/npg_decoupling.md).

``python -m paper_figures.npg_rate [--out DIR] [--steps N] [--seed S]`` writes ``npg_rate.png``,
``.pdf``, ``.csv`` (the plotted curves, log-spaced ``k``) and ``npg_rate_slopes.csv`` (fitted
slopes) in ``out/npg_rate`` by default.

Exact NPG with exact greedy estimation (``rpg_jax.npg_theory.npg_exact``), steps
``eta_k = (k + 1) ** -chi``, on a seeded random instance; the slope of ``log |rhobar_k - rho*|``
against ``log k`` is fitted on ``k >= max(10 K, 100)`` (``K`` = settling time, Theorem 2) and
compared with the theoretical exponent ``-(1 - chi)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from paper_figures._common import out_dir, plt, save_figure, write_csv
from rpg_core.cli import ArgumentParser, at_least, out_folder, run_cli
from rpg_jax.npg_theory import npg_exact, settle_index
from rpg_jax.rates import rho_star_dinkelbach

NAME = "npg_rate"
PROG = "python -m paper_figures.npg_rate"
CHIS = (0.0, 0.3, 0.6, 0.8)


def instance(seed: int, contexts: int = 4, actions: int = 6):
    """Seeded instance: ``p`` Dirichlet(1), ``rbar ~ U(0, 3)``, ``dbar ~ U(0.1, 5)`` (float64)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(contexts))
    return p, rng.uniform(0.0, 3.0, (contexts, actions)), rng.uniform(0.1, 5.0, (contexts, actions))


def compute(steps: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Curves (log-spaced rows) and fitted slopes, one entry per chi."""
    p, rbar, dbar = instance(seed)
    rho_star = rho_star_dinkelbach(p, rbar, dbar)[0]
    k_all = np.arange(steps + 1)
    keep = np.unique(np.geomspace(1, steps, 400).astype(int))
    curves, slopes = [], []
    for chi in CHIS:
        traj = npg_exact(p, rbar, dbar, 1.0, chi, steps, rho0=0.0, store_theta=False)
        err = np.abs(traj.rho_bar - rho_star)
        K = settle_index(traj.rho, rho_star)
        sel = (k_all >= max(10 * K, 100)) & (err > 0)
        slope, icpt = np.nan, np.nan
        if sel.sum() > 2:
            slope, icpt = np.polyfit(np.log(k_all[sel]), np.log(err[sel]), 1)
        slopes.append(
            dict(chi=chi, K=K, fitted_slope=slope, intercept=icpt, theory_slope=-(1 - chi))
        )
        for k in keep:
            curves.append(dict(chi=chi, k=int(k), rho_bar=traj.rho_bar[k], abs_err=err[k]))
    return curves, slopes


def plot(curves: list[dict], slopes: list[dict]):
    """Log-log error curves with fitted lines; returns the figure."""
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for i, s in enumerate(slopes):
        color = f"C{i}"
        pts = [c for c in curves if c["chi"] == s["chi"] and c["abs_err"] > 0]
        k = np.array([c["k"] for c in pts])
        ax.loglog(
            k,
            [c["abs_err"] for c in pts],
            color=color,
            lw=1.5,
            label=(
                f"chi={s['chi']:g}: fitted slope {s['fitted_slope']:.3f}"
                f" (theory {s['theory_slope']:.2f})"
            ),
        )
        fit_k = k[k >= max(10 * s["K"], 100)]
        if fit_k.size and np.isfinite(s["fitted_slope"]):
            ax.loglog(fit_k, np.exp(s["intercept"]) * fit_k ** s["fitted_slope"], "k:", lw=1)
    ax.set_xlabel("k (NPG step)")
    ax.set_ylabel("|rhobar_k - rho*|")
    ax.set_title("exact NPG, eta_k = (k+1)^-chi", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _main(argv: Sequence[str] | None) -> int:
    parser = ArgumentParser(prog=PROG)
    parser.add_argument("--out", default=None, help=f"output folder (default out/{NAME})")
    parser.add_argument("--steps", type=int, default=50_000, help="NPG steps per chi")
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance")
    args = parser.parse_args(argv)
    at_least("--steps", args.steps, 200)
    at_least("--seed", args.seed, 0)
    if args.out is not None:
        out_folder("--out", args.out)
    curves, slopes = compute(args.steps, args.seed)
    folder = out_dir(args.out, NAME)
    write_csv(folder / f"{NAME}.csv", curves, ["chi", "k", "rho_bar", "abs_err"])
    write_csv(folder / f"{NAME}_slopes.csv", slopes, list(slopes[0].keys()))
    png, pdf = save_figure(plot(curves, slopes), folder, NAME)
    for s in slopes:
        print(
            f"chi={s['chi']:g} K={s['K']} fitted slope {s['fitted_slope']:.4f} "
            f"theory {s['theory_slope']:.4f}"
        )
    print(f"wrote {png}, {pdf}, {folder / (NAME + '.csv')}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``rpg_core.cli`` convention: 2 on usage errors, 1 on other failures)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
