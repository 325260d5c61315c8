"""Recording stage: log file, TensorBoard, ``metrics.jsonl`` and checkpoints of a run.

Only the main process writes the run folder; every process keeps its own log file
(``logs/run.log``, ``logs/run.rank<R>.log``). Checkpoints are collective (every process calls
:meth:`Recorder.checkpoint`; the trainer's ``save`` lets the main process write).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rpg_core.cli import count
from rpg_llm.loop.buffer import Sample
from rpg_llm.loop.rewards import StepRewards
from rpg_llm.loop.runfolder import RunFolder

if TYPE_CHECKING:  # pragma: no cover
    from rpg_llm.loop.rollout import Rollout

__all__ = ["StepRecord", "step_record", "sample_rows", "Recorder", "json_metrics"]

log = logging.getLogger("rpg_llm.loop")


def json_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as strict JSON values: numbers as Python numbers, a non-finite float (``nan``:
    no valid generated sample yet) as ``None`` (JSON ``null``; ``NaN`` is not valid JSON).

    Raises:
        ValueError: a value that still is not JSON (checked with ``allow_nan=False``).
    """
    out: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    json.dumps(out, allow_nan=False)
    return out


@dataclass
class StepRecord:
    """Metrics of one finished step (one line of ``metrics.jsonl``; times in seconds).

    ``infra``: samples whose failure was the machine's, not the script's (masked out of PPO and
    of the estimator); ``capped``: responses cut at the token cap; ``best_generated``: the best
    valid raw reward of the policy's own samples so far (seed solutions never count; NaN: none);
    ``best_raw_reward``: the best raw reward of the buffer, seeds included (the bonus threshold);
    ``valid_mean_time_s`` / ``valid_mean_raw_reward``: mean measured execution time (seconds)
    and mean raw reward of the step's valid samples (NaN: none valid), what a policy that
    learns to be faster at equal quality moves;
    ``answers``: the step's answers by what they became
    (:func:`rpg_llm.loop.trainer.answer_counts`: ``edit``, ``changed``, ``script``, ``invalid``).
    With ``--engine trl`` the record is written by the reward call, before TRL's update:
    ``ppo_seconds`` is NaN (``null`` in the JSON) and ``step_seconds`` covers execution, grading
    and storage only.
    """

    step: int
    rho_hat: float
    rho_hat_parents: float
    mean_reward: float
    mean_raw_reward: float
    mean_delta: float
    valid_fraction: float
    best_raw_reward: float
    new_best: int
    gen_seconds: float
    exec_seconds: float
    ppo_seconds: float
    step_seconds: float
    gen_tokens: int
    replayed: bool
    ppo: dict[str, float]
    infra: int = 0
    capped: int = 0
    best_generated: float = float("nan")
    answers: dict[str, int] = field(default_factory=dict)
    valid_mean_time_s: float = float("nan")
    valid_mean_raw_reward: float = float("nan")

    def flat(self) -> dict[str, Any]:
        d = asdict(self)
        d.update({f"ppo/{k}": v for k, v in d.pop("ppo").items()})
        d.update({f"answers/{k}": v for k, v in d.pop("answers").items()})
        return d

    def line(self, steps: int, batch_size: int, method: str = "rpg") -> str:
        """One line for the terminal: what a user watches a run by. The RPG arm shows
        ``rho_hat`` and the mean relative reward it trains on; the vanilla arm, which uses
        neither, shows the mean raw reward (+ bonus) it trains on."""
        best = "none yet" if math.isnan(self.best_generated) else f"{self.best_generated:.4g}"
        infra = f", infra {self.infra}" if self.infra else ""
        if method == "vanilla":
            reward = f"mean reward {self.mean_reward:.4g}"
        else:
            reward = f"rho_hat {self.rho_hat:.4g}/s, mean relative reward {self.mean_reward:.4g}"
        a = self.answers
        edits = f", edits {a['changed']}/{a['edit']} changing a value" if a.get("edit") else ""
        return (
            f"step {self.step}/{steps}: valid {self.valid_fraction:.2f}{edits}, capped at the "
            f"token cap {self.capped}/{batch_size}, {reward}, "
            f"best generated raw reward {best}{infra}" + (" (replayed)" if self.replayed else "")
        )


