"""``paper_figures.llm_table.stats``: the table's maths by hand, on the paper's published rows, and
a task's row from hand-made run folders."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from llm_table_fixtures import (
    HAND,
    HAND_BUDGET,
    HAND_PCT,
    HAND_RPG,
    HAND_RPG_SE,
    HAND_VAN,
    HAND_VAN_SE,
    make_run,
)

from paper_figures.llm_table import stats
from rpg_llm.loop.budget import Chain, read_chains


def test_mean_se_by_hand():
    mean, se, n = stats.mean_se([1.0, 2.0, 4.0])
    # mean 7/3; squared deviations 16/9 + 1/9 + 25/9 = 42/9; var (ddof 1) 7/3; se sqrt(7/3 / 3)
    assert (mean, n) == (pytest.approx(7 / 3), 3)
    assert se == pytest.approx(math.sqrt(7) / 3)
    mean, se, n = stats.mean_se([0.5, float("nan")])
    assert (mean, n) == (0.5, 1) and math.isnan(se)
    assert stats.mean_se([])[2] == 0 and math.isnan(stats.mean_se([])[0])


def test_pct_improvement_by_hand():
    assert stats.pct_improvement(0.6, 0.5) == pytest.approx(20.0)
    assert stats.pct_improvement(0.4, 0.5) == pytest.approx(-20.0)
    # raw reward may be negative (-10 for invalid): still positive when RPG is higher
    assert stats.pct_improvement(-1.0, -10.0) == pytest.approx(90.0)
    assert stats.pct_improvement(0.4, -0.5) == pytest.approx(180.0)
    assert stats.pct_improvement(0.259, 0.564, lower_is_better=True) == pytest.approx(
        100 * 0.305 / 0.564
    )
    assert math.isnan(stats.pct_improvement(0.3, 0.0))
    assert math.isnan(stats.pct_improvement(float("nan"), 0.3))


# The paper's table (RPG mean, vanilla mean, lower is better, % improv.) -- published numbers.
PAPER_ROWS = [
    ("ranzcr-clip", 0.089, 0.014, False, 530.5),
    ("aptos2019", 0.564, 0.315, False, 78.9),
    ("mlsp-birds", 0.333, 0.226, False, 46.9),
    ("siim-isic", 0.660, 0.456, False, 44.8),
    ("textnorm-en", 0.880, 0.714, False, 23.2),
    ("textnorm-ru", 0.889, 0.730, False, 21.7),
    ("tabular-2021", 0.907, 0.778, False, 16.5),
    ("insults", 0.834, 0.761, False, 9.6),
    ("jigsaw-toxic", 0.948, 0.868, False, 9.2),
    ("histopathologic", 0.594, 0.554, False, 7.2),
    ("aerial-cactus", 0.954, 0.893, False, 6.8),
    ("plant-pathology", 0.526, 0.498, False, 5.6),
    ("pizza", 0.760, 0.728, False, 4.4),
    ("tabular-2022", 0.840, 0.806, False, 4.2),
    ("whale", 0.493, 0.749, False, -34.2),
    ("leaf-classif", 0.259, 0.564, True, 54.0),
    ("spooky-author", 0.440, 0.690, True, 36.2),
    ("nyc-taxi", 4.309, 5.349, True, 19.4),
    ("dog-breed", 4.786, 4.924, True, 2.8),
    ("dogs-vs-cats", 0.688, 0.703, True, 2.1),
    ("nomad2018", 0.064, 0.064, True, 0.3),
    ("denoising-docs", 0.094, 0.085, True, -10.1),
]


@pytest.mark.parametrize("name, rpg, van, lower, pct", PAPER_ROWS)
def test_pct_improvement_reproduces_the_papers_rows(name, rpg, van, lower, pct):
    # the table prints 3 decimals: allow the rounding of both means (half a unit of the last digit)
    half = 0.0005
    lo = min(stats.pct_improvement(r, v, lower) for r in (rpg - half, rpg + half)
             for v in (van - half, van + half))  # fmt: skip
    hi = max(stats.pct_improvement(r, v, lower) for r in (rpg - half, rpg + half)
             for v in (van - half, van + half))  # fmt: skip
    assert lo - 0.05 <= pct <= hi + 0.05, name
    # the wrong direction gives the wrong sign for every row with a clear winner
    if abs(pct) > 1:
        assert np.sign(stats.pct_improvement(rpg, van, not lower)) != np.sign(pct), name


def test_trimmed_average_reproduces_the_papers_19_2():
    avg, dropped = stats.trimmed_average([r[4] for r in PAPER_ROWS])
    assert avg == pytest.approx(19.2, abs=0.05)  # "RPG performs 19.2% better ... after dropping"
    assert [PAPER_ROWS[i][0] for i in dropped] == ["ranzcr-clip", "whale"]
    assert stats.trimmed_average([r[4] for r in PAPER_ROWS])[0] != pytest.approx(
        np.mean([r[4] for r in PAPER_ROWS]), abs=0.05
    )


def test_trimmed_average_by_hand():
    assert stats.trimmed_average([10.0, -5.0, 3.0, 7.0]) == (5.0, [0, 1])
    assert stats.trimmed_average([1.0, 1.0, 1.0])[0] == 1.0
    assert stats.trimmed_average([2.0, 4.0]) == (3.0, [])  # fewer than 3: plain mean
    avg, dropped = stats.trimmed_average([float("nan"), 9.0, 1.0, 2.0])
    assert (avg, dropped) == (2.0, [1, 2])
    assert math.isnan(stats.trimmed_average([float("nan")])[0])


def test_common_final_budget_by_hand():
    def ch(*t):
        return Chain("x", np.cumsum(t), np.zeros(len(t)))

    # min T_run wins: runs end at 5 and 9 s, first samples at most 2 s
    assert stats.common_final_budget([[ch(1, 4), ch(2, 1)], [ch(1, 8)]]) == 5.0
    # a chain's first sample (7 s) is later than the shortest run's end (3 s): raised to 7
    assert stats.common_final_budget([[ch(1, 2)], [ch(7, 1), ch(1)]]) == 7.0
    with pytest.raises(ValueError):
        stats.common_final_budget([])


def test_task_row_on_hand_made_runs(tmp_path: Path):
    runs: dict[str, dict[int, list]] = {"rpg": {}, "vanilla": {}}
    for (m, k), rows in HAND.items():
        make_run(tmp_path / f"{m}{k}", {"method": m, "task": "churn-auc"}, rows)
        runs[m][k] = read_chains(tmp_path / f"{m}{k}")
    row = stats.task_row("churn-auc", runs)
    assert row.budget_s == HAND_BUDGET
    assert row.arms["rpg"][0] == pytest.approx(HAND_RPG)
    assert row.arms["rpg"][1] == pytest.approx(HAND_RPG_SE)
    assert row.arms["vanilla"][:2] == (pytest.approx(HAND_VAN), pytest.approx(HAND_VAN_SE))
    assert row.pct == pytest.approx(HAND_PCT)
    assert all(r["n_chains"] == 2 for r in row.runs)  # every chain has a value at B
    with pytest.raises(ValueError, match="no finished rpg run"):
        stats.task_row("churn-auc", {"rpg": {}, "vanilla": {0: []}}, arms=("rpg", "vanilla"))


def test_ablation_effects_by_hand():
    means = {"rpg": 0.8, "rpg-raw-parents": 0.6, "vanilla-rate-parents": 0.5, "vanilla": 0.4}
    arms = {a: (v, 0.0, 2) for a, v in means.items()}
    eff = stats.ablation_effects(arms)
    assert eff is not None
    assert eff["parents"] == pytest.approx(((0.8 - 0.6) + (0.5 - 0.4)) / 2)
    assert eff["learning"] == pytest.approx(((0.8 - 0.5) + (0.6 - 0.4)) / 2)
    assert eff["interaction"] == pytest.approx((0.8 - 0.6) - (0.5 - 0.4))
    assert stats.ablation_effects({"rpg": (0.8, 0.0, 2), "vanilla": (0.4, 0.0, 2)}) is None
