"""Final regret against the number of arms K (the paper's bandit figure).

``python -m paper_figures.regret_vs_arms [--setting small|large]`` runs every agent (NPG-NIW,
SPG-NIW, C-UCB tuned, C-UCB theory) for n = 30,000 decisions on the evaluation trials 0-99 in every
(env, K, |X|) cell of the setting and plots the final regret ``R_n`` (mean +- standard error over
trials) against K: one panel per (|X|, environment), rows |X| and columns E1-E4 (small setting:
K in {5, 10, 20, 30}, |X| = 4, one row; large setting: K in {70, 100, 130, 160}, |X| in
{8, 16, 32, 64}, a 4 x 4 grid), log-scale y axis, one legend for the figure.

C-UCB enumerates all policies for |X| = 4 and samples M = 2,048 policies per decision for
|X| > 4. Hyper-parameters: a cell's tuned point from ``paper_figures/tuned_<setting>.json``
(``python -m paper_figures.tune``) where that file has one, else the one-setting file
``paper_figures/hyper_small.json``; the CSV's ``hyper_source`` column and the caption say which.

Outputs in ``--out`` (default ``out/regret_vs_arms``; ``--quick``: ``out/regret_vs_arms_quick``):
``regret_vs_arms.png``, ``.pdf``, ``regret_vs_arms.csv`` (one row per cell and agent, rewritten
as each finishes; its header is written at the start), ``curves.npz`` (regret curves) and
``run.json`` (the command, settings and planned cells, written at the start; ``finished`` is set
at the end). A progress bar shows the decisions done
inside each cell with an ETA measured after compilation.

``--ray ADDRESS|local`` runs every (cell, agent) as a Ray task (``paper_figures/_ray.py``:
``local`` starts Ray on this machine, ``HOST:PORT`` joins a running cluster; an address that
accepts no connection exits 2 before anything compiles or is written). The driver rewrites the
CSV and curves as tasks finish, rows in the planned order, with the in-process numbers; one tqdm
bar counts the units done. As in-process, a rerun starts from the first unit.

``--quick`` is a smoke run (E1 and E4, K = 5 and 10, n = 2,000, 8 trials), labelled as such in
its title, CSV (``run`` column) and output line; it is not the paper's protocol. Measured on this
project's 2 shared cores (load ~6): 338 s wall cold with the progress bar, 260 s cold with
``--no-progress``, 98 s with ``--no-progress`` and a warm persistent compilation cache (a run with
the bar never reaches that cache: ``paper_figures/_progress.py``). Compilation (20-33 s per agent
and K) is most of it.

Source: paper section "Bandit validation"; environments and protocol from DESIGN.md sections 3, 5.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from paper_figures._common import out_dir, plt, save_figure, write_csv
from paper_figures._protocol import (
    ENVS,
    ESTIMATOR_AGENTS,
    EVAL_SEEDS,
    N_STEPS,
    SETTINGS,
    Cell,
    build_agent,
    check_contexts,
    check_env,
    check_trials,
    load_json,
    resolve_hyper,
)
from rpg_core.cli import ArgumentParser, UsageError, comma_list, run_cli

PROG = "python -m paper_figures.regret_vs_arms"
PROG_MODULE = "paper_figures.regret_vs_arms"
HYPER_FILE = Path(__file__).with_name("hyper_small.json")
DEFAULT_AGENTS = ("npg-niw", "spg-niw", "cucb-tuned", "cucb-theory")
QUICK = {"envs": "E1,E4", "arms": "5,10", "steps": 2_000, "seeds": 8}
QUICK_TIME = (
    "E1, E4; K = 5, 10; n = 2,000; 8 trials. Measured on 2 shared cores: 5.6 min (4.3 min with "
    "--no-progress), 1.6 min with --no-progress and a warm compilation cache"
)
SMOKE = "SMOKE RUN (--quick: E1, E4; K = 5, 10; n = 2,000; 8 trials), not the paper's protocol"
LABELS = {
    "npg-niw": "NPG-NIW",
    "spg-niw": "SPG-NIW",
    "cucb-tuned": "C-UCB (tuned)",
    "cucb-theory": "C-UCB (theory)",
    "npg-niw-mean": "NPG, NIW posterior mean",
    "npg-rm": "NPG, Robbins-Monro",
    "npg-learned": "NPG, learned",
}
CSV_FIELDS = (
    "run",
    "setting",
    "env",
    "K",
    "n_contexts",
    "agent",
    "hyper",
    "hyper_source",
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


def _parser() -> ArgumentParser:
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="small")
    ap.add_argument("--envs", default=",".join(ENVS), help="comma-separated env names")
    ap.add_argument(
        "--arms", type=comma_list(int, "integers"), default=None, help="K values (setting's)"
    )
    ap.add_argument(
        "--contexts", type=comma_list(int, "integers"), default=None, help="|X| values (>= 4)"
    )
    ap.add_argument("--steps", type=int, default=N_STEPS, help="decisions per trial")
    ap.add_argument("--seeds", type=int, default=len(EVAL_SEEDS), help="evaluation trials")
    ap.add_argument("--seed-start", type=int, default=EVAL_SEEDS.start, help="first trial")
    ap.add_argument(
        "--agents",
        default=",".join(DEFAULT_AGENTS),
        help=f"comma-separated agents (default {','.join(DEFAULT_AGENTS)})",
    )
    ap.add_argument(
        "--estimators",
        default=None,
        help="comma-separated reward-rate estimators of NPG, one agent each, instead of --agents: "
        + ", ".join(f"{e} ({a})" for e, a in ESTIMATOR_AGENTS.items()),
    )
    ap.add_argument(
        "--cell-seeds",
        action="append",
        default=[],
        metavar="AGENT:K=N",
        help="only N trials for AGENT at K (stated in the CSV and the caption)",
    )
    ap.add_argument(
        "--agent-seeds",
        action="append",
        default=[],
        metavar="AGENT=N",
        help="only N trials for AGENT at every K (stated in the CSV and the caption)",
    )
    ap.add_argument("--hyper", default=str(HYPER_FILE), help="one-setting hyper-parameter JSON")
    ap.add_argument(
        "--tuned",
        default=None,
        help="tuned-results JSON (default paper_figures/tuned_<setting>.json; "
        "'none': one setting everywhere)",
    )
    ap.add_argument("--out", default=None, help="output folder (default out/regret_vs_arms)")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + QUICK_TIME)
    ap.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar; the compiled code then goes into the persistent compilation cache",
    )
    ap.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS|local",
        help="run every (cell, agent) as a Ray task: 'local' starts Ray on this machine, "
        "HOST:PORT joins a cluster; the CSV is rewritten as units finish",
    )
    return ap


def _seed_map(args, agents: list[str], arms: list[int]) -> dict[tuple[str, int], int]:
    """``(agent, K) -> trials`` from --cell-seeds AGENT:K=N and --agent-seeds AGENT=N."""
    found: dict[tuple[str, int], int] = {}
    seen: set[tuple[str, str, int]] = set()
    for flag, items in (("--cell-seeds", args.cell_seeds), ("--agent-seeds", args.agent_seeds)):
        for item in items:
            left, _, n = item.partition("=")
            agent, _, k = left.partition(":")
            try:
                ks, n = ([int(k)] if flag == "--cell-seeds" else arms), int(n)
            except ValueError:
                raise UsageError(
                    f"{flag}: expected AGENT{':K' * (flag[2] == 'c')}=N, got {item!r}"
                ) from None
            if agent not in agents or n < 1:
                raise UsageError(
                    f"{flag} {item!r}: agent must be one of --agents, N >= 1, got {agent!r}, {n}"
                )
            if n > args.seeds:
                raise UsageError(f"{flag} {item!r}: N must be <= --seeds ({args.seeds}), got {n}")
            if flag == "--cell-seeds" and ks[0] not in arms:
                raise UsageError(
                    f"{flag} {item!r}: K must be one of --arms ({','.join(map(str, arms))}), "
                    f"got {ks[0]}"
                )
            if (flag, agent, ks[0]) in seen:
                raise UsageError(
                    f"{flag} {item!r}: repeats agent {agent!r}" + f" at K = {k}" * (flag[2] == "c")
                )
            seen.add((flag, agent, ks[0]))
            for kk in ks:
                found.setdefault((agent, kk), n)  # --cell-seeds before --agent-seeds
    return found


def check_args(args) -> dict:
    """Validate the flags before anything is created or compiled; returns the run plan.

    Raises:
      UsageError: naming the flag and the value: unknown env or agent, K < 2, |X| < 4 (the
        reference environments need >= 4 contexts), steps / seeds < 1, seed start < 0, trials
        past the largest seed ``2**32 - 1``, an --out that is a file, unreadable
        hyper-parameter files, or hyper-parameters an agent refuses (e.g. too many policies for
        exact C-UCB).
    """
    from rpg_jax.envs import reference_means

    setting = SETTINGS[args.setting]
    if args.quick:
        args.envs, args.arms, args.steps, args.seeds = (
            QUICK["envs"],
            None,
            QUICK["steps"],
            QUICK["seeds"],
        )
        args.arms = comma_list(int, "integers")(QUICK["arms"])
    envs = [check_env(e, "--envs") for e in args.envs.split(",")]
    if len(set(envs)) != len(envs):
        raise UsageError(f"--envs repeats a value: {args.envs!r}")
    arms = args.arms or list(setting.arms)
    contexts = [check_contexts(x, "--contexts") for x in (args.contexts or setting.contexts)]
    if min(arms) < 2:
        raise UsageError(f"--arms: K must be >= 2 (one arm has no regret), got {min(arms)}")
    if args.steps < 1:
        raise UsageError(f"--steps must be >= 1, got {args.steps}")
    check_trials(args.seed_start, args.seeds)
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    if args.estimators is not None:
        if args.agents != ",".join(DEFAULT_AGENTS):
            raise UsageError("give --estimators or --agents, not both")
        names = [e.strip() for e in args.estimators.split(",") if e.strip()]
        if not names or any(e not in ESTIMATOR_AGENTS for e in names):
            raise UsageError(
                f"--estimators {args.estimators!r}: name estimators among "
                f"{', '.join(ESTIMATOR_AGENTS)}"
            )
        agents = [ESTIMATOR_AGENTS[e] for e in names]
    if not agents or len(set(agents)) != len(agents) or any(a not in LABELS for a in agents):
        raise UsageError(
            f"--agents {args.agents!r}: name distinct agents among {', '.join(LABELS)}"
        )
    if args.out is not None and Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} exists and is not a folder")
    hyper_path = Path(args.hyper)
    one = load_json(hyper_path, "--hyper", ["agents"])["agents"]
    tuned_path = None if args.tuned == "none" else Path(args.tuned or setting.tuned_file)
    tuned = None
    if tuned_path is not None and (args.tuned is not None or tuned_path.exists()):
        tuned = load_json(tuned_path, "--tuned", ["cells"]) | {"_path": tuned_path}
    seed_map = _seed_map(args, agents, arms)
    cells = [Cell(e, k, x) for x in contexts for e in envs for k in arms]
    hyper = {}
    for cell in cells:
        rbar, dbar = reference_means(cell.K, cell.contexts)
        for a in agents:
            h, source = resolve_hyper(a, cell, tuned, one, hyper_path)
            try:
                build_agent(a, cell, h, rbar=rbar, dbar=dbar)  # sizes and values, no compile
            except ValueError as err:
                raise UsageError(f"{source} ({cell.key}): {err}") from None
            hyper[cell, a] = (h, source)
    return {
        "setting": setting.name,
        "cells": cells,
        "agents": agents,
        "hyper": hyper,
        "seed_map": seed_map,
        "arms": arms,
        "contexts": contexts,
    }


def run_cell(
    cell: Cell,
    name: str,
    hyper: dict | None,
    seeds: list[int],
    n_steps: int,
    desc: str,
    progress: bool,
):
    """Simulate ``name`` on ``cell`` for trials ``seeds``; returns (SimResult, used, wall s)."""
    import numpy as np

    from paper_figures._progress import progress_bar, tick_every, with_progress
    from rpg_jax.envs import make_reference_env, make_trial_params
    from rpg_jax.simulate import simulate

    base = make_reference_env(cell.env, cell.K, cell.contexts)
    params = make_trial_params(cell.env, cell.K, cell.contexts, seeds)
    agent, hyper_t, used = build_agent(
        name, cell, hyper, rbar=np.asarray(base.rbar), dbar=np.asarray(base.dbar)
    )
    t0 = time.perf_counter()
    with progress_bar(n_steps, desc, disable=not progress):
        run_agent = with_progress(agent, tick_every(n_steps)) if progress else agent
        res = simulate(run_agent, hyper_t, params, seeds, n_steps)
    return res, used, time.perf_counter() - t0


def run(args, plan: dict, on_ray: bool = False) -> Path:
    """Run every cell, rewriting the CSV and curves as each finishes, then plot; returns --out.

    ``on_ray``: every (cell, agent) is a Ray task of a session the caller has started
    (``paper_figures._ray.connect``); the rows are written in the planned order whatever the
    order the tasks finish in.
    """
    from rpg_jax.config import setup_jax

    setup_jax()
    import numpy as np

    from rpg_jax.simulate import standard_error

    folder = out_dir(args.out, "regret_vs_arms_quick" if args.quick else "regret_vs_arms")
    seeds_all = list(range(args.seed_start, args.seed_start + args.seeds))
    units = [(c, a) for c in plan["cells"] for a in plan["agents"]]
    info = _run_info(args, plan, units)
    (folder / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    write_csv(folder / "regret_vs_arms.csv", [], CSV_FIELDS)  # header now: a kill leaves it
    rows, curves = {}, {}

    def unit_seeds(cell: Cell, name: str) -> list[int]:
        return seeds_all[: min(args.seeds, plan["seed_map"].get((name, cell.K), args.seeds))]

    def finished(i: int, res, used: dict, wall: float) -> None:
        cell, name = units[i]
        seeds = unit_seeds(cell, name)
        source = plan["hyper"][cell, name][1]
        rows[i] = {
            "run": "quick smoke run" if args.quick else "full",
            "setting": plan["setting"],
            "env": cell.env,
            "K": cell.K,
            "n_contexts": cell.contexts,
            "agent": name,
            "hyper": json.dumps(used, sort_keys=True),
            "hyper_source": source,
            "n_steps": args.steps,
            "seeds": f"{seeds[0]}-{seeds[-1]}",
            "n_seeds": len(seeds),
            "mean_regret": float(np.mean(res.regret)),
            "se_regret": standard_error(res.regret),
            "mean_pseudo_regret": float(np.mean(res.pseudo_regret)),
            "se_pseudo_regret": standard_error(res.pseudo_regret),
            "wall_s": round(wall, 3),
            "note": ""
            if len(seeds) == args.seeds
            else f"reduced seeds: {len(seeds)} of {args.seeds}",
        }
        curves[f"{cell.env}_K{cell.K}_X{cell.contexts}_{name}"] = res.regret_curve
        curves["checkpoints"] = res.checkpoints
        write_csv(folder / "regret_vs_arms.csv", [rows[j] for j in sorted(rows)], CSV_FIELDS)
        np.savez_compressed(folder / "curves.npz", **curves)

    if on_ray:
        from paper_figures import _ray

        jobs = [
            {
                "cell": cell,
                "name": name,
                "hyper": plan["hyper"][cell, name][0],
                "seeds": unit_seeds(cell, name),
                "n_steps": args.steps,
                "desc": f"{cell.env} K={cell.K} X={cell.contexts} {name}",
                "progress": False,
            }
            for cell, name in units
        ]
        desc = f"regret_vs_arms on Ray ({len(jobs)} units)"
        progress = not args.no_progress
        for i, out in _ray.run_tasks(PROG_MODULE, "run_cell", jobs, desc=desc, progress=progress):
            finished(i, *out)
    else:
        for i, (cell, name) in enumerate(units):
            desc = f"[{i + 1}/{len(units)}] {cell.env} K={cell.K} X={cell.contexts} {name}"
            hyper = plan["hyper"][cell, name][0]
            seeds = unit_seeds(cell, name)
            finished(i, *run_cell(cell, name, hyper, seeds, args.steps, desc, not args.no_progress))
    plot([rows[j] for j in sorted(rows)], folder, args, plan)
    info["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (folder / "run.json").write_text(json.dumps(info, indent=1) + "\n")
    return folder


def _run_info(args, plan: dict, units: list) -> dict:
    """What ``run.json`` says from the start: the command, the settings and the planned cells."""
    return {
        "command": " ".join([PROG, *getattr(args, "argv", [])]),
        "run": "quick smoke run" if args.quick else "full",
        "setting": plan["setting"],
        "n_steps": args.steps,
        "seeds": f"{args.seed_start}-{args.seed_start + args.seeds - 1}",
        "agents": plan["agents"],
        "cells": [c.key for c in plan["cells"]],
        "reduced_seeds": {f"{a}:{k}": n for (a, k), n in sorted(plan["seed_map"].items())},
        "hyper_source": {f"{c.key} {a}": src for (c, a), (_, src) in plan["hyper"].items()},
        "units": len(units),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "finished": None,
    }


def _caption(rows: list[dict], args, plan: dict) -> str:
    """Caption: sizes, trials, where each agent's hyper-parameters came from, reduced trials."""
    xs = ", ".join(map(str, plan["contexts"]))
    lines = [
        f"|X| = {xs}, n = {args.steps:,}, mean +- s.e. of R_n over {args.seeds} trials "
        f"({args.seed_start}-{args.seed_start + args.seeds - 1})"
    ]
    tuned: dict[str, list[str]] = {}
    one_setting = set()
    for r in rows:
        if r["hyper_source"].startswith("tuned:"):
            tuned.setdefault(LABELS[r["agent"]], []).append(f"{r['env']} K={r['K']}")
        elif r["hyper_source"].startswith("one-setting:"):
            one_setting.add(r["hyper_source"].split(":", 1)[1])
    if tuned:
        where = "; ".join(f"{a} at {', '.join(c)}" for a, c in tuned.items())
        lines.append(f"tuned per cell (reference protocol): {where}")
    if one_setting:
        lines.append(
            f"one setting ({', '.join(sorted(one_setting))})"
            + (" elsewhere" if tuned else " for every tuned agent")
        )
    reduced: dict[str, set] = {}
    for r in rows:
        if r["note"]:
            reduced.setdefault(f"{LABELS[r['agent']]}: {r['n_seeds']} trials", set()).add(r["K"])
    if reduced:
        lines.append(
            "reduced trials: "
            + "; ".join(
                f"{k} (K = {', '.join(map(str, sorted(v)))})" for k, v in sorted(reduced.items())
            )
        )
    if args.quick:
        lines.insert(0, SMOKE)
    return "\n".join(lines)


