"""The run settings as flags of the table: every ``rpg_llm.run`` settings flag (generated from
:class:`rpg_llm.config.LoopConfig` by :mod:`rpg_llm.flags`) but the per-run ones
(:data:`paper_figures.llm_table.plan.PER_RUN`), so ``--time cpu`` or ``--actor-lr 1e-4`` can
be given to the table directly. ``--run-args TEXT`` takes the same flags as one string, parsed by
the same flags (:func:`run_args_values`) and applied after the others; a flag that is not a
shared run setting there (``--seed``, ``--out``) is a usage error naming it.

The protocol's flags (:data:`PROTOCOL_FLAGS`: ``--steps``, ``--batch-size``, ``--exec-budget``,
``--max-new-tokens``, ``--max-prompt-tokens``, ``--sft-seed``) are the same settings with help
texts stating the table's defaults; ``--exec-budget`` also takes ``none`` (no budget).
"""

from __future__ import annotations

import argparse
import math
import shlex
from collections.abc import Callable, Collection
from dataclasses import dataclass

from paper_figures.llm_table.plan import PER_RUN
from paper_figures.llm_table.settings import FULL, QUICK, TableSettings
from rpg_core.cli import ArgumentParser, UsageError
from rpg_llm.flags import add_flags, flag_names, given_flags

__all__ = [
    "exec_budget",
    "defaults",
    "ProtocolFlag",
    "PROTOCOL_FLAGS",
    "add_run_flags",
    "run_values",
    "run_args_values",
]


def exec_budget(text: str) -> float | None:
    """``--exec-budget``: seconds > 0, or ``none`` (every run takes ``--steps`` steps).

    Raises:
        argparse.ArgumentTypeError: anything else (argparse names the flag).
    """
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds > 0, or none")
    return value


def _text(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def defaults(read: Callable[[TableSettings], object]) -> str:
    """``default X; --quick Y`` for a help text, read from :data:`FULL` and :data:`QUICK`."""
    return f"default {_text(read(FULL))}; --quick {_text(read(QUICK))}"


@dataclass(frozen=True)
class ProtocolFlag:
    """A run setting the protocols set, as a flag of the table.

    Attributes:
        flag: the flag (``rpg_llm.run``'s own name); path: its dotted ``LoopConfig`` path;
        kind: converts the text (argparse ``type``); help: what it is, without the default.
    """

    flag: str
    path: str
    kind: Callable[[str], object]
    help: str

    @property
    def dest(self) -> str:
        """The namespace attribute the flag's value is stored in."""
        return "run:" + self.path


PROTOCOL_FLAGS = (
    ProtocolFlag("--steps", "steps", int, "training steps per run, the cap with a budget"),
    ProtocolFlag(
        "--exec-budget",
        "exec_budget_s",
        exec_budget,
        "execution budget per chain, seconds of the time measure (CPU-s by default): runs "
        "stop once every chain has used it or at the step cap, and the table is read there; "
        "none: same steps for both arms",
    ),
    ProtocolFlag("--batch-size", "batch_size", int, "prompts per step, the chains"),
    ProtocolFlag("--max-new-tokens", "sampling.max_new_tokens", int, "response cap, tokens"),
    ProtocolFlag("--max-prompt-tokens", "sampling.max_prompt_tokens", int, "prompt budget, tokens"),
    ProtocolFlag(
        "--sft-seed",
        "sft_seed",
        int,
        "seed of the SFT warm start shared by every run of a task (the SFT weights are then "
        "computed once per task, rpg_llm.learner.sft_cache)",
    ),
)
"""The protocol's run settings as table flags (help with the protocols' defaults)."""


def add_run_flags(p: ArgumentParser) -> None:
    """Add the shared run settings to ``p``: :data:`PROTOCOL_FLAGS` and every other
    ``rpg_llm.run`` settings flag but the per-run ones (an absent flag leaves no value)."""
    for f in PROTOCOL_FLAGS:
        default = defaults(lambda s, path=f.path: s.run.get(path, "the preset's"))
        p.add_argument(
            f.flag,
            dest=f.dest,
            type=f.kind,
            default=argparse.SUPPRESS,
            metavar=f.flag[2:].upper().replace("-", "_"),
            help=f"{f.help} ({default.replace('None', 'none')})",
        )
    add_flags(p, exclude=PER_RUN + tuple(f.path for f in PROTOCOL_FLAGS))


def run_values(args: argparse.Namespace) -> dict[str, object]:
    """``{dotted path: value}`` of the run settings given in ``args`` (:func:`add_run_flags`)."""
    given: dict[str, object] = dict(given_flags(args))
    for f in PROTOCOL_FLAGS:
        if hasattr(args, f.dest):
            given[f.path] = getattr(args, f.dest)
    return given


def run_args_values(text: str | None, table_flags: Collection[str] = ()) -> dict[str, object]:
    """``{dotted path: value}`` of ``--run-args TEXT``: shared run settings as flags, one
    shell-quoted string (:func:`add_run_flags`).

    Args:
        text: the flags (None or empty: none).
        table_flags: the table's own flags, named in the message when ``text`` gives one.

    Raises:
        UsageError: naming ``--run-args`` and the text: unbalanced quotes, a bad value (naming
            its flag), or a flag that is no shared run setting (naming it).
    """
    if not text:
        return {}
    try:
        argv = shlex.split(text)
    except ValueError as err:  # e.g. an unclosed quote
        raise UsageError(f"--run-args {text!r}: {err}") from None
    p = ArgumentParser(prog="--run-args", add_help=False, allow_abbrev=False)
    add_run_flags(p)
    try:
        ns, extra = p.parse_known_args(argv)
    except UsageError as err:
        raise UsageError(f"--run-args {text!r}: {err}") from None
    if extra:
        flag = next((a.split("=", 1)[0] for a in extra if a.startswith("-")), extra[0])
        if flag in table_flags:
            why = f"{flag} is a flag of the table itself: give the table's own {flag}"
        else:
            names = flag_names()
            per_run = ", ".join(names[k] for k in PER_RUN)
            why = (
                f"{flag} is not a python -m rpg_llm.run setting every run shares (the table "
                f"sets {per_run} and the run folder per run)"
            )
        raise UsageError(f"--run-args {text!r}: {why}")
    return run_values(ns)
