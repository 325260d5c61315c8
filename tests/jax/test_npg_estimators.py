"""The bandit agents' reward-rate estimators by name (rpg_jax.agents.npg.reference_estimator):
the reference feeding's mask reaches each estimator as unusable slots."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from paper_figures._protocol import ESTIMATOR_AGENTS as FIGURE_ESTIMATOR_AGENTS
from rpg_jax import robbins_monro
from rpg_jax.agents import npg
from rpg_jax.agents.registry import ESTIMATOR_AGENTS, PG_AGENTS


def test_the_masked_robbins_monro_refit_reads_only_the_masked_slots():
    est = npg.reference_estimator("robbins-monro", 4)
    r = jnp.array([1.0, 5.0, 3.0, 7.0])
    d = jnp.array([2.0, 1.0, 2.0, 1.0])
    mask = jnp.array([True, False, True, False])
    got = est.refit(est.init(jnp.float64), r, d, mask, jax.random.PRNGKey(0))
    # the masked slots pool to (1 + 3) / (2 + 2) = 1, averaged with rho_0 = 0 at weights 1, 2^-0.5
    w = 2.0**-robbins_monro.CHI
    assert float(got.rho_hat) == pytest.approx(w / (1.0 + w), rel=1e-12)
    plain = robbins_monro.refit(robbins_monro.init_state(jnp.float64), r[mask], d[mask])
    assert float(got.rho_hat) == pytest.approx(float(plain.rho_hat), rel=1e-12)


def test_every_estimator_has_its_npg_agent_and_the_figure_knows_them():
    assert set(ESTIMATOR_AGENTS) == set(npg.ESTIMATORS)
    assert FIGURE_ESTIMATOR_AGENTS == ESTIMATOR_AGENTS
    assert all(PG_AGENTS[a] == (e, True) for e, a in ESTIMATOR_AGENTS.items())
    with pytest.raises(ValueError, match="unknown estimator 'rm'"):
        npg.reference_estimator("rm")


def test_niw_mean_on_the_masked_slots_is_the_posterior_mean_rate():
    from rpg_jax import estimator as niw_estimator

    est = npg.reference_estimator("niw-mean", 3)
    r = jnp.array([1.0, 2.0, 9.0])
    d = jnp.array([1.0, 3.0, 5.0])
    mask = jnp.array([True, True, False])
    got = est.refit(est.init(jnp.float64), r, d, mask, jax.random.PRNGKey(0))
    zeroed_r, zeroed_d = jnp.array([1.0, 2.0, 0.0]), jnp.array([1.0, 3.0, 0.0])
    state = niw_estimator.update(niw_estimator.init_state(jnp.float64), zeroed_r, zeroed_d)
    want = niw_estimator.posterior_mean_rate(state)
    assert np.isfinite(float(want)) and float(got.rho_hat) == pytest.approx(float(want), rel=1e-12)


def test_the_four_estimators_agree_on_a_long_stationary_stream():
    """16 slots, each fed one (r, delta) per refit for 400 refits from a fixed law (rate
    2 / 4.5), all in one context and action: the posterior-mean, Robbins-Monro and learned rates
    end within 2 % of the slots' pooled rate, the NIW 95th percentile above the posterior mean
    and within 6 % of the pooled rate."""
    S, K = 16, 400
    rng = np.random.default_rng(0)
    r = rng.normal(2.0, 1.0, (K, S))
    d = rng.exponential(4.0, (K, S)) + 0.5
    slot_r, slot_d = np.cumsum(r, 0), np.cumsum(d, 0)
    log_d, log_d2 = np.cumsum(np.log(d), 0), np.cumsum(np.log(d) ** 2, 0)
    pooled = slot_r[-1].sum() / slot_d[-1].sum()
    assert pooled == pytest.approx(2.0 / 4.5, rel=0.02)
    mask = jnp.ones(S, bool)
    got = {}
    for name in npg.ESTIMATORS:
        est = npg.reference_estimator(name, S, n_contexts=1, n_actions=1)
        refit = jax.jit(est.refit)
        state = est.init(jnp.float64)
        for k in range(K):
            args = (state, slot_r[k], slot_d[k], mask, jax.random.PRNGKey(k))
            if name == "learned":
                cells = np.array(
                    [[[(k + 1) * S, slot_r[k].sum(), log_d[k].sum(), log_d2[k].sum()]]]
                )
                state = refit(*args, cells, np.array([(k + 1.0) * S]))
            else:
                state = refit(*args)
        got[name] = float(state.rho_hat)
    assert got["robbins-monro"] == pytest.approx(pooled, rel=0.02)
    assert got["niw-mean"] == pytest.approx(pooled, rel=0.02)
    assert got["learned"] == pytest.approx(pooled, rel=0.02)
    assert got["niw-mean"] < got["niw"] < 1.06 * pooled
