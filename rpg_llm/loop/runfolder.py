"""The run folder: everything a training run writes, and what ``--resume`` reads back.

Layout::

    RUN_DIR/
      config.json            settings of the run (method, task, model, seeded or not, ...)
      identity.json          the same settings and the model's weights digest, written once at
                             creation (read-only); a resume refuses a config.json that differs
                             (rpg_llm.loop.runidentity)
      buffer.sqlite          every sample, durably (rpg_llm.loop.buffer.SampleBuffer, SQLite WAL)
      metrics.jsonl          one JSON line per finished step
      tb/                    TensorBoard event files
      sft.json               SFT warm start: losses and SHA-256 of the fine-tuned weights
      sft_weights.safetensors  the fine-tuned weights (written once; a resume loads them)
      checkpoints/step_N/    trainer state after step N: what is trained and its optimiser
                             states (LoRA: adapters + value head only; else actor + critic)
      rollouts/step_N.pt     generated responses of step N, written before execution
      logs/run.log           the log
      samples.csv            one line per sample (step, row, parent, status, score, rewards, ...)
      scripts/step_N/row_R.py  every executed (or rejected) script, as the policy wrote it
      figures/               budget-curve plot (PNG, PDF) and its CSV
      .lock                  held (``flock``) by the process that runs or resumes the run

Writes are atomic (temporary file, then rename), so a SIGKILL leaves either the old or the new
version of a file, never half of one.  One process at a time: :meth:`RunFolder.lock` takes an
exclusive ``flock`` on ``.lock`` (released by the kernel when the process ends, however it ends)
and a second process is refused with :class:`RunFolderBusy` naming the holder.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from rpg_core.diskfull import naming_disk_full, write_with
from rpg_core.filelock import FileLock, LockBusy
from rpg_llm.loop import runidentity

__all__ = [
    "RunFolder",
    "RunFolderBusy",
    "RunLock",
    "write_json_atomic",
    "SAMPLES_CSV_FIELDS",
    "TRL_DIR",
]

TRL_DIR = "trl"
"""Subfolder of an ``--engine trl`` run folder holding TRL's ``checkpoint-<global step>``."""

SAMPLES_CSV_FIELDS = [
    "step",
    "row",
    "id",
    "parent",
    "status",
    "score",
    "raw_reward",
    "time_s",
    "relative_reward",
    "tokens",
    "script",
]


class RunFolderBusy(LockBusy):
    """Another process holds the run folder's lock (it is running or resuming that run)."""


class RunLock(FileLock):
    """The run folder's :class:`rpg_core.filelock.FileLock` on ``RUN_DIR/.lock`` (see
    :meth:`RunFolder.lock`), taken without waiting; entering it again while held is a no-op."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, f"run folder {path.parent}", wait=False)

    def acquire(self) -> RunLock:
        """Take the lock without waiting.

        Raises:
            RunFolderBusy: another process holds it; the message names its pid and host.
        """
        try:
            super().acquire()
        except LockBusy:
            holder = self.holder() or "another process"
            raise RunFolderBusy(
                f"run folder {self.path.parent} is in use by {holder}; wait for it to end or stop "
                "it first"
            ) from None
        return self

    def __enter__(self) -> RunLock:
        return self if self.held else self.acquire()


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically.

    Raises:
        DiskFull: the disk is full (the old file, if any, is left whole).
    """
    _write_atomic(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename; a failed write leaves
    ``path`` as it was and no temporary file.

    Raises:
        DiskFull: the disk is full (names ``path``).
    """
    tmp = path.with_name(path.name + ".tmp")
    with naming_disk_full(path, lambda: tmp.unlink(missing_ok=True)):
        tmp.write_bytes(data)
        os.replace(tmp, path)


def _append(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` and fsync; a failed append is cut off again, so the file
    never ends in half a line.

    Raises:
        DiskFull: the disk is full (names ``path``).
    """
    with open(path, "ab") as fh:
        size = fh.tell()

        def cut() -> None:
            try:
                os.truncate(path, size)
            except OSError:
                pass

        with naming_disk_full(path, cut):
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())


