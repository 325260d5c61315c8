"""The environment: everything an RL engine needs to turn a model's answer into (reward, delta).

Owns the tasks (``tasks``: offline competitions, MLE-Bench trees and the NanoGPT speedrun, with
their running and grading), the registry that maps a task id to its kind (``registry``,
``kinds``: what a task answers by its id, and ``make_task``), the seams (``types``, ``outcome``:
the ``Outcome`` of one step), the answer formats (``actions``: whole scripts or edits of a
parent's constants), the prompts (``prompts``) and the sandbox (``sandbox``: subprocess,
bubblewrap, docker; untrusted output files; whole-tree limits).  ``execute`` and ``grade`` are
the command lines of one step and of the grader.  Nothing here imports
the learner or the loop: any engine (our PPO loop, TRL) can drive it.
"""
