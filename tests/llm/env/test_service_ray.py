"""The execution service on a real multi-node Ray cluster made on this machine
(``ray.cluster_utils.Cluster``: a head without CPUs and two grader nodes): jobs made, run and
graded on the nodes; a killed worker is an ``infra`` sample; a removed node's job is resubmitted
once; an address that does not answer is a usage error before anything starts."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from rpg_llm.env.service import (  # noqa: E402
    JobResources,
    JobSpec,
    RayService,
    TaskRef,
    check_ray_address,
)
from rpg_llm.run import main  # noqa: E402
from testkit.ray_cluster import grader_cluster  # noqa: E402
from testkit.toy_competition import ACCURACY, HANG, PERFECT, build_competition  # noqa: E402

GRADER = JobResources(num_cpus=1.0, custom={"grader": 1.0})


@pytest.fixture
def cluster():
    c = grader_cluster()
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


@pytest.fixture
def toy(tmp_path) -> JobSpec:
    """The toy accuracy competition under a data root every node reads (this machine's)."""
    root = tmp_path / "data"
    build_competition(root, "toy-acc", ACCURACY, lower=False)
    return JobSpec(TaskRef("toy-acc", data_root=str(root)), "subprocess", 120.0)


def _pid_script(path: Path, seconds: float) -> str:
    """A script that writes its pid to ``path``, sleeps ``seconds``, then solves the toy (the
    folder is made writable for the sandbox's private user)."""
    path.parent.chmod(0o777)
    write = f"open({str(path)!r}, 'w').write(str(os.getpid()))"
    return f"import os, time\ntry:\n    {write}\nexcept OSError:\n    pass\n" + (
        f"time.sleep({seconds})\n" + PERFECT
    )


def _wait_for(path: Path, timeout_s: float = 120.0) -> int:
    t0 = time.time()
    while not (path.exists() and path.read_text().strip()):
        if time.time() - t0 > timeout_s:
            raise AssertionError(f"{path} never written")
        time.sleep(0.2)
    return int(path.read_text())


def _ancestor(pid: int, match) -> psutil.Process:
    """The nearest ancestor of ``pid`` that ``match`` accepts."""
    for p in psutil.Process(pid).parents():
        if match(p):
            return p
    raise AssertionError(f"no matching ancestor of {pid}")


def test_jobs_run_and_are_graded_on_the_grader_nodes(cluster, toy):
    """The node makes the competition from its id and data root, runs each script and grades
    it: a perfect script scores 1.0, a script without a submission is invalid; the head (no
    CPU) runs nothing."""
    service = RayService(toy, GRADER, address=cluster.address)
    try:
        ok, bad = (f.result(timeout=300) for f in service.submit([PERFECT, "print('no file')"]))
    finally:
        service.close()
    assert (ok.status, ok.score, ok.valid) == ("ok", 1.0, True) and ok.delta > 0
    assert bad.status == "invalid" and "without writing submission.csv" in bad.outcome_text
    # a script that never ends is bounded on the node as on the host: the run's timeout
    short = RayService(replace(toy, timeout_s=3.0), GRADER, address=cluster.address)
    try:
        (hung,) = (f.result(timeout=300) for f in short.submit(["while True:\n    pass\n"]))
    finally:
        short.close()
    assert hung.status == "timeout" and 3.0 <= hung.delta < 60.0


@pytest.mark.cluster
def test_a_hung_grader_on_a_node_is_bounded_as_on_the_host(cluster, tmp_path):
    """A grader that never returns, on a competition that allows grading 3 s: the node's
    bounded grader ends it and the sample is invalid with the reason, as on the host."""
    root = tmp_path / "data"
    build_competition(root, "toy-hang", HANG, lower=False, grading_time_s=3.0)
    spec = JobSpec(TaskRef("toy-hang", data_root=str(root)), "subprocess", 120.0)
    service = RayService(spec, GRADER, address=cluster.address)
    try:
        t0 = time.time()
        (out,) = (f.result(timeout=300) for f in service.submit([PERFECT]))
    finally:
        service.close()
    assert out.status == "invalid" and "3 s" in out.outcome_text, out.outcome_text
    assert time.time() - t0 < 120


@pytest.mark.slow
@pytest.mark.cluster
def test_a_worker_killed_during_a_script_is_an_infra_sample(cluster, toy, tmp_path):
    """SIGKILL to the Ray worker running the job: the sample is ``infra`` (the machine failed,
    not the script), not resubmitted, and the service goes on."""
    service = RayService(toy, GRADER, address=cluster.address)
    try:
        pidfile = tmp_path / "pid"
        (future,) = service.submit([_pid_script(pidfile, 60)])
        script = _wait_for(pidfile)
        worker = _ancestor(script, _is_ray_worker)
        worker.kill()
        out = future.result(timeout=120)
        assert out.status == "infra" and "WorkerCrashedError" in out.outcome_text
        (again,) = service.submit([PERFECT])
        assert again.result(timeout=300).status == "ok"
    finally:
        service.close()


def _is_ray_worker(p: psutil.Process) -> bool:
    line = " ".join(p.cmdline())
    return "ray::" in line or "default_worker.py" in line


def _node_of(cluster: Cluster, pid: int):
    """The cluster node whose raylet is an ancestor of ``pid``."""
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in cluster.worker_nodes}
    node = _ancestor(pid, lambda p: p.pid in raylets)
    return raylets[node.pid]


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("resubmits", [1, 0])
def test_a_removed_nodes_job_is_resubmitted_once_then_infra(cluster, toy, tmp_path, resubmits):
    """The node running a job leaves the cluster: with one resubmission the job runs again on
    the other node and is graded (score 1.0); with none it is ``infra`` (NodeDiedError)."""
    service = RayService(toy, GRADER, address=cluster.address, resubmit_on_node_loss=resubmits)
    try:
        pidfile = tmp_path / "pid"
        (future,) = service.submit([_pid_script(pidfile, 20)])
        node = _node_of(cluster, _wait_for(pidfile))
        cluster.remove_node(node)
        out = future.result(timeout=300)
    finally:
        service.close()
    if resubmits:
        assert (out.status, out.score) == ("ok", 1.0)
    else:
        assert out.status == "infra" and "NodeDiedError" in out.outcome_text


