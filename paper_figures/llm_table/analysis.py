"""What the finished runs did, read from their folders: per-step means of the generated scripts
(:func:`step_means`), what the answers did to their parents (:func:`edit_rows`), the probes'
summaries (:func:`probe_rows`), the runs' training-step time (:func:`run_step_seconds`) and what
a task's raw reward is (:func:`raw_reward_label`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from paper_figures.llm_table.plan import RunSpec
from paper_figures.llm_table.stats import Value, fmt
from rpg_core.cli import UsageError
from rpg_llm.config import LoopConfig
from rpg_llm.env import tasks
from rpg_llm.env.actions import switch_changed
from rpg_llm.loop.buffer import read_samples
from rpg_llm.loop.runfolder import RunFolder

__all__ = [
    "Row",
    "STEP_FIELDS",
    "EDIT_FIELDS",
    "PROBE_FIELDS",
    "raw_reward_label",
    "step_means",
    "edit_rows",
    "probed_step",
    "probe_rows",
    "run_step_seconds",
]

Row = dict[str, Value]
"""One CSV row: field -> value (numbers as written, ``"nan"`` where none)."""

STEP_FIELDS = [
    "task",
    "arm",
    "step",
    "n_runs",
    "valid_mean_time_s",
    "valid_mean_raw_reward",
    "valid_fraction",
]
_STEP_KEYS = ("valid_mean_time_s", "valid_mean_raw_reward", "valid_fraction")
EDIT_FIELDS = [
    "task",
    "arm",
    "runs",
    "answers",
    "valid",
    "switched",
    "switched_valid",
    "same_as_parent",
    "better_than_parent",
    "time_ratio_geo_mean",
]
PROBE_FIELDS = [
    "task",
    "arm",
    "seed",
    "policy",
    "trained_step",
    "answers",
    "valid_fraction",
    "mean_time_s",
    "mean_raw_reward",
    "mean_score",
    "changed_outcomes",
]


def raw_reward_label(task: str, cfg: LoopConfig) -> str:
    """What the raw reward of ``task``'s runs is, for the table's label: the leaderboard
    percentile (``--raw-reward percentile``), the percentile of a lower-is-better score, or the
    score, as the task's prepared competition folder on this machine tells; ``"raw reward"``
    when there is none to read."""
    if cfg.reward.raw_reward == "percentile":
        return "leaderboard percentile"
    try:
        root = Path(cfg.data_root) if cfg.data_root else None
        comp = tasks.load_competition(tasks.resolve_id(task), root)
    except (ValueError, OSError):
        return "raw reward"
    return "percentile of a lower-is-better score" if comp.lower_is_better else "score"


def step_means(task: str, run_dirs: Mapping[str, Sequence[Path]]) -> list[Row]:
    """Per arm and training step, the mean over the arm's runs of each run's step metrics
    (``metrics.jsonl``): mean measured time (seconds) and mean raw reward of the step's valid
    samples, and its valid fraction. What a policy that learns to write faster scripts at equal
    quality moves.

    Args:
        run_dirs: arm -> its finished run folders.

    Returns:
        Rows with the fields of :data:`STEP_FIELDS` (NaN, written "nan", where no run of the arm
        has a value; ``n_runs``: runs that reached the step).
    """
    rows = []
    for arm, dirs in run_dirs.items():
        by_step: dict[int, list[dict]] = {}
        for d in dirs:
            for m in RunFolder(d).read_metrics():
                if int(m.get("step", 0)) >= 1 and "valid_fraction" in m:
                    by_step.setdefault(int(m["step"]), []).append(m)
        for step in sorted(by_step):
            ms = by_step[step]
            row: Row = {"task": task, "arm": arm, "step": step, "n_runs": len(ms)}
            for k in _STEP_KEYS:
                vals = [float(m[k]) for m in ms if isinstance(m.get(k), int | float)]
                row[k] = fmt(float(np.mean(vals)) if vals else math.nan)
            rows.append(row)
    return rows


def edit_rows(task: str, run_dirs: Mapping[str, Sequence[Path]]) -> list[Row]:
    """Per arm, what the generated answers did to their parents: can edits cross the frontier?

    Every training sample (step >= 1) of the arm's runs is an answer, except ``infra`` samples
    (the machine failed; DESIGN.md section 7); its parent is the buffer sample it was generated
    from (none for an answer to the base prompt). Counts over the arm's runs:

    * ``valid``: answers whose script ran and was graded (status ``ok``);
    * ``switched``: answers whose script parses and changed a declared switch of their parent
      (a string constant whose comment quotes its values, such as the model family ``MODEL``;
      :func:`rpg_llm.env.actions.switch_changed`) to any other value or removed it;
      ``switched_valid`` those of them valid;
    * ``same_as_parent``: valid answers with a valid parent and the parent's raw reward exactly
      (a dead edit: a knob the parent's family ignores, or a no-op);
    * ``better_than_parent``: valid answers with a raw reward above their valid parent's;
    * ``time_ratio_geo_mean``: geometric mean of the answer's measured time over its parent's,
      valid pairs with both times > 0, times in the runs' measure (wall or CPU seconds; below
      1: the answers run faster than their parents).

    Args:
        task: competition id (the rows' ``task``).
        run_dirs: arm -> its finished run folders (each with ``buffer.sqlite``).

    Returns:
        One row per arm with the fields of :data:`EDIT_FIELDS` (``time_ratio_geo_mean`` as text,
        ``"nan"`` without a valid pair).

    Raises:
        ValueError: a run folder without ``buffer.sqlite``, or an unusable buffer (the message
            names the buffer's path).
    """
    rows = []
    for arm, dirs in run_dirs.items():
        n = {k: 0 for k in EDIT_FIELDS[4:-1]}
        answers, log_ratios = 0, []
        for d in dirs:
            samples = read_samples(RunFolder(d).buffer_path)
            by_id = {x.id: x for x in samples}
            for x in samples:
                if x.step < 1 or x.status == "infra":  # infra: the machine failed, not the answer
                    continue
                answers += 1
                ok = x.status == "ok"
                n["valid"] += ok
                parent = by_id.get(x.parent_id) if x.parent_id is not None else None
                if parent is None:
                    continue
                changed = switch_changed(parent.code, x.code)
                n["switched"] += changed
                n["switched_valid"] += changed and ok
                if not (ok and parent.status == "ok"):
                    continue
                n["same_as_parent"] += x.raw_reward == parent.raw_reward
                n["better_than_parent"] += x.raw_reward > parent.raw_reward
                if x.exec_time > 0 and parent.exec_time > 0:
                    log_ratios.append(math.log(x.exec_time / parent.exec_time))
        ratio = math.exp(float(np.mean(log_ratios))) if log_ratios else math.nan
        row: Row = {"task": task, "arm": arm, "runs": len(dirs), "answers": answers}
        rows.append(row | n | {"time_ratio_geo_mean": fmt(ratio)})
    return rows


def probed_step(record: Mapping[str, object]) -> int:
    """The trained policy's step in a ``probe.json`` record: ``trained_step``, or for an older
    file the ``(step N)`` of the trained policy's label.

    Raises:
        ValueError: neither is there as a whole number >= 0 (a malformed record).
    """
    try:
        step = record.get("trained_step")
        if step is None:
            policies = record["policies"]
            if not isinstance(policies, list):
                raise TypeError("policies is not a list")
            label = next(str(p["policy"]) for p in policies if p["policy"] != "sft")
            step = int(label.rsplit("step ", 1)[1].rstrip(")"))
    except (AttributeError, KeyError, IndexError, StopIteration, TypeError, ValueError):
        raise ValueError("no trained step (trained_step or a '(step N)' label)") from None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"trained_step must be a whole number >= 0, got {step!r}")
    return step


def probe_rows(specs: Sequence[RunSpec]) -> list[Row]:
    """The probe summaries (``<run>/probe/probe.json``, :mod:`rpg_llm.probe`) of the runs that
    have one, one row per run and policy (fields :data:`PROBE_FIELDS`; null means -> "nan";
    ``trained_step`` is the trained policy's step, empty on the SFT row; ``changed_outcomes``
    on the trained row, :func:`rpg_llm.probe.changed_outcomes` of the run's ``probe.csv`` as
    ``"changed/pairs"``, empty without one).

    Raises:
        UsageError: a ``probe.json`` that cannot be read (names the file; probe the run again).
    """
    from rpg_llm.probe import changed_outcomes  # rpg_llm.probe imports torch; a table need not

    rows = []
    for p in specs:
        path = p.run_dir / "probe" / "probe.json"
        if not path.exists():
            continue
        try:
            record = json.loads(path.read_text())
            step = str(probed_step(record))
            new = [_probe_row(p, pol, step) for pol in record["policies"]]
            answers = path.with_name("probe.csv")
            if answers.exists():
                with open(answers, newline="") as fh:
                    changed, n = changed_outcomes(list(csv.DictReader(fh)))
                for row in new:
                    row["changed_outcomes"] = "" if row["policy"] == "sft" else f"{changed}/{n}"
            rows += new
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UsageError(
                f"{path} cannot be read ({err!r}); remove it to probe the run again"
            ) from None
    return rows


def _probe_row(spec: RunSpec, pol: Mapping[str, object], step: str) -> Row:
    """One policy's entry of a ``probe.json`` as a :data:`PROBE_FIELDS` row.

    Raises:
        KeyError, TypeError, ValueError: a malformed entry (a field missing, or not a number).
    """
    sft = pol["policy"] == "sft"
    answers = pol["answers"]
    if not isinstance(answers, int | float | str):
        raise TypeError(f"answers {answers!r} is not a count")
    row: Row = {"task": spec.task, "arm": spec.method, "seed": spec.seed}
    row |= {"policy": "sft" if sft else "trained", "trained_step": "" if sft else step}
    row["answers"], row["changed_outcomes"] = answers, ""
    for k in ("valid_fraction", "mean_time_s", "mean_raw_reward", "mean_score"):
        v = pol[k]
        if not (v is None or isinstance(v, int | float | str)):
            raise TypeError(f"{k} {v!r} is not a number")
        row[k] = fmt(math.nan if v is None else float(v))
    return row


def run_step_seconds(run_dir: Path) -> float:
    """Wall seconds a run spent in its training steps: the sum over steps of ``metrics.jsonl``'s
    ``step_seconds`` (generation, execution and update; the last record of a step counts once).
    Start-up, the SFT warm start, seeding and the probe are not in it. 0.0 for no step."""
    per_step = {
        int(m["step"]): float(m["step_seconds"])
        for m in RunFolder(run_dir).read_metrics()
        if "step_seconds" in m and int(m.get("step", 0)) >= 1
    }
    return math.fsum(per_step.values())