def step_record(
    step: int,
    samples: list[Sample],
    sr: StepRewards,
    rho_parents: float,
    rollout: Rollout,
    exec_s: float,
    ppo_s: float,
    ppo_stats: dict[str, float],
    replayed: bool,
    best_generated: float = -math.inf,
) -> StepRecord:
    """The metrics of a step from its samples, :class:`rpg_llm.loop.rewards.StepRewards` and
    times."""
    valid = np.array([s.status == "ok" for s in samples])
    ok = [s for s in samples if s.status == "ok"]
    return StepRecord(
        step=step,
        rho_hat=sr.rho_hat,
        rho_hat_parents=rho_parents,
        mean_reward=float(np.mean(sr.rewards)),
        mean_raw_reward=float(np.mean([s.raw_reward for s in samples])),
        mean_delta=float(np.mean([s.exec_time for s in samples])),
        valid_fraction=float(valid.mean()),
        best_raw_reward=float(sr.best) if math.isfinite(sr.best) else float("nan"),
        new_best=int((sr.bonuses > 0).sum()),
        gen_seconds=float(rollout.gen_seconds),
        exec_seconds=exec_s,
        ppo_seconds=ppo_s,
        step_seconds=0.0,
        gen_tokens=int(rollout.gen_tokens),
        replayed=replayed,
        ppo=ppo_stats,
        infra=int(sum(s.status == "infra" for s in samples)),
        capped=int(rollout.capped),
        best_generated=float(best_generated) if math.isfinite(best_generated) else float("nan"),
        valid_mean_time_s=float(np.mean([s.exec_time for s in ok])) if ok else float("nan"),
        valid_mean_raw_reward=float(np.mean([s.raw_reward for s in ok])) if ok else float("nan"),
    )


def sample_rows(
    samples: list[Sample],
    folder: RunFolder,
    rewards: np.ndarray | None = None,
    tokens: Sequence[int | str] | None = None,
) -> list[dict[str, Any]]:
    """``samples.csv`` rows of stored samples (``rewards``: the relative rewards given to PPO,
    ``[B]``; ``tokens``: response lengths, ``""`` where unknown; both None for the seed
    solutions)."""
    return [
        {
            "step": s.step,
            "row": s.row,
            "id": s.id,
            "parent": "" if s.parent_id is None else s.parent_id,
            "status": s.status,
            "score": "" if s.score is None else f"{s.score:.6g}",
            "raw_reward": f"{s.raw_reward:.6g}",
            "time_s": f"{s.exec_time:.6g}",
            "relative_reward": "" if rewards is None else f"{float(rewards[i]):.6g}",
            "tokens": "" if tokens is None else tokens[i],
            "script": str(folder.script_path(s.step, s.row).relative_to(folder.root)),
        }
        for i, s in enumerate(samples)
    ]


