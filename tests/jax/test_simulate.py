"""The simulator: batching, sharding, exact regret totals, E[R_n] = E[P_n], bad input."""

import jax
import numpy as np
import pytest

from rpg_jax.agents.baselines import NoHyper, make_fixed_agent, make_uniform_agent
from rpg_jax.envs import make_custom_env, make_reference_env, make_trial_params
from rpg_jax.simulate import checkpoint_grid, simulate, simulate_one
from testkit import REPO_ROOT


def _stack(params, n):
    return jax.tree.map(lambda v: np.stack([np.asarray(v)] * n), params)


def test_checkpoint_grid_divides_steps():
    assert checkpoint_grid(30_000).tolist()[-1] == 30_000
    assert len(checkpoint_grid(30_000)) == 100
    assert checkpoint_grid(7).tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert checkpoint_grid(97, 10).tolist() == [97]  # prime: one point


def test_batch_equals_single_seed_runs_and_sharding():
    """S seeds at once == S single-seed runs, seed by seed; sharded == unsharded."""
    agent = make_uniform_agent(6)
    seeds = [3, 11, 4, 25, 7]  # odd count: exercises padding to the 2 devices
    params = make_trial_params("E2", 5, 4, seeds)
    sharded = simulate(agent, NoHyper(), params, seeds, 300, shard=True)
    plain = simulate(agent, NoHyper(), params, seeds, 300, shard=False)
    np.testing.assert_array_equal(sharded.regret_curve, plain.regret_curve)
    np.testing.assert_array_equal(sharded.pseudo_regret, plain.pseudo_regret)
    for i, s in enumerate(seeds):
        one = simulate_one(agent, NoHyper(), jax.tree.map(lambda v, i=i: v[i], params), s, 300)
        np.testing.assert_allclose(one.regret[0], plain.regret[i], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(one.pseudo_regret[0], plain.pseudo_regret[i], rtol=1e-12)
    # Different seeds really differ (the check above is not vacuous).
    assert len(set(np.round(plain.regret, 9))) == len(seeds)


def test_regret_totals_exact_at_30000():
    """Deterministic outcomes, fixed action: R_n = n (rho* dbar - rbar) and P_n = n GAP exactly."""
    env = make_custom_env([1.0], [[0.37, 0.91, 0.2]], [[1.3, 2.9, 0.7]], noise="none")
    n = 30_000
    res = simulate_one(make_fixed_agent(3, 0), NoHyper(), env, 0, n)
    expected_r = n * (float(env.rho_star) * 1.3 - 0.37)
    expected_p = n * float(env.gap[0, 0])
    assert expected_p > 0
    assert abs(res.regret[0] - expected_r) <= 1e-9 * abs(expected_r)
    assert abs(res.pseudo_regret[0] - expected_p) <= 1e-9 * abs(expected_p)
    np.testing.assert_allclose(res.regret_curve[0], res.checkpoints * (expected_r / n), rtol=1e-9)


def test_expected_regret_equals_expected_pseudo_regret():
    """E[R_n] = E[P_n] (proofs/regret_identity.md): mean of R_n - P_n within 3 s.e. of 0 over
    2,000 seeds, under noisy, correlated outcomes (E2) and the lognormal model (E4)."""
    agent = make_uniform_agent(6)
    seeds = list(range(2000))
    for env in ("E2", "E4"):
        params = make_trial_params(env, 5, 4, seeds)
        res = simulate(agent, NoHyper(), params, seeds, 200)
        diff = res.regret - res.pseudo_regret
        se = diff.std(ddof=1) / np.sqrt(diff.size)
        assert abs(diff.mean()) < 3 * se, (env, diff.mean(), se)
        # ... and the identity is about expectations: per seed the two do differ.
        assert diff.std() > 0.1


def test_identity_detects_wrong_rho_star():
    """The same statistic rejects a regret computed with a rate 2% off rho_star."""
    agent = make_uniform_agent(6)
    seeds = list(range(2000))
    params = make_trial_params("E1", 5, 4, seeds)
    params = params._replace(rho_star=params.rho_star * 1.02)
    res = simulate(agent, NoHyper(), params, seeds, 200)
    diff = res.regret - res.pseudo_regret
    assert abs(diff.mean()) > 3 * diff.std(ddof=1) / np.sqrt(diff.size)


def test_uniform_pseudo_regret_matches_closed_form():
    env = make_reference_env("E1", 5, 4)
    seeds = list(range(256))
    params = _stack(env, len(seeds))
    res = simulate(make_uniform_agent(6), NoHyper(), params, seeds, 400)
    expected = 400 * float(np.dot(env.p, np.asarray(env.gap).mean(axis=1)))
    se = res.pseudo_regret.std(ddof=1) / np.sqrt(len(seeds))
    assert abs(res.pseudo_regret.mean() - expected) < 4 * se


@pytest.mark.parametrize(
    "n_params, kwargs, match",
    [
        (1, {"seeds": [], "n_steps": 10}, "seeds"),
        (1, {"seeds": [-1], "n_steps": 10}, "-1"),
        (1, {"seeds": [0], "n_steps": 0}, "n_steps"),
        (1, {"seeds": [0, 1], "n_steps": 10}, "leading seed axis"),
        (1, {"seeds": [2**32], "n_steps": 10}, "4294967296"),
        (2, {"seeds": [3, 3], "n_steps": 10}, r"repeated: \[3\]"),
        (1, {"seeds": [0], "n_steps": 10, "max_checkpoints": 0}, "max_checkpoints"),
    ],
)
def test_bad_input_raises_before_compiling(n_params, kwargs, match):
    params = make_trial_params("E1", 5, 4, list(range(n_params)))
    with pytest.raises(ValueError, match=match):
        simulate(make_uniform_agent(6), NoHyper(), params, **kwargs)


# ---------------------------------------------------------------- robustness

_PRNG_SCRIPT = """
import jax, numpy as np
from rpg_jax.agents.baselines import NoHyper, make_uniform_agent
from rpg_jax.envs import make_trial_params
from rpg_jax.simulate import simulate, simulate_one
jax.config.update("jax_enable_x64", True)
assert jax.config.jax_default_prng_impl == "{impl}"
seeds = [5, 0, 9]
params = make_trial_params("E1", 5, 4, seeds)
agent, hyper = make_uniform_agent(6), NoHyper()
batch = simulate(agent, hyper, params, seeds, 160, shard=False)
for i, s in enumerate(seeds):
    one = simulate_one(agent, hyper, jax.tree.map(lambda v, i=i: v[i], params), s, 160)
    assert np.array_equal(one.total_reward, batch.total_reward[i:i + 1]), (i, s)
    assert np.array_equal(one.regret, batch.regret[i:i + 1]), (i, s)
print("OK", batch.total_reward.tolist())
"""


def _run_sub(code, **env):
    import os
    import subprocess
    import sys

    root = str(REPO_ROOT)
    full = {**os.environ, "PYTHONPATH": root, **env}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=root
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture(scope="module")
def threefry_run():
    """The script's output under the default PRNG (one subprocess shared by both impls)."""
    return _run_sub(_PRNG_SCRIPT.format(impl="threefry2x32"))


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_seed_trajectory_independent_of_lane_under_rbg(impl, threefry_run):
    """Under JAX_DEFAULT_PRNG_IMPL=rbg / unsafe_rbg every lane equals its unbatched run."""
    out = _run_sub(_PRNG_SCRIPT.format(impl=impl), JAX_DEFAULT_PRNG_IMPL=impl)
    assert out.split("OK")[1] == threefry_run.split("OK")[1]  # same numbers as the default impl


_X64_SCRIPT = """
import jax, numpy as np
assert not jax.config.read("jax_enable_x64")
from rpg_jax.agents.baselines import NoHyper, make_fixed_agent
from rpg_jax.envs import make_custom_env
from rpg_jax.simulate import simulate_one
env = make_custom_env([1.0], [[0.0005, 0.91]], [[0.0007, 2.9]], noise="none")
acc = (jax.numpy.zeros((), "float32"), jax.numpy.zeros((), "float32"))
naive = jax.numpy.zeros((), "float32")
from rpg_jax.simulate import two_sum_add
v = jax.numpy.asarray(0.0005, "float32")
def body(c, _):
    return (two_sum_add(c[0], v), c[1] + v), None
(acc, naive), _ = jax.lax.scan(jax.jit(body), (acc, naive), None, length=5_000_000)
print(repr(float(acc[0]) + float(acc[1])), repr(5e6 * float(v)), repr(float(naive)))
n = {n}
res = simulate_one(make_fixed_agent(2, 1), NoHyper(), env, 0, n)
r32, d32 = float(np.float32(0.91)), float(np.float32(2.9))
print(repr(float(res.total_reward[0])), repr(n * r32), repr(float(res.regret[0])),
      repr(n * (float(env.rho_star) * d32 - r32)), res.total_reward.dtype)
"""


@pytest.mark.slow
def test_totals_exact_without_x64():
    """Without x64, 5e6 x 0.0005 used to sum to 2448.70 (-2 %); compensated totals are exact
    to float32 rounding of the final value, and R_n is formed in float64."""
    n = 1_000_000
    out = _run_sub(_X64_SCRIPT.format(n=n)).split()
    comp, exact, naive = map(float, out[:3])
    assert abs(naive / exact - 1) > 1e-2  # the bug this guards against (2448.70 vs 2500)
    assert abs(comp / exact - 1) < 1e-9, (comp, exact)
    got_r, want_r, got_reg, want_reg, dtype = out[3:]
    assert dtype == "float64"
    assert abs(float(got_r) / float(want_r) - 1) < 1e-9, (got_r, want_r)
    assert abs(float(got_reg) / float(want_reg) - 1) < 1e-7, (got_reg, want_reg)


def test_agent_size_must_match_environment():
    from rpg_jax.agents.registry import make_agent

    params = make_trial_params("E1", 5, 4, [0])
    agent, hyper, _ = make_agent("npg-niw", 4, 11, {"lr": 1.0, "age_bound": 60})
    with pytest.raises(ValueError, match="11 actions, the environment has 6"):
        simulate(agent, hyper, params, [0], 10)
    agent, hyper, _ = make_agent("cucb-tuned", 3, 6, {"c1": 1.0, "c2": 0.1})
    with pytest.raises(ValueError, match="3 contexts, the environment has 4"):
        simulate(agent, hyper, params, [0], 10)
    with pytest.raises(ValueError, match="7 actions"):
        simulate(make_uniform_agent(7), NoHyper(), params, [0], 10)


def test_cucb_built_directly_and_progress_wrapped_agents_keep_the_size_check():
    """A K = 10 C-UCB from ``make_cucb`` (not through ``make_agent``) on a K = 5 environment, and
    any agent wrapped by the figures' progress counter, are refused like the registry's agents
    (without the sizes they ran with clamped indices)."""
    import jax.numpy as jnp

    from paper_figures._progress import with_progress
    from rpg_jax.agents.cucb import CUCBHyper, make_cucb
    from rpg_jax.agents.registry import make_agent

    params = make_trial_params("E1", 5, 4, [0])  # 4 contexts, 6 actions (K = 5 + SKIP)
    hyper = CUCBHyper(jnp.float32(1.0), jnp.float32(0.1))
    with pytest.raises(ValueError, match="11 actions, the environment has 6"):
        simulate(make_cucb(4, 11), hyper, params, [0], 10)
    with pytest.raises(ValueError, match="3 contexts, the environment has 4"):
        simulate(make_cucb(3, 6, exact=False), hyper, params, [0], 10)
    agent, pg_hyper, _ = make_agent("npg-niw", 4, 11, {"lr": 1.0, "age_bound": 60})
    wrapped = with_progress(agent, 5)
    assert (wrapped.n_contexts, wrapped.n_actions) == (4, 11)
    with pytest.raises(ValueError, match="11 actions, the environment has 6"):
        simulate(wrapped, pg_hyper, params, [0], 10)
