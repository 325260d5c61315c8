"""Overhead of the training loop: the share of a step's wall time spent outside generation,
execution and the PPO update (parent selection, prompts, tokenisation, storage, estimator refit,
rewards, metrics, checkpoints). Target: <= 5 %.

    python benchmarks/loop_overhead.py RUN_DIR [RUN_DIR ...]   # from finished runs' metrics
    python benchmarks/loop_overhead.py                          # a fresh 3-step run, tiny model

The fresh run uses the tiny qwen3_5_text model on the offline text competition (unseeded, batch 4,
64-token responses): generation and PPO are then very cheap, so its overhead share is an upper
bound of what a real model sees. Steps replayed after a resume are left out.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rpg_core.cli import ArgumentParser, UsageError, run_cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def overhead(metrics: list[dict]) -> dict[str, float]:
    """Sum the timed parts over fresh (not replayed) steps; totals and the overhead share."""
    fresh = [m for m in metrics if not m.get("replayed")]
    if not fresh:
        raise ValueError("no fresh steps in the metrics")
    tot = {
        k: sum(float(m[k]) for m in fresh)
        for k in ("step_seconds", "gen_seconds", "exec_seconds", "ppo_seconds")
    }
    other = tot["step_seconds"] - tot["gen_seconds"] - tot["exec_seconds"] - tot["ppo_seconds"]
    tot["other_seconds"] = other
    tot["overhead_fraction"] = other / tot["step_seconds"]
    tot["steps"] = len(fresh)
    return tot


def _fresh_run(folder: Path) -> Path:
    from rpg_llm.config import RewardConfig
    from rpg_llm.learner.ppo import PPOConfig
    from rpg_llm.loop import LoopConfig, SamplingConfig, train
    from testkit.tiny_model import build_tiny_model

    model = build_tiny_model(folder / "tiny")
    cfg = LoopConfig(
        task="text",
        model=str(model),
        steps=3,
        batch_size=4,
        seed_buffer=False,
        sandbox="subprocess",
        sampling=SamplingConfig(max_prompt_tokens=1024, max_new_tokens=64),
        reward=RewardConfig("rpg", timeout_s=30.0),
        ppo=PPOConfig(micro_batch_size=4),
    )
    run = folder / "run"
    train(cfg, run, progress=False)
    return run


PROG = "python benchmarks/loop_overhead.py"


def main(argv: list[str] | None = None) -> int:
    """Print the overhead table (``rpg_core.cli`` convention: exit 2 on a usage error)."""
    return run_cli(PROG, _main, argv)


def _main(argv: Sequence[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    p.add_argument("run_dirs", nargs="*")
    args = p.parse_args(argv)
    for d in args.run_dirs:
        if not (Path(d) / "metrics.jsonl").exists():
            raise UsageError(f"{d} has no metrics.jsonl (not a run folder)")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [Path(d) for d in args.run_dirs] or [_fresh_run(Path(tmp))]
        print("| run | steps | step s | generation s | execution s | PPO s | other s | overhead |")
        print("|---|---|---|---|---|---|---|---|")
        for run in runs:
            path = run / "metrics.jsonl"
            metrics = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            o = overhead(metrics)
            name = run.name if args.run_dirs else "tiny model, fresh run"
            print(
                f"| {name} | {o['steps']} | {o['step_seconds']:.1f} | {o['gen_seconds']:.1f} | "
                f"{o['exec_seconds']:.1f} | {o['ppo_seconds']:.1f} | {o['other_seconds']:.2f} | "
                f"{100 * o['overhead_fraction']:.1f} % |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
