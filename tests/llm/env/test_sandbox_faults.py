"""Fault suite: real misbehaving scripts end as classified outcomes and leave the host unharmed.

Each fault runs under every available backend (subprocess, bubblewrap, docker); a backend that is
not available here is skipped with the reason (``testkit.sandboxes``).  No status depends on the
machine's speed: a fault that must time out sleeps or loops forever against a short limit (3 s),
every other fault runs under a limit far beyond what it needs (600 s), and no test asserts a
duration.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from rpg_llm.env.sandbox import SandboxLimits
from rpg_llm.env.sandbox.base import allocated_bytes
from rpg_llm.env.sandbox.identity import is_root
from testkit.sandboxes import KINDS, make_test_sandbox

TIMEOUT = 3.0
LONG = 600.0
NPROC = 32


@pytest.fixture(scope="module", params=KINDS)
def sandbox(request):
    return make_test_sandbox(
        request.param, nproc=NPROC, memory_bytes=2 * 2**30, output_limit_bytes=8 * 2**20
    )


@pytest.fixture()
def data_dir(tmp_path):
    d = tmp_path / "public"
    d.mkdir()
    (d / "train.csv").write_text("x,y\n1,2\n3,4\n")
    (d / "sub").mkdir()
    (d / "sub" / "more.txt").write_text("keep me\n")
    return d


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose environment contains ``text`` (every sandboxed child has its workdir there)."""
    found = []
    needle = text.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if needle in fh.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _run(sandbox, code, data_dir, **kw):
    t0 = time.monotonic()
    res = sandbox.run(textwrap.dedent(code), data_dir, kw.pop("timeout_s", LONG), **kw)
    elapsed = time.monotonic() - t0
    return res, elapsed


def test_infinite_loop_times_out(sandbox, data_dir):
    res, _ = _run(sandbox, "while True:\n    pass\n", data_dir, timeout_s=TIMEOUT)
    try:
        assert res.status == "timeout"
        assert res.outcome_text == "timeout after 3 s"
        assert res.delta >= TIMEOUT  # killed only once the limit passed
        assert _processes_mentioning(str(res.workdir)) == []
    finally:
        res.cleanup()


def test_sleep_past_timeout(sandbox, data_dir):
    res, _ = _run(
        sandbox,
        "import time\nprint('start', flush=True)\ntime.sleep(600)\n",
        data_dir,
        timeout_s=TIMEOUT,
    )
    try:
        assert res.status == "timeout"
        # what was printed before the kill is kept (nothing, if start-up took the whole limit)
        assert res.stdout.strip() in ("start", "")
    finally:
        res.cleanup()


def test_8gb_allocation_is_oom(sandbox, data_dir):
    res, _ = _run(sandbox, "buf = bytearray(8 * 1024**3)\nprint(len(buf))\n", data_dir)
    try:
        assert res.status == "oom", res.stderr
        assert res.outcome_text.startswith(("MemoryError", "killed by SIGKILL"))
    finally:
        res.cleanup()


FORK_BOMB = """
import os, time
first = os.getpid()
# bounded even without any sandbox: at most 2**11 = 2048 processes
for _ in range(11):
    try:
        os.fork()
    except OSError:
        pass
open(f"proc-{os.getpid()}", "w").close()
if os.getpid() != first:
    time.sleep(600)  # every forked process lingers; the first one exits 0 once it forked
"""


def test_fork_bomb_is_bounded_and_killed(sandbox, data_dir):
    res, _ = _run(sandbox, FORK_BOMB, data_dir)
    try:
        assert res.status == "ok", res.outcome_text
        # the whole tree is gone
        time.sleep(0.2)
        assert _processes_mentioning(str(res.workdir)) == []
        started = len(list(res.workdir.glob("proc-*")))
        assert started >= 1
        if is_root() or sandbox.name == "docker":
            assert started <= NPROC  # the process limit held (2048 without it)
    finally:
        res.cleanup()
    # the machine can still start processes
    res2, _ = _run(sandbox, "print('alive')", data_dir)
    assert res2.status == "ok" and res2.stdout.strip() == "alive"
    res2.cleanup()


@pytest.fixture()
def listening_port():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield srv.getsockname()[1]
    srv.close()


def test_network_connection_attempt(sandbox, data_dir, listening_port):
    code = f"""
    import socket
    s = socket.create_connection(("127.0.0.1", {listening_port}), timeout=2)
    print("connected")
    """
    res, _ = _run(sandbox, code, data_dir)
    try:
        if sandbox.name == "subprocess":
            # documented: plain subprocess does not isolate the network
            assert res.status == "ok" and res.stdout.strip() == "connected"
        else:
            assert res.status == "error"
            assert "connected" not in res.stdout
            assert res.outcome_text.split()[0] in ("ConnectionRefusedError", "OSError")
    finally:
        res.cleanup()


