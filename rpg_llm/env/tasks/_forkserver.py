"""Fork server that runs many short solution scripts with the scientific stack imported once.

Run as a plain file (``python _forkserver.py``, so no package is imported) with a JSON request on
stdin::

    {"preload": ["numpy", ...], "workers": 2, "timeout_s": 300,
     "jobs": [{"workdir": "/abs/dir", "env": {"NAME": "value"}}, ...]}

It imports the ``preload`` modules (missing ones are skipped), then for each job forks a child that
changes into ``workdir``, updates the environment, sends its stdout / stderr to ``stdout.txt`` /
``stderr.txt`` there, arms ``SIGALRM`` after ``timeout_s`` and runs ``workdir/solution.py`` as
``__main__`` (``runpy.run_path``). At most ``workers`` children run at once. It prints one JSON
list on stdout: ``[{"rc": int, "seconds": float}, ...]`` in job order, ``rc`` as
``os.waitstatus_to_exitcode`` gives it (negative: killed by that signal), ``seconds`` the child's
wall time from fork to exit. A ladder of about sixty one-second scripts thus avoids sixty imports
of pandas and scikit-learn (about 2 s of CPU each).
"""

import importlib
import json
import os
import runpy
import signal
import sys
import time
import traceback


def _child(job: dict, timeout_s: float) -> None:
    code = 1
    try:
        os.chdir(job["workdir"])
        os.environ.update(job["env"])
        out = os.open("stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open("stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.argv = ["solution.py"]
        sys.path.insert(0, job["workdir"])
        signal.alarm(max(1, int(timeout_s + 0.999)))
        runpy.run_path("solution.py", run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report any failure of the script as rc 1
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    request = json.load(sys.stdin)
    for name in request.get("preload", []):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    jobs = request["jobs"]
    workers = max(1, int(request.get("workers", 1)))
    timeout_s = float(request.get("timeout_s", 300.0))
    results: list = [None] * len(jobs)
    running: dict = {}
    queue = list(range(len(jobs)))
    while queue or running:
        while queue and len(running) < workers:
            index = queue.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            start = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                _child(jobs[index], timeout_s)
            running[pid] = (index, start)
        pid, status = os.wait()
        if pid in running:
            index, start = running.pop(pid)
            results[index] = {
                "rc": os.waitstatus_to_exitcode(status),
                "seconds": time.perf_counter() - start,
            }
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
