"""Calibrate the CPU stand-in's target ``L*``: mean official val loss of the baseline over seeds.

CLI::

    python -m rpg_llm.env.tasks.nanogpt.calibrate [--seeds 5] [--sandbox auto] [--data-root DIR]
        [--out rpg_llm/env/tasks/nanogpt/target_cpu.json]

Runs the baseline script (``solutions/baseline_cpu.py`` with ``SEED = 0 .. seeds-1``) through the
same environment as every attempt and writes ``{"target_loss", "losses", "wall_s", "command",
...}``.  The losses do not depend on the target, so a placeholder target is used while measuring.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_llm.env.sandbox import KINDS
from rpg_llm.env.tasks.nanogpt.env import run_attempt
from rpg_llm.env.tasks.nanogpt.settings import TARGET_FILE, cpu_settings
from rpg_llm.env.tasks.nanogpt.task import baseline_code, load_task

PROG = "python -m rpg_llm.env.tasks.nanogpt.calibrate"


def calibrate(
    seeds: int, sandbox: str = "auto", data_root: Path | None = None, command: str = ""
) -> dict[str, object]:
    """Run the baseline for ``seeds`` seeds; returns the calibration record.

    Raises:
      RuntimeError: a baseline run was not valid (its outcome text is in the message).
    """
    settings = replace(cpu_settings(target_loss=10.0), timeout_s=900.0)
    task = load_task("nanogpt-cpu", data_root, settings)
    losses, walls, reported = [], [], []
    for seed in range(seeds):
        o = run_attempt(baseline_code(seed), task, sandbox)
        print(f"seed {seed}: {o.status} {o.outcome_text}", flush=True)
        if not o.valid:
            raise RuntimeError(f"baseline seed {seed} was not valid: {o.outcome_text}")
        losses.append(o.score)
        walls.append(round(o.delta, 2))
        reported.append(o.reported_loss)
    return {
        "target_loss": sum(losses) / len(losses),
        "losses": losses,
        "reported_final_val_losses": reported,
        "wall_s": walls,
        "seeds": list(range(seeds)),
        "command": command or f"{PROG} --seeds {seeds} --sandbox {sandbox}",
        "measured_at_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "host": {
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
        },
    }


def _main(argv: Sequence[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description="Calibrate the nanogpt-cpu target loss.")
    p.add_argument("--seeds", type=int, default=5, help="baseline seeds (default 5)")
    p.add_argument("--sandbox", default="auto", choices=KINDS)
    p.add_argument("--data-root", type=Path, default=None)
    p.add_argument("--out", type=Path, default=TARGET_FILE)
    a = p.parse_args(argv)
    if not (a.seeds >= 1):
        raise UsageError(f"--seeds must be >= 1, got {a.seeds}")
    if not (a.out.parent.is_dir()):
        raise UsageError(f"--out folder {str(a.out.parent)!r} does not exist")
    args = " ".join(sys.argv[1:] if argv is None else argv)
    record = calibrate(a.seeds, a.sandbox, a.data_root, f"{PROG} {args}".strip())
    a.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"target_loss {record['target_loss']:.4f} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(PROG, _main))
