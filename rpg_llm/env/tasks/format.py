"""Competition folders in MLE-Bench format: reading them into :class:`Competition`.

Three sources, tried in this order by :func:`load_competition`:

1. An **MLE-Bench tree** (``--mlebench-dir DIR``, env ``RPG_MLEBENCH_DIR``): a checkout of
   openai/mle-bench or any folder with the same layout, read directly, without the ``mlebench``
   package::

       DIR/mlebench/competitions/<id>/config.yaml      id, name, competition_type, awards_medals,
                                                       prizes, description (a path relative to
                                                       DIR), dataset.answers and
                                                       dataset.sample_submission (paths relative
                                                       to the data root), grader.name,
                                                       grader.grade_fn ("module:function"),
                                                       preparer; optional lower_is_better
       DIR/mlebench/competitions/<id>/grade.py         ``grade(submission, answers) -> float``
       DIR/mlebench/competitions/<id>/leaderboard.csv  Kaggle's board, best first: columns
                                                       scoreNullable, teamId, hasTeamName,
                                                       submissionDate, score, hasScore (only
                                                       ``score`` is read)
       DIR/mlebench/competitions/<id>/description.md   the text shown to the policy
       <data_root>/<id>/prepared/{public,private}/     the data, as ``mlebench prepare`` writes it

   ``grader.grade_fn`` names a module; when that module is a file of the tree
   (``mlebench.competitions.<id>.grade`` -> ``DIR/mlebench/competitions/<id>/grade.py``) it is
   loaded from that file by path (relative imports such as ``from .classes import CLASSES`` work),
   otherwise it is imported by name.
2. A **competition folder** ``<data_root>/<id>/config.yaml`` (our offline competitions, and
   hand-made ones): the same keys, with the description file and ``leaderboard.csv`` next to
   ``config.yaml``.
3. The installed **mlebench registry** (``mlebench.registry.registry``), used only when the
   ``mlebench`` package imports completely; a partly installed package (``mlebench`` found but
   ``mlebench.registry`` failing to import) is reported as such in the not-found error.

Direction (``lower_is_better``): the config key when present (it must be a YAML bool), else
MLE-Bench's rule on the board listed best first: lower is better when the first score is below
the last; a board whose first and last scores are equal is an error naming the competition.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rpg_llm.env.outcome import Outcome
from rpg_llm.env.sandbox import BatchExecutor, Sandbox, make_sandbox
from rpg_llm.env.tasks import runner
from rpg_llm.env.tasks.mlebench_api import mlebench_registry, mlebench_status, split_grade_fn
from rpg_llm.env.tasks.specs import list_offline_competitions, sync_grader

DEFAULT_TEXT_TASK = "bbc-news-logloss"
"""The offline text competition used by the default training run."""

TASK_ALIASES: dict[str, str] = {"text": DEFAULT_TEXT_TASK}
"""Short names accepted wherever a competition id is."""

TREE_COMPETITIONS = Path("mlebench") / "competitions"
"""Where an MLE-Bench tree keeps its competitions, relative to the tree root."""


@dataclass(frozen=True)
class Competition:
    """One competition, loaded.

    Attributes:
        id: competition id (folder name).
        root: ``<data_root>/<id>`` (the data; for a tree competition not where config.yaml is).
        public_dir: ``<root>/prepared/public`` (what a solution script reads as ``./input``).
        private_dir: ``<root>/prepared/private`` (answers; never inside the sandbox).
        description: markdown text shown to the policy.
        lower_is_better: direction of ``score``.
        grade_fn: ``"module:function"`` from ``config.yaml`` ``grader.grade_fn``.
        leaderboard: table with a float ``score`` column, best first, or None when there is none
            (left out of equality and hashing).
        answers: path of the private answers file (``.csv`` or ``.jsonl``).
        sample_submission: path of the public sample submission CSV.
        source: ``"folder"`` (``<data_root>/<id>/config.yaml``), ``"tree"`` (an MLE-Bench tree
            read directly) or ``"mlebench"`` (the installed mlebench registry).
        grade_file: the Python file ``grade_fn``'s module is loaded from by path, or None to
            import it by name.
        config_dir: the folder holding ``config.yaml`` (and the leaderboard).
        grading_time_s: seconds grading one submission may take (``config.yaml``
            ``grader.time_s``; None: :class:`rpg_llm.env.tasks.grading.GradingLimits`' default).
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
    grade_file: Path | None = None
    config_dir: Path | None = None
    grading_time_s: float | None = None

    def run_batch(
        self,
        codes: Sequence[str],
        sandbox: Sandbox | str,
        timeout_s: float,
        executor: BatchExecutor | None = None,
    ) -> list[Outcome]:
        """Run and grade ``codes`` in ``sandbox`` (a sandbox, or its kind for
        :func:`rpg_llm.env.sandbox.make_sandbox`); one outcome per code, in order
        (:func:`rpg_llm.env.tasks.runner.run_batch`: its errors)."""
        box = make_sandbox(sandbox) if isinstance(sandbox, str) else sandbox
        return runner.run_batch(codes, self, box, timeout_s, executor)

    def own_rewards(self) -> None:
        """A competition's raw reward is the grader's (score or leaderboard percentile)."""
        return None


def default_data_root() -> Path:
    """Competition data root: env ``RPG_DATA_ROOT``, else ``~/.cache/rpg/competitions``."""
    env = os.environ.get("RPG_DATA_ROOT")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rpg" / "competitions"


def default_mlebench_dir() -> Path | None:
    """The MLE-Bench tree of env ``RPG_MLEBENCH_DIR``, or None when unset or empty."""
    env = os.environ.get("RPG_MLEBENCH_DIR")
    return Path(env).expanduser() if env else None


def check_mlebench_dir(tree: Path) -> Path:
    """Return ``tree`` when it holds ``mlebench/competitions``.

    Raises:
        ValueError: no such folder (the message names ``tree``).
    """
    tree = Path(tree).expanduser()
    if not (tree / TREE_COMPETITIONS).is_dir():
        raise ValueError(f"MLE-Bench tree {tree} has no {TREE_COMPETITIONS} folder")
    return tree


def resolve_id(name: str) -> str:
    """Map an alias (``"text"``) to its competition id; other names pass through.

    Raises:
        ValueError: empty name or one containing a path separator.
    """
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in {".", ".."}:
        raise ValueError(f"bad competition name {name!r}")
    return TASK_ALIASES.get(name, name)


def lower_is_better_from_board(leaderboard: pd.DataFrame, comp_id: str = "?") -> bool:
    """MLE-Bench's rule: a board listed best first is lower-is-better when its top < its bottom.

    Raises:
        ValueError: first and last scores are equal (the direction is ambiguous); the message
            names ``comp_id`` and says to set ``lower_is_better`` in config.yaml.
    """
    scores = leaderboard["score"]
    first, last = float(scores.iloc[0]), float(scores.iloc[-1])
    if first == last:
        raise ValueError(
            f"competition {comp_id!r}: the leaderboard's first and last scores are equal "
            f"({first:g}), so its direction is ambiguous; set lower_is_better: true or false in "
            "its config.yaml"
        )
    return first < last


def competition_direction(
    comp_id: str, config: dict, board: pd.DataFrame | None, config_path: Path | str
) -> bool:
    """``lower_is_better`` from ``config`` when present, else from ``board`` (MLE-Bench's rule).

    Raises:
        ValueError: a non-bool ``lower_is_better``; neither key nor board; an ambiguous board.
    """
    if "lower_is_better" in config:
        value = config["lower_is_better"]
        if not isinstance(value, bool):
            raise ValueError(f"{config_path}: lower_is_better must be true or false, got {value!r}")
        return value
    if board is None:
        raise ValueError(
            f"competition {comp_id!r}: {config_path} has no lower_is_better and there is no "
            "leaderboard to infer it from"
        )
    return lower_is_better_from_board(board, comp_id)


def read_board(path: Path) -> pd.DataFrame | None:
    """The leaderboard at ``path`` with rows of a non-numeric score dropped, or None.

    Returns:
        The table (its ``score`` column float64, order kept), or None when the file is absent or
        no row has a numeric score.

    Raises:
        ValueError: no ``score`` column (a Git LFS pointer left by a clone without ``git lfs``
            is named as such).
    """
    path = Path(path)
    if not path.is_file():
        return None
    with open(path, "rb") as fh:
        head = fh.read(64)
    if head.startswith(b"version https://git-lfs"):
        raise ValueError(f"leaderboard {path} is a Git LFS pointer; run `git lfs pull` in the tree")
    board = pd.read_csv(path)
    if "score" not in board.columns:
        raise ValueError(f"leaderboard {path} has no 'score' column")
    numeric = pd.Series(pd.to_numeric(board["score"], errors="coerce"))
    board = pd.DataFrame(board.loc[numeric.notna().to_numpy()]).reset_index(drop=True)
    board["score"] = board["score"].astype(float)
    return board if len(board) else None


def _read_config(path: Path) -> dict:
    try:
        with open(path) as fh:
            config = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a YAML mapping")
    for key in ("grader", "dataset"):
        if not isinstance(config.get(key), dict):
            raise ValueError(f"{path} lacks the '{key}' mapping")
    for key in ("answers", "sample_submission"):
        if not isinstance(config["dataset"].get(key), str):
            raise ValueError(f"{path}: dataset.{key} must be a path relative to the data root")
    split_grade_fn(config["grader"].get("grade_fn"), f"{path}: grader.grade_fn")
    return config


def _prepared_dirs(comp_id: str, data_root: Path, how: str) -> tuple[Path, Path]:
    public_dir = data_root / comp_id / "prepared" / "public"
    private_dir = data_root / comp_id / "prepared" / "private"
    if not public_dir.is_dir() or not private_dir.is_dir():
        raise ValueError(
            f"competition {comp_id!r} is not prepared under data root {data_root} (no "
            f"{comp_id}/prepared/public and private folders); {how}"
        )
    return public_dir, private_dir


def tree_grade_file(tree: Path, comp_dir: Path, grade_fn: str) -> Path | None:
    """The file of ``grade_fn``'s module inside the tree, or None to import it by name.

    ``mlebench.competitions.<id>.grade`` maps to ``<tree>/mlebench/competitions/<id>/grade.py``;
    a module named ``grade`` maps to ``<comp_dir>/grade.py``.
    """
    module_name, _ = split_grade_fn(grade_fn)
    candidates = [Path(tree) / (module_name.replace(".", os.sep) + ".py")]
    if module_name == "grade":
        candidates.append(comp_dir / "grade.py")
    for path in candidates:
        if path.is_file():
            return path
    return None


def list_tree_competitions(tree: Path) -> list[str]:
    """Ids of the competitions of an MLE-Bench tree (folders with a config.yaml), sorted.

    Raises:
        ValueError: ``tree`` has no ``mlebench/competitions`` folder.
    """
    base = check_mlebench_dir(tree) / TREE_COMPETITIONS
    return sorted(p.parent.name for p in base.glob("*/config.yaml"))


def is_prepared(comp_id: str, data_root: Path) -> bool:
    """Whether ``<data_root>/<id>/prepared/{public,private}`` both exist."""
    prepared = Path(data_root) / comp_id / "prepared"
    return (prepared / "public").is_dir() and (prepared / "private").is_dir()


def _grading_time(config: dict, path: Path) -> float | None:
    """``grader.time_s`` of a ``config.yaml`` (None: absent).

    Raises:
        ValueError: not a number of seconds > 0 (names the file and the value).
    """
    value = config["grader"].get("time_s")
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < 1e6:
        raise ValueError(f"{path}: grader.time_s must be seconds > 0, got {value!r}")
    return float(value)


def _from_tree(comp_id: str, tree: Path, data_root: Path) -> Competition:
    comp_dir = tree / TREE_COMPETITIONS / comp_id
    config_path = comp_dir / "config.yaml"
    config = _read_config(config_path)
    grade_fn = config["grader"]["grade_fn"]
    default_description = f"{TREE_COMPETITIONS.as_posix()}/{comp_id}/description.md"
    described = config.get("description", default_description)
    if not isinstance(described, str):
        raise ValueError(f"{config_path}: description must be a path, got {described!r}")
    description_file = next(
        (p for p in (tree / described, comp_dir / described) if p.is_file()), None
    )
    if description_file is None:
        raise ValueError(
            f"competition {comp_id!r}: description {described!r} of {config_path} not found "
            f"under the tree root {tree}"
        )
    board = read_board(comp_dir / "leaderboard.csv")
    lower = competition_direction(comp_id, config, board, config_path)
    public_dir, private_dir = _prepared_dirs(
        comp_id,
        data_root,
        f"prepare it with mle-bench (`mlebench prepare -c {comp_id} --data-dir {data_root}`)",
    )
    return Competition(
        id=comp_id,
        root=data_root / comp_id,
        public_dir=public_dir,
        private_dir=private_dir,
        description=description_file.read_text(),
        lower_is_better=lower,
        grade_fn=grade_fn,
        leaderboard=board,
        answers=data_root / config["dataset"]["answers"],
        sample_submission=data_root / config["dataset"]["sample_submission"],
        source="tree",
        grade_file=tree_grade_file(tree, comp_dir, grade_fn),
        config_dir=comp_dir,
        grading_time_s=_grading_time(config, config_path),
    )


def _from_folder(comp_id: str, data_root: Path) -> Competition:
    root = data_root / comp_id
    config_path = root / "config.yaml"
    config = _read_config(config_path)
    grade_fn = config["grader"]["grade_fn"]
    description_file = root / str(config.get("description", "description.md"))
    description = description_file.read_text() if description_file.is_file() else ""
    board = read_board(root / "leaderboard.csv")
    lower = competition_direction(comp_id, config, board, config_path)
    public_dir, private_dir = _prepared_dirs(comp_id, data_root, "it has a config.yaml but no data")
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
        grade_file=tree_grade_file(root, root, grade_fn),
        config_dir=root,
        grading_time_s=_grading_time(config, config_path),
    )


