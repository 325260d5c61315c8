"""Where pricing time pays: RPG's % improvement over vanilla against each task's prior regime.

``python -m paper_figures.regime_map protocol|run|report`` (issue 47):

* ``protocol`` writes the protocol file (default ``paper_figures/regime_map_protocol.json``) from
  the measured priors (``python -m rpg_llm.env.tasks prior all --out
  paper_figures/regime_priors``; :mod:`rpg_llm.env.tasks.regime`), once: it refuses to
  overwrite, because the protocol is fixed before the first run and unchanged by the results.
  Per task it holds the prior (CPU span, Spearman correlation of CPU time and score) and the
  execution budget per chain, chosen from the prior by :func:`budget_from_prior`; then the arms,
  run seeds, batch, step cap, raw reward (the leaderboard percentile) and the prediction.
* ``run`` makes the map's runs in protocol order, one ``python -m paper_figures.llm_table``
  table per task in ``<out>/<task>`` (each run resumable; ``--tasks`` picks some; stop it with
  SIGTERM or Ctrl-C and run the same command again to continue). Each llm_table invocation
  appends its slice to ``<out>/<task>/llm_table_slices.csv``.
* ``report`` reads every task whose four runs are finished and writes, to ``--dest`` (default
  ``<out>``), ``regime_map.csv``, ``regime_map.md`` and ``regime_map.png`` / ``.pdf``: per task
  its prior correlation, each arm's table value (mean +- s.e. over run seeds), RPG's %
  improvement, and each arm's achieved reward rate (sum of raw rewards over the sum of measured
  seconds of its chains' samples, each at least the 0.1 s time floor, invalid samples earning 0:
  what the estimator's slots are fed), since that is what RPG maximises; then whether the
  prediction held. A task counts once both arms have every run seed's run.

Source: issue 47; the paper's section 6 (MLE-Bench table and the spooky-author example).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from paper_figures.llm_table.settings import FULL
from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_llm.env.tasks.regime import spearman

__all__ = [
    "PROTOCOL_PATH",
    "PRIORS_DIR",
    "BUDGET_STEPS",
    "MIN_BUDGET_S",
    "PREDICTION",
    "MapRow",
    "budget_from_prior",
    "write_protocol",
    "read_protocol",
    "reward_rate",
    "map_rows",
    "prediction_held",
    "main",
]

PROG = "python -m paper_figures.regime_map"
HERE = Path(__file__).resolve().parent
PROTOCOL_PATH = HERE / "regime_map_protocol.json"
"""The committed protocol file."""
PRIORS_DIR = HERE / "regime_priors"
"""The committed priors: ``<task>.csv`` per task and ``priors.json``."""
TASKS = ("attrition-logloss", "flights-2013-auc", "credit-default-auc", *FULL.tasks)
"""The map's tasks, in the order ``run`` makes them: the overkill, timeout-binding and plateau
tasks first (the regimes the full table lacks), then the full table's six."""
BUDGET_STEPS = 5
"""The budget per chain is this many times the median CPU seconds of the task's seed scripts."""
MIN_BUDGET_S = 10.0
"""The smallest budget per chain, CPU seconds."""
STEPS_CAP = 10
PREDICTION = (
    "RPG's % improvement over vanilla falls as the task's prior correlation (Spearman, CPU "
    "seconds vs score, every prior script) rises: the Spearman correlation across tasks of "
    "(prior correlation, % improvement) is negative; and RPG is ahead (% improvement > 0) on "
    "every task whose prior correlation is <= 0."
)
RUN_FLAGS = {
    "--seeds": "0,1",
    "--arms": "rpg,vanilla",
    "--batch-size": "4",
    "--steps": str(STEPS_CAP),
    "--raw-reward": "percentile",
    "--time": "cpu",
    "--probe": "4",
}
"""The llm_table flags every task's table gets (its own ``--exec-budget`` besides)."""
RAW_REWARD_WHY = (
    "The leaderboard percentile is the raw reward of every task: it puts every metric on one "
    "scale in [0, 1] whose zero point is the task's own board, not the metric's (a constant "
    "prediction earns AUC 0.5, so with the raw AUC the fastest near-chance script had the "
    "highest rate; with the percentile RPG tied vanilla on those tasks, issue 47)."
)


