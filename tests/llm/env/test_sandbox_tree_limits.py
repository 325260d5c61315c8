"""The whole process tree of one execution: its memory is capped, and the CPU seconds of a run
killed for a limit are counted (rpg_llm.env.sandbox.tree and the watchdog of process.run_limited;
under docker the container's memory cgroup and its cgroup parent's CPU account).

No assertion depends on how fast the machine is: the children hold their memory until killed
(sleep 600 s), and the busy loop reports its own CPU seconds so the sandbox's count is compared
with what the script itself measured.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from rpg_llm.env.sandbox import make_sandbox
from rpg_llm.env.sandbox.base import MEMORY_KILL
from rpg_llm.env.sandbox.tree import tree_pids, tree_usage
from testkit.sandboxes import KINDS, make_test_sandbox

pytestmark = pytest.mark.timeout(900)
MiB = 1 << 20

FORK_FOUR = """
import os, time
for i in range(4):
    if os.fork() == 0:
        block = bytearray(150 * 2**20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        print("child", i, "holds its memory", flush=True)
        time.sleep(600)
        os._exit(0)
time.sleep(600)
"""

BUSY = """
import time
last = time.monotonic()
while True:
    now = time.monotonic()
    if now - last > 0.05:
        print(time.process_time(), flush=True)
        last = now
"""


def test_tree_usage_counts_children_and_their_memory():
    code = "import time\nb = bytearray(64 * 2**20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
    code += "print('ready', flush=True)\ntime.sleep(600)\n"
    parent = subprocess.Popen(
        ["/bin/sh", "-c", f'{sys.executable} -c "{code}" & wait'],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        pids = tree_pids(parent.pid)
        assert pids[0] == parent.pid and len(pids) == 2  # the shell and its python child
        usage = tree_usage(parent.pid)
        assert usage.processes == 2 and usage.rss_bytes > 64 * MiB
        own = tree_usage(os.getpid())
        assert own.processes >= 3 and own.rss_bytes > usage.rss_bytes  # this process is above
    finally:
        for pid in reversed(tree_pids(parent.pid)):
            os.kill(pid, 9)  # positive pids: the processes this test started
        parent.wait()
    assert tree_pids(parent.pid) == []


@pytest.mark.parametrize("kind", KINDS)
def test_the_whole_tree_is_killed_past_its_memory_limit(kind, tmp_path):
    box = make_test_sandbox(kind, memory_bytes=1024 * MiB, tree_memory_bytes=400 * MiB, nproc=64)
    t0 = time.monotonic()
    res = box.run(FORK_FOUR, tmp_path, 600)
    try:
        assert res.status == "oom", (res.outcome_text, res.stderr)
        assert res.outcome_text.startswith(MEMORY_KILL)
        assert "limit 419430400" in res.outcome_text
        if kind == "docker":  # the container's memory cgroup: the kernel ended one, we the rest
            assert "the kernel ended a process of the container" in res.outcome_text
        else:
            m = re.search(r": (\d+) processes held (\d+) bytes", res.outcome_text)
            assert m is not None and int(m[2]) > 400 * MiB
            assert int(m[1]) >= 3  # the script and at least two children: no one process was over
        assert time.monotonic() - t0 < 300  # killed, not left to its 600 s
    finally:
        res.cleanup()


@pytest.mark.parametrize("kind", KINDS)
def test_cpu_seconds_of_a_killed_busy_loop_are_counted(kind, tmp_path):
    res = make_test_sandbox(kind).run(BUSY, tmp_path, 3.0)
    try:
        assert res.status == "timeout"
        own = [float(x) for x in res.stdout.split()]
        assert own and own[-1] > 0
        assert res.cpu_s is not None
        # at least what the script measured of itself before it was killed; at most its wall
        # time on every core
        assert own[-1] - 0.02 <= res.cpu_s <= res.delta * (os.cpu_count() or 1) + 0.5
    finally:
        res.cleanup()


def test_a_bad_tree_limit_is_refused():
    with pytest.raises(ValueError, match="tree_memory_bytes must be a positive int"):
        make_sandbox("subprocess", tree_memory_bytes=0)
