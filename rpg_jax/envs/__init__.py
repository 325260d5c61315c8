"""Contextual continuous-time bandit environments (DESIGN.md section 3).

Build an instance in NumPy (``make_reference_env``, ``make_custom_env``, ``permute_env``,
``make_trial_params``); sample from it in JAX (``sample_context``, ``sample_outcome``).
"""

from rpg_jax.envs.params import (
    NOISE_MODELS,
    EnvParams,
    as_dtype,
    clipped_lognormal_mean,
    clipped_normal_mean,
    expected_outcomes,
    make_custom_env,
    permute_env,
)
from rpg_jax.envs.reference import (
    BASE_ARMS,
    COUPLING_ARMS,
    ENV_NAMES,
    SKIP_OUTCOME,
    context_scales,
    make_reference_env,
    make_trial_params,
    reference_means,
    reference_seed,
)
from rpg_jax.envs.sampling import correlated_normals, sample_context, sample_outcome

__all__ = [
    "BASE_ARMS",
    "COUPLING_ARMS",
    "ENV_NAMES",
    "NOISE_MODELS",
    "SKIP_OUTCOME",
    "EnvParams",
    "as_dtype",
    "clipped_lognormal_mean",
    "clipped_normal_mean",
    "context_scales",
    "correlated_normals",
    "expected_outcomes",
    "make_custom_env",
    "make_reference_env",
    "make_trial_params",
    "permute_env",
    "reference_means",
    "reference_seed",
    "sample_context",
    "sample_outcome",
]
