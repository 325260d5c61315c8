"""Outside training engines driven by RPG: the relative reward as a plug-in.

RPG needs only a reward-rate estimator and the relative reward ``r - rho_hat * delta`` (paper,
section 4), so any RL engine that takes a reward function can train on it. This folder owns
the adapters: :mod:`rpg_llm.engines.trl` (TRL's ``GRPOTrainer``: vLLM generation,
accelerate / DeepSpeed / FSDP, multi-GPU launch). They reuse the environment
(:mod:`rpg_llm.env`) and the loop's durable state (:mod:`rpg_llm.loop`: buffer, run folder,
estimator, rewards) unchanged; our own PPO (:mod:`rpg_llm.learner.ppo`) stays the paper-faithful
engine.
"""
