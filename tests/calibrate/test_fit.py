"""The least-squares fit recovers parameters that generated the 'measurements'.

Every measured time here is a closed form written in the test (alpha-beta on a star:
a route crosses two links), never simcoll's own output.
"""

from __future__ import annotations

import pytest

from simcoll.calibrate.fit import FitPoint, estimate_points, fit, simulate_points, simulations
from simcoll.core.errors import ConfigError
from simcoll.models.estimate import SECONDS_PER_REPRESENTATIVE
from simcoll.prediction import call_cost
from simcoll.topology import LinkKind, NodeKind, switch_star
from simcoll.topology.explicit import from_document

B = 125e6  # 1 Gbit/s, bytes per second
SIZES = [4096 * 2**k for k in range(9)]  # 4 KiB .. 1 MiB: one piece per ring step


def star(n: int, latency_s: float = 2e-4):
    return switch_star(n, link_bandwidth_bytes_per_s=B, link_latency_s=latency_s,
                       link_kind=LinkKind.ETHERNET, switch_kind=NodeKind.SWITCH)  # fmt: skip


def sendrecv_s(size: int, efficiency: float, hop_s: float, step_s: float = 0.0) -> float:
    return 2 * hop_s + step_s + size / (efficiency * B)


def ring_allreduce_s(n: int, size: int, efficiency: float, hop_s: float) -> float:
    return 2 * (n - 1) * (2 * hop_s + size / n / (efficiency * B))


def ring_allgather_s(n: int, size: int, efficiency: float, hop_s: float) -> float:
    return (n - 1) * (2 * hop_s + size / n / (efficiency * B))


def test_sendrecv_recovers_efficiency_and_latency():
    points = [FitPoint("sendrecv", 4, s, sendrecv_s(s, 0.93, 30e-6)) for s in SIZES]
    result = fit(star(4), points, recipe=lambda c, n, s: "direct")
    values = result.calibration.values
    assert values["efficiency.net"] == pytest.approx(0.93, rel=1e-6)
    assert values["link_latency_s.ethernet"] == pytest.approx(30e-6, rel=1e-6)
    # one route length: a per-transfer step cost and a launch cost move times like hops
    assert result.not_identifiable == ["step_latency_s.net", "launch_s"]
    assert max(abs(e) for e in result.relative_errors) < 1e-6


def test_calibrated_on_sendrecv_predicts_ring_collectives():
    """Fitted on p2p only, the ring all-reduce and all-gather match their closed forms."""
    n, e, hop = 4, 0.9, 40e-6
    points = [FitPoint("sendrecv", n, s, sendrecv_s(s, e, hop)) for s in SIZES]
    cal = fit(star(n), points, recipe=lambda c, n, s: "direct").calibration
    targets = [FitPoint("allreduce", n, s, ring_allreduce_s(n, s, e, hop)) for s in SIZES]
    targets += [FitPoint("allgather", n, s, ring_allgather_s(n, s, e, hop)) for s in SIZES]
    simulated = simulate_points(star(n), targets, cal, recipe=lambda c, n, s: "ring")
    for point, time_s in zip(targets, simulated, strict=True):
        assert time_s == pytest.approx(point.time_s, rel=1e-6)


def test_launch_cost_is_fitted_when_it_comes_first():
    """A fixed cost per call, told apart from per-hop latency by the order asked for."""
    n, e, launch = 4, 0.8, 50e-6
    points = [FitPoint("allreduce", n, s, launch + ring_allreduce_s(n, s, e, 1e-6))
              for s in SIZES]  # fmt: skip
    result = fit(star(n, latency_s=1e-6), points, recipe=lambda c, n, s: "ring",
                 parameters=("efficiency", "launch_s"))  # fmt: skip
    assert result.calibration.values == pytest.approx({"efficiency.net": e, "launch_s": launch})


def test_step_latency_is_identifiable_across_route_lengths():
    """Routes of 2 and 3 links separate per-link latency from a per-transfer cost."""
    links = [
        {
            "from": f"gpu{r}",
            "to": "sw0" if r < 2 else "sw1",
            "kind": "ethernet",
            "bandwidth": "1 Gbit/s",
            "latency": "0.2 ms",
        }
        for r in range(3)
    ]
    links.append(
        {
            "from": "sw0",
            "to": "sw1",
            "kind": "ethernet",
            "bandwidth": "1 Gbit/s",
            "latency": "0.2 ms",
        }
    )
    nodes = [{"id": f"gpu{r}", "kind": "gpu", "rank": r} for r in range(3)]
    nodes += [{"id": "sw0", "kind": "switch"}, {"id": "sw1", "kind": "switch"}]
    graph = from_document({"nodes": nodes, "links": links}, source="t.toml")
    hop, step = 20e-6, 100e-6
    # sendrecv on 2 ranks: gpu0 <-> gpu1 (2 links); on 3 ranks the slowest pair crosses 3
    points = [FitPoint("sendrecv", 2, s, 2 * hop + step + s / B) for s in SIZES]
    points += [FitPoint("sendrecv", 3, s, 3 * hop + step + s / B) for s in SIZES]
    result = fit(graph, points, recipe=lambda c, n, s: "direct", parameters=(
        "efficiency", "link_latency_s", "step_latency_s"))  # fmt: skip
    assert result.calibration.values == pytest.approx(
        {"efficiency.net": 1.0, "link_latency_s.ethernet": hop, "step_latency_s.net": step},
        rel=1e-5,
    )


