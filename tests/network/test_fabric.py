"""Tests of simcoll.network.fabric: whole arrival timelines, derived by hand.

Each test drives a :class:`Fabric` in a bare ``simpy.Environment`` and records every
``on_arrival`` call as ``(time, ids)``, so that both the times and the grouping of arrivals
into instants are pinned.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simcoll.network.clock import on_grid
from simcoll.network.fabric import Fabric
from simcoll.network.fairshare import max_min_rates

Calls = list[tuple[float, list[int]]]


def _links(*links: int) -> np.ndarray:
    return np.array(links, dtype=np.int64)


def _fabric(
    capacity: list[float],
    *,
    contention: bool = True,
    then: Callable[[Fabric, list[int]], None] | None = None,
) -> tuple[simpy.Environment, Fabric, Calls]:
    """A fabric on links of ``capacity`` that logs arrivals, then calls ``then``."""
    env = simpy.Environment()
    calls: Calls = []

    def on_arrival(ids: list[int]) -> None:
        calls.append((env.now, list(ids)))
        if then is not None:
            then(fabric, ids)

    fabric = Fabric(env, np.array(capacity, dtype=float), on_arrival, contention=contention)
    return env, fabric, calls


def _assert_timeline(calls: Calls, expected: list[tuple[float, list[int]]]) -> None:
    assert [ids for _, ids in calls] == [ids for _, ids in expected]
    assert [t for t, _ in calls] == pytest.approx([t for t, _ in expected], rel=1e-12)


# -- the worked example and sharing over time ---------------------------------------------

A, B, C = 0, 1, 2


def _worked_example() -> tuple[Fabric, Calls]:
    # L0 = 10, L1 = 4 B/s. a: L0+L1, 8 B, from 0. b: L0, 16 B, from 0. c: L1, 4 B, from 1.
    env, fabric, calls = _fabric([10.0, 4.0])
    fabric.send(A, _links(0, 1), 8.0, 0.0)
    fabric.send(B, _links(0), 16.0, 0.0)
    fabric.send(C, _links(1), 4.0, 1.0)
    env.run()
    return fabric, calls


def test_worked_example_timeline():
    # t = 0: L1 (4, a only) saturates first: a = 4; b gets L0's rest: 10 - 4 = 6.
    # t = 1: a has 8 - 4 = 4 B left, b 16 - 6 = 10 B; c joins L1.
    #   L0: a, b share 5; L1: a, c share 2 -> L1 full at a = c = 2; b = 10 - 2 = 8.
    # b ends at 1 + 10/8 = 2.25; a and c then have 4 - 2*1.25 = 1.5 B left each.
    # t = 2.25: L0 carries a alone (share 10), L1 carries a, c (share 2): a = c = 2.
    # a and c end at 2.25 + 1.5/2 = 3.0, the same instant: one call, ids in order.
    fabric, calls = _worked_example()
    _assert_timeline(calls, [(2.25, [B]), (3.0, [A, C])])
    # Work: instants 0, 1, 2.25, 3. Reshares at 0 (a, b join), 1 (c joins: component
    # {a, b, c}), 2.25 (b leaves: component {a, c}); at 3 the component is empty.
    assert fabric.stats.instants == 4
    assert fabric.stats.reshares == 3
    assert fabric.stats.flow_rate_updates == 2 + 3 + 2
    assert fabric.n_in_flight == 0


def test_worked_example_is_deterministic_to_the_last_bit():
    _, first = _worked_example()
    _, second = _worked_example()
    assert first == second


def test_a_flow_arriving_midway_halves_the_link():
    # One link of 10 B/s. x: 30 B from 0; y: 10 B from 1.
    # 0..1: x alone at 10, 20 B left. From 1 both at 5: y ends at 1 + 10/5 = 3;
    # x has 20 - 5*2 = 10 B left, alone again at 10: ends at 3 + 10/10 = 4.
    # (Check: 40 B in total on a 10 B/s link that never idles: 4 s.)
    env, fabric, calls = _fabric([10.0])
    fabric.send(0, _links(0), 30.0, 0.0)
    fabric.send(1, _links(0), 10.0, 1.0)
    env.run()
    _assert_timeline(calls, [(3.0, [1]), (4.0, [0])])
    fabric.close()
    assert fabric.link_busy_s[0] == pytest.approx(4.0, rel=1e-12)


def test_a_capped_flow_leaves_the_rest_of_the_link_to_the_others():
    # One link of 10 B/s. a: 4 B capped at 2 B/s; b: 20 B uncapped; both from 0.
    # a = 2 (its cap), b = 10 - 2 = 8. a ends at 4/2 = 2.0; b has 20 - 16 = 4 B left,
    # alone at 10: ends at 2 + 4/10 = 2.4.
    env, fabric, calls = _fabric([10.0])
    fabric.send(0, _links(0), 4.0, 0.0, rate_cap_bytes_per_s=2.0)
    fabric.send(1, _links(0), 20.0, 0.0)
    env.run()
    _assert_timeline(calls, [(2.0, [0]), (2.4, [1])])


def test_without_contention_every_flow_runs_at_its_bottleneck():
    # The worked example with contention=False: a at min(10, 4) = 4 ends at 8/4 = 2;
    # b at 10 ends at 16/10 = 1.6; c at 4 from 1 ends at 1 + 4/4 = 2; d shares L0 with b
    # but still runs at 10: 5 B end at 0.5. e (L0, 6 B) is capped at 3 B/s: ends at 2.
    env, fabric, calls = _fabric([10.0, 4.0], contention=False)
    fabric.send(A, _links(0, 1), 8.0, 0.0)
    fabric.send(B, _links(0), 16.0, 0.0)
    fabric.send(C, _links(1), 4.0, 1.0)
    fabric.send(3, _links(0), 5.0, 0.0)
    fabric.send(4, _links(0), 6.0, 0.0, rate_cap_bytes_per_s=3.0)
    env.run()
    _assert_timeline(calls, [(0.5, [3]), (1.6, [B]), (2.0, [A, C, 4])])


# -- zero bytes, the past, and follow-ups -------------------------------------------------


def test_zero_byte_flows_arrive_at_their_start_and_take_no_bandwidth():
    # One link of 10. x: 10 B from 0 ends at 1.0 whatever the empty flows do.
    # z0: 0 B at 0 arrives at 0; z1: 0 B at 1.5 arrives at 1.5.
    env, fabric, calls = _fabric([10.0])
    fabric.send(0, _links(0), 10.0, 0.0)
    fabric.send(1, _links(0), 0.0, 0.0)
    fabric.send(2, _links(0), 0.0, 1.5)
    env.run()
    _assert_timeline(calls, [(0.0, [1]), (1.0, [0]), (1.5, [2])])
    fabric.close()
    # Busy only while x moves bytes: 0..1.
    assert fabric.link_busy_s[0] == pytest.approx(1.0, rel=1e-12)


def test_a_start_in_the_past_is_treated_as_now():
    # A process at t = 2 hands over 10 B on a 10 B/s link "from" t = 1: it starts at 2
    # (nothing can move before it is handed over) and ends at 2 + 1 = 3, not 2.
    env, fabric, calls = _fabric([10.0])

    def late_sender():
        yield env.timeout(2.0)
        fabric.send(0, _links(0), 10.0, 1.0)

    env.process(late_sender())
    env.run()
    _assert_timeline(calls, [(3.0, [0])])


@pytest.mark.parametrize("k", [1, 2, 5])
def test_on_arrival_may_send_follow_up_flows_at_the_same_instant(k: int):
    # A chain of k flows of s = 3 B on one link of c = 2 B/s, each sent from the arrival
    # of the previous one with start_s = now: each takes s/c = 1.5 s, flow i ends at
    # (i + 1) * 1.5 and the chain at k * s / c.
    def follow_up(fabric: Fabric, ids: list[int]) -> None:
        if ids[-1] < k - 1:
            fabric.send(ids[-1] + 1, _links(0), 3.0, fabric.env.now)

    env, fabric, calls = _fabric([2.0], then=follow_up)
    fabric.send(0, _links(0), 3.0, 0.0)
    env.run()
    _assert_timeline(calls, [((i + 1) * 1.5, [i]) for i in range(k)])
    assert calls[-1][0] == pytest.approx(k * 3.0 / 2.0, rel=1e-12)
    # One reshare per join (k instants); the last arrival leaves an empty component.
    assert fabric.stats.instants == k + 1
    assert fabric.stats.reshares == k


def test_a_follow_up_sent_at_an_arrival_shares_with_the_flows_still_in_flight():
    # One link of 10. x: 10 B, y: 30 B from 0, both at 5: x ends at 2, y has 20 B left.
    # x's arrival sends z (10 B, now): y and z at 5: z ends at 2 + 10/5 = 4; y has
    # 20 - 10 = 10 B left, alone at 10: ends at 5.
    def follow_up(fabric: Fabric, ids: list[int]) -> None:
        if ids == [0]:
            fabric.send(2, _links(0), 10.0, fabric.env.now)

    env, fabric, calls = _fabric([10.0], then=follow_up)
    fabric.send(0, _links(0), 10.0, 0.0)
    fabric.send(1, _links(0), 30.0, 0.0)
    env.run()
    _assert_timeline(calls, [(2.0, [0]), (4.0, [2]), (5.0, [1])])
    # x leaving and z joining at t = 2 cost one reshare: reshares at 0, 2, 4.
    assert fabric.stats.reshares == 3


# -- sends from other processes while the fabric sleeps -----------------------------------


def test_a_send_from_another_process_wakes_a_sleeping_fabric():
    # One link of 10. x: 20 B from 0 would end at 2. At 0.5 a process sends y (10 B,
    # from 0.5): x has 15 B left, both at 5: y ends at 0.5 + 10/5 = 2.5; x has
    # 15 - 10 = 5 B left, alone at 10: ends at 3.0. (Had the fabric slept through 0.5,
    # x would end at 2.0.)
    env, fabric, calls = _fabric([10.0])
    fabric.send(0, _links(0), 20.0, 0.0)

    def sender():
        yield env.timeout(0.5)
        fabric.send(1, _links(0), 10.0, env.now)

    env.process(sender())
    env.run()
    _assert_timeline(calls, [(2.5, [1]), (3.0, [0])])


def test_a_send_wakes_an_idle_fabric():
    # Nothing in flight until 0.5; then 10 B on 10 B/s: ends at 1.5.
    env, fabric, calls = _fabric([10.0])

    def sender():
        yield env.timeout(0.5)
        fabric.send(0, _links(0), 10.0, env.now)

    env.process(sender())
    env.run()
    _assert_timeline(calls, [(1.5, [0])])


def test_a_send_for_a_later_start_wakes_the_fabric_at_that_start():
    # One link of 10. x: 20 B from 0 would end at 2. At 0.5 a process sends y (10 B)
    # to start at 1.0, before x's end: at 1.0 x has 10 B left, y 10 B, both at 5: both
    # end at 1 + 10/5 = 3.0, in one call.
    env, fabric, calls = _fabric([10.0])
    fabric.send(0, _links(0), 20.0, 0.0)

    def sender():
        yield env.timeout(0.5)
        fabric.send(1, _links(0), 10.0, 1.0)

    env.process(sender())
    env.run()
    _assert_timeline(calls, [(3.0, [0, 1])])


def test_a_send_starting_after_the_pending_wake_up_does_not_disturb_it():
    # Links 0, 1, 2 of 10 B/s. x: 10 B on L0 from 0, ends at 1.0.
    # At 0.25 a process sends y (10 B, L1) to start at 2.0, after x's end: y runs 2..3.
    # At 0.5 it sends z (2 B, L2, now): the fabric must still wake for it: z runs
    # 0.5..0.7. (If the first send left the fabric marked awake, z would wait for 1.0.)
    env, fabric, calls = _fabric([10.0, 10.0, 10.0])
    fabric.send(0, _links(0), 10.0, 0.0)

    def sender():
        yield env.timeout(0.25)
        fabric.send(1, _links(1), 10.0, 2.0)
        yield env.timeout(0.25)
        fabric.send(2, _links(2), 2.0, env.now)

    env.process(sender())
    env.run()
    _assert_timeline(calls, [(0.7, [2]), (1.0, [0]), (3.0, [1])])
    # Something happened at 0, 0.5, 0.7, 1, 2 and 3, and nothing at 0.25.
    assert fabric.stats.instants == 6


def test_flows_sent_by_two_processes_at_one_instant_cost_one_reshare():
    # One link of 10. w: 30 B from 0. At 1.0 two processes each send 10 B (now).
    # w alone at 10 until 1 (20 B left); then three flows at 10/3: the two new ones end
    # at 1 + 10/(10/3) = 4; w has 20 - 10 = 10 B left, alone: ends at 5.
    # Rates change once at 1.0 (w and the two new flows: 3 updates), so the fabric should
    # reshare at 0, 1 and 4: 3 reshares and 1 + 3 + 1 = 5 flow rate updates.
    env, fabric, calls = _fabric([10.0])
    fabric.send(0, _links(0), 30.0, 0.0)

    def sender(flow_id: int):
        yield env.timeout(1.0)
        fabric.send(flow_id, _links(0), 10.0, env.now)

    env.process(sender(1))
    env.process(sender(2))
    env.run()
    _assert_timeline(calls, [(4.0, [1, 2]), (5.0, [0])])
    assert fabric.stats.instants == 4
    assert fabric.stats.reshares == 3
    assert fabric.stats.flow_rate_updates == 5


# -- instants, order and determinism ------------------------------------------------------


def test_flows_ending_together_arrive_in_one_call_in_increasing_id_order():
    # Three disjoint links of 1 B/s, 2 B each, sent in id order 7, 3, 5: all end at 2.0.
    env, fabric, calls = _fabric([1.0, 1.0, 1.0])
    for link, flow_id in enumerate([7, 3, 5]):
        fabric.send(flow_id, _links(link), 2.0, 0.0)
    env.run()
    _assert_timeline(calls, [(2.0, [3, 5, 7])])


def test_finish_times_one_rounding_apart_are_one_instant():
    # Two disjoint links of 1 B/s. x: 0.3 B from 0 ends at 0.3. y: 0.2 B from 0.1 ends at
    # 0.1 + 0.2, which is 0.30000000000000004 in floats: one ulp later, the same instant.
    env, fabric, calls = _fabric([1.0, 1.0])
    fabric.send(0, _links(0), 0.3, 0.0)
    fabric.send(1, _links(1), 0.2, 0.1)
    env.run()
    _assert_timeline(calls, [(0.3, [0, 1])])


def _random_run(seed: int) -> tuple[Calls, list[float]]:
    # 40 flows over 6 links (routes of 1-3 links), random sizes and starts, and a
    # follow-up flow for every arrival of an even id.
    rng = np.random.default_rng(seed)
    next_id = [40]

    def follow_up(fabric: Fabric, ids: list[int]) -> None:
        for flow_id in ids:
            if flow_id % 2 == 0 and flow_id < 40:
                fabric.send(next_id[0], _links(flow_id % 6), 1.0 + flow_id, fabric.env.now)
                next_id[0] += 1

    env, fabric, calls = _fabric(list(rng.uniform(1.0, 10.0, size=6)), then=follow_up)
    for flow_id in range(40):
        route = rng.choice(6, size=rng.integers(1, 4), replace=False).astype(np.int64)
        fabric.send(flow_id, route, rng.uniform(0.0, 50.0), rng.uniform(0.0, 5.0))
    env.run()
    fabric.close()
    return calls, fabric.link_busy_s.tolist()


def test_repeated_runs_give_identical_float_logs():
    first = _random_run(seed=3)
    second = _random_run(seed=3)
    assert first == second
    calls, _ = first
    arrived = sorted(flow_id for _, ids in calls for flow_id in ids)
    assert arrived == list(range(60))  # 40 flows and 20 follow-ups, each exactly once
    times = [t for t, _ in calls]
    assert times == sorted(times)


# -- work counters: one reshare per instant, only the changed component ------------------


@pytest.mark.parametrize("n", [1, 4, 9])
def test_flows_starting_together_cost_one_reshare(n: int):
    # n flows of 5 B on n separate links of 10 B/s, all from 0: all end at 0.5.
    # Instant 0: all join, one reshare rating the n flows (the changed links are the
    # whole component). Instant 0.5: all leave; the changed links now carry nobody, so
    # the component is empty and nothing is reshared. Per-flow resharing would have
    # cost n reshares and 1 + 2 + ... + n rate updates.
    env, fabric, calls = _fabric([10.0] * n)
    for i in range(n):
        fabric.send(i, _links(i), 5.0, 0.0)
    env.run()
    _assert_timeline(calls, [(0.5, list(range(n)))])
    assert fabric.stats.instants == 2
    assert fabric.stats.reshares == 1
    assert fabric.stats.flow_rate_updates == n


def test_a_flow_on_disjoint_links_does_not_rerate_the_others():
    # Links 0, 1 of 10. x: 10 B on L0 from 0 (ends at 1.0); y: 5 B on L1 from 0.5.
    # At 0.5 only y's component ({y}) is rerated: updates go 1 -> 2, not 3. x keeps its
    # end at 1.0; y ends at 0.5 + 0.5 = 1.0 too: one call.
    env, fabric, calls = _fabric([10.0, 10.0])
    fabric.send(0, _links(0), 10.0, 0.0)
    fabric.send(1, _links(1), 5.0, 0.5)
    env.run(until=0.75)
    assert fabric.stats.flow_rate_updates == 2
    env.run()
    _assert_timeline(calls, [(1.0, [0, 1])])


def test_a_flow_on_a_shared_link_rerates_its_whole_component_and_nothing_else():
    # Links 0..3 of 10. x on L0, w on L0+L1, v on L3, all from 0 with 100 B.
    # y joins L1 at 0.5: its component is {y, w (L1), x (L0 via w)}, not v:
    # updates at 0: 3 (x, w, v); at 0.5: 3. Total 6, where a full reshare would give 7.
    env, fabric, _ = _fabric([10.0] * 4)
    fabric.send(0, _links(0), 100.0, 0.0)
    fabric.send(1, _links(0, 1), 100.0, 0.0)
    fabric.send(2, _links(3), 100.0, 0.0)
    fabric.send(3, _links(1), 100.0, 0.5)
    env.run(until=0.75)
    assert fabric.stats.reshares == 2
    assert fabric.stats.flow_rate_updates == 3 + 3


@pytest.mark.parametrize("joiners", [1, 20])  # 20: past the small-component path
def test_a_flow_whose_rate_stands_keeps_its_finish_time_to_the_bit(joiners: int):
    # L0 = 7 B/s, L1 = 1000 B/s. x: 1.1 B on L0+L1 from 0 at 7 B/s (L0): it ends at
    # 1.1 / 7.0 on the clock's grid. Flows of 1 B join L1 at 0.1 and share the 993 B/s
    # x leaves there, so x's rate stands and its finish time is not recomputed: x is
    # rated once (at 0), the joiners once each.
    env, fabric, calls = _fabric([7.0, 1000.0])
    fabric.send(0, _links(0, 1), 1.1, 0.0)
    for k in range(joiners):
        fabric.send(1 + k, _links(1), 1.0, 0.1)
    env.run()
    assert [t for t, ids in calls if 0 in ids] == [on_grid(1.1 / 7.0)]
    assert [t for t, ids in calls if 1 in ids] == pytest.approx([0.1 + joiners / 993.0])


def test_a_component_seen_in_another_slot_order_reuses_its_rates():
    # Links 0, 1 of 10 B/s. a: 10 B on L0+L1, b: 10 B on L1, from 0: 5 B/s each (L1),
    # both end at 2.0. Their arrival sends a': L0+L1 and b': L1, 10 B each, which take
    # the freed slots the other way round (the free list pops the last freed first), so
    # the component is the same flows in another slot order: one max-min computation
    # in all, and a', b' end at 2.0 + 2.0.
    def again(fabric: Fabric, ids: list[int]) -> None:
        if ids == [0, 1]:
            fabric.send(2, _links(0, 1), 10.0, 2.0)
            fabric.send(3, _links(1), 10.0, 2.0)

    env, fabric, calls = _fabric([10.0, 10.0], then=again)
    fabric.send(0, _links(0, 1), 10.0, 0.0)
    fabric.send(1, _links(1), 10.0, 0.0)
    env.run()
    _assert_timeline(calls, [(2.0, [0, 1]), (4.0, [2, 3])])
    assert fabric.stats.reshares == 2
    assert fabric.stats.rate_computations == 1


def test_many_flows_outgrow_the_initial_storage():
    # 150 flows (more than the 64 + 64 slots of two growths) of 2 B on one link of
    # 300 B/s: each at 2 B/s, all end at 1.0 in one call.
    env, fabric, calls = _fabric([300.0])
    for i in range(150):
        fabric.send(i, _links(0), 2.0, 0.0)
    assert fabric.n_in_flight == 150
    env.run()
    _assert_timeline(calls, [(1.0, list(range(150)))])
    assert fabric.n_in_flight == 0


# -- link busy time -----------------------------------------------------------------------


def test_link_busy_time_counts_only_the_intervals_with_flows():
    # L0 of 10: 20 B from 0 (busy 0..2), 10 B from 3 (busy 3..4): 3.0 s busy.
    # L1 never used: 0. close() at 3.5 counts the flow in flight up to 3.5: 2.5 s;
    # the rest (3.5..4) is added when it ends, and a second close() adds nothing.
    env, fabric, _ = _fabric([10.0, 10.0])
    fabric.send(0, _links(0), 20.0, 0.0)
    fabric.send(1, _links(0), 10.0, 3.0)
    env.run(until=3.5)
    fabric.close()
    assert fabric.link_busy_s.tolist() == pytest.approx([2.5, 0.0], rel=1e-12)
    env.run()
    fabric.close()
    assert fabric.link_busy_s.tolist() == pytest.approx([3.0, 0.0], rel=1e-12)


# -- against a naive fluid simulation -----------------------------------------------------


def _reference_arrivals(
    capacity: list[float], flows: list[tuple[tuple[int, ...], float, float]]
) -> list[float]:
    """Arrival time of each (route, size, start) flow, resharing everything at every event."""
    uses = np.zeros((len(flows), len(capacity)), dtype=bool)
    for f, (route, _, _) in enumerate(flows):
        uses[f, list(route)] = True
    start = np.array([s for _, _, s in flows])
    left = np.array([size for _, size, _ in flows])
    arrival = np.full(len(flows), math.nan)
    now = 0.0
    while np.isnan(arrival).any():
        active = (start <= now) & np.isnan(arrival)
        rate = max_min_rates(uses[active], capacity)
        waits = [*(start[start > now] - now), *(left[active] / rate)]
        step = min(waits)
        left[active] -= rate * step
        now += step
        ends = np.flatnonzero(active)[left[active] <= 1e-9 * rate]
        arrival[ends] = now
    return arrival.tolist()


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[float], list[tuple[tuple[int, ...], float, float]]]:
    n_links = draw(st.integers(1, 4))
    capacity = [
        float(c) for c in draw(st.lists(st.integers(1, 10), min_size=n_links, max_size=n_links))
    ]
    route = st.sets(st.integers(0, n_links - 1), min_size=1).map(lambda s: tuple(sorted(s)))
    flow = st.tuples(route, st.integers(1, 100).map(float), st.integers(0, 8).map(lambda t: t / 2))
    return capacity, draw(st.lists(flow, min_size=1, max_size=6))


@settings(max_examples=100, deadline=None, database=None)
@given(scenarios())
def test_fabric_matches_a_naive_fluid_simulation(scenario):
    capacity, flows = scenario
    env, fabric, calls = _fabric(capacity)
    for flow_id, (route, size, start) in enumerate(flows):
        fabric.send(flow_id, _links(*route), size, start)
    env.run()
    arrival = {flow_id: t for t, ids in calls for flow_id in ids}
    assert sorted(arrival) == list(range(len(flows)))
    expected = _reference_arrivals(capacity, flows)
    assert [arrival[f] for f in range(len(flows))] == pytest.approx(expected, rel=1e-9)


@settings(max_examples=100, deadline=None, database=None)
@given(scenarios())
def test_without_contention_each_flow_takes_size_over_bottleneck(scenario):
    capacity, flows = scenario
    env, fabric, calls = _fabric(capacity, contention=False)
    for flow_id, (route, size, start) in enumerate(flows):
        fabric.send(flow_id, _links(*route), size, start)
    env.run()
    arrival = {flow_id: t for t, ids in calls for flow_id in ids}
    expected = [
        start + size / min(capacity[link] for link in route) for route, size, start in flows
    ]
    assert [arrival[f] for f in range(len(flows))] == pytest.approx(expected, rel=1e-12)
