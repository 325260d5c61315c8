"""Our PPO and TRL's GRPO side by side: generated answers per second and seconds per step.

    python benchmarks/engine_step.py                 # SmolLM2-135M, B = 4, 256 + 64 tokens, LoRA 16
    python benchmarks/engine_step.py --tiny --steps 1 --no-record   # checks the script anywhere

Both engines get the same model, the same ``B`` answers per step from the same prompt token ids
(``--prompt-len`` random tokens), the same answer length (EOS suppressed: every answer has
``--response-len`` tokens), sampling (T = 0.7, top-k 20, top-p 0.8), LoRA rank and micro-batch,
one torch thread on a CPU, and constant random rewards (no script runs: this times the engines,
not the environment). Our step is :func:`rpg_llm.learner.policy.generate` + one
:meth:`rpg_llm.learner.ppo.PPOTrainer.step` (actor, critic, and with full fine-tuning a frozen
reference); TRL's is one ``GRPOTrainer`` step (``B / G`` prompts x ``G`` answers, no critic, no
reference at ``beta = 0``). Each engine runs ``--steps`` steps after one warm-up step; the table
gives the mean of the timed ones, the ratios are TRL / ours from this one run. Appends the rows to
``benchmarks/RESULTS.md`` unless ``--no-record``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from model_flags import add_model_flags, load, model_name  # noqa: E402

from rpg_core.cli import ArgumentParser, UsageError, at_least, run_cli  # noqa: E402

PROG = "python benchmarks/engine_step.py"


class Sampling(TypedDict):
    """Sampling settings shared by both engines."""

    temperature: float
    top_k: int
    top_p: float


SAMPLE = Sampling(temperature=0.7, top_k=20, top_p=0.8)


def _prompt_ids(policy: Any, batch: int, length: int) -> list[list[int]]:
    """``batch`` prompts of ``length`` random ordinary tokens (their text re-tokenises to them:
    checked)."""
    tok = policy.tokenizer
    gen = torch.Generator().manual_seed(0)
    special = set(tok.all_special_ids)
    out = []
    while len(out) < batch:
        ids = torch.randint(0, len(tok), (length * 2,), generator=gen).tolist()
        ids = [i for i in ids if i not in special]
        text = tok.decode(ids)
        again = tok(text, add_special_tokens=False)["input_ids"][:length]
        if len(again) == length:
            out.append(again)
    return out


def ours(args: Any, policy: Any, prompts: list[list[int]]) -> list[tuple[float, float]]:
    """``(generation s, update s)`` of each step of our PPO (warm-up first)."""
    from rpg_llm.learner.policy import generate
    from rpg_llm.learner.ppo import PPOBatch, PPOConfig, PPOTrainer

    cfg = PPOConfig(micro_batch_size=args.micro_batch, lora_rank=args.lora_rank, lora_alpha=32.0)
    trainer = PPOTrainer(policy.model, cfg, temperature=SAMPLE["temperature"])
    policy.model.generation_config.suppress_tokens = [policy.tokenizer.eos_token_id]
    gen = torch.Generator().manual_seed(1)
    times = []
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        out = generate(
            policy, prompts, args.response_len, seed=step, model=trainer.policy, **SAMPLE
        )
        t1 = time.perf_counter()
        scores = torch.randn(len(prompts), generator=gen).tolist()
        pad = policy.tokenizer.pad_token_id
        trainer.step(PPOBatch.from_lists(out.query_ids, out.response_ids, scores, pad))
        times.append((t1 - t0, time.perf_counter() - t1))
    return times


def trl(args: Any, policy: Any, prompts: list[list[int]], tmp: Path) -> list[tuple[float, float]]:
    """``(generation s, update s)`` of each step of TRL's GRPOTrainer (warm-up first)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    tok = policy.tokenizer
    tok.padding_side = "left"
    g = args.num_generations
    texts = [tok.decode(p) for p in prompts[::g]]
    data = Dataset.from_dict({"prompt": texts * (args.steps + 1)})
    gen = torch.Generator().manual_seed(1)

    def reward(completions: list[Any], **_: Any) -> list[float | None]:
        return torch.randn(len(completions), generator=gen).tolist()

    marks: list[float] = []

    class Timed(GRPOTrainer):
        def _generate(self, prompts_: list) -> Any:  # time TRL's generation alone
            t0 = time.perf_counter()
            out = super()._generate(prompts_)
            marks.append(time.perf_counter() - t0)
            return out

    steps: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            steps.append(time.perf_counter())

        def on_step_end(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            steps[-1] = time.perf_counter() - steps[-1]

    micro = min(args.micro_batch, args.batch)
    config = GRPOConfig(
        output_dir=str(tmp / "trl"),
        max_steps=args.steps + 1,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=args.batch // micro,
        num_generations=g,
        max_completion_length=args.response_len,
        generation_kwargs={"suppress_tokens": [tok.eos_token_id]},
        learning_rate=1e-6,
        beta=0.0,
        shuffle_dataset=False,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        **SAMPLE,
    )
    lora = LoraConfig(r=args.lora_rank, lora_alpha=32, target_modules="all-linear")
    trainer = Timed(
        model=policy.model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tok,
        peft_config=lora if args.lora_rank else None,
        callbacks=[StepClock()],
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # TRL's per-step log dicts
    trainer.train()
    # the step clock includes generation (TRL generates inside its first micro-step)
    return [(m, s - m) for m, s in zip(marks, steps, strict=True)]


def _row(name: str, times: list[tuple[float, float]], batch: int, args: Any, n: int) -> tuple:
    timed = times[1:]
    gen_s = statistics.mean(t[0] for t in timed)
    upd_s = statistics.mean(t[1] for t in timed)
    step_s = gen_s + upd_s
    line = (
        f"| {time.strftime('%Y-%m-%d')} | {name} | {args.model_name} ({n / 1e6:.3g} M) | "
        f"{batch} x ({args.prompt_len} + {args.response_len}) | {args.lora_rank} | "
        f"{batch / gen_s:.3g} | {gen_s:.3g} | {upd_s:.3g} | {step_s:.3g} |"
    )
    return line, batch / gen_s, step_s, gen_s, upd_s


def _main(argv: Sequence[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    add_model_flags(p)
    p.add_argument("--batch", type=int, default=4, help="answers per step B")
    p.add_argument("--num-generations", type=int, default=2, help="TRL's G (answers per prompt)")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--response-len", type=int, default=64)
    p.add_argument("--lora-rank", type=int, default=16, help="0: full fine-tuning")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up step")
    p.add_argument("--no-record", action="store_true")
    args = p.parse_args(argv)
    for flag in ("batch", "prompt_len", "response_len", "micro_batch", "steps"):
        at_least(f"--{flag.replace('_', '-')}", getattr(args, flag), 1)
    at_least("--num-generations", args.num_generations, 2)
    at_least("--lora-rank", args.lora_rank, 0)
    if args.batch % args.num_generations:
        raise UsageError(
            f"--batch {args.batch} must be a multiple of --num-generations {args.num_generations}"
        )
    if args.batch % min(args.micro_batch, args.batch):
        raise UsageError(f"--batch {args.batch} must be a multiple of --micro-batch")
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        raise UsageError("needs TRL: pip install -e '.[trl]'")
    args.model_name = model_name(args)
    torch.set_num_threads(1)  # one thread is the fastest on the 2-core machine (RESULTS.md)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        policy = load(args, Path(tmp))
        n = sum(x.numel() for x in policy.model.parameters())
        prompts = _prompt_ids(policy, args.batch, args.prompt_len)
        ours_t = ours(args, policy, prompts)
        policy = load(args, Path(tmp))  # fresh weights for TRL
        trl_t = trl(args, policy, prompts, Path(tmp))
    header = (
        "| date | engine | model | B x (prompt + answer) | LoRA r | answers/s | generation s "
        "| update s | step s |"
    )
    r_ours = _row("ours: PPO (actor + critic)", ours_t, args.batch, args, n)
    r_trl = _row(f"TRL 1.16 GRPO (G = {args.num_generations})", trl_t, args.batch, args, n)
    print(header)
    print(r_ours[0])
    print(r_trl[0])
    ratio = (
        f"TRL / ours: answers/s {r_trl[1] / r_ours[1]:.3g}x, seconds per step "
        f"{r_trl[2] / r_ours[2]:.3g}x (generation {r_trl[3] / r_ours[3]:.3g}x, update "
        f"{r_trl[4] / r_ours[4]:.3g}x)"
    )
    print(ratio)
    if not args.no_record:
        with open(ROOT / "benchmarks" / "RESULTS.md", "a") as fh:
            given = " ".join(argv if argv is not None else sys.argv[1:]) or "defaults"
            fh.write(f"\n`{PROG}` ({given}):\n\n{header}\n")
            fh.write("|---|---|---|---|---|---|---|---|---|\n")
            fh.write(f"{r_ours[0]}\n{r_trl[0]}\n\n{ratio}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run both engines and print the table (exit 2 on a usage error)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