class Recorder:
    """Writes what a run records. ``main``: this process writes the run folder."""

    def __init__(self, folder: RunFolder, main: bool, rank: int, start_step: int = 1):
        self.folder, self.main, self.start_step = folder, main, start_step
        folder.log_path.parent.mkdir(parents=True, exist_ok=True)
        name = "run.log" if main else f"run.rank{rank}.log"
        self._handler = logging.FileHandler(folder.log_path.with_name(name))
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        root = logging.getLogger("rpg_llm")
        root.setLevel(logging.INFO)
        root.addHandler(self._handler)
        self._tb = None

    @property
    def tb(self) -> Any:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.folder.tb_dir), purge_step=self.start_step)
        return self._tb

    def record(self, rec: StepRecord, t_start: float) -> StepRecord:
        """Set ``rec.step_seconds`` (from ``t_start``, a ``perf_counter`` value) and, on the
        main process, write TensorBoard scalars, the metrics line and the log line."""
        if not self.main:
            rec.step_seconds = time.perf_counter() - t_start
            return rec
        for k, v in rec.flat().items():
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                self.tb.add_scalar(k, v, rec.step)
        rec.step_seconds = time.perf_counter() - t_start
        self.tb.add_scalar("step_seconds", rec.step_seconds, rec.step)
        self.tb.flush()
        metrics = json_metrics(rec.flat())
        self.folder.append_metrics(metrics)
        log.info("step %d: %s", rec.step, json.dumps(metrics))
        return rec

    def record_sft(self, sft_step: int, loss: float) -> None:
        """Main process: one SFT step's loss (nats per answer token) to TensorBoard
        (``sft/loss`` at ``sft_step``) and ``metrics.jsonl`` (``step`` 0, before RL)."""
        if not self.main:
            return
        self.tb.add_scalar("sft/loss", loss, sft_step)
        self.tb.flush()
        self.folder.append_metrics(
            json_metrics({"step": 0, "sft_step": sft_step, "sft/loss": float(loss)})
        )
        log.info("SFT step %d: loss %.4f", sft_step, loss)

    def write_samples(
        self, samples: list[Sample], rewards: np.ndarray | None, tokens: list[int] | None
    ) -> None:
        """Main process: every sample's script under ``scripts/`` and its ``samples.csv`` row."""
        if not self.main:
            return
        for s in samples:
            self.folder.write_script(s.step, s.row, s.code)
        self.folder.append_samples_csv(sample_rows(samples, self.folder, rewards, tokens))

    def reset_samples(self, seeds: list[Sample], done: int) -> None:
        """Main process, before the first step run: seeds, then the rows of steps ``1..done``."""
        if not self.main:
            return
        for s in seeds:
            self.folder.write_script(s.step, s.row, s.code)
        self.folder.reset_samples_csv(sample_rows(seeds, self.folder), done)

    def rebuild_samples(
        self, seeds: list[Sample], steps: Sequence[tuple[list[Sample], np.ndarray]]
    ) -> None:
        """Main process, before the first step run: rewrite ``samples.csv`` from the buffer:
        the seeds, then each replayed step's samples with the relative rewards the replay gave
        them (``steps``: ``(samples, rewards)`` of steps ``1..done``, in order). The token
        counts come from the old file where it holds the row (the buffer has none; empty
        otherwise); a script missing under ``scripts/`` is written again."""
        if not self.main:
            return
        tokens = {(r["step"], r["row"]): r["tokens"] for r in self.folder.read_samples_csv()}
        rows = sample_rows(seeds, self.folder)
        for samples, rewards in steps:
            counts = [tokens.get((str(s.step), str(s.row)), "") for s in samples]
            rows += sample_rows(samples, self.folder, rewards, counts)
        for s in [*seeds, *(x for samples, _ in steps for x in samples)]:
            if not self.folder.script_path(s.step, s.row).exists():
                self.folder.write_script(s.step, s.row, s.code)
        self.folder.write_samples_csv(rows)

    def checkpoint(self, ppo: Any, step: int, keep: int) -> None:
        """Save the trainer state after ``step`` (collective), prune old checkpoints and the
        rollouts of the steps the oldest kept checkpoint covers (the later ones stay, so that a
        resume can continue from that checkpoint when a newer one is damaged)."""
        ppo.save(self.folder.checkpoint_path(step))
        if self.main:
            self.folder.prune_checkpoints(keep)
            kept = self.folder.checkpoints()
            self.folder.prune_rollouts(kept[0] if kept else step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        logging.getLogger("rpg_llm").removeHandler(self._handler)
        self._handler.close()


class Console:
    """What a run prints: one line per step (``StepRecord.line``) under a tqdm progress bar on
    the main process (no bar with ``progress=False``: plain lines), and the budget stop line.

    Args:
        cfg: the run's :class:`rpg_llm.config.LoopConfig`; start_step: the first step to run;
        main: whether this process prints; progress: whether to draw the bar.
    """

    def __init__(self, cfg: Any, start_step: int, main: bool, progress: bool) -> None:
        self.cfg, self.main = cfg, main
        self.bar: Any = None
        if progress and main:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=cfg.steps,
                initial=start_step - 1,
                desc=f"{cfg.method} steps",
                unit="step",
                dynamic_ncols=True,
            )

    def say(self, line: str) -> None:
        """Log ``line`` and print it (above the bar) on the main process."""
        if not self.main:
            return
        log.info(line)
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def step_done(self, rec: StepRecord) -> None:
        """The step's line, and the bar advanced with its rate, reward, time and validity."""
        self.say(rec.line(self.cfg.steps, self.cfg.batch_size, self.cfg.method))
        if self.bar is not None:
            self.bar.set_postfix(
                rho_hat=f"{rec.rho_hat:.3g}",
                reward=f"{rec.mean_reward:.3g}",
                delta=f"{rec.mean_delta:.1f}s",
                valid=f"{rec.valid_fraction:.2f}",
                refresh=False,
            )
            self.bar.update(1)

    def budget_spent(self, step: int) -> None:
        """Say that the execution budget was spent after ``step``; the bar ends full."""
        if self.bar is not None:
            self.bar.total = self.bar.n  # no step is missing
            self.bar.refresh()
        left = self.cfg.steps - step
        self.say(
            f"execution budget {self.cfg.exec_budget_s:g} s per chain spent after step {step}: "
            f"stopping ({left} of the {count(self.cfg.steps, 'step')} not needed)"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
