"""Reward-rate estimator contract (DESIGN.md section 4), run against every backend.

Backends: ``"jax"`` (``rpg_jax.estimator``) and ``"torch"`` (``rpg_llm.loop.estimator``). A backend
is
skipped, with the reason, when its framework or module is missing. Both modules expose the same
names and semantics:

- ``init_state(dtype) -> NIWState`` with fields ``mu (2,), kappa (), nu (), psi (2, 2),
  rho_hat (), fitted () bool, num_fits () int``;
- ``update(state, slot_rewards (S,), slot_times (S,), lam) -> NIWState``;
- ``estimate(state, rng, num_slots, num_batches, quantile) -> rho_hat ()``;
- ``refit(state, slot_rewards, slot_times, rng, num_batches, quantile, lam) -> NIWState``;
- ``posterior_mean_rate(state) -> ()``;

where ``rng`` is a ``jax.random`` key (jax) or a seeded ``torch.Generator`` (torch); the same seed
gives the same draws within one backend. The tests talk to both through :class:`Backend`, in NumPy
float64, and compare against closed forms computed here in NumPy/SciPy by other algebra.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from scipy import stats

BACKENDS = ["jax", "torch"]

# First prior and forgetting of the contract (DESIGN.md section 4).
MU0, KAPPA0, NU0, PSI0_SCALE, LAM = 0.0, 1e-3, 3.0, 1e-3, 0.3
TOL: dict[str, Any] = {"rtol": 1e-10, "atol": 1e-10}


# ----------------------------------------------------------------------------- adapters


class Backend:
    """NumPy-in / NumPy-out view of one backend's estimator module (float64)."""

    name = "?"
    mod: ModuleType  # the backend's estimator module

    def init(self):
        raise NotImplementedError

    def update(self, state, r, t, lam=LAM):
        raise NotImplementedError

    def estimate(self, state, seed, num_slots, num_batches=1000, quantile=0.95):
        raise NotImplementedError

    def refit(self, state, r, t, seed, num_batches=1000, quantile=0.95, lam=LAM):
        raise NotImplementedError

    def posterior_mean_rate(self, state):
        raise NotImplementedError

    def params(self, state) -> dict:
        raise NotImplementedError


class JaxBackend(Backend):
    name = "jax"

    def __init__(self):
        jax = pytest.importorskip("jax", reason="jax is not installed")
        jax.config.update("jax_enable_x64", True)
        try:
            self.mod = importlib.import_module("rpg_jax.estimator")
        except ImportError as err:  # pragma: no cover - depends on the checkout
            pytest.skip(f"rpg_jax.estimator not importable: {err}")
        self.jax = jax
        self.jnp = jax.numpy
        m = self.mod
        self._update = jax.jit(m.update)
        self._estimate = jax.jit(m.estimate, static_argnames=("num_slots", "num_batches"))
        self._refit = jax.jit(m.refit, static_argnames=("num_batches",))

    def init(self):
        return self.mod.init_state(self.jnp.float64)

    def update(self, state, r, t, lam=LAM):
        return self._update(state, np.asarray(r, float), np.asarray(t, float), lam)

    def estimate(self, state, seed, num_slots, num_batches=1000, quantile=0.95):
        key = self.jax.random.key(seed)
        out = self._estimate(
            state, key, num_slots=num_slots, num_batches=num_batches, quantile=quantile
        )
        return float(out)

    def refit(self, state, r, t, seed, num_batches=1000, quantile=0.95, lam=LAM):
        key = self.jax.random.key(seed)
        r, t = np.asarray(r, float), np.asarray(t, float)
        return self._refit(state, r, t, key, num_batches=num_batches, quantile=quantile, lam=lam)

    def posterior_mean_rate(self, state):
        return float(self.mod.posterior_mean_rate(state))

    def params(self, state):
        return {f: np.asarray(getattr(state, f)) for f in state._fields}

    def array(self, x):
        return self.jnp.asarray(x, self.jnp.float64)

    def eager_update(self, state, r, t, lam):
        return self.mod.update(state, self.array(r), self.array(t), lam)

    def eager_estimate(self, state, seed, num_slots, quantile):
        return self.mod.estimate(state, self.jax.random.key(seed), num_slots, 50, quantile)