def budget_from_prior(seed_cpu_s: Sequence[float] | np.ndarray) -> float:
    """The execution budget per chain for a task: ``max(MIN_BUDGET_S, BUDGET_STEPS * median)`` of
    its valid seed scripts' CPU seconds, rounded up to a whole second.

    Chains start from the seeds and a chain's step runs one script, so at about the seeds'
    cost a chain spends the budget in :data:`BUDGET_STEPS` steps, half the step cap: the budget,
    not the cap, ends the slower arm's chains.

    Raises:
        ValueError: no finite, positive CPU time.
    """
    cpu = np.asarray(seed_cpu_s, float)
    cpu = cpu[np.isfinite(cpu) & (cpu > 0)]
    if cpu.size == 0:
        raise ValueError("need the CPU seconds of at least one valid seed script")
    return float(max(MIN_BUDGET_S, math.ceil(BUDGET_STEPS * float(np.median(cpu)))))


def _seed_names(task: str) -> set[str]:
    from rpg_llm.env.tasks.offline import baseline_solutions  # the torch-free env, on demand

    return {name for name, _ in baseline_solutions(task)}


def write_protocol(priors_dir: Path, path: Path, tasks: Sequence[str] = TASKS) -> dict:
    """Write the protocol file from the measured priors (module docstring).

    Raises:
        ValueError: ``path`` exists (the protocol is fixed before the runs), or a task's prior
            is not measured in ``priors_dir``.
    """
    if path.exists():
        raise ValueError(f"{path} exists: the protocol is written once, before the first run")
    summary = json.loads((priors_dir / "priors.json").read_text())
    entries = []
    for task in tasks:
        rows_path = priors_dir / f"{task}.csv"
        if task not in summary or not rows_path.is_file():
            raise ValueError(f"no prior for {task} in {priors_dir}")
        rows = pd.read_csv(rows_path)
        seeds = rows[rows["baseline"].isin(sorted(_seed_names(task))) & (rows["status"] == "ok")]
        seed_cpu = np.asarray(seeds["cpu_s"], float)
        budget = budget_from_prior(seed_cpu)
        entries.append(
            {
                "task": task,
                "prior": summary[task],
                "seed_cpu_median_s": round(float(np.median(seed_cpu)), 3),
                "exec_budget_s": budget,
            }
        )
    protocol = {
        "issue": 47,
        "written_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "tasks": entries,
        "run_flags": RUN_FLAGS,
        "budget_rule": (
            f"exec_budget_s = max({MIN_BUDGET_S:g}, ceil({BUDGET_STEPS} x median CPU s of the "
            f"task's valid seed scripts)), against a step cap of {STEPS_CAP}"
        ),
        "raw_reward_why": RAW_REWARD_WHY,
        "prediction": PREDICTION,
        "value": (
            "each run's table value at B = its task's exec_budget_s (mean over its 4 chains of "
            "the best raw reward within B); % improvement = 100 (rpg - vanilla) / |vanilla| of "
            "the arm means over run seeds 0 and 1"
        ),
    }
    path.write_text(json.dumps(protocol, indent=1) + "\n")
    return protocol


def read_protocol(path: Path = PROTOCOL_PATH) -> dict:
    """The protocol file's content.

    Raises:
        ValueError: the file is missing or not a protocol.
    """
    if not path.is_file():
        raise ValueError(f"no protocol file {path}: write it with `{PROG} protocol`")
    protocol = json.loads(path.read_text())
    if not isinstance(protocol, dict) or "tasks" not in protocol:
        raise ValueError(f"{path} is not a regime-map protocol")
    return protocol


TIME_FLOOR_S = 0.1
"""The time floor of a sample, seconds (DESIGN.md section 7): what the estimator is fed."""


def reward_rate(samples: pd.DataFrame) -> float:
    """Reward per measured second of a run's chains: the sum of raw rewards of its valid samples
    (invalid ones earn 0) over the sum of ``max(time_s, TIME_FLOOR_S)`` of its samples, the
    seeds (step 0) and the machine's failures (status ``infra``) left out. ``time_s`` is the
    measured time (a timeout's charge enters only the trained reward), so this is the rate the
    estimator's slots see.

    Args:
        samples: a run's ``samples.csv`` (columns ``step, status, raw_reward, time_s``).

    Returns:
        Reward per second; NaN when no time was measured.
    """
    status = samples["status"].to_numpy()
    chains = (samples["step"].to_numpy() >= 1) & (status != "infra")
    ok = chains & (status == "ok")
    times = np.maximum(samples["time_s"].to_numpy(float), TIME_FLOOR_S)
    seconds = float(np.sum(times[chains]))
    if not seconds > 0:
        return math.nan
    return float(np.sum(samples["raw_reward"].to_numpy(float)[ok])) / seconds


