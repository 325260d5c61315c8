"""Run a function over a batch in parallel on this host: a local pool, or in this thread.

Where a run's scripts run (this host or a Ray cluster) is :mod:`rpg_llm.env.service`'s seam.

The work items are sandbox runs, whose heavy part is a child process, so the pool size is the
number of solutions executed at the same time.  ``map`` keeps the order of ``items``.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import BrokenExecutor, Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class BatchExecutor(Protocol):
    """Anything with ``map(fn, items) -> list`` in the order of ``items``."""

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]: ...


class SerialExecutor:
    """Runs ``map`` in this thread, one item after another: for one job that is already where it
    should run (a Ray job on its node, :mod:`rpg_llm.env.service`)."""

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[fn(x) for x in items]``, in order; exceptions propagate."""
        return [fn(x) for x in items]


class LocalExecutor:
    """A persistent pool of local workers (processes by default, or threads).

    Args:
      max_workers: number of parallel workers (default: ``os.cpu_count()``).
      kind: ``"process"`` (``forkserver`` start method: safe when the parent runs threads, e.g.
        torch) or ``"thread"`` (enough when ``fn`` only waits on a child process).

    Raises:
      ValueError: ``max_workers < 1`` or an unknown ``kind``.

    Use as a context manager, or call ``shutdown()``; ``fn`` and the items must be picklable for
    ``kind="process"``.
    """

    def __init__(self, max_workers: int | None = None, kind: str = "process") -> None:
        if max_workers is None:
            max_workers = os.cpu_count() or 1
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be a positive int, got {max_workers!r}")
        if kind not in ("process", "thread"):
            raise ValueError(f"kind must be 'process' or 'thread', got {kind!r}")
        self.max_workers = max_workers
        self.kind = kind
        self._pool: Executor | None = None
        self._pool_lock = threading.Lock()

    def _get_pool(self) -> Executor:
        with self._pool_lock:  # batches may arrive from several threads at once
            return self._make_pool()

    def _make_pool(self) -> Executor:
        if self._pool is None:
            if self.kind == "thread":
                self._pool = ThreadPoolExecutor(max_workers=self.max_workers)
            else:
                ctx = multiprocessing.get_context("forkserver")
                self._pool = ProcessPoolExecutor(max_workers=self.max_workers, mp_context=ctx)
        return self._pool

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``[fn(x) for x in items]`` computed by the pool, in order; exceptions propagate."""
        items = list(items)
        if not items:
            return []
        return list(self._get_pool().map(fn, items))

    def map_settled(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R | BaseException]:
        """Like ``map``, but each item's exception (e.g. ``BrokenProcessPool`` when a worker
        process died) is returned in its place instead of raised, so the other results survive.

        After a broken pool the workers are replaced (the next call starts fresh ones).
        """
        items = list(items)
        if not items:
            return []
        pool = self._get_pool()
        out: list[R | BaseException] = []
        try:
            futures = [pool.submit(fn, x) for x in items]
        except BrokenExecutor as exc:
            self._discard_pool()
            return [exc] * len(items)
        broken = False
        for fut in futures:
            try:
                out.append(fut.result())
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller per item
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    raise
                broken = broken or isinstance(exc, BrokenExecutor)
                out.append(exc)
        if broken:
            self._discard_pool()
        return out

    def _discard_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def shutdown(self) -> None:
        """Stop the workers (a later ``map`` starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __getstate__(self) -> dict[str, Any]:
        return {"max_workers": self.max_workers, "kind": self.kind, "_pool": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pool_lock = threading.Lock()
