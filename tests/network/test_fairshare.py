"""Tests of simcoll.network.fairshare: hand-derived max-min rates and their properties.

Every hand case states the system and the progressive-filling rounds that give the
expected rates. The property tests check what characterises *the* max-min fair vector
(Bertsekas & Gallager, *Data Networks*, sec. 6.5.2) on random small networks, so that they
hold whatever the solver's internals.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcoll.network.fairshare import max_min_rates, max_min_rates_sparse

INF = math.inf

# Tolerance of the properties: far above float rounding (~1e-16 per operation, a few
# dozen operations) and far below any physical difference.
REL = 1e-9

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, database=None)


def _dense(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=bool)


# -- hand-derived cases ------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_one_bottleneck_shared_by_k_flows_gives_each_c_over_k(k: int):
    # One link of c = 21 B/s carries k flows. Round 1: share c/k, every flow grows by c/k
    # and the link is full: everyone freezes at c/k.
    capacity = 21.0
    rates = max_min_rates(np.ones((k, 1), dtype=bool), [capacity])
    assert rates.tolist() == pytest.approx([capacity / k] * k, rel=1e-12)


def test_bottleneck_link_caps_one_flow_and_the_other_takes_the_rest():
    # L0 = 10 B/s carries a and b; L1 = 4 B/s carries a only.
    # Round 1: shares L0 10/2 = 5, L1 4/1 = 4 -> step 4; L1 full, a freezes at 4.
    # Round 2: b alone on L0 with 10 - 4 - 4 = 2 left: b = 4 + 2 = 6.
    rates = max_min_rates(_dense([[1, 1], [1, 0]]), [10.0, 4.0])
    assert rates.tolist() == pytest.approx([4.0, 6.0], rel=1e-12)


def test_module_docstring_example():
    # L0 = 10 carries a, b; L1 = 4 carries a, c.
    # Round 1: shares L0 5, L1 2 -> step 2; L1 full: a = c = 2 freeze.
    # Round 2: b alone on L0 with 10 - 2 - 2 = 6 left: b = 2 + 6 = 8.
    rates = max_min_rates(_dense([[1, 1], [1, 0], [0, 1]]), np.array([10.0, 4.0]))
    assert rates.tolist() == pytest.approx([2.0, 8.0, 2.0], rel=1e-12)


def test_rate_cap_docstring_example():
    # Two links of 10; a (capped at 2) crosses L0, b crosses L0 and L1.
    # The cap is a private link of 2 for a. Round 1: shares L0 5, L1 10, cap 2 -> step 2;
    # the cap is full, a freezes at 2. Round 2: b alone, L0 has 10 - 4 = 6 left, L1 8:
    # step 6, b = 2 + 6 = 8.
    rates = max_min_rates(_dense([[1, 0], [1, 1]]), [10.0, 10.0], rate_cap_bytes_per_s=[2.0, INF])
    assert rates.tolist() == pytest.approx([2.0, 8.0], rel=1e-12)


def test_parking_lot_gives_every_flow_half_a_link():
    # L0, L1, L2 of c = 6 B/s each. The long flow crosses all three; short flow s_i crosses
    # L_i only. Round 1: every link has 2 flows, share 3 -> step 3, every link full at
    # once: all four flows freeze at c/2 = 3.
    uses = _dense(
        [
            [1, 1, 1],  # long
            [1, 0, 0],  # s0
            [0, 1, 0],  # s1
            [0, 0, 1],  # s2
        ]
    )
    rates = max_min_rates(uses, [6.0, 6.0, 6.0])
    assert rates.tolist() == pytest.approx([3.0, 3.0, 3.0, 3.0], rel=1e-12)


def test_parking_lot_with_a_narrower_hop_frees_bandwidth_for_the_other_short_flow():
    # L0 = 6 and L1 = 4. long crosses both, s0 crosses L0, s1 crosses L1.
    # Round 1: shares L0 6/2 = 3, L1 4/2 = 2 -> step 2; L1 full: long = s1 = 2 freeze.
    # Round 2: s0 alone on L0 with 6 - 2*2 = 2 left: s0 = 2 + 2 = 4.
    uses = _dense([[1, 1], [1, 0], [0, 1]])
    rates = max_min_rates(uses, [6.0, 4.0])
    assert rates.tolist() == pytest.approx([2.0, 4.0, 2.0], rel=1e-12)


def test_three_bottleneck_levels_fill_in_three_rounds():
    # L0 = 3 carries a, b, c; L1 = 9 carries c, d, e; L2 = 20 carries e, f.
    # Round 1: shares L0 3/3 = 1, L1 9/3 = 3, L2 20/2 = 10 -> step 1; L0 full:
    #   a = b = c = 1 freeze. Left: L0 0, L1 9 - 3 = 6, L2 20 - 2 = 18.
    # Round 2: live d, e, f at 1. Shares L1 6/2 = 3 (d, e), L2 18/2 = 9 (e, f) -> step 3;
    #   L1 full: d = e = 4 freeze; f = 4. Left L2 = 18 - 2*3 = 12.
    # Round 3: f alone on L2: share 12 -> f = 16.
    # Check: L0 1+1+1 = 3, L1 1+4+4 = 9, L2 4+16 = 20: all full.
    uses = _dense(
        [
            [1, 0, 0],  # a
            [1, 0, 0],  # b
            [1, 1, 0],  # c
            [0, 1, 0],  # d
            [0, 1, 1],  # e
            [0, 0, 1],  # f
        ]
    )
    rates = max_min_rates(uses, [3.0, 9.0, 20.0])
    assert rates.tolist() == pytest.approx([1.0, 1.0, 1.0, 4.0, 4.0, 16.0], rel=1e-12)


def test_bottleneck_levels_a_millionth_apart_stay_distinct():
    # L0 = 2 carries a, b; L1 = 1 + 1e-6 carries c. Round 1: shares 1 and 1 + 1e-6 ->
    # step 1; only L0 is full (1e-6 is a physical difference, not float rounding).
    # Round 2: c alone on L1 with 1e-6 left: c = 1 + 1e-6.
    rates = max_min_rates(_dense([[1, 0], [1, 0], [0, 1]]), [2.0, 1.0 + 1e-6])
    assert rates.tolist() == pytest.approx([1.0, 1.0, 1.0 + 1e-6], rel=1e-12)


def test_caps_below_the_fair_share_leave_the_rest_to_the_others():
    # One link of 12 carries a (cap 2), b (no cap), c (cap 3).
    # Round 1: shares link 12/3 = 4, cap_a 2, cap_c 3 -> step 2; cap_a full: a = 2 freezes.
    #   Left: link 12 - 3*2 = 6, cap_c 1.
    # Round 2: shares link 6/2 = 3, cap_c 1 -> step 1; cap_c full: c = 3 freezes.
    #   Left: link 6 - 2*1 = 4.
    # Round 3: b alone: b = 3 + 4 = 7. Check: 2 + 7 + 3 = 12.
    rates = max_min_rates(np.ones((3, 1), dtype=bool), [12.0], rate_cap_bytes_per_s=[2.0, INF, 3.0])
    assert rates.tolist() == pytest.approx([2.0, 7.0, 3.0], rel=1e-12)


def test_a_cap_above_the_fair_share_changes_nothing():
    # One link of 10, two flows: fair share 5 each; a's cap of 100 is never reached.
    rates = max_min_rates(np.ones((2, 1), dtype=bool), [10.0], rate_cap_bytes_per_s=[100.0, INF])
    assert rates.tolist() == pytest.approx([5.0, 5.0], rel=1e-12)


def test_a_scalar_cap_applies_to_every_flow():
    # One link of 10, two flows both capped at 3 (scalar broadcast): round 1 shares
    # link 5, caps 3 -> both freeze at 3; 4 B/s stay unused.
    rates = max_min_rates(np.ones((2, 1), dtype=bool), [10.0], rate_cap_bytes_per_s=3.0)
    assert rates.tolist() == pytest.approx([3.0, 3.0], rel=1e-12)


def test_a_flow_crossing_no_link_is_unlimited_or_runs_at_its_cap():
    # Flow 0 crosses L0 alone: 4. Flow 1 crosses nothing: nothing limits it, inf.
    # Flow 2 crosses nothing but has a cap of 5: its cap. L1 carries nobody: ignored.
    rates = max_min_rates(
        _dense([[1, 0], [0, 0], [0, 0]]), [4.0, 7.0], rate_cap_bytes_per_s=[INF, INF, 5.0]
    )
    assert rates[0] == pytest.approx(4.0, rel=1e-12)
    assert rates[1] == INF
    assert rates[2] == pytest.approx(5.0, rel=1e-12)


def test_no_flows_give_an_empty_vector():
    rates = max_min_rates_sparse(
        np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.array([1.0]), n_flows=0
    )
    assert rates.shape == (0,)


@pytest.mark.parametrize(
    ("rows", "capacity", "cap"),
    [
        ([[1, 1], [1, 0], [0, 1]], [10.0, 4.0], None),
        ([[1, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 1, 1], [0, 0, 1]], [3.0, 9, 20], None),
        ([[1], [1], [1]], [12.0], [2.0, INF, 3.0]),
        ([[1, 0], [0, 0], [0, 0]], [4.0, 7.0], [INF, INF, 5.0]),
    ],
)
def test_dense_and_sparse_forms_agree(rows, capacity, cap):
    # The same system given as a matrix and as incidences listed in reverse order.
    uses = _dense(rows)
    flows, links = np.nonzero(uses)
    dense = max_min_rates(uses, capacity, rate_cap_bytes_per_s=cap)
    sparse = max_min_rates_sparse(
        flows[::-1].astype(np.int64),
        links[::-1].astype(np.int64),
        np.array(capacity, dtype=float),
        n_flows=len(rows),
        rate_cap_bytes_per_s=cap,
    )
    np.testing.assert_array_equal(sparse, dense)


# -- properties on random small networks ---------------------------------------------------

capacities = st.floats(min_value=1.0, max_value=1e12, allow_nan=False, allow_infinity=False)


@st.composite
def networks(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(uses, capacity, cap): 1-8 flows on 1-6 links, some flows capped, some on no link."""
    n_flows = draw(st.integers(1, 8))
    n_links = draw(st.integers(1, 6))
    cells = draw(st.lists(st.booleans(), min_size=n_flows * n_links, max_size=n_flows * n_links))
    uses = np.array(cells, dtype=bool).reshape(n_flows, n_links)
    capacity = np.array(draw(st.lists(capacities, min_size=n_links, max_size=n_links)))
    caps = st.one_of(st.just(INF), st.just(INF), capacities)
    cap = np.array(draw(st.lists(caps, min_size=n_flows, max_size=n_flows)))
    return uses, capacity, cap