@dataclass(frozen=True)
class MapRow:
    """One task of the map.

    Attributes:
        task: competition id; prior: its prior Spearman correlation; budget_s: its B.
        rpg, vanilla: (mean, s.e.) of the table value over run seeds.
        pct_improvement: RPG's % improvement (positive: RPG better).
        rpg_rate, vanilla_rate: mean achieved reward rate over run seeds (reward per second).
    """

    task: str
    prior: float
    budget_s: float
    rpg: tuple[float, float]
    vanilla: tuple[float, float]
    pct_improvement: float
    rpg_rate: float
    vanilla_rate: float


def map_rows(out: Path, protocol: Mapping) -> list[MapRow]:
    """The map's rows for every protocol task whose table is written in ``<out>/<task>``."""
    rows = []
    for entry in protocol["tasks"]:
        task = entry["task"]
        table = out / task / "llm_table.csv"
        runs_csv = out / task / "llm_table_runs.csv"
        if not (table.is_file() and runs_csv.is_file()):
            continue
        row = pd.read_csv(table).to_dict("records")[0]
        seeds = len(str(protocol.get("run_flags", RUN_FLAGS)["--seeds"]).split(","))
        if not (row.get("rpg_n") == row.get("vanilla_n") == seeds):
            continue  # a task counts once both arms have every run seed
        runs = pd.read_csv(runs_csv)
        rates: dict[str, list[float]] = {"rpg": [], "vanilla": []}
        for run in runs.to_dict("records"):
            samples = Path(run["run_dir"]) / "samples.csv"
            if run["method"] in rates and samples.is_file():
                rates[run["method"]].append(reward_rate(pd.read_csv(samples)))
        rows.append(
            MapRow(
                task=task,
                prior=float(entry["prior"]["spearman"]),
                budget_s=float(entry["exec_budget_s"]),
                rpg=(float(row["rpg_mean"]), float(row["rpg_se"])),
                vanilla=(float(row["vanilla_mean"]), float(row["vanilla_se"])),
                pct_improvement=float(row["pct_improvement"]),
                rpg_rate=float(np.mean(rates["rpg"])) if rates["rpg"] else math.nan,
                vanilla_rate=float(np.mean(rates["vanilla"])) if rates["vanilla"] else math.nan,
            )
        )
    return rows


def prediction_held(rows: Sequence[MapRow]) -> tuple[float, bool | None, str]:
    """Check :data:`PREDICTION` on the finished rows.

    Returns:
        ``(spearman of (prior, % improvement) across tasks, held, text)``; ``held`` is None
        with fewer than 3 tasks (no verdict yet).
    """
    rows = [r for r in rows if math.isfinite(r.prior) and math.isfinite(r.pct_improvement)]
    if len(rows) < 3:
        return math.nan, None, f"{len(rows)} task(s) finished: no verdict before 3"
    rho = spearman([r.prior for r in rows], [r.pct_improvement for r in rows])
    ahead = [r for r in rows if r.prior <= 0]
    all_ahead = all(r.pct_improvement > 0 for r in ahead)
    held = rho < 0 and all_ahead
    text = (
        f"Spearman(prior, % improvement) = {rho:+.2f} over {len(rows)} tasks "
        f"({'negative' if rho < 0 else 'not negative'}); RPG ahead on "
        f"{sum(r.pct_improvement > 0 for r in ahead)} of {len(ahead)} tasks with prior <= 0. "
        f"The prediction {'held' if held else 'did not hold'}."
    )
    return rho, held, text


