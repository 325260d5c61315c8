"""``python -m rpg_llm.run``: train a policy with RPG (or the vanilla arm) on a competition.

With no arguments it runs the CPU default (preset ``cpu-default``): SmolLM2-135M-Instruct on the
offline text competition, the edit answer format after an 8-step SFT warm start, B = 2, 10 PPO
steps, the RPG arm, with a progress display, and writes the budget-curve data into the run
folder. Examples::

    python -m rpg_llm.run
    python -m rpg_llm.run --method vanilla --steps 3 --out runs/vanilla
    python -m rpg_llm.run --resume runs/vanilla          # after a crash or a kill
    python -m rpg_llm.run --config runs/vanilla/config.json --seed 1 --out runs/vanilla-1
    python -m rpg_llm.run --preset qwen3.5-4b-mlebench --data-root ~/mlebench/data
    python -m rpg_llm.run --task toy-tree-mae --mlebench-dir ~/mle-bench --seed-dir seeds/
    python -m rpg_llm.run --preset nanogpt-cpu
    python -m rpg_llm.run --preset nanogpt-speedrun --speedrun-dir ~/nanogpt --data-root ~/fw
    python -m rpg_llm.run --engine trl --batch-size 4 --num-generations 2   # TRL's GRPOTrainer

Every field of :class:`rpg_llm.config.LoopConfig` is a flag (:mod:`rpg_llm.flags`; ``--help``
lists them), applied over a preset or over a stored config (``--config FILE``, JSON or YAML).
This module is the argv shell of :mod:`rpg_llm.launch`, which plans (every check, before a run
folder is made or a model loads), tells a folder's status and launches. Usage errors exit 2 with
one line naming the flag and the value; any other failure exits 1 with one line (rpg_core.cli).
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rpg_core.cli import ArgumentParser, UsageError, count, out_folder, run_cli
from rpg_core.diskfull import DiskFull
from rpg_llm import launch
from rpg_llm.flags import add_flags, flag_names, given_flags
from rpg_llm.loop.budget import write_budget_csv
from rpg_llm.loop.recording import StepRecord
from rpg_llm.loop.runfolder import RunFolder, RunFolderBusy
from rpg_llm.presets import DEFAULT_PRESET, PRESETS

__all__ = ["main", "summary_line", "PROG"]

PROG = "python -m rpg_llm.run"


def _parser() -> ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description="Train an LLM that writes ML scripts with RPG (relative reward) or vanilla.",
        allow_abbrev=False,
    )
    p.add_argument(
        "--preset",
        default=None,
        help=f"named settings (default {DEFAULT_PRESET}): "
        + "; ".join(f"{k}: {v.summary}" for k, v in PRESETS.items()),
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="start from stored settings instead of a preset (JSON or YAML; a run folder's "
        "config.json); the flags given override them",
    )
    p.add_argument("--out", default=None, help="run folder (default runs/<preset>-<method>-<time>)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue this run folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plot", action="store_true", help="skip the budget-curve data")
    add_flags(p)
    return p


def _plan(args, rank: int, world: int) -> launch.RunPlan:
    """The checked plan of the command line (:func:`rpg_llm.launch.plan`).

    Raises:
        UsageError: a bad flag combination or anything :func:`rpg_llm.launch.plan` refuses.
    """
    values = given_flags(args)
    if args.resume is not None:
        if not args.resume.strip():
            raise UsageError(f"--resume {args.resume!r}: an empty value; give a run folder")
        names = flag_names()
        other = [names[k] for k in sorted(set(values) - {"steps"})]
        other += [f for f in ("--preset", "--config", "--out") if getattr(args, f[2:])]
        if other:
            raise UsageError(f"--resume keeps the run's settings; drop {', '.join(other)}")
        cfg = launch.resume_config(args.resume, values.get("steps"))
        return launch.plan(cfg, args.resume, resume=True)
    if args.out is not None:
        out_folder("--out", args.out)
    if args.config and args.preset:
        raise UsageError("--config and --preset both give the base settings; give one")
    base = launch.read_config(args.config) if args.config else None
    cfg = launch.make_config(values, preset=args.preset, base=base)
    if world > 1 and not args.out:
        raise UsageError(f"with {world} processes, name the run folder with --out")
    name = Path(args.config).stem if args.config else args.preset or DEFAULT_PRESET
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = args.out if args.out is not None else f"runs/{name}-{cfg.method}-{stamp}"
    return launch.plan(
        cfg,
        run_dir,
        preset=None if args.config else args.preset or DEFAULT_PRESET,
        given_trl_flags=launch.trl_flags_given(values),
        check_folder=rank == 0,
    )


def _main(argv: Sequence[str] | None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = _parser().parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))  # set by torchrun / accelerate launch
    world = int(os.environ.get("WORLD_SIZE", "1"))
    plan = _plan(args, rank, world)
    cfg, run_dir = plan.cfg, plan.run_dir
    if rank == 0:
        print(f"run folder: {run_dir}", flush=True)
    if plan.resume:
        st = launch.status(run_dir, cfg)
        if st.finished:
            if rank == 0:
                print(_nothing_to_run(st, cfg.steps, cfg.exec_budget_s))
            return 0
        launch.check_checkpoint(run_dir, cfg)  # a damaged one is named before a model loads
    if rank == 0:
        launch.prepare_task(cfg, say=lambda line: print(line, flush=True))
    from transformers.utils import logging as hf_logging  # the engines load transformers anyway

    hf_logging.disable_progress_bar()  # the weight-loading bar; the step lines say what happens
    t0 = time.perf_counter()
    try:
        records = launch.launch(
            plan,
            progress=not args.no_progress,
            on_stage=_fault_hook(),
            say=(lambda line: print(line, flush=True)) if rank == 0 else None,
        )
    except RunFolderBusy as exc:
        raise UsageError(str(exc)) from None
    except DiskFull as exc:
        hint = (
            "the run folder keeps its last whole state; free space there, then continue with "
            f"{PROG} --resume {shlex.quote(str(run_dir))}"
        )
        raise DiskFull(exc.path, hint) from exc
    if rank == 0:
        _report(records, time.perf_counter() - t0, run_dir, not args.no_plot, cfg.method)
    return 0


def _nothing_to_run(st: launch.RunStatus, steps: int, budget: float | None) -> str:
    if st.reason == "budget":
        return (
            f"nothing to run: the run spent its execution budget of {budget:g} s per chain "
            f"after step {st.steps_done}"
        )
    return (
        f"nothing to run: the run has finished its {count(steps, 'step')} "
        f"(give --steps above {steps} to extend it)"
    )


def summary_line(last: StepRecord, method: str) -> str:
    """The closing line of a run from its last step record: the best *generated* raw reward
    (the policy's own valid samples; seed solutions never count, as in the step lines), and
    what the arm trains on (vanilla: no ``rho_hat``)."""
    best = last.best_generated
    best_s = "none (no valid generated sample)" if math.isnan(best) else f"{best:.4g}"
    if method == "vanilla":
        reward = f"mean reward {last.mean_reward:.4g}"
    else:
        reward = f"rho_hat {last.rho_hat:.4g}/s, mean relative reward {last.mean_reward:.4g}"
    return (
        f"last step {last.step}: {reward}, valid {last.valid_fraction:.2f}, best generated raw "
        f"reward {best_s}"
    )


def _report(records: list[StepRecord], wall: float, run_dir: Path, plot: bool, method: str) -> None:
    print(f"steps run: {len(records)} in {wall:.1f} s")
    if records:
        print(summary_line(records[-1], method))
    if plot:
        try:
            csv = write_budget_csv([run_dir], RunFolder(run_dir).figure_dir / "budget_curves.csv")
            print(f"budget curve data: {csv}")
            print(f"plot it: python -m paper_figures.budget_curves {shlex.quote(str(run_dir))}")
        except ValueError as exc:
            print(f"no budget curve: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 usage error, 1 other failure)."""
    return run_cli(PROG, _main, argv)


def _fault_hook() -> Callable[[int, str], None] | None:
    """Test hook: ``RPG_KILL_AT=STEP:STAGE`` sends SIGKILL to this process at that stage
    (stages: generated, stored, updated, checkpointed; the TRL engine: stored), to test resume
    after a hard kill."""
    spec = os.environ.get("RPG_KILL_AT")
    if not spec:
        return None
    step_s, stage = spec.split(":")

    def hook(step: int, at: str) -> None:
        if step == int(step_s) and at == stage:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


if __name__ == "__main__":
    raise SystemExit(main())
