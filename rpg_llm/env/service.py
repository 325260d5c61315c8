"""The execution service: where a script runs and is graded, behind one typed seam.

A caller submits scripts of one task and gets one ``concurrent.futures.Future`` per script,
whose result is the script's :class:`rpg_llm.env.outcome.Outcome` (status, score, raw reward,
``delta``, CPU seconds, percentile). Execution and grading both happen where the job runs.

* :class:`LocalService`: this host, today's path: the task's ``run_batch`` over a local pool
  (a submitted batch runs as one ``run_batch`` call, so its outcomes are the ones a direct call
  gives; several submitted batches run at once, up to ``workers``).
* :class:`RayService`: each script is one Ray task with the run's resources
  (:class:`JobResources`: CPUs, GPUs, memory, a custom resource such as ``grader``), on
  whichever node of the cluster has them. The node makes the task itself from its id and
  folders (:class:`TaskRef`; an offline competition is prepared there on first use, under a
  node-wide file lock, or read from a shared ``data_root``), runs the script in its own sandbox
  (bubblewrap where the node has it; the answers are never inside it) and sends the outcome
  back through Ray. Failures of the machine, not the script, are ``infra`` outcomes (masked from
  PPO and from ``rho_hat``): a worker process that died during the script
  (``WorkerCrashedError``); a node that left the cluster (``NodeDiedError``) after the job was
  resubmitted once; any other error of Ray or of the node's set-up.

The reference ran its graders on separate nodes fed by a queue (paper, section 5; the NanoGPT
speedrun's attempts on 8-GPU nodes): ``--executor ray --ray-address ADDRESS`` is that layout.
"""

from __future__ import annotations

import fcntl
import functools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rpg_llm.env import registry
from rpg_llm.env.outcome import Outcome, infra_outcome
from rpg_llm.env.sandbox import Sandbox, make_sandbox
from rpg_llm.env.sandbox.executors import SerialExecutor
from rpg_llm.env.tasks.format import default_data_root
from rpg_llm.env.types import Task

__all__ = [
    "ExecutionService",
    "JobResources",
    "JobSpec",
    "LocalService",
    "RayService",
    "TaskRef",
    "check_ray_address",
    "run_job",
]


class ExecutionService(Protocol):
    """Runs and grades scripts; one future per submitted script, in order."""

    def submit(self, codes: Sequence[str]) -> list[Future[Outcome]]:
        """Start executing ``codes``; their outcomes' futures, in the order of ``codes``."""
        ...

    def close(self) -> None:
        """Stop the workers (futures not yet done get no result)."""
        ...


@dataclass(frozen=True)
class TaskRef:
    """How a node makes a run's task (:func:`rpg_llm.env.registry.make_task`).

    Attributes:
        task_id: the task's id or alias.
        data_root, mlebench_dir, speedrun_dir: the run's folders (None: the node's defaults;
            a shared path must exist on every node).
    """

    task_id: str
    data_root: str | None = None
    mlebench_dir: str | None = None
    speedrun_dir: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """What every job of a run shares: its task, sandbox kind, time limit (seconds) and, for
    the docker sandbox, the image (None: the project's; it must be on every node)."""

    task: TaskRef
    sandbox: str
    timeout_s: float
    docker_image: str | None = None


@dataclass(frozen=True)
class JobResources:
    """What one job reserves on its node (Ray's scheduling; the local pool ignores it).

    Attributes:
        num_cpus: CPUs (the paper's graders: 1 per script).
        num_gpus: GPUs (the NanoGPT speedrun: 8 per attempt).
        memory_gb: memory, GiB (the paper's MLE-Bench graders: 16; None: not reserved).
        custom: custom resources, e.g. ``{"grader": 1.0}`` to send jobs to grader nodes only.

    Raises:
        ValueError: a negative or non-finite amount, or no CPU, GPU or custom resource at all.
    """

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory_gb: float | None = None
    custom: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        amounts = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, **self.custom}
        if self.memory_gb is not None:
            amounts["memory_gb"] = self.memory_gb
        for name, v in amounts.items():
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < 1e6:
                raise ValueError(f"job resource {name} must be a number >= 0, got {v!r}")
        if self.num_cpus == 0 and self.num_gpus == 0 and not any(self.custom.values()):
            raise ValueError("a job must reserve some CPU, GPU or custom resource")

    def ray_options(self) -> dict[str, Any]:
        """Ray's ``.options(...)`` for one job."""
        opts: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory_gb is not None:
            opts["memory"] = int(self.memory_gb * 2**30)
        if self.custom:
            opts["resources"] = dict(self.custom)
        return opts


# -------------------------------------------------------------------------------- this host


