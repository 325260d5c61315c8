"""Table values at equal work when two runs' CPU seconds were measured on machines of different
speed: the same script costs fewer CPU-s on a faster machine, so a run there fits more answers
into the table's budget ``B``.

Every run of a task seeds its buffer with the same baseline scripts at step 0, so those scripts
time the machine. For each run ``<task>/<arm>-seed<k>`` given, the reference is the run
``<task>/<reference>-seed<k>`` beside it; the speed ratio is the geometric mean, over the step-0
scripts both executed successfully with identical code, of this run's seconds over the
reference's. The run's value is then read at ``B`` and at ``B * ratio`` (the budget that buys on
this run's machine the work ``B`` bought on the reference's), and the task's mean over seeds at
both is printed beside the reference arm's at ``B``. Where ``B * ratio`` lies past the run's
end (a faster reference, or a run stopped by its step cap) the value is the run's final one,
marked.

    python benchmarks/equal_work.py --budget 30 --reference vanilla \\
        benchmarks/llm_table_full/runs/*/fixed-lambda-seed*

Values are the table's (:func:`paper_figures.llm_table.run_value`: mean over chains of the best
raw reward within the budget, step-0 seeds excluded); buffers are opened read-only.
"""

from __future__ import annotations

import math
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rpg_core.cli import ArgumentParser, UsageError, run_cli  # noqa: E402

PROG = "python benchmarks/equal_work.py"
_RUN = re.compile(r"^(?P<arm>.+)-seed(?P<seed>\d+)$")


def seed_seconds(run_dir: Path) -> dict[int, tuple[str, float]]:
    """Step-0 scripts of a run that ended ``ok``: batch row -> (code, seconds of the time
    measure), from its ``buffer.sqlite`` (:func:`rpg_llm.loop.buffer.read_samples`).

    Raises:
        UsageError: no readable ``buffer.sqlite`` in ``run_dir``.
    """
    from rpg_llm.loop.buffer import read_samples

    try:
        samples = read_samples(run_dir / "buffer.sqlite")
    except ValueError as err:
        raise UsageError(f"{run_dir}: not a run folder ({err})") from None
    return {s.row: (s.code, s.exec_time) for s in samples if s.step == 0 and s.status == "ok"}


def speed_ratio(run: dict[int, tuple[str, float]], ref: dict[int, tuple[str, float]]) -> float:
    """Geometric mean of ``run``'s seconds over ``ref``'s on the scripts with identical code in
    both (:func:`seed_seconds`); NaN when none is shared with positive times."""
    logs = [
        math.log(run[k][1] / ref[k][1])
        for k in run.keys() & ref.keys()
        if run[k][0] == ref[k][0] and run[k][1] > 0 and ref[k][1] > 0
    ]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def _main(argv: Sequence[str] | None) -> int:
    from paper_figures.llm_table import mean_se, run_final_budget, run_value
    from rpg_llm.loop.budget import read_chains

    p = ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("run_dirs", nargs="+", type=Path, help="run folders <task>/<arm>-seed<k>")
    p.add_argument("--budget", type=float, required=True, help="B, seconds of the time measure")
    p.add_argument("--reference", default="vanilla", help="the reference arm (default vanilla)")
    args = p.parse_args(argv)
    if not args.budget > 0:
        raise UsageError(f"--budget must be > 0, got {args.budget}")
    plan = []
    for d in args.run_dirs:
        m = _RUN.match(d.name)
        if m is None:
            raise UsageError(f"{d}: not a run folder named <arm>-seed<k>")
        ref = d.parent / f"{args.reference}-seed{m['seed']}"
        if not ref.is_dir():
            raise UsageError(f"{d}: no reference run {ref}")
        plan.append((d, ref))
    by_task: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    print("run | speed ratio | value at B | value at B x ratio | reference at B")
    for d, ref in plan:
        ratio = speed_ratio(seed_seconds(d), seed_seconds(ref))
        chains = read_chains(d)
        at_b = run_value(chains, args.budget)[0]
        at_work = run_value(chains, args.budget * ratio)[0] if ratio > 0 else math.nan
        # past the run's end the value is its end's: the run could not buy that much work
        short = " (run ended first)" if args.budget * ratio > run_final_budget(chains) else ""
        ref_b = run_value(read_chains(ref), args.budget)[0]
        by_task[d.parent.name].append((at_b, at_work, ref_b))
        print(
            f"{d.parent.name}/{d.name} | {ratio:.3f} | {at_b:.4f} | {at_work:.4f}{short} | "
            f"{ref_b:.4f}"
        )
    print(f"\ntask | mean at B | mean at B x ratio | {args.reference} at B")
    for task, vals in by_task.items():
        cols = [mean_se([v[i] for v in vals])[0] for i in range(3)]  # over finite values
        print(f"{task} | " + " | ".join(f"{c:.4f}" for c in cols))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: usage errors exit 2 with one line."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
