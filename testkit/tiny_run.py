"""The tiny-model ``python -m rpg_llm.run`` arguments and subprocess call the CLI tests share.

Every end-to-end run test drives the real CLI with the tiny random model
(``testkit.tiny_model``): a few short generations (8 new tokens, 768 prompt tokens), the
subprocess sandbox backend and no progress bar or plots, so that one step costs seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from testkit import REPO_ROOT

__all__ = ["REPO", "TINY_RUN_FLAGS", "tiny_run_args", "run_module"]

REPO = REPO_ROOT
"""The checkout the subprocesses import (put first on their ``PYTHONPATH``)."""

TINY_RUN_FLAGS: tuple[str, ...] = (
    "--max-new-tokens",
    "8",
    "--max-prompt-tokens",
    "768",
    "--sandbox",
    "subprocess",
    "--no-progress",
    "--no-plot",
)
"""Generation and output flags of every tiny-model run (short answers, no plots, no tqdm)."""


def tiny_run_args(
    model: Path | str,
    out: Path | str,
    *,
    steps: int = 1,
    batch_size: int = 2,
    extra: Sequence[str] = (),
) -> list[str]:
    """``rpg_llm.run`` arguments of a tiny-model run of ``steps`` steps of ``batch_size`` rows.

    Args:
      model: the tiny model's folder (``fixtures_llm.tiny_model_dir``).
      out: the run folder to create.
      steps: ``--steps`` (>= 1).
      batch_size: ``--batch-size`` (>= 1).
      extra: further flags, placed before ``--out`` (a later flag wins in argparse).

    Returns:
      The argument list (strings), ending with ``--out OUT``.

    Raises:
      ValueError: ``steps`` or ``batch_size`` below 1.
    """
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"tiny_run_args: {name} must be an int >= 1, got {value!r}")
    args = ["--model", str(model), "--steps", str(steps), "--batch-size", str(batch_size)]
    return [*args, *TINY_RUN_FLAGS, *extra, "--out", str(out)]


def run_module(
    module: str,
    args: Sequence[str],
    env_extra: Mapping[str, str] | None = None,
    timeout: float = 900.0,
    python_args: Sequence[str] = ("-m",),
    env_drop: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` from the checkout with it first on ``PYTHONPATH``.

    Args:
      module: the module to run (``"rpg_llm.run"``, ``"torch.distributed.run"``, ...).
      args: its arguments.
      env_extra: environment variables to add (e.g. ``{"RPG_KILL_AT": "2:stored"}``).
      timeout: wall-clock limit, seconds (``subprocess.TimeoutExpired`` past it).
      python_args: what precedes ``module`` on the interpreter's command line (default
        ``-m``; e.g. ``("-c", CODE)`` to run a launcher that reads the module from argv).
      env_drop: environment variables to remove (before ``env_extra`` is added).

    Returns:
      The finished process, stdout and stderr captured as text.
    """
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO))
    for key in env_drop:
        env.pop(key, None)
    env.update(env_extra or {})
    cmd = [sys.executable, *python_args, module, *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
