"""Sandbox overhead and batch speed-up, measured side by side in one run.

Prints, per backend, the median extra wall time of ``python -c pass`` run through the sandbox
(``Sandbox.run`` on an empty script, including the fresh working folder, the data copy or bind,
limits and cleanup) over the same interpreter started bare with ``subprocess.run``; target
<= 150 ms for subprocess and bubblewrap.  Bubblewrap is measured twice: as used (hiding the
answer sources of ``leaks.answer_sources()``, one mount each) and with
``hide_answer_sources=False``,
so the cost of the hiding is printed.  Then the speed-up of a batch of CPU-bound scripts run
with a 2-worker ``LocalExecutor`` over a 1-worker one (target >= 1.8x on an otherwise idle
2-core machine; 1- and 2-worker batches alternate and the median ratio is reported, since other
load on the machine lowers it).

Usage: ``python benchmarks/sandbox_overhead.py [--repeats 15] [--batch 4] [--work 0.5]``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from rpg_core.cli import ArgumentParser, UsageError, at_least, run_cli
from rpg_llm.env.sandbox import BwrapSandbox, LocalExecutor, make_sandbox
from rpg_llm.env.sandbox.bwrap_backend import bwrap_path
from rpg_llm.env.sandbox.docker_backend import docker_client
from rpg_llm.env.sandbox.leaks import answer_sources

SCRIPT_TIMEOUT_S = 120  # wall-clock limit of one CPU-bound script of the batch
MAX_WORK_S = 60.0  # --work: CPU seconds per script, well inside that limit under load

CPU_SCRIPT = """
import time
t = time.process_time()
x = 0
while time.process_time() - t < {work}:
    for i in range(10000):
        x += i * i
print(x > 0)
"""


def bare_seconds(python: str) -> float:
    t0 = time.monotonic()
    subprocess.run([python, "-c", "pass"], check=True)
    return time.monotonic() - t0


def sandbox_seconds(sandbox, data: Path) -> float:
    t0 = time.monotonic()
    res = sandbox.run("pass\n", data, 30)
    res.cleanup()
    if res.status != "ok":
        raise RuntimeError(f"{sandbox.name}: {res.outcome_text}\n{res.stderr}")
    return time.monotonic() - t0


def _cpu_job(code: str, kind: str, data: str) -> str:
    res = make_sandbox(kind).run(code, Path(data), SCRIPT_TIMEOUT_S)
    res.cleanup()
    return res.status


PROG = "python benchmarks/sandbox_overhead.py"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the measurements (``rpg_core.cli`` convention: exit 2 on a usage error)."""
    return run_cli(PROG, _main, argv)


def _main(argv: Sequence[str] | None) -> int:
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--batch", type=int, default=4, help="CPU-bound scripts per batch")
    ap.add_argument("--work", type=float, default=0.5, help="CPU seconds per script")
    ap.add_argument("--speedup-repeats", type=int, default=3)
    args = ap.parse_args(argv)
    for flag in ("repeats", "batch", "speedup_repeats"):
        at_least(f"--{flag.replace('_', '-')}", getattr(args, flag), 1)
    if not 0 < args.work <= MAX_WORK_S:
        raise UsageError(
            f"--work must be in (0, {MAX_WORK_S:g}] CPU seconds (a script's limit is "
            f"{SCRIPT_TIMEOUT_S} s), got {args.work}"
        )

    kinds = ["subprocess"] + (["bwrap"] if bwrap_path() else [])
    try:
        docker_client(timeout=2)
        kinds.append("docker")
        docker_reason = None
    except RuntimeError as exc:
        docker_reason = str(exc).split(":")[0]
    with tempfile.TemporaryDirectory() as d:
        data = Path(d)
        (data / "train.csv").write_text("x,y\n" + "1,2\n" * 1000)
        python = sys.executable
        sandboxes = {k: make_sandbox(k) for k in kinds}
        if "bwrap" in sandboxes:
            sandboxes["bwrap-nohide"] = BwrapSandbox(hide_answer_sources=False)
            kinds.append("bwrap-nohide")
            print(f"bwrap hides {len(answer_sources())} answer-source paths")
        for sb in sandboxes.values():  # warm the page cache
            sandbox_seconds(sb, data)
        bare_seconds(python)
        samples: dict[str, list[float]] = {"bare": []} | {k: [] for k in sandboxes}
        for _ in range(args.repeats):  # interleaved so that load changes hit all alike
            samples["bare"].append(bare_seconds(python))
            for k, sb in sandboxes.items():
                samples[k].append(sandbox_seconds(sb, data))
        bare = statistics.median(samples["bare"])
        print(f"bare `python -c pass`: median {1000 * bare:.1f} ms over {args.repeats} runs")
        for k in kinds:
            med = statistics.median(samples[k])
            extra = 1000 * (med - bare)
            target = "" if k == "docker" else " (target <= 150)"
            verdict = "" if k == "docker" else (" OK" if extra <= 150 else " ABOVE TARGET")
            print(f"{k:>12}: median {1000 * med:.1f} ms, extra {extra:.1f} ms{target}{verdict}")
        if docker_reason:
            print(f"    docker: skipped ({docker_reason})")

        kind = "bwrap" if "bwrap" in kinds else "subprocess"  # the default backend
        code = CPU_SCRIPT.format(work=args.work)
        job = partial(_cpu_job, kind=kind, data=str(data))
        with LocalExecutor(max_workers=1) as one, LocalExecutor(max_workers=2) as two:
            for ex, workers in ((one, 1), (two, 2)):
                ex.map(job, ["pass\n"] * workers)  # start the workers before timing
            times: dict[int, list[float]] = {1: [], 2: []}
            for _ in range(args.speedup_repeats):  # alternate, so load changes hit both alike
                for ex, workers in ((one, 1), (two, 2)):
                    t0 = time.monotonic()
                    statuses = ex.map(job, [code] * args.batch)
                    times[workers].append(time.monotonic() - t0)
                    assert statuses == ["ok"] * args.batch, statuses
        ratios = [a / b for a, b in zip(times[1], times[2], strict=True)]
        speedup = statistics.median(ratios)
        verdict = "OK" if speedup >= 1.8 else "BELOW TARGET"
        print(
            f"batch of {args.batch} CPU-bound scripts ({args.work} s CPU each, {kind}): "
            f"1 worker {statistics.median(times[1]):.2f} s, "
            f"2 workers {statistics.median(times[2]):.2f} s (medians of {args.speedup_repeats}), "
            f"speed-up {speedup:.2f}x (target >= 1.8) {verdict}"
        )
        print(f"per-repeat speed-ups: {', '.join(f'{r:.2f}' for r in ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
