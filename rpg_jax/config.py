"""JAX set-up shared by the entry points (figures, benchmarks): call before any JAX computation.

- float64 on (regret totals exact to far better than 1e-9 relative),
- on CPU, one JAX device per core so the seed axis is sharded over all cores
  (``jax_num_cpu_devices``; GPUs/TPUs are used as they are),
- a persistent compilation cache (``$RPG_JAX_CACHE`` or ``~/.cache/rpg/jax``), so a second run of
  a figure does not compile again.
"""

from __future__ import annotations

import os

import jax

__all__ = ["setup_jax"]


def setup_jax(x64: bool = True, cpu_devices: int | None = None) -> None:
    """Configure JAX for simulation runs (idempotent; must run before JAX initialises a backend).

    Args:
      x64: enable float64.
      cpu_devices: number of CPU devices to expose (default: ``os.cpu_count()``).
    """
    try:
        jax.config.update("jax_num_cpu_devices", int(cpu_devices or os.cpu_count() or 1))
    except RuntimeError:  # backend already initialised (e.g. inside tests): keep what is there
        pass
    jax.config.update("jax_enable_x64", x64)
    cache = os.environ.get("RPG_JAX_CACHE", os.path.expanduser("~/.cache/rpg/jax"))
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
