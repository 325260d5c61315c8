"""The parent buffer (reference fact, DESIGN.md section 7): valid nodes only, trimmed to its
capacity by the ranking key at the current price, so it keeps the best nodes ever seen; and
what the estimator is fed (scores and measured times, an invalid sample's score 0)."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rpg_llm.config import RewardConfig
from rpg_llm.loop.accounting import Accounts, RateTracker
from rpg_llm.loop.buffer import SampleBuffer
from rpg_llm.loop.parents import ParentPool, rank
from testkit.samples import toy_sample


def _stored(tmp_path, samples):
    with SampleBuffer(tmp_path / "b.sqlite") as buf:
        ids = buf.add_many(samples)
        return [buf.get(i) for i in ids]


# --- ranking and selection ----------------------------------------------------------------------


def test_top_ranks_by_relative_reward_and_cycles(tmp_path):
    # (raw reward, seconds): by raw reward a > b > c; at rho = 0.1 they are c > b > a
    a, b, c = _stored(tmp_path, [toy_sample(i, r, t) for i, (r, t) in enumerate(
        [(0.9, 8.0), (0.8, 4.0), (0.7, 1.0)])])  # fmt: skip
    pool = ParentPool(10)
    pool.add([a, b, c], None)
    ids = lambda got: [s.id for s in got]  # noqa: E731
    assert ids(pool.top(3, None)) == ids([a, b, c])
    assert ids(pool.top(3, 0.1)) == ids([c, b, a])  # keys 0.6, 0.4, 0.1
    assert ids(pool.top(7, 0.1)) == ids([c, b, a, c, b, a, c])
    not_c = lambda s: s.id != c.id  # noqa: E731
    assert ids(pool.top(3, 0.1, eligible=not_c)) == ids([b, a, b])
    assert ids(pool.top(3, 0.1, eligible=lambda s: False)) == ids([c, b, a])  # none: all stay
    assert pool.top(0, 0.1) == [] and ParentPool(3).top(4, None) == []
    with pytest.raises(ValueError, match="k must"):
        pool.top(-1, None)
    with pytest.raises(ValueError, match="rho"):
        pool.top(1, float("inf"))
    with pytest.raises(ValueError, match="capacity"):
        ParentPool(0)


def test_only_valid_samples_become_nodes(tmp_path):
    """An invalid sample (-10) never becomes a parent, even when the pool is short."""
    ok, bad, err = _stored(
        tmp_path,
        [toy_sample(0, 0.5), toy_sample(1, -10.0, status="invalid"), toy_sample(2, status="error")],
    )
    pool = ParentPool(10)
    pool.add([ok, bad, err], 0.1)
    assert [s.id for s in pool.nodes] == [ok.id]
    assert [s.id for s in pool.top(3, 0.1)] == [ok.id] * 3


def test_the_best_nodes_ever_seen_stay_not_the_latest(tmp_path):
    """Capacity 3: the seed scoring 100 stays through 8 steps of worse samples (a recency
    window of the last 3 samples would have dropped it after one step of 3 samples)."""
    samples = _stored(tmp_path, [toy_sample(i, 100.0 if i == 0 else float(i)) for i in range(25)])
    pool = ParentPool(3)
    pool.add(samples[:1], None)
    for step in range(8):
        pool.add(samples[1 + 3 * step : 4 + 3 * step], None)
    assert [s.raw_reward for s in pool.nodes] == [100.0, 24.0, 23.0]
    assert [s.raw_reward for s in pool.top(2, None)] == [100.0, 24.0]


def test_a_trimmed_node_is_gone_for_good(tmp_path):
    """Trimmed at rho = 1 (fast samples win), the slow high-reward node does not come back when
    the price falls to 0."""
    slow, fast1, fast2 = _stored(
        tmp_path, [toy_sample(0, 0.9, 10.0), toy_sample(1, 0.5, 0.5), toy_sample(2, 0.4, 0.2)]
    )
    pool = ParentPool(2)
    pool.add([slow, fast1, fast2], 1.0)  # keys -9.1, 0.0, 0.2
    assert {s.id for s in pool.nodes} == {fast1.id, fast2.id}
    pool.add([], 0.0)
    assert slow.id not in [s.id for s in pool.top(2, 0.0)]


def test_ties_keep_the_older_node(tmp_path):
    samples = _stored(tmp_path, [toy_sample(i, 0.5, 2.0) for i in range(5)])
    pool = ParentPool(3)
    pool.add(samples, 0.2)
    assert [s.id for s in pool.nodes] == [s.id for s in samples[:3]]
    assert [s.id for s in rank(samples[::-1], None)] == [s.id for s in samples]


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
                st.sampled_from([0.1, 0.5, 1.0, 2.0, 4.0]),
                st.booleans(),
            ),
            max_size=5,
        ),
        min_size=1,
        max_size=6,
    ),
    prices=st.lists(st.one_of(st.none(), st.sampled_from([0.0, 0.05, 0.3, 1.0])), min_size=6),
    capacity=st.integers(1, 6),
    k=st.integers(0, 9),
)
@example(  # a tie at the new price between nodes that the old price had ordered: older wins
    steps=[[(0.0, 0.5, True), (0.0, 0.1, True)], [(0.25, 0.1, True)] * 3],
    prices=[0.05, None, None, None, None, None],
    capacity=4,
    k=0,
)
def test_pool_matches_a_repeated_argmax_reference(tmp_path_factory, steps, prices, capacity, k):
    """Another algorithm: keep the survivors by repeated argmax over the nodes and the step's
    valid samples after every step, ties to the older sample (the smaller id)."""
    flat = [(r, t, ok) for step in steps for r, t, ok in step]
    stored = _stored(
        tmp_path_factory.mktemp("b"),
        [
            toy_sample(i, r, t, status="ok" if ok else "invalid")
            for i, (r, t, ok) in enumerate(flat)
        ],
    )
    pool, kept, i = ParentPool(capacity), [], 0
    for step, price in zip(steps, prices, strict=False):
        batch, i = stored[i : i + len(step)], i + len(step)
        pool.add(batch, price)
        cand = kept + [s for s in batch if s.status == "ok"]
        kept = []
        while cand and len(kept) < capacity:
            keys = [(s.raw_reward - (price or 0.0) * s.exec_time, -s.id) for s in cand]
            kept.append(cand.pop(keys.index(max(keys))))
        assert {s.id for s in pool.nodes} == {s.id for s in kept}
    last = prices[len(steps) - 1]
    order = [s.id for s in rank(kept, last)]
    assert (
        [s.id for s in pool.top(k, last)] == [order[j % len(order)] for j in range(k)]
        if (order)
        else pool.top(k, last) == []
    )


# --- what the estimator is fed ------------------------------------------------------------------


class _Ratio:
    """A transparent estimator: rho_hat = max(0, sum of slot rewards / sum of slot times)."""

    @staticmethod
    def init_state(dtype=torch.float64, device=None):
        return types.SimpleNamespace(rho_hat=torch.tensor(0.0, dtype=dtype), r=None, t=None)

    @staticmethod
    def refit(state, slot_rewards, slot_times, generator, num_batches=1000):
        r, t = slot_rewards, slot_times
        rho = torch.clamp(r.sum() / t.sum(), min=0.0) if (t > 0).sum() >= 2 else state.rho_hat
        return types.SimpleNamespace(rho_hat=rho, r=r.clone(), t=t.clone())


def test_invalid_samples_feed_score_zero_and_their_measured_time(tmp_path):
    """Reference fact: an invalid sample adds score 0 and its measured time max(delta, 0.1) to
    its slot; the -10 and the 60 s timeout charge stay in the trained reward only. Slots here:
    (0.9, 3 s), (0, 2 s): rho_hat 0.9 / 5 = 0.18. Feeding -10 and the timeout (the previous
    rule) made it max(0, -9.1 / 63) = 0."""
    cfg = RewardConfig("rpg", timeout_s=60.0)
    accounts = Accounts(RateTracker(_Ratio, 2, 0, 10), cfg)
    ok, bad = _stored(
        tmp_path,
        [toy_sample(0, 0.9, 3.0), toy_sample(1, -10.0, 2.0, status="invalid", score=None)],
    )
    sr = accounts.account(1, [ok, bad])
    state = accounts.rates.state
    assert state.r.tolist() == [0.9, 0.0] and state.t.tolist() == [3.0, 2.0]
    assert sr.rho_hat == pytest.approx(0.18)
    # the trained reward still charges the invalid sample -10 and the full timeout
    assert sr.charged_times.tolist() == [3.0, 60.0]
    np.testing.assert_allclose(sr.rewards, [0.9 + 0.5 - 0.18 * 3.0, -10.0 - 0.18 * 60.0])
    # a script that never ran (no code block: 0 s) is fed the time floor
    none = _stored(tmp_path / "n", [toy_sample(4, -10.0, 0.0, status="invalid", score=None)])
    accounts.account(2, none)
    assert accounts.rates.state.t.tolist() == [3.1, 2.0]
    assert math.isclose(accounts.rho_hat, 0.9 / 5.1)
