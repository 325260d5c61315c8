"""tune_small CLI: usage errors exit 2 with one line naming the value, before anything runs."""

import pytest

from paper_figures import tune_small


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--seed-start", "0", "--seeds", "2"], "overlap the evaluation seeds"),
        (["--seed-start", "99", "--seeds", "5"], "99..103"),
        (["--c1-grid", "abc"], "--c1-grid"),
        (["--c1-grid", "-1", "--agents", "cucb-tuned"], "c1"),
        (["--lr-grid", "0"], "lr"),
        (["--agents", "ucb"], "'ucb'"),
        (["--envs", "E5"], "E5"),
    ],
)
def test_usage_errors_exit_2(argv, needle, capsys, tmp_path):
    assert tune_small.main([*argv, "--out", str(tmp_path / "h.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err
    assert not (tmp_path / "h.json").exists()
