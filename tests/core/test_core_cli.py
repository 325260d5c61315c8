"""rpg_core.cli: the exit-status convention shared by every ``python -m`` entry point."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rpg_core.cli import ArgumentParser, UsageError, run_cli, usage_check


def _parse(argv):
    p = ArgumentParser(prog="prog")
    p.add_argument("--steps", type=int, required=True)
    args = p.parse_args(argv)
    usage_check(args.steps >= 1, f"--steps must be >= 1, got {args.steps}")
    return 0


@pytest.mark.parametrize(
    ("argv", "status", "needle"),
    [
        (["--steps", "3"], 0, None),
        (["--steps", "0"], 2, "prog: error: --steps must be >= 1, got 0"),
        (["--steps", "x"], 2, "prog: error: argument --steps: invalid int value: 'x'"),
        (["--bogus"], 2, "prog: error: the following arguments are required: --steps"),
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, argv, status, needle):
    assert run_cli("prog", _parse, argv) == status
    err = capsys.readouterr().err
    if needle is None:
        assert err == ""
    else:
        assert err.strip() == needle
        assert err.count("\n") == 1


def test_other_failures_exit_1_with_one_line_and_no_traceback(capsys):
    def boom(_argv):
        raise RuntimeError("disk\nfull")

    assert run_cli("prog", boom, []) == 1
    err = capsys.readouterr().err
    assert err == "prog: RuntimeError: disk full\n"


def test_help_exits_0_and_interrupt_exits_130(capsys):
    assert run_cli("prog", _parse, ["--help"]) == 0
    assert "--steps" in capsys.readouterr().out

    def interrupted(_argv):
        raise KeyboardInterrupt

    assert run_cli("prog", interrupted, []) == 130


def test_usage_error_is_a_value_error():
    assert issubclass(UsageError, ValueError)


def test_closed_pipe_ends_quietly_with_status_0():
    code = textwrap.dedent(
        """
        import sys
        from rpg_core.cli import run_cli
        def main(_argv):
            for i in range(10**6):
                print(i)
            return 0
        sys.exit(run_cli("prog", main, []))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout.readline().strip() == b"0"
    proc.stdout.close()  # the reader goes away, as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait() == 0
    assert err == ""
