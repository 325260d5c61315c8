"""The bandit figure's reference protocol: settings, grids, seeds, cells, agents, hyper-parameters.

Facts from DESIGN.md section 3 (environments, protocol) and section 5 ("Reference protocol"):

- small setting: K in {5, 10, 20, 30}, |X| = 4; large setting: K in {70, 100, 130, 160} x
  |X| in {8, 16, 32, 64}; environments E1-E4; n = 30,000 decisions.
- tuning on trials 900-929, evaluation on trials 0-99; per (env, K, |X|) cell and per agent the
  grid point with the lowest median final regret R_n is kept.
- grids: PG lr {0.03, 0.1, 0.3, 1, 3} x age bound {60, 125, ..., 32000}; C-UCB tuned c1 in
  logspace(-2, 2, 5) x c2 in logspace(-4, 0, 5); large setting: lr adds 10, the age bound grid
  ends at 4000, c2 adds 0. C-UCB theory has nothing to tune.
- C-UCB enumerates all (K+1)^|X| policies for |X| = 4 and samples M = 2,048 policies per decision
  for |X| > 4 (the paper's "2048 policies are drawn uniformly at random from past visited ones").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from rpg_core.cli import UsageError

__all__ = [
    "ENVS",
    "EVAL_SEEDS",
    "N_STEPS",
    "SETTINGS",
    "TUNABLE",
    "PAPER_TUNABLE",
    "ESTIMATOR_AGENTS",
    "TUNE_SEEDS",
    "Cell",
    "Setting",
    "build_agent",
    "check_trials",
    "load_json",
    "parse_cells",
    "resolve_hyper",
]

HERE = Path(__file__).parent
ENVS = ("E1", "E2", "E3", "E4")
EVAL_SEEDS = range(0, 100)
TUNE_SEEDS = range(900, 930)
N_STEPS = 30_000
MIN_CONTEXTS = 4  # the reference layout has 4 fixed contexts (rpg_jax.envs.reference)
MAX_SEED = 2**32 - 1  # the simulator's seeds are uint32 (rpg_jax.simulate.simulate)
SAMPLED_POLICIES = 2048
PAPER_TUNABLE = ("npg-niw", "spg-niw", "cucb-tuned")  # the paper's tuned agents (tune's default)
TUNABLE = (
    *PAPER_TUNABLE,
    "npg-niw-mean",
    "npg-rm",
    "npg-learned",
)  # + NPG with the other rate estimators
# NPG by reward-rate estimator (rpg_jax.agents.registry.ESTIMATOR_AGENTS, without importing JAX)
ESTIMATOR_AGENTS = {
    "niw": "npg-niw",
    "niw-mean": "npg-niw-mean",
    "robbins-monro": "npg-rm",
    "learned": "npg-learned",
}

_PG_SMALL = {
    "lr": (0.03, 0.1, 0.3, 1.0, 3.0),
    "age_bound": (60.0, 125.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0, 8000.0, 16000.0, 32000.0),
}
_PG_LARGE = {
    "lr": (0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
    "age_bound": (60.0, 125.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0),
}
_C1 = (0.01, 0.1, 1.0, 10.0, 100.0)  # logspace(-2, 2, 5)
_C2 = (0.0001, 0.001, 0.01, 0.1, 1.0)  # logspace(-4, 0, 5)


@dataclass(frozen=True)
class Setting:
    """One setting of the figure: its cells and the grids of its tuning protocol."""

    name: str
    arms: tuple[int, ...]
    contexts: tuple[int, ...]
    grids: Mapping[str, Mapping[str, tuple[float, ...]]]

    @property
    def tuned_file(self) -> Path:
        """Where ``python -m paper_figures.tune`` stores this setting's results."""
        return HERE / f"tuned_{self.name}.json"


SETTINGS = {
    "small": Setting(
        "small",
        (5, 10, 20, 30),
        (4,),
        {
            **dict.fromkeys(
                ("npg-niw", "spg-niw", "npg-niw-mean", "npg-rm", "npg-learned"), _PG_SMALL
            ),
            "cucb-tuned": {"c1": _C1, "c2": _C2},
        },
    ),
    "large": Setting(
        "large",
        (70, 100, 130, 160),
        (8, 16, 32, 64),
        {
            # not npg-learned: its labelled slots are S * |X| * A * 4 floats per lane
            **dict.fromkeys(("npg-niw", "spg-niw", "npg-niw-mean", "npg-rm"), _PG_LARGE),
            "cucb-tuned": {"c1": _C1, "c2": (0.0, *_C2)},
        },
    ),
}


class Cell(NamedTuple):
    """One (environment, number of arms K, number of contexts |X|) cell of the figure."""

    env: str
    K: int
    contexts: int

    @property
    def key(self) -> str:
        """``"ENV:K:X"``, the cell's key in the tuned-results JSON."""
        return f"{self.env}:{self.K}:{self.contexts}"


def check_env(name: str, flag: str) -> str:
    """Upper-cased environment name, or :class:`UsageError` naming ``flag`` and the value."""
    if name.strip().upper() not in ENVS:
        raise UsageError(f"{flag}: unknown environment {name!r}; valid: {', '.join(ENVS)}")
    return name.strip().upper()