class TorchBackend(Backend):
    name = "torch"

    def __init__(self):
        self.torch = pytest.importorskip("torch", reason="torch is not installed")
        try:
            self.mod = importlib.import_module("rpg_llm.loop.estimator")
        except ImportError as err:
            pytest.skip(f"rpg_llm.loop.estimator not importable (not written yet?): {err}")

    def _t(self, x):
        return self.torch.as_tensor(np.asarray(x, float), dtype=self.torch.float64)

    def _gen(self, seed):
        return self.torch.Generator().manual_seed(int(seed))

    def init(self):
        return self.mod.init_state(self.torch.float64)

    def update(self, state, r, t, lam=LAM):
        return self.mod.update(state, self._t(r), self._t(t), lam)

    def estimate(self, state, seed, num_slots, num_batches=1000, quantile=0.95):
        return float(self.mod.estimate(state, self._gen(seed), num_slots, num_batches, quantile))

    def refit(self, state, r, t, seed, num_batches=1000, quantile=0.95, lam=LAM):
        return self.mod.refit(
            state, self._t(r), self._t(t), self._gen(seed), num_batches, quantile, lam
        )

    def posterior_mean_rate(self, state):
        return float(self.mod.posterior_mean_rate(state))

    def params(self, state):
        return {f: np.asarray(getattr(state, f).detach().cpu().numpy()) for f in state._fields}

    def array(self, x):
        return self._t(x)

    def eager_update(self, state, r, t, lam):
        return self.update(state, r, t, lam)

    def eager_estimate(self, state, seed, num_slots, quantile):
        return self.mod.estimate(state, self._gen(seed), num_slots, 50, quantile)


def make_backend(name: str) -> Backend:
    return {"jax": JaxBackend, "torch": TorchBackend}[name]()


@pytest.fixture(params=BACKENDS)
def backend(request) -> Backend:
    return make_backend(request.param)


# ----------------------------------------------------------------------------- NumPy reference


def ref_slot_vectors(r, t):
    """Usable slots (finite reward and time, time > 0) as rows (reward sum, log time sum)."""
    r, t = np.asarray(r, float), np.asarray(t, float)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(r) & np.isfinite(t) & (t > 0)
    return np.stack([r[ok], np.log(t[ok])], axis=1)


def ref_niw(prior, y):
    """Conjugate NIW update via raw moments: psi_n = psi0 + sum yy' + k0 m0 m0' - kn mn mn'."""
    mu0, k0, nu0, psi0 = prior
    n = y.shape[0]
    kn = k0 + n
    mn = (k0 * mu0 + y.sum(axis=0)) / kn
    psin = psi0 + y.T @ y + k0 * np.outer(mu0, mu0) - kn * np.outer(mn, mn)
    return mn, kn, nu0 + n, psin


class RefEstimator:
    """Independent NumPy model of the contract's posterior bookkeeping."""

    def __init__(self):
        self.post = (np.full(2, MU0), KAPPA0, NU0, PSI0_SCALE * np.eye(2))
        self.num_fits = 0

    def update(self, r, t, lam=LAM):
        y = ref_slot_vectors(r, t)
        if y.shape[0] < 2:
            return False
        mu, k, nu, psi = self.post
        prior = (mu, lam * k, max(lam * nu, 4.0), lam * psi)  # the first refit forgets too
        self.post = ref_niw(prior, y)
        self.num_fits += 1
        return True

    def predictive(self):
        mu, k, nu, psi = self.post
        df = nu - 1.0
        return df, mu, psi * (k + 1.0) / (k * df)

    def posterior_mean_rate(self):
        mu, _, nu, psi = self.post
        return max(0.0, mu[0] / np.exp(mu[1] + 0.5 * psi[1, 1] / (nu - 3.0)))


def scipy_rate_quantiles(df, loc, scale, num_slots, num_batches, quantile, reps, seed):
    """``reps`` independent estimates ``max(0, q-quantile of batch rates)`` via SciPy's t."""
    dist = stats.multivariate_t(loc=loc, shape=scale, df=df)
    y = dist.rvs(size=reps * num_batches * num_slots, random_state=seed)
    y = y.reshape(reps, num_batches, num_slots, 2)
    ratio = y[..., 0].mean(-1) / np.exp(y[..., 1]).mean(-1)
    return np.maximum(np.quantile(ratio, quantile, axis=1), 0.0)


def slot_data(seed, num_slots=128, per_slot=8, rate=0.5, corr=0.0):
    """Synthetic slot accumulators: ``per_slot`` (r, delta) samples summed per slot."""
    rng = np.random.default_rng(seed)
    cov = [[1.0, corr], [corr, 1.0]]
    z = rng.multivariate_normal([0.0, 0.0], cov, size=(num_slots, per_slot))
    delta = np.maximum(1.2 * (1 + 0.15 * z[..., 1]), 0.5)
    r = np.maximum(rate * 1.2 + 0.2 * z[..., 0], 0.0)
    return r.sum(axis=1), delta.sum(axis=1)


