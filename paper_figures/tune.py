"""Per-cell hyper-parameter tuning by the reference protocol (DESIGN.md section 5).

``python -m paper_figures.tune [--setting small|large] [--cells E1:5,E4:5] [--agents ...]`` runs,
for every (env, K, |X|) cell and every tunable agent (NPG-NIW, SPG-NIW, C-UCB tuned), the whole
grid on the tuning trials 900-929 at n = 30,000 decisions, keeps the point with the lowest median
final regret ``R_n`` over the trials (ties: the first in grid order) and stores the full grid of
scores (median, mean and standard error of ``R_n`` per point) in
``paper_figures/tuned_<setting>.json`` with the exact command. ``regret_vs_arms`` reads that
file (a cell's tuned point where there is one, ``hyper_small.json`` elsewhere).

One (cell, agent) unit is ONE simulator call: the grid points x trials run as one vmapped batch,
the hyper-parameters being traced per-lane arrays (``simulate(..., per_seed_hyper=True)``), so
the whole grid compiles once. Lane ``p * S + s`` runs grid point ``p`` on trial ``seeds[s]``;
every grid point sees the same trials (common environments). The results file is rewritten
atomically after every unit, so a killed run restarts at the first unfinished unit; a file
written under another protocol (steps, trials, grids) is refused rather than mixed. Several
processes may tune into one results file (other cells, say): every write happens under the
file's lock (``.<name>.lock`` beside it, :class:`rpg_core.filelock.FileLock`; a second writer
waits) and merges this process's unit or slice into the file as it is then, never rewriting it
from a stale copy; a unit another process has finished meanwhile is kept as that process stored
it, and its scores are the same (a lane depends only on its trial and point).
``--points-per-call P`` scores a unit in slices of P grid points (same scores: a lane depends
only on its trial and point) and stores each slice under ``"partial"`` as it finishes, so a unit
longer than one sitting (a PG unit of the small setting is 1,500 runs of 30,000 decisions, 1-3 h
on 2 CPU cores) can be finished across several.

``--ray ADDRESS|local`` runs every unfinished slice (cell x agent x ``--points-per-call`` points;
0: the whole grid) as a Ray task (``paper_figures/_ray.py``): ``local`` starts Ray on this
machine, ``HOST:PORT`` joins a running cluster, and an address that accepts no connection exits 2
before anything compiles. The driver stores the slices as they finish, in the same file and the
same way (a unit's stored slices stay a prefix of its grid; a slice that finishes before an
earlier one is held in memory until that one is stored), so the scores equal the in-process ones
and a killed driver resumes as the in-process path does; one tqdm bar counts the slices done.

Grids (``--grid NAME=V1,V2`` overrides one, e.g. for a smoke run): see
``paper_figures/_protocol.py``. Source: the paper's bandit validation; protocol facts from
DESIGN.md sections 3 and 5.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from paper_figures._protocol import (
    EVAL_SEEDS,
    N_STEPS,
    PAPER_TUNABLE,
    SETTINGS,
    TUNABLE,
    TUNE_SEEDS,
    Cell,
    build_agent,
    check_trials,
    parse_cells,
)
from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_core.filelock import FileLock, lock_path_for

PROG = "python -m paper_figures.tune"
_RAY_HELP = (
    "run every slice (cell x agent x --points-per-call grid points) as a Ray task: 'local' starts "
    "Ray on this machine, HOST:PORT joins a cluster; results are stored as slices finish"
)
T = TypeVar("T")
CRITERION = "lowest median over the tuning trials of the final regret R_n (ties: first point)"


def _parser() -> ArgumentParser:
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="small")
    ap.add_argument("--cells", default=None, help="ENV:K[:X],... (default: every cell)")
    ap.add_argument(
        "--agents",
        default=",".join(PAPER_TUNABLE),
        help=f"comma-separated tunable agents among {','.join(TUNABLE)} "
        f"(default {','.join(PAPER_TUNABLE)})",
    )
    ap.add_argument("--steps", type=int, default=N_STEPS, help="decisions per trial")
    ap.add_argument("--seed-start", type=int, default=TUNE_SEEDS.start, help="first trial")
    ap.add_argument("--seeds", type=int, default=len(TUNE_SEEDS), help="number of trials")
    ap.add_argument(
        "--grid", action="append", default=[], metavar="NAME=V1,V2", help="override one grid"
    )
    ap.add_argument("--out", default=None, help="results JSON (default paper_figures/tuned_*.json)")
    ap.add_argument(
        "--points-per-call",
        type=int,
        default=0,
        help="grid points per simulator call (0: the whole grid in one call); each call's scores "
        "are stored at once, so a killed unit restarts at its first unscored point",
    )
    ap.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar; the compiled code then goes into the persistent compilation cache",
    )
    ap.add_argument("--ray", default=None, metavar="ADDRESS|local", help=_RAY_HELP)
    return ap


def check_args(args) -> dict:
    """Validate the parsed flags (no JAX work); returns the plan (cells, agents, grids, seeds).

    Raises:
      UsageError: naming the flag and the value (bad cell, agent, grid value, seeds overlapping
        the evaluation trials 0-99 or past the largest seed ``2**32 - 1``, steps or seeds < 1,
        --seed-start < 0, an --out that is a folder).
    """
    setting = SETTINGS[args.setting]
    cells = (
        parse_cells(args.cells, setting)
        if args.cells is not None
        else [
            Cell(e, k, x)
            for e in ("E1", "E2", "E3", "E4")
            for k in setting.arms
            for x in setting.contexts
        ]
    )
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    bad = [a for a in agents if a not in TUNABLE]
    if bad or not agents or len(set(agents)) != len(agents):
        raise UsageError(f"--agents {args.agents!r}: name distinct agents among {TUNABLE}")
    if args.steps < 1:
        raise UsageError(f"--steps must be >= 1, got {args.steps}")
    if args.points_per_call < 0:
        raise UsageError(f"--points-per-call must be >= 0, got {args.points_per_call}")
    seeds = list(check_trials(args.seed_start, args.seeds))
    if seeds[0] < EVAL_SEEDS.stop and seeds[-1] >= EVAL_SEEDS.start:
        raise UsageError(
            f"--seed-start/--seeds: trials {seeds[0]}..{seeds[-1]} overlap the "
            f"evaluation trials {EVAL_SEEDS.start}..{EVAL_SEEDS.stop - 1}"
        )
    grids = {a: {k: list(v) for k, v in setting.grids[a].items()} for a in agents}
    for item in args.grid:
        name, _, text = item.partition("=")
        try:
            values = [float(v) for v in text.split(",")]
        except ValueError:
            raise UsageError(f"--grid expects NAME=V1,V2,..., got {item!r}") from None
        hit = [g for g in grids.values() if name in g]
        if not hit:
            raise UsageError(
                f"--grid {item!r}: no agent of --agents has a hyper-parameter {name!r}"
            )
        for g in hit:
            g[name] = values
    for a, cell in itertools.product(agents, cells):  # every value, before anything runs
        for point in itertools.product(*grids[a].values()):
            try:
                build_agent(a, cell, dict(zip(grids[a], point, strict=True)))
            except ValueError as err:
                raise UsageError(f"--grid/--cells: {err}") from None
    out = Path(args.out) if args.out is not None else setting.tuned_file
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; give a JSON file path")
    protocol = {
        "setting": setting.name,
        "n_steps": args.steps,
        "seeds": [seeds[0], seeds[-1]],
        "criterion": CRITERION,
    }
    return {
        "cells": cells,
        "agents": agents,
        "grids": grids,
        "seeds": seeds,
        "out": out,
        "protocol": protocol,
        "points_per_call": args.points_per_call,
    }


def _load_results(plan: dict) -> dict:
    """The stored results of ``plan['out']`` (or a new record); refuses another protocol."""
    out, protocol = plan["out"], plan["protocol"]
    if not out.exists():
        return {"protocol": protocol, "grids": {}, "cells": {}}
    try:
        data = json.loads(out.read_text())
        stored = data["protocol"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise UsageError(f"--out {out}: not a tuning results file ({err})") from None
    diff = [k for k in protocol if stored.get(k) != protocol[k]]
    diff += [
        f"grid of {a}"
        for a in plan["agents"]
        if a in data.get("grids", {}) and data["grids"][a] != plan["grids"][a]
    ]
    if diff:
        raise UsageError(
            f"--out {out} holds results of another protocol (differs in "
            f"{', '.join(diff)}); choose another --out"
        )
    return data


def _write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def _update_results(plan: dict, results: dict, change: Callable[[dict], T]) -> T:
    """Change the results file under its lock: read it as it is now (another process may have
    stored units since; another protocol is refused), apply ``change`` to that copy, write it
    back atomically; ``results`` then holds the file's contents (updated in place). Returns what
    ``change`` returns.

    Raises:
        UsageError: the file now holds results of another protocol, or is not a results file.
    """
    out = plan["out"]
    with FileLock(lock_path_for(out), f"--out {out}"):
        fresh = _load_results(plan)
        value = change(fresh)
        _write_atomic(out, fresh)
    results.clear()
    results.update(fresh)
    return value


def _drop_empty_partial(results: dict, key: str) -> None:
    """Remove ``results['partial'][key]`` when it holds no unit, and ``partial`` when empty."""
    partial = results.get("partial", {})
    if key in partial and not partial[key]:
        del partial[key]
    if "partial" in results and not results["partial"]:
        del results["partial"]


def grid_points(grid: dict) -> list[dict]:
    """The points of a grid ``{name: values}`` in grid order (the product, last name fastest)."""
    return [dict(zip(grid, v, strict=True)) for v in itertools.product(*grid.values())]


def select_best(entries: Sequence[dict]) -> tuple[int, float]:
    """Index and value of the lowest ``median_regret`` (ties: the first in grid order)."""
    med = [e["median_regret"] for e in entries]
    best = min(range(len(med)), key=lambda i: (med[i], i))
    return best, float(med[best])


def tune_unit(
    agent_name: str,
    cell: Cell,
    grid: dict,
    seeds: list[int],
    n_steps: int,
    progress: bool = True,
    start: int = 0,
    stop: int | None = None,
) -> dict:
    """Run one agent's grid points ``start:stop`` (default: the whole grid) on one cell as one
    vmapped batch and score every point.

    A lane's trajectory depends only on its trial and point (threefry seed keys, per-lane
    hyper-parameters), so scoring the grid in slices gives the same scores as one call.

    Args:
      grid: ``{hyper-parameter name: list of values}``; the points are their product
        (:func:`grid_points`).
      seeds: the tuning trials (each point runs on all of them).
      start, stop: the slice of :func:`grid_points` to run.

    Returns:
      ``{"best": point, "best_median_regret", "grid": [{"hyper", "median_regret",
      "mean_regret", "se_regret"}], "lanes", "wall_s"}`` (regret = final ``R_n``; best over
      the slice).
    """
    import jax
    import numpy as np

    from paper_figures._progress import progress_bar, tick_every, with_progress
    from rpg_jax.envs import make_trial_params
    from rpg_jax.simulate import simulate, standard_error

    points = grid_points(grid)[start:stop]
    if not points:
        raise ValueError(f"no grid point in the slice {start}:{stop}")
    built = [build_agent(agent_name, cell, p) for p in points]
    n_s = len(seeds)
    hyper = jax.tree.map(
        lambda *leaves: np.repeat(np.stack([np.asarray(v) for v in leaves]), n_s),
        *[b[1] for b in built],
    )
    params = make_trial_params(cell.env, cell.K, cell.contexts, seeds)
    params = jax.tree.map(lambda v: np.concatenate([np.asarray(v)] * len(points)), params)
    agent = with_progress(built[0][0], tick_every(n_steps)) if progress else built[0][0]
    lanes = len(points) * n_s
    t0 = time.perf_counter()
    with progress_bar(n_steps, f"{cell.key} {agent_name} ({lanes} runs)", disable=not progress):
        res = simulate(agent, hyper, params, seeds * len(points), n_steps, per_seed_hyper=True)
    wall = time.perf_counter() - t0
    final = res.regret.reshape(len(points), n_s)
    med = np.median(final, axis=1)
    entries = [
        {
            "hyper": b[2],
            "median_regret": float(m),
            "mean_regret": float(f.mean()),
            "se_regret": standard_error(f),
        }
        for b, m, f in zip(built, med, final, strict=True)
    ]
    best, best_med = select_best(entries)
    return {
        "best": built[best][2],
        "best_median_regret": best_med,
        "grid": entries,
        "lanes": lanes,
        "wall_s": round(wall, 1),
    }


def _tune_in_slices(name: str, cell: Cell, plan: dict, results: dict, progress: bool) -> dict:
    """One unit, ``plan['points_per_call']`` points per call (0: all); every finished slice is
    stored in ``results['partial']`` at once, and a restart continues after the last one (also
    one another process stored meanwhile)."""
    grid = plan["grids"][name]
    n_points = len(grid_points(grid))
    per_call = plan["points_per_call"] or n_points
    partial = results.get("partial", {}).get(cell.key, {})
    done = partial.get(name, {"grid": [], "lanes": 0, "wall_s": 0.0})
    while len(done["grid"]) < n_points:
        start = len(done["grid"])
        part = tune_unit(
            name,
            cell,
            grid,
            plan["seeds"],
            plan["protocol"]["n_steps"],
            progress=progress,
            start=start,
            stop=min(start + per_call, n_points),
        )
        done = _store_slice(name, cell, plan, results, part, start=start)
    return _close_unit(done)


def _say_err(text: str) -> None:
    print(text, file=sys.stderr)


def _store_slice(
    name: str,
    cell: Cell,
    plan: dict,
    results: dict,
    part: dict,
    say: Callable[[str], None] = _say_err,
    *,
    start: int | None = None,
) -> dict:
    """Merge the slice ``part`` (a :func:`tune_unit` result over the grid points from ``start``;
    None: the first unscored point) into the unit's stored slices under the file's lock
    (:func:`_update_results`) and return the stored slices ``{"grid", "lanes", "wall_s"}``;
    ``say`` reports a unit that is not finished yet.

    Points another process stored meanwhile are kept as stored (the same scores); a unit it has
    finished is returned whole, from ``results['cells']``.

    Raises:
        RuntimeError: the slice starts past the stored points (the file lost some).
    """
    grid = plan["grids"][name]
    n_points = len(grid_points(grid))

    def merge(fresh: dict) -> dict:
        finished = fresh["cells"].get(cell.key, {}).get(name)
        if finished is not None:
            return {k: finished[k] for k in ("grid", "lanes", "wall_s")}
        partial = fresh.setdefault("partial", {}).setdefault(cell.key, {})
        done = partial.get(name, {"grid": [], "lanes": 0, "wall_s": 0.0})
        have = len(done["grid"])
        first = have if start is None else start
        if first > have:
            raise RuntimeError(
                f"{plan['out']}: {cell.key} {name} holds {have} scored grid points, but the "
                f"slice to store starts at point {first}"
            )
        new = part["grid"][have - first :]
        if new:
            whole = len(new) == len(part["grid"])
            lanes = part["lanes"] if whole else part["lanes"] // len(part["grid"]) * len(new)
            wall = part["wall_s"] if whole else part["wall_s"] * len(new) / len(part["grid"])
            done = {
                "grid": done["grid"] + new,
                "lanes": done["lanes"] + lanes,
                "wall_s": round(done["wall_s"] + wall, 1),
            }
            partial[name] = done
        _drop_empty_partial(fresh, cell.key)
        fresh["grids"][name] = grid
        return done

    done = _update_results(plan, results, merge)
    if len(done["grid"]) < n_points:
        say(f"{cell.key} {name}: {len(done['grid'])}/{n_points} grid points scored")
    return done


def _close_unit(done: dict) -> dict:
    """A finished unit's record from its stored slices ``done``: the best point and the
    slices merged."""
    best, best_med = select_best(done["grid"])
    return {"best": done["grid"][best]["hyper"], "best_median_regret": best_med, **done}


def _record_unit(
    name: str,
    cell: Cell,
    unit: dict,
    plan: dict,
    results: dict,
    command: str,
    say: Callable[[str], None] = print,
) -> None:
    """Store a finished unit under ``results['cells']`` with the command and the time, and drop
    its slices from ``results['partial']``, under the file's lock (:func:`_update_results`);
    ``say`` the best point. A unit another process stored meanwhile is kept as it stored it."""
    unit["command"] = command
    unit["finished_utc"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")

    def merge(fresh: dict) -> dict:
        units = fresh["cells"].setdefault(cell.key, {})
        units.setdefault(name, unit)
        fresh.get("partial", {}).get(cell.key, {}).pop(name, None)
        _drop_empty_partial(fresh, cell.key)
        fresh["grids"][name] = plan["grids"][name]
        return units[name]

    stored = _update_results(plan, results, merge)
    by = "" if stored is unit else " (stored by another process)"
    say(
        f"{cell.key} {name}: best {stored['best']} median R_n "
        f"{stored['best_median_regret']:.2f} ({stored['wall_s']} s){by}"
    )


def _unfinished_units(
    plan: dict, results: dict, reread: bool = False
) -> Iterator[tuple[Cell, str]]:
    """The plan's (cell, agent) units not stored in ``results['cells']``, in plan order; the
    stored ones are named on stderr with their best point. ``reread``: read the file again
    before each unit (``results`` is updated in place), so that a unit another process has
    stored or begun meanwhile is skipped or continued."""
    for cell in plan["cells"]:
        for name in plan["agents"]:
            if reread and plan["out"].exists():
                fresh = _load_results(plan)
                results.clear()
                results.update(fresh)
            stored = results["cells"].get(cell.key, {})
            if name in stored:
                print(f"{cell.key} {name}: stored, best {stored[name]['best']}", file=sys.stderr)
                continue
            yield cell, name


def _tune_on_ray(plan: dict, results: dict, command: str, progress: bool) -> None:
    """Every unfinished slice of every unit as one Ray task (``_ray.run_tasks``), the results
    stored as the tasks finish.

    A unit's stored slices stay a prefix of its grid, as in-process: a slice that finishes before
    an earlier one waits in memory until the earlier one is stored, so a restart after a kill
    continues after the last stored slice (a waiting slice is computed again).
    """
    from tqdm import tqdm

    from paper_figures import _ray

    def say_out(text: str) -> None:
        tqdm.write(text, file=sys.stdout)

    def say_err(text: str) -> None:
        tqdm.write(text, file=sys.stderr)

    jobs, owner, done, waiting = [], [], {}, {}
    for cell, name in _unfinished_units(plan, results):
        grid = plan["grids"][name]
        n_points = len(grid_points(grid))
        per_call = plan["points_per_call"] or n_points
        unit = results.get("partial", {}).get(cell.key, {}).get(name)
        done[cell.key, name] = unit or {"grid": [], "lanes": 0, "wall_s": 0.0}
        waiting[cell.key, name] = {}
        first = len(done[cell.key, name]["grid"])
        if first >= n_points:  # every slice stored before a kill: only the record is missing
            _record_unit(name, cell, _close_unit(done[cell.key, name]), plan, results, command)
            continue
        for start in range(first, n_points, per_call):
            jobs.append(
                {
                    "agent_name": name,
                    "cell": cell,
                    "grid": grid,
                    "seeds": plan["seeds"],
                    "n_steps": plan["protocol"]["n_steps"],
                    "progress": False,
                    "start": start,
                    "stop": min(start + per_call, n_points),
                }
            )
            owner.append((cell, name))
    desc = f"tune on Ray ({len(jobs)} slices)"
    for i, part in _ray.run_tasks(
        "paper_figures.tune", "tune_unit", jobs, desc=desc, progress=progress
    ):
        cell, name = owner[i]
        key, n_points = (cell.key, name), len(grid_points(plan["grids"][name]))
        if len(done[key]["grid"]) >= n_points:
            continue  # recorded already (its points were stored by another process too)
        waiting[key][jobs[i]["start"]] = part
        # the next slices in grid order; one that starts inside the stored points (another
        # process stored some meanwhile) adds only its points past them
        while ready := [s for s in waiting[key] if s <= len(done[key]["grid"])]:
            start = min(ready)
            part = waiting[key].pop(start)
            done[key] = _store_slice(name, cell, plan, results, part, say_err, start=start)
            if len(done[key]["grid"]) == n_points:
                _record_unit(name, cell, _close_unit(done[key]), plan, results, command, say_out)
                waiting[key].clear()
                break


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if args.ray is not None:
        from paper_figures import _ray

        _ray.check_address(args.ray)
    plan = check_args(args)
    results = _load_results(plan)
    command = f"{PROG} " + shlex.join(list(argv) if argv is not None else sys.argv[1:])
    if args.ray is not None:
        ray = _ray.connect(args.ray)
        try:
            _tune_on_ray(plan, results, command, progress=not args.no_progress)
        finally:
            ray.shutdown()
        print(f"results in {plan['out']}")
        return 0

    from rpg_jax.config import setup_jax

    setup_jax()
    for cell, name in _unfinished_units(plan, results, reread=True):
        unit = _tune_in_slices(name, cell, plan, results, progress=not args.no_progress)
        _record_unit(name, cell, unit, plan, results, command)
    print(f"results in {plan['out']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``rpg_core.cli`` convention: 2 on usage errors, 1 on other failures)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
