"""What only the docker sandbox has: its image's recipe, its cgroup accounts, and what a killed,
hung or failed container leaves behind (nothing).

The battery shared with the other backends (faults, tree limits, leaks, file attacks, grading) is
parametrised by backend in test_sandbox*.py, test_reward_hacks.py, test_untrusted_files.py and
test_execute.py.  Tests that need the engine skip with the reason where it is missing (and fail
under ``RPG_REQUIRE_DOCKER=1``, as in CI).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rpg_llm.env.sandbox import SandboxError, SandboxLimits
from rpg_llm.env.sandbox import image as image_mod
from rpg_llm.env.sandbox.docker_backend import (
    LABEL_PID,
    LABEL_RUN,
    DockerSandbox,
    RunCgroup,
    remove_stale_containers,
)
from rpg_llm.env.sandbox.engine import docker_client
from rpg_llm.env.sandbox.image import (
    apt_mirror,
    build_image,
    image_tag,
    label_data,
    strip_label_data,
)
from testkit import REPO_ROOT
from testkit.sandboxes import docker_image, make_test_sandbox, skip_unless

pytestmark = pytest.mark.timeout(600)

# --- the image's recipe (no engine needed) --------------------------------------------------------


def test_the_tag_is_a_digest_of_the_package_list(monkeypatch):
    tag = image_tag()
    assert re.fullmatch(r"rpg-sandbox:[0-9a-f]{12}", tag), tag
    assert image_tag() == tag  # stable
    assert image_tag(with_data=True) == f"{tag}-with-data"
    monkeypatch.setattr(image_mod, "PACKAGES", (*image_mod.PACKAGES, "python3-statsmodels"))
    other = image_tag()
    assert re.fullmatch(r"rpg-sandbox:[0-9a-f]{12}", other) and other != tag


def test_apt_mirror_is_the_one_apt_uses_for_the_suite(tmp_path):
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    assert apt_mirror("bookworm", etc) == "http://deb.debian.org/debian"  # nothing configured
    (etc / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\n"
        "Types: deb\nURIs: http://off.example/debian\nSuites: trixie\nEnabled: no\n"
    )
    assert apt_mirror("bookworm", etc) == "http://mirror.example/debian"
    assert apt_mirror("trixie", etc) == "http://deb.debian.org/debian"  # disabled stanza
    (etc / "sources.list").write_text(
        "# deb http://commented.example/debian trixie main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://one-line.example/debian trixie main\n"
    )
    assert apt_mirror("trixie", etc) == "http://one-line.example/debian"


def _fake_root(root: Path) -> None:
    site = root / "usr" / "lib" / "python3" / "dist-packages"
    files = {
        "sklearn/__init__.py": "",
        "sklearn/datasets/__init__.py": "",
        "sklearn/datasets/_base.py": "def load_digits(): ...\n",
        "sklearn/datasets/data/__init__.py": "",
        "sklearn/datasets/data/digits.csv.gz": "0,1,2\n",
        "sklearn/datasets/descr/digits.rst": "Digits\n",
        "sklearn/datasets/images/README.txt": "read me\n",
        "sklearn/datasets/images/china.jpg": "jpg",
        "pandas/io/formats/templates/html.tpl": "{{ table }}",  # not a data package: kept
        "numpy/core/_multiarray_umath.so": "",
    }
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (root / "root" / "scikit_learn_data").mkdir(parents=True)
    (root / "root" / "scikit_learn_data" / "openml.json.gz").write_text("{}")


def test_strip_label_data_removes_what_the_leak_probes_read_and_keeps_the_code(tmp_path):
    root = tmp_path / "root"
    _fake_root(root)
    site = root / "usr" / "lib" / "python3" / "dist-packages"
    data = site / "sklearn" / "datasets"
    expected = [
        data / "data",
        data / "descr",
        data / "images" / "china.jpg",
        root / "root" / "scikit_learn_data",
    ]
    assert sorted(label_data(root)) == sorted(expected)
    assert sorted(strip_label_data(root)) == sorted(expected)
    assert label_data(root) == []
    assert not any(p.exists() for p in expected)
    for kept in ("sklearn/datasets/_base.py", "sklearn/datasets/images/README.txt"):
        assert (site / kept).is_file(), kept
    assert (site / "pandas/io/formats/templates/html.tpl").is_file()


def test_strip_label_data_refuses_to_finish_with_data_left(tmp_path, monkeypatch):
    root = tmp_path / "root"
    _fake_root(root)
    monkeypatch.setattr(image_mod, "_remove", lambda path: None)  # a removal that does nothing
    with pytest.raises(SandboxError, match=r"^4 data paths are left in .* after removal: "):
        strip_label_data(root)


def test_the_image_cli_prints_the_tag_and_names_a_bad_value(capsys):
    assert image_mod.main(["tag"]) == 0
    assert capsys.readouterr().out.strip() == image_tag()
    assert image_mod.main(["build", "--mirror", "ftp://old.example/debian"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "rpg-sandbox-image: error: --mirror 'ftp://old.example/debian': give an http(s):// or "
        "file:/ URL"
    )


def test_run_cgroup_reads_cgroup_v1_and_v2_accounts(tmp_path):
    v1 = tmp_path / "v1"
    (v1 / "cpuacct" / "rpg-sandbox" / "run-1-a").mkdir(parents=True)
    (v1 / "cpuacct" / "rpg-sandbox" / "run-1-a" / "cpuacct.usage").write_text("1500000000\n")
    leaf = v1 / "memory" / "rpg-sandbox" / "run-1-a" / "cid"
    leaf.mkdir(parents=True)
    (leaf / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    cg = RunCgroup("run-1-a", fs=v1)
    assert not cg.v2 and cg.parent == "/rpg-sandbox/run-1-a"
    assert cg.cpu_s() == 1.5 and cg.oom_kills("cid") == 2 and cg.oom_kills("other") == 0
    assert sorted(cg.folders()) == [
        v1 / "cpuacct" / "rpg-sandbox" / "run-1-a",
        v1 / "memory" / "rpg-sandbox" / "run-1-a",
    ]
    v2 = tmp_path / "v2"
    (v2 / "rpg-sandbox" / "run-1-a").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory pids\n")
    (v2 / "rpg-sandbox" / "run-1-a" / "cpu.stat").write_text(
        "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"
    )
    (v2 / "rpg-sandbox" / "run-1-a" / "memory.events").write_text("low 0\nhigh 0\noom_kill 1\n")
    cg2 = RunCgroup("run-1-a", fs=v2)
    assert cg2.v2 and cg2.cpu_s() == 2.5 and cg2.oom_kills("cid") == 1
    assert RunCgroup("run-9-z", fs=v2).cpu_s() is None  # no such cgroup: not measured


def test_the_loop_config_passes_its_docker_image_to_the_sandbox():
    pytest.importorskip("torch")  # the loop's backends load the estimator
    from rpg_llm.config import LoopConfig
    from rpg_llm.flags import flag_names
    from rpg_llm.loop.backends import default_backends

    assert flag_names(LoopConfig)["docker_image"] == "--docker-image"
    mine = default_backends(LoopConfig(sandbox="docker", docker_image="mine:2"))
    box = mine.make_sandbox("docker")
    assert isinstance(box, DockerSandbox) and box.image == "mine:2"
    default = default_backends(LoopConfig()).make_sandbox("docker")
    assert isinstance(default, DockerSandbox) and default.image == image_tag()
    with pytest.raises(ValueError, match=r"image \('mine:2'\) is for the docker sandbox, not"):
        mine.make_sandbox("bwrap")


# --- the engine: image, cleanup, sweep ------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    skip_unless("docker")
    return docker_client(timeout=60)


def _containers_of(client, run: str) -> list:
    return client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run}"})


def _mounts_under(folder: Path) -> list[str]:
    prefix = str(folder) + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return [ln.split()[4] for ln in fh if ln.split()[4].startswith(prefix)]


def test_a_second_build_does_nothing(client):
    lines: list[str] = []
    done = build_image(log=lines.append, client=client)
    assert done.tag == image_tag() and not done.built and done.seconds == 0.0
    assert done.size_bytes > 100e6  # python, numpy, pandas, scipy, scikit-learn
    assert len(lines) == 1 and lines[0].endswith(
        f"{image_tag()}: already on the engine, nothing to build"
    )
    labels = client.images.get(image_tag()).labels
    assert labels["rpg.sandbox.digest"] == image_tag().split(":")[1]
    assert "python3-sklearn=1." in labels["rpg.sandbox.packages"]


IMAGE_PROBE = """
import os, sys, numpy, pandas, scipy, sklearn
from sklearn.linear_model import LogisticRegression
x = numpy.arange(20.0).reshape(10, 2)
fit = LogisticRegression().fit(x, [0] * 5 + [1] * 5)
print(sys.version_info[:2], int(fit.score(x, [0] * 5 + [1] * 5)))
datasets = os.path.join(os.path.dirname(sklearn.__file__), "datasets")
print(sorted(n for n in ("data", "descr") if os.path.isdir(os.path.join(datasets, n))))
"""


def test_the_image_runs_the_allowed_libraries_and_holds_no_label_folder(client, tmp_path):
    res = make_test_sandbox("docker").run(IMAGE_PROBE, tmp_path, 600)
    try:
        assert res.status == "ok", res.stderr
        assert res.stdout.splitlines() == ["(3, 11) 1", "[]"]
    finally:
        res.cleanup()


TOUCH_1GIB = "b = bytearray(2**30)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"


def test_killed_timed_out_and_flooding_containers_leave_nothing_behind(client, tmp_path):
    root, data = tmp_path / "wd", tmp_path / "data"
    data.mkdir()
    box = make_test_sandbox("docker", workdir_root=root, tree_memory_bytes=300 * 2**20)
    volumes = sorted(v.name for v in client.volumes.list())
    cases = {
        "timeout": ("import time\ntime.sleep(600)\n", 3.0),
        "oom": (TOUCH_1GIB, 600.0),  # past the container's 300 MiB
        "error": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", 600.0),
    }
    for status, (code, limit) in cases.items():
        res = box.run(code, data, limit)
        try:
            assert res.status == status, (status, res.outcome_text)
            assert os.path.ismount(res.workdir)  # the capped tmpfs, read after the container
            assert _containers_of(client, res.workdir.name) == []
            assert RunCgroup(res.workdir.name).folders() == []
        finally:
            res.cleanup()
        assert not res.workdir.exists() and _mounts_under(root) == []
    assert sorted(v.name for v in client.volumes.list()) == volumes
    assert list(root.iterdir()) == []


HOST = """
import sys
from pathlib import Path
from rpg_llm.env.sandbox import SandboxLimits
from rpg_llm.env.sandbox.docker_backend import DockerSandbox
box = DockerSandbox(image=sys.argv[1], limits=SandboxLimits(workdir_root=Path(sys.argv[2])))
box.run("import time\\ntime.sleep(600)\\n", Path(sys.argv[3]), 600)
"""


def test_containers_of_a_killed_host_process_are_swept(client, tmp_path):
    root, data = tmp_path / "wd", tmp_path / "data"
    data.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, docker_image(), str(root), str(data)], env=env
    )
    try:
        end = time.monotonic() + 300
        running: list = []
        while not running and time.monotonic() < end and host.poll() is None:
            time.sleep(0.5)
            running = client.containers.list(filters={"label": f"{LABEL_PID}={host.pid}"})
        assert len(running) == 1, "the host process never started its container"
    finally:
        host.send_signal(signal.SIGKILL)  # the process this test started: nothing cleans up
        host.wait()
    run = running[0].labels[LABEL_RUN]
    assert _containers_of(client, run) and (root / run).is_dir() and RunCgroup(run).folders()
    assert remove_stale_containers(client, root) == [running[0].name]
    assert _containers_of(client, run) == []
    assert RunCgroup(run).folders() == []
    assert list(root.iterdir()) == [] and _mounts_under(root) == []


def test_a_missing_image_is_a_sandbox_error_that_leaves_nothing(client, tmp_path):
    box = DockerSandbox(
        image="rpg-sandbox:not-built-here", limits=SandboxLimits(workdir_root=tmp_path / "wd")
    )
    (tmp_path / "data").mkdir()
    with pytest.raises(SandboxError, match=r"'rpg-sandbox:not-built-here' is not on the engine"):
        box.run("print(1)\n", tmp_path / "data", 60)
    with pytest.raises(ValueError, match=r"working folders' root .*/wd lies inside input_dir"):
        box.run("print(1)\n", tmp_path, 60)
    assert list((tmp_path / "wd").iterdir()) == [] and _mounts_under(tmp_path / "wd") == []


def test_hidden_paths_inside_the_data_are_masked(client, tmp_path):
    data = tmp_path / "data"
    (data / "private").mkdir(parents=True)
    (data / "private" / "answers.csv").write_text("42\n")
    (data / "key.txt").write_text("secret\n")
    (data / "train.csv").write_text("x\n1\n")
    code = textwrap.dedent(
        """
        import os
        print(open("input/train.csv").read().split())
        print(os.listdir("input/private"), repr(open("input/key.txt").read()))
        """
    )
    box = make_test_sandbox("docker")
    res = box.run(code, data, 600, hide=[data / "private", data / "key.txt", tmp_path / "x"])
    try:
        assert res.status == "ok", res.stderr
        assert res.stdout.splitlines() == ["['x', '1']", "[] ''"]
    finally:
        res.cleanup()


def test_data_other_users_cannot_read_is_served_as_a_read_only_copy(client, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("x\n7\n")
    (data / "train.csv").chmod(0o600)  # uid 65534 could not read a bind mount of it
    code = (
        "import os\nprint(open('input/train.csv').read().split())\nos.remove('input/train.csv')\n"
    )
    res = make_test_sandbox("docker").run(code, data, 600)
    try:
        assert res.status == "error" and res.stdout.strip() == "['x', '7']", res.stderr
        assert res.outcome_text.startswith("OSError at line 3: [Errno 30] Read-only file system")
        assert (data / "train.csv").read_text() == "x\n7\n"
        assert not (res.workdir.parent / f"{res.workdir.name}.input").exists()  # copy removed
    finally:
        res.cleanup()