def assert_posterior(p, ref):
    mu, k, nu, psi = ref.post
    np.testing.assert_allclose(p["mu"], mu, **TOL)
    np.testing.assert_allclose(p["kappa"], k, **TOL)
    np.testing.assert_allclose(p["nu"], nu, **TOL)
    np.testing.assert_allclose(p["psi"], psi, **TOL)


# ----------------------------------------------------------------------------- contract tests


def test_init_is_first_prior(backend):
    p = backend.params(backend.init())
    np.testing.assert_array_equal(p["mu"], [MU0, MU0])
    assert p["kappa"] == KAPPA0 and p["nu"] == NU0
    np.testing.assert_array_equal(p["psi"], PSI0_SCALE * np.eye(2))
    assert p["rho_hat"] == 0.0 and not bool(p["fitted"]) and int(p["num_fits"]) == 0


def test_update_sequence_matches_numpy_closed_form(backend):
    """Three refits with forgetting (one with unusable slots) equal the NumPy model at 1e-10."""
    state, ref = backend.init(), RefEstimator()
    for i, corr in enumerate([0.0, 0.8, -0.8]):
        r, t = slot_data(10 + i, num_slots=64, corr=corr)
        if i == 1:  # unusable slots: NaN reward, zero / negative / infinite time
            r[3], t[5], t[6], t[7] = np.nan, 0.0, -1.0, np.inf
        state = backend.update(state, r, t)
        assert ref.update(r, t)
        p = backend.params(state)
        assert bool(p["fitted"]) and int(p["num_fits"]) == i + 1
        assert_posterior(p, ref)
    assert p["nu"] > 4.0 + 60  # forgetting floor max(lam nu, 4) plus the slots


def test_lam_is_used(backend):
    """Another forgetting factor gives the NumPy posterior for that factor, not the default."""
    state, ref = backend.init(), RefEstimator()
    for i in range(2):
        r, t = slot_data(20 + i, num_slots=32)
        state = backend.update(state, r, t, lam=0.7)
        ref.update(r, t, lam=0.7)
    assert_posterior(backend.params(state), ref)


@pytest.mark.parametrize("num_usable", [0, 1])
def test_too_few_usable_slots_keeps_posterior_and_estimate(backend, num_usable):
    r, t = slot_data(1, num_slots=32)
    state = backend.refit(backend.init(), r, t, seed=0)
    before = backend.params(state)
    assert bool(before["fitted"]) and before["rho_hat"] > 0
    r2, t2 = np.full(32, np.nan), np.zeros(32)
    r2[:num_usable], t2[:num_usable] = 1.0, 2.0
    after_update = backend.update(state, r2, t2)
    p = backend.params(after_update)
    assert not bool(p["fitted"]) and int(p["num_fits"]) == 1
    for f in ("mu", "kappa", "nu", "psi", "rho_hat"):
        np.testing.assert_array_equal(p[f], before[f])
    # estimate after a failed update returns the last estimate exactly, for any seed
    assert backend.estimate(after_update, seed=5, num_slots=32) == before["rho_hat"]
    after_refit = backend.params(backend.refit(state, r2, t2, seed=7))
    assert after_refit["rho_hat"] == before["rho_hat"]


def test_estimate_before_any_fit_is_zero(backend):
    state = backend.update(backend.init(), [1.0], [1.0])  # one slot: not a fit
    assert backend.estimate(state, seed=0, num_slots=1) == 0.0


def test_rho_hat_within_monte_carlo_error_of_scipy(backend):
    """rho_hat vs SciPy multivariate_t: within 5 standard deviations of the estimator."""
    ref, state = RefEstimator(), backend.init()
    for i in range(2):
        r, t = slot_data(30 + i, num_slots=128, corr=0.8)
        ref.update(r, t)
        state = backend.update(state, r, t)
    df, loc, scale = ref.predictive()
    reps = scipy_rate_quantiles(df, loc, scale, 128, 1000, 0.95, reps=12, seed=1)
    center, sd = reps.mean(), reps.std(ddof=1)
    got = np.array([backend.estimate(state, seed=s, num_slots=128) for s in range(3)])
    assert sd > 0
    assert np.all(np.abs(got - center) < 5 * sd + 1e-12), (got, center, sd)
    # the same seed gives the same draws within a backend
    assert backend.estimate(state, seed=0, num_slots=128) == got[0]


