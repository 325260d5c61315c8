"""Seconds per PPO update: the general path against the single pass, side by side in one run.

    python benchmarks/ppo_update.py                  # SmolLM2-135M, B = 4, 512 + 24 tokens, LoRA 16
    python benchmarks/ppo_update.py --tiny --rounds 1 --no-record   # checks the script anywhere

Four trainers on the same weights, batch and scores, stepped in turn (one warm-up round, then
``--rounds`` timed rounds, so a change of machine load falls on all four alike):

* ``general, micro 1``: :meth:`rpg_llm.learner.ppo.PPOTrainer.step` with one sample per
  forward/backward (the ``cpu-default`` preset's micro-batch), forced onto the plain path (the
  no-grad rollout pass, then the update);
* ``critic in rollout, micro 1``: the same as the preset runs it, the critic's update done in the
  rollout pass (one critic forward fewer; same result, tests/llm/learner);
* ``general, micro B``: the same with the whole batch in one forward/backward;
* ``single pass``: ``micro B`` where the update's own forward passes give the rollout-time
  log-probs and values (one actor and one critic forward fewer; same result, tests/llm/learner).

The batch is ``B`` prompts of ``--prompt-len`` random ordinary tokens and answers of
``--response-len`` random tokens (the update does not read their text; the full table's prompts
are ~500 tokens, its edit answers ~20); LoRA rank 16 on actor and critic, one torch thread (the
``cpu-default`` setting). Peak RSS is the largest resident set seen during the update above the
resident set before it (sampled every 5 ms). Ratios are against ``general, micro 1`` from this
run. Appends the table to ``benchmarks/RESULTS.md`` unless ``--no-record``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from model_flags import add_model_flags, load, model_name  # noqa: E402

from rpg_core.cli import ArgumentParser, UsageError, at_least, run_cli  # noqa: E402

PROG = "python benchmarks/ppo_update.py"
PAGE = 4096


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


class PeakRSS:
    """Context manager: the largest resident set above the entry value, sampled every 5 ms."""

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_bytes())

    @property
    def extra_gb(self) -> float:
        return (self.peak - self.start) / 1e9


def _batch(tokenizer: Any, args: Any) -> Any:
    from rpg_llm.learner.ppo import PPOBatch

    gen = torch.Generator().manual_seed(0)
    special = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([i for i in range(len(tokenizer)) if i not in special])

    def ids(n: int) -> list[int]:
        return ordinary[torch.randint(0, len(ordinary), (n,), generator=gen)].tolist()

    # prompts of slightly different lengths, as a batch of different parents has
    queries = [ids(args.prompt_len - 8 * b) for b in range(args.batch)]
    answers = [ids(args.response_len) for _ in range(args.batch)]
    scores = torch.randn(args.batch, generator=gen).tolist()
    return PPOBatch.from_lists(queries, answers, scores, tokenizer.pad_token_id)


VARIANTS = ("general, micro 1", "critic in rollout, micro 1", "general, micro B", "single pass")
"""The update paths timed, and the ``single_pass`` argument of ``PPOTrainer.step`` for each."""
SINGLE_PASS: dict[str, bool | None] = dict(zip(VARIANTS, (False, None, False, True), strict=True))


def _trainer(args: Any, tmp: Path, variant: str) -> Any:
    from rpg_llm.learner.ppo import PPOConfig, PPOTrainer

    micro = 1 if variant.endswith("micro 1") else args.batch
    cfg = PPOConfig(
        micro_batch_size=micro, lora_rank=args.lora_rank, lora_alpha=32.0, actor_lr=2e-5,
        critic_lr=1e-4,
    )  # fmt: skip
    torch.manual_seed(0)  # the same LoRA initialisation in every trainer
    return PPOTrainer(load(args, tmp).model, cfg)


def _main(argv: Sequence[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    add_model_flags(p)
    p.add_argument("--batch", type=int, default=4, help="samples per update B")
    p.add_argument("--prompt-len", type=int, default=512, help="tokens of the longest prompt")
    p.add_argument("--response-len", type=int, default=24)
    p.add_argument("--lora-rank", type=int, default=16, help="0: full fine-tuning")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds after one warm-up round")
    p.add_argument("--no-record", action="store_true")
    args = p.parse_args(argv)
    for flag in ("batch", "response_len", "rounds"):
        at_least(f"--{flag.replace('_', '-')}", getattr(args, flag), 1)
    at_least("--lora-rank", args.lora_rank, 0)
    if args.prompt_len - 8 * (args.batch - 1) < 1:
        raise UsageError(f"--prompt-len {args.prompt_len} is too short for --batch {args.batch}")
    name = model_name(args)
    torch.set_num_threads(1)  # the cpu-default setting (config.cpu_threads)
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {v: _trainer(args, Path(tmp), v) for v in VARIANTS}
        batch = _batch(load(args, Path(tmp)).tokenizer, args)
        seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
        peaks: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.rounds + 1):
            for v in VARIANTS:
                with PeakRSS() as rss:
                    t0 = time.perf_counter()
                    trainers[v].step(batch, single_pass=SINGLE_PASS[v])
                    seconds[v].append(time.perf_counter() - t0)
                peaks[v].append(rss.extra_gb)
    header = (
        "| date | update | model | B x (prompt + answer) | LoRA r | s per update | vs micro 1 "
        "| peak RSS above start, GB |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    ref = statistics.mean(seconds[VARIANTS[0]][1:])
    for v in VARIANTS:
        s = statistics.mean(seconds[v][1:])
        lines.append(
            f"| {time.strftime('%Y-%m-%d')} | {v} | {name} | {args.batch} x ({args.prompt_len} "
            f"+ {args.response_len}) | {args.lora_rank} | {s:.3g} | {s / ref:.3g}x | "
            f"{max(peaks[v][1:]):.2f} |"
        )
    print("\n".join(lines))
    if not args.no_record:
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as fh:
            given = " ".join(argv if argv is not None else sys.argv[1:]) or "defaults"
            fh.write(f"\n`{PROG}` ({given}; {args.rounds} timed rounds):\n\n")
            fh.write("\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Time the four update paths and print the table (exit 2 on a usage error)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
