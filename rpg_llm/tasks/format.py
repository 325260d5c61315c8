"""MLE-Bench competition folders: reading them into :class:`Competition`.

Layout (MLE-Bench, openai/mle-bench ``registry.py``; DESIGN.md section 7)::

    <data_root>/<id>/config.yaml          id, name, description (file name), dataset.answers,
                                          dataset.sample_submission (paths relative to data_root),
                                          grader.grade_fn ("module:function"),
                                          optional lower_is_better
    <data_root>/<id>/description.md       the text shown to the policy
    <data_root>/<id>/leaderboard.csv      a "score" column; direction read from config, else from
                                          the board's order (best first, as MLE-Bench infers it)
    <data_root>/<id>/prepared/public/     train / test / sample_submission, what a script sees
    <data_root>/<id>/prepared/private/    answers, never shown to a script

When the ``mlebench`` package is importable and its registry knows the id, the competition comes
from ``mlebench.registry.registry`` (its config, description, leaderboard and data layout) and is
graded by ``mlebench.grade.grade_csv`` (see :mod:`rpg_llm.tasks.grading`).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

DEFAULT_TEXT_TASK = "bbc-news-logloss"
"""The offline text competition used by the default training run."""

TASK_ALIASES: dict[str, str] = {"text": DEFAULT_TEXT_TASK}
"""Short names accepted wherever a competition id is."""


@dataclass(frozen=True)
class Competition:
    """One competition folder, loaded.

    Attributes:
        id: competition id (folder name).
        root: ``<data_root>/<id>``.
        public_dir: ``<root>/prepared/public`` (what a solution script reads as ``./input``).
        private_dir: ``<root>/prepared/private`` (answers; never inside the sandbox).
        description: markdown text shown to the policy.
        lower_is_better: direction of ``score``.
        grade_fn: ``"module:function"`` from ``config.yaml`` ``grader.grade_fn``.
        leaderboard: table with a ``score`` column, or None when the folder has none (left out
            of equality and hashing).
        answers: path of the private answers CSV.
        sample_submission: path of the public sample submission CSV.
        source: ``"folder"`` (read by us) or ``"mlebench"`` (from the mlebench registry).
    """

    id: str
    root: Path
    public_dir: Path
    private_dir: Path
    description: str
    lower_is_better: bool
    grade_fn: str
    leaderboard: pd.DataFrame | None = field(compare=False)
    answers: Path | None = None
    sample_submission: Path | None = None
    source: str = "folder"


def default_data_root() -> Path:
    """Competition data root: env ``RPG_DATA_ROOT``, else ``~/.cache/rpg/competitions``."""
    env = os.environ.get("RPG_DATA_ROOT")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rpg" / "competitions"


def resolve_id(name: str) -> str:
    """Map an alias (``"text"``) to its competition id; other names pass through.

    Raises:
        ValueError: empty name or one containing a path separator.
    """
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in {".", ".."}:
        raise ValueError(f"bad competition name {name!r}")
    return TASK_ALIASES.get(name, name)


def import_fn(spec: str) -> Any:
    """Import ``"package.module:function"`` and return the function.

    Raises:
        ValueError: ``spec`` is not of the form ``module:function`` or cannot be imported.
    """
    module_name, sep, fn_name = spec.partition(":")
    if not sep or not module_name or not fn_name:
        raise ValueError(f"grade_fn must be 'module:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, fn_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import grade_fn {spec!r}: {exc}") from exc


def mlebench_registry() -> Any | None:
    """The ``mlebench.registry.registry`` object when mlebench is importable, else None."""
    try:
        from mlebench.registry import registry  # type: ignore[import-not-found]
    except ImportError:
        return None
    return registry


def lower_is_better_from_board(leaderboard: pd.DataFrame) -> bool:
    """MLE-Bench's rule: a board listed best first is lower-is-better when its top < its bottom."""
    scores = leaderboard["score"]
    return bool(scores.iloc[0] < scores.iloc[-1])


