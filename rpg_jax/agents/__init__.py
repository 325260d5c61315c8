"""Bandit agents: NPG-NIW, SPG-NIW and C-UCB as pure functions over explicit state."""
