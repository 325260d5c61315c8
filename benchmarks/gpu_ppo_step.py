"""One PPO step of a Qwen3.5-4B-shaped policy on one GPU: peak memory, generation speed, step time.

    python benchmarks/gpu_ppo_step.py               # GPU: 4B shape, batch 8, 512-token responses
    python benchmarks/gpu_ppo_step.py --tiny        # anywhere: tiny qwen3_5_text, checks the script
    python benchmarks/gpu_ppo_step.py --config DIR  # the shape of a real checkpoint's config.json

Random weights (no download): the shape is ``Qwen3_5TextConfig`` with the 4B sizes below (or the
``--config`` folder's ``config.json``). The step is exactly the training loop's: sampling
(``rpg_llm.learner.policy.generate``, T = 0.7, top-k 20, top-p 0.8, EOS suppressed so every
response has
the full length) and one :meth:`rpg_llm.learner.ppo.PPOTrainer.step` (actor + critic + frozen
reference,
bf16 on GPU, gradient checkpointing, micro-batch 2). Prints one Markdown table row and appends it
to ``benchmarks/RESULTS.md`` unless ``--no-record`` or ``--tiny`` (a check of the script, not a
measurement).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rpg_core.cli import ArgumentParser, UsageError, at_least, run_cli  # noqa: E402
from rpg_llm.launch import check_device  # noqa: E402
from rpg_llm.learner.policy import Policy, generate, load_policy  # noqa: E402
from rpg_llm.learner.ppo import PPOBatch, PPOConfig, PPOTrainer  # noqa: E402
from testkit.tiny_model import build_tiny_model  # noqa: E402

SAMPLE_T = 0.7  # sampling temperature; the trainer's log-probs use it (rpg_llm.learner.forward)

# Qwen3.5-4B-like text shape (hybrid: 3 Gated-DeltaNet layers per full-attention layer)
QWEN35_4B_SHAPE = dict(
    vocab_size=248320,
    hidden_size=2560,
    intermediate_size=9216,
    num_hidden_layers=32,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    tie_word_embeddings=True,
)


def _policy(args: argparse.Namespace, device: torch.device, tmp: Path) -> Policy:
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen3_5TextConfig

    if args.tiny:
        folder = build_tiny_model(tmp / "tiny")
        return load_policy(str(folder), device=device)
    tiny_tok = load_policy(str(build_tiny_model(tmp / "tok")), device="cpu").tokenizer
    if args.config:
        config = AutoConfig.from_pretrained(args.config)
        config = getattr(config, "text_config", config)
    else:
        shape: dict[str, Any] = dict(QWEN35_4B_SHAPE)
        shape["layer_types"] = [
            "full_attention" if (i + 1) % 4 == 0 else "linear_attention"
            for i in range(shape["num_hidden_layers"])
        ]
        config = Qwen3_5TextConfig(**shape)
    config.pad_token_id = tiny_tok.pad_token_id
    config.eos_token_id = tiny_tok.eos_token_id
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return Policy(model.eval(), tiny_tok, device, "random", Path("random"))


PROG = "python benchmarks/gpu_ppo_step.py"


def main(argv: list[str] | None = None) -> int:
    """Time one step and print its row (``rpg_core.cli`` convention: exit 2 on a usage error)."""
    return run_cli(PROG, _main, argv)


def _main(argv: Sequence[str] | None) -> int:
    p = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny random model (runs on a CPU)")
    p.add_argument(
        "--config", default=None, help="folder with a config.json to take the shape from"
    )
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--response-len", type=int, default=512)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--device", default=None)
    p.add_argument(
        "--no-record",
        action="store_true",
        help="do not append the row to RESULTS.md (--tiny never does)",
    )
    args = p.parse_args(argv)
    for flag in ("batch", "prompt_len", "response_len", "micro_batch"):
        at_least(f"--{flag.replace('_', '-')}", getattr(args, flag), 1)
    check_device(args.device)
    if args.config is not None:
        if args.tiny:
            raise UsageError(f"--config {args.config}: the shape of --tiny is fixed; drop one")
        if not (Path(args.config) / "config.json").is_file():
            raise UsageError(f"--config {args.config}: no config.json in that folder")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda" and not args.tiny:
        raise UsageError("no CUDA GPU here; run with --tiny to check the script on a CPU")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        policy = _policy(args, device, Path(tmp))
    n_params = sum(p.numel() for p in policy.model.parameters())
    cfg = PPOConfig(micro_batch_size=args.micro_batch, gradient_checkpointing=device.type == "cuda")
    trainer = PPOTrainer(policy.model, cfg, temperature=SAMPLE_T)
    vocab = policy.model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    queries = torch.randint(3, min(vocab, 500), (args.batch, args.prompt_len), generator=gen)
    # suppress EOS so each response has exactly response_len tokens
    policy.model.generation_config.suppress_tokens = [policy.tokenizer.eos_token_id]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.synchronize(device)
    out = generate(
        policy,
        queries.tolist(),
        args.response_len,
        temperature=SAMPLE_T,
        seed=0,
        model=trainer.policy,
    )
    tokens_per_s = out.new_tokens / out.seconds
    batch = PPOBatch.from_lists(
        out.query_ids,
        out.response_ids,
        torch.randn(args.batch, generator=gen).tolist(),
        policy.tokenizer.pad_token_id,
    )
    # the sampler's per-token log-probs at T against the trainer's rollout-time ones (same
    # convention: log_softmax(logits / T) over the full vocabulary; bf16 on a GPU differs by
    # the precision of the logits and the KV-cache path)
    roll = trainer._rollout_stats(batch)
    sampled = torch.zeros_like(roll["old_logprobs"])
    for i, lp in enumerate(out.logprobs):
        sampled[i, : len(lp)] = torch.tensor(lp, dtype=sampled.dtype)
    m = batch.response_mask.to(sampled.device).bool()
    logp_gap = float((roll["old_logprobs"] - sampled)[m].abs().max())
    t0 = time.perf_counter()
    stats = trainer.step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    step_s = time.perf_counter() - t0
    peak = (
        torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    )
    name = "tiny qwen3_5_text" if args.tiny else (args.config or "Qwen3.5-4B shape")
    dev = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    row = (
        f"| {time.strftime('%Y-%m-%d')} | {name} ({n_params / 1e9:.2f} B params) | {dev} | "
        f"{args.batch} x ({args.prompt_len} + {args.response_len}) | {peak:.1f} | "
        f"{tokens_per_s:.4g} | {step_s:.3g} | {stats['kl']:.2g} |"
    )
    print(
        "| date | model | device | batch x (prompt + response) | peak GPU GiB | gen tokens/s "
        "| PPO step s | KL |"
    )
    print(row)
    print(
        f"max |trainer - sampler| log-prob at T = {SAMPLE_T}: {logp_gap:.3g} nats (EOS is "
        "suppressed in the sampler only, so this includes -log(1 - p_eos))"
    )
    if not (args.no_record or args.tiny):  # a tiny model checks the script: not a result
        results = ROOT / "benchmarks" / "RESULTS.md"
        with open(results, "a") as fh:
            fh.write(row + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