def test_errors_are_one_line():
    with pytest.raises(ConfigError, match=r"^nothing to fit: no measured point with a size"):
        fit(star(2), [FitPoint("sendrecv", 2, 0, 1e-5)], recipe=lambda c, n, s: "direct")
    with pytest.raises(ConfigError, match=r"^unknown parameter group 'bandwidth'; valid: "):
        fit(star(2), [FitPoint("sendrecv", 2, 8, 1e-5)], recipe=lambda c, n, s: "direct",
            parameters=("bandwidth",))  # fmt: skip
    with pytest.raises(ConfigError) as info:
        fit(star(2), [FitPoint("sendrecv", 2, 8, 0.0, "runs.csv")], recipe=lambda c, n, s: "direct")
    # issue 17 item 19: the message named no file
    assert str(info.value) == (
        "runs.csv: a measured time of 0.0 s (sendrecv, 8 B) is not a positive finite number; "
        "cannot fit a log error"
    )


def test_a_time_of_a_day_or_more_is_refused_naming_its_file():
    # issue 41: calibrate on a table with a 1e300 us time did not name the file
    with pytest.raises(ConfigError) as info:
        fit(star(2), [FitPoint("sendrecv", 2, 8, 1e294, "runs.csv")],
            recipe=lambda c, n, s: "direct")  # fmt: skip
    assert str(info.value) == (
        "runs.csv: a measured time of 1e+294 s (sendrecv, 8 B) is more than a day (86400 s) "
        "for one call; is it in other units?"
    )


def test_values_on_a_bound_are_named_with_it():
    # issue 41: efficiency.nvlink = 1, step_latency_s.nvlink = 0 and launch_s = 0 were
    # written as fitted values, and nothing said the data pushed them past. Measured
    # faster than the wire (S / (1.25 B), no latency at all): the efficiency stops at 1
    # and the link latency at 0, and both are named with their bound.
    points = [FitPoint("sendrecv", 4, s, sendrecv_s(s, 1.25, 0.0)) for s in SIZES]
    result = fit(star(4), points, recipe=lambda c, n, s: "direct",
                 parameters=("efficiency", "link_latency_s"))  # fmt: skip
    assert result.calibration.values == {"efficiency.net": 1.0, "link_latency_s.ethernet": 0.0}
    assert result.at_bounds == [
        "efficiency.net = 1 is at its upper bound 1",
        "link_latency_s.ethernet = 0 s is at its lower bound 0 s",
    ]
    inside = [FitPoint("sendrecv", 4, s, sendrecv_s(s, 0.93, 30e-6)) for s in SIZES]
    assert fit(star(4), inside, recipe=lambda c, n, s: "direct").at_bounds == []


def test_protocol_efficiency_scales_one_protocol():
    """LL puts 2 wire bytes per data byte and pays NCCL's 2.7 us network step latency;
    a protocol factor of 0.6 on top: T = 2 hop + 2.7 us + S / (0.5 x 0.6 x B)."""
    hop = 1e-6
    points = [FitPoint("sendrecv", 2, s, 2 * hop + 2.7e-6 + s / (0.5 * 0.6 * B)) for s in SIZES]
    result = fit(star(2, latency_s=hop), points, recipe=lambda c, n, s: "direct",
                 protocol="LL", parameters=("protocol_efficiency",))  # fmt: skip
    assert result.calibration.values == pytest.approx({"protocol_efficiency.LL": 0.6})
    # the other protocols never ran: nothing to fit them on
    assert result.not_identifiable == ["protocol_efficiency.LL128", "protocol_efficiency.simple"]
    # beside a link-class efficiency it moves the same times: the first asked for wins
    both = fit(star(2, latency_s=hop), points, recipe=lambda c, n, s: "direct",
               protocol="LL", parameters=("efficiency", "protocol_efficiency"))  # fmt: skip
    assert both.calibration.values == pytest.approx({"efficiency.net": 0.6})