class RunFolder:
    """Paths and small durable records of one run folder.

    Args:
        root: the run folder (created by :meth:`create`).
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    # -- paths ----------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def identity_path(self) -> Path:
        """The run's identity record (:mod:`rpg_llm.loop.runidentity`), written once."""
        return self.root / runidentity.IDENTITY_FILE

    @property
    def buffer_path(self) -> Path:
        return self.root / "buffer.sqlite"

    @property
    def metrics_path(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def tb_dir(self) -> Path:
        return self.root / "tb"

    @property
    def sft_weights_path(self) -> Path:
        """The SFT-fine-tuned policy weights (safetensors), written once after the SFT."""
        return self.root / "sft_weights.safetensors"

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def rollout_dir(self) -> Path:
        return self.root / "rollouts"

    @property
    def log_path(self) -> Path:
        return self.root / "logs" / "run.log"

    @property
    def figure_dir(self) -> Path:
        return self.root / "figures"

    @property
    def samples_csv_path(self) -> Path:
        return self.root / "samples.csv"

    @property
    def scripts_dir(self) -> Path:
        return self.root / "scripts"

    def script_path(self, step: int, row: int) -> Path:
        return self.scripts_dir / f"step_{step:06d}" / f"row_{row:03d}.py"

    # -- creation -------------------------------------------------------------------------------
    def create(self, config: dict[str, Any]) -> None:
        """Make the folder tree, write the identity record (``identity.json``: the settings and
        the weights digest of ``config["model"]`` where it is on this machine, once) and
        ``config.json``.

        Raises:
            ValueError: the folder already holds a run (use ``--resume`` for it).
        """
        if self.config_path.exists():
            raise ValueError(
                f"{self.root} already holds a run; pass --resume {self.root} to continue it "
                f"or choose another --out"
            )
        for d in (self.root, self.checkpoint_dir, self.rollout_dir, self.log_path.parent):
            d.mkdir(parents=True, exist_ok=True)
        model = config.get("model")
        digest = runidentity.model_digest(model) if isinstance(model, str) else None
        self.identity_path.unlink(missing_ok=True)  # a record left by a creation cut short
        runidentity.write_identity(self.identity_path, runidentity.identity_record(config, digest))
        write_json_atomic(self.config_path, config)

    def load_identity(self) -> dict[str, Any] | None:
        """The identity record (None: a folder made before records existed).

        Raises:
            ValueError: ``identity.json`` is not a record (names it).
        """
        return runidentity.read_identity(self.identity_path)

    def check_identity(self) -> None:
        """Check that ``config.json`` still holds the settings the run was made with (its
        identity record), but for what a resume may change
        (:data:`rpg_llm.loop.runidentity.RESUME_MAY_CHANGE`). A folder without a record
        passes.

        Raises:
            ValueError: one line naming the setting, its value at creation and now, and what
                to do.
        """
        record = self.load_identity()
        if record is None:
            return
        diff = runidentity.identity_difference(record, self.load_config())
        if diff is not None:
            may = ", ".join(runidentity.RESUME_MAY_CHANGE)
            raise ValueError(
                f"{self.config_path} changes {diff.text()} (the run's record: "
                f"{self.identity_path}); a resume keeps the run's settings and may change only "
                f"{may} (the budget only to a larger one): put {diff.field} back, or start a new "
                f"run from these settings with --config {self.config_path} --out NEW_FOLDER"
            )

    def load_config(self) -> dict[str, Any]:
        """Read ``config.json``.

        Raises:
            ValueError: the folder holds no run, or ``config.json`` is not a JSON object (the
                message names the file).
        """
        if not self.config_path.exists():
            raise ValueError(f"{self.root} is not a run folder (no config.json)")
        try:
            config = json.loads(self.config_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{self.config_path} is not valid JSON: {exc}") from None
        if not isinstance(config, dict):
            raise ValueError(
                f"{self.config_path} must hold a JSON object of settings, not a "
                f"{type(config).__name__}"
            )
        return config

    def lock(self) -> RunLock:
        """The folder's lock, taken: use as ``with folder.lock(): ...``.

        Raises:
            RunFolderBusy: another process runs or resumes this folder.
        """
        return RunLock(self.root / ".lock").acquire()

    def check_resumable(self) -> None:
        """Check, before any model loads, that ``config.json`` is the run's own
        (:meth:`check_identity`) and that a resume can read the run's buffer.

        Raises:
            ValueError: a setting that differs from the run's record (named); naming
                ``buffer.sqlite``: missing or empty while steps were checkpointed, or not a
                readable SQLite database with a ``samples`` table.
        """
        self.check_identity()
        path = self.buffer_path
        done = self.latest_checkpoint()
        size = path.stat().st_size if path.exists() else None
        if not size:
            if done is not None:
                state = "missing" if size is None else "empty (0 bytes)"
                raise ValueError(
                    f"{path} is {state} but step {done} was checkpointed: the samples are lost; "
                    "start a new run"
                )
            return
        try:
            # a quoted URI: a folder name may hold ``?``, ``#``, ``%`` or spaces
            db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
            try:
                db.execute("SELECT count(*) FROM samples").fetchone()
            finally:
                db.close()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} is not a readable sample buffer: {exc}") from None

    # -- metrics --------------------------------------------------------------------------------
    def append_metrics(self, record: dict[str, Any]) -> None:
        """Append one JSON line and fsync it (a failed append leaves no half line).

        Raises:
            DiskFull: the disk is full (names ``metrics.jsonl``).
        """
        line = json.dumps(record, sort_keys=True, default=float) + "\n"
        _append(self.metrics_path, line.encode())

    def read_metrics(self) -> list[dict[str, Any]]:
        """All complete metric lines (a torn last line is skipped)."""
        if not self.metrics_path.exists():
            return []
        out = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def drop_sft_metrics(self) -> int:
        """Remove the SFT loss lines (those with ``sft_step``) from ``metrics.jsonl``, before an
        SFT stopped in its middle is run again; returns how many there were."""
        metrics = self.read_metrics()
        keep = [m for m in metrics if "sft_step" not in m]
        if len(keep) < len(metrics):
            text = "".join(json.dumps(m, sort_keys=True) + "\n" for m in keep)
            _write_atomic(self.metrics_path, text.encode())
        return len(metrics) - len(keep)

    def truncate_metrics(self, max_step: int) -> None:
        """Keep only the metric lines of steps <= ``max_step`` (before replaying later steps)."""
        keep = [m for m in self.read_metrics() if int(m.get("step", 0)) <= max_step]
        text = "".join(json.dumps(m, sort_keys=True) + "\n" for m in keep)
        _write_atomic(self.metrics_path, text.encode())

    # -- samples on disk ------------------------------------------------------------------------
    def write_script(self, step: int, row: int, code: str) -> Path:
        """Write one script (atomically; rewriting the same script is harmless)."""
        path = self.script_path(step, row)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, code.encode())
        return path

    def append_samples_csv(self, rows: list[dict[str, Any]]) -> None:
        """Append rows (:data:`SAMPLES_CSV_FIELDS`) to ``samples.csv`` and fsync (a failed
        append leaves no half row).

        Raises:
            DiskFull: the disk is full (names ``samples.csv``).
        """
        new = not self.samples_csv_path.exists() or not self.samples_csv_path.stat().st_size
        text = io.StringIO()
        w = csv.DictWriter(text, fieldnames=SAMPLES_CSV_FIELDS)
        if new:
            w.writeheader()
        w.writerows(rows)
        _append(self.samples_csv_path, text.getvalue().encode())

    def read_samples_csv(self) -> list[dict[str, str]]:
        """The rows of ``samples.csv`` (a torn last line is dropped)."""
        if not self.samples_csv_path.exists():
            return []
        with open(self.samples_csv_path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        return [r for r in rows if r.get("script")]

    def reset_samples_csv(self, seed_rows: list[dict[str, Any]], max_step: int) -> None:
        """Rewrite ``samples.csv`` as ``seed_rows`` then its rows of steps ``1 .. max_step``
        (before later steps are replayed on resume, so no row is written twice)."""
        keep = [r for r in self.read_samples_csv() if 1 <= int(r["step"]) <= max_step]
        self.write_samples_csv([*seed_rows, *keep])

    def write_samples_csv(self, rows: list[dict[str, Any]]) -> None:
        """Rewrite ``samples.csv`` as ``rows`` (atomically).

        Raises:
            DiskFull: the disk is full (the old file is left whole).
        """
        text = io.StringIO()
        w = csv.DictWriter(text, fieldnames=SAMPLES_CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)
        _write_atomic(self.samples_csv_path, text.getvalue().encode())

    # -- checkpoints ----------------------------------------------------------------------------
    def checkpoint_path(self, step: int) -> Path:
        return self.checkpoint_dir / f"step_{step:06d}"

    def checkpoints(self) -> list[int]:
        """Steps with a complete checkpoint, ascending."""
        if not self.checkpoint_dir.exists():
            return []
        steps = []
        for p in self.checkpoint_dir.iterdir():
            number = p.name.removeprefix("step_")
            if p.name.startswith("step_") and number.isdigit() and (p / "trainer.pt").exists():
                steps.append(int(number))  # not step_N.tmp, nor a folder moved aside
        return sorted(steps)

    def latest_checkpoint(self) -> int | None:
        """The last checkpointed step, or None."""
        steps = self.checkpoints()
        return steps[-1] if steps else None

    def checkpoint_fallback(self, step: int) -> int | None:
        """The checkpoint before ``step`` a resume can continue from when ``step``'s is lost:
        the latest earlier one whose later steps all have their rollouts kept (they are
        replayed from the run folder); None when there is none."""
        earlier = [s for s in self.checkpoints() if s < step]
        if not earlier:
            return None
        if all(self.rollout_path(s).exists() for s in range(earlier[-1] + 1, step + 1)):
            return earlier[-1]
        return None

    def damaged_checkpoint_advice(self, step: int, probe: bool = False) -> str:
        """What to do about the damaged checkpoint of ``step``: move it aside, then resume
        (which continues from the checkpoint before it, :meth:`checkpoint_fallback`, and
        replays the steps after that from the run folder), or, for the probe (``probe``),
        probe that earlier checkpoint; with no such earlier checkpoint, restore it from a copy
        or start a new run."""
        damaged = self.checkpoint_path(step)
        aside = f"mv {damaged} {damaged}.damaged"
        before = self.checkpoint_fallback(step)
        resume = f"python -m rpg_llm.run --resume {self.root}"
        if before is None:
            return (
                "the run keeps no earlier checkpoint with the rollouts to replay from it, so "
                f"the PPO state after step {step} is lost: restore {damaged} from a copy, or "
                "start a new run"
            )
        if probe:
            return (
                f"restore it from a copy, or move it aside ({aside}) to probe step {before}'s "
                f"checkpoint instead ({resume} rebuilds step {step}'s from there while the run "
                "has steps left)"
            )
        return (
            f"move it aside ({aside}) and resume again ({resume}): the run continues from step "
            f"{before}'s checkpoint and replays steps {before + 1}..{step} from the run folder"
        )

    @property
    def trl_dir(self) -> Path:
        """TRL's checkpoints of an ``--engine trl`` run (``checkpoint-<global step>``)."""
        return self.root / TRL_DIR

    def trl_checkpoint_path(self, step: int) -> Path:
        """TRL's checkpoint of global step ``step`` (``trl/checkpoint-<step>``)."""
        return self.trl_dir / f"checkpoint-{step}"

    def latest_trl_checkpoint(self) -> int:
        """TRL's last checkpointed global step (0: none); read without importing TRL."""
        names = (p.name.split("-", 1) for p in self.trl_dir.glob("checkpoint-*") if p.is_dir())
        return max((int(n[1]) for n in names if len(n) == 2 and n[1].isdigit()), default=0)

    def trained_step(self, engine: str) -> int | None:
        """The step of the policy a probe loads: the last PPO checkpoint, or for
        ``engine == "trl"`` TRL's last global step; None when there is none."""
        return (
            (self.latest_trl_checkpoint() or None) if engine == "trl" else self.latest_checkpoint()
        )

    def prune_checkpoints(self, keep: int) -> None:
        """Delete all but the newest ``keep`` checkpoints (and stale temporary folders)."""
        for p in self.checkpoint_dir.glob("*.tmp"):
            shutil.rmtree(p, ignore_errors=True)
        for step in self.checkpoints()[:-keep] if keep > 0 else []:
            shutil.rmtree(self.checkpoint_path(step), ignore_errors=True)

    # -- rollouts -------------------------------------------------------------------------------
    def rollout_path(self, step: int) -> Path:
        return self.rollout_dir / f"step_{step:06d}.pt"

    def save_rollout(self, step: int, rollout: dict[str, Any]) -> None:
        """Write the generated responses of ``step`` atomically (before they are executed)."""
        import torch  # only the loop writes rollouts; readers of a run folder need no torch

        path = self.rollout_path(step)
        tmp = path.with_name(path.name + ".tmp")
        with naming_disk_full(tmp, lambda: tmp.unlink(missing_ok=True)):
            write_with(tmp, lambda f: torch.save(rollout, f))
            os.replace(tmp, path)

    def load_rollout(self, step: int) -> dict[str, Any] | None:
        """The rollout of ``step``, or None if it was never written."""
        import torch

        path = self.rollout_path(step)
        return torch.load(path, weights_only=False) if path.exists() else None

    def prune_rollouts(self, upto: int) -> None:
        """Delete rollouts of steps <= ``upto`` (already covered by a checkpoint)."""
        for p in self.rollout_dir.glob("step_*.pt"):
            if int(p.stem.split("_")[1]) <= upto:
                p.unlink(missing_ok=True)