@pytest.fixture()
def outside_dir():
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else Path(tempfile.gettempdir())
    d = base / f"rpg-sandbox-test-{uuid.uuid4().hex}"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_write_outside_working_folder(sandbox, data_dir, outside_dir):
    if sandbox.name == "subprocess" and not is_root():
        pytest.skip("plain subprocess as a normal user cannot stop writes to the user's own files")
    target = outside_dir / "escape.txt"
    code = f"open({str(target)!r}, 'w').write('pwned')\n"
    res, _ = _run(sandbox, code, data_dir)
    try:
        assert res.status == "error"
        assert res.outcome_text.split()[0] in ("PermissionError", "OSError", "FileNotFoundError")
        assert not target.exists()
    finally:
        res.cleanup()


def test_deleting_the_data_leaves_host_copy_intact(sandbox, data_dir):
    before = _snapshot(data_dir)
    code = """
    import os, shutil
    p = os.environ["RPG_INPUT_DIR"]
    for root, dirs, files in os.walk(p):
        for f in files:
            try:
                with open(os.path.join(root, f), "w") as fh:
                    fh.write("corrupted")
            except OSError:
                pass
    shutil.rmtree(p)
    """
    res, _ = _run(sandbox, code, data_dir)
    try:
        assert res.status == "error"
        assert res.outcome_text.split()[0] in ("PermissionError", "OSError")
        assert _snapshot(data_dir) == before
    finally:
        res.cleanup()


def test_deleting_shared_data_fails(sandbox, outside_dir):
    """Data other users may read (served by a link or bind, not a copy) cannot be deleted."""
    data = outside_dir / "public"
    data.mkdir(mode=0o755)
    (data / "train.csv").write_text("a\n1\n")
    (data / "train.csv").chmod(0o644)
    before = _snapshot(data)
    code = "import os, shutil\nos.remove('input/train.csv')\n"
    res, _ = _run(sandbox, code, data)
    try:
        assert res.status == "error"
        assert res.outcome_text.split()[0] in ("PermissionError", "OSError")
        assert _snapshot(data) == before
    finally:
        res.cleanup()


def test_output_flood_is_capped(sandbox, data_dir):
    code = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    res, _ = _run(sandbox, code, data_dir)
    try:
        assert res.status == "error"
        assert res.outcome_text.startswith("output limit exceeded")
        cap = SandboxLimits().capture_bytes
        assert len(res.stdout) <= cap + 100
        assert "bytes not captured" in res.stdout
    finally:
        res.cleanup()


def test_syntax_error(sandbox, data_dir):
    res, _ = _run(sandbox, "x = 1\ny = (\nprint(x)\n", data_dir)
    try:
        assert res.status == "error"
        assert res.outcome_text.startswith("SyntaxError at line 2")
    finally:
        res.cleanup()


def test_uncaught_exception(sandbox, data_dir):
    code = "import os\n\nvalue = 1 / 0\n"
    res, _ = _run(sandbox, code, data_dir)
    try:
        assert res.status == "error"
        assert res.outcome_text == "ZeroDivisionError at line 3: division by zero"
        assert res.returncode == 1
    finally:
        res.cleanup()


def test_no_submission_file_is_ok_without_submission(sandbox, data_dir):
    res, _ = _run(sandbox, "print(sorted(__import__('os').listdir('input')))\n", data_dir)
    try:
        assert res.status == "ok"
        assert res.stdout.strip() == "['sub', 'train.csv']"
        assert not res.submission_path.exists()
    finally:
        res.cleanup()


def test_good_script_reads_input_and_writes_submission(sandbox, data_dir):
    code = """
    import os, csv
    rows = list(csv.reader(open(os.path.join(os.environ["RPG_INPUT_DIR"], "train.csv"))))
    total = sum(int(r[0]) + int(r[1]) for r in rows[1:])
    with open(os.environ["RPG_SUBMISSION_PATH"], "w") as fh:
        fh.write(f"total\\n{total}\\n")
    print(os.environ["OMP_NUM_THREADS"])
    """
    res, _ = _run(sandbox, code, data_dir)
    try:
        assert res.status == "ok", res.stderr
        assert res.submission_path.read_text() == "total\n10\n"
        assert res.stdout.strip() == "1"
        assert res.delta > 0
    finally:
        res.cleanup()
    assert not res.workdir.exists()


