"""Files a script leaves in its working folder are read as untrusted: rpg_llm.env.sandbox.files and
the bounded host-side call of rpg_llm.env.sandbox.bounded.

Every refusal below is a case the host used to follow or block on: a link (to answers or to an
endless file), a FIFO, a device, a folder, a hard link, a file on another file system, a file
larger than the limit or one that grows while read.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from rpg_llm.env.sandbox.bounded import LimitExceeded, call_bounded
from rpg_llm.env.sandbox.files import (
    UnsafeFileError,
    copy_workdir_file,
    open_workdir_file,
    read_workdir_file,
)
from testkit.sandboxes import KINDS, make_test_sandbox

pytestmark = pytest.mark.timeout(120)  # a FIFO or endless file that blocked would hang the host


@pytest.fixture
def wd(tmp_path):
    folder = tmp_path / "wd"
    folder.mkdir()
    return folder


def test_a_plain_file_is_read_whole(wd):
    data = os.urandom(3 * (1 << 20) + 17)  # more than one read chunk
    (wd / "submission.csv").write_bytes(data)
    assert read_workdir_file(wd, "submission.csv", len(data)) == data
    (wd / "sub").mkdir()
    (wd / "sub" / "log.txt").write_bytes(b"line\n")
    assert read_workdir_file(wd, "sub/log.txt", 5) == b"line\n"


def test_a_missing_file_is_reported_as_missing(wd):
    with pytest.raises(UnsafeFileError) as err:
        read_workdir_file(wd, "submission.csv", 10)
    assert err.value.missing and "does not exist" in err.value.reason


@pytest.mark.parametrize("target", ["answers", "/proc/kmsg", "/dev/zero", "dangling"])
def test_a_symbolic_link_is_never_followed(wd, tmp_path, target):
    answers = tmp_path / "answers.csv"
    answers.write_text("id,label\n0,1\n")
    dest = {"answers": answers, "dangling": tmp_path / "nowhere"}.get(target, Path(target))
    os.symlink(dest, wd / "submission.csv")
    with pytest.raises(UnsafeFileError) as err:
        read_workdir_file(wd, "submission.csv", 1 << 20)
    assert not err.value.missing
    assert err.value.reason == "submission.csv is a symbolic link, not a plain file"


def test_a_link_anywhere_on_the_path_is_refused(wd, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "test.csv").write_text("secret")
    os.symlink(outside, wd / "sub")
    with pytest.raises(UnsafeFileError, match=r"sub/test.csv: sub is a symbolic link"):
        read_workdir_file(wd, "sub/test.csv", 100)
    # the working folder itself swapped for a link
    os.symlink(outside, tmp_path / "wd-link")
    with pytest.raises(UnsafeFileError, match="working folder .* cannot be opened"):
        read_workdir_file(tmp_path / "wd-link", "test.csv", 100)


def test_a_fifo_is_refused_without_blocking(wd):
    os.mkfifo(wd / "submission.csv")
    with pytest.raises(UnsafeFileError, match=r"submission.csv is a FIFO, not a plain file"):
        read_workdir_file(wd, "submission.csv", 100)


def test_a_folder_and_a_socket_are_refused(wd):
    import socket

    (wd / "submission.csv").mkdir()
    with pytest.raises(UnsafeFileError, match="is a folder, not a plain file"):
        read_workdir_file(wd, "submission.csv", 100)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(wd / "sock.csv"))
        with pytest.raises(UnsafeFileError, match="is a socket, not a plain file"):
            read_workdir_file(wd, "sock.csv", 100)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_is_refused(wd):
    os.mknod(wd / "submission.csv", stat.S_IFCHR | 0o666, os.makedev(1, 5))  # like /dev/zero
    with pytest.raises(UnsafeFileError, match="is a character device, not a plain file"):
        read_workdir_file(wd, "submission.csv", 100)


def test_a_hard_link_is_refused(wd, tmp_path):
    answers = tmp_path / "answers.csv"
    answers.write_text("id,label\n0,1\n")
    os.link(answers, wd / "submission.csv")
    with pytest.raises(UnsafeFileError, match="has 2 hard links"):
        read_workdir_file(wd, "submission.csv", 100)


def test_a_file_on_another_file_system_is_refused():
    # /proc/version is a plain file with one link, on another file system than / (like a mount
    # placed inside a working folder)
    if os.stat("/proc").st_dev == os.stat("/").st_dev:
        pytest.skip("/proc is not a separate file system here")
    with pytest.raises(UnsafeFileError, match="proc/version lies on another file system"):
        read_workdir_file(Path("/"), "proc/version", 1 << 20)


def test_a_file_over_the_limit_is_refused(wd):
    (wd / "submission.csv").write_bytes(b"x" * 1001)
    with pytest.raises(UnsafeFileError) as err:
        read_workdir_file(wd, "submission.csv", 1000)
    assert err.value.reason == "submission.csv holds 1001 bytes, more than the limit of 1000"
    assert read_workdir_file(wd, "submission.csv", 1001) == b"x" * 1001


def test_a_file_that_grows_while_read_is_cut_off(wd):
    path = wd / "log.txt"
    path.write_bytes(b"")
    fd = open_workdir_file(wd, "log.txt", 1 << 20)  # size 0 at the check
    try:
        path.write_bytes(b"y" * (2 << 20))  # grows past the limit after the check
        from rpg_llm.env.sandbox.files import _chunks

        with pytest.raises(UnsafeFileError, match="grew past the limit"):
            b"".join(_chunks(fd, "log.txt", 1 << 20))
    finally:
        os.close(fd)


def test_bad_arguments_raise_value_error(wd):
    for name in ("/etc/passwd", "../x", "a/../../b", ""):
        with pytest.raises(ValueError, match="relative path"):
            read_workdir_file(wd, name, 10)
    with pytest.raises(ValueError, match="max_bytes must be a positive int"):
        read_workdir_file(wd, "x", 0)


def test_copy_copies_plain_files_and_refuses_links(wd, tmp_path):
    data = os.urandom(5000)
    (wd / "final_model.pt2").write_bytes(data)
    dest = tmp_path / "copy.pt2"
    assert copy_workdir_file(wd, "final_model.pt2", dest, 5000) == 5000
    assert dest.read_bytes() == data
    os.remove(wd / "final_model.pt2")
    os.symlink(tmp_path / "copy.pt2", wd / "final_model.pt2")
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        copy_workdir_file(wd, "final_model.pt2", tmp_path / "other.pt2", 5000)
    assert not (tmp_path / "other.pt2").exists()


# --- files a script made inside each sandbox backend --------------------------------------------

MAKE_ATTACK_FILES = """
import os
open("plain.csv", "w").write("id,label\\n0,1\\n")
open("answers.csv", "w").write("id,label\\n0,1\\n")
os.link("answers.csv", "hard.csv")
os.symlink("/etc/passwd", "link.csv")
os.mkfifo("fifo.csv")
os.mkdir("folder.csv")
open("big.csv", "wb").write(b"x" * 5000)
print("made")
"""


@pytest.mark.parametrize("kind", KINDS)
def test_files_a_sandboxed_script_made_are_refused(kind, tmp_path):
    data = tmp_path / "public"
    data.mkdir()
    res = make_test_sandbox(kind).run(MAKE_ATTACK_FILES, data, 600)
    try:
        assert res.status == "ok" and res.stdout.strip() == "made", res.stderr
        refused = {
            "hard.csv": "hard.csv has 2 hard links (a link to another file), not 1",
            "link.csv": "link.csv is a symbolic link, not a plain file",
            "fifo.csv": "fifo.csv is a FIFO, not a plain file",
            "folder.csv": "folder.csv is a folder, not a plain file",
            "big.csv": "big.csv holds 5000 bytes, more than the limit of 4096",
        }
        for name, reason in refused.items():
            with pytest.raises(UnsafeFileError) as err:
                read_workdir_file(res.workdir, name, 4096)
            assert err.value.reason == reason
        assert read_workdir_file(res.workdir, "plain.csv", 4096) == b"id,label\n0,1\n"
    finally:
        res.cleanup()


# --- the bounded host-side call -------------------------------------------------------------------


def _add(a: int, b: int) -> int:
    return a + b


def _raise(text: str) -> None:
    raise KeyError(text)


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def _allocate(n_bytes: int) -> int:
    return len(bytearray(n_bytes))


def _die() -> None:
    os.kill(os.getpid(), 9)


def test_bounded_call_returns_the_value_and_reraises_the_error():
    assert call_bounded(_add, 2, 3, time_s=60, memory_bytes=1 << 30) == 5
    with pytest.raises(KeyError, match="boom"):
        call_bounded(_raise, "boom", time_s=60, memory_bytes=1 << 30)


def test_bounded_call_is_killed_at_its_time_limit():
    t0 = time.monotonic()
    with pytest.raises(LimitExceeded) as err:
        call_bounded(_sleep, 600.0, time_s=1.0, memory_bytes=1 << 30)
    assert err.value.limit == "time" and err.value.reason == "took longer than 1 s"
    assert time.monotonic() - t0 < 300  # not the 600 s the call would take


def test_bounded_call_cannot_allocate_past_its_memory_limit():
    assert call_bounded(_allocate, 1 << 20, time_s=60, memory_bytes=256 << 20) == 1 << 20
    with pytest.raises(LimitExceeded) as err:
        call_bounded(_allocate, 2 << 30, time_s=60, memory_bytes=256 << 20)
    assert err.value.limit == "memory"


def test_bounded_call_reports_a_child_that_died():
    with pytest.raises(LimitExceeded) as err:
        call_bounded(_die, time_s=60, memory_bytes=1 << 30)
    assert err.value.limit == "crash" and "signal 9" in err.value.reason


def test_bounded_call_works_from_a_thread():
    out: list[int] = []
    t = threading.Thread(
        target=lambda: out.append(call_bounded(_add, 1, 1, time_s=60, memory_bytes=1 << 30))
    )
    t.start()
    t.join()
    assert out == [2]
