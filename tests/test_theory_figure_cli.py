"""Theory figure CLIs: bad --seed or --out exit 2 with one line naming the value."""

import pytest

from paper_figures import dinkelbach_band, npg_rate


@pytest.mark.parametrize("module", [dinkelbach_band, npg_rate])
@pytest.mark.parametrize(
    "argv, needle", [(["--seed", "-1"], "-1"), (["--out", __file__], "not a folder")]
)
def test_theory_figure_usage_errors(module, argv, needle, capsys):
    assert module.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err
