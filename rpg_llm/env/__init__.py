"""The environment: everything an RL engine needs to turn a model's answer into (reward, delta).

Owns the tasks (``tasks``: offline competitions, MLE-Bench trees and the NanoGPT speedrun, with
their grading), the answer formats (``actions``: whole scripts or edits of a parent's constants),
the prompts (``prompts``), the sandbox (``sandbox``: subprocess, bubblewrap, docker; untrusted
output files; whole-tree limits) and one environment step (``execute``: run a script, grade its
submission, return an ``Outcome``).  ``grade`` is the command-line grader.  Nothing here imports
the learner or the loop: any engine (our PPO loop, TRL) can drive it.
"""
