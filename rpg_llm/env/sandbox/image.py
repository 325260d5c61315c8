"""The docker sandbox's image, built here from Debian's packages, with no registry.

``rpg-sandbox-image build`` (``python -m rpg_llm.env.sandbox.image build``) makes a root file
system with ``debootstrap --variant=minbase`` holding Debian's Python and the libraries the tasks'
prompt allows (``PACKAGES``: numpy, pandas, scipy, scikit-learn), fetched from the mirror apt
already uses (:func:`apt_mirror`).  From that root it removes every data file the packages of
``leaks.DATA_PACKAGES`` ship (the folders and files :func:`leaks.data_paths` finds, the same rule
that hides them under bubblewrap: scikit-learn's ``datasets/data`` holds the digits task's labels)
and the dataset download caches of ``leaks.USER_CACHES``, checks that none is left
(:func:`label_data`), drops apt's caches and the documentation, and imports the root into the
local engine as an image (``docker import``: the SDK's ``import_image`` fed by ``tar``).  A
container of the image then runs ``python3 -c "import numpy, pandas, scipy, sklearn"``.

The tag, ``rpg-sandbox:<digest>`` (:func:`image_tag`), is a digest of the package list, the Debian
release, the machine and :data:`RECIPE`; a build whose tag is already on the engine does nothing.
Building needs root (debootstrap installs into a chroot), an engine, and about 1.2 GB of memory:
the root is made on a tmpfs (dpkg's many small synced writes cost nothing there, and removing it
is an unmount).  ``--with-data`` also imports the same root before its data is removed, as
``rpg-sandbox:<digest>-with-data``, the control image on which the leak tests must fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rpg_core.cli import ArgumentParser, UsageError, run_cli
from rpg_llm.env.sandbox.base import SandboxError
from rpg_llm.env.sandbox.engine import PATH_ENV, docker_client
from rpg_llm.env.sandbox.leaks import DATA_PACKAGES, USER_CACHES, data_paths
from rpg_llm.env.sandbox.workdir import mount_tmpfs

__all__ = [
    "PACKAGES",
    "REPOSITORY",
    "SUITE",
    "BuiltImage",
    "apt_mirror",
    "build_image",
    "image_digest",
    "image_tag",
    "label_data",
    "main",
    "strip_label_data",
]

REPOSITORY = "rpg-sandbox"
SUITE = "bookworm"
"""The Debian release of the image (its Python is 3.11, as this project's)."""
PACKAGES = ("python3", "python3-numpy", "python3-pandas", "python3-scipy", "python3-sklearn")
"""Debian packages installed besides ``minbase``: the libraries the tasks' prompt allows."""
RECIPE = 1
"""Version of the build steps below; part of the digest, so a changed recipe gets a new tag."""
DEFAULT_MIRROR = "http://deb.debian.org/debian"
ROOT_TMPFS_BYTES = 4 * 1024**3
"""Size cap of the tmpfs the root is built on (it holds about 1.2 GB)."""
TRIMMED = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man")
TRIMMED += ("usr/share/info", "usr/share/locale")
"""Folders of the root whose contents the image does not need (emptied, kept as folders)."""
SITE_GLOBS = (
    "usr/lib/python3/dist-packages",
    "usr/lib/python3*/site-packages",
    "usr/lib/python3*/dist-packages",
    "usr/local/lib/python3*/dist-packages",
    "usr/local/lib/python3*/site-packages",
)
"""Where a Debian root keeps Python packages."""


def image_digest() -> str:
    """First 12 hex digits of the SHA-256 of the image's recipe (packages, release, machine)."""
    recipe = {
        "packages": list(PACKAGES),
        "suite": SUITE,
        "machine": platform.machine(),
        "recipe": RECIPE,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def image_tag(with_data: bool = False) -> str:
    """``rpg-sandbox:<digest>`` (``-with-data`` appended for the control image)."""
    return f"{REPOSITORY}:{image_digest()}{'-with-data' if with_data else ''}"


def _one_line_sources(text: str) -> list[tuple[str, list[str]]]:
    out = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            out.append((words[0], [words[1]]))
    return out


def _deb822_sources(text: str) -> list[tuple[str, list[str]]]:
    out = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
            continue
        for uri in fields.get("uris", "").split():
            out.append((uri, fields.get("suites", "").split()))
    return out


def apt_mirror(suite: str = SUITE, etc_apt: Path = Path("/etc/apt")) -> str:
    """The first Debian mirror apt is configured with for ``suite`` (``deb`` lines or deb822
    ``.sources`` stanzas), else :data:`DEFAULT_MIRROR`."""
    found: list[tuple[str, list[str]]] = []
    files = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if path.suffix == ".sources":
            found += _deb822_sources(text)
        elif path.suffix == ".list" or path.name == "sources.list":
            found += _one_line_sources(text)
    for uri, suites in found:
        if suite in suites and uri.startswith(("http://", "https://", "file:/")):
            return uri
    return DEFAULT_MIRROR


def package_folders(root: Path, name: str) -> list[Path]:
    """Installed folders of Python package ``name`` inside the root file system ``root``."""
    out: list[Path] = []
    for pattern in SITE_GLOBS:
        for site in sorted(root.glob(pattern)):
            folder = site / name
            if folder.is_dir() and not folder.is_symlink() and folder not in out:
                out.append(folder)
    return out


def label_data(root: Path, packages: Sequence[str] = DATA_PACKAGES) -> list[Path]:
    """Every path of the root file system ``root`` that could hold a task's labels.

    The data folders and files (``leaks.data_paths``) of each package of ``packages`` installed
    in the root, and the dataset download caches (``leaks.USER_CACHES``) under ``root/root`` and
    each ``root/home/*``.
    """
    out: list[Path] = []
    for name in packages:
        for folder in package_folders(root, name):
            folders, files = data_paths(folder)
            out += folders + files
    homes = [root / "root", *sorted((root / "home").glob("*"))]
    out += [home / cache for home in homes for cache in USER_CACHES if (home / cache).exists()]
    return out


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def strip_label_data(root: Path, packages: Sequence[str] = DATA_PACKAGES) -> list[Path]:
    """Remove :func:`label_data` from ``root``; returns what was removed.

    Raises:
      SandboxError: something :func:`label_data` finds is still there afterwards.
    """
    removed = label_data(root, packages)
    for path in removed:
        _remove(path)
    left = label_data(root, packages)
    if left:
        shown = ", ".join(str(p) for p in left[:5])
        raise SandboxError(f"{len(left)} data paths are left in {root} after removal: {shown}")
    return removed


def _trim(root: Path) -> None:
    for rel in TRIMMED:
        folder = root / rel
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.name != "partial":
                _remove(entry)


def _mounts_below(root: Path) -> list[str]:
    """Mount points at or below ``root`` (``/proc/self/mountinfo``), deepest first."""
    prefix = str(root).rstrip("/") + "/"
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == str(root) or point.startswith(prefix):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def _remove_root(root: Path) -> None:
    """Unmount what debootstrap may have left mounted in ``root`` (``/proc``, ``/sys``) and the
    root's own tmpfs, then delete the empty folder; a mount that stays makes this raise instead
    of deleting through it."""
    for point in _mounts_below(root):
        subprocess.run(["umount", "--lazy", point], check=False)
    left = _mounts_below(root)
    if left:
        raise SandboxError(f"cannot unmount {left[0]}: {root} is left in place")
    shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class BuiltImage:
    """What :func:`build_image` did.

    Attributes:
      tag: the image's tag.
      built: False when the image was already on the engine (nothing was built).
      seconds: wall time of the build (0 when nothing was built).
      size_bytes: the image's size on the engine.
      removed: data paths removed from the root, relative to it.
      packages: ``name=version`` of each package of :data:`PACKAGES`, as installed.
    """

    tag: str
    built: bool
    seconds: float
    size_bytes: int
    removed: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()


def _present(client: Any, tag: str) -> Any | None:
    import docker.errors

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def _import(client: Any, root: Path, tag: str, labels: dict[str, str]) -> None:
    """``tar -C root -c . | docker import - tag`` through the SDK (it has no tar of a folder)."""
    repository, _, name = tag.partition(":")
    changes = [f"ENV PATH={PATH_ENV}", "ENV LANG=C.UTF-8", 'CMD ["python3"]']
    changes += [f"LABEL {key}={value}" for key, value in labels.items()]
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE
    )
    assert tar.stdout is not None  # a pipe
    try:
        client.api.import_image(
            src=tar.stdout, repository=repository, tag=name, changes=changes, stream_src=True
        )
    finally:
        tar.stdout.close()
        rc = tar.wait()
    if rc != 0:
        raise SandboxError(f"tar of {root} failed with exit status {rc}")


def _installed_versions(root: Path) -> tuple[str, ...]:
    proc = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f", "${Package}=${Version}\\n", *PACKAGES],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SandboxError(f"dpkg-query in {root} failed: {proc.stderr.strip()[:300]}")
    return tuple(proc.stdout.split())


def _smoke_test(client: Any, tag: str) -> str:
    """Versions printed by a container of ``tag`` that imports the allowed libraries."""
    code = (
        "import numpy, pandas, scipy, sklearn, sys; "
        "print(sys.version.split()[0], numpy.__version__, pandas.__version__, "
        "scipy.__version__, sklearn.__version__)"
    )
    out = client.containers.run(
        tag, ["python3", "-c", code], network_disabled=True, read_only=True, remove=True
    )
    return out.decode().strip()


def build_image(
    *,
    mirror: str | None = None,
    workdir: Path | None = None,
    with_data: bool = False,
    log: Callable[[str], None] | None = None,
    client: Any = None,
) -> BuiltImage:
    """Build the sandbox image unless its tag is already on the engine (module docstring).

    Args:
      mirror: Debian mirror URL (default: :func:`apt_mirror`).
      workdir: folder where the root's tmpfs is mounted while it is built (default:
        ``/var/tmp``).
      with_data: also make ``image_tag(with_data=True)`` from the root before its data goes.
      log: called with one line per stage (default: print to stderr).
      client: a ``docker.DockerClient`` (default: one for the local engine).

    Returns:
      :class:`BuiltImage` of the clean image.

    Raises:
      SandboxError: not root, debootstrap missing or failing, no engine, data left behind.
    """
    t0 = time.monotonic()
    emit = log if log is not None else (lambda line: print(line, file=sys.stderr, flush=True))

    def say(line: str) -> None:
        emit(f"[{time.monotonic() - t0:4.0f} s] {line}")

    client = client if client is not None else docker_client(timeout=1800)
    tag, control = image_tag(), image_tag(with_data=True)
    wanted = [tag] + ([control] if with_data else [])
    missing = [t for t in wanted if _present(client, t) is None]
    if not missing:
        say(f"{', '.join(wanted)}: already on the engine, nothing to build")
        image = _present(client, tag)
        return BuiltImage(tag, False, 0.0, int(image.attrs["Size"]) if image else 0)
    if os.geteuid() != 0:
        raise SandboxError(
            f"building {tag} needs root (debootstrap), running as uid {os.geteuid()}"
        )
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise SandboxError("debootstrap is not installed (apt-get install debootstrap)")
    mirror = mirror or apt_mirror()
    base = Path(workdir) if workdir is not None else Path("/var/tmp")
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="rpg-sandbox-root-", dir=base))
    removed: list[Path] = []
    versions: tuple[str, ...] = ()
    try:
        mount_tmpfs(root, ROOT_TMPFS_BYTES, mode=0o755, nodev=False)  # devices in its /dev
        say(f"debootstrap {SUITE} from {mirror} into {root} ({', '.join(PACKAGES)})")
        argv = [debootstrap, "--variant=minbase", f"--include={','.join(PACKAGES)}"]
        proc = subprocess.run(
            [*argv, SUITE, str(root), mirror], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise SandboxError(f"debootstrap failed ({proc.returncode}): {' | '.join(tail)}")
        for point in _mounts_below(root)[:-1]:  # debootstrap's /proc and /sys, not the root
            subprocess.run(["umount", "--lazy", point], check=False)
        versions = _installed_versions(root)
        say(f"installed {' '.join(versions)}")
        _trim(root)
        labels = {"rpg.sandbox.digest": image_digest(), "rpg.sandbox.packages": ",".join(versions)}
        if control in missing:
            say(f"importing {control} (the data folders kept: the leak tests' control)")
            _import(client, root, control, {**labels, "rpg.sandbox.with-data": "1"})
            say(f"imported {control}")
        removed = strip_label_data(root)
        say(f"removed {len(removed)} data paths: " + ", ".join(p.name for p in removed[:6]))
        if tag in missing:
            say(f"importing {tag}")
            _import(client, root, tag, labels)
            say(f"imported {tag}")
    finally:
        _remove_root(root)
    say(f"{tag}: python, numpy, pandas, scipy, scikit-learn {_smoke_test(client, tag)}")
    image = _present(client, tag)
    return BuiltImage(
        tag=tag,
        built=True,
        seconds=time.monotonic() - t0,
        size_bytes=int(image.attrs["Size"]) if image else 0,
        removed=tuple(str(p.relative_to(root)) for p in removed),
        packages=versions,
    )


PROG = "rpg-sandbox-image"


def _main(argv: Sequence[str] | None) -> int:
    ap = ArgumentParser(prog=PROG, description="The docker sandbox's image (Debian, no registry).")
    sub = ap.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the image unless its tag is on the engine")
    build.add_argument("--mirror", default=None, help="Debian mirror (default: apt's)")
    build.add_argument(
        "--workdir", type=Path, default=None, help="where the root is built (default /var/tmp)"
    )
    build.add_argument(
        "--with-data", action="store_true", help="also the control image that keeps the data"
    )
    sub.add_parser("tag", help="print the image's tag")
    args = ap.parse_args(argv)
    if args.command == "tag":
        print(image_tag())
        return 0
    if args.workdir is not None and args.workdir.exists() and not args.workdir.is_dir():
        raise UsageError(f"--workdir {args.workdir}: exists and is not a folder")
    if args.mirror is not None and not args.mirror.startswith(("http://", "https://", "file:/")):
        raise UsageError(f"--mirror {args.mirror!r}: give an http(s):// or file:/ URL")
    done = build_image(mirror=args.mirror, workdir=args.workdir, with_data=args.with_data)
    what = f"built in {done.seconds:.0f} s" if done.built else "already present"
    print(f"{done.tag} {what}, {done.size_bytes / 1e9:.2f} GB")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``rpg_core.cli`` convention)."""
    return run_cli(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
