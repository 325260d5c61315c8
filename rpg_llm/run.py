"""``python -m rpg_llm.run``: train a policy with RPG (or the vanilla arm) on a competition.

With no arguments it runs the CPU default (preset ``cpu-default``): SmolLM2-135M-Instruct on the
offline text competition, the edit answer format after an 8-step SFT warm start, B = 2, 10 PPO
steps, the RPG arm, with a progress display, and writes the budget-curve data into the run
folder. Examples::

    python -m rpg_llm.run
    python -m rpg_llm.run --method vanilla --steps 3 --out runs/vanilla
    python -m rpg_llm.run --resume runs/vanilla          # after a crash or a kill
    python -m rpg_llm.run --preset qwen3.5-4b-mlebench --data-root ~/mlebench/data
    python -m rpg_llm.run --task toy-tree-mae --mlebench-dir ~/mle-bench --seed-dir seeds/
    python -m rpg_llm.run --preset nanogpt-cpu
    python -m rpg_llm.run --preset nanogpt-speedrun --speedrun-dir ~/nanogpt --data-root ~/fw
    python -m rpg_llm.run --engine trl --batch-size 4 --num-generations 2   # TRL's GRPOTrainer

Every field of :class:`rpg_llm.config.LoopConfig` (and its nested sampling, reward and PPO
configs) is a flag, generated from the dataclasses; ``--help`` lists them. Usage errors (unknown
model offline, missing task, bad value, a preset whose resources are missing, ...) exit 2 with one
line naming the flag and the value, before a run folder is made; any other failure exits 1 with
one line (rpg_core.cli).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rpg_core.cli import ArgumentParser, UsageError, count, out_folder, run_cli

__all__ = [
    "main",
    "build_config",
    "check_device",
    "check_engine",
    "given_engine_flags",
    "check_prompt_budget",
    "prepare_offline",
    "PROG",
]

PROG = "python -m rpg_llm.run"


def _parser() -> ArgumentParser:
    from rpg_llm.config import add_flags
    from rpg_llm.presets import DEFAULT_PRESET, PRESETS

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
    p.add_argument("--out", default=None, help="run folder (default runs/<preset>-<method>-<time>)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue this run folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plot", action="store_true", help="skip the budget-curve data")
    add_flags(p)
    return p


def build_config(args: Any) -> tuple[Any, str]:
    """LoopConfig from a preset and the command-line flags; returns (config, preset name).

    Raises:
        UsageError: an unknown preset or a bad value (the message names the flag).
    """
    from rpg_llm.config import apply_flags, given_flags
    from rpg_llm.presets import DEFAULT_PRESET, PRESETS, get_preset

    name = args.preset or DEFAULT_PRESET
    if name not in PRESETS:
        raise UsageError(f"--preset {name!r} is unknown; known: {', '.join(PRESETS)}")
    preset = get_preset(name)
    values = given_flags(args)
    if preset.data_env and not values.get("data_root") and not preset.config.data_root:
        values["data_root"] = os.environ.get(preset.data_env)
    try:
        cfg = apply_flags(preset.config, values)
    except ValueError as err:
        raise UsageError(str(err)) from None
    from dataclasses import replace

    from rpg_llm.env.tasks.cliflags import mlebench_dir_arg

    # the tree of --mlebench-dir, else env RPG_MLEBENCH_DIR (stored, so --resume needs no env)
    tree = mlebench_dir_arg(Path(cfg.mlebench_dir) if cfg.mlebench_dir else None)
    folders = {  # absolute, so that a run resumed from another directory finds them
        k: str(Path(v).expanduser().absolute())
        for k in ("seed_dir", "speedrun_dir")
        if (v := getattr(cfg, k))
    }
    cfg = replace(cfg, mlebench_dir=str(tree) if tree is not None else None, **folders)
    cfg = _task_timeout(cfg, preset, values)
    if cfg.engine == "trl" and preset.gpus > 0 and "trl.use_vllm" not in values:
        # the GPU presets generate with vLLM through TRL (colocated unless --vllm-mode server)
        cfg = replace(cfg, trl=replace(cfg.trl, use_vllm=True))
    return cfg, preset.name


def _task_timeout(cfg: Any, preset: Any, values: dict[str, Any]) -> Any:
    """A NanoGPT task run without its preset takes the task's own timeout (an attempt of the
    CPU stand-in takes minutes: the cpu-default's 60 s would kill every one), unless
    ``--timeout`` is given."""
    from dataclasses import replace

    from rpg_llm.env.tasks import nanogpt

    if cfg.task != "nanogpt-cpu" or "reward.timeout_s" in values or preset.config.task == cfg.task:
        return cfg
    timeout = float(nanogpt.cpu_settings(target_loss=1.0).timeout_s)  # the limit only
    return replace(cfg, reward=replace(cfg.reward, timeout_s=timeout))


def _check_speedrun(cfg: Any) -> None:
    """``nanogpt.check_speedrun_setup`` on ``--speedrun-dir`` / ``--data-root`` (8 GPUs).

    Raises:
        UsageError: a folder not given or failing the check (names the flag and the value).
    """
    from rpg_llm.env.registry import SPEEDRUN_GPUS, SPEEDRUN_ID
    from rpg_llm.env.tasks import nanogpt
    from rpg_llm.presets import NANOGPT_ENV

    if not cfg.speedrun_dir:
        raise UsageError(
            f"--task {SPEEDRUN_ID} needs --speedrun-dir DIR (a modded-nanogpt checkout holding "
            "train_gpt.py)"
        )
    if not cfg.data_root:
        raise UsageError(
            f"--task {SPEEDRUN_ID} needs --data-root DIR (the FineWeb shards; or env {NANOGPT_ENV})"
        )
    try:
        nanogpt.check_speedrun_setup(cfg.speedrun_dir, cfg.data_root, SPEEDRUN_GPUS)
    except ValueError as err:
        msg = str(err)
        raise UsageError(msg if msg.startswith("--") else f"--task {SPEEDRUN_ID}: {msg}") from None


def check_device(device: str | None) -> None:
    """``--device`` must name a torch device this machine has (``cuda`` without a GPU would load
    the weights, then fail inside torch).

    Raises:
        UsageError: naming ``--device`` and the value.
    """
    if device is None:
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise UsageError(f"--device {device!r} is not a torch device (cpu, cuda, cuda:N)") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UsageError(f"--device {device!r}: no CUDA GPU on this machine (use cpu)")
        if dev.index is not None and dev.index >= count:
            raise UsageError(f"--device {device!r}: this machine has {count} CUDA GPU(s)")
    elif dev.type != "cpu":
        raise UsageError(f"--device {device!r}: only cpu and cuda are supported")


def _check_inputs(cfg: Any, preset_name: str) -> None:
    """Fail early (before a run folder is made or a model loaded) on a missing model, task,
    grader, seed folder or preset resource, or an edit-format prompt budget too small for the
    starting scripts' constants (counted with the model's tokenizer). A hub model id is resolved
    last (for the default model that converts its GGUF weights once, seconds), except where a
    GPU or data preset lists its missing resources together, the weights among them.

    Raises:
        UsageError: naming the flag and the value.
    """
    from rpg_llm.env.registry import SPEEDRUN_ID
    from rpg_llm.env.tasks.cliflags import seed_dir_arg
    from rpg_llm.learner.policy import check_model_name, resolve_model
    from rpg_llm.loop.backends import seed_solutions
    from rpg_llm.presets import get_preset, missing_resources

    check_device(cfg.device)
    try:
        check_model_name(cfg.model)  # a bad local folder, before the slower checks
    except ValueError as err:
        raise UsageError(f"--model {cfg.model}: {err}") from None
    if cfg.data_root is not None:
        out_folder("--data-root", cfg.data_root)
    if cfg.task == SPEEDRUN_ID:
        _check_speedrun(cfg)
    preset = get_preset(preset_name)
    if preset.gpus > 0 or preset.data_env is not None:
        missing = missing_resources(preset, cfg.model, cfg.data_root)
        if missing:
            raise UsageError(f"--preset {preset_name} needs " + "; ".join(missing))
    seeds = seed_dir_arg(Path(cfg.seed_dir)) if cfg.seed_dir is not None else None
    try:
        comp_id = _check_task(cfg)
    except ValueError as err:
        raise UsageError(f"--task {cfg.task}: {err}") from None
    scripts = seeds if seeds is not None else seed_solutions(cfg)(comp_id or cfg.task)
    if comp_id is not None:
        _check_starting_scripts(cfg, scripts)
    try:
        path = resolve_model(cfg.model)
    except ValueError as err:
        raise UsageError(f"--model {cfg.model}: {err}") from None
    if cfg.action == "edit" and scripts:
        check_prompt_budget(cfg, path, scripts)


def check_prompt_budget(cfg: Any, model_path: Path, scripts: list[tuple[str, str]]) -> None:
    """Refuse a prompt budget that cannot hold an edit prompt's constants listing, outcome and
    answer rules (the prompt would be cut in its middle), before a model is loaded.

    Args:
        cfg: the run's :class:`rpg_llm.config.LoopConfig` (its task, ``describe``, timeout,
            ``sampling.max_prompt_tokens`` and ``seed_dir`` are read).
        model_path: a local model folder (:func:`rpg_llm.learner.policy.resolve_model`); only
            its tokenizer is loaded.
        scripts: the starting scripts ``(name, code)`` (the task's baselines or ``--seed-dir``).

    Raises:
        UsageError: naming ``--max-prompt-tokens``, its value, the script and the budget it needs.
    """
    from transformers import AutoTokenizer

    from rpg_llm.loop.rollout import min_edit_prompt_tokens

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    need, name = min_edit_prompt_tokens(tokenizer, cfg.describe, scripts, cfg.timeout_s)
    budget = cfg.sampling.max_prompt_tokens
    if need > budget:
        source = f"--seed-dir {cfg.seed_dir}" if cfg.seed_dir is not None else f"task {cfg.task}"
        raise UsageError(
            f"--max-prompt-tokens {budget} is too small for the edit prompt of {source}'s "
            f"{name!r}: its constants listing, outcome and answer rules need {need} tokens "
            f"(give --max-prompt-tokens {need} or more)"
        )


def _check_task(cfg: Any) -> str | None:
    """Check that ``cfg.task`` names a task this machine can run: a NanoGPT task, an offline
    competition, or a prepared competition (under ``data_root`` or the MLE-Bench tree) whose
    grader imports.

    Returns:
        The competition id, or None for a NanoGPT task.

    Raises:
        ValueError: a bad or unknown task (the message names the id, the root and the tree).
    """
    from rpg_llm.env import tasks
    from rpg_llm.env.registry import SPEEDRUN_ID
    from rpg_llm.env.tasks import nanogpt

    if isinstance(cfg.task, str) and (cfg.task in nanogpt.TASK_IDS or cfg.task == SPEEDRUN_ID):
        return None
    comp_id = tasks.resolve_id(cfg.task)
    if comp_id not in tasks.list_offline_competitions():
        root = Path(cfg.data_root) if cfg.data_root else None
        tree = Path(cfg.mlebench_dir) if cfg.mlebench_dir else None
        comp = tasks.load_competition(comp_id, root, tree)  # names the id, root and tree
        tasks.load_grader(comp)  # GradingSetupError: the grader cannot be imported
    return comp_id


def prepare_offline(cfg: Any) -> bool:
    """Build ``cfg.task``'s offline competition folder when this machine has none yet, saying so
    first: it takes about a minute (the split, and the baseline ladder of its leaderboard), and
    the run would otherwise pause silently after printing its folder. A folder of an older
    format or baseline ladder is rebuilt the same way (:func:`rpg_llm.env.tasks.is_current`).

    Returns:
        Whether a competition was built (False: not an offline competition, or already there).

    ``cfg.task`` has passed :func:`_check_task` already (a NanoGPT or MLE-Bench id is left alone).

    Raises:
        ValueError: a bad competition name.
    """
    from rpg_llm.env import tasks

    comp_id = tasks.resolve_id(cfg.task)
    if comp_id not in tasks.list_offline_competitions():
        return False
    root = Path(cfg.data_root) if cfg.data_root else tasks.default_data_root()
    if tasks.is_current(comp_id, root):
        return False
    print(
        f"preparing the offline competition {comp_id} in {root} (first use there: the split "
        "and the baselines of its leaderboard, about a minute)",
        flush=True,
    )
    tasks.prepare(comp_id, root)
    return True


def _check_starting_scripts(cfg: Any, scripts: list[tuple[str, str]]) -> None:
    """The edit format and the SFT warm start start from the task's baseline (or --seed-dir)
    scripts: refuse a run that has none it can use, before a model is loaded.

    Raises:
        UsageError: naming ``--action edit`` or ``--sft-steps`` and the task.
    """
    from rpg_llm.env.actions import editable_baselines

    source = f"--seed-dir {cfg.seed_dir}" if cfg.seed_dir is not None else f"task {cfg.task}"
    if cfg.action == "edit":
        try:
            editable_baselines(scripts)
        except ValueError as err:
            raise UsageError(
                f"--action edit: {source} has {err}; give --seed-dir with such scripts, "
                "or use --action script --sft-steps 0"
            ) from None
    elif cfg.sft_steps > 0 and not scripts:
        raise UsageError(
            f"--sft-steps {cfg.sft_steps}: {source} has no baseline scripts to fine-tune on; "
            "give --seed-dir or --sft-steps 0"
        )


def given_engine_flags(args: Any) -> list[str]:
    """The TRL-engine flags given on the command line (``--num-generations`` ...)."""
    from rpg_llm.config import flag_names, given_flags

    names = flag_names()
    return [names[k] for k in given_flags(args) if k.startswith("trl.")]


def check_engine(cfg: Any, trl_flags: Sequence[str] = (), need_packages: bool = True) -> None:
    """``--engine trl`` needs TRL (and, with ``--use-vllm``, vLLM and a CUDA GPU); the TRL
    flags (``trl_flags``, as given) make no sense with ``--engine ppo``. Checked before any model
    loads; ``need_packages=False`` checks the flags only.

    Raises:
        UsageError: naming the flag and what is missing.
    """
    import importlib.util

    if cfg.engine != "trl":
        if trl_flags:
            verb = "applies" if len(trl_flags) == 1 else "apply"
            raise UsageError(f"{', '.join(trl_flags)} {verb} to --engine trl only")
        return
    if not need_packages:
        return
    if importlib.util.find_spec("trl") is None:
        raise UsageError("--engine trl needs TRL: pip install -e '.[trl]' (trl==1.16.0)")
    if cfg.trl.use_vllm:
        if importlib.util.find_spec("vllm") is None:
            raise UsageError(
                "--use-vllm needs the vllm package on a CUDA machine (pip install vllm)"
            )
        import torch

        if not torch.cuda.is_available() or cfg.device == "cpu":
            raise UsageError("--use-vllm needs a CUDA GPU (none found, or --device cpu)")


def _resume_config(args: Any) -> Any:
    """The stored config of ``--resume RUN_DIR`` (``--steps`` may extend a run; other settings
    are the run's own)."""
    from rpg_llm.config import LoopConfig, apply_flags, given_flags
    from rpg_llm.loop.runfolder import RunFolder

    values = given_flags(args)
    other = sorted(set(values) - {"steps"})
    if other or args.preset or args.out:
        from rpg_llm.config import flag_names

        names = [flag_names()[k] for k in other] + [
            f for f, v in (("--preset", args.preset), ("--out", args.out)) if v
        ]
        raise UsageError(f"--resume keeps the run's settings; drop {', '.join(names)}")
    try:
        folder = RunFolder(args.resume)
        cfg = LoopConfig.from_dict(folder.load_config())
        folder.check_resumable()
        cfg = apply_flags(cfg, values)
    except ValueError as err:
        raise UsageError(f"--resume {args.resume}: {err}") from None
    try:
        _check_task(cfg)
    except ValueError as err:
        raise UsageError(f"--resume {args.resume}: the stored task {cfg.task!r}: {err}") from None
    done = folder.latest_checkpoint() or 0
    if cfg.steps < done:
        raise UsageError(
            f"--steps {cfg.steps}: the run in {args.resume} already has {done} checkpointed "
            f"steps; give --steps above {done} to extend it"
        )
    return cfg


def _main(argv: Sequence[str] | None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = _parser().parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))  # set by torchrun / accelerate launch
    world = int(os.environ.get("WORLD_SIZE", "1"))
    from rpg_llm.loop import train

    if args.resume is not None and not args.resume.strip():
        raise UsageError(f"--resume {args.resume!r}: an empty value; give a run folder")
    if args.resume:
        cfg, run_dir, resume = _resume_config(args), Path(args.resume), True
    else:
        if args.out is not None:
            out_folder("--out", args.out)
        cfg, preset_name = build_config(args)
        if world > 1 and not args.out:
            raise UsageError(f"with {world} processes, name the run folder with --out")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(args.out or f"runs/{preset_name}-{cfg.method}-{stamp}")
        if rank == 0 and (run_dir / "config.json").exists():
            raise UsageError(f"--out {run_dir} already holds a run; use --resume {run_dir}")
        check_engine(cfg, given_engine_flags(args))
        _check_inputs(cfg, preset_name)
        resume = False
    if rank == 0:
        print(f"run folder: {run_dir}", flush=True)
    if resume:
        check_engine(cfg)
    if resume and _finished(run_dir, cfg.steps, cfg.engine):
        if rank == 0:
            print(
                f"nothing to run: the run has finished its {count(cfg.steps, 'step')} "
                f"(give --steps above {cfg.steps} to extend it)"
            )
        return 0
    if rank == 0:
        prepare_offline(cfg)
    t0 = time.perf_counter()
    from transformers.utils import logging as hf_logging

    from rpg_llm.loop.runfolder import RunFolderBusy

    hf_logging.disable_progress_bar()  # the weight-loading bar; the step lines say what happens

    try:
        if cfg.engine == "trl":
            from rpg_llm.engines.trl import train_trl

            records = train_trl(
                cfg, run_dir, resume=resume, progress=not args.no_progress, on_stage=_fault_hook()
            )
        else:
            records = train(
                cfg, run_dir, resume=resume, progress=not args.no_progress, on_stage=_fault_hook()
            )
    except RunFolderBusy as exc:
        raise UsageError(str(exc)) from None
    wall = time.perf_counter() - t0
    if rank != 0:
        return 0
    _report(records, wall, run_dir, plot=not args.no_plot, method=cfg.method)
    return 0


def _finished(run_dir: Path, steps: int, engine: str = "ppo") -> bool:
    """True when ``run_dir`` has a checkpoint of step ``steps`` (the run's last step; the TRL
    engine: TRL's global step)."""
    from rpg_llm.loop.runfolder import RunFolder

    if engine == "trl":
        from rpg_llm.engines.trl import trl_done_steps

        return trl_done_steps(run_dir) >= steps
    return (RunFolder(run_dir).latest_checkpoint() or 0) >= steps


def summary_line(last: Any, method: str) -> str:
    """The closing line of a run from its last :class:`rpg_llm.loop.StepRecord`: the best
    *generated* raw reward (the policy's own valid samples; seed solutions never count, as in
    the step lines), and what the arm trains on (vanilla: no ``rho_hat``)."""
    import math

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


def _report(records: list[Any], wall: float, run_dir: Path, plot: bool, method: str) -> None:
    print(f"steps run: {len(records)} in {wall:.1f} s")
    if records:
        print(summary_line(records[-1], method))
    if plot:
        from rpg_llm.loop.budget import write_budget_csv
        from rpg_llm.loop.runfolder import RunFolder

        try:
            csv = write_budget_csv([run_dir], RunFolder(run_dir).figure_dir / "budget_curves.csv")
            print(f"budget curve data: {csv}")
            print(f"plot it: python -m paper_figures.budget_curves {run_dir}")
        except ValueError as exc:
            print(f"no budget curve: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 usage error, 1 other failure)."""
    return run_cli(PROG, _main, argv)


def _fault_hook():
    """Test hook: ``RPG_KILL_AT=STEP:STAGE`` sends SIGKILL to this process at that stage
    (stages: generated, stored, updated, checkpointed; the TRL engine: stored), to test resume
    after a hard kill."""
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