def test_the_fits_memo_gives_what_predict_gives_and_reruns_one_protocol():
    """The fit's evaluator keeps simulated times by what they depend on. Its times must
    be those of simulate_points with NCCL's protocols on auto (the fastest per size), the
    launch cost added; moving the launch cost simulates nothing, and moving one
    protocol's factor simulates that protocol alone."""
    from simcoll.calibrate.fit import _Evaluator  # noqa: PLC0415
    from simcoll.topology.calibration import Calibration  # noqa: PLC0415

    n = 4
    points = [FitPoint("allreduce", n, s, 1.0) for s in (4096, 2**16, 2**20)]
    ring = lambda c, n, s: "ring"  # noqa: E731
    evaluate = _Evaluator(star(n), points, recipe=ring, protocol="auto", model="flow")
    values = {"efficiency.net": 0.8, "protocol_efficiency.LL": 0.9, "launch_s": 7e-6}
    direct = simulate_points(star(n), points, Calibration.from_values(values), recipe=ring,
                             protocol="auto")  # fmt: skip
    assert evaluate(values) == pytest.approx(direct, rel=1e-12)
    assert evaluate.simulations == 3  # LL, LL128, simple
    evaluate({**values, "launch_s": 9e-6})
    assert evaluate.simulations == 3
    evaluate({**values, "protocol_efficiency.LL": 0.7})
    assert evaluate.simulations == 4
    evaluate({**values, "efficiency.net": 0.7})
    assert evaluate.simulations == 7


def test_floor_is_the_median_zero_byte_call_and_hides_what_is_shorter():
    """nccl-tests times calls back to back: none takes less than issuing it, which its
    0-byte rows measure. Here a call costs at least 3 ms (far above the small rings'
    simulated times) and the all-reduce follows the closed form above it: the fit must
    take the floor from the 0-byte rows (median of 2.9, 3.0, 3.2 ms) and still recover
    the efficiency from the calls that take longer."""
    n, e, hop, floor = 4, 0.8, 1e-6, 3.0e-3
    points = [FitPoint("allreduce", n, 0, t) for t in (2.9e-3, 3.0e-3, 3.2e-3)]
    points += [FitPoint("allreduce", n, s, max(floor, ring_allreduce_s(n, s, e, hop)))
               for s in SIZES]  # fmt: skip
    assert sum(p.time_s == floor for p in points) >= 3  # some calls sit on the floor
    result = fit(star(n, latency_s=hop), points, recipe=lambda c, n, s: "ring",
                 parameters=("efficiency", "floor_s"))  # fmt: skip
    assert result.calibration.floor_s == floor
    assert result.calibration.values == pytest.approx({"efficiency.net": e, "floor_s": floor})
    assert max(abs(x) for x in result.relative_errors) < 1e-6
    # asked for without any 0-byte row: a one-line error naming --fit
    with pytest.raises(ConfigError, match=r"^--fit: floor_s is the time of a 0-byte call"):
        fit(star(n), points[3:], recipe=lambda c, n, s: "ring", parameters=("floor_s",))


def test_nccls_own_choice_is_simulated_once_per_point():
    """With --algorithm nccl and protocol auto, NCCL's tuning picks the protocol per
    size: the fit runs that choice (one simulation for all protocols), not the fastest
    of three."""
    from simcoll.calibrate.fit import _Evaluator  # noqa: PLC0415
    from simcoll.calibrate.gloo import Recipe  # noqa: PLC0415
    from simcoll.prediction import predict  # noqa: PLC0415

    n = 4
    sizes = (4096, 2**16, 2**20)
    points = [FitPoint("allreduce", n, s, 1.0) for s in sizes]
    evaluate = _Evaluator(star(n), points, recipe=lambda c, n, s: Recipe("nccl"),
                          protocol="auto", model="flow")  # fmt: skip
    assert evaluate.protocols == ["auto"]
    rows = predict(star(n), "allreduce", list(sizes), algorithm="nccl", protocol="auto",
                   calibration=None).rows  # fmt: skip
    assert evaluate({}) == pytest.approx([row.time_s for row in rows], rel=1e-12)
    assert evaluate.simulations == 1


