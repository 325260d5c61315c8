"""The learner: the policy model and how it is trained.

Owns loading a causal LM and sampling answers from it (``policy``), the PPO update with a value
head and a frozen reference (``ppo``, CleanRL-style, top to bottom), and the SFT warm start on
the task's baseline scripts (``sft``) with its on-disk memo (``sft_cache``).  Settings live in
:mod:`rpg_llm.config` (no torch there); the loop decides what to train on.
"""
