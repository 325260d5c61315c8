"""Reading what a sandboxed script left in its working folder, without trusting it.

The script controls every entry of its working folder.  A host process that opens one of them
by path follows whatever the script put there: a symbolic link to the competition's private
answers (graded against themselves: a perfect score), a link to ``/proc/kmsg`` or a FIFO (a read
that never ends), a device, a folder, a hard link to a file it should not see, or a file of
many GB.  The functions here accept only what a script can legitimately produce:

* every path component below the working folder is opened with ``O_NOFOLLOW`` relative to the
  descriptor of its parent (``openat``), so no link is followed anywhere on the path, and a link
  swapped in after a check is never followed either: all checks are made on the open descriptor;
* the file is opened ``O_NONBLOCK`` (opening a FIFO cannot block) and must then be a regular
  file (``S_ISREG`` of ``fstat``) with exactly one link (``st_nlink == 1``: not a hard link to a
  file elsewhere), on the working folder's own file system (``st_dev``);
* it is read or copied through that descriptor, at most ``max_bytes`` bytes; a larger file (also
  one that grows while it is read) is refused.

A refusal raises :class:`UnsafeFileError` with a one-line reason that names the file; callers turn
it into an invalid sample (the script's fault), never a hang or a crash.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

__all__ = ["UnsafeFileError", "copy_workdir_file", "open_workdir_file", "read_workdir_file"]

_CHUNK = 1 << 20


class UnsafeFileError(ValueError):
    """A file in a working folder is missing, not a plain regular file, or too large.

    Attributes:
      reason: one line naming the file and what is wrong with it.
      missing: True when the file does not exist (the caller may word that case itself).
    """

    def __init__(self, reason: str, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


def _relative_parts(name: str | os.PathLike) -> list[str]:
    parts = PurePosixPath(os.fspath(name)).parts
    if not parts or parts[0] == "/" or any(p in ("..", ".") for p in parts):
        raise ValueError(f"name {os.fspath(name)!r} must be a relative path without '.' or '..'")
    return list(parts)


def open_workdir_file(workdir: Path, name: str | os.PathLike, max_bytes: int) -> int:
    """Open ``workdir / name`` for reading, refusing anything but a small plain file.

    Args:
      workdir: the working folder (a folder this process created; it is opened without following
        a link in its last component).
      name: relative path below ``workdir`` (e.g. ``"submission.csv"``, ``"logs/run.txt"``).
      max_bytes: the largest size accepted, bytes (> 0).

    Returns:
      A read-only file descriptor, positioned at 0; the caller closes it.

    Raises:
      UnsafeFileError: a component is missing, a link, or not a folder; the file is a link, FIFO,
        socket, device or folder, has more than one hard link, lies on another file system, or
        holds more than ``max_bytes`` bytes.
      ValueError: ``name`` is absolute or holds ``.`` / ``..``; ``max_bytes`` <= 0.
    """
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")
    parts = _relative_parts(name)
    shown = "/".join(parts)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    dir_flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_DIRECTORY
    try:
        dir_fd = os.open(Path(workdir), dir_flags)
    except OSError as exc:
        raise UnsafeFileError(f"working folder {workdir} cannot be opened: {exc.strerror}") from exc
    fd = -1
    try:
        root_dev = os.fstat(dir_fd).st_dev
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                fd = os.open(part, flags if last else dir_flags, dir_fd=dir_fd)
            except FileNotFoundError as exc:
                raise UnsafeFileError(f"{shown} does not exist", missing=True) from exc
            except OSError as exc:
                where = shown if last else f"{shown}: {'/'.join(parts[: i + 1])}"
                raise UnsafeFileError(
                    f"{where} is {_kind_of(dir_fd, part)}, not a plain "
                    f"{'file' if last else 'folder'}"
                ) from exc
            if not last:
                os.close(dir_fd)
                dir_fd, fd = fd, -1
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(f"{shown} is {_describe_mode(st.st_mode)}, not a plain file")
        if st.st_nlink != 1:
            raise UnsafeFileError(
                f"{shown} has {st.st_nlink} hard links (a link to another file), not 1"
            )
        if st.st_dev != root_dev:
            raise UnsafeFileError(f"{shown} lies on another file system than its working folder")
        if st.st_size > max_bytes:
            raise UnsafeFileError(
                f"{shown} holds {st.st_size} bytes, more than the limit of {max_bytes}"
            )
        os.set_blocking(fd, True)
        result, fd = fd, -1
        return result
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(dir_fd)


def _kind_of(dir_fd: int, part: str) -> str:
    try:
        return _describe_mode(os.lstat(part, dir_fd=dir_fd).st_mode)
    except OSError:
        return "unreadable"


def _describe_mode(mode: int) -> str:
    for test, text in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a file"),
    ):
        if test(mode):
            return text
    return "of an unknown kind"


def _chunks(fd: int, shown: str, max_bytes: int):
    total = 0
    while True:
        data = os.read(fd, _CHUNK)
        if not data:
            return
        total += len(data)
        if total > max_bytes:
            raise UnsafeFileError(f"{shown} grew past the limit of {max_bytes} bytes while read")
        yield data


def read_workdir_file(workdir: Path, name: str | os.PathLike, max_bytes: int) -> bytes:
    """The bytes of ``workdir / name``, read through :func:`open_workdir_file`'s descriptor.

    Raises:
      UnsafeFileError, ValueError: as :func:`open_workdir_file`; also when the file grows past
        ``max_bytes`` while it is read.
    """
    fd = open_workdir_file(workdir, name, max_bytes)
    try:
        return b"".join(_chunks(fd, os.fspath(name), max_bytes))
    finally:
        os.close(fd)


def copy_workdir_file(workdir: Path, name: str | os.PathLike, dest: Path, max_bytes: int) -> int:
    """Copy ``workdir / name`` to the new file ``dest`` (checked as :func:`open_workdir_file`).

    Returns:
      The number of bytes copied.

    Raises:
      UnsafeFileError, ValueError: as :func:`read_workdir_file`; ``dest`` is then removed.
      FileExistsError: ``dest`` exists.
    """
    fd = open_workdir_file(workdir, name, max_bytes)
    total = 0
    try:
        with open(dest, "xb") as out:
            try:
                for data in _chunks(fd, os.fspath(name), max_bytes):
                    out.write(data)
                    total += len(data)
            except BaseException:
                out.close()
                Path(dest).unlink(missing_ok=True)
                raise
    finally:
        os.close(fd)
    return total
