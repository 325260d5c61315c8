"""A full disk named as such: ``ENOSPC`` and the file, whichever library was writing.

Libraries report a full disk in their own words: ``torch.save`` as ``RuntimeError: [enforce
fail at inline_container.cc:672] . unexpected pos``, safetensors as ``SafetensorError: ... (os
error 28)``, SQLite as ``database or disk is full``, none of them with the path. A writer wraps
its write in :func:`naming_disk_full`, which turns any of these into :class:`DiskFull` naming
the file (and runs the writer's clean-up first, so that no half-written file is left);
``torch.save`` writes through :func:`write_with`, which keeps the ``OSError`` that torch
hides.
"""

from __future__ import annotations

import errno
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["DiskFull", "RecordingWriter", "is_disk_full", "naming_disk_full", "write_with"]

_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_MARKERS = (
    "no space left on device",
    "os error 28",
    "storagefull",
    "database or disk is full",
    "disk quota exceeded",
)


class DiskFull(OSError):
    """A write ran out of disk space (``ENOSPC``); ``path`` is the file it was writing."""

    def __init__(self, path: str | Path, hint: str = "") -> None:
        self.path = Path(path)
        self.hint = hint
        self.text = f"no space left on device (ENOSPC) while writing {path}" + (
            f"; {hint}" if hint else ""
        )
        super().__init__(errno.ENOSPC, self.text)

    def __str__(self) -> str:
        return self.text

    def __reduce__(self) -> tuple[Any, ...]:
        return (DiskFull, (str(self.path), self.hint))


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or an exception it was raised from) says the disk is full."""
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _ERRNOS:
            return True
        if any(m in str(e).lower() for m in _MARKERS):
            return True
        e = e.__cause__ or e.__context__
    return False


@contextmanager
def naming_disk_full(path: str | Path, cleanup: Callable[[], None] | None = None) -> Iterator[None]:
    """Run the ``with`` block's write of ``path``; on any failure run ``cleanup`` (remove what
    the write left half-done), and re-raise a full disk as :class:`DiskFull` naming ``path``
    (other failures as they are)."""
    try:
        yield
    except BaseException as err:
        if cleanup is not None:
            cleanup()
        if isinstance(err, DiskFull) or not is_disk_full(err):
            raise
        raise DiskFull(path) from err


class RecordingWriter(io.RawIOBase):
    """A raw binary stream over ``fh`` that keeps the ``OSError`` its ``write`` raised
    (``error``): ``torch.save`` reports one only as a ``RuntimeError``. Use through
    :func:`write_with`."""

    def __init__(self, fh: BinaryIO) -> None:
        super().__init__()
        self.fh = fh
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            return self.fh.write(data)
        except OSError as err:
            self.error = err
            raise


def write_with(path: str | Path, save: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` by ``save(stream)`` (e.g. ``lambda f: torch.save(obj, f)``); an
    ``OSError`` of the write (a full disk: ``ENOSPC``) is raised as itself even when ``save``
    reports it as another exception (torch: ``RuntimeError: [enforce fail ...]``)."""
    with open(path, "wb") as fh:
        raw = RecordingWriter(fh)
        stream = io.BufferedWriter(raw)
        try:
            save(stream)
            stream.flush()
        except Exception as err:
            if raw.error is not None and raw.error is not err:
                raise raw.error from err
            raise
