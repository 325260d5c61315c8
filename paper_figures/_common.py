"""Small shared helpers for figure modules: output folder, saving PNG + PDF + CSV."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt", "out_dir", "save_figure", "write_csv"]


def out_dir(path: str | os.PathLike | None, name: str) -> Path:
    """Return (and create) the output folder: ``path`` or ``out/<name>``."""
    folder = Path(path) if path is not None else Path("out") / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_figure(fig, folder: Path, name: str) -> tuple[Path, Path]:
    """Save ``fig`` as ``<folder>/<name>.png`` (150 dpi) and ``.pdf``; returns both paths."""
    png, pdf = folder / f"{name}.png", folder / f"{name}.pdf"
    fig.savefig(png, dpi=150, bbox_inches="tight")
    fig.savefig(pdf, bbox_inches="tight")
    plt.close(fig)
    return png, pdf


def write_csv(path: Path, rows: Iterable[Mapping[str, object]], fieldnames: Sequence[str]) -> Path:
    """Write dict rows to ``path`` as CSV with the given column order; returns the path."""
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fieldnames))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in fieldnames})
    return path
