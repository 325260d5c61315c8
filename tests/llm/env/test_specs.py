"""The offline competitions' spec files: read, checked, expanded; a bad one names file and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from rpg_llm.env.tasks import list_offline_competitions
from rpg_llm.env.tasks.pypi_data import LOADERS
from rpg_llm.env.tasks.specs import (
    SPEC_FILE,
    SPECS,
    OfflineSpec,
    read_spec,
    solutions_dir,
)

TOY = {
    "id": "toy",
    "title": "Toy",
    "data_source": "scikit-learn load_digits",
    "loader": "digits",
    "target": "label",
    "kind": "label",
    "grader_name": "accuracy",
    "grade_fn": "rpg_llm.env.tasks.metrics:grade_accuracy",
    "lower_is_better": False,
    "test_fraction": 0.25,
    "task_text": "Predict the digit.",
    "metric_text": "Accuracy. Higher is better.",
    "ladder": [{"solution": "prior"}, {"solution": "knn", "grid": {"K": [1, 5], "W": ["u", "d"]}}],
}


def _write(tmp_path: Path, spec: dict, name: str = "toy") -> Path:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    for script in ("prior", "knn"):
        (folder / f"{script}.py").write_text("K = 1\n")
    path = folder / SPEC_FILE
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_every_offline_competition_has_its_spec_file_beside_its_solutions():
    files = sorted(p.parent.name for p in solutions_dir("").glob(f"*/{SPEC_FILE}"))
    assert files == list_offline_competitions() == sorted(SPECS)
    assert len(files) == 12 and "bbc-news-logloss" in files
    for comp_id, spec in SPECS.items():
        assert read_spec(solutions_dir(comp_id) / SPEC_FILE) == spec
        assert spec.id == comp_id and spec.loader in LOADERS
        assert spec.ladder[0] == ("prior", {})  # every board starts from the prior


def test_a_spec_reads_into_its_fields_with_the_grid_expanded_first_axis_slowest(tmp_path):
    spec = read_spec(_write(tmp_path, TOY))
    assert isinstance(spec, OfflineSpec)
    assert spec.ladder == (
        ("prior", {}),
        ("knn", {"K": 1, "W": "u"}),
        ("knn", {"K": 1, "W": "d"}),
        ("knn", {"K": 5, "W": "u"}),
        ("knn", {"K": 5, "W": "d"}),
    )
    assert spec.seeds == () and spec.loader_args == () and spec.test_fraction == 0.25
    assert spec.load().shape == (1797, 65)  # the loader it names, scikit-learn's digits


def test_the_stored_specs_keep_their_values_and_types():
    """Ints stay ints, floats floats (``1e-09`` included) and nulls None: the ladder's repr,
    which the leaderboard's cache key hashes, depends on it."""
    churn = SPECS["churn-auc"]
    assert ("tree", {"MAX_DEPTH": None}) in churn.ladder
    assert ("nb", {"VAR_SMOOTHING": 1e-09}) in churn.ladder
    assert ("logreg", {"C": 10.0, "FEATURES": "all"}) in churn.ladder
    assert repr(("rf", {"N_ESTIMATORS": 10, "SEED": 0})) in repr(churn.ladder)
    assert len(churn.ladder) == 1 + 10 + 9 + 12 + 8 + 11 + 3 + 1
    flights = SPECS["flights-delay-auc"]
    assert [c["MODEL"] for _, c in flights.seeds] == ["hgb", "knn", "nb", "rf"]
    assert SPECS["ames-housing-rmse"].loader_args == ("modeldata", "ames")
    assert SPECS["bbc-news-logloss"].metric_text.startswith("Multi-class log loss, natural log:")


@pytest.mark.parametrize("field", ["target", "grade_fn", "ladder", "metric_text", "loader"])
def test_a_missing_field_is_named_with_the_file(tmp_path, field):
    spec = {k: v for k, v in TOY.items() if k != field}
    path = _write(tmp_path, spec)
    with pytest.raises(ValueError, match=re.escape(f"{path}: field {field!r} is missing")):
        read_spec(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "rank"}, "field 'kind' must be one of"),
        ({"lower_is_better": "yes"}, "field 'lower_is_better' must be true or false"),
        ({"test_fraction": 1.5}, "field 'test_fraction' must be a number in (0, 1)"),
        ({"test_fraction": True}, "field 'test_fraction' must be a number in (0, 1)"),
        ({"grade_fn": "metrics.auc"}, "field 'grade_fn' must be 'module:function'"),
        ({"loader": "kaggle"}, "field 'loader' 'kaggle' is unknown"),
        ({"loader_args": ["x"]}, "field 'loader_args' ['x'] do not fit"),
        ({"loader": "rdataset"}, "field 'loader_args' [] do not fit"),
        ({"id": "other"}, "field 'id' 'other' is not its folder's name"),
        ({"title": ""}, "field 'title' must be a non-empty string"),
        ({"color": "red"}, "unknown field 'color'"),
        ({"ladder": []}, "field 'ladder' must be a non-empty list"),
        ({"ladder": [{"solution": "svm"}]}, "field 'ladder' item 0: solution 'svm' is no script"),
        ({"ladder": [{"solution": "knn", "grid": {"K": []}}]}, "grid.K must be a non-empty list"),
        ({"ladder": [{"solution": "knn", "grid": {"K": [[1]]}}]}, "value [1] is not a scalar"),
        ({"seeds": [{"solution": "knn", "steps": 3}]}, "field 'seeds' item 0 has unknown keys"),
    ],
)
def test_a_bad_field_is_named_with_the_file(tmp_path, change, message):
    path = _write(tmp_path, {**TOY, **change})
    with pytest.raises(ValueError, match=re.escape(f"{path}: ") + ".*" + re.escape(message)):
        read_spec(path)


def test_an_unreadable_spec_names_the_file(tmp_path):
    path = _write(tmp_path, TOY)
    path.write_text("id: [unclosed\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: cannot read the spec")):
        read_spec(path)
    path.write_text("- a list\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: a spec must be a YAML mapping")):
        read_spec(path)
