"""The learner: the policy model and how it is trained.

Owns loading a causal LM and sampling answers from it (``policy``, ``models``), the PPO update
with a value head and a frozen reference (``ppo``, CleanRL-style, top to bottom; its maths as pure
functions in ``losses``, the ``[query | response]`` batch layout and the forward passes in
``forward``), the SFT warm start on the task's baseline scripts (``sft``) with its on-disk memo
(``sft_cache``), and the release of host memory after training on a CPU (``memory``). Settings
live in :mod:`rpg_llm.config` (no torch there); the loop decides what to train on.
"""
