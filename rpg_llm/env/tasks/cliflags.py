"""Command-line flags shared by every entry point that takes a competition.

``--data-root DIR`` (default env ``RPG_DATA_ROOT``): the folder of competition folders;
``--mlebench-dir DIR`` (default env ``RPG_MLEBENCH_DIR``): the root of an MLE-Bench tree read
directly (:mod:`rpg_llm.env.tasks.format`); ``--seed-dir DIR``: a folder of seed solution scripts
(:mod:`rpg_llm.env.tasks.seeds`). Each ``*_arg`` function checks the value at the boundary and
raises
:class:`rpg_core.cli.UsageError` naming the flag and the value.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rpg_core.cli import UsageError
from rpg_llm.env.tasks.format import check_mlebench_dir, default_data_root, default_mlebench_dir
from rpg_llm.env.tasks.seeds import seed_scripts


def add_mlebench_dir_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--mlebench-dir DIR`` (a ``Path``, default None: env ``RPG_MLEBENCH_DIR``)."""
    parser.add_argument(
        "--mlebench-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="root of an MLE-Bench tree (holding mlebench/competitions/<id>/), read without the "
        "mlebench package; default env RPG_MLEBENCH_DIR",
    )


def mlebench_dir_arg(value: Path | None) -> Path | None:
    """The tree of ``--mlebench-dir`` (else env ``RPG_MLEBENCH_DIR``, else None), checked.

    Raises:
        UsageError: the folder has no ``mlebench/competitions`` (names the flag or the
            environment variable, and the value).
    """
    tree = value if value is not None else default_mlebench_dir()
    if tree is None:
        return None
    flag = "--mlebench-dir" if value is not None else "RPG_MLEBENCH_DIR"
    try:
        return check_mlebench_dir(tree)
    except ValueError as exc:
        raise UsageError(f"{flag} {tree}: {exc}") from exc


def seed_dir_arg(value: Path | None) -> list[tuple[str, str]] | None:
    """The ``(name, code)`` scripts of ``--seed-dir`` (None when the flag is not given).

    Raises:
        UsageError: not a folder, no ``.py`` file, or a file that is not valid Python (names
            ``--seed-dir``, the value and the file).
    """
    if value is None:
        return None
    try:
        return seed_scripts(value)
    except ValueError as exc:
        raise UsageError(f"--seed-dir {value}: {exc}") from exc


def data_root_arg(value: Path | None, *, writable: bool) -> Path:
    """The folder of ``--data-root`` (else env ``RPG_DATA_ROOT``, else the default), checked.

    Args:
        value: the flag's value, or None.
        writable: the command builds competitions there: the folder is made when missing and
            must accept new files.

    Raises:
        UsageError: the path is not a folder, or (``writable``) cannot be made or written
            (names the flag or the environment variable, and the value).
    """
    root = Path(value).expanduser() if value is not None else default_data_root()
    from_env = value is None and bool(os.environ.get("RPG_DATA_ROOT"))
    flag = "RPG_DATA_ROOT" if from_env else "--data-root"
    if root.exists() and not root.is_dir():
        raise UsageError(f"{flag} {root}: exists and is not a folder")
    if not writable:
        return root
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {root}: cannot make the folder ({exc.strerror or exc})") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {root}: the folder is not writable")
    return root
