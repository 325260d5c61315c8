"""The NanoGPT speedrun task: environment, integrity guard, rewards, CPU stand-in.

Public API::

    NanoGPTTask, load_task, baseline_solutions, TASK_IDS          (task.py)
    NanoGPTOutcome, run_attempt, run_batch                        (env.py)
    rpg_reward, rate_reward, vanilla_reward                       (rewards.py)
    parse_val_lines, check_cadence                                (logparse.py)
    NanoGPTSettings, SPEEDRUN, cpu_settings                       (settings.py)
    check_speedrun_setup, budget_curve                            (speedrun.py)
"""

from rpg_llm.env.tasks.nanogpt.env import NanoGPTOutcome, run_attempt, run_batch
from rpg_llm.env.tasks.nanogpt.logparse import ValLine, check_cadence, parse_val_lines
from rpg_llm.env.tasks.nanogpt.rewards import rate_reward, rpg_reward, vanilla_reward
from rpg_llm.env.tasks.nanogpt.settings import SPEEDRUN, NanoGPTSettings, cpu_settings
from rpg_llm.env.tasks.nanogpt.speedrun import budget_curve, check_speedrun_setup, loss_chains
from rpg_llm.env.tasks.nanogpt.task import TASK_IDS, NanoGPTTask, baseline_solutions, load_task

__all__ = [
    "SPEEDRUN",
    "TASK_IDS",
    "NanoGPTOutcome",
    "NanoGPTSettings",
    "NanoGPTTask",
    "ValLine",
    "baseline_solutions",
    "budget_curve",
    "check_speedrun_setup",
    "loss_chains",
    "check_cadence",
    "cpu_settings",
    "load_task",
    "parse_val_lines",
    "rate_reward",
    "rpg_reward",
    "run_attempt",
    "run_batch",
    "vanilla_reward",
]