def test_simulations_and_their_estimate_are_counted_before_any_runs(monkeypatch):
    # Issue 29: compare and calibrate on a 5,000-row table said nothing for an hour. The
    # estimate follows the path each call takes: on a star of 4 GPUs (no servers: no plan,
    # one channel) a ring all-reduce of 4 KiB or 8 KiB is one piece per block, on the
    # symmetric path with a period of one rank: 2 x 3 representative transfers per size;
    # the router routes each rank's connection once for both sizes, and each size looks
    # the 4 copies up for the one period it checks.
    route_s = 1e-4
    both = (route_s, route_s)  # within a server and across the fabric
    monkeypatch.setattr(call_cost, "seconds_per_route", lambda setup, costs=None: both)
    points = [FitPoint("allreduce", 4, s, 1.0) for s in (4096, 8192, 8192)]
    ring = lambda c, n, s: "ring"  # noqa: E731 - the recipe
    assert simulations(points, ring) == 2  # two distinct sizes
    seconds = estimate_points(star(4), points, None, recipe=ring, protocol="simple")
    looked_up = 2 * 4 * call_cost.SECONDS_PER_LOOKUP
    assert seconds == pytest.approx(2 * 6 * SECONDS_PER_REPRESENTATIVE + 4 * route_s + looked_up)


def test_a_size_that_cannot_run_does_not_zero_the_estimate_of_the_others(monkeypatch):
    # The SuperBench tables start at 4 B, which an 8-rank all-reduce cannot cut: the
    # estimate skipped every size of the call after it and printed "about 0 ns". (Routes
    # cost a fixed time here: timed on this machine, one slow first route under a busy
    # test run made the estimate alone 3x the other and failed the test.)
    monkeypatch.setattr(call_cost, "seconds_per_route", lambda setup, costs=None: (1e-4, 1e-4))
    ring = lambda c, n, s: "ring"  # noqa: E731 - the recipe
    alone = estimate_points(star(4), [FitPoint("allgather", 4, 4096, 1.0)], None,
                            recipe=ring, protocol="simple")  # fmt: skip
    points = [FitPoint("allgather", 4, s, 1.0) for s in (6, 4096)]  # 6 B: not 4 blocks
    both = estimate_points(star(4), points, None, recipe=ring, protocol="simple")
    assert alone > 0
    # the refused size may have paid the routes first (the cache): the same calls otherwise
    assert 0.5 * alone < both < 2 * alone


def test_a_fit_reports_every_pass_with_the_total_it_expects():
    # issue 41: the count had no total. Each pass is reported with the passes done and
    # those expected in all, an estimate the fit revises, never below the count.
    passes = []
    points = [FitPoint("sendrecv", 4, s, sendrecv_s(s, 0.93, 30e-6)) for s in SIZES]
    fit(star(4), points, recipe=lambda c, n, s: "direct",
        progress=lambda done, total: passes.append((done, total)))  # fmt: skip
    # at least one pass per parameter fitted (the Jacobian's) and the first evaluation
    assert len(passes) >= 3
    assert [done for done, _ in passes] == list(range(1, len(passes) + 1))
    assert all(total >= done for done, total in passes)
    # before the first pass the fit plans them all: the base, 4 identification columns
    # (efficiency, link latency, step latency, launch: one link class, one link kind),
    # the scan of the 2 simulated times (6 values each), 3 steps of 3 slopes and a trial
    assert passes[0][1] == 1 + 4 + 2 * 6 + 3 * (3 + 1)


def test_held_parameters_stay_and_one_parameter_of_a_group_is_fitted():
    # issue 32: a fit on top of a hardware base holds the base's parameters and fits only
    # those named (efficiency.net, not the whole efficiency group). Star of 4 over
    # "ethernet" links (class net): sendrecv is two hops of hop_s plus size/(e B).
    from simcoll.topology.calibration import Calibration  # noqa: PLC0415

    points = [FitPoint("sendrecv", 4, s, sendrecv_s(s, 0.93, 30e-6)) for s in SIZES]
    held = Calibration(link_latency_s={"ethernet": 30e-6})
    result = fit(star(4), points, recipe=lambda c, n, s: "direct", parameters=["efficiency.net"],
                 held=held)  # fmt: skip
    assert result.fitted == ["efficiency.net"]
    assert result.calibration.values == {"efficiency.net": pytest.approx(0.93, rel=1e-6)}
    assert max(abs(e) for e in result.relative_errors) < 1e-6
    with pytest.raises(ConfigError, match=r"^unknown parameter group 'bogus.net'"):
        fit(star(4), points, recipe=lambda c, n, s: "direct", parameters=["bogus.net"])


def test_a_latency_far_from_zero_is_found(monkeypatch):
    # The least squares start at 0 s for a latency; the fit first tries SCAN_S and starts
    # from the best. A ring all-gather on 4 ranks whose every step pays 40 us more: each of
    # its 3 steps is 2 hops of 200 us + 40 us + size/4/B.
    points = [FitPoint("allgather", 4, s, 3 * (2 * 2e-4 + 40e-6 + s / 4 / B)) for s in SIZES]
    result = fit(star(4), points, recipe=lambda c, n, s: "ring", parameters=["step_latency_s"])
    assert result.calibration.values["step_latency_s.net"] == pytest.approx(40e-6, rel=1e-4)
