"""The learned reward-rate estimator (rpg_jax.learned): Dinkelbach on a known table, recovery of
a known rate from samples, and the agent's labelled slots."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rpg_jax import learned
from rpg_jax.agents import npg


def _best_rate(rbar, dbar, p, seen):
    """The best rate over deterministic policies on the observed cells, by enumeration."""
    C, A = rbar.shape
    best = -np.inf
    for u in itertools.product(range(A), repeat=C):
        if all(seen[x, u[x]] for x in range(C)):
            idx = (np.arange(C), np.array(u))
            best = max(best, (p * rbar[idx]).sum() / (p * dbar[idx]).sum())
    return best


def test_dinkelbach_rate_is_the_best_policy_rate_over_the_observed_cells():
    rng = np.random.default_rng(3)
    for _ in range(20):
        rbar = rng.uniform(0.0, 2.0, (3, 4))
        dbar = rng.uniform(0.5, 3.0, (3, 4))
        count = rng.integers(0, 3, (3, 4)) * rng.integers(1, 50, (3, 4))
        count[:, 0] += 1  # every context has an observed cell
        p = count.sum(1) / count.sum()
        want = _best_rate(rbar, dbar, p, count > 0)
        got = learned.dinkelbach_rate(
            jnp.asarray(rbar),
            jnp.asarray(dbar),
            jnp.asarray(count, jnp.float64),
            jnp.asarray(count.sum(1), jnp.float64),
            jnp.asarray(0.0, jnp.float64),
            12,
        )
        assert float(got) == pytest.approx(want, rel=1e-9)
        # other context weights: the rate under those weights
        q = rng.uniform(0.1, 1.0, 3)
        got = learned.dinkelbach_rate(
            jnp.asarray(rbar),
            jnp.asarray(dbar),
            jnp.asarray(count, jnp.float64),
            jnp.asarray(q),
            jnp.asarray(0.0, jnp.float64),
            12,
        )
        assert float(got) == pytest.approx(_best_rate(rbar, dbar, q / q.sum(), count > 0), rel=1e-9)


def test_the_learned_estimator_recovers_a_known_rate_from_samples():
    """2 contexts x 3 actions, 2,000 samples per cell: rewards normal, times log-normal with a
    log-sd of its own per cell (0.1 to 1.0), contexts seen 3:1; the estimate after 60 refits is
    within 3 % of the best policy's rate under the true means, E[delta] = exp(mu + sd^2 / 2)."""
    rng = np.random.default_rng(0)
    C, A, n = 2, 3, 2000
    r_mean = np.array([[1.0, 1.5, 0.4], [0.8, 2.0, 1.2]])
    mu_log = np.array([[0.0, 0.6, -0.5], [0.2, 1.0, 0.1]])
    sd_log = np.array([[0.1, 1.0, 0.5], [0.3, 0.1, 1.0]])
    r = rng.normal(r_mean[..., None], 0.5, (C, A, n))
    log_d = rng.normal(mu_log[..., None], sd_log[..., None], (C, A, n))
    d = np.exp(log_d)
    cells = np.stack([np.full((C, A), n), r.sum(-1), log_d.sum(-1), (log_d**2).sum(-1)], -1)
    p = np.array([0.75, 0.25])
    want = _best_rate(r_mean, np.exp(mu_log + sd_log**2 / 2), p, np.ones((C, A), bool))
    # times taken as exp(mean log time), the spread ignored, would be 10 % off: it matters here
    median = _best_rate(r_mean, np.exp(mu_log), p, np.ones((C, A), bool))
    assert abs(median - want) > 0.1 * want
    est = learned.make_learned_estimator(C, A)
    refit = jax.jit(est.refit)
    state = est.init(jnp.float64)
    slot_r, slot_d, mask = jnp.array([r.sum()]), jnp.array([d.sum()]), jnp.array([True])
    seen = jnp.array([3000.0, 1000.0])
    for k in range(60):
        state = refit(state, slot_r, slot_d, mask, jax.random.PRNGKey(k), cells, seen)
    assert float(state.rho_hat) == pytest.approx(want, rel=0.03)
    assert int(state.num_fits) == 60


def test_the_agent_keeps_the_labelled_slots_and_empties_them_with_their_slot():
    est = learned.make_learned_estimator(2, 3)
    init, _, fns = npg.make_pg_fns(2, 3, natural=True, num_slots=2, refit_every=1, estimator=est)
    hyper = npg.PGHyper(jnp.asarray(0.1), jnp.asarray(3))
    s = init(hyper, jax.random.PRNGKey(0))
    assert s.slot_xa.shape == (2, 2, 3, 4)
    # theta is 0 everywhere, so action 0 is greedy (ties to the lowest index) and is fed
    s = fns.update_stats(s, hyper, 1, 0, 2.0, np.e)
    np.testing.assert_allclose(s.slot_xa[0, 1, 0], [1.0, 2.0, 1.0, 1.0])
    assert float(jnp.abs(s.slot_xa).sum()) == pytest.approx(5.0)
    s = fns.update_stats(s, hyper, 0, 0, 1.0, 1.0)  # slot 1
    s = fns.update_stats(s, hyper, 0, 0, 1.0, 1.0)  # slot 0 again, age 2 <= 3: added to it
    np.testing.assert_allclose(s.slot_xa[0].sum((0, 1)), [2.0, 3.0, 1.0, 1.0])
    s = fns.update_stats(s, hyper, 0, 0, 1.0, 1.0)  # slot 1, age 4 > 3: emptied, then fed
    np.testing.assert_allclose(s.slot_xa[1].sum((0, 1)), [1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(s.slot_n, [2, 1])


def test_the_learned_estimator_refuses_bad_settings_and_other_shapes():
    with pytest.raises(ValueError, match="n_actions must be a positive int, got 0"):
        learned.make_learned_estimator(2, 0)
    with pytest.raises(ValueError, match="learning_rate must be finite and > 0, got -1"):
        learned.make_learned_estimator(2, 3, learning_rate=-1.0)
    with pytest.raises(ValueError, match=r"built for 2 contexts x 3 actions, the agent has 2 x 4"):
        npg.make_pg_fns(2, 4, natural=True, estimator=learned.make_learned_estimator(2, 3))
    with pytest.raises(ValueError, match="needs feeding='reference'"):
        npg.make_pg_fns(
            2, 3, natural=True, estimator=learned.make_learned_estimator(2, 3), feeding="legacy"
        )
    with pytest.raises(ValueError, match="needs n_contexts and n_actions"):
        npg.reference_estimator("learned")
