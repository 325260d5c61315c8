"""rpg_llm: torch side of RPG (estimator, buffer, sandbox, tasks, PPO, loop). Never imports jax."""
