"""Final regret against the number of arms K (the paper's bandit figure, small setting).

``python -m paper_figures.regret_vs_arms`` runs, for each environment E1-E4 and each
K in {5, 10, 20, 30} with |X| = 4 contexts, every agent (NPG-NIW, SPG-NIW, C-UCB tuned, C-UCB
theory) for n = 30,000 decisions on evaluation seeds 0-99, and plots the final regret
``R_n`` (mean +- standard error over seeds) against K, one panel per environment.

Hyper-parameters come from ``paper_figures/hyper_small.json`` (one setting per agent, from the
tuning run recorded in that file). Outputs in ``--out`` (default ``out/regret_vs_arms``):
``regret_vs_arms.png``, ``.pdf``, ``regret_vs_arms.csv`` (one row per cell: env, K, agent,
hyper-parameters, mean, s.e., seeds, wall seconds) and ``curves.npz`` (regret curves).

Source: paper section "Bandit validation"; environments and protocol from DESIGN.md section 3.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from paper_figures._common import env_name, out_dir, plt, save_figure, write_csv

HYPER_FILE = Path(__file__).with_name("hyper_small.json")
DEFAULT_AGENTS = ("npg-niw", "spg-niw", "cucb-tuned", "cucb-theory")
LABELS = {
    "npg-niw": "NPG-NIW",
    "spg-niw": "SPG-NIW",
    "cucb-tuned": "C-UCB (tuned)",
    "cucb-theory": "C-UCB (theory)",
    "cucb-sampled": "C-UCB (sampled)",
}
CSV_FIELDS = (
    "env",
    "K",
    "n_contexts",
    "agent",
    "hyper",
    "n_steps",
    "seeds",
    "n_seeds",
    "mean_regret",
    "se_regret",
    "mean_pseudo_regret",
    "se_pseudo_regret",
    "wall_s",
    "note",
)


class UsageError(ValueError):
    """Bad command-line input (exit status 2)."""


def _int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise UsageError(f"{what} is empty")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate the command line (raises UsageError; no JAX work is done here)."""
    ap = argparse.ArgumentParser(prog="python -m paper_figures.regret_vs_arms", description=__doc__)
    ap.add_argument("--envs", default="E1,E2,E3,E4", help="comma-separated env names")
    ap.add_argument("--arms", default="5,10,20,30", help="comma-separated K values")
    ap.add_argument("--contexts", type=int, default=4, help="number of contexts |X|")
    ap.add_argument("--steps", type=int, default=30_000, help="decisions per seed")
    ap.add_argument("--seeds", type=int, default=100, help="number of evaluation seeds")
    ap.add_argument("--seed-start", type=int, default=0, help="first evaluation seed")
    ap.add_argument("--agents", default=",".join(DEFAULT_AGENTS))
    ap.add_argument(
        "--cell-seeds",
        action="append",
        default=[],
        metavar="AGENT:K=N",
        help="use only N seeds for AGENT at arm count K (stated in the CSV and the figure)",
    )
    ap.add_argument(
        "--agent-seeds",
        action="append",
        default=[],
        metavar="AGENT=N",
        help="use only N seeds for AGENT at every K (stated in the CSV and the figure)",
    )
    ap.add_argument("--hyper", default=str(HYPER_FILE), help="hyper-parameter JSON file")
    ap.add_argument("--out", default=None, help="output folder (default out/regret_vs_arms)")
    ap.add_argument("--quick", action="store_true", help="reduced smoke run (< 2 minutes)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.envs, args.arms, args.steps, args.seeds = "E1,E4", "5,10", 2_000, 8
    from rpg_jax.agents.registry import check_agent_name, validate_agent
    from rpg_jax.envs import ENV_NAMES

    args.env_list = [env_name(e, ENV_NAMES) for e in args.envs.split(",") if e.strip()]
    if not args.env_list:
        raise UsageError(f"--envs names no environment: {args.envs!r}")
    args.arm_list = _int_list(args.arms, "--arms")
    for flag, values in (("--envs", args.env_list), ("--arms", args.arm_list)):
        if len(set(values)) != len(values):
            raise UsageError(f"{flag} repeats a value: {values}")
    for k in args.arm_list:
        if k < 1:
            raise UsageError(f"--arms: K must be >= 1, got {k}")
    if args.contexts < 1:
        raise UsageError(f"--contexts must be >= 1, got {args.contexts}")
    if args.steps < 1:
        raise UsageError(f"--steps must be >= 1, got {args.steps}")
    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    if args.seed_start < 0:
        raise UsageError(f"--seed-start must be >= 0, got {args.seed_start}")
    args.agent_list = [check_agent_name(a) for a in args.agents.split(",") if a.strip()]
    if not args.agent_list or len(set(args.agent_list)) != len(args.agent_list):
        raise UsageError(f"--agents must name distinct agents, got {args.agents!r}")
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} exists and is not a folder")
    args.cell_seed_map = {}
    for item in args.cell_seeds:
        try:
            left, n = item.split("=")
            agent, k = left.split(":")
            args.cell_seed_map[(check_agent_name(agent), int(k))] = int(n)
        except ValueError as err:
            raise UsageError(f"--cell-seeds expects AGENT:K=N, got {item!r} ({err})") from None
    for item in args.agent_seeds:
        try:
            agent, n = item.split("=")
            for k in args.arm_list:
                args.cell_seed_map.setdefault((check_agent_name(agent), k), int(n))
        except ValueError as err:
            raise UsageError(f"--agent-seeds expects AGENT=N, got {item!r} ({err})") from None
    for (agent, k), n in args.cell_seed_map.items():
        if n < 1:
            raise UsageError(f"seeds for {agent} at K={k} must be >= 1, got {n}")
    hyper_path = Path(args.hyper)
    if not hyper_path.is_file():
        raise UsageError(f"--hyper file not found: {hyper_path}")
    try:
        args.hyper_table = json.loads(hyper_path.read_text())["agents"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise UsageError(f"--hyper {hyper_path}: not a hyper-parameter file ({err})") from None
    for a in args.agent_list:
        if a != "cucb-theory" and a not in args.hyper_table:
            raise UsageError(f"no hyper-parameters for agent {a!r} in {hyper_path}")
        for k in args.arm_list:  # builds the agents (no compilation): sizes and values
            validate_agent(a, args.contexts, k + 1, args.hyper_table.get(a))
    return args


def run(args: argparse.Namespace) -> Path:
    """Run every cell, write CSV + curves + figure; returns the output folder."""

    from rpg_jax.config import setup_jax

    setup_jax()
    import numpy as np
    from tqdm import tqdm

    from rpg_jax.agents.registry import make_agent
    from rpg_jax.envs import make_reference_env, make_trial_params
    from rpg_jax.simulate import simulate, standard_error

    folder = out_dir(args.out, "regret_vs_arms")
    seeds_all = list(range(args.seed_start, args.seed_start + args.seeds))
    cells = [(e, k, a) for e in args.env_list for k in args.arm_list for a in args.agent_list]
    rows, curves = [], {}
    bar = tqdm(cells, desc="cells", unit="cell", disable=args.no_progress, file=sys.stderr)
    for env, k, name in bar:
        bar.set_postfix_str(f"{env} K={k} {name}")
        n_seeds = min(args.seeds, args.cell_seed_map.get((name, k), args.seeds))
        seeds = seeds_all[:n_seeds]
        base = make_reference_env(env, k, args.contexts)
        params = make_trial_params(env, k, args.contexts, seeds)
        agent, hyper, used = make_agent(
            name,
            args.contexts,
            k + 1,
            args.hyper_table.get(name),
            rbar=np.asarray(base.rbar),
            dbar=np.asarray(base.dbar),
        )
        t0 = time.perf_counter()
        res = simulate(agent, hyper, params, seeds, args.steps)
        wall = time.perf_counter() - t0
        note = "" if n_seeds == args.seeds else f"reduced seeds: {n_seeds} of {args.seeds}"
        rows.append(
            {
                "env": env,
                "K": k,
                "n_contexts": args.contexts,
                "agent": name,
                "hyper": json.dumps(used, sort_keys=True),
                "n_steps": args.steps,
                "seeds": f"{seeds[0]}-{seeds[-1]}",
                "n_seeds": n_seeds,
                "mean_regret": float(np.mean(res.regret)),
                "se_regret": standard_error(res.regret),
                "mean_pseudo_regret": float(np.mean(res.pseudo_regret)),
                "se_pseudo_regret": standard_error(res.pseudo_regret),
                "wall_s": round(wall, 3),
                "note": note,
            }
        )
        curves[f"{env}_K{k}_{name}"] = res.regret_curve
        curves["checkpoints"] = res.checkpoints
        write_csv(folder / "regret_vs_arms.csv", rows, CSV_FIELDS)  # keep partial results
    np.savez_compressed(folder / "curves.npz", **curves)
    plot(rows, folder, args)
    return folder


def plot(rows: list[dict], folder: Path, args: argparse.Namespace) -> None:
    """Four panels (one per env): mean final regret +- s.e. against K, a line per agent."""
    envs = list(dict.fromkeys(r["env"] for r in rows))
    fig, axes = plt.subplots(1, len(envs), figsize=(4.2 * len(envs), 3.6), squeeze=False)
    reduced: dict[str, set] = {}
    for r in rows:
        if r["note"]:
            reduced.setdefault(f"{LABELS[r['agent']]}: {r['n_seeds']} seeds", set()).add(r["K"])
    notes = [f"{k} (K = {', '.join(map(str, sorted(v)))})" for k, v in sorted(reduced.items())]
    for ax, env in zip(axes[0], envs, strict=True):
        for name in args.agent_list:
            sel = sorted(
                (r for r in rows if r["env"] == env and r["agent"] == name), key=lambda r: r["K"]
            )
            if not sel:
                continue
            ks = [r["K"] for r in sel]
            means = [r["mean_regret"] for r in sel]
            ses = [r["se_regret"] for r in sel]
            ax.errorbar(ks, means, yerr=ses, marker="o", capsize=3, label=LABELS[name])
        ax.set_title(env)
        ax.set_xlabel("number of arms K")
        ax.set_xticks(args.arm_list)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"regret $R_n$ at n = {args.steps:,}")
    axes[0][-1].legend(fontsize=8)
    caption = f"|X| = {args.contexts}, n = {args.steps:,}, mean +- s.e. over {args.seeds} seeds"
    if notes:
        caption += "\nreduced seeds: " + "; ".join(notes)
    fig.suptitle(caption, fontsize=8, y=1.02)
    save_figure(fig, folder, "regret_vs_arms")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: exit 0 on success, 2 (one line on stderr) on usage errors."""
    try:
        args = parse_args(argv)
    except ValueError as err:  # UsageError and validation errors from the library
        print(f"regret_vs_arms: error: {err}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    folder = run(args)
    print(f"wrote {folder} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
