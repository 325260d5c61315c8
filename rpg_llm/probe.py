"""Did the policy itself move? The trained policy and the SFT-only policy on the same fixed parents.

    python -m rpg_llm.probe RUN_DIR [--answers N] [--parents K] [--seed S]

A run's gains can come from the buffer (which parents are improved) or from the policy (what it
writes for a given parent). The probe separates the second: it takes ``K`` fixed parents from the
run's seeded baselines (:func:`fixed_parents`), asks both policies for ``N`` answers to each
parent's prompt with the same sampling settings and the same random seed, runs and grades every
answer in the run's sandbox, and compares mean execution time, mean raw reward and mean score of
the valid answers, and the valid fraction. Nothing is stored in the run's buffer; the answers go
to ``<RUN_DIR>/probe/probe.csv`` and the comparison to ``<RUN_DIR>/probe/probe.json``.

* SFT-only policy: the run's model with its SFT warm-start weights
  (``sft_weights.safetensors``, checked against the SHA-256 ``sft.json`` records; the base model
  when the run had no SFT; a run whose SFT weights or record are missing is refused, naming the
  file, never probed against the base model labelled "sft");
* trained policy: the same, with the run's last checkpoint loaded: PPO's
  (:meth:`PPOTrainer.load`: LoRA adapters or full weights), or for ``--engine trl`` TRL's last
  ``checkpoint-N`` (:func:`rpg_llm.engines.trl.trained_model`).

Source: the issue's "learning you can see" protocol; the loop's prompts, generation and
execution are the training loop's own (:mod:`rpg_llm.loop.rollout`, :mod:`rpg_llm.loop.execution`).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from safetensors.torch import load_model

from rpg_core.cli import ArgumentParser, UsageError, at_least, run_cli
from rpg_llm.config import LoopConfig
from rpg_llm.env.actions import editable_constants
from rpg_llm.learner.checkpoint import CheckpointDamaged, check_checkpoint_file
from rpg_llm.learner.policy import load_policy
from rpg_llm.learner.ppo import PPOTrainer
from rpg_llm.loop.backends import Backends, default_backends
from rpg_llm.loop.dist import Dist
from rpg_llm.loop.execution import execute_rows
from rpg_llm.loop.pipeline import Answers
from rpg_llm.loop.rollout import generate_rollout, parent_prompts
from rpg_llm.loop.runfolder import RunFolder
from rpg_llm.loop.warm_start import weights_digest

__all__ = [
    "PROG", "ProbeSummary", "fixed_parents", "summarise", "changed_outcomes", "probe", "main"
]  # fmt: skip

PROG = "python -m rpg_llm.probe"
PROBE_DIR = "probe"
PROBE_STEP = -1  # the step number the probe's (never stored) samples carry
CSV_FIELDS = [
    "policy",
    "parent_id",
    "parent_raw_reward",
    "parent_time_s",
    "answer",
    "status",
    "score",
    "raw_reward",
    "time_s",
]


@dataclass(frozen=True)
class ProbeSummary:
    """One policy's answers on the fixed parents.

    Attributes:
        policy: ``"sft"`` or ``"trained (step N)"``.
        answers: number of answers (``K * N``).
        valid_fraction: share of answers that ran and produced a gradable submission.
        mean_time_s: mean measured execution time of the valid answers, seconds (NaN: none).
        mean_raw_reward: mean raw reward of the valid answers (NaN: none).
        mean_score: mean task score of the valid answers, the task's own units (NaN: none).
    """

    policy: str
    answers: int
    valid_fraction: float
    mean_time_s: float
    mean_raw_reward: float
    mean_score: float


def fixed_parents(seeds: Sequence[Any], k: int, action: str) -> list[Any]:
    """``k`` parents spread over the seeded baselines' ranking by raw reward.

    The candidates are the valid step-0 samples (with the edit action, only scripts with
    editable constants), sorted by (raw reward, id); the parents are the candidates at the
    ranks ``round(i (n - 1) / (k - 1))``, ``i = 0 .. k - 1`` (weakest to strongest; one: the
    median). The rule depends on the buffer only, so every arm of a table gets the same parents.

    Raises:
        ValueError: ``k < 1`` or fewer than ``k`` candidates (the message gives both counts).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    pool = [s for s in seeds if s.status == "ok"]
    if action == "edit":
        pool = [s for s in pool if editable_constants(s.code)]
    if len(pool) < k:
        raise ValueError(f"{k} parents asked for, but the run has {len(pool)} candidate seeds")
    pool.sort(key=lambda s: (s.raw_reward, s.id))
    if k == 1:
        return [pool[(len(pool) - 1) // 2]]
    return [pool[round(i * (len(pool) - 1) / (k - 1))] for i in range(k)]


def summarise(policy: str, samples: Sequence[Any]) -> ProbeSummary:
    """:class:`ProbeSummary` of one policy's unsaved samples (``status == "ok"`` is valid)."""
    valid = [s for s in samples if s.status == "ok"]

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else math.nan

    return ProbeSummary(
        policy=policy,
        answers=len(samples),
        valid_fraction=len(valid) / len(samples) if samples else math.nan,
        mean_time_s=mean([s.exec_time for s in valid]),
        mean_raw_reward=mean([s.raw_reward for s in valid]),
        mean_score=mean([s.score for s in valid if s.score is not None]),
    )


def changed_outcomes(answers: Sequence[dict[str, str]]) -> tuple[int, int]:
    """How many of the trained policy's probe answers had another outcome than the SFT-only
    policy's answer to the same parent and draw.

    The probe samples both policies with the same seed (:func:`probe`), so an unchanged
    policy writes the same answers; an answer whose status or score differs is one the training
    changed (a changed script with the same outcome is not counted: a lower bound).

    Args:
        answers: ``probe.csv`` rows (:data:`CSV_FIELDS`): ``policy`` (``"sft"`` or
            the trained label), ``parent_id``, ``answer``, ``status``, ``score``.

    Returns:
        ``(changed, pairs)``: answers with another ``(status, score)``, and the pairs compared.

    Raises:
        ValueError: a pair missing on one side, or a trained label that is not one policy.
    """
    sides: dict[bool, dict[tuple[str, str], tuple[str, str]]] = {True: {}, False: {}}
    trained = {r["policy"] for r in answers if r["policy"] != "sft"}
    if len(trained) > 1:
        raise ValueError(f"probe answers of more than one trained policy: {sorted(trained)}")
    for r in answers:
        key = (str(r["parent_id"]), str(r["answer"]))
        sides[r["policy"] == "sft"][key] = (r["status"], r["score"])
    sft, new = sides[True], sides[False]
    if sft.keys() != new.keys():
        raise ValueError(f"probe answers not paired: {sorted(sft.keys() ^ new.keys())[:3]}")
    return sum(sft[k] != new[k] for k in sft), len(sft)


def probe(
    run_dir: str | Path,
    answers: int = 4,
    parents: int = 4,
    seed: int = 0,
    backends: Backends | None = None,
) -> list[ProbeSummary]:
    """Probe a finished (or stopped) run; returns ``[sft summary, trained summary]``.

    Args:
        run_dir: a run folder of ``python -m rpg_llm.run`` (either engine) with at least one
            checkpoint.
        answers: ``N`` answers per parent and policy.
        parents: ``K`` fixed parents (:func:`fixed_parents`); ``probe.json`` records them and
            the trained policy's step (``trained_step``).
        seed: sampling seed, the same for both policies.
        backends: :class:`rpg_llm.loop.backends.Backends` (default: the run's own).

    Raises:
        ValueError: not a run folder, no checkpoint or a damaged one, missing or other SFT
            weights, too few seeds (each names the file or the count).
    """
    folder = RunFolder(run_dir)
    if not folder.root.is_dir():
        what = "is not a folder" if folder.root.exists() else "does not exist"
        raise ValueError(f"{run_dir} {what}")
    if not folder.config_path.exists():
        raise ValueError(f"{run_dir}: not a run folder (no config.json)")
    cfg = LoopConfig.from_dict(folder.load_config())
    if cfg.engine == "trl" and importlib.util.find_spec("trl") is None:
        raise ValueError(f"{run_dir} is an --engine trl run: pip install -e '.[trl]'")
    step = folder.trained_step(cfg.engine)
    if step is None:
        where = f"{folder.trl_dir.name}/checkpoint-N" if cfg.engine == "trl" else "checkpoints/"
        raise ValueError(f"{run_dir}: no checkpoint to probe (nothing in {where})")
    if cfg.engine == "ppo":
        try:
            check_checkpoint_file(folder.checkpoint_path(step) / "trainer.pt")
        except CheckpointDamaged as err:
            raise ValueError(
                f"{err}; {folder.damaged_checkpoint_advice(step, probe=True)}"
            ) from None
    sft_record = _sft_record(folder, cfg)
    backends = backends or default_backends(cfg)
    task = backends.load_task(cfg.task, cfg.data_root)
    buffer = backends.buffer_cls(folder.buffer_path)
    try:
        chosen = fixed_parents(buffer.step_samples(cfg.name, 0), parents, cfg.action)
    finally:
        buffer.close()
    dist = Dist(Accelerator(cpu=cfg.device == "cpu" or not torch.cuda.is_available()))
    policy = load_policy(cfg.model, device=cfg.device or dist.acc.device)
    if sft_record is not None:
        load_model(policy.model, str(folder.sft_weights_path), strict=True)
        if weights_digest(policy.model) != sft_record.get("weights_sha256"):
            raise ValueError(
                f"{folder.sft_weights_path} holds other weights than {folder.root / 'sft.json'} "
                "records (their SHA-256 differ): the SFT-only policy would be mislabelled; "
                "restore the run's own file"
            )
    description = task.description if cfg.describe else ""
    tok = policy.tokenizer
    rows = [p for p in chosen for _ in range(answers)]
    budget = cfg.sampling.max_prompt_tokens
    prompts = parent_prompts(rows, description, cfg.timeout_s, budget, tok, cfg.action)
    sandbox = backends.make_sandbox(cfg.sandbox)
    service = backends.make_service(cfg, task, sandbox, backends.run_batch)

    def answers_of(model: Any) -> list[Any]:
        rollout = generate_rollout(
            PROBE_STEP, prompts, [p.id for p in rows], policy, model, cfg.sampling, seed, dist,
            cfg.cpu_threads, [p.code for p in rows],
        )  # fmt: skip
        answers = Answers.of_rollout(rollout)
        actions = answers.actions(cfg.action)
        samples, _ = execute_rows(answers, actions, cfg, task.id, backends.sample_cls, service)
        return samples

    try:
        sft = answers_of(policy.model)
        if cfg.engine == "trl":
            from rpg_llm.engines.trl import trained_model  # TRL is an optional extra

            model, step = trained_model(policy.model, folder.root, step)  # LoRA: in place
        else:
            trainer = PPOTrainer(
                policy.model, cfg.ppo, accelerator=dist.acc, temperature=cfg.sampling.temperature
            )
            trainer.load(folder.checkpoint_path(step))
            model = trainer.policy
        trained = answers_of(model)
    finally:
        service.close()
    # TRL's global step (its checkpoint), which after a resume can trail the buffer's steps
    label = f"trained (TRL step {step})" if cfg.engine == "trl" else f"trained (step {step})"
    summaries = [summarise("sft", sft), summarise(label, trained)]
    _write(folder.root / PROBE_DIR, rows, [sft, trained], summaries, answers, seed, step)
    return summaries


def _sft_record(folder: RunFolder, cfg: LoopConfig) -> dict[str, Any] | None:
    """The run's ``sft.json`` when it had an SFT warm start (None: it had none, the base model
    is the SFT-only policy).

    Raises:
        ValueError: the run had an SFT warm start (``sft.json``, or ``sft_steps`` > 0) but its
            weights or its record are missing: names the file (the probe never compares against
            the base model labelled "sft").
    """
    info = folder.root / "sft.json"
    weights = folder.sft_weights_path
    if not info.exists():
        if cfg.sft_steps > 0:
            raise ValueError(
                f"{folder.root} was made with an SFT warm start (sft_steps {cfg.sft_steps}) but "
                f"holds no {info.name}: its SFT-only policy is unknown; restore {info}"
            )
        return None
    if not weights.exists():
        raise ValueError(
            f"{info} records an SFT warm start but {weights} is missing: the probe would compare "
            f'the base model labelled "sft"; restore that file (a resume re-runs the seeded '
            f"SFT and stores it: python -m rpg_llm.run --resume {folder.root}, while the run "
            "has steps left)"
        )
    try:
        record = json.loads(info.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{info} cannot be read: {err}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{info} is not an SFT record (no JSON object)")
    return record


def _write(
    out: Path,
    parents: list[Any],
    samples: list[list[Any]],
    summaries: list[ProbeSummary],
    answers: int,
    seed: int,
    trained_step: int,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "probe.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for summary, batch in zip(summaries, samples, strict=True):
            for i, (p, s) in enumerate(zip(parents, batch, strict=True)):
                w.writerow(
                    {
                        "policy": summary.policy,
                        "parent_id": p.id,
                        "parent_raw_reward": p.raw_reward,
                        "parent_time_s": p.exec_time,
                        "answer": i % answers,
                        "status": s.status,
                        "score": "" if s.score is None else s.score,
                        "raw_reward": s.raw_reward,
                        "time_s": s.exec_time,
                    }
                )
    record = {
        "answers_per_parent": answers,
        "seed": seed,
        "parent_ids": sorted({p.id for p in parents}),
        "trained_step": trained_step,
        "parent_rule": "valid seeds (edit: with constants) by (raw reward, id), evenly spaced",
        "policies": [asdict(s) for s in summaries],
    }
    text = json.dumps(record, indent=1, allow_nan=True).replace("NaN", "null")
    (out / "probe.json").write_text(text + "\n")


def _line(s: ProbeSummary) -> str:
    return (
        f"{s.policy}: {s.answers} answers, valid {s.valid_fraction:.2f}, mean time "
        f"{s.mean_time_s:.3g} s, mean raw reward {s.mean_raw_reward:.4g}, mean score "
        f"{s.mean_score:.4g} (valid answers)"
    )


def _main(argv: Sequence[str] | None) -> int:
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run_dir", help="a run folder of python -m rpg_llm.run")
    ap.add_argument(
        "--answers", type=int, default=4, help="answers per parent and policy (default %(default)s)"
    )
    ap.add_argument(
        "--parents", type=int, default=4, help="fixed parents from the seeds (default %(default)s)"
    )
    ap.add_argument(
        "--seed", type=int, default=0, help="sampling seed, both policies (default %(default)s)"
    )
    args = ap.parse_args(argv)
    at_least("--answers", args.answers, 1)
    at_least("--parents", args.parents, 1)
    at_least("--seed", args.seed, 0)
    try:
        summaries = probe(args.run_dir, args.answers, args.parents, args.seed)
    except ValueError as err:
        text = str(err)
        message = f"--parents {args.parents}: {text}" if "parents asked" in text else text
        raise UsageError(message) from None
    for s in summaries:
        print(_line(s))
    answers = Path(args.run_dir) / PROBE_DIR / "probe.csv"
    with open(answers, newline="") as fh:
        changed, pairs = changed_outcomes(list(csv.DictReader(fh)))
    print(f"trained vs sft, same parent and draw: {changed} of {pairs} answers changed outcome")
    print(f"answers: {answers}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: exit 2 with one line on a usage error (a bad flag or run folder)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