def plot(rows: list[dict], folder: Path, args, plan: dict) -> None:
    """Panels (rows |X|, columns env): mean final regret +- s.e. against K, log y, one legend,
    the caption under the panels."""
    envs = list(dict.fromkeys(r["env"] for r in rows))
    xs = list(dict.fromkeys(r["n_contexts"] for r in rows))
    fig, axes = plt.subplots(
        len(xs),
        len(envs),
        figsize=(3.3 * len(envs), 2.6 * len(xs) + 0.9),
        squeeze=False,
        sharex=True,
    )
    handles = {}
    for (i, x), (j, env) in ((a, b) for a in enumerate(xs) for b in enumerate(envs)):
        ax = axes[i][j]
        sel = [r for r in rows if r["env"] == env and r["n_contexts"] == x]
        for name in plan["agents"]:
            pts = sorted((r for r in sel if r["agent"] == name), key=lambda r: r["K"])
            if pts:
                handles[name] = ax.errorbar(
                    [r["K"] for r in pts],
                    [r["mean_regret"] for r in pts],
                    yerr=[r["se_regret"] for r in pts],
                    marker="o",
                    ms=4,
                    capsize=3,
                    label=LABELS[name],
                )
        positive = all(r["mean_regret"] - r["se_regret"] > 0 for r in sel)
        ax.set_yscale("log" if positive else "symlog", **({} if positive else {"linthresh": 1.0}))
        ax.set_title(f"({env}) |X| = {x}", fontsize=9)
        ax.set_xticks(plan["arms"])
        ax.grid(alpha=0.3, which="both")
        if i == len(xs) - 1:
            ax.set_xlabel("number of arms K")
        if j == 0:
            ax.set_ylabel(f"regret $R_n$ at n = {args.steps:,}")
    height = fig.get_figheight()  # inches: title, then legend, then the panels
    title = "Final-step regret versus number of arms K"
    fig.suptitle(f"SMOKE RUN: {title}" if args.quick else title, fontsize=10, y=1 - 0.05 / height)
    names = [a for a in plan["agents"] if a in handles]
    fig.legend(
        [handles[a] for a in names],
        [LABELS[a] for a in names],
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - 0.3 / height),
        ncol=len(names),
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / height))
    fig.text(0.5, -0.01, _caption(rows, args, plan), ha="center", va="top", fontsize=7)
    save_figure(fig, folder, "regret_vs_arms")


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.ray is not None:
        from paper_figures import _ray

        _ray.check_address(args.ray)
    plan = check_args(args)
    t0 = time.perf_counter()
    if args.ray is not None:
        ray = _ray.connect(args.ray)
        try:
            folder = run(args, plan, on_ray=True)
        finally:
            ray.shutdown()
    else:
        folder = run(args, plan)
    kind = "quick smoke run (not the paper's protocol): " if args.quick else ""
    print(f"{kind}wrote {folder} in {time.perf_counter() - t0:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``rpg_core.cli`` convention: 2 on usage errors, 1 on other failures)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