def test_small_sample_predictive_spread(backend):
    """Few slots (kappa ~ 5, df = 8): the (kappa + 1) / kappa and df factors of the predictive
    scale move the 0.05..0.95 quantile spread of batch rates by ~10 %; compare with SciPy."""
    ref, state = RefEstimator(), backend.init()
    r, t = slot_data(60, num_slots=5, per_slot=1)
    ref.update(r, t)
    state = backend.update(state, r, t)
    df, loc, scale = ref.predictive()
    assert df == 8.0  # nu = max(0.3 x 3, 4) + 5 slots: df = nu - 1
    q = (0.05, 0.95)
    # SciPy's signature types df as int and shape as a scalar; it takes a float and a matrix
    dist = stats.multivariate_t(loc=loc, shape=scale, df=df)  # pyright: ignore[reportArgumentType]
    y = dist.rvs(size=16 * 2000 * 5, random_state=3).reshape(16, 2000, 5, 2)
    ratio = y[..., 0].mean(-1) / np.exp(y[..., 1]).mean(-1)
    spreads = np.diff(np.quantile(ratio, q, axis=1), axis=0).ravel()
    got = [
        backend.estimate(state, seed=s, num_slots=5, num_batches=2000, quantile=q[1])
        - backend.estimate(state, seed=s, num_slots=5, num_batches=2000, quantile=q[0])
        for s in range(4)
    ]
    se = spreads.std(ddof=1) / np.sqrt(4)
    assert abs(np.mean(got) - spreads.mean()) < 4 * se, (got, spreads.mean(), se)


def test_rho_hat_clipped_at_zero(backend):
    """Negative rewards: every batch rate is negative, so rho_hat is exactly 0 (max(0, q))."""
    r, t = slot_data(2, num_slots=64)
    state = backend.refit(backend.init(), -r - 5.0, t, seed=0)
    p = backend.params(state)
    assert bool(p["fitted"]) and p["rho_hat"] == 0.0


def test_quantile_monotone(backend):
    """Same seed, same draws: the estimate is nondecreasing in the quantile."""
    r, t = slot_data(3, num_slots=128)
    state = backend.update(backend.init(), r, t)
    qs = [0.05, 0.25, 0.5, 0.75, 0.95, 1.0]
    est = [backend.estimate(state, seed=4, num_slots=128, quantile=q) for q in qs]
    assert all(b >= a for a, b in zip(est, est[1:], strict=False)), est
    assert est[-1] > est[0]  # and not constant: the quantile is really used
    r_true = r.sum() / t.sum()
    assert est[0] < r_true < est[-1]


def test_posterior_mean_rate_closed_form(backend):
    ref, state = RefEstimator(), backend.init()
    assert backend.posterior_mean_rate(state) == 0.0  # not fitted: last estimate
    for i in range(2):
        r, t = slot_data(40 + i, num_slots=64)
        ref.update(r, t)
        state = backend.update(state, r, t)
    np.testing.assert_allclose(backend.posterior_mean_rate(state), ref.posterior_mean_rate(), **TOL)


_NAN_FORMS = ("python float", "backend 0-d array", "numpy 1-d array")


def _bad_value(backend, form, value):
    if form == "python float":
        return float(value)
    if form == "backend 0-d array":
        return backend.array(value)
    return np.array([0.5, value])


@pytest.mark.parametrize("form", _NAN_FORMS)
@pytest.mark.parametrize("value", [np.nan, 1.5])
def test_lam_and_quantile_checks_reject_nan_and_out_of_range_naming_the_value(backend, form, value):
    """Issue 12 item 6: NaN (also inside an array) and out-of-range lam / quantile raise a
    ValueError naming the value, before any work (eager calls, so the values are concrete)."""
    r, t = slot_data(7, num_slots=8)
    state = backend.update(backend.init(), r, t)
    bad = _bad_value(backend, form, value)
    shown = r"\[?nan" if np.isnan(value) else r"\[?1\.5"
    with pytest.raises(ValueError, match=r"lam must lie in \(0, 1\], got " + shown):
        backend.eager_update(state, r, t, bad)
    with pytest.raises(ValueError, match=r"quantile must lie in \[0, 1\], got " + shown):
        backend.eager_estimate(state, 0, 8, bad)
    with pytest.raises(ValueError, match="lam must lie in"):
        backend.mod.make_niw_estimator(num_slots=8, lam=bad)
    with pytest.raises(ValueError, match="quantile must lie in"):
        backend.mod.make_niw_estimator(num_slots=8, quantile=bad)


def test_rate_quantile_names_a_nan_inside_an_array(backend):
    """``rate_quantile(draws, [0.5, nan])`` raises the range error naming the NaN on both
    backends (converting the array to a float before the check gives a TypeError naming
    nothing)."""
    draws = backend.array(np.ones((4, 3, 2)))
    for bad in (np.array([0.5, np.nan]), backend.array([0.5, np.nan])):
        with pytest.raises(ValueError, match=r"quantile must lie in \[0, 1\], got \[nan\]"):
            backend.mod.rate_quantile(draws, bad)


