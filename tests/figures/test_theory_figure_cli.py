"""Theory figure CLIs: bad --seed, --steps, --out or an unknown flag exit 2 with one line naming
the value (rpg_core.cli convention), before anything is written."""

import pytest

from paper_figures import dinkelbach_band, npg_rate


@pytest.mark.parametrize("module", [dinkelbach_band, npg_rate])
@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--seed", "-1"], "-1"),
        (["--out", __file__], "not a folder"),
        (["--steps", "0"], "--steps"),
        (["--steps", "ten"], "'ten'"),
        (["--colour", "red"], "--colour"),
    ],
)
def test_theory_figure_usage_errors(module, argv, needle, capsys):
    assert module.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err and err.startswith(module.PROG)


def test_npg_rate_steps_below_the_fit_window_exit_2(capsys, tmp_path):
    assert npg_rate.main(["--steps", "199", "--out", str(tmp_path / "o")]) == 2
    assert "got 199" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