class LocalService:
    """This host (module docstring): ``run_batch(codes) -> outcomes`` in pool threads.

    Args:
        run_batch: runs and grades a batch of scripts here (the task's ``run_batch`` over the
            run's sandbox and executor, which runs a batch's scripts in parallel).
        batches: batches in flight at once (the asynchronous loop submits one script per
            chain as each is ready).
        on_close: called by :meth:`close` (the executor's shutdown).

    Raises:
        ValueError: ``batches < 1``.
    """

    def __init__(
        self,
        run_batch: Callable[[list[str]], list[Outcome]],
        batches: int = 64,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        if not isinstance(batches, int) or batches < 1:
            raise ValueError(f"batches must be a positive int, got {batches!r}")
        self._run_batch = run_batch
        self._on_close = on_close
        self._pool = ThreadPoolExecutor(max_workers=batches, thread_name_prefix="rpg-exec")

    def submit(self, codes: Sequence[str]) -> list[Future[Outcome]]:
        """One pool thread runs ``codes`` as one batch; each future resolves with its outcome
        (or the batch's exception)."""
        codes = list(codes)
        futures: list[Future[Outcome]] = [Future() for _ in codes]
        if not codes:
            return futures

        def run() -> None:
            try:
                outcomes = self._run_batch(codes)
            except BaseException as exc:  # noqa: BLE001 - handed to every future of the batch
                for f in futures:
                    f.set_exception(exc)
                return
            for f, o in zip(futures, outcomes, strict=True):
                f.set_result(o)

        self._pool.submit(run)
        return futures

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._on_close is not None:
            self._on_close()


# ------------------------------------------------------------------------------ on a node


@functools.lru_cache(maxsize=8)
def _node_task(ref: TaskRef) -> Task:
    """The task on this node, made once per worker process; an offline competition is prepared
    under a node-wide lock, so two jobs never build the same folder at once."""
    root = Path(ref.data_root) if ref.data_root else default_data_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".rpg-prepare.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return registry.make_task(
                ref.task_id, ref.data_root, ref.mlebench_dir, ref.speedrun_dir
            )
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@functools.lru_cache(maxsize=4)
def _node_sandbox(kind: str, image: str | None) -> Sandbox:
    return make_sandbox(kind, image=image)


def run_job(spec: JobSpec, code: str) -> Outcome:
    """Make the task and sandbox here (cached per process) and run and grade ``code``: the body
    of a Ray job. A failure to make either is an ``infra`` outcome naming the node's error."""
    try:
        task = _node_task(spec.task)
        sandbox = _node_sandbox(spec.sandbox, spec.docker_image)
    except Exception as exc:  # noqa: BLE001 - the node's set-up, not the script, failed
        return infra_outcome(f"node set-up failed on {os.uname().nodename}: {exc}")
    return task.run_batch([code], sandbox, spec.timeout_s, SerialExecutor())[0]


# ------------------------------------------------------------------------------- on Ray


def check_ray_address(address: str) -> str | None:
    """The Ray address to connect to (``"local"``: start a local instance: None), checked.

    Raises:
        ValueError: an empty address, or one whose host and port do not answer (a TCP
            connection within 5 s), naming it.
    """
    import socket

    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"--ray-address {address!r}: give ADDRESS (host:port) or local")
    if address == "local":
        return None
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--ray-address {address!r}: expected host:port (or ray://host:port)")
    try:
        with socket.create_connection((host, int(port)), timeout=5.0):
            pass
    except OSError as exc:
        raise ValueError(f"--ray-address {address!r}: nothing answers there ({exc})") from None
    return address


class RayService:
    """Each script one Ray task with ``resources`` (module docstring).

    Args:
        spec: the jobs' task, sandbox and timeout.
        resources: what each job reserves.
        address: a Ray cluster to join (``host:port``; None: this process's Ray, started
            locally when none is running, with ``init_kwargs``).
        resubmit_on_node_loss: times a job whose node left the cluster is resubmitted.
        init_kwargs: ``ray.init`` arguments for a local start (e.g. ``num_cpus``,
            ``resources={"grader": 2}``).

    Raises:
        ImportError: ray is not installed.
    """

    def __init__(
        self,
        spec: JobSpec,
        resources: JobResources,
        address: str | None = None,
        resubmit_on_node_loss: int = 1,
        init_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        import ray  # an optional extra: pip install -e '.[ray]'

        self._ray = ray
        self.spec, self.resources = spec, resources
        self.resubmit_on_node_loss = resubmit_on_node_loss
        self._started = False
        if not ray.is_initialized():
            ray.init(address=address, **dict(init_kwargs or {}))
            self._started = True
        self._remote = ray.remote(max_retries=0)(run_job).options(**resources.ray_options())
        self._lock = threading.Lock()

    def submit(self, codes: Sequence[str]) -> list[Future[Outcome]]:
        """One Ray task per code; each future resolves with the outcome (an ``infra`` outcome
        for a machine failure, module docstring)."""
        return [self._submit(code, self.resubmit_on_node_loss) for code in codes]

    def _submit(self, code: str, resubmits: int) -> Future[Outcome]:
        out: Future[Outcome] = Future()
        ref = self._remote.remote(self.spec, code)
        ref.future().add_done_callback(lambda f: self._settle(f, out, code, resubmits))
        return out

    def _settle(self, done: Future, out: Future[Outcome], code: str, resubmits: int) -> None:
        exc = done.exception()
        if exc is None:
            out.set_result(done.result())
            return
        name = type(exc).__name__
        if name == "NodeDiedError" and resubmits > 0:
            again = self._submit(code, resubmits - 1)
            again.add_done_callback(lambda f: out.set_result(f.result()))
            return
        out.set_result(infra_outcome(f"the job's machine failed ({name}): {_first_line(exc)}"))

    def close(self) -> None:
        """Disconnect from Ray (a local instance this service started stops)."""
        if self._started:
            self._ray.shutdown()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
