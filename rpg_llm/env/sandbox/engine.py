"""The docker engine this host talks to: a connected client, and the image's ``PATH``.

Shared by the docker sandbox (:mod:`rpg_llm.env.sandbox.docker_backend`) and the image builder
(:mod:`rpg_llm.env.sandbox.image`); the docker SDK is imported only when a client is asked for.
"""

from __future__ import annotations

from typing import Any

from rpg_llm.env.sandbox.base import SandboxError

__all__ = ["PATH_ENV", "docker_client"]

PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""``PATH`` inside the container (and in the project's image)."""


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
