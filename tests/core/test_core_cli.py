"""rpg_core.cli: the exit-status convention shared by every ``python -m`` entry point."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rpg_core.cli import ArgumentParser, UsageError, run_cli


def _parse(argv):
    p = ArgumentParser(prog="prog")
    p.add_argument("--steps", type=int, required=True)
    args = p.parse_args(argv)
    if not (args.steps >= 1):
        raise UsageError(f"--steps must be >= 1, got {args.steps}")
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
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == b"0"
    proc.stdout.close()  # the reader goes away, as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait() == 0
    assert err == ""


def test_the_shared_argument_types_name_the_flag_and_the_value(tmp_path, capsys):
    from rpg_core.cli import at_least, comma_list, out_folder

    def main(argv):
        p = ArgumentParser(prog="prog")
        p.add_argument("--seeds", type=comma_list(int, "integers"), default="0,1")
        p.add_argument("--grid", type=comma_list(float, "numbers"), default=None)
        args = p.parse_args(argv)
        at_least("--seeds", min(args.seeds), 0)
        print(args.seeds, args.grid)
        return 0

    assert run_cli("prog", main, []) == 0 and "[0, 1] None" in capsys.readouterr().out
    assert run_cli("prog", main, ["--grid", "0.1, 1e-2"]) == 0
    assert capsys.readouterr().out.strip() == "[0, 1] [0.1, 0.01]"
    for argv, message in (
        (["--seeds", "0,x"], "argument --seeds: not comma-separated integers: '0,x'"),
        (["--seeds", "0,,1"], "argument --seeds: give comma-separated integers, got '0,,1'"),
        (["--seeds", "2,2"], "argument --seeds: repeats a value: '2,2'"),
        (["--seeds=-1,2"], "--seeds must be >= 0, got -1"),
    ):
        assert run_cli("prog", main, argv) == 2
        assert capsys.readouterr().err.strip() == f"prog: error: {message}"
    (tmp_path / "file").write_text("x")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    assert out_folder("--out", str(tmp_path / "new")) == tmp_path / "new"
    for value, message in (
        ("", "--out '': an empty value; give a folder"),
        (str(tmp_path / "file"), f"--out {tmp_path / 'file'}: exists and is not a folder"),
    ):
        with pytest.raises(UsageError) as err:
            out_folder("--out", value)
        assert str(err.value) == message
    with pytest.raises(UsageError, match=r"already holds a run \(config.json\)"):
        out_folder("--out", str(tmp_path / "run"), holds="config.json")


def test_count_makes_the_noun_plural_except_for_one():
    from rpg_core.cli import count

    assert [count(n, "step") for n in (0, 1, 2, 10)] == ["0 steps", "1 step", "2 steps", "10 steps"]
