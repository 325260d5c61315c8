"""Shared test set-up: two CPU devices for sharding, float64, a persistent compilation cache."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

try:
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_enable_x64", True)
    jax.config.update(
        "jax_compilation_cache_dir",
        os.path.join(os.path.dirname(os.path.dirname(__file__)), ".jax_cache"),
    )
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
except ImportError:  # the torch-only install runs its own tests
    pass
