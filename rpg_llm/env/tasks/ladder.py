"""Leaderboards from a ladder of our own baseline solutions.

Each ladder entry is ``(solution name, constants)``: the script
``rpg_llm/env/tasks/solutions/<id>/<name>.py`` with its top-level constants (``SEED = 0``,
``N_ESTIMATORS = 100``, ...) set to the given values. Every entry runs as a plain subprocess in a
fresh temporary folder following the execution convention (``./input`` -> the public data,
``./submission.csv`` written), one BLAS / OpenMP thread each, forked from a server that imported the
scientific stack once (:mod:`rpg_llm.env.tasks._forkserver`), and is graded with the competition's
own grader. The board lists entries best first (as MLE-Bench boards do).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from rpg_llm.env.actions import apply_edit, editable_constants
from rpg_llm.env.tasks.format import Competition
from rpg_llm.env.tasks.grading import grade_submission

LADDER_TIMEOUT_S = 300.0
"""Wall-clock limit of one baseline run, seconds."""

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def set_constants(code: str, constants: dict) -> str:
    """Return ``code`` with each top-level ``NAME = value`` set to ``repr(constants[NAME])``.

    A literal constant (:func:`rpg_llm.env.actions.editable_constants`) has only its value
    replaced, so the rest of its line -- a comment that declares the values a switch takes, say
    -- is kept; any other top-level ``NAME = ...`` line is replaced whole.

    Raises:
        ValueError: a name is not assigned exactly once at the top level of ``code``.
    """
    for name, value in constants.items():
        pattern = re.compile(rf"^{re.escape(name)}\s*=.*$", re.MULTILINE)
        if len(pattern.findall(code)) != 1:
            raise ValueError(f"constant {name!r} must be assigned exactly once at top level")
        if name in editable_constants(code):
            code = apply_edit(code, {name: value})
        else:
            code = pattern.sub(f"{name} = {value!r}", code)
    return code


def entry_name(solution: str, constants: dict) -> str:
    """Board name of a ladder entry, e.g. ``rf(N_ESTIMATORS=100,SEED=1)``."""
    if not constants:
        return solution
    return f"{solution}({','.join(f'{k}={v}' for k, v in constants.items())})"


def run_solution(
    code: str, input_dir: Path, workdir: Path, timeout_s: float
) -> tuple[float, int, str]:
    """Run ``code`` with ``cwd=workdir`` and ``./input`` linked to ``input_dir``.

    Returns:
        ``(seconds, returncode, stderr tail)``; seconds is the child's wall time.
    """
    (workdir / "input").symlink_to(Path(input_dir).resolve(), target_is_directory=True)
    script = workdir / "solution.py"
    script.write_text(code)
    env = dict(os.environ)
    env.update({var: "1" for var in _THREAD_VARS})
    env["PYTHONHASHSEED"] = "0"
    env["RPG_INPUT_DIR"] = str(Path(input_dir).resolve())
    env["RPG_SUBMISSION_PATH"] = str(workdir / "submission.csv")
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, script.name],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired:
        rc, err = -9, f"timeout after {timeout_s} s"
    return time.perf_counter() - start, rc, err[-2000:]


PRELOAD = (
    "numpy",
    "scipy.sparse",
    "pandas",
    "sklearn.compose",
    "sklearn.ensemble",
    "sklearn.feature_extraction.text",
    "sklearn.impute",
    "sklearn.linear_model",
    "sklearn.model_selection",
    "sklearn.naive_bayes",
    "sklearn.neighbors",
    "sklearn.pipeline",
    "sklearn.preprocessing",
    "sklearn.svm",
    "sklearn.tree",
)
"""Modules the fork server imports once before forking the ladder's scripts."""


def run_ladder(
    comp: Competition,
    ladder: tuple[tuple[str, dict], ...],
    solutions_dir: Path,
    workers: int | None = None,
    preload: tuple[str, ...] = PRELOAD,
) -> pd.DataFrame:
    """Run every ladder entry on ``comp``'s public data and grade it.

    The entries run as forked children of one fork server (:mod:`rpg_llm.env.tasks._forkserver`)
    that has imported numpy / pandas / scikit-learn once, each in its own temporary folder with
    ``./input`` linked to the public data; ``seconds`` is a child's wall time without those imports.

    Args:
        comp: the competition (answers reachable, no leaderboard needed).
        ladder: ``(solution name, constants)`` entries.
        solutions_dir: folder holding ``<name>.py``.
        workers: parallel runs, default ``min(2, os.cpu_count())``.
        preload: modules the fork server imports before forking (default :data:`PRELOAD`).

    Returns:
        Board with columns ``rank, teamName, score, solution, constants, seconds``, best first.

    Raises:
        RuntimeError: an entry failed or produced an invalid submission.
        ValueError: a solution file or constant is missing.
    """
    entries = []
    for solution, constants in ladder:
        path = Path(solutions_dir) / f"{solution}.py"
        if not path.is_file():
            raise ValueError(f"no baseline solution {path}")
        entries.append((solution, constants, set_constants(path.read_text(), constants)))
    n_workers = workers or max(1, min(2, os.cpu_count() or 1))
    input_dir = Path(comp.public_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="rpg-ladder-") as tmp:
        jobs = []
        for k, (_, _, code) in enumerate(entries):
            workdir = Path(tmp) / f"run{k:03d}"
            workdir.mkdir()
            (workdir / "input").symlink_to(input_dir, target_is_directory=True)
            (workdir / "solution.py").write_text(code)
            env = {
                "RPG_INPUT_DIR": str(input_dir),
                "RPG_SUBMISSION_PATH": str(workdir / "submission.csv"),
            }
            jobs.append({"workdir": str(workdir), "env": env})
        request = {
            "preload": list(preload),
            "workers": n_workers,
            "timeout_s": LADDER_TIMEOUT_S,
            "jobs": jobs,
        }
        env = dict(os.environ)
        env.update({var: "1" for var in _THREAD_VARS})
        env["PYTHONHASHSEED"] = "0"
        server = Path(__file__).with_name("_forkserver.py")
        proc = subprocess.run(
            [sys.executable, str(server)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            timeout=LADDER_TIMEOUT_S * len(jobs) + 60,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ladder fork server failed: {proc.stderr[-2000:]}")
        results = json.loads(proc.stdout)
        rows = []
        for (solution, constants, _), job, result in zip(entries, jobs, results, strict=True):
            name = entry_name(solution, constants)
            workdir = Path(job["workdir"])
            if result["rc"] != 0:
                err = (workdir / "stderr.txt").read_text()[-2000:]
                raise RuntimeError(
                    f"baseline {name} for {comp.id} failed (rc {result['rc']}): {err}"
                )
            report = grade_submission(comp, workdir / "submission.csv")
            if not report.valid:
                raise RuntimeError(f"baseline {name} for {comp.id} is invalid: {report.reason}")
            rows.append(
                {
                    "teamName": name,
                    "score": report.score,
                    "solution": solution,
                    "constants": repr(constants),
                    "seconds": round(result["seconds"], 3),
                }
            )
    board = pd.DataFrame(rows)
    board = board.sort_values(
        ["score", "teamName"], ascending=[comp.lower_is_better, True], kind="stable"
    ).reset_index(drop=True)
    board.insert(0, "rank", range(1, len(board) + 1))
    return board
