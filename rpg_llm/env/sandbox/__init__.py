"""Sandboxed execution of solution scripts behind one interface, three backends.

``make_sandbox("auto")`` picks bubblewrap where ``bwrap`` is installed and works, else plain
subprocess;
``"docker"`` needs the docker SDK and an engine.  See ``base.py`` for the execution convention.
"""

from __future__ import annotations

from typing import Any

from rpg_llm.env.sandbox.base import (
    STATUSES,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxLimits,
    describe_exception,
)
from rpg_llm.env.sandbox.bwrap_backend import BwrapSandbox, bwrap_path, bwrap_works
from rpg_llm.env.sandbox.docker_backend import DockerSandbox
from rpg_llm.env.sandbox.executors import BatchExecutor, LocalExecutor, SerialExecutor
from rpg_llm.env.sandbox.subprocess_backend import SubprocessSandbox

KINDS = ("auto", "subprocess", "bwrap", "docker")

__all__ = [
    "KINDS",
    "STATUSES",
    "BatchExecutor",
    "BwrapSandbox",
    "DockerSandbox",
    "ExecResult",
    "LocalExecutor",
    "SerialExecutor",
    "Sandbox",
    "SandboxError",
    "SandboxLimits",
    "SubprocessSandbox",
    "describe_exception",
    "bwrap_path",
    "bwrap_works",
    "make_sandbox",
]


def make_sandbox(kind: str = "auto", *, image: str | None = None, **limits: Any) -> Sandbox:
    """Build a sandbox of the given kind.

    Args:
      kind: ``"auto"`` (bubblewrap if it works here, else subprocess), ``"subprocess"``, ``"bwrap"``
        or ``"docker"``.
      image: the docker image (``None``: the project's, ``rpg-sandbox-image build``); only for
        ``"docker"``.
      **limits: fields of ``SandboxLimits`` (e.g. ``memory_bytes=4 * 2**30``, ``nproc=64``); for
        docker also ``python=`` (the interpreter inside the image).

    Raises:
      ValueError: unknown kind, unknown limit name, bad limit value, an image for another kind
        than docker, or ``"bwrap"`` without bwrap.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown sandbox kind {kind!r}; expected one of {KINDS}")
    if image is not None and kind != "docker":
        raise ValueError(f"a docker image ({image!r}) is for the docker sandbox, not {kind!r}")
    docker_args: dict[str, Any] = {} if image is None else {"image": image}
    if kind == "docker" and "python" in limits:
        docker_args["python"] = limits.pop("python")
    known = set(SandboxLimits.__dataclass_fields__)
    unknown = sorted(set(limits) - known)
    if unknown:
        raise ValueError(f"unknown sandbox limit(s) {unknown}; known: {sorted(known)}")
    lim = SandboxLimits(**limits)
    if kind == "auto":
        kind = "bwrap" if bwrap_works() else "subprocess"
    if kind == "bwrap":
        return BwrapSandbox(limits=lim)
    if kind == "docker":
        return DockerSandbox(limits=lim, **docker_args)
    return SubprocessSandbox(limits=lim)
