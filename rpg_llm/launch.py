"""Planning, status and launch of a training run: the one contract between launchers and a run.

Every launcher (``python -m rpg_llm.run``, ``paper_figures.llm_table``, a user's own script)
speaks :class:`rpg_llm.config.LoopConfig` to a run, never argv:

* :func:`make_config` builds a config from a preset (or a stored config) and flag values;
  :func:`read_config` / :func:`write_config` store one as JSON or YAML (a run folder's
  ``config.json`` reads too);
* :func:`plan` does every check a run needs (device, model, task and its set-up, starting
  scripts, prompt budget, engine packages, the folder) before a folder is made or a model
  loads, and raises one :class:`rpg_core.cli.UsageError` naming the flag and the value;
* :func:`status` is the one rule for whether a run folder is new, resumable, finished (by its
  steps or by its execution budget, :func:`rpg_llm.loop.budget.stop_reason`) or broken;
* :func:`launch` runs a :class:`RunPlan` on its engine (the PPO loop or TRL), importing torch
  only then.

Sources: paper section 4 (Algorithm 1) for what a run does; DESIGN.md section 7 for the settings.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from rpg_core.cli import UsageError, out_folder
from rpg_llm.config import SPEED_ONLY_SETTINGS, LoopConfig
from rpg_llm.env import registry, tasks
from rpg_llm.env.actions import editable_baselines
from rpg_llm.env.service import check_ray_address
from rpg_llm.env.tasks.cliflags import mlebench_dir_arg, seed_dir_arg
from rpg_llm.flags import apply_flags, flag_names
from rpg_llm.learner.checkpoint import CheckpointDamaged, check_checkpoint_file
from rpg_llm.learner.models import check_model_name, resolve_model
from rpg_llm.loop import runidentity
from rpg_llm.loop.backends import seed_solutions
from rpg_llm.loop.budget import steps_done, stop_reason
from rpg_llm.loop.buffer import read_exec_seconds_by_row
from rpg_llm.loop.recording import StepRecord
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.presets import DEFAULT_PRESET, PRESETS, Preset, get_preset, missing_resources

__all__ = [
    "RunPlan",
    "RunStatus",
    "RunState",
    "make_config",
    "read_config",
    "write_config",
    "plan",
    "resume_config",
    "status",
    "config_difference",
    "check_checkpoint",
    "check_device",
    "check_engine",
    "check_executor",
    "check_prompt_budget",
    "trl_flags_given",
    "prepare_task",
    "launch",
]

RunState = Literal["new", "resumable", "finished", "broken"]


@dataclass(frozen=True)
class RunPlan:
    """A checked run: what :func:`launch` needs, built by :func:`plan`.

    Attributes:
        cfg: the run's settings.
        run_dir: the run folder.
        resume: continue the run in ``run_dir`` (else start it there).
        task_id: the task's resolved id (a competition id, or a NanoGPT task id).
        model_path: the policy's local folder (None when not resolved: a resume, whose
            model resolves when it loads).
    """

    cfg: LoopConfig
    run_dir: Path
    resume: bool
    task_id: str
    model_path: Path | None


@dataclass(frozen=True)
class RunStatus:
    """What a run folder holds, by :func:`status`.

    Attributes:
        run_dir: the folder.
        state: ``"new"`` (no run there), ``"resumable"``, ``"finished"`` or ``"broken"`` (a
            run that cannot be read or resumed; ``reason`` says why).
        steps_done: training steps the folder holds (:func:`rpg_llm.loop.budget.steps_done`).
        reason: ``"steps"`` or ``"budget"`` when finished (what ended it); the cause when
            broken; ``""`` otherwise.
        config: the folder's stored settings (None: new or unreadable).
    """

    run_dir: Path
    state: RunState
    steps_done: int = 0
    reason: str = ""
    config: LoopConfig | None = None

    @property
    def finished(self) -> bool:
        """Whether the run has nothing left to do."""
        return self.state == "finished"


# ------------------------------------------------------------------------------------ configs


def make_config(
    values: Mapping[str, Any], preset: str | None = None, base: LoopConfig | None = None
) -> LoopConfig:
    """The run's settings: ``base`` (a stored config) or the preset's, with ``values`` applied.

    Args:
        values: ``{dotted field path: value}`` (:func:`rpg_llm.flags.given_flags`).
        preset: a preset name (default :data:`rpg_llm.presets.DEFAULT_PRESET`); ignored with
            ``base``. A preset that names a data variable fills ``data_root`` from it.
        base: a config to start from instead of a preset (``--config FILE``).

    Folders (``seed_dir``, ``speedrun_dir``) are made absolute and the MLE-Bench tree is read
    from env ``RPG_MLEBENCH_DIR`` when not given, so that the stored config needs neither the
    working directory nor the environment on resume. A task with a timeout of its own (the
    NanoGPT stand-in) takes it unless ``--timeout`` is given or the preset is the task's own.
    A GPU preset with the TRL engine generates with vLLM unless ``--use-vllm`` is given.

    Raises:
        UsageError: an unknown preset or a bad value (the message names the flag).
    """
    values = dict(values)
    p = None if base is not None else _preset(preset)
    start = base if base is not None else p.config  # type: ignore[union-attr]
    if p is not None and p.data_env and not values.get("data_root") and not start.data_root:
        values["data_root"] = os.environ.get(p.data_env)
    try:
        cfg = apply_flags(start, values)
    except ValueError as err:
        raise UsageError(str(err)) from None
    tree = mlebench_dir_arg(Path(cfg.mlebench_dir) if cfg.mlebench_dir else None)
    folders = {
        k: str(Path(v).expanduser().absolute())
        for k in ("seed_dir", "speedrun_dir")
        if (v := getattr(cfg, k))
    }
    cfg = replace(cfg, mlebench_dir=str(tree) if tree is not None else None, **folders)
    own = registry.default_timeout_s(cfg.task)
    if own is not None and "reward.timeout_s" not in values and start.task != cfg.task:
        cfg = replace(cfg, reward=replace(cfg.reward, timeout_s=float(own)))
    if p is not None and cfg.engine == "trl" and p.gpus > 0 and "trl.use_vllm" not in values:
        cfg = replace(cfg, trl=replace(cfg.trl, use_vllm=True))
    return cfg


def _preset(name: str | None) -> Preset:
    name = name or DEFAULT_PRESET
    if name not in PRESETS:
        raise UsageError(f"--preset {name!r} is unknown; known: {', '.join(PRESETS)}")
    return get_preset(name)


def read_config(path: str | Path) -> LoopConfig:
    """The settings stored in ``path``: JSON, or YAML (``.yaml`` / ``.yml``); a run folder's
    ``config.json`` (its run-record keys are skipped) or a folder holding one.

    Raises:
        UsageError: naming ``--config``, the file and what is wrong with it.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text()
    except OSError as err:
        raise UsageError(f"--config {path}: cannot read it ({err.strerror or err})") from None
    try:
        data = yaml.safe_load(text) if p.suffix in (".yaml", ".yml") else json.loads(text)
    except (ValueError, yaml.YAMLError) as err:
        raise UsageError(f"--config {path}: not valid {_kind(p)} ({err})") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: holds no mapping of settings")
    try:
        return LoopConfig.from_dict(data)
    except (ValueError, TypeError) as err:
        raise UsageError(f"--config {path}: {err}") from None


