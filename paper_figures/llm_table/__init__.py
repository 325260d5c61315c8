"""The paper's MLE-Bench table in miniature: RPG vs vanilla on offline competitions.

``python -m paper_figures.llm_table [--quick] [--out DIR] [--tasks A,B,C] [--seeds 0,1] ...``
(``rpg-table``). What it does, in order:

1. Checks every flag (usage errors exit 2 with one line naming the flag and the value, before any
   run starts; rpg_core.cli).
2. For every task x arm (``--arms``, default ``rpg,vanilla``) x run seed, one run folder
   ``<out>/runs/<task>/<arm>-seed<k>`` made by ``python -m rpg_llm.run`` in a subprocess (so a
   crash of one run does not end the table; its output goes to ``<out>/logs/...``). Every run
   gets the same :class:`rpg_llm.config.LoopConfig` but its task, seed and the arm's reward
   settings (:data:`settings.ARMS`: ``rpg``, ``vanilla``, ``fixed-lambda`` at ``--fixed-lambda
   L``, by default :func:`settings.chosen_fixed_lambda`, and the ablation's ``rpg-raw-parents``
   and ``vanilla-rate-parents``): the same preset, model, training engine (``--engine``:
   ``ppo``, this project's PPO, or ``trl``, TRL's GRPOTrainer; named in the protocol and in an
   ``engine`` column), step cap, execution budget, batch, response cap, timeout and action
   format. Every ``rpg_llm.run`` settings flag is a flag of the table too (``--time wall``), or
   goes in ``--run-args``. A finished run is skipped; a killed or crashed one is resumed.
3. Writes the table, its CSVs and figures (:mod:`report`); with ``--probe N`` (default 4; 0
   with ``--quick``) every finished run is probed (:mod:`rpg_llm.probe`: the trained and the
   SFT-only policy answer the same fixed parents).

Modules, each owning one topic:

* :mod:`settings`: :class:`settings.TableSettings` (tasks, seeds, arms, fixed lambda, probe
  counts, and the run settings every run shares as one ``{dotted LoopConfig path: value}``
  mapping over a preset), the protocols :data:`settings.FULL` and :data:`settings.QUICK`, the
  arms, the tuning note and the tuning records.
* :mod:`stats`: the numbers: budgets, run values, mean +- s.e., % improvement, the trimmed
  average, ablation effects, the rows (:class:`stats.TaskRow`); the table's definitions.
* :mod:`plan`: the runs (:class:`plan.RunSpec`), the ``LoopConfig`` of each
  (``rpg_llm.launch.make_config`` once per task, then ``dataclasses.replace`` of the seed and
  the arm), the checks before any run (``rpg_llm.launch.plan`` once per task), each folder's
  state (``rpg_llm.launch.status``; another experiment refused by ``config_difference``) and
  the ``python -m rpg_llm.run --config FILE`` / ``--resume`` command lines.
* :mod:`runflags`: the run settings as flags of the table and of ``--run-args``.
* :mod:`jobs`: subprocesses, the scheduler of ``--jobs``, SIGTERM/SIGINT, warm tasks, probes.
* :mod:`runner`: one slice (the runs left, each probed when it finishes) and its ledger row
  (:mod:`paper_figures._slices`).
* :mod:`analysis`: what the finished runs did: per-step means, edits against their parents,
  probe rows, step time.
* :mod:`markdown`: the Markdown table, ablation and edits sections, protocol and settings text.
* :mod:`report`: ``write_table`` (the CSVs, ``llm_table.md``) and the figures.
* :mod:`cli`: the parser, the table's own checks, ``main``.
"""

from paper_figures.llm_table.cli import main
from paper_figures.llm_table.plan import RunSpec
from paper_figures.llm_table.settings import ARMS, FULL, METHODS, QUICK, RUN_RECORD, TableSettings
from paper_figures.llm_table.stats import (
    ablation_effects,
    common_final_budget,
    mean_se,
    pct_improvement,
    run_final_budget,
    run_value,
    task_row,
    trimmed_average,
)

__all__ = [
    "main",
    "RunSpec",
    "ARMS",
    "FULL",
    "METHODS",
    "QUICK",
    "RUN_RECORD",
    "TableSettings",
    "ablation_effects",
    "common_final_budget",
    "mean_se",
    "pct_improvement",
    "run_final_budget",
    "run_value",
    "task_row",
    "trimmed_average",
]