def test_hidden_paths_are_invisible(sandbox, data_dir, tmp_path):
    if sandbox.name == "subprocess":
        pytest.skip("plain subprocess does not hide host paths (documented)")
    secret = tmp_path / "private"
    secret.mkdir()
    (secret / "answers.csv").write_text("42\n")
    code = f"print(open({str(secret / 'answers.csv')!r}).read())\n"
    res, _ = _run(sandbox, code, data_dir, hide=[secret])
    try:
        assert res.status == "error"
        assert "42" not in res.stdout
    finally:
        res.cleanup()


SETSID_SLEEPER = """
import os, subprocess, sys, time
# double fork + setsid: the grandchild leaves the process group and the session of the script
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
    os._exit(0)
os.wait()
# exit only once the grandchild runs under its marker (so it surely outlives the script)
while not any(
    b"{marker}" in open(f"/proc/{{p}}/cmdline", "rb").read()
    for p in os.listdir("/proc") if p.isdigit() and os.path.exists(f"/proc/{{p}}/cmdline")
):
    time.sleep(0.05)
print("sleeper started")
"""


def _live_processes_with(marker: str) -> list[int]:
    """Pids (host view) of live processes whose command line holds ``marker``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in cmd and state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


def test_setsid_double_forked_sleeper_is_killed(sandbox, data_dir):
    if sandbox.name == "subprocess" and not is_root():
        pytest.skip("plain subprocess as a normal user cannot end a setsid grandchild (documented)")
    marker = f"rpg-sleeper-{uuid.uuid4().hex}"
    res, _ = _run(sandbox, SETSID_SLEEPER.format(marker=marker), data_dir)
    try:
        assert res.status == "ok", res.stderr
        assert res.stdout.strip() == "sleeper started"  # it did outlive the script
        assert _live_processes_with(marker) == []
    finally:
        for pid in _live_processes_with(marker):  # do not leave it behind if the test fails
            os.kill(pid, 9)
        res.cleanup()


def test_no_files_left_in_world_writable_host_folders(sandbox, data_dir):
    if sandbox.name == "subprocess" and not is_root():
        pytest.skip("plain subprocess as a normal user cannot clean the user's files (documented)")
    marker = f"rpg-left-{uuid.uuid4().hex}"
    targets = [Path(d) / marker for d in ("/tmp", "/var/tmp", "/dev/shm") if Path(d).is_dir()]
    code = f"""
    import os
    wrote = []
    for folder in {[str(t.parent) for t in targets]!r}:
        for name in ("{marker}", "{marker}-dir/inner"):
            path = os.path.join(folder, name)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as fh:
                    fh.write("left behind")
                wrote.append(path)
            except OSError:
                pass
    print(len(wrote))
    """
    res, _ = _run(sandbox, code, data_dir)
    try:
        assert res.status == "ok", res.stderr
        if sandbox.name == "subprocess":
            assert int(res.stdout) == 2 * len(targets)  # the writes did succeed on the host
        for t in targets:
            assert not t.exists() and not Path(f"{t}-dir").exists()
    finally:
        for t in targets:
            shutil.rmtree(f"{t}-dir", ignore_errors=True)
            if t.exists():
                t.unlink()
        res.cleanup()


def test_total_disk_cap_kills_the_run(sandbox, data_dir):
    kind = sandbox.name
    limited = make_test_sandbox(kind, nproc=NPROC, fsize_bytes=4 * 2**20, disk_bytes=8 * 2**20)
    # four files of 3 MiB: each under the per-file cap, 12 MiB in all
    code = """
    import os, time
    for i in range(4):
        with open(f"part{i}.bin", "wb") as fh:
            fh.write(os.urandom(3 * 2**20))
    print("written", flush=True)
    time.sleep(600)
    """
    res, _ = _run(limited, code, data_dir)
    try:
        assert res.status == "error"
        if kind == "docker":
            # the working folder is a tmpfs of disk_bytes: the third file's write fails in the
            # kernel, nothing past the cap is ever stored
            assert res.outcome_text == "OSError at line 5: [Errno 28] No space left on device"
            assert 6 * 2**20 <= allocated_bytes(res.workdir) <= 8 * 2**20
            assert "written" not in res.stdout
        else:
            assert res.outcome_text.startswith("disk limit exceeded:"), res.outcome_text
            used = int(res.outcome_text.split(":")[1].split()[0])
            assert used > 8 * 2**20
    finally:
        res.cleanup()
    # under the cap the same writes are fine
    roomy = make_test_sandbox(kind, nproc=NPROC, fsize_bytes=4 * 2**20, disk_bytes=64 * 2**20)
    res, _ = _run(roomy, code.replace("time.sleep(600)", "pass"), data_dir)
    try:
        assert res.status == "ok", res.outcome_text
    finally:
        res.cleanup()
