"""Memory and CPU time of one execution's whole process tree, read from ``/proc``.

``RLIMIT_AS`` bounds each process, not a run: four children of 1.5 GiB each put 6 GiB on the host.
And ``wait4`` counts only the CPU time of children that were waited for, so a run killed for its
time limit (whose processes die unreaped, e.g. under bubblewrap's pid namespace) would report
almost none.  The sandbox's watchdog therefore samples the tree: every process descended from the
child it started, plus (when the run has a private uid, see ``identity.py``) every process of that
uid, which also catches a ``setsid`` double-forked daemon that left the tree.

The cgroup v2 memory controller would enforce the cap in the kernel; it needs a delegated cgroup
v2 hierarchy, which hosts with the hybrid v1 layout (as this project's machines) do not offer, so
the cap is this watchdog everywhere.  What it counts: resident set sizes summed over processes
(pages shared between forked processes are counted in each, so the sum errs high), and CPU
seconds ``utime + stime + cutime + cstime`` (children already reaped by a process of the tree
count in their parent's ``cutime``/``cstime``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["TreeUsage", "tree_pids", "tree_usage"]

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class TreeUsage:
    """One sample of a process tree.

    Attributes:
      rss_bytes: summed resident set size, bytes.
      cpu_s: summed user + system CPU seconds, reaped children included.
      pids: the processes counted.
    """

    rss_bytes: int
    cpu_s: float
    pids: tuple[int, ...]

    @property
    def processes(self) -> int:
        """How many processes were counted."""
        return len(self.pids)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _all_processes() -> dict[int, tuple[int, int]]:
    """``pid -> (ppid, uid)`` of every process visible now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        fields = _stat_fields(pid)
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if fields is not None and len(fields) > 1:
            out[pid] = (int(fields[1]), uid)
    return out


def tree_pids(root_pid: int, uid: int | None = None) -> list[int]:
    """Processes of one execution: ``root_pid``, its descendants and, if ``uid`` is given, every
    process of that uid (sorted pids; empty when none is alive)."""
    procs = _all_processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found = set()
    stack = [root_pid] if root_pid in procs else []
    if uid is not None:
        stack += [pid for pid, (_, owner) in procs.items() if owner == uid]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return sorted(found)


def tree_usage(root_pid: int, uid: int | None = None) -> TreeUsage:
    """Summed RSS and CPU seconds of :func:`tree_pids` (processes that vanish meanwhile are
    skipped)."""
    rss = ticks = 0
    counted = []
    for pid in tree_pids(root_pid, uid):
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 22:
            continue
        ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
        rss += int(fields[21]) * _PAGE
        counted.append(pid)
    return TreeUsage(rss_bytes=rss, cpu_s=ticks / _TICK, pids=tuple(counted))
