"""Does the trainer still wait for its slowest script? Synchronous steps against the
asynchronous loop (``--max-staleness 1`` and ``2``) on a synthetic task with heavy-tailed times.

    python benchmarks/async_execution.py [--samples 80] [--batch-size 8] [--median 2]

Every script "runs" as a Ray task on a local Ray instance (8 logical CPUs) that waits a time
drawn for it: lognormal with median ``--median`` seconds and sigma 1, and with probability 0.1 a
straggler at 10x the median; the draw is a function of the chain and its chain step (the same
chains wait the same times in every mode). Its outcome is a valid sample (score 0.5 + 0.1 x the
row's parity). The policy is the tiny random model (``testkit.tiny_model``, full fine-tuning at
learning rate 1e-3 so that a policy version differs from the last), the answers are taken as
scripts whatever they say, B = ``--batch-size``, and each mode trains until
``--samples / B`` updates have trained ``--samples`` samples.

Printed per mode: wall seconds per trained sample (and the ratio to the synchronous loop's), the
trainer's idle fraction (waiting on scripts with nothing else to do), and per update the PPO clip
fraction and approximate KL (the cost of staleness: the ratio against an older behaviour
policy). Ratios from one run; targets (issue 44): >= 1.5x fewer seconds per sample at K = 2,
clip fraction within 2x of the synchronous run's.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rpg_core.cli import ArgumentParser, UsageError, at_least, run_cli  # noqa: E402

PROG = "python benchmarks/async_execution.py"
STRAGGLER_P, STRAGGLER_X, SIGMA = 0.1, 10.0, 1.0


def draw_seconds(row: int, step: int, median: float) -> float:
    """The synthetic script time of chain ``row``'s ``step``-th script, seconds."""
    rng = np.random.default_rng([row, step, 44])
    t = float(median * math.exp(SIGMA * rng.standard_normal()))
    return median * STRAGGLER_X if rng.random() < STRAGGLER_P else t


def _wait(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


class SyntheticService:
    """Each submitted script a Ray task that waits its drawn time; the trainer sets
    ``chain`` (row, step) before each submit."""

    def __init__(self, median: float) -> None:
        import ray

        self.median = median
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_wait)
        self.chain: tuple[int, int] = (0, 1)

    def submit(self, codes: Sequence[str]) -> list[Future]:
        out = []
        for _ in codes:
            row, step = self.chain
            seconds = draw_seconds(row, step, self.median)
            done: Future = Future()
            ref = self._remote.remote(seconds)
            ref.future().add_done_callback(lambda f, d=done, r=row: d.set_result(_outcome(r, f)))
            out.append(done)
        return out

    def close(self) -> None:
        return None


def _outcome(row: int, f: Future) -> types.SimpleNamespace:
    t = float(f.result())
    r = 0.5 + 0.1 * (row % 2)
    return types.SimpleNamespace(
        status="ok", delta=t, score=r, raw_reward=r, valid=True, outcome_text=f"score {r}",
        cpu_s=t, percentile=None,
    )  # fmt: skip


def _config(model: Path, batch: int, updates: int, staleness: int):
    from rpg_llm.config import PPOConfig, RewardConfig
    from testkit.tiny_trainer import tiny_edit_config

    return tiny_edit_config(
        model, batch_size=batch, steps=updates, max_staleness=staleness, workers=batch,
        reward=RewardConfig("rpg", timeout_s=600.0),
        ppo=PPOConfig(micro_batch_size=batch, lora_rank=0, actor_lr=1e-3, critic_lr=1e-3),
    )  # fmt: skip


def _sync(cfg, run_dir: Path, median: float) -> dict[str, float]:
    """The synchronous loop: every step's B scripts at once, each chain its own step index."""
    from rpg_llm.loop import Trainer
    from testkit.tiny_trainer import bbc_backends

    trainer = Trainer(cfg, run_dir, backends=bbc_backends(["nb_tfidf"]), progress=False)
    service = SyntheticService(median)
    trainer.env.service.close()
    trainer.env.service = service
    real = service.submit

    def submit(codes):  # a step submits its B rows at once, row order
        step = trainer_state["step"]
        out = []
        for row, code in enumerate(codes):
            service.chain = (row, step)
            out.extend(real([code]))
        return out

    trainer_state = {"step": 1}
    service.submit = submit  # type: ignore[method-assign]
    t0 = time.perf_counter()
    records = []
    try:
        trainer.env.seed()
        trainer.env.rebuild(1)
        trainer.env.start(1, False)
        for step in range(1, cfg.steps + 1):
            trainer_state["step"] = step
            rec, _ = trainer.step(step)
            records.append(rec)
    finally:
        trainer.close()
    wall = time.perf_counter() - t0
    waiting = sum(r.exec_seconds for r in records)
    return _summary(records, wall, waiting / wall, cfg.steps * cfg.batch_size)


