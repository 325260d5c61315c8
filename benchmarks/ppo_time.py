"""PPO update time per step against the batch's length, read from finished runs.

    python benchmarks/ppo_time.py LABEL=RUN_DIR [LABEL=RUN_DIR ...]

A PPO step runs every forward pass over ``B`` rows padded to the batch's longest prompt plus
answer, so its time follows that length, and two runs' mean seconds per step compare only at equal
lengths. This reads each run's fresh steps (``metrics.jsonl``: ``ppo_seconds``, not replayed) and
each step's length: the padded length ``ppo/seq_len`` (tokens) where every step records it, else
the longest parent of the step's answers (code + outcome text, characters, from
``buffer.sqlite``; steps of script answers without parents are left out). It fits
``seconds = a_label + b * length`` by least squares, one intercept per label and one shared
slope (none when every length lies within 5 % of the median), and prints each label's seconds
at the median length with its standard error, the slope, the residual s.d. and each run's
correlation of seconds with length.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rpg_core.cli import ArgumentParser, UsageError, run_cli  # noqa: E402

PROG = "python benchmarks/ppo_time.py"


@dataclass(frozen=True)
class RunSteps:
    """One run's fresh PPO steps: ``length[i]`` (``unit``) and ``seconds[i]`` of step
    ``steps[i]``; float64 arrays of one shape."""

    steps: np.ndarray
    length: np.ndarray
    seconds: np.ndarray
    unit: str


def read_run(run_dir: Path, unit: str | None = None) -> RunSteps:
    """The fresh PPO steps of ``run_dir`` with their lengths.

    ``unit``: ``"tokens"`` (``ppo/seq_len``), ``"chars"`` (longest parent) or None (tokens
    where every step records them). Raises ValueError when the run has no metrics, no fresh PPO
    step, or (``unit="tokens"``) a step without ``ppo/seq_len``.
    """
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"{run_dir}: no metrics.jsonl (not a run folder)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    fresh = [
        r
        for r in rows
        if r.get("ppo_seconds") is not None
        and math.isfinite(float(r["ppo_seconds"]))
        and not r.get("replayed")
    ]
    if not fresh:
        raise ValueError(f"{run_dir}: no fresh PPO step in metrics.jsonl")
    has_tokens = all(r.get("ppo/seq_len") is not None for r in fresh)
    if unit == "tokens" and not has_tokens:
        raise ValueError(f"{run_dir}: a step has no ppo/seq_len; use the parents' characters")
    unit = unit or ("tokens" if has_tokens else "chars")
    if unit == "tokens":
        lengths = {int(r["step"]): float(r["ppo/seq_len"]) for r in fresh}
    else:
        lengths = _longest_parents(run_dir / "buffer.sqlite")
    kept = [r for r in fresh if int(r["step"]) in lengths]
    return RunSteps(
        steps=np.array([int(r["step"]) for r in kept], dtype=np.float64),
        length=np.array([lengths[int(r["step"])] for r in kept], dtype=np.float64),
        seconds=np.array([float(r["ppo_seconds"]) for r in kept], dtype=np.float64),
        unit=unit,
    )


def _longest_parents(db: Path) -> dict[int, float]:
    """Per step >= 1: the longest parent (code + outcome text, characters) of its answers."""
    from rpg_llm.loop.buffer import read_samples

    samples = read_samples(db)
    by_id = {s.id: s for s in samples}
    longest: dict[int, float] = {}
    for s in samples:
        p = by_id.get(s.parent_id) if s.step >= 1 else None
        if p is not None:
            longest[s.step] = max(
                longest.get(s.step, 0.0), float(len(p.code) + len(p.outcome_text))
            )
    return longest


@dataclass(frozen=True)
class Fit:
    """``seconds = intercept[label] + slope * length`` (seconds per length unit);
    ``at_ref[label]`` = (seconds at
    ``ref_length``, its standard error); ``resid_sd`` in seconds (ddof = parameters)."""

    slope: float
    intercept: dict[str, float]
    ref_length: float
    at_ref: dict[str, tuple[float, float]]
    resid_sd: float
    n: int


def fit(groups: Mapping[str, Sequence[RunSteps]]) -> Fit:
    """Least squares with one intercept per label and a shared slope over all steps; when
    every length lies within 5 % of the median the slope is not fitted (0) and each label's
    value is its mean.

    Raises ValueError when a label has no step, the units differ, or there are not more steps
    than parameters.
    """
    units = {r.unit for runs in groups.values() for r in runs}
    if len(units) != 1:
        raise ValueError(f"runs measure length in different units: {sorted(units)}")
    labels = list(groups)
    L = {k: np.concatenate([r.length for r in groups[k]]) for k in labels}
    T = {k: np.concatenate([r.seconds for r in groups[k]]) for k in labels}
    for k in labels:
        if L[k].size == 0:
            raise ValueError(f"label {k!r} has no PPO step")
    length = np.concatenate([L[k] for k in labels])
    seconds = np.concatenate([T[k] for k in labels])
    ref = float(np.median(length))
    # lengths within 5 % of the median cannot fix a slope: the intercepts are then the means
    sloped = bool(np.ptp(length) > 0.05 * abs(ref))
    n, p = length.size, len(labels) + int(sloped)
    if n <= p:
        raise ValueError(f"{n} steps for {p} parameters: too few to fit")
    X = np.zeros((n, p))
    start = 0
    for j, k in enumerate(labels):
        X[start : start + L[k].size, j] = 1.0
        start += L[k].size
    if sloped:
        X[:, -1] = length
    coef, *_ = np.linalg.lstsq(X, seconds, rcond=None)
    resid = seconds - X @ coef
    sigma2 = float(resid @ resid) / (n - p)
    cov = sigma2 * np.linalg.pinv(X.T @ X)
    at_ref = {}
    for j, k in enumerate(labels):
        g = np.zeros(p)
        g[j] = 1.0
        if sloped:
            g[-1] = ref
        at_ref[k] = (float(g @ coef), math.sqrt(max(float(g @ cov @ g), 0.0)))
    return Fit(
        slope=float(coef[-1]) if sloped else 0.0,
        intercept={k: float(coef[j]) for j, k in enumerate(labels)},
        ref_length=ref,
        at_ref=at_ref,
        resid_sd=math.sqrt(sigma2),
        n=n,
    )


def _corr(r: RunSteps) -> float:
    if r.length.size < 3 or np.ptp(r.length) == 0 or np.ptp(r.seconds) == 0:
        return math.nan
    return float(np.corrcoef(r.length, r.seconds)[0, 1])


def report(groups: Mapping[str, Sequence[tuple[str, RunSteps]]]) -> str:
    """The markdown report of :func:`fit` over ``groups`` (label -> [(run name, steps)])."""
    f = fit({k: [r for _, r in runs] for k, runs in groups.items()})
    unit = next(r.unit for runs in groups.values() for _, r in runs)
    first = next(iter(groups))
    lines = [
        f"| label | runs | steps | length ({unit}) | PPO s per step | mean | at {f.ref_length:g} "
        f"{unit} | vs {first} |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    base = f.at_ref[first][0]
    for k, runs in groups.items():
        L = np.concatenate([r.length for _, r in runs])
        T = np.concatenate([r.seconds for _, r in runs])
        at, se = f.at_ref[k]
        lines.append(
            f"| {k} | {len(runs)} | {L.size} | {L.min():g}-{L.max():g} | {T.min():.1f}-"
            f"{T.max():.1f} | {T.mean():.1f} | {at:.1f} ± {se:.1f} | {at / base:.3f}x |"
        )
    corr = ", ".join(f"{name} {_corr(r):.2f}" for runs in groups.values() for name, r in runs)
    lines += [
        "",
        (
            f"Shared slope {f.slope:.4g} s per {unit}"
            if f.slope
            else "Lengths within 5 % of "
            "their median: no slope fitted, each label's value is its mean"
        )
        + f"; residual s.d. {f.resid_sd:.1f} s over {f.n} "
        f"steps. Correlation of seconds with length per run: {corr}.",
    ]
    return "\n".join(lines) + "\n"


def _main(argv: Sequence[str] | None) -> int:
    ap = ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    ap.add_argument("runs", nargs="+", help="LABEL=RUN_DIR: run folders grouped by label")
    ap.add_argument(
        "--unit",
        choices=("tokens", "chars"),
        default=None,
        help="length measure: padded tokens (ppo/seq_len) or the longest parent's characters "
        "(default: tokens where every run records them)",
    )
    args = ap.parse_args(argv)
    named: list[tuple[str, Path]] = []
    for item in args.runs:
        label, sep, folder = item.partition("=")
        if not sep or not label or not folder:
            raise UsageError(f"{item!r} is not LABEL=RUN_DIR")
        if not (Path(folder) / "metrics.jsonl").is_file():
            raise UsageError(f"{folder}: not a run folder (no metrics.jsonl)")
        named.append((label, Path(folder)))
    unit = args.unit
    if unit is None:
        try:
            for _, folder in named:
                read_run(folder, "tokens")
            unit = "tokens"
        except ValueError:
            unit = "chars"
    groups: dict[str, list[tuple[str, RunSteps]]] = {}
    for label, folder in named:
        try:
            steps = read_run(folder, unit)
        except ValueError as e:
            raise UsageError(str(e)) from e
        groups.setdefault(label, []).append((f"{label}:{folder.name}", steps))
    try:
        print(report(groups), end="")
    except ValueError as e:
        raise UsageError(str(e)) from e
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (``rpg_core.cli`` convention: usage error exit 2, other failure exit 1)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
