"""``python -m rpg_llm.run``: train a policy with RPG (or the vanilla arm) on a competition.

With no arguments it runs the CPU default (preset ``cpu-default``): SmolLM2-135M-Instruct on the
offline text competition, a small batch, a few PPO steps, the RPG arm, with a progress display,
and writes a budget-curve plot into the run folder. Examples::

    python -m rpg_llm.run
    python -m rpg_llm.run --method vanilla --steps 3 --out runs/vanilla
    python -m rpg_llm.run --resume runs/vanilla          # after a crash or a kill
    python -m rpg_llm.run --preset qwen3.5-4b-mlebench --data-root ~/mlebench/data

Usage errors (unknown model offline, missing task, bad batch size, a preset whose resources are
missing, ...) exit with status 2 and a one-line reason.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "build_config"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    from rpg_llm.presets import DEFAULT_PRESET, PRESETS

    p = _Parser(
        prog="python -m rpg_llm.run",
        description="Train an LLM that writes ML scripts with RPG (relative reward) or vanilla.",
    )
    p.add_argument(
        "--preset",
        default=None,
        help=f"named settings (default {DEFAULT_PRESET}): "
        + "; ".join(f"{k}: {v.summary}" for k, v in PRESETS.items()),
    )
    p.add_argument("--method", choices=["rpg", "vanilla"], default=None)
    p.add_argument("--task", default=None, help="competition id or alias ('text')")
    p.add_argument("--model", default=None, help="Hugging Face id or local folder")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--sandbox", default=None, help="auto | subprocess | bwrap | docker")
    p.add_argument("--executor", default=None, help="local | ray")
    p.add_argument("--workers", type=int, default=None, help="parallel executions")
    p.add_argument("--timeout", type=float, default=None, help="seconds per script")
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--max-prompt-tokens", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    seeding = p.add_mutually_exclusive_group()
    seeding.add_argument(
        "--seed-buffer",
        dest="seed_buffer",
        action="store_true",
        default=None,
        help="start the buffer with the task's baseline solutions",
    )
    seeding.add_argument("--no-seed-buffer", dest="seed_buffer", action="store_false")
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--lora-rank", type=int, default=None, help="0: full fine-tuning")
    p.add_argument("--data-root", default=None, help="competitions folder")
    p.add_argument("--device", default=None, help="cpu | cuda (default: cuda if available)")
    p.add_argument("--out", default=None, help="run folder (default runs/<preset>-<method>-<time>)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue this run folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plot", action="store_true", help="skip the budget-curve plot")
    return p


def build_config(args: argparse.Namespace) -> tuple[Any, str]:
    """LoopConfig from a preset and the command-line overrides; returns (config, preset name).

    Raises:
        ValueError: an unknown preset or a bad value.
    """
    from rpg_llm.loop import LoopConfig
    from rpg_llm.presets import DEFAULT_PRESET, get_preset

    preset = get_preset(args.preset or DEFAULT_PRESET)
    settings = dict(preset.settings)
    settings["ppo"] = dict(settings.get("ppo", {}))
    overrides = {
        "method": args.method,
        "task": args.task,
        "model": args.model,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "sandbox": args.sandbox,
        "executor": args.executor,
        "workers": args.workers,
        "timeout_s": args.timeout,
        "max_new_tokens": args.max_new_tokens,
        "max_prompt_tokens": args.max_prompt_tokens,
        "seed": args.seed,
        "seed_buffer": args.seed_buffer,
        "checkpoint_every": args.checkpoint_every,
        "data_root": args.data_root,
        "device": args.device,
    }
    settings.update({k: v for k, v in overrides.items() if v is not None})
    if args.lora_rank is not None:
        settings["ppo"]["lora_rank"] = args.lora_rank
    if preset.data_env and not settings.get("data_root"):
        settings["data_root"] = os.environ.get(preset.data_env)
    return LoopConfig(**settings), preset.name


def _check_inputs(cfg: Any, preset_name: str) -> None:
    """Fail early (before a run folder is made) on a missing model, task or preset resource."""
    from rpg_llm.policy import resolve_model
    from rpg_llm.presets import get_preset, missing_resources

    preset = get_preset(preset_name)
    if preset.gpus > 0 or preset.data_env is not None:
        missing = missing_resources(preset, cfg.model, cfg.data_root)
        if missing:
            raise ValueError(f"preset {preset_name} needs " + "; ".join(missing))
    resolve_model(cfg.model)
    from rpg_llm import tasks

    comp_id = tasks.resolve_id(cfg.task)
    if comp_id not in tasks.list_offline_competitions():
        root = Path(cfg.data_root) if cfg.data_root else None
        tasks.load_competition(comp_id, root)  # raises ValueError naming the id and the root


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status (0 ok, 2 usage error)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = _parser().parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))  # set by torchrun / accelerate launch
    world = int(os.environ.get("WORLD_SIZE", "1"))
    from rpg_llm.loop import LoopConfig, train
    from rpg_llm.runfolder import RunFolder

    try:
        if args.resume:
            folder = RunFolder(args.resume)
            stored = folder.load_config()
            cfg = LoopConfig.from_dict(stored)
            if args.steps is not None:  # allow extending a finished run
                cfg = LoopConfig.from_dict({**stored, "steps": args.steps})
            run_dir = Path(args.resume)
            resume = True
        else:
            cfg, preset_name = build_config(args)
            if world > 1 and not args.out:
                raise ValueError(f"with {world} processes, name the run folder with --out")
            _check_inputs(cfg, preset_name)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            run_dir = Path(args.out or f"runs/{preset_name}-{cfg.method}-{stamp}")
            if rank == 0 and (run_dir / "config.json").exists():
                raise ValueError(f"{run_dir} already holds a run; use --resume {run_dir}")
            resume = False
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    on_stage = _fault_hook()
    t0 = time.perf_counter()
    try:
        records = train(
            cfg, run_dir, resume=resume, progress=not args.no_progress, on_stage=on_stage
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wall = time.perf_counter() - t0
    if rank != 0:
        return 0
    print(f"run folder: {run_dir}")
    print(f"steps run: {len(records)} in {wall:.1f} s")
    if records:
        last = records[-1]
        print(
            f"last step {last.step}: rho_hat {last.rho_hat:.4g}, mean reward "
            f"{last.mean_reward:.4g}, valid {last.valid_fraction:.2f}, best raw reward "
            f"{last.best_raw_reward:.4g}"
        )
    if not args.no_plot:
        from paper_figures.budget_curves import budget_curves

        try:
            png, pdf, csv = budget_curves([run_dir], RunFolder(run_dir).figure_dir)
            print(f"budget curve: {png}\nbudget curve data: {csv}")
        except ValueError as exc:
            print(f"no budget curve: {exc}", file=sys.stderr)
    return 0


def _fault_hook():
    """Test hook: ``RPG_KILL_AT=STEP:STAGE`` sends SIGKILL to this process at that stage
    (stages: generated, stored, updated, checkpointed), to test resume after a hard kill."""
    spec = os.environ.get("RPG_KILL_AT")
    if not spec:
        return None
    step_s, stage = spec.split(":")

    def hook(step: int, at: str) -> None:
        if step == int(step_s) and at == stage:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)

    return hook


if __name__ == "__main__":
    raise SystemExit(main())
