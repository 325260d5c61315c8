"""Torch estimator beyond the shared contract: RNG handling, dtypes, law of the draws, errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch", reason="torch is not installed")
est = pytest.importorskip("rpg_llm.loop.estimator", reason="rpg_llm.loop.estimator not importable")


def slots(seed, n=128):
    rng = np.random.default_rng(seed)
    t = rng.uniform(4.0, 12.0, n)
    r = 0.4 * t + rng.normal(0.0, 0.5, n)
    return torch.tensor(r, dtype=torch.float64), torch.tensor(t, dtype=torch.float64)


def fitted_state(dtype=torch.float64):
    r, t = slots(0)
    return est.update(est.init_state(dtype), r.to(dtype), t.to(dtype))


def test_same_generator_seed_same_estimate_and_global_rng_untouched():
    state = fitted_state()
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = est.estimate(state, torch.Generator().manual_seed(7))
    b = est.estimate(state, torch.Generator().manual_seed(7))
    c = est.estimate(state, torch.Generator().manual_seed(8))
    assert torch.equal(torch.random.get_rng_state(), before)
    assert a.item() == b.item() and a.item() != c.item()
    # consecutive calls with one generator advance it: different draws
    g = torch.Generator().manual_seed(7)
    assert est.estimate(state, g).item() == a.item()
    assert est.estimate(state, g).item() != a.item()


def test_float32_state_stays_float32():
    state = fitted_state(torch.float32)
    assert state.mu.dtype == torch.float32 and state.psi.dtype == torch.float32
    rho = est.estimate(state, torch.Generator().manual_seed(0))
    assert rho.dtype == torch.float32
    rho64 = est.estimate(fitted_state(torch.float64), torch.Generator().manual_seed(0))
    assert abs(rho.item() - rho64.item()) < 0.05 * rho64.item()


def test_predictive_draws_follow_the_student_t():
    """Marginals against SciPy's t (KS) and the correlation against the scale matrix."""
    state = fitted_state()
    df, loc, scale, tril = est.predictive_params(state)
    np.testing.assert_allclose((tril @ tril.T).numpy(), scale.numpy(), rtol=1e-12)
    y = est.predictive_draws(state, torch.Generator().manual_seed(1), 200, 100).reshape(-1, 2)
    assert y.shape == (20000, 2) and y.dtype == torch.float64
    for i in range(2):
        marginal = stats.t(df=df.item(), loc=loc[i].item(), scale=np.sqrt(scale[i, i].item()))
        assert stats.kstest(y[:, i].numpy(), marginal.cdf).pvalue > 1e-4
    corr = np.corrcoef(y.numpy().T)[0, 1]
    want = (scale[0, 1] / torch.sqrt(scale[0, 0] * scale[1, 1])).item()
    assert abs(corr - want) < 0.03


def test_rate_quantile_matches_numpy():
    rng = np.random.default_rng(3)
    draws = rng.normal([1.0, 1.5], 0.2, size=(50, 16, 2))
    ratio = draws[..., 0].mean(-1) / np.exp(draws[..., 1]).mean(-1)
    for q in (0.0, 0.3, 0.95, 1.0):
        got = est.rate_quantile(torch.tensor(draws), q).item()
        assert got == pytest.approx(max(0.0, np.quantile(ratio, q)), rel=1e-12)


def test_make_niw_estimator_and_posterior_mean_kind():
    r, t = slots(5, n=64)
    e = est.make_niw_estimator(num_slots=64, num_batches=200)
    s = e.refit(e.init(torch.float64), r, t, torch.Generator().manual_seed(0))
    assert bool(s.fitted) and s.rho_hat.item() > 0
    with pytest.raises(ValueError, match=r"shape \(64,\)"):
        e.refit(s, r[:10], t[:10], torch.Generator())
    pm = est.make_niw_estimator(num_slots=64, kind="posterior_mean")
    s2 = pm.refit(pm.init(torch.float64), r, t, None)
    assert s2.rho_hat.item() == est.posterior_mean_rate(s2).item()
    # posterior-mean rate is close to the pooled ratio of the data
    assert s2.rho_hat.item() == pytest.approx((r.mean() / t.mean()).item(), rel=0.05)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: est.estimate(s, np.random.default_rng(0)), "torch.Generator"),
        (lambda s: est.estimate(s, torch.Generator(), num_batches=0), "num_batches"),
        (lambda s: est.estimate(s, torch.Generator(), quantile=1.5), "quantile"),
        (lambda s: est.estimate(s, torch.Generator(), sampler="numpyro"), "sampler"),
        (lambda s: est.update(s, torch.ones(3), torch.ones(4)), "equal length"),
        (lambda s: est.update(s, torch.ones(0), torch.ones(0)), "at least one slot"),
        (lambda s: est.update(s, torch.ones(3), torch.ones(3), lam=0.0), "lam"),
        (lambda s: est.init_state(torch.int64), "floating"),
        (lambda s: est.make_niw_estimator(kind="ucb"), "kind"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(fitted_state())
