"""What this project reads of MLE-Bench without depending on it: grader names and its package.

A competition's ``config.yaml`` names its grader ``grader.grade_fn: "package.module:function"``
(:func:`split_grade_fn` checks and splits it). The ``mlebench`` package itself is optional: its
registry is searched for competitions only when it imports completely (:func:`mlebench_status`,
:func:`mlebench_registry`), and an import failure of a grader that needs it names its state.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__all__ = ["mlebench_registry", "mlebench_status", "split_grade_fn"]


def split_grade_fn(spec: object, where: str = "grade_fn") -> tuple[str, str]:
    """Split ``"package.module:function"`` into ``(module, function)``.

    Raises:
        ValueError: ``spec`` is not of that form (the message names ``where`` and the value).
    """
    if not isinstance(spec, str):
        raise ValueError(f"{where} must be 'module:function', got {spec!r}")
    module_name, sep, fn_name = spec.partition(":")
    if not sep or not all(module_name.split(".")) or not fn_name or ":" in fn_name:
        raise ValueError(f"{where} must be 'module:function', got {spec!r}")
    return module_name, fn_name


def mlebench_status() -> tuple[str, str]:
    """Whether the ``mlebench`` package can be used.

    Returns:
        ``("absent", "")`` when no ``mlebench`` package is found; ``("partial", why)`` when it is
        found but ``mlebench.registry`` / ``mlebench.grade_helpers`` fail to import (a missing
        dependency, say), ``why`` being the error; ``("complete", "")`` otherwise.
    """
    try:
        spec = importlib.util.find_spec("mlebench")
    except (ImportError, ValueError) as exc:
        return "partial", f"{type(exc).__name__}: {exc}"
    if spec is None:
        return "absent", ""
    try:
        importlib.import_module("mlebench.grade_helpers")
        importlib.import_module("mlebench.registry")
    except Exception as exc:  # noqa: BLE001 - any failure means the install is incomplete
        return "partial", f"{type(exc).__name__}: {exc}"
    return "complete", ""


def mlebench_registry() -> Any | None:
    """``mlebench.registry.registry`` when mlebench imports completely, else None (an object of
    the optional package: untyped here)."""
    if mlebench_status()[0] != "complete":
        return None
    return importlib.import_module("mlebench.registry").registry
