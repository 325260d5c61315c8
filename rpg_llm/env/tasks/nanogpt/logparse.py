"""Parse the validation lines of a NanoGPT speedrun log and check their cadence.

Reference facts: a run prints
``step:N/M val_loss:X train_time:Yms step_avg:Zms`` at step 0, every ``val_every`` steps (125 in
the speedrun) and at the last step ``N == M``.  Public record logs drift from that format:
``train_time:492.485s`` (seconds), ``step_avg:nanms`` at step 0, extra trailing fields
(``ema_beta:0.99``), and every log starts with the script's own source, which contains the format
string itself (with ``{...}`` placeholders, or a literal example in a comment).  The best
validation loss is the minimum over the val lines.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

__all__ = ["ValLine", "CadenceReport", "parse_val_lines", "strip_source", "check_cadence"]

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf"
_VAL_LINE = re.compile(
    rf"^step:(?P<step>\d+)/(?P<total>\d+)\s+val_loss:(?P<loss>{_NUM})"
    rf"(?:\s+train_time:(?P<tt>{_NUM})(?P<tt_unit>ms|s))?"
    rf"(?:\s+step_avg:(?P<avg>{_NUM})(?P<avg_unit>ms|s))?"
    r"(?P<rest>(?:\s+\S+)*)\s*$",
    re.IGNORECASE,
)
_FIELD = re.compile(r"^(?P<key>[A-Za-z_]\w*):(?P<value>\S+)$")


class ValLine(NamedTuple):
    """One validation line.

    Attributes:
      step, total: ``N`` and ``M`` of ``step:N/M``.
      val_loss: cross-entropy, nats per token (float; may be nan if the run printed nan).
      train_time_s: the script's own training-time field in seconds (``None`` if absent);
        ``...ms`` values are divided by 1000.
      step_avg_s: the ``step_avg`` field in seconds (``nan`` at step 0 in some records).
      extra: trailing ``key:value`` fields (e.g. ``{"ema_beta": "0.99", "val_tokens": "65536"}``).
    """

    step: int
    total: int
    val_loss: float
    train_time_s: float | None
    step_avg_s: float | None
    extra: dict[str, str]


def _seconds(value: str | None, unit: str | None) -> float | None:
    if value is None:
        return None
    x = float(value)
    return x / 1000.0 if (unit or "ms").lower() == "ms" else x


def strip_source(log: str, source: str | None) -> str:
    """Remove the script's own source from the start of ``log``.

    Modded-nanogpt scripts print their source, then a line of ``=`` characters.  When ``source``
    (the script that ran) occurs in the log, everything up to its end is dropped; otherwise the
    log is returned unchanged (the format string inside a source copy never parses, because its
    fields are ``{...}`` placeholders, and indented or commented example lines do not start with
    ``step:``).
    """
    if source:
        body = source.strip()
        at = log.find(body) if body else -1
        if at >= 0:
            return log[at + len(body) :]
    return log


def parse_val_lines(log: str, source: str | None = None) -> list[ValLine]:
    """All validation lines of ``log``, in order.

    Args:
      log: the run's stdout (or log file) text.
      source: the script that ran; when given, its copy at the top of the log is skipped first.

    Returns:
      ``ValLine`` list (possibly empty).  Lines such as
      ``step:{step}/{train_steps} val_loss:{val_loss:.4f} ...`` (the format string) and training
      lines without ``val_loss`` are not val lines.
    """
    out: list[ValLine] = []
    for line in strip_source(log, source).splitlines():
        m = _VAL_LINE.match(line.strip("\r"))
        if m is None:
            continue
        extra: dict[str, str] = {}
        for tok in m["rest"].split():
            f = _FIELD.match(tok)
            if f is not None:
                extra[f["key"]] = f["value"]
        out.append(
            ValLine(
                step=int(m["step"]),
                total=int(m["total"]),
                val_loss=float(m["loss"]),
                train_time_s=_seconds(m["tt"], m["tt_unit"]),
                step_avg_s=_seconds(m["avg"], m["avg_unit"]),
                extra=extra,
            )
        )
    return out


class CadenceReport(NamedTuple):
    """Result of ``check_cadence``: ``ok`` and, when not, the first problem found."""

    ok: bool
    reason: str
    finished: bool


def check_cadence(lines: list[ValLine], val_every: int, *, require_final: bool) -> CadenceReport:
    """Check that val lines came at step 0, every ``val_every`` steps and at the end.

    Args:
      lines: parsed val lines, in log order.
      val_every: steps between val lines (125 in the speedrun); must be >= 1.
      require_final: True for a run that exited normally (the last line must be ``N == M``);
        False for a timeout (the lines printed so far must keep the cadence).

    Returns:
      ``CadenceReport(ok, reason, finished)``; ``finished`` is True when a line with ``N == M``
      was printed.

    Raises:
      ValueError: ``val_every`` < 1.
    """
    if not isinstance(val_every, int) or val_every < 1:
        raise ValueError(f"val_every must be an int >= 1, got {val_every!r}")
    if not lines:
        return CadenceReport(False, "no validation line was printed", False)
    total = lines[0].total
    if any(ln.total != total for ln in lines):
        return CadenceReport(False, "the total step count M of step:N/M changed", False)
    finished = lines[-1].step == total
    expected = list(range(0, total, val_every)) + [total]
    steps = [ln.step for ln in lines]
    if require_final and not finished:
        return CadenceReport(False, f"no final validation line step:{total}/{total}", False)
    if steps != expected[: len(steps)]:
        for i, s in enumerate(steps):
            want = expected[i] if i < len(expected) else None
            if s != want:
                return CadenceReport(
                    False,
                    f"validation at step {s} where step {want} was due (every {val_every} steps)",
                    finished,
                )
    if any(math.isnan(ln.val_loss) for ln in lines):
        return CadenceReport(False, "a validation loss is nan", finished)
    return CadenceReport(True, "", finished)
