"""The sandbox backends a test runs under, and why one of them cannot run here.

A test parametrised by backend builds its sandbox with :func:`make_test_sandbox`: bubblewrap where
it works, docker where the SDK, root, an engine and the image are all there, else the test skips
with the reason.  ``RPG_REQUIRE_DOCKER=1`` (set by ``.ci/run``) turns that skip into a failure for
docker, so CI cannot pass with the docker tests silently skipped.  ``RPG_TEST_DOCKER_IMAGE`` names
another image for the docker tests (default: the project's, ``rpg-sandbox-image build``), e.g. the
control image ``rpg-sandbox:<digest>-with-data`` on which the leak tests must fail.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import pytest

from rpg_llm.env.sandbox import Sandbox, SandboxError, bwrap_works, make_sandbox

REQUIRE_DOCKER = "RPG_REQUIRE_DOCKER"
TEST_IMAGE = "RPG_TEST_DOCKER_IMAGE"
KINDS = ("subprocess", "bwrap", "docker")


def docker_image() -> str:
    """The image the docker tests run (``$RPG_TEST_DOCKER_IMAGE``, else the project's)."""
    from rpg_llm.env.sandbox.docker_backend import default_image

    return os.environ.get(TEST_IMAGE) or default_image()


@functools.cache
def docker_unavailable() -> str | None:
    """Why the docker backend cannot run here (``None``: it can)."""
    if os.geteuid() != 0:
        return "the docker sandbox needs root"
    try:
        from rpg_llm.env.sandbox.engine import docker_client

        client = docker_client(timeout=5)
    except SandboxError as exc:
        return str(exc)
    image = docker_image()
    try:
        client.images.get(image)
    except Exception:  # docker.errors.ImageNotFound, or the engine failed
        return f"image {image} is not on the engine (rpg-sandbox-image build)"
    return None


def skip_unless(kind: str) -> None:
    """Skip (for docker under ``RPG_REQUIRE_DOCKER=1``: fail) when ``kind`` cannot run here."""
    if kind == "bwrap" and not bwrap_works():
        pytest.skip("bubblewrap not usable here")
    if kind == "docker":
        reason = docker_unavailable()
        if reason is not None:
            if os.environ.get(REQUIRE_DOCKER) == "1":
                pytest.fail(f"docker backend required ({REQUIRE_DOCKER}=1): {reason}")
            pytest.skip(f"docker backend: {reason}")


def make_test_sandbox(kind: str, **limits: Any) -> Sandbox:
    """``make_sandbox(kind, **limits)`` after :func:`skip_unless` (docker: :func:`docker_image`)."""
    skip_unless(kind)
    if kind == "docker":
        return make_sandbox("docker", image=docker_image(), **limits)
    return make_sandbox(kind, **limits)