def test_an_address_that_does_not_answer_is_a_usage_error_before_anything(tmp_path, capsys):
    with pytest.raises(ValueError, match="nothing answers there"):
        check_ray_address("127.0.0.1:1")
    with pytest.raises(ValueError, match="expected host:port"):
        check_ray_address("no-port")
    assert check_ray_address("local") is None
    out = tmp_path / "r"
    argv = ["--executor", "ray", "--ray-address", "127.0.0.1:1", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ray-address '127.0.0.1:1': nothing answers there" in err[0]
    assert not out.exists()
    assert main(["--ray-address", "127.0.0.1:1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--ray-address '127.0.0.1:1' applies to --executor ray only" in err


def test_job_resources_are_checked_and_become_ray_options():
    assert JobResources(1, 0, 16.0, {"grader": 1}).ray_options() == {
        "num_cpus": 1,
        "num_gpus": 0,
        "memory": 16 * 2**30,
        "resources": {"grader": 1},
    }
    with pytest.raises(ValueError, match="job resource num_gpus"):
        JobResources(num_gpus=-1)
    with pytest.raises(ValueError, match="some CPU, GPU or custom resource"):
        JobResources(num_cpus=0)


def test_a_competitions_grading_time_is_read_and_checked(tmp_path):
    """``grader.time_s`` of a config.yaml bounds its grading; a bad value names the file."""
    import yaml

    from rpg_llm.env.tasks import load_competition

    comp = build_competition(tmp_path, "toy-t", ACCURACY, lower=False, grading_time_s=2.5)
    assert load_competition("toy-t", tmp_path).grading_time_s == 2.5
    config = yaml.safe_load((comp / "config.yaml").read_text())
    config["grader"]["time_s"] = -1
    (comp / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match=r"config.yaml: grader.time_s must be seconds > 0, got -1"):
        load_competition("toy-t", tmp_path)
