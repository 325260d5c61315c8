"""One command-line convention for every ``python -m`` entry point of the project.

* A usage error (a bad flag or value) prints one line ``<prog>: error: <message>`` on stderr and
  exits with status 2; the message names the flag and the value the user typed.
* Any other failure prints one line ``<prog>: <ExceptionType>: <message>`` and exits with status 1,
  without a traceback (``RPG_TRACEBACK=1`` in the environment re-raises it for debugging).
* Ctrl-C exits 130; a closed output pipe (``... | head``) ends the command quietly with 0.

Usage::

    from rpg_core.cli import ArgumentParser, UsageError, run_cli

    def main(argv=None) -> int:
        return run_cli("python -m pkg.mod", _main, argv)

where ``_main(argv)`` builds an :class:`ArgumentParser`, raises :class:`UsageError` for values that
parse but are not allowed (the one validation idiom: ``if not ok: raise UsageError(...)``), and
returns the exit status.  Shared argument types: :func:`comma_list` (``type=comma_list(int)`` for
``--seeds 0,1,2``), :func:`at_least` for a lower bound, :func:`out_folder` for an output folder,
:func:`input_file` for a small input file read without blocking (:func:`file_kind` names what a
path is).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

__all__ = [
    "ArgumentParser",
    "UsageError",
    "at_least",
    "comma_list",
    "count",
    "file_kind",
    "input_file",
    "out_folder",
    "run_cli",
]

T = TypeVar("T")


class UsageError(ValueError):
    """A command-line value that is not allowed; the message names the flag and the value."""


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse`` parser whose errors raise :class:`UsageError` instead of exiting.

    ``--help`` still prints the help and exits 0.
    """

    def error(self, message: str) -> NoReturn:  # noqa: D401 - argparse's signature
        raise UsageError(message)


def comma_list(
    item: Callable[[str], T], what: str = "values", *, distinct: bool = True
) -> Callable[[str], list[T]]:
    """An argument type for comma-separated values: ``type=comma_list(int)`` reads ``"0,1,2"``
    as ``[0, 1, 2]``.

    Args:
        item: converts one value (``int``, ``float``, a checker that raises ValueError).
        what: the values' name in the message (``"integers"``, ``"numbers"``).
        distinct: refuse a list that repeats a value.

    Returns:
        A function ``str -> list`` that raises ``argparse.ArgumentTypeError`` (argparse turns it
        into a :class:`UsageError` naming the flag) on an empty item, a value ``item`` refuses,
        or a repeat.
    """

    def parse(text: str) -> list[T]:
        parts = [p.strip() for p in str(text).split(",")]
        if any(not p for p in parts):
            raise argparse.ArgumentTypeError(f"give comma-separated {what}, got {text!r}")
        try:
            values = [item(p) for p in parts]
        except ValueError as exc:
            why = f" ({exc})" if str(exc) and item not in (int, float) else ""
            raise argparse.ArgumentTypeError(f"not comma-separated {what}: {text!r}{why}") from None
        if distinct and len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"repeats a value: {text!r}")
        return values

    return parse


def count(n: int, noun: str) -> str:
    """``n`` and ``noun`` for a message, the noun plural unless ``n == 1``: ``"1 step"``,
    ``"10 steps"`` (nouns whose plural adds an ``s``)."""
    return f"{n} {noun}{'s' * (n != 1)}"


def at_least(flag: str, value: float, low: float) -> None:
    """Raise :class:`UsageError` ``"<flag> must be >= <low>, got <value>"`` when ``value < low``."""
    if value < low:
        raise UsageError(f"{flag} must be >= {low:g}, got {value}")


def out_folder(flag: str, value: str, holds: str | None = None) -> Path:
    """An output folder: a non-empty path that is a folder or does not exist yet, and (with
    ``holds``) that does not hold that file of another run (e.g. ``"config.json"``).

    Raises:
        UsageError: naming the flag and the value.
    """
    if not str(value).strip():
        raise UsageError(f"{flag} {value!r}: an empty value; give a folder")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {value}: exists and is not a folder")
    if holds is not None and (path / holds).exists():
        raise UsageError(f"{flag} {value} already holds a run ({holds})")
    return path


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)
_PSEUDO = ("/proc/", "/sys/")


def file_kind(path: Path) -> str:
    """What ``path`` is, in words: ``"a regular file"``, ``"a folder"``, ``"a character
    device"``, ... (links followed), or ``"missing"``."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "missing"
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file"


def input_file(what: str, path: Path, max_bytes: int) -> bytes:
    """The bytes of a small input file named on the command line (a script), read without
    blocking: a device, FIFO or folder is refused by its kind, a kernel file (under ``/proc`` or
    ``/sys``, where a read may block or never end) by where it is, and a file over
    ``max_bytes`` by its size.

    Raises:
        UsageError: ``"<what> '<path>' ..."`` saying which of these it is.
    """
    name = f"{what} {str(path)!r}"
    kind = file_kind(path)
    if kind == "missing":
        raise UsageError(f"{name} not found")
    if kind != "a regular file":
        raise UsageError(f"{name} is {kind}, not a regular file")
    real = os.path.realpath(path)
    if real.startswith(_PSEUDO):
        raise UsageError(f"{name} is the kernel file {real}, not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        raise UsageError(f"{name} cannot be read ({err.strerror or err})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the check above
            raise UsageError(f"{name} is not a regular file")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise UsageError(f"{name} is larger than {max_bytes} bytes")
        return b"".join(chunks)
    except BlockingIOError:
        raise UsageError(f"{name} cannot be read without waiting (not a regular file)") from None
    except OSError as err:
        raise UsageError(f"{name} cannot be read ({err.strerror or err})") from None
    finally:
        os.close(fd)


def _one_line(text: object) -> str:
    return " ".join(str(text).split()) or "(no message)"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def run_cli(
    prog: str, main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None
) -> int:
    """Run ``main(argv)`` under the project's exit-status convention (module docstring).

    Args:
        prog: the name printed before every message, e.g. ``"python -m rpg_llm.run"``.
        main: the command; returns an exit status (``None`` counts as 0).
        argv: arguments without the program name (``None``: ``sys.argv[1:]``).

    Returns:
        0 (or ``main``'s own status) on success, 2 on a usage error, 1 on any other failure,
        130 on Ctrl-C.
    """
    try:
        status = main(argv)
    except UsageError as err:
        print(f"{prog}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``... | head``): stop quietly, as Unix tools do
        _silence_stdout()
        return 0
    except SystemExit as err:  # argparse --help / --version, or an explicit sys.exit
        code = err.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as err:  # noqa: BLE001 - the convention: one line, no traceback
        if os.environ.get("RPG_TRACEBACK"):
            raise
        print(f"{prog}: {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 1
    return 0 if status is None else int(status)