def _kind(p: Path) -> str:
    return "YAML" if p.suffix in (".yaml", ".yml") else "JSON"


def write_config(cfg: LoopConfig, path: str | Path) -> Path:
    """Store ``cfg`` at ``path`` (YAML for ``.yaml`` / ``.yml``, else JSON), atomically."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    d = cfg.to_dict()
    text = yaml.safe_dump(d, sort_keys=False) if p.suffix in (".yaml", ".yml") else None
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text if text is not None else json.dumps(d, indent=2) + "\n")
    os.replace(tmp, p)
    return p


def config_difference(stored: LoopConfig, asked: LoopConfig) -> str | None:
    """The first setting in which ``asked`` differs from a folder's ``stored`` run, as
    ``"path = stored, asked"`` text; None when they are the same experiment. The step cap,
    the execution budget and the settings that change only speed and memory
    (:data:`rpg_llm.config.SPEED_ONLY_SETTINGS`) may differ (a resume may extend a run)."""
    a = stored.to_dict()
    b = replace(asked, steps=stored.steps, exec_budget_s=stored.exec_budget_s).to_dict()
    return _first_difference(a, b, "", SPEED_ONLY_SETTINGS)


def _first_difference(a: dict, b: dict, prefix: str, skip: Sequence[str]) -> str | None:
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if f"{prefix}{k}" in skip:
            continue
        if isinstance(va, dict) and isinstance(vb, dict):
            d = _first_difference(va, vb, f"{prefix}{k}.", skip)
            if d is not None:
                return d
        elif va != vb:
            return f"{prefix}{k} = {va!r}, asked {vb!r}"
    return None


# --------------------------------------------------------------------------------------- plan


def plan(
    cfg: LoopConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    preset: str | None = None,
    given_trl_flags: Sequence[str] = (),
    check_packages: bool = True,
    check_folder: bool = True,
) -> RunPlan:
    """Check everything a run of ``cfg`` in ``run_dir`` needs, before a folder is made or a
    model loads, in order: the folder (new), the engine (TRL and vLLM packages; TRL flags only
    with ``--engine trl``), the device, the model's name, the data folder, the task's set-up
    (:func:`rpg_llm.env.registry.check_setup`: the speedrun's folders and GPUs; a prepared
    MLE-Bench competition whose grader imports), the resources of a GPU or data ``preset``,
    the starting scripts (the edit format and SFT need some), then the model's weights
    (resolving the default model converts its GGUF weights once, seconds) and the edit
    prompt's token budget. A resume checks the engine and the task only.

    Args:
        cfg: the settings; run_dir: the run folder; resume: continue the run there (``cfg`` is
            then its stored config, :func:`resume_config`; the task and engine are checked, the
            model loads as stored).
        preset: the preset ``cfg`` came from (its GPU and data resources are checked).
        given_trl_flags: the TRL flags as the user gave them (``--num-generations`` ...).
        check_packages: check that TRL (and vLLM) are installed (False: the flags only).
        check_folder: refuse a folder that holds a run (False on the other processes of a
            multi-process run, which may see the main process make it).

    Raises:
        UsageError: the first problem found, naming the flag and the value.
    """
    run_dir = Path(run_dir)
    if not resume:
        out_folder("--out", str(run_dir))
        if check_folder and (run_dir / "config.json").exists():
            raise UsageError(f"--out {run_dir} already holds a run; use --resume {run_dir}")
    check_engine(cfg, given_trl_flags, need_packages=check_packages)
    check_executor(cfg)
    if not resume:
        check_device(cfg.device)
        try:
            check_model_name(cfg.model)  # a bad local folder, before the slower checks
        except ValueError as err:
            raise UsageError(f"--model {cfg.model}: {err}") from None
        if cfg.data_root is not None:
            out_folder("--data-root", cfg.data_root)
    try:
        task_id = registry.check_setup(
            cfg.task,
            data_root=cfg.data_root,
            mlebench_dir=cfg.mlebench_dir,
            speedrun_dir=cfg.speedrun_dir,
        )
    except ValueError as err:
        msg = str(err)
        where = f"--resume {run_dir}: the stored task {cfg.task!r}" if resume else "--task"
        raise UsageError(msg if msg.startswith("--") else f"{where} {cfg.task}: {msg}") from None
    if resume:
        return RunPlan(cfg, run_dir, True, task_id, None)
    if preset is not None:
        p = _preset(preset)
        if p.gpus > 0 or p.data_env is not None:
            missing = missing_resources(p, cfg.model, cfg.data_root)
            if missing:
                raise UsageError(f"--preset {p.name} needs " + "; ".join(missing))
    seeds = seed_dir_arg(Path(cfg.seed_dir)) if cfg.seed_dir is not None else None
    scripts = seeds if seeds is not None else seed_solutions(cfg)(task_id)
    if not registry.is_loss_task(task_id):
        _check_starting_scripts(cfg, scripts)
    try:
        model_path = resolve_model(cfg.model)
    except ValueError as err:
        raise UsageError(f"--model {cfg.model}: {err}") from None
    if cfg.action == "edit" and scripts:
        check_prompt_budget(cfg, model_path, scripts)
    return RunPlan(cfg, run_dir, False, task_id, model_path)


def resume_config(run_dir: str | Path, steps: int | None = None) -> LoopConfig:
    """The stored settings of the run in ``run_dir``, with ``steps`` extending it, checked
    against the run's identity record before anything is written or loaded: ``config.json``
    may differ from the settings the run was made with only in what a resume may change
    (:data:`rpg_llm.loop.runidentity.RESUME_MAY_CHANGE`), and the model's weights must be the
    ones it was made with (their SHA-256, where the record has it).

    Raises:
        UsageError: naming ``--resume``: not a run folder, an unreadable config or buffer, a
            setting that differs from the run's record (named, with both values), other model
            weights, or ``steps`` below the steps the run has already checkpointed.
    """
    folder = RunFolder(run_dir)
    try:
        cfg = LoopConfig.from_dict(folder.load_config())
        folder.check_resumable()  # the identity record first, then the buffer
        record = folder.load_identity()
        if steps is not None:
            cfg = apply_flags(cfg, {"steps": steps})
    except ValueError as err:
        raise UsageError(f"--resume {run_dir}: {err}") from None
    made = record.get("weights_sha256") if record is not None else None
    if made:
        _check_weights(run_dir, folder, cfg.model, str(made))
    done = folder.latest_checkpoint() or 0
    if cfg.steps < done:
        raise UsageError(
            f"--steps {cfg.steps}: the run in {run_dir} already has {done} checkpointed "
            f"steps; give --steps above {done} to extend it"
        )
    return cfg


def check_checkpoint(run_dir: str | Path, cfg: LoopConfig) -> None:
    """The PPO checkpoint a resume of ``run_dir`` will load must be whole (a zip check, no
    torch): checked before a model loads.

    Raises:
        UsageError: naming ``--resume``, the damaged file and what to do (move it aside and
            resume from the checkpoint before it, or start a new run).
    """
    folder = RunFolder(run_dir)
    step = folder.latest_checkpoint() if cfg.engine == "ppo" else None
    if step is None:
        return
    try:
        check_checkpoint_file(folder.checkpoint_path(step) / "trainer.pt")
    except CheckpointDamaged as err:
        advice = folder.damaged_checkpoint_advice(step)
        raise UsageError(f"--resume {run_dir}: {err}; {advice}") from None


def _check_weights(run_dir: str | Path, folder: RunFolder, model: str, made: str) -> None:
    """The weights of ``model`` here must hash to ``made`` (the run's record).

    Raises:
        UsageError: the model is not to be found, or its weights are others.
    """
    try:
        now = runidentity.model_digest(model, allow_download=True)
    except ValueError as err:
        raise UsageError(f"--resume {run_dir}: model {model!r}: {err}") from None
    if now != made:
        what = f"sha256 {now[:12]}..." if now else "no weight file"
        raise UsageError(
            f"--resume {run_dir}: the weights of model {model!r} are not the run's (made with "
            f"sha256 {made[:12]}..., here {what}; {folder.identity_path}); put the run's model "
            "back, or start a new run"
        )


def check_device(device: str | None) -> None:
    """``--device`` must name a torch device this machine has (``cuda`` without a GPU would
    load the weights, then fail inside torch).

    Raises:
        UsageError: naming ``--device`` and the value.
    """
    if device is None:
        return
    import torch  # the device check needs torch; planning otherwise does not

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


def check_engine(
    cfg: LoopConfig, trl_flags: Sequence[str] = (), need_packages: bool = True
) -> None:
    """``--engine trl`` needs TRL (and, with ``--use-vllm``, vLLM and a CUDA GPU); the TRL
    flags (``trl_flags``, as given) make no sense with ``--engine ppo``.

    Raises:
        UsageError: naming the flag and what is missing.
    """
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
        import torch  # the GPU check needs torch

        if not torch.cuda.is_available() or cfg.device == "cpu":
            raise UsageError("--use-vllm needs a CUDA GPU (none found, or --device cpu)")


def check_executor(cfg: LoopConfig) -> None:
    """``--executor ray`` needs Ray installed and, with ``--ray-address host:port``, a cluster
    that answers there (checked before any model loads).

    Raises:
        UsageError: naming ``--executor`` or ``--ray-address`` and what is wrong.
    """
    if cfg.executor != "ray":
        return
    if importlib.util.find_spec("ray") is None:
        raise UsageError("--executor ray needs Ray: pip install -e '.[ray]'")
    try:
        check_ray_address(cfg.ray_address or "local")
    except ValueError as err:
        raise UsageError(str(err)) from None


def trl_flags_given(values: Mapping[str, Any]) -> list[str]:
    """The flags of the TRL section among ``values`` (``{dotted path: value}``), as flags."""
    names = flag_names()
    return [names[k] for k in values if k.startswith("trl.")]


def check_prompt_budget(
    cfg: LoopConfig, model_path: Path, scripts: Sequence[tuple[str, str]]
) -> None:
    """Refuse a prompt budget that cannot hold an edit prompt's constants listing, outcome and
    answer rules (the prompt would be cut in its middle), before a model is loaded.

    Args:
        cfg: the run's settings (its task, ``describe``, timeout,
            ``sampling.max_prompt_tokens`` and ``seed_dir`` are read).
        model_path: a local model folder; only its tokenizer is loaded.
        scripts: the starting scripts ``(name, code)`` (the task's baselines or ``--seed-dir``).

    Raises:
        UsageError: naming ``--max-prompt-tokens``, its value, the script and the budget it needs.
    """
    from transformers import AutoTokenizer  # a tokenizer only: no model, no torch weights

    from rpg_llm.loop.rollout import min_edit_prompt_tokens

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    need, name = min_edit_prompt_tokens(tokenizer, cfg.describe, list(scripts), cfg.timeout_s)
    budget = cfg.sampling.max_prompt_tokens
    if need > budget:
        raise UsageError(
            f"--max-prompt-tokens {budget} is too small for the edit prompt of {_source(cfg)}'s "
            f"{name!r}: its constants listing, outcome and answer rules need {need} tokens "
            f"(give --max-prompt-tokens {need} or more)"
        )


def _source(cfg: LoopConfig) -> str:
    return f"--seed-dir {cfg.seed_dir}" if cfg.seed_dir is not None else f"task {cfg.task}"


def _check_starting_scripts(cfg: LoopConfig, scripts: Sequence[tuple[str, str]]) -> None:
    """The edit format and the SFT warm start start from the task's baseline (or --seed-dir)
    scripts: refuse a run that has none it can use.

    Raises:
        UsageError: naming ``--action edit`` or ``--sft-steps`` and the task.
    """
    if cfg.action == "edit":
        try:
            editable_baselines(list(scripts))
        except ValueError as err:
            raise UsageError(
                f"--action edit: {_source(cfg)} has {err}; give --seed-dir with such scripts, "
                "or use --action script --sft-steps 0"
            ) from None
    elif cfg.sft_steps > 0 and not scripts:
        raise UsageError(
            f"--sft-steps {cfg.sft_steps}: {_source(cfg)} has no baseline scripts to fine-tune "
            "on; give --seed-dir or --sft-steps 0"
        )


def prepare_task(cfg: LoopConfig, say: Callable[[str], None] = print) -> bool:
    """Build ``cfg.task``'s offline competition folder when this machine has none yet (or an
    outdated one), saying so first: it takes about a minute (the split, and the baseline
    ladder of its leaderboard). Other tasks are left alone.

    Returns:
        Whether a competition was built.
    """
    root = Path(cfg.data_root) if cfg.data_root else None
    if not registry.needs_prepare(cfg.task, root):
        return False
    comp_id = tasks.resolve_id(cfg.task)
    where = root if root is not None else tasks.default_data_root()
    say(
        f"preparing the offline competition {comp_id} in {where} (first use there: the split "
        "and the baselines of its leaderboard, about a minute)"
    )
    registry.prepare(cfg.task, root)
    return True


# ------------------------------------------------------------------------------------- status


def status(run_dir: str | Path, cfg: LoopConfig | None = None) -> RunStatus:
    """Whether ``run_dir`` is new, resumable, finished or broken, under ``cfg`` (the settings a
    caller asks of the folder; default: its stored config).

    Finished means :func:`rpg_llm.loop.budget.stop_reason` says so: the folder's steps
    (:func:`rpg_llm.loop.budget.steps_done`) reach ``cfg.steps``, or, with an execution
    budget, steps ``1 .. steps_done`` used every chain's budget (the run stopped on it). Reads
    the folder only (the buffer read-only).
    """
    folder = RunFolder(run_dir)
    root = Path(run_dir)
    if not folder.config_path.exists():
        return RunStatus(root, "new")
    try:
        stored = LoopConfig.from_dict(folder.load_config())
    except (ValueError, TypeError) as err:
        return RunStatus(root, "broken", reason=f"unreadable config.json: {err}")
    asked = cfg or stored
    try:
        folder.check_resumable()
    except ValueError as err:
        return RunStatus(root, "broken", reason=str(err), config=stored)
    done = steps_done(folder, asked.engine)
    totals: dict[int, float] = {}
    if asked.exec_budget_s is not None and done >= 1 and folder.buffer_path.exists():
        totals = read_exec_seconds_by_row(folder.buffer_path, done)
    why = stop_reason(asked, done, totals)
    state: RunState = "finished" if why is not None else "resumable"
    return RunStatus(root, state, done, why or "", stored)


# ------------------------------------------------------------------------------------- launch


def launch(
    p: RunPlan,
    *,
    progress: bool = True,
    on_stage: Callable[[int, str], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> list[StepRecord]:
    """Run (or resume) the planned run on its engine; the records of the steps it ran.

    A resumed folder made before identity records existed gets its record now, from its
    ``config.json`` (:func:`rpg_llm.loop.runidentity.adopt`; ``say`` tells so).
    The engines load torch and the model, so they are imported here, when a run starts.

    Raises:
        RunFolderBusy: another process runs or resumes the folder (a ``ValueError``).
    """
    if p.resume:
        folder = RunFolder(p.run_dir)
        if runidentity.adopt(folder.identity_path, folder.load_config(), p.cfg.model) and say:
            say(
                f"{folder.identity_path}: written from config.json (the folder had no identity "
                "record); a resume now refuses other settings"
            )
    if p.cfg.engine == "trl":
        from rpg_llm.engines.trl import train_trl  # TRL is an optional extra

        return train_trl(p.cfg, p.run_dir, resume=p.resume, progress=progress, on_stage=on_stage)
    if p.cfg.max_staleness >= 1:
        from rpg_llm.loop.asynchronous import train_async  # torch loads with the loop

        return train_async(p.cfg, p.run_dir, resume=p.resume, progress=progress, on_stage=on_stage)
    from rpg_llm.loop.trainer import train  # torch and the model load with the loop

    return train(p.cfg, p.run_dir, resume=p.resume, progress=progress, on_stage=on_stage)