def _from_mlebench(comp_id: str, data_root: Path, registry: Any) -> Competition:
    reg = registry.set_data_dir(data_root)
    mle = reg.get_competition(comp_id)
    board = read_board(Path(mle.leaderboard))
    if board is None:
        raise ValueError(
            f"mlebench competition {comp_id!r} has no leaderboard at {mle.leaderboard}"
        )
    config_dir = Path(mle.leaderboard).parent
    config_path = config_dir / "config.yaml"
    config = {}
    if config_path.is_file():
        with open(config_path) as fh:
            config = yaml.safe_load(fh) or {}
    lower = competition_direction(comp_id, config, board, config_path)
    fn = mle.grader.grade_fn
    grade_fn = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__name__', 'grade')}"
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
        config_dir=config_dir,
    )


def load_competition(
    comp_id: str, data_root: Path | None = None, mlebench_dir: Path | None = None
) -> Competition:
    """Load a prepared competition (module docstring: the three sources and their order).

    Args:
        comp_id: competition id or alias (``"text"``).
        data_root: folder holding ``<id>/prepared/...``; default :func:`default_data_root`.
        mlebench_dir: root of an MLE-Bench tree (holding ``mlebench/competitions``); default
            :func:`default_mlebench_dir` (env ``RPG_MLEBENCH_DIR``), None for no tree.

    Returns:
        The :class:`Competition` (nothing is imported or graded yet; see
        :func:`rpg_llm.env.tasks.grading.load_grader` to check the grader early).

    Raises:
        ValueError: bad name; ``mlebench_dir`` without ``mlebench/competitions``; unknown or
            unprepared competition (the message names the id, the data root, the tree, and
            the state of the mlebench package when it is partly installed); a malformed config
            or leaderboard; an ambiguous leaderboard direction.
    """
    comp_id = resolve_id(comp_id)
    data_root = Path(data_root).expanduser() if data_root is not None else default_data_root()
    tree = Path(mlebench_dir) if mlebench_dir is not None else default_mlebench_dir()
    if tree is not None:
        tree = check_mlebench_dir(tree)
        if (tree / TREE_COMPETITIONS / comp_id / "config.yaml").is_file():
            return _from_tree(comp_id, tree, data_root)
    if (data_root / comp_id / "config.yaml").is_file():
        sync_grader(comp_id, data_root / comp_id)  # our offline competitions: their own grader
        return _from_folder(comp_id, data_root)
    status, why = mlebench_status()
    if status == "complete":
        registry = mlebench_registry()
        if registry is not None and comp_id in set(registry.list_competition_ids()):
            return _from_mlebench(comp_id, data_root, registry)
    where = f"under data root {data_root} (no {comp_id}/config.yaml)"
    if tree is not None:
        where += f" nor in the MLE-Bench tree {tree} (no {TREE_COMPETITIONS}/{comp_id}/config.yaml)"
    if status == "partial":
        where += (
            f"; the mlebench package is only partly installed, so its registry was not "
            f"searched ({why})"
        )
    elif status == "complete":
        where += "; the mlebench registry does not list it either"
    if comp_id in list_offline_competitions():
        missing = "" if data_root.is_dir() else f" (the folder {data_root} does not exist)"
        raise ValueError(
            f"offline competition {comp_id!r} is not prepared under data root {data_root}"
            f"{missing}: python -m rpg_llm.env.tasks prepare {comp_id}"
            + (f" --data-root {data_root}" if data_root != default_data_root() else "")
        )
    raise ValueError(
        f"competition {comp_id!r} not found {where}; the offline competitions are "
        f"{', '.join(list_offline_competitions())}; for an MLE-Bench competition pass "
        "--mlebench-dir (an MLE-Bench tree)"
    )