def _markdown(rows: Sequence[MapRow], verdict: str) -> str:
    lines = [
        "| task | prior corr. | B (CPU s) | rpg | vanilla | % improv. | rpg rate | vanilla rate |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in sorted(rows, key=lambda r: r.prior):
        lines.append(
            f"| {r.task} | {r.prior:+.2f} | {r.budget_s:g} | {r.rpg[0]:.3f} +- {r.rpg[1]:.3f} | "
            f"{r.vanilla[0]:.3f} +- {r.vanilla[1]:.3f} | {r.pct_improvement:+.1f} | "
            f"{r.rpg_rate:.4f} | {r.vanilla_rate:.4f} |"
        )
    return "\n".join(lines) + "\n\n" + verdict + "\n"


def _figure(rows: Sequence[MapRow], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from paper_figures._common import save_figure

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for r in rows:
        se = math.hypot(r.rpg[1], r.vanilla[1]) / abs(r.vanilla[0]) * 100 if r.vanilla[0] else 0
        ax.errorbar(r.prior, r.pct_improvement, yerr=se, fmt="o", color="C0", capsize=3)
        ax.annotate(
            r.task,
            (r.prior, r.pct_improvement),
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    ax.axhline(0, color="0.5", lw=0.8)
    ax.axvline(0, color="0.5", lw=0.8, ls=":")
    ax.set_xlabel("prior Spearman correlation of CPU time and score")
    ax.set_ylabel("RPG % improvement over vanilla")
    ax.set_title("Where pricing time pays (percentile reward, 2 run seeds)")
    fig.tight_layout()
    save_figure(fig, dest, "regime_map")
    plt.close(fig)


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="RPG's gain against each task's prior regime.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    p = sub.add_parser("protocol", help="write the protocol file from the priors (once)")
    p.add_argument("--priors", type=Path, default=PRIORS_DIR)
    p.add_argument("--protocol", type=Path, default=PROTOCOL_PATH)
    r = sub.add_parser("run", help="make the map's runs (resumable)")
    r.add_argument("--out", type=Path, default=Path("out/regime_map"))
    r.add_argument("--protocol", type=Path, default=PROTOCOL_PATH)
    r.add_argument("--tasks", default=None, help="comma-separated protocol tasks (default all)")
    r.add_argument("--jobs", type=int, default=2, help="runs at once")
    r.add_argument("--data-root", type=Path, default=None)
    s = sub.add_parser("report", help="write the map from the finished tasks")
    s.add_argument("--out", type=Path, default=Path("out/regime_map"))
    s.add_argument("--protocol", type=Path, default=PROTOCOL_PATH)
    s.add_argument("--dest", type=Path, default=None)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "protocol":
        try:
            protocol = write_protocol(args.priors, args.protocol)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        print(json.dumps(protocol, indent=1))
        return 0
    try:
        protocol = read_protocol(args.protocol)
    except ValueError as exc:
        raise UsageError(f"--protocol: {exc}") from exc
    known = [e["task"] for e in protocol["tasks"]]
    if args.command == "report":
        dest = args.dest or args.out
        rows = map_rows(args.out, protocol)
        if not rows:
            raise UsageError(f"--out {args.out}: no finished task table yet")
        _, _, verdict = prediction_held(rows)
        dest.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([r.__dict__ for r in rows]).to_csv(dest / "regime_map.csv", index=False)
        (dest / "regime_map.md").write_text(_markdown(rows, verdict))
        _figure(rows, dest)
        print(_markdown(rows, verdict), end="")
        return 0
    tasks = known if args.tasks is None else args.tasks.split(",")
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise UsageError(f"--tasks {args.tasks}: not in the protocol: {', '.join(unknown)}")
    if not args.jobs >= 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    budgets = {e["task"]: e["exec_budget_s"] for e in protocol["tasks"]}
    for task in tasks:
        cmd = [sys.executable, "-m", "paper_figures.llm_table", "--tasks", task]
        for flag, value in protocol["run_flags"].items():
            cmd += [flag, value]
        cmd += ["--exec-budget", f"{budgets[task]:g}", "--jobs", str(args.jobs)]
        cmd += ["--out", str((args.out / task).resolve())]  # run_dir paths absolute
        if args.data_root is not None:
            cmd += ["--data-root", str(args.data_root)]
        print(" ".join(cmd), flush=True)
        rc = subprocess.call(cmd)
        if rc != 0:
            print(f"{task}: llm_table exited {rc}", flush=True)
            return rc
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI under the project's exit-status convention; returns the exit status."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