@PROPERTY_SETTINGS
@given(networks())
def test_rates_are_feasible(network):
    uses, capacity, cap = network
    rates = max_min_rates(uses, capacity, rate_cap_bytes_per_s=cap)
    assert np.all(rates > 0)
    assert np.all(rates <= cap * (1 + REL))
    for link in range(uses.shape[1]):
        assert rates[uses[:, link]].sum() <= capacity[link] * (1 + REL)


@PROPERTY_SETTINGS
@given(networks())
def test_every_flow_has_a_bottleneck_or_reaches_its_cap(network):
    # Bertsekas-Gallager: a feasible vector is max-min fair iff every flow has a
    # bottleneck link (one it crosses that is saturated and on which no flow is faster)
    # or is held by its own cap.
    uses, capacity, cap = network
    rates = max_min_rates(uses, capacity, rate_cap_bytes_per_s=cap)
    for flow, rate in enumerate(rates):
        crossed = np.flatnonzero(uses[flow])
        if not len(crossed) and math.isinf(cap[flow]):
            assert rate == INF
            continue
        if rate >= cap[flow] * (1 - REL):
            continue
        bottlenecks = [
            link
            for link in crossed
            if rates[uses[:, link]].sum() >= capacity[link] * (1 - REL)
            and rates[uses[:, link]].max() <= rate * (1 + REL)
        ]
        assert bottlenecks, f"flow {flow} at {rate} has no bottleneck"