@pytest.mark.parametrize("shape", [(2,), (1,)])
def test_lam_and_quantile_arrays_of_valid_values_must_be_one_number(backend, shape):
    """An array of in-range values that is not 0-d is refused when the estimator is built and by
    every eager call, naming the shape (the state and ``rho_hat`` are scalars; unchecked, a
    ``(2,)`` quantile bound into the JAX estimator fails only inside the first refit, with a
    ``lax.cond`` type error)."""
    r, t = slot_data(9, num_slots=8)
    state = backend.update(backend.init(), r, t)
    bad = np.full(shape, 0.5)
    needle = r"must be one number \(a 0-d array\), got shape \(" + str(shape[0])
    with pytest.raises(ValueError, match="quantile " + needle):
        backend.mod.make_niw_estimator(num_slots=8, quantile=bad)
    with pytest.raises(ValueError, match="lam " + needle):
        backend.mod.make_niw_estimator(num_slots=8, lam=bad)
    with pytest.raises(ValueError, match="lam " + needle):
        backend.eager_update(state, r, t, bad)
    with pytest.raises(ValueError, match="quantile " + needle):
        backend.eager_estimate(state, 0, 8, bad)
    with pytest.raises(ValueError, match="quantile " + needle):
        backend.mod.rate_quantile(backend.array(np.ones((4, 3, 2))), bad)


def test_valid_array_lam_and_quantile_are_accepted_and_used(backend):
    """The checks do not reject good arrays: a 0-d backend array gives what the number gives."""
    r, t = slot_data(8, num_slots=16)
    state = backend.update(backend.init(), r, t)
    for lam in (0.5, 1.0):
        a = backend.params(backend.eager_update(state, r, t, lam))
        b = backend.params(backend.eager_update(state, r, t, backend.array(lam)))
        for f in ("mu", "kappa", "nu", "psi"):
            np.testing.assert_allclose(a[f], b[f], **TOL)
    got = float(backend.eager_estimate(state, 3, 16, backend.array(0.5)))
    assert got == float(backend.eager_estimate(state, 3, 16, 0.5))


# ----------------------------------------------------------------------------- parity


def test_backends_agree():
    """jax vs torch: posterior parameters at 1e-10 (float64), rho_hat within Monte-Carlo error."""
    jx, th = make_backend("jax"), make_backend("torch")
    sj, st = jx.init(), th.init()
    for i, corr in enumerate([0.0, -0.8, 0.8]):
        r, t = slot_data(50 + i, num_slots=128, corr=corr)
        if i == 2:
            r[0], t[1] = np.inf, 0.0
        sj, st = jx.refit(sj, r, t, seed=i), th.refit(st, r, t, seed=i)
        pj, pt = jx.params(sj), th.params(st)
        for f in ("mu", "kappa", "nu", "psi"):
            np.testing.assert_allclose(pj[f], pt[f], **TOL)
        assert bool(pj["fitted"]) == bool(pt["fitted"])
        assert int(pj["num_fits"]) == int(pt["num_fits"])
    ref = RefEstimator()
    ref.post = (pj["mu"], float(pj["kappa"]), float(pj["nu"]), pj["psi"])
    df, loc, scale = ref.predictive()
    reps = scipy_rate_quantiles(df, loc, scale, 128, 1000, 0.95, reps=12, seed=2)
    sd = reps.std(ddof=1)
    assert abs(pj["rho_hat"] - pt["rho_hat"]) < 5 * np.sqrt(2) * sd + 1e-12
    np.testing.assert_allclose(jx.posterior_mean_rate(sj), th.posterior_mean_rate(st), **TOL)


def test_shared_algebra_is_backend_free_and_both_backends_use_it():
    """rpg_core.niw imports neither jax nor torch (DESIGN.md section 1), and both backends take
    their constants, state type and checks from it (one algebra)."""
    import subprocess
    import sys

    code = (
        "import sys, rpg_core.niw; print(sorted(m for m in ('jax', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    niw = importlib.import_module("rpg_core.niw")
    for name in BACKENDS:
        mod = make_backend(name).mod
        assert mod.NIWState is niw.NIWState and mod.Estimator is niw.Estimator
        assert set(niw.BACKEND_API) <= set(mod.__all__)
        assert (mod.KAPPA0, mod.NU0, mod.PSI0_SCALE, mod.LAM) == (KAPPA0, NU0, PSI0_SCALE, LAM)
