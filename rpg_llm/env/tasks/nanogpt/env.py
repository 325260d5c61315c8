"""Run one edited training script under ``torchrun`` in the sandbox and grade it.

Paper section 5.2: the action is an edited ``train_gpt.py``; ``delta`` is the wall
time of the whole process tree as measured by the environment (sandbox start, interpreter and
torch import, rendezvous, compile, training, evaluation, checkpoint); a timeout is charged the
full timeout.  Integrity guard (official mode): the public folder (data loader, evaluation,
settings, data) is read-only and hash-checked before and after the run; the official val loss is
recomputed by ``official_eval.py`` (the environment's code, in a second sandboxed run) from the
checkpoint the script saved, on held-out tokens the script could not read; a final reported loss
below the official one by more than ``report_tolerance`` (a fabricated line), a val line computed
on a budget other than ``val_tokens``, or a changed guarded file makes the sample invalid.

Every file the host reads from the attempt's working folder (the checkpoint, the subprocess
backend's copy of the guarded files) is opened as an untrusted plain file
(``rpg_llm.env.sandbox.files``): a link, FIFO, device or an oversized file there makes the sample
invalid with the reason; it is never followed.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rpg_llm.env.outcome import Outcome
from rpg_llm.env.sandbox import make_sandbox
from rpg_llm.env.sandbox.base import describe_exception
from rpg_llm.env.sandbox.files import (
    UnsafeFileError,
    copy_workdir_file,
    open_workdir_file,
    read_workdir_file,
)
from rpg_llm.env.tasks.nanogpt.data import hash_files
from rpg_llm.env.tasks.nanogpt.logparse import ValLine, check_cadence, parse_val_lines
from rpg_llm.env.tasks.nanogpt.rewards import (
    charged_time,
    rate_reward,
    rpg_reward,
    vanilla_reward,
)
from rpg_llm.env.tasks.nanogpt.settings import NanoGPTSettings

if TYPE_CHECKING:  # pragma: no cover - annotations only: the task runs its attempts through here
    from rpg_llm.env.tasks.nanogpt.task import NanoGPTTask

__all__ = ["NanoGPTOutcome", "Verdict", "launcher_code", "grade_log", "run_attempt", "run_batch"]

SCRIPT = "train_gpt.py"
OFFICIAL_EVAL = Path(__file__).with_name("official_eval.py")
CHECKPOINT = "final_model.pt2"
MAX_CHECKPOINT_BYTES = 4 * 2**30
"""Largest checkpoint the host copies for the official evaluation, bytes (larger: invalid)."""


@dataclass(frozen=True)
class NanoGPTOutcome(Outcome):
    """One graded attempt: an :class:`rpg_llm.env.outcome.Outcome` with the speedrun's rewards.

    The inherited fields: ``status`` is ``"ok"`` (valid, including a valid timeout) |
    ``"invalid"`` | ``"timeout"`` | ``"oom"`` | ``"error"`` | ``"infra"`` (the set-up, not the
    script, failed); ``delta`` the wall time charged to the sample, seconds (a timeout: the full
    timeout); ``score`` the best val loss ``L`` (official when ``settings.official``), nats per
    token, ``None`` when invalid; ``raw_reward`` the RPG arm's reward before
    ``- rho_hat * delta`` (``rewards.rpg_reward``); ``outcome_text`` the text for the improve
    prompt; ``cpu_s`` not measured here (``None``).

    Attributes:
      rate_reward: what the reward-rate estimator is fed (``max(0, 10 - L)`` or 0).
      vanilla_reward: the vanilla arm's reward (``rewards.vanilla_reward``).
      charged_s: time charged in the RPG arm (invalid: the full timeout).
      reported_loss: the script's own final (or last) val loss, ``None`` if none.
      timed_out: the run hit the timeout.
    """

    rate_reward: float = 0.0
    vanilla_reward: float = -3000.0
    charged_s: float = 0.0
    reported_loss: float | None = None
    timed_out: bool = False


class Verdict(NamedTuple):
    """Validity of a run from its log (``grade_log``).

    Attributes:
      valid: the log passes the validity rules.
      reason: why not (empty when valid).
      loss: the best (minimum) reported val loss when valid, nats per token.
      lines: the parsed val lines.
    """

    valid: bool
    reason: str
    loss: float | None
    lines: list[ValLine]


def launcher_code(
    code: str, settings: NanoGPTSettings, env: tuple[tuple[str, str], ...] = ()
) -> str:
    """The sandbox's ``solution.py``: write ``code`` to ``train_gpt.py`` and exec ``torchrun``.

    ``./input`` goes on ``PYTHONPATH`` so that the guarded modules import by name; ``env`` adds
    variables (e.g. the speedrun's ``DATA_PATH``).
    """
    return (
        "import os, sys\n"
        f"open({SCRIPT!r}, 'w', encoding='utf-8').write({code!r})\n"
        "os.environ['PYTHONPATH'] = os.path.abspath('input')\n"
        f"os.environ.update({dict(env)!r})\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'torch.distributed.run', "
        f"'--standalone', '--nproc_per_node={settings.nproc}', {SCRIPT!r}])\n"
    )


_GLOG = re.compile(r"^[WEIF]\d{4} ", re.MULTILINE)
_TB = re.compile(r"^(?:\[rank\d+\]:)?Traceback \(most recent call last\)", re.MULTILINE)


def script_error(stderr: str) -> str | None:
    """``"Type at line N: message"`` of the worker's traceback in ``train_gpt.py``.

    torchrun prints its own ``ChildFailedError`` traceback after the worker's; that one is skipped.
    """
    text = re.sub(r"^\[rank\d+\]: ?", "", stderr, flags=re.MULTILINE)
    starts = [m.start() for m in _TB.finditer(text)] + [len(text)]
    for a, b in reversed(list(zip(starts, starts[1:], strict=False))):
        chunk = text[a:b]
        if f'{SCRIPT}"' in chunk:
            cut = _GLOG.search(chunk)  # torchrun's own log lines after the worker's traceback
            return describe_exception(chunk if cut is None else chunk[: cut.start()], SCRIPT)
    return None


def grade_log(
    stdout: str, code: str, status: str, settings: NanoGPTSettings, *, have_checkpoint: bool
) -> Verdict:
    """Validity rules on the run's log (before the official evaluation).

    Valid: exit 0 with a parseable final val line and the cadence kept; a timeout counts as valid
    when timing was printed, a val loss exists and the cadence was kept.  Official mode also needs
    the checkpoint and ``val_tokens:K`` equal to ``settings.val_tokens`` on every line.

    Returns:
      ``Verdict``; ``loss`` = the best (minimum) reported val loss when valid.
    """
    lines = parse_val_lines(stdout, code)
    timed_out = status == "timeout"
    if status not in ("ok", "timeout"):
        return Verdict(False, status, None, lines)
    cad = check_cadence(lines, settings.val_every, require_final=not timed_out)
    if not cad.ok:
        return Verdict(False, f"invalid log: {cad.reason}", None, lines)
    if timed_out and lines[-1].train_time_s is None:
        return Verdict(False, "timed out without printing train_time", None, lines)
    if settings.official and settings.val_tokens:
        for ln in lines:
            got = ln.extra.get("val_tokens")
            if got != str(settings.val_tokens):
                return Verdict(
                    False,
                    f"val line at step {ln.step} used val_tokens:{got} "
                    f"instead of {settings.val_tokens} (the validation budget was changed)",
                    None,
                    lines,
                )
    if settings.official and not have_checkpoint:
        return Verdict(False, "the run saved no checkpoint (ngpt_eval.save_model)", None, lines)
    return Verdict(True, "", min(ln.val_loss for ln in lines), lines)


def _official_loss(task: NanoGPTTask, workdir: Path, sandbox_kind: str) -> tuple[float | None, str]:
    """Run ``official_eval.py`` on the attempt's checkpoint ``workdir / CHECKPOINT`` (copied as
    an untrusted plain file): ``(loss, "")`` or ``(None, reason)``."""
    s = task.settings
    with tempfile.TemporaryDirectory(prefix="nanogpt-eval-") as d:
        folder = Path(d)
        try:
            copy_workdir_file(workdir, CHECKPOINT, folder / "model.pt2", MAX_CHECKPOINT_BYTES)
        except UnsafeFileError as exc:
            return None, f"checkpoint refused: {exc.reason}"
        shutil.copyfile(task.private_dir / "heldout.bin", folder / "heldout.bin")
        (folder / "settings.json").write_text(s.to_json())
        for p in folder.iterdir():
            p.chmod(0o644)
        folder.chmod(0o755)
        box = make_sandbox(sandbox_kind, memory_bytes=s.memory_bytes, threads=1)
        res = box.run(OFFICIAL_EVAL.read_text(), folder, s.eval_timeout_s)
        try:
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
            if res.status != "ok" or not lines:
                return None, f"official evaluation failed: {res.outcome_text}"
            out = json.loads(lines[-1])
        finally:
            res.cleanup()
    if not out.get("ok"):
        return None, str(out.get("reason"))
    loss = float(out["loss"])
    if not math.isfinite(loss):
        return None, "official evaluation gave a non-finite loss"
    return loss, ""


def _outcome(
    task: NanoGPTTask,
    status: str,
    delta: float,
    text: str,
    loss: float | None,
    reported: float | None,
    timed_out: bool,
) -> NanoGPTOutcome:
    s = task.settings
    valid = status == "ok"
    return NanoGPTOutcome(
        status=status,
        delta=float(delta),
        score=loss if valid else None,
        raw_reward=rpg_reward(loss, valid, s.target_loss),
        valid=valid,
        outcome_text=text,
        rate_reward=rate_reward(loss, valid),
        vanilla_reward=vanilla_reward(loss, valid, s.target_loss, delta),
        charged_s=charged_time(valid, delta, s.timeout_s),
        reported_loss=reported,
        timed_out=timed_out,
    )


def _changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before if after.get(k) != before[k])


def _hash_workdir_copy(workdir: Path, task: NanoGPTTask) -> dict[str, str]:
    """SHA-256 of the guarded files in ``workdir/input`` (the subprocess backend's copy), each
    read as an untrusted plain file no larger than the public original; ``"missing"`` when
    absent, ``"refused: <reason>"`` when it is a link, FIFO, device or too large."""
    import hashlib

    out = {}
    for name in task.guarded:
        original = task.public_dir / name
        limit = max(1, original.stat().st_size) if original.is_file() else 1
        try:
            data = read_workdir_file(workdir, f"input/{name}", limit)
        except UnsafeFileError as exc:
            out[name] = "missing" if exc.missing else f"refused: {exc.reason}"
            continue
        out[name] = hashlib.sha256(data).hexdigest()
    return out


def _checkpoint_problem(workdir: Path) -> str | None:
    """``None`` when ``workdir / CHECKPOINT`` is absent or a plain file of bounded size; else why
    it is refused (a link, FIFO, device, folder, or too large)."""
    try:
        os.close(open_workdir_file(workdir, CHECKPOINT, MAX_CHECKPOINT_BYTES))
    except UnsafeFileError as exc:
        return None if exc.missing else exc.reason
    return None


def run_attempt(
    code: str, task: NanoGPTTask, sandbox: Any, timeout_s: float | None = None
) -> NanoGPTOutcome:
    """Execute ``code`` as ``train_gpt.py`` under torchrun in ``sandbox``'s backend and grade it.

    Args:
      code: the edited training script.
      task: a ``NanoGPTTask`` (``load_task``).
      sandbox: a ``Sandbox`` (only its backend kind is used: the attempt gets its own limits from
        ``task.settings``), or a kind name (``"bwrap"``, ``"subprocess"``, ``"auto"``);
        ``task.settings.sandbox`` overrides it.
      timeout_s: wall-clock limit, seconds (default ``task.settings.timeout_s``).

    Returns:
      ``NanoGPTOutcome``.

    Raises:
      ValueError: ``code`` not a str or a bad ``timeout_s`` (before launching).  A sandbox or
        official evaluation that cannot start is not raised: the outcome has status ``"infra"``.
    """
    s = task.settings
    if not isinstance(code, str):
        raise ValueError(f"code must be a str, got {type(code).__name__}")
    timeout_s = s.timeout_s if timeout_s is None else timeout_s
    if not isinstance(timeout_s, int | float) or not 0 < timeout_s < math.inf:
        raise ValueError(f"timeout_s must be a positive finite number, got {timeout_s!r}")
    kind = sandbox if isinstance(sandbox, str) else getattr(sandbox, "name", "auto")
    kind = s.sandbox or kind
    box = make_sandbox(
        kind,
        memory_bytes=s.memory_bytes,
        nproc=s.nproc_limit,
        threads=s.threads,
        drop_privileges=s.drop_privileges,
    )
    before = hash_files(task.public_dir, task.guarded)
    if task.guard_hashes and _changed(task.guard_hashes, before):
        bad = _changed(task.guard_hashes, before)
        return _outcome(
            task, "infra", 0.0, f"set-up error: guarded files changed {bad}", None, None, False
        )
    try:
        res = box.run(
            launcher_code(code, s, task.env), task.public_dir, timeout_s, hide=[task.private_dir]
        )
    except (OSError, RuntimeError) as exc:  # the sandbox could not start: not the script's fault
        text = f"set-up error: the sandbox did not start: {type(exc).__name__}: {exc}"
        return _outcome(task, "infra", 0.0, text[:300], None, None, False)
    try:
        timed_out = res.status == "timeout"
        delta = float(timeout_s) if timed_out else float(res.delta)
        after = [hash_files(task.public_dir, task.guarded)]
        copy = res.workdir / "input"
        if not copy.is_symlink() and copy.is_dir() and any(copy.iterdir()):
            after.append(_hash_workdir_copy(res.workdir, task))  # subprocess backend's copy
        for hashes in after:
            bad = _changed(before, hashes)
            if bad:
                text = f"invalid: guarded files were changed: {', '.join(bad)}"
                return _outcome(task, "invalid", delta, text, None, None, timed_out)
        refused = _checkpoint_problem(res.workdir)
        if refused is not None:
            text = f"invalid: checkpoint refused: {refused}"
            return _outcome(task, "invalid", delta, text, None, None, timed_out)
        have_ckpt = (res.workdir / CHECKPOINT).is_file()
        verdict = grade_log(res.stdout, code, res.status, s, have_checkpoint=have_ckpt)
        reported = verdict.lines[-1].val_loss if verdict.lines else None
        if not verdict.valid:
            if res.status in ("error", "oom"):
                text = script_error(res.stderr) or res.outcome_text
                return _outcome(task, res.status, delta, text, None, reported, False)
            status = "timeout" if timed_out else "invalid"
            text = f"{res.outcome_text}; {verdict.reason}" if timed_out else verdict.reason
            return _outcome(task, status, delta, text, None, reported, timed_out)
        loss = verdict.loss
        if s.official:
            try:
                loss, why = _official_loss(task, res.workdir, kind)
            except (OSError, RuntimeError) as exc:
                text = f"set-up error: the official evaluation did not start: {exc}"
                return _outcome(task, "infra", delta, text[:300], None, reported, timed_out)
            if loss is None:
                return _outcome(
                    task, "invalid", delta, f"invalid: {why}", None, reported, timed_out
                )
            if reported is not None and reported < loss - s.report_tolerance:
                text = (
                    f"invalid: reported final val loss {reported:.4f} is below the official "
                    f"{loss:.4f} by more than {s.report_tolerance:g} (fabricated or mis-measured)"
                )
                return _outcome(task, "invalid", delta, text, None, reported, timed_out)
        assert loss is not None
        reached = "reached" if loss <= s.target_loss else "missed"
        last = verdict.lines[-1]
        text = (
            f"val loss {loss:.4f} ({'official, held-out' if s.official else 'best logged'}; "
            f"target {s.target_loss:.4f} {reached}), wall time {delta:.1f} s, "
            f"{last.step}/{last.total} steps"
            + (f", script train_time {last.train_time_s:.1f} s" if last.train_time_s else "")
            + (f", timed out after {timeout_s:g} s" if timed_out else "")
        )
        return _outcome(task, "ok", delta, text, loss, reported, timed_out)
    finally:
        res.cleanup()


def run_batch(
    codes: Sequence[str],
    task: NanoGPTTask,
    sandbox: Any,
    timeout_s: float | None = None,
    executor: Any = None,
) -> list[NanoGPTOutcome]:
    """``run_attempt`` over a batch (same signature as ``rpg_llm.env.tasks.runner.run_batch``).

    Args:
      codes: B scripts.  task, sandbox, timeout_s: as in ``run_attempt``.
      executor: anything with ``map(fn, items) -> list`` (``LocalExecutor``); default: one after
        another (the attempts use all the CPUs they are given).

    Raises:
      ValueError: a code is not a str (checked before launching).
    """
    codes = list(codes)
    for i, code in enumerate(codes):
        if not isinstance(code, str):
            raise ValueError(f"codes[{i}] must be a str, got {type(code).__name__}")
    fn = partial(run_attempt, task=task, sandbox=sandbox, timeout_s=timeout_s)
    if executor is not None:
        return list(executor.map(fn, codes))
    return [fn(c) for c in codes]