def _read_board(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    board = pd.read_csv(path)
    if "score" not in board.columns:
        raise ValueError(f"leaderboard {path} has no 'score' column")
    board = board[pd.to_numeric(board["score"], errors="coerce").notna()].reset_index(drop=True)
    board["score"] = board["score"].astype(float)
    return board if len(board) else None


def _from_mlebench(comp_id: str, data_root: Path, registry: Any) -> Competition:
    reg = registry.set_data_dir(data_root)
    mle = reg.get_competition(comp_id)
    board = _read_board(Path(mle.leaderboard))
    if board is None:
        raise ValueError(
            f"mlebench competition {comp_id!r} has no leaderboard at {mle.leaderboard}"
        )
    lower = bool(mle.grader.is_lower_better(board))
    grade_fn = getattr(mle.grader.grade_fn, "__module__", "?") + ":"
    grade_fn += getattr(mle.grader.grade_fn, "__name__", "grade")
    return Competition(
        id=comp_id,
        root=Path(mle.public_dir).parent.parent,
        public_dir=Path(mle.public_dir),
        private_dir=Path(mle.private_dir),
        description=mle.description,
        lower_is_better=lower,
        grade_fn=grade_fn,
        leaderboard=board,
        answers=Path(mle.answers),
        sample_submission=Path(mle.sample_submission),
        source="mlebench",
    )


def _from_folder(comp_id: str, data_root: Path) -> Competition:
    root = data_root / comp_id
    config_path = root / "config.yaml"
    with open(config_path) as fh:
        config = yaml.safe_load(fh)
    if not isinstance(config, dict) or "grader" not in config or "dataset" not in config:
        raise ValueError(f"{config_path} lacks 'grader' or 'dataset'")
    grade_fn = config["grader"].get("grade_fn")
    if not isinstance(grade_fn, str) or ":" not in grade_fn:
        raise ValueError(f"{config_path}: grader.grade_fn must be 'module:function'")
    description_file = root / config.get("description", "description.md")
    description = description_file.read_text() if description_file.is_file() else ""
    board = _read_board(root / "leaderboard.csv")
    if "lower_is_better" in config:
        lower = bool(config["lower_is_better"])
    elif board is not None:
        lower = lower_is_better_from_board(board)
    else:
        raise ValueError(f"{config_path}: no lower_is_better and no leaderboard to infer it from")
    public_dir = root / "prepared" / "public"
    private_dir = root / "prepared" / "private"
    if not public_dir.is_dir() or not private_dir.is_dir():
        raise ValueError(f"competition {comp_id!r} at {root} is not prepared (no prepared/ dirs)")
    return Competition(
        id=comp_id,
        root=root,
        public_dir=public_dir,
        private_dir=private_dir,
        description=description,
        lower_is_better=lower,
        grade_fn=grade_fn,
        leaderboard=board,
        answers=data_root / config["dataset"]["answers"],
        sample_submission=data_root / config["dataset"]["sample_submission"],
        source="folder",
    )


def load_competition(comp_id: str, data_root: Path | None = None) -> Competition:
    """Load a prepared competition.

    The mlebench registry is used when mlebench is importable and lists ``comp_id``; otherwise
    ``<data_root>/<comp_id>/config.yaml`` is read. Aliases (``"text"``) are resolved first.

    Args:
        comp_id: competition id or alias.
        data_root: folder holding competition folders; default :func:`default_data_root`.

    Raises:
        ValueError: unknown / unprepared competition (the message names the id and the root),
            or a malformed config.
    """
    comp_id = resolve_id(comp_id)
    data_root = Path(data_root) if data_root is not None else default_data_root()
    registry = mlebench_registry()
    if registry is not None and comp_id in set(registry.list_competition_ids()):
        return _from_mlebench(comp_id, data_root, registry)
    if not (data_root / comp_id / "config.yaml").is_file():
        raise ValueError(
            f"competition {comp_id!r} not found under {data_root} (no {comp_id}/config.yaml); "
            f"run `python -m rpg_llm.tasks prepare {comp_id}` for an offline competition"
        )
    return _from_folder(comp_id, data_root)
