"""Command-line flags generated from the settings dataclasses of :mod:`rpg_llm.config`.

Every leaf field of :class:`rpg_llm.config.LoopConfig` (nested configs recursed) is one flag,
named ``--<field>`` with ``_`` as ``-`` unless the field's metadata names another
(``field(metadata=flag("--timeout"))``); a field with metadata ``{"cli": False}`` gets none.
:func:`add_flags` adds them to a parser, :func:`given_flags` reads the values a user gave, and
:func:`apply_flags` folds them into a config, so a new field gets its flag by being declared.
Errors raised while a config is built name the flags (:func:`named_errors`), not the field names.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from collections.abc import Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any

from rpg_llm.config import LoopConfig

__all__ = [
    "FlagSpec",
    "config_flags",
    "flag_names",
    "add_flags",
    "given_flags",
    "apply_flags",
    "with_path",
    "named_errors",
]


class FlagSpec(typing.NamedTuple):
    """One generated flag: ``path`` (dotted field path), ``flag`` (``--name``), ``type`` (the
    field's type without ``None``), ``help``, ``choices``, ``default``."""

    path: str
    flag: str
    type: Any
    help: str
    choices: tuple[str, ...] | None
    default: Any


def _leaf_type(t: Any) -> Any:
    args = [a for a in typing.get_args(t) if a is not type(None)]
    return args[0] if args and typing.get_origin(t) in (typing.Union, type(int | None)) else t


def config_flags(
    cls: type = LoopConfig, prefix: str = "", exclude: Sequence[str] = ()
) -> list[FlagSpec]:
    """The flags of every leaf field of ``cls`` (nested dataclasses recursed), in field order,
    except the fields whose dotted paths ``exclude`` lists (``"seed"``, ``"reward.method"``).

    Raises:
        ValueError: two fields would get the same flag, or ``exclude`` names a path that has no
            flag.
    """
    hints = typing.get_type_hints(cls)
    out: list[FlagSpec] = []
    for f in fields(cls):
        t = hints[f.name]
        if isinstance(t, type) and is_dataclass(t):
            out.extend(config_flags(t, prefix + f.name + "."))
            continue
        if f.metadata.get("cli", True) is False:
            continue
        name = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else None
        out.append(
            FlagSpec(
                prefix + f.name,
                name,
                _leaf_type(t),
                f.metadata.get("help", ""),
                f.metadata.get("choices"),
                default,
            )
        )
    seen: dict[str, str] = {}
    for s in out:
        if s.flag in seen:
            raise ValueError(f"fields {seen[s.flag]} and {s.path} both map to {s.flag}")
        seen[s.flag] = s.path
    if exclude:
        unknown = sorted(set(exclude) - set(seen.values()))
        if unknown:
            raise ValueError(f"exclude names no flag's field: {', '.join(unknown)}")
        out = [s for s in out if s.path not in exclude]
    return out


def flag_names(cls: type = LoopConfig) -> dict[str, str]:
    """``{dotted field path: flag}`` for every generated flag."""
    return {s.path: s.flag for s in config_flags(cls)}


def _dest(path: str) -> str:
    return "cfg:" + path


def add_flags(
    parser: argparse.ArgumentParser, cls: type = LoopConfig, exclude: Sequence[str] = ()
) -> None:
    """Add one flag per leaf field of ``cls`` to ``parser`` (absent flags leave no value),
    except the fields whose dotted paths ``exclude`` lists (:func:`config_flags`)."""
    group = parser.add_argument_group("run settings (defaults: the preset's values)")
    for s in config_flags(cls, exclude=exclude):
        kw: dict[str, Any] = dict(dest=_dest(s.path), default=argparse.SUPPRESS, help=s.help)
        if s.type is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = s.type
            kw["metavar"] = s.path.rsplit(".", 1)[-1].upper()
            if s.choices:
                kw["choices"] = s.choices
        group.add_argument(s.flag, **kw)


def given_flags(args: argparse.Namespace) -> dict[str, Any]:
    """``{dotted field path: value}`` of the config flags present in ``args``."""
    return {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg:")}


def with_path(cfg: Any, path: str, value: Any) -> Any:
    """``cfg`` with the (possibly nested) field ``path`` (``"sampling.top_k"``) replaced."""
    head, _, rest = path.partition(".")
    if not rest:
        return replace(cfg, **{head: value})
    return replace(cfg, **{head: with_path(getattr(cfg, head), rest, value)})


def named_errors(message: str, cls: type = LoopConfig) -> str:
    """``message`` with each field name it mentions replaced by its flag (``timeout_s`` ->
    ``--timeout``, ``PPOConfig.clip_ratio`` -> ``--clip-ratio``)."""
    by_leaf: dict[str, str] = {}
    for s in config_flags(cls):
        by_leaf.setdefault(s.path.rsplit(".", 1)[-1], s.flag)
    names = sorted(by_leaf, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w-])(?:\w+Config\.)?(" + "|".join(names) + r")(?![\w-])")
    return pattern.sub(lambda m: by_leaf[m.group(1)], message)


def apply_flags(cfg: LoopConfig, values: dict[str, Any]) -> LoopConfig:
    """``cfg`` with the given ``{dotted path: value}`` replaced, every value checked once.

    Raises:
        ValueError: a bad value; the message names the flag.
    """
    try:
        return _with_paths(cfg, values)
    except ValueError as err:
        raise ValueError(named_errors(str(err))) from None


def _with_paths(cfg: Any, values: dict[str, Any]) -> Any:
    """``cfg`` with every ``{dotted path: value}`` replaced in one ``replace`` per dataclass, so
    that checks across fields (``--method fixed-lambda --fixed-lambda 0.01``, ``--batch-size``
    and ``--num-generations``) see all the new values together, whatever their order."""
    leaves: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            leaves[head] = value
    for head, sub in nested.items():
        leaves[head] = _with_paths(getattr(cfg, head), sub)
    return replace(cfg, **leaves) if leaves else cfg
