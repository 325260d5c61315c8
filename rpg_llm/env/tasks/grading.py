"""Grading a submission CSV: score, validity with a reason, leaderboard percentile, medal, reward.

MLE-Bench's grading rules (openai/mle-bench ``grade_helpers.Grader``, ``grade.grade_csv``), applied
to every source of competition alike:

* the grader is ``config.yaml``'s ``grader.grade_fn``, called as ``grade_fn(submission, answers)``
  on two ``pandas.DataFrame`` (answers from a ``.csv``, or a list of dicts from a ``.jsonl``);
  both CSVs are read with ``float_precision="round_trip"`` as MLE-Bench reads them;
* a grader that raises (``InvalidSubmissionError`` or anything else) makes the submission
  invalid, with the error as the reason; so does a return value that is not a real number
  (a bool, a string such as ``"0.7"``, None, an array) or is NaN / infinite (MLE-Bench lets such
  values through or crashes on them; we count them invalid with the reason);
* the score is rounded to :data:`SCORE_DECIMALS` = 5 decimals (``round(float(score), 5)``) before
  it is ranked, so a submission within rounding of a board entry ties with it;
* a competition that cannot be graded at all (answers file missing or unreadable, the grader
  not importable) raises :class:`GradingSetupError`: a set-up failure, not the submission's.

The submission is untrusted (a script wrote it): it is read only as a plain regular file of at
most ``GradingLimits.submission_bytes``, never through a link, FIFO or device
(``rpg_llm.env.sandbox.files``), and it is parsed and graded in a forked child limited to
``GradingLimits.time_s`` seconds and ``GradingLimits.memory_bytes`` of memory
(``rpg_llm.env.sandbox.bounded``); passing a limit makes the submission invalid with the reason.

Percentile (our definition, used for the reward of lower-is-better tasks): the fraction of
leaderboard entries the submission beats, ties counting one half,
``(n_beaten + 0.5 * n_tied) / n`` in ``[0, 1]``; "beats" follows the competition's direction, and a
tie is an exactly equal (rounded) score.

Medals: Kaggle's progression rules as MLE-Bench applies them (``kaggle.com/progression``): with
``n`` entries, the gold / silver / bronze thresholds are the scores at positions (1-based, best
first) ``max(1, int(0.1 n))`` / ``max(1, int(0.2 n))`` / ``max(1, int(0.4 n))`` for ``n < 100``;
``10`` / ``int(0.2 n)`` / ``int(0.4 n)`` for ``100 <= n < 250``; ``10 + int(0.002 n)`` / ``50`` /
``100`` for ``250 <= n < 1000``; ``10 + int(0.002 n)`` / ``int(0.05 n)`` / ``int(0.1 n)`` beyond.
A score at least as good as a threshold earns that medal (the best one that applies).

Reward (DESIGN.md section 7): raw reward = score for higher-is-better competitions, leaderboard
percentile for lower-is-better ones; an invalid submission gets ``INVALID_REWARD = -10``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import io
import json
import math
import numbers
import sys
import threading
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rpg_llm.env.sandbox.bounded import LimitExceeded, call_bounded
from rpg_llm.env.sandbox.files import UnsafeFileError, read_workdir_file
from rpg_llm.env.tasks.mlebench_api import mlebench_status, split_grade_fn

if TYPE_CHECKING:  # pragma: no cover - annotations only: a Competition runs and grades through here
    from rpg_llm.env.tasks.format import Competition

INVALID_REWARD = -10.0
"""Raw reward of an invalid / missing submission (DESIGN.md section 7)."""

SCORE_DECIMALS = 5
"""Scores are rounded to this many decimals before ranking (MLE-Bench's ``Grader.__call__``)."""


@dataclass(frozen=True)
class GradingLimits:
    """Bounds on grading one submission on the host.

    Attributes:
        submission_bytes: largest submission file accepted, bytes (larger: invalid).
        time_s: wall-clock seconds for reading, parsing and grading it (more: invalid).
        memory_bytes: memory the grading may add to the grading process, bytes (more: invalid).

    Raises:
        ValueError: a non-positive or non-finite limit.
    """

    submission_bytes: int = 256 * 2**20
    time_s: float = 300.0
    memory_bytes: int = 4 * 2**30

    def __post_init__(self) -> None:
        for name in ("submission_bytes", "memory_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"GradingLimits.{name} must be a positive int, got {v!r}")
        if not isinstance(self.time_s, int | float) or not 0 < self.time_s < math.inf:
            raise ValueError(f"GradingLimits.time_s must be a positive number, got {self.time_s!r}")


class GradingSetupError(ValueError):
    """A competition cannot be graded at all: its answers are missing or unreadable, or its
    grader cannot be imported. A set-up failure, not the submission's (the sandbox maps it to
    outcome status ``"infra"``)."""


@dataclass(frozen=True)
class GradeReport:
    """Result of grading one submission.

    Attributes:
        score: metric value, None when invalid.
        valid: whether the submission could be scored.
        reason: one line; why it is invalid, or "" when valid.
        percentile: fraction of leaderboard entries beaten (ties half), in [0, 1]; None when
            invalid or the competition has no leaderboard.
        medal: "gold" | "silver" | "bronze" | None.
        lower_is_better: direction of ``score``.
    """

    score: float | None
    valid: bool
    reason: str
    percentile: float | None
    medal: str | None
    lower_is_better: bool

    def to_dict(self) -> dict:
        """JSON-ready dict of the fields."""
        return asdict(self)


def leaderboard_percentile(score: float, board_scores: np.ndarray, lower_is_better: bool) -> float:
    """Fraction of entries ``score`` beats, ties counting one half.

    Args:
        score: the submission's score.
        board_scores: leaderboard scores, shape ``(n,)``, float, ``n >= 1``.
        lower_is_better: direction.

    Returns:
        ``(n_beaten + 0.5 * n_tied) / n`` in ``[0, 1]``.

    Raises:
        ValueError: empty board or non-finite score.
    """
    board = np.asarray(board_scores, dtype=np.float64).reshape(-1)
    if board.size == 0:
        raise ValueError("leaderboard is empty")
    if not math.isfinite(score):
        raise ValueError(f"score must be finite, got {score}")
    beaten = np.sum(board > score) if lower_is_better else np.sum(board < score)
    tied = np.sum(board == score)
    return float((beaten + 0.5 * tied) / board.size)


def medal_positions(n: int) -> tuple[int, int, int]:
    """1-based leaderboard positions of the gold, silver and bronze thresholds for ``n`` entries.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"leaderboard must have at least one entry, got {n}")
    if n < 100:
        return max(1, int(0.1 * n)), max(1, int(0.2 * n)), max(1, int(0.4 * n))
    if n < 250:
        return 10, int(0.2 * n), int(0.4 * n)
    if n < 1000:
        return 10 + int(0.002 * n), 50, 100
    return 10 + int(0.002 * n), int(0.05 * n), int(0.1 * n)


def medal_for(score: float, board_scores: np.ndarray, lower_is_better: bool) -> str | None:
    """Medal earned by ``score`` against ``board_scores`` (shape ``(n,)``), or None."""
    board = np.sort(np.asarray(board_scores, dtype=np.float64).reshape(-1))
    if not lower_is_better:
        board = board[::-1]
    for name, pos in zip(("gold", "silver", "bronze"), medal_positions(board.size), strict=True):
        threshold = board[pos - 1]
        if (score <= threshold) if lower_is_better else (score >= threshold):
            return name
    return None


def _report(comp: Competition, score: float | None, reason: str) -> GradeReport:
    if score is None:
        return GradeReport(
            None, False, reason or "invalid submission", None, None, comp.lower_is_better
        )
    if comp.leaderboard is None or len(comp.leaderboard) == 0:
        return GradeReport(score, True, "", None, None, comp.lower_is_better)
    board = comp.leaderboard["score"].to_numpy(dtype=np.float64)
    return GradeReport(
        score=score,
        valid=True,
        reason="",
        percentile=leaderboard_percentile(score, board, comp.lower_is_better),
        medal=medal_for(score, board, comp.lower_is_better),
        lower_is_better=comp.lower_is_better,
    )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def checked_score(value: Any) -> tuple[float | None, str]:
    """Check a grader's return value and round it (module docstring).

    Args:
        value: what ``grade_fn`` returned.

    Returns:
        ``(round(float(value), SCORE_DECIMALS), "")`` for a finite real number (Python or NumPy
        int / float); ``(None, reason)`` for a bool, a non-number (``"0.7"``, None, an array) or
        NaN / inf.
    """
    if isinstance(value, bool | np.bool_):
        return None, f"grader returned a bool ({value!r}), not a number"
    if not isinstance(value, numbers.Real):
        return None, _one_line(f"grader returned {type(value).__name__} {value!r}, not a number")
    score = float(value)
    if not math.isfinite(score):
        return None, f"grader returned a non-finite score {score!r}"
    return round(score, SCORE_DECIMALS), ""


_TREE_PACKAGE = "_rpg_grade_files"
_LOAD_LOCK = threading.Lock()
_LOADED: dict[tuple[str, int], types.ModuleType] = {}


def _mlebench_hint(exc: ImportError, uses_mlebench: bool) -> str:
    """Why an import failed when the mlebench package is to blame ("" otherwise)."""
    name = getattr(exc, "name", None) or ""
    if not (uses_mlebench or name == "mlebench" or name.startswith("mlebench.")):
        return ""
    status, why = mlebench_status()
    if status == "absent":
        return "; it imports the mlebench package, which is not installed (pip install -e <tree>)"
    if status == "partial":
        return f"; it imports the mlebench package, which is only partly installed ({why})"
    return ""


def _load_file_module(path: Path, comp_id: str) -> types.ModuleType:
    """Execute ``path`` as module ``grade`` of a private package whose ``__path__`` is its folder.

    Relative imports (``from .classes import CLASSES``) resolve inside that folder; the package
    name is unique per folder, so two trees with the same competition id do not collide. Modules
    are cached by (path, modification time).
    """
    path = path.resolve()
    key = (str(path), path.stat().st_mtime_ns)
    with _LOAD_LOCK:
        if key in _LOADED:
            return _LOADED[key]
        if _TREE_PACKAGE not in sys.modules:
            root = types.ModuleType(_TREE_PACKAGE)
            root.__path__ = []
            sys.modules[_TREE_PACKAGE] = root
        digest = hashlib.sha256(f"{path.parent}\0{key[1]}".encode()).hexdigest()[:16]
        package_name = f"{_TREE_PACKAGE}.c{digest}"
        package = types.ModuleType(package_name)
        package.__path__ = [str(path.parent)]
        package.__package__ = package_name
        sys.modules[package_name] = package
        name = f"{package_name}.{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise GradingSetupError(f"competition {comp_id!r}: cannot load grader file {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except ImportError as exc:
            sys.modules.pop(name, None)
            raise GradingSetupError(
                f"competition {comp_id!r}: grader file {path} cannot be imported: "
                f"{type(exc).__name__}: {exc}{_mlebench_hint(exc, 'mlebench' in path.read_text())}"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - a broken grade.py is a set-up error
            sys.modules.pop(name, None)
            raise GradingSetupError(
                f"competition {comp_id!r}: grader file {path} fails on import: "
                f"{type(exc).__name__}: {_one_line(str(exc))}"
            ) from exc
        _LOADED[key] = module
        return module


def load_grader(comp: Competition) -> Callable[[Any, Any], Any]:
    """The competition's ``grade_fn``: loaded from ``comp.grade_file`` by path when set (an
    MLE-Bench tree's own ``grade.py``), else imported by name.

    Call it before a run to fail early; :func:`grade_submission` calls it too.

    Raises:
        GradingSetupError: malformed ``grade_fn``, missing file, module failing to import
            (a missing or partly installed mlebench package is named), no such function.
    """
    try:
        module_name, fn_name = split_grade_fn(comp.grade_fn, f"competition {comp.id!r} grade_fn")
    except ValueError as exc:
        raise GradingSetupError(str(exc)) from exc
    if comp.grade_file is not None:
        if not Path(comp.grade_file).is_file():
            raise GradingSetupError(
                f"competition {comp.id!r}: grader file {comp.grade_file} not found"
            )
        module = _load_file_module(Path(comp.grade_file), comp.id)
        where = str(comp.grade_file)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise GradingSetupError(
                f"competition {comp.id!r}: cannot import grader module {module_name!r}: "
                f"{type(exc).__name__}: {exc}{_mlebench_hint(exc, 'mlebench' in module_name)}"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - a broken grader module is a set-up error
            raise GradingSetupError(
                f"competition {comp.id!r}: grader module {module_name!r} fails on import: "
                f"{type(exc).__name__}: {_one_line(str(exc))}"
            ) from exc
        where = module_name
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise GradingSetupError(f"competition {comp.id!r}: {where} has no function {fn_name!r}")
    return fn


_ROUND_TRIP: dict[str, Any] = (
    {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
)
"""MLE-Bench reads CSVs with round-trip float parsing; pandas >= 3 does so by default."""


def _read_csv(source: Path | io.BytesIO) -> pd.DataFrame:
    return pd.read_csv(source, **_ROUND_TRIP)


def load_answers(comp: Competition) -> Any:
    """The private answers: a DataFrame from a ``.csv``, a list of dicts from a ``.jsonl``.

    Raises:
        GradingSetupError: no answers path, file missing, unreadable or of another format.
    """
    path = comp.answers
    if path is None or not Path(path).is_file():
        raise GradingSetupError(f"competition {comp.id!r}: answers file {path} not found")
    path = Path(path)
    try:
        if path.suffix == ".csv":
            return _read_csv(path)
        if path.suffix == ".jsonl":
            with open(path) as fh:
                return [json.loads(line) for line in fh if line.strip()]
    except Exception as exc:  # noqa: BLE001 - unreadable answers are a set-up error
        raise GradingSetupError(
            f"competition {comp.id!r}: cannot read answers {path}: {_one_line(str(exc))}"
        ) from exc
    raise GradingSetupError(
        f"competition {comp.id!r}: answers {path} must be a .csv or .jsonl file"
    )


def grade_submission(
    comp: Competition, submission_csv: Path, limits: GradingLimits | None = None
) -> GradeReport:
    """Grade a submission CSV against the competition's private answers, by MLE-Bench's rules
    (module docstring), within ``limits``.

    Args:
        comp: a loaded competition.
        submission_csv: path of the CSV written by a solution (untrusted: read as a plain file).
        limits: size, time and memory bounds (default ``GradingLimits()``, with the
            competition's ``grading_time_s`` when it sets one).

    Returns:
        The :class:`GradeReport`: valid with the rounded score, percentile and medal; or invalid
        with the reason (no file; not a .csv; a link, FIFO, device or folder; too large;
        unreadable; the grader raising on it; a grader result that is not a finite real number;
        grading past its time or memory limit).

    Raises:
        GradingSetupError: the competition cannot be graded at all (answers missing or
            unreadable, grader not importable).
    """
    if limits is None:
        own = getattr(comp, "grading_time_s", None)  # the competition's own time for a grading
        limits = GradingLimits() if own is None else GradingLimits(time_s=own)
    path = Path(submission_csv)
    load_grader(comp)  # set-up errors surface here, before any fork
    if path.suffix.lower() != ".csv":
        if not path.exists() and not path.is_symlink():
            return _report(comp, None, f"no submission file at {path}")
        return _report(comp, None, f"submission {path.name} is not a .csv file")
    try:
        return call_bounded(
            _grade_file, comp, path, limits, time_s=limits.time_s, memory_bytes=limits.memory_bytes,
            prepare=functools.partial(load_grader, comp),  # imported once, in the server
        )  # fmt: skip
    except LimitExceeded as exc:
        return _report(comp, None, f"grading the submission {exc.reason}")


def _grade_file(comp: Competition, path: Path, limits: GradingLimits) -> GradeReport:
    """The grading itself (runs inside :func:`call_bounded`'s child)."""
    answers = load_answers(comp)
    grade_fn = load_grader(comp)
    try:
        data = read_workdir_file(path.parent, path.name, limits.submission_bytes)
    except UnsafeFileError as exc:
        if exc.missing:
            return _report(comp, None, f"no submission file at {path}")
        return _report(comp, None, _one_line(f"submission refused: {exc.reason}"))
    try:
        submission = _read_csv(io.BytesIO(data))
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parse failure makes the submission invalid
        return _report(comp, None, _one_line(f"cannot read submission CSV: {exc}"))
    del data
    try:
        value = grade_fn(submission, answers)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - MLE-Bench also treats grader errors as invalid
        if type(exc).__name__ == "InvalidSubmissionError":
            return _report(comp, None, _one_line(str(exc)) or "invalid submission")
        return _report(comp, None, _one_line(f"grader error {type(exc).__name__}: {exc}"))
    score, reason = checked_score(value)
    return _report(comp, score, reason)


def raw_reward(report: GradeReport) -> float:
    """Raw reward of DESIGN.md section 7.

    ``INVALID_REWARD`` (-10) when invalid; the score when higher is better; the leaderboard
    percentile in [0, 1] when lower is better.

    Raises:
        ValueError: a valid lower-is-better report without a percentile (no leaderboard).
    """
    if not report.valid or report.score is None:
        return INVALID_REWARD
    if not report.lower_is_better:
        return float(report.score)
    if report.percentile is None:
        raise ValueError("lower-is-better competition without a leaderboard: no percentile reward")
    return float(report.percentile)
