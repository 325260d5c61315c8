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
load on the machine lowers it).  Last, a table of start-to-exit seconds per script and backend
(``Sandbox.run`` called to result returned, the working folder's removal excluded; one run each,
after one warm-up run of each backend): subprocess, bubblewrap and docker side by side.  Docker
runs its image's Debian Python and libraries, the others this interpreter and its libraries.

Usage: ``python benchmarks/sandbox_overhead.py [--repeats 15] [--batch 4] [--work 0.5]
[--no-speedup]``.
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
from rpg_llm.env.sandbox.docker_backend import default_image
from rpg_llm.env.sandbox.engine import docker_client
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


TABLE_SCRIPTS = {
    "`pass`": "pass\n",
    "import numpy, pandas, sklearn": "import numpy, pandas, sklearn.linear_model\n",
    "read train.csv, write submission": (
        "import pandas as pd\n"
        "pd.read_csv('input/train.csv').to_csv('submission.csv', index=False)\n"
    ),
    "fit a logistic regression (5000 x 20)": (
        "import numpy as np\n"
        "from sklearn.linear_model import LogisticRegression\n"
        "x = np.random.default_rng(0).normal(size=(5000, 20))\n"
        "LogisticRegression().fit(x, (x[:, 0] > 0).astype(int))\n"
    ),
    "sleep 1 s": "import time\ntime.sleep(1.0)\n",
}
"""Scripts of the start-to-exit table: what a task's script does, from nothing to a model fit."""


def start_to_exit(sandbox, code: str, data: Path) -> tuple[float, float]:
    """``(seconds from Sandbox.run's call to its result, the run's own delta)``; one run."""
    t0 = time.monotonic()
    res = sandbox.run(code, data, SCRIPT_TIMEOUT_S)
    wall = time.monotonic() - t0
    res.cleanup()
    if res.status != "ok":
        raise RuntimeError(f"{sandbox.name}: {res.outcome_text}\n{res.stderr[-2000:]}")
    return wall, res.delta


def print_table(sandboxes: dict, data: Path) -> None:
    """The start-to-exit table (markdown), one run per script and backend."""
    kinds = [k for k in ("subprocess", "bwrap", "docker") if k in sandboxes]
    rows = {name: [start_to_exit(sandboxes[k], code, data) for k in kinds]
            for name, code in TABLE_SCRIPTS.items()}  # fmt: skip
    print("start-to-exit seconds per script, one run (in brackets: the run's own delta)")
    print("| script | " + " | ".join(kinds) + " |")
    print("| --- |" + " ---: |" * len(kinds))
    for name, cells in rows.items():
        print(f"| {name} | " + " | ".join(f"{w:.2f} ({d:.2f})" for w, d in cells) + " |")


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


def print_speedup(kind: str, data: Path, batch: int, work: float, repeats: int) -> None:
    """The batch speed-up of 2 workers over 1 (medians of alternating repeats)."""
    code = CPU_SCRIPT.format(work=work)
    job = partial(_cpu_job, kind=kind, data=str(data))
    with LocalExecutor(max_workers=1) as one, LocalExecutor(max_workers=2) as two:
        for ex, workers in ((one, 1), (two, 2)):
            ex.map(job, ["pass\n"] * workers)  # start the workers before timing
        times: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(repeats):  # alternate, so load changes hit both alike
            for ex, workers in ((one, 1), (two, 2)):
                t0 = time.monotonic()
                statuses = ex.map(job, [code] * batch)
                times[workers].append(time.monotonic() - t0)
                assert statuses == ["ok"] * batch, statuses
    ratios = [a / b for a, b in zip(times[1], times[2], strict=True)]
    speedup = statistics.median(ratios)
    verdict = "OK" if speedup >= 1.8 else "BELOW TARGET"
    print(
        f"batch of {batch} CPU-bound scripts ({work} s CPU each, {kind}): "
        f"1 worker {statistics.median(times[1]):.2f} s, "
        f"2 workers {statistics.median(times[2]):.2f} s (medians of {repeats}), "
        f"speed-up {speedup:.2f}x (target >= 1.8) {verdict}"
    )
    print(f"per-repeat speed-ups: {', '.join(f'{r:.2f}' for r in ratios)}")


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
    ap.add_argument("--no-speedup", action="store_true", help="skip the batch speed-up")
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
        docker_client(timeout=5).images.get(default_image())
        kinds.append("docker")
        docker_reason = None
    except Exception as exc:  # no SDK or engine (SandboxError), or no image (ImageNotFound)
        docker_reason = str(exc).split(":")[0]
    with tempfile.TemporaryDirectory() as d:
        data = Path(d)
        (data / "train.csv").write_text("x,y\n" + "1,2\n" * 1000)
        data.chmod(0o755)  # as a data root is: readable by a sandbox's private uid
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
        print_table(sandboxes, data)
        if not args.no_speedup:
            kind = "bwrap" if "bwrap" in kinds else "subprocess"  # the default backend
            print_speedup(kind, data, args.batch, args.work, args.speedup_repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
