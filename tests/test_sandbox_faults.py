"""Fault suite: real misbehaving scripts end as classified outcomes and leave the host unharmed.

Each fault runs under every available backend (subprocess, bubblewrap, docker); a backend that is
not available here is skipped with the reason.  Timeouts are short (3 s) to keep the suite fast.
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

from rpg_llm.sandbox import SandboxLimits, make_sandbox
from rpg_llm.sandbox.bwrap_backend import bwrap_path
from rpg_llm.sandbox.identity import is_root

TIMEOUT = 3.0
NPROC = 32


def _docker_reason() -> str | None:
    try:
        from rpg_llm.sandbox.docker_backend import docker_client

        docker_client(timeout=2)
    except RuntimeError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module", params=["subprocess", "bwrap", "docker"])
def sandbox(request):
    kind = request.param
    if kind == "bwrap" and bwrap_path() is None:
        pytest.skip("bubblewrap not installed (apt-get install bubblewrap)")
    if kind == "docker":
        reason = _docker_reason()
        if reason:
            pytest.skip(f"docker backend: {reason}")
    return make_sandbox(kind, nproc=NPROC, memory_bytes=2 * 2**30, output_limit_bytes=8 * 2**20)


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
    res = sandbox.run(textwrap.dedent(code), data_dir, kw.pop("timeout_s", TIMEOUT), **kw)
    elapsed = time.monotonic() - t0
    return res, elapsed


def test_infinite_loop_times_out(sandbox, data_dir):
    res, elapsed = _run(sandbox, "while True:\n    pass\n", data_dir)
    try:
        assert res.status == "timeout"
        assert res.outcome_text == "timeout after 3 s"
        assert TIMEOUT <= res.delta < 2 * TIMEOUT
        assert elapsed < 2 * TIMEOUT
        assert _processes_mentioning(str(res.workdir)) == []
    finally:
        res.cleanup()


def test_sleep_past_timeout(sandbox, data_dir):
    res, elapsed = _run(
        sandbox, "import time\nprint('start', flush=True)\ntime.sleep(60)\n", data_dir
    )
    try:
        assert res.status == "timeout"
        assert res.stdout.strip() == "start"
        assert elapsed < 2 * TIMEOUT
    finally:
        res.cleanup()


def test_8gb_allocation_is_oom(sandbox, data_dir):
    res, elapsed = _run(sandbox, "buf = bytearray(8 * 1024**3)\nprint(len(buf))\n", data_dir)
    try:
        assert res.status == "oom", res.stderr
        assert res.outcome_text.startswith(("MemoryError", "killed by SIGKILL"))
        assert elapsed < 2 * TIMEOUT
    finally:
        res.cleanup()


FORK_BOMB = """
import os, time
# bounded even without any sandbox: at most 2**11 = 2048 processes
for _ in range(11):
    try:
        os.fork()
    except OSError:
        pass
open(f"proc-{os.getpid()}", "w").close()
time.sleep(60)
"""


def test_fork_bomb_is_bounded_and_killed(sandbox, data_dir):
    res, elapsed = _run(sandbox, FORK_BOMB, data_dir)
    try:
        assert res.status in ("timeout", "error")
        assert elapsed < 2 * TIMEOUT
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
    res, elapsed = _run(sandbox, code, data_dir)
    try:
        assert elapsed < 2 * TIMEOUT
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
    res, elapsed = _run(sandbox, code, data_dir)
    try:
        assert res.status in ("error", "timeout")
        if sandbox.name != "docker":
            assert res.status == "error"
            assert res.outcome_text.startswith("output limit exceeded")
        cap = SandboxLimits().capture_bytes
        assert len(res.stdout) <= cap + 100
        assert "bytes not captured" in res.stdout
        assert elapsed < 2 * TIMEOUT
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
        assert 0 < res.delta < TIMEOUT
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