def _async(cfg, run_dir: Path, median: float) -> dict[str, float]:
    from rpg_llm.loop.asynchronous import AsyncTrainer
    from testkit.tiny_trainer import bbc_backends

    trainer = AsyncTrainer(cfg, run_dir, backends=bbc_backends(["nb_tfidf"]), progress=False)
    service = SyntheticService(median)
    trainer.env.service.close()
    trainer.env.service = service
    real = trainer._submit

    def submit(answers):
        for a in answers:
            service.chain = (a.row, a.step)
            real([a])

    trainer._submit = submit  # type: ignore[method-assign]
    t0 = time.perf_counter()
    try:
        records = trainer.run()
    finally:
        trainer.close()
    wall = time.perf_counter() - t0
    return _summary(records, wall, trainer.clock.idle / wall, cfg.steps * cfg.batch_size)


def _summary(records, wall: float, idle: float, samples: int) -> dict[str, float]:
    clip = [float(r.ppo.get("clipfrac", math.nan)) for r in records]
    kl = [float(r.ppo.get("approx_kl", math.nan)) for r in records]
    return {
        "wall_s": wall,
        "s_per_sample": wall / samples,
        "idle_fraction": idle,
        "clipfrac_mean": float(np.nanmean(clip)),
        "approx_kl_mean": float(np.nanmean(kl)),
        "staleness_max": max(float(r.ppo.get("staleness_max", 0.0)) for r in records),
    }


def _main(argv: Sequence[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    p.add_argument("--samples", type=int, default=80, help="samples to train on")
    p.add_argument("--batch-size", type=int, default=8, help="B")
    p.add_argument("--median", type=float, default=2.0, help="median script time, seconds")
    p.add_argument("--modes", default="0,1,2", help="max staleness values (0: synchronous)")
    args = p.parse_args(argv)
    at_least("--samples", args.samples, 1)
    at_least("--batch-size", args.batch_size, 1)
    if not args.median > 0:
        raise UsageError(f"--median must be > 0 seconds, got {args.median}")
    try:
        modes = [int(x) for x in args.modes.split(",")]
    except ValueError:
        raise UsageError(f"--modes {args.modes!r}: comma-separated integers >= 0") from None
    if args.samples % args.batch_size:
        raise UsageError(f"--samples {args.samples} must be a multiple of --batch-size")
    import ray

    import rpg_llm.loop.asynchronous as asynchronous
    from rpg_llm.env.actions import Action
    from testkit.tiny_model import build_tiny_model

    script = lambda *a, **k: Action("script", "print('ok')\n")  # noqa: E731
    asynchronous.parse_action = script  # type: ignore[assignment]  # the tiny model writes noise
    ray.init(num_cpus=max(8, args.batch_size), include_dashboard=False, log_to_driver=False)
    results = {}
    with tempfile.TemporaryDirectory(prefix="rpg-async-bench-") as tmp:
        model = build_tiny_model(Path(tmp) / "tiny")
        updates = args.samples // args.batch_size
        for k in modes:
            cfg = _config(model, args.batch_size, updates, k)
            run = Path(tmp) / f"k{k}"
            if k == 0:
                cfg = replace(cfg, max_staleness=0)
                results[k] = _sync_scripted(cfg, run, args.median)
            else:
                results[k] = _async(cfg, run, args.median)
            r = results[k]
            line = (
                f"K={k}: {r['s_per_sample']:.2f} s/sample, idle {r['idle_fraction']:.2f}, "
                f"clipfrac {r['clipfrac_mean']:.3f}, approx_kl {r['approx_kl_mean']:.2e}, "
                f"staleness max {r['staleness_max']:.0f} ({r['wall_s']:.0f} s)"
            )
            print(line, flush=True)
    ray.shutdown()
    base = results.get(0)
    print(
        "| mode | s / sample | ratio | idle fraction | clip fraction | approx KL | max staleness |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k, r in results.items():
        name = "synchronous" if k == 0 else f"--max-staleness {k}"
        ratio = base["s_per_sample"] / r["s_per_sample"] if base else math.nan
        print(
            f"| {name} | {r['s_per_sample']:.2f} | {ratio:.2f}x | {r['idle_fraction']:.2f} | "
            f"{r['clipfrac_mean']:.3f} | {r['approx_kl_mean']:.2e} | {r['staleness_max']:.0f} |"
        )
    return 0


def _sync_scripted(cfg, run_dir: Path, median: float) -> dict[str, float]:
    """:func:`_sync` with every answer taken as a script (the tiny model writes noise)."""
    from unittest import mock

    from rpg_llm.env.actions import Action

    with mock.patch(
        "rpg_llm.loop.execution.parse_action", lambda *a, **k: Action("script", "print('ok')\n")
    ):
        return _sync(cfg, run_dir, median)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