@PROPERTY_SETTINGS
@given(networks(), st.randoms(use_true_random=False))
def test_permuting_flows_and_links_permutes_the_rates_exactly(network, rng):
    uses, capacity, cap = network
    flow_order = np.array(rng.sample(range(uses.shape[0]), uses.shape[0]))
    link_order = np.array(rng.sample(range(uses.shape[1]), uses.shape[1]))
    rates = max_min_rates(uses, capacity, rate_cap_bytes_per_s=cap)
    permuted = max_min_rates(
        uses[np.ix_(flow_order, link_order)],
        capacity[link_order],
        rate_cap_bytes_per_s=cap[flow_order],
    )
    np.testing.assert_array_equal(permuted, rates[flow_order])


@PROPERTY_SETTINGS
@given(networks(), st.integers(-20, 20))
def test_scaling_capacities_by_a_power_of_two_scales_rates_exactly(network, exponent):
    uses, capacity, cap = network
    factor = 2.0**exponent
    rates = max_min_rates(uses, capacity, rate_cap_bytes_per_s=cap)
    scaled = max_min_rates(uses, capacity * factor, rate_cap_bytes_per_s=cap * factor)
    np.testing.assert_array_equal(scaled, rates * factor)


@PROPERTY_SETTINGS
@given(networks(), st.randoms(use_true_random=False))
def test_sparse_form_with_shuffled_incidences_equals_dense_form(network, rng):
    uses, capacity, cap = network
    flows, links = np.nonzero(uses)
    order = np.array(rng.sample(range(len(flows)), len(flows)), dtype=np.int64)
    sparse = max_min_rates_sparse(
        flows[order].astype(np.int64),
        links[order].astype(np.int64),
        capacity,
        n_flows=uses.shape[0],
        rate_cap_bytes_per_s=cap,
    )
    np.testing.assert_array_equal(sparse, max_min_rates(uses, capacity, rate_cap_bytes_per_s=cap))


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n_flows=st.integers(1, 6),
    n_links=st.integers(1, 5),
)
def test_a_weight_w_is_w_identical_flows(data: st.DataObject, n_flows: int, n_links: int):
    # Oracle: flow f with weight w_f on every link it crosses is the same as w_f copies
    # of f (unweighted), which max-min treats alike, so all copies get f's rate.
    capacity = np.array(
        data.draw(st.lists(st.integers(1, 50), min_size=n_links, max_size=n_links)), float
    )
    routes = [
        data.draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True))
        for _ in range(n_flows)
    ]
    copies = data.draw(st.lists(st.integers(1, 4), min_size=n_flows, max_size=n_flows))
    flows = np.array([f for f, r in enumerate(routes) for _ in r])
    links = np.array([link for r in routes for link in r])
    weights = np.array([float(copies[f]) for f in flows])
    weighted = max_min_rates_sparse(flows, links, capacity, n_flows=n_flows, weight_of_use=weights)
    expanded_flows, expanded_links, owner = [], [], []
    for f, r in enumerate(routes):
        for _ in range(copies[f]):
            expanded_flows += [len(owner)] * len(r)
            expanded_links += r
            owner.append(f)
    plain = max_min_rates_sparse(
        np.array(expanded_flows), np.array(expanded_links), capacity, n_flows=len(owner)
    )
    np.testing.assert_allclose(weighted[owner], plain, rtol=1e-9)
