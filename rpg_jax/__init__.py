"""rpg_jax: JAX theory and simulation for reward-rate policy gradient (continuous-time bandits).

Never imports torch. Enable float64 (``jax.config.update("jax_enable_x64", True)``) for exact
regret accumulation; entry points in ``paper_figures`` do so before any computation.
"""
