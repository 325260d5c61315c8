"""``--ray ADDRESS|local`` for the bandit entry points: their units run as Ray tasks.

The driver (the ``python -m`` process) checks the flag before anything is compiled
(:func:`check_address`), connects (:func:`connect`), submits one task per unit and takes the
results in completion order (:func:`run_tasks`, one tqdm bar over units done). It alone writes
the result files. A task imports the entry point's module on the worker, calls
``rpg_jax.config.setup_jax()`` there (float64 and one JAX device per core of the worker's machine,
as the in-process path does) and runs the unit's function, so the numbers equal the in-process
ones. The workers import the driver's own copy of ``rpg_core``, ``rpg_jax`` and
``paper_figures``: the driver ships those folders as the job's ``py_modules``.

``local`` starts a one-machine Ray instance with :data:`LOCAL_CPUS` CPUs (one task per CPU); any
other value is the address of a running cluster (``HOST:PORT``, ``ray://HOST:PORT`` or ``auto``).
"""

from __future__ import annotations

import importlib
import socket
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rpg_core.cli import UsageError

__all__ = ["LOCAL_CPUS", "check_address", "connect", "run_tasks"]

LOCAL_CPUS = 2
CONNECT_TIMEOUT_S = 3.0
_PACKAGES = ("rpg_core", "rpg_jax", "paper_figures")


def check_address(value: str, flag: str = "--ray") -> str:
    """Check ``--ray``'s value without starting Ray or JAX; returns it unchanged.

    ``local`` and ``auto`` pass as they are; ``HOST:PORT`` and ``ray://HOST:PORT`` must accept a
    TCP connection within :data:`CONNECT_TIMEOUT_S` seconds.

    Raises:
      UsageError: naming the flag and the value: not one of those forms, a port outside
        1-65535, or nothing listening there.
    """
    if value in ("local", "auto"):
        return value
    host, sep, port = value.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(
            f"{flag} {value!r}: expected local, auto, HOST:PORT or ray://HOST:PORT "
            "with a port in 1-65535"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        why = err.strerror or type(err).__name__
        raise UsageError(
            f"{flag} {value}: no Ray cluster reachable at {host}:{port} ({why})"
        ) from None
    return value


def connect(value: str, flag: str = "--ray") -> Any:
    """``ray.init`` for a checked ``--ray`` value; returns the ``ray`` module.

    ``local``: ``ray.init(num_cpus=LOCAL_CPUS, include_dashboard=False)``; otherwise
    ``ray.init(address=value)``. Both ship this process's ``rpg_core``, ``rpg_jax`` and
    ``paper_figures`` folders to the workers (``runtime_env={"py_modules": [...]}``). The caller
    ends the session with ``ray.shutdown()``.

    Raises:
      UsageError: naming the flag and the value, when ray is not installed or ``ray.init``
        cannot join the cluster.
    """
    try:
        import ray
    except ImportError:
        raise UsageError(f"{flag} {value}: ray is not installed (pip install 'rpg[ray]')") from None
    runtime_env = {"py_modules": [_package_dir(p) for p in _PACKAGES]}
    try:
        with warnings.catch_warnings():
            # Ray starts its processes by fork + exec, which JAX's fork warning cannot tell apart
            warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
            if value == "local":
                ray.init(num_cpus=LOCAL_CPUS, include_dashboard=False, runtime_env=runtime_env)
            else:
                ray.init(address=value, runtime_env=runtime_env)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as err:
        why = " ".join(str(err).split())
        raise UsageError(f"{flag} {value}: cannot join a Ray cluster ({why})") from None
    return ray


def _package_dir(name: str) -> str:
    """The folder this process imports package ``name`` from."""
    return str(Path(importlib.import_module(name).__file__ or "").parent)


def _call(module: str, function: str, kwargs: dict) -> Any:
    """Ray task body: JAX set up as the in-process path does, then ``module.function(**kwargs)``."""
    from rpg_jax.config import setup_jax

    setup_jax()
    return getattr(importlib.import_module(module), function)(**kwargs)


def run_tasks(
    module: str,
    function: str,
    jobs: Sequence[dict],
    *,
    desc: str,
    progress: bool = True,
    num_cpus: float = 1.0,
) -> Iterator[tuple[int, Any]]:
    """Run ``module.function(**job)`` for every job as a Ray task; yield ``(index, result)`` in
    the order the tasks finish.

    Args:
      module, function: an importable function (e.g. ``"paper_figures.tune"``, ``"tune_unit"``);
        it is looked up on the worker, so its code is the shipped one.
      jobs: keyword arguments of each call (picklable).
      desc: the progress bar's label.
      progress: show one tqdm bar (on stderr) over the jobs done; it advances after the caller
        has handled a result.
      num_cpus: CPUs Ray reserves per task.

    Raises:
      RuntimeError: a task failed; the message names the job index and the task's exception.
    """
    import ray
    from ray.exceptions import RayTaskError
    from tqdm import tqdm

    remote = ray.remote(num_cpus=num_cpus)(_call)
    pending = {remote.remote(module, function, job): i for i, job in enumerate(jobs)}
    with tqdm(
        total=len(jobs), desc=desc, unit="unit", file=sys.stderr, disable=not progress
    ) as bar:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except RayTaskError as err:
                cause = err.cause if err.cause is not None else err
                why = " ".join(str(cause).split())
                raise RuntimeError(
                    f"{desc}: unit {i} failed on Ray: {type(cause).__name__}: {why}"
                ) from None
            yield i, result
            bar.update(1)