def check_trials(seed_start: int, seeds: int) -> range:
    """The trials ``seed_start .. seed_start + seeds - 1`` of ``--seed-start`` / ``--seeds``.

    Returns:
      ``range(seed_start, seed_start + seeds)``.

    Raises:
      UsageError: naming the flag and the value: ``--seeds < 1``, ``--seed-start < 0``, or a
        last trial above ``MAX_SEED = 2**32 - 1`` (the simulator takes uint32 seeds).
    """
    if seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {seeds}")
    if seed_start < 0:
        raise UsageError(f"--seed-start must be >= 0, got {seed_start}")
    last = seed_start + seeds - 1
    if last > MAX_SEED:
        raise UsageError(
            f"--seed-start/--seeds: trials {seed_start}..{last} go past the largest seed "
            f"{MAX_SEED} (seeds are uint32)"
        )
    return range(seed_start, last + 1)


def check_contexts(x: int, flag: str) -> int:
    """``x`` if the reference environments can take it (>= 4 contexts), else UsageError."""
    if x < MIN_CONTEXTS:
        raise UsageError(f"{flag} {x}: the reference environments need >= {MIN_CONTEXTS} contexts")
    return x


def parse_cells(text: str, setting: Setting, flag: str = "--cells") -> list[Cell]:
    """Parse ``ENV:K[:X],...`` (``ENV:K`` = every context count of ``setting``).

    Raises:
      UsageError: a malformed item, an unknown environment, K < 2, X < 4, or a repeated cell.
    """
    cells: list[Cell] = []
    for item in (s.strip() for s in text.split(",")):
        parts = item.split(":")
        if len(parts) in (2, 3):
            env = check_env(parts[0], flag)  # a UsageError of its own: not caught below
        try:
            if len(parts) not in (2, 3):
                raise ValueError
            k = int(parts[1])
            xs = (int(parts[2]),) if len(parts) == 3 else setting.contexts
        except ValueError:
            raise UsageError(f"{flag}: expected ENV:K or ENV:K:X, got {item!r}") from None
        if k < 2:  # as regret_vs_arms --arms
            raise UsageError(f"{flag}: K must be >= 2 (one arm has no regret), got {item!r}")
        cells += [Cell(env, k, check_contexts(x, flag)) for x in xs]
    if len(set(cells)) != len(cells):
        raise UsageError(f"{flag} repeats a cell: {text!r}")
    return cells


def build_agent(
    name: str, cell: Cell, hyper: Mapping[str, float] | None, rbar: Any = None, dbar: Any = None
):
    """Agent ``name`` for ``cell`` (``A = K + 1`` actions incl. SKIP), as ``make_agent`` returns it.

    C-UCB (tuned or theory) enumerates all policies for |X| <= 4 and samples
    ``SAMPLED_POLICIES`` policies per decision for |X| > 4 (DESIGN.md section 5); the theory
    constants come from the unpermuted means ``rbar, dbar`` ``(C, K + 1)`` and the theory agent is
    the tuned agent's code with those constants (so both share one compilation).

    Returns:
      ``(agent, hyper_tuple, used)`` (``rpg_jax.agents.registry.make_agent``).

    Raises:
      ValueError: as ``make_agent`` (bad or missing hyper-parameters, missing means).
    """
    from rpg_jax.agents.cucb import theory_constants
    from rpg_jax.agents.registry import make_agent

    if name == "cucb-theory":
        if rbar is None or dbar is None:
            raise ValueError("agent 'cucb-theory' needs the true means rbar, dbar")
        c = theory_constants(rbar, dbar)
        name, hyper = "cucb-tuned", {"c1": c.c1, "c2": c.c2}  # same code: one compilation
    if name == "cucb-tuned" and cell.contexts > MIN_CONTEXTS:
        name = "cucb-sampled"
    return make_agent(name, cell.contexts, cell.K + 1, hyper)


def load_json(path: Path, flag: str, required: Sequence[str]) -> dict:
    """Read a JSON object holding the keys ``required``, or UsageError naming ``flag`` and path."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"{flag}: file not found: {path}") from None
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(f"{flag} {path}: not a JSON file ({err})") from None
    missing = [k for k in required if not isinstance(data, dict) or k not in data]
    if missing:
        raise UsageError(f"{flag} {path}: missing {missing}")
    return data


def resolve_hyper(
    name: str, cell: Cell, tuned: Mapping | None, one_setting: Mapping, one_setting_path: Path
) -> tuple[dict | None, str]:
    """Hyper-parameters of ``name`` in ``cell`` and where they come from.

    The cell's tuned point when the tuned-results file has one (``tuned["cells"][cell.key]``),
    else the one-setting table (``hyper_small.json``'s ``"agents"``).

    Returns:
      ``(hyper or None for cucb-theory, source)``; ``source`` is ``"theory"``,
      ``"tuned:<file>"`` (with ``" (reduced protocol: ...)"`` appended when the file was not
      tuned at n = 30,000 on trials 900-929) or ``"one-setting:<file>"``.
    """
    if name == "cucb-theory":
        return None, "theory"
    entry = ((tuned or {}).get("cells", {}).get(cell.key) or {}).get(name)
    if tuned is not None and entry is not None:
        source = f"tuned:{tuned['_path'].name}"
        proto = tuned.get("protocol", {})
        seeds = [TUNE_SEEDS.start, TUNE_SEEDS.stop - 1]
        if proto.get("n_steps") != N_STEPS or proto.get("seeds") != seeds:
            source += f" (reduced protocol: n={proto.get('n_steps')}, trials {proto.get('seeds')})"
        return dict(entry["best"]), source
    if name not in one_setting:
        raise UsageError(f"--hyper {one_setting_path}: no hyper-parameters for agent {name!r}")
    return dict(one_setting[name]), f"one-setting:{one_setting_path.name}"
