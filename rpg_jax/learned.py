"""Learned reward-rate estimator, JAX backend: a small network and Dinkelbach iterations.

The third family of ``f_rho`` (the paper, section 3: the estimator "can be anything ... such as
Bayesian inference, Robbins-Monro iteration, or neural networks"). It is fed the samples the NIW
estimator is fed -- the greedy samples in the non-empty slots, with the same ages and resets
(DESIGN.md section 5) -- and, besides, the context and action of each, which NIW ignores:
``cells[x, a] = (count, reward sum, log-time sum, squared log-time sum)`` over those samples
(``rpg_jax.agents.npg`` keeps the labelled slots when the estimator is
:attr:`LearnedEstimator.labelled`), and how often each context was seen at all.

Each refit:

1. fits :class:`RateNet` (a one-hidden-layer MLP, flax; inputs the one-hot context and action,
   outputs a cell's mean reward, mean log time and variance of log time, each as a pooled centre
   plus a scaled residual) by ``steps`` Adam steps (optax) from the previous refit's parameters,
   on the count-weighted squared error against the cells' sample moments;
2. turns them into a mean time per cell as for a log-normal time:
   ``dbar(x, a) = exp(m_log + max(v_log, 0) / 2)`` (a fixed time, variance 0, is its own mean);
3. runs ``iterations`` Dinkelbach iterations (Dinkelbach 1967; ``rpg_jax.dinkelbach``) on the
   predicted means over the observed cells, each context weighted by how often it was seen
   (every decision, fed or not: the empirical ``p(x)``), from the pooled rate of the slots:
   ``a_x = argmax_{a observed in x} rbar - rho dbar``, ``rho = sum_x p_x rbar(x, a_x) /
   sum_x p_x dbar(x, a_x)``;
4. ``rho_hat = max(0, rho)``.

The rate is the best over the deterministic policies that use observed cells only, under the
network's predictions: with the greedy feeding the cells hold mostly the greedy action of each
context, so it is close to the greedy policy's rate, and where a context has several observed
cells it leans optimistic (a max over noisy predictions). Every function is pure and
``jit``/``vmap``-able; the random key of the contract is accepted and unused (the network's
initial parameters come from a fixed key, so seeds differ only by their data). The labelled
slots cost ``S * C * A * 4`` floats per seed, so the agent is for the small setting
(``|X| = 4``), not the large one.

Settings (fixed, not tuned): ``hidden = 32``, ``steps = 20``, ``learning_rate = 0.01``,
``iterations = 8``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

__all__ = [
    "HIDDEN",
    "STEPS",
    "LEARNING_RATE",
    "ITERATIONS",
    "CELL_FIELDS",
    "RateNet",
    "LearnedState",
    "LearnedEstimator",
    "cell_inputs",
    "dinkelbach_rate",
    "make_learned_estimator",
]

HIDDEN = 32
STEPS = 20
LEARNING_RATE = 0.01
ITERATIONS = 8
CELL_FIELDS = ("count", "reward_sum", "log_time_sum", "log_time_sq_sum")
"""The last axis of ``cells``: per ``(x, a)`` the sample count, reward sum, log-time sum and
squared log-time sum."""


class RateNet(nn.Module):
    """MLP ``(N, C + A) -> (N, 3)``: residuals of a cell's mean reward, mean log time and
    variance of log time.

    Attributes:
      hidden: width of the hidden layer (tanh).
      dtype: parameter and compute dtype.
    """

    hidden: int = HIDDEN
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        h = nn.Dense(self.hidden, dtype=self.dtype, param_dtype=self.dtype)(inputs)
        return nn.Dense(3, dtype=self.dtype, param_dtype=self.dtype)(nn.tanh(h))


class LearnedState(NamedTuple):
    """State of the learned estimator for one seed.

    Attributes:
      params: the network's parameters (flax pytree).
      opt_state: Adam's state (optax pytree).
      rho_hat: the estimate, float ``()``, reward per time unit, >= 0.
      num_fits: refits done, int32 ``()``.
    """

    params: Any
    opt_state: Any
    rho_hat: jax.Array
    num_fits: jax.Array


class LearnedEstimator(NamedTuple):
    """The estimator with its settings bound, for the reference feeding with labels.

    Attributes:
      init: ``init(dtype) -> LearnedState``.
      refit: ``refit(state, slot_r (S,), slot_d (S,), mask (S,) bool, key, cells (C, A, 4),
        context_counts (C,))``.
      labelled: always True: the agent passes ``cells``.
      n_contexts, n_actions: ``C`` and ``A``.
    """

    init: Callable[..., LearnedState]
    refit: Callable[..., LearnedState]
    labelled: bool
    n_contexts: int
    n_actions: int


def cell_inputs(n_contexts: int, n_actions: int, dtype: Any = jnp.float32) -> jax.Array:
    """The network's inputs for every cell, row ``x * A + a`` = ``[onehot(x), onehot(a)]``.

    Returns:
      float ``(C * A, C + A)``.
    """
    x = jnp.repeat(jnp.arange(n_contexts), n_actions)
    a = jnp.tile(jnp.arange(n_actions), n_contexts)
    return jnp.concatenate(
        [jax.nn.one_hot(x, n_contexts, dtype=dtype), jax.nn.one_hot(a, n_actions, dtype=dtype)],
        axis=1,
    )


def dinkelbach_rate(
    rbar: jax.Array,
    dbar: jax.Array,
    count: jax.Array,
    weights: jax.Array,
    rho0: jax.Array,
    iterations: int,
) -> jax.Array:
    """Dinkelbach iterations on a mean table restricted to the observed cells.

    Args:
      rbar, dbar: mean reward and mean time (> 0) per cell, float ``(C, A)``.
      count: samples per cell, ``(C, A)``; a cell with 0 is not a choice.
      weights: context weights ``(C,)``, >= 0 (normalised here); a context with no observed
        cell gets weight 0 (at least one context must have both).
      rho0: the starting rate, float ``()``.
      iterations: how many iterations (static).

    Returns:
      The rate after ``iterations`` steps, float ``()`` (the optimal rate over the observed
      cells once converged; exact iteration converges superlinearly, Schaible 1976).
    """
    seen = count > 0
    p = jnp.where(jnp.any(seen, axis=1), weights, 0)
    p = p / jnp.sum(p)

    def step(_, rho):
        score = jnp.where(seen, rbar - rho * dbar, -jnp.inf)
        a = jnp.argmax(score, axis=1)
        r = jnp.take_along_axis(rbar, a[:, None], axis=1)[:, 0]
        d = jnp.take_along_axis(dbar, a[:, None], axis=1)[:, 0]
        return jnp.sum(p * r) / jnp.sum(p * d)

    return jax.lax.fori_loop(0, iterations, step, rho0)


def make_learned_estimator(
    n_contexts: int,
    n_actions: int,
    hidden: int = HIDDEN,
    steps: int = STEPS,
    learning_rate: float = LEARNING_RATE,
    iterations: int = ITERATIONS,
) -> LearnedEstimator:
    """The learned estimator (module docstring) for ``C`` contexts and ``A`` actions.

    Raises:
      ValueError: a size, ``steps`` or ``iterations`` not a positive int, or a
        ``learning_rate`` not finite and > 0 (before any tracing).
    """
    for name, v in (
        ("n_contexts", n_contexts),
        ("n_actions", n_actions),
        ("hidden", hidden),
        ("steps", steps),
        ("iterations", iterations),
    ):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if not (isinstance(learning_rate, int | float) and 0 < learning_rate < float("inf")):
        raise ValueError(f"learning_rate must be finite and > 0, got {learning_rate!r}")
    C, A = n_contexts, n_actions
    optimizer = optax.adam(learning_rate)

    def init(dtype=jnp.float32) -> LearnedState:
        if not jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
            raise ValueError(f"dtype must be a floating dtype, got {dtype!r}")
        net = RateNet(hidden, dtype)
        params = net.init(jax.random.key(0), cell_inputs(C, A, dtype))
        return LearnedState(
            params=params,
            opt_state=optimizer.init(params),
            rho_hat=jnp.zeros((), dtype),
            num_fits=jnp.zeros((), jnp.int32),
        )

    def refit(
        state: LearnedState, slot_r, slot_d, mask, key, cells, context_counts
    ) -> LearnedState:
        del key
        dtype = state.rho_hat.dtype
        if tuple(cells.shape) != (C, A, 4):
            raise ValueError(f"expected cells of shape ({C}, {A}, 4), got {tuple(cells.shape)}")
        if tuple(jnp.shape(context_counts)) != (C,):
            raise ValueError(
                f"expected context counts of shape ({C},), got {tuple(jnp.shape(context_counts))}"
            )
        net = RateNet(hidden, dtype)
        inputs = cell_inputs(C, A, dtype)
        cells = jnp.asarray(cells, dtype)
        count = cells[..., 0]
        safe = jnp.maximum(count, 1)
        r_mean, l_mean = cells[..., 1] / safe, cells[..., 2] / safe
        v_mean = jnp.maximum(cells[..., 3] / safe - l_mean**2, 0)
        w = count / jnp.maximum(jnp.sum(count), 1)

        def centre_scale(values):
            centre = jnp.sum(w * values)
            spread = jnp.sqrt(jnp.sum(w * (values - centre) ** 2))
            return centre, spread + 1e-3 * jnp.abs(centre) + 1e-6

        moments = (r_mean, l_mean, v_mean)
        fits = [centre_scale(m) for m in moments]

        def predict(params):
            out = cast(jax.Array, net.apply(params, inputs)).reshape(C, A, 3)
            return [c + sc * out[..., k] for k, (c, sc) in enumerate(fits)]

        def loss(params):
            total = jnp.zeros((), dtype)
            for p, m, (_, sc) in zip(predict(params), moments, fits, strict=True):
                total = total + jnp.sum(w * ((p - m) / sc) ** 2)
            return total

        def adam_step(_, carry):
            params, opt_state = carry
            grads = jax.grad(loss)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        params, opt_state = jax.lax.fori_loop(0, steps, adam_step, (state.params, state.opt_state))
        m_r, m_l, m_v = predict(params)
        dbar = jnp.exp(m_l + jnp.maximum(m_v, 0) / 2)
        mask = jnp.asarray(mask, bool)
        time_sum = jnp.sum(jnp.where(mask, jnp.asarray(slot_d, dtype), 0))
        reward_sum = jnp.sum(jnp.where(mask, jnp.asarray(slot_r, dtype), 0))
        rho0 = reward_sum / jnp.maximum(time_sum, jnp.finfo(dtype).tiny)
        weights = jnp.asarray(context_counts, dtype)
        rho = dinkelbach_rate(m_r, dbar, count, weights, rho0, iterations)
        fitted = jnp.sum(count) > 0
        return LearnedState(
            params=params,
            opt_state=opt_state,
            rho_hat=jnp.where(fitted, jnp.maximum(rho, 0), state.rho_hat).astype(dtype),
            num_fits=state.num_fits + 1,
        )

    return LearnedEstimator(init, refit, True, C, A)
