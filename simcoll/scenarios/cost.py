"""What a sweep will cost, said before it starts: summed simulation seconds and the largest
point's memory; refused over a limit.

Each point is estimated by the path it will take: its calls are set up as they will run
(:func:`simcoll.prediction.call.call_setup`: NCCL's plan for the calling GPUs, the
protocols) and each is costed by :func:`simcoll.prediction.call_cost.call_estimates`,
which follows :func:`~simcoll.prediction.call.decide` (per-call tuning, the choices it
will simulate, the symmetric ring's period and routing, the channel-copies and general
paths) without simulating. A workload point is run with its collectives recorded, not
simulated (:func:`simcoll.prediction.session.recording_calls`), and each distinct call
(the same group, size and knobs once, as a session decides it) is estimated so; its
memory is that of all its distinct calls, which one session holds at once. A workload
whose calls run on two streams of one rank (FSDP's gathers and scatters, concurrent
groups) may run them together transfer by transfer: each of its calls counts once more
on the general path. Closed-form models (``analytical``, ``nccl``) cost nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from simcoll.algorithms import PARAM_MAXIMUM
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.limits import MAX_RANKS, check_count
from simcoll.core.units import format_bytes, format_duration
from simcoll.models.estimate import BYTES_PER_TRANSFER, SECONDS_PER_TRANSFER
from simcoll.plan.placement import place_ranks
from simcoll.prediction.call import DEFAULTS, Machine, call_setup
from simcoll.prediction.call_cost import CallCosts, call_estimates
from simcoll.prediction.session import RecordedCall
from simcoll.prediction.simulated import Setup
from simcoll.scenarios.points import (
    placement_beside,
    point_calibration,
    scenario_topology,
    timeline_points,
)
from simcoll.scenarios.scenario import Scenario

__all__ = [
    "DEFAULT_MAX_HOURS",
    "SECONDS_PER_RUN",
    "SECONDS_PER_SPAN",
    "SECONDS_PER_TIMELINE",
    "check_cost",
    "estimate_run",
    "estimate_sweep",
    "point_estimates",
]

#: A sweep whose estimate is longer than this is refused unless the caller raises it.
DEFAULT_MAX_HOURS = 12.0
_CLOSED_FORMS = ("analytical", "nccl")


@dataclass
class _Cache:
    """What estimating many points of one sweep computes once: machines, call setups,
    exact periods and route costs."""

    machines: dict[tuple[int, int], Machine] = field(default_factory=dict)
    setups: dict[tuple[object, ...], Setup] = field(default_factory=dict)
    costs: CallCosts = field(default_factory=CallCosts)


#: What keeping one point's timeline costs besides its simulation: its Perfetto trace and
#: its three plots (Gantt, links, links over time), ``SECONDS_PER_TIMELINE`` plus
#: ``SECONDS_PER_SPAN`` per span (an op on one rank). Measured: 12 all-reduce points of
#: h100-ib-fat-tree with `timelines = "all"` took 17.1 s where their simulations were
#: estimated at 5.8 s (issue 29: 484 ms estimated, about 70 s taken, before this count);
#: ddp-buckets' first point (1 MiB buckets, 18,432 spans) about 1.8 s since a trace keeps
#: at most 20,000 transfers (5.3 s before, with all 92,160).
SECONDS_PER_TIMELINE = 0.9
SECONDS_PER_SPAN = 0.06e-3
#: What a run costs besides its points: starting, and writing its tables and plots.
#: Measured: ``simcoll run`` of ring-allreduce-law (8 points simulated in about 61 ms)
#: took 0.99 s; of scaling-designs (23 ms) 1.0 s.
SECONDS_PER_RUN = 0.9


def estimate_sweep(scenario: Scenario) -> tuple[float, int, int]:
    """``(seconds, peak_bytes, n_estimated)``: the run's own cost (:data:`SECONDS_PER_RUN`)
    and summed simulation seconds over the points it can estimate, plus each timeline
    kept (:data:`SECONDS_PER_TIMELINE`, :data:`SECONDS_PER_SPAN`); the largest peak memory
    of one point, and how many points were estimated (a point whose values are wrong is
    left to report its own error)."""
    per_point, peak, counted = _point_estimates(scenario)
    return SECONDS_PER_RUN + sum(per_point.values()), peak, counted


def point_estimates(scenario: Scenario) -> dict[int, float]:
    """Estimated seconds of each point that can be estimated, by its index (its
    simulation and its timeline, if kept): the weights of ``run``'s progress bar."""
    return _point_estimates(scenario)[0]


_LAST: list[tuple[Scenario, tuple[dict[int, float], int, int]]] = []  # the last scenario's


def _point_estimates(scenario: Scenario) -> tuple[dict[int, float], int, int]:
    """``(seconds by point index, peak_bytes, n_estimated)``, kept for the last scenario
    asked about (``run`` checks the estimate, then weighs its bar by it)."""
    if _LAST and _LAST[0][0] is scenario:
        return _LAST[0][1]
    points = scenario.points()
    timelines = timeline_points(scenario, points)
    per_point: dict[int, float] = {}
    peak, counted = 0, 0
    cache = _Cache()
    for point in points:
        file, overrides, params = scenario.setup(point)
        try:
            topology = scenario_topology(scenario, file, overrides)
            found = _estimate(scenario.kind, topology, dict(params), cache, scenario.base)
        except SimcollError:
            continue  # the point will report it
        seconds = 0.0
        if point.index in timelines:
            seconds += SECONDS_PER_TIMELINE + (found[2] if found else 0) * SECONDS_PER_SPAN
        if found is not None:
            seconds += found[0]
            peak = max(peak, found[1])
            counted += 1
        per_point[point.index] = seconds
    result = (per_point, peak, counted)
    _LAST[:] = [(scenario, result)]
    return result


def _estimate(
    kind: str, topology: nx.DiGraph[str], params: dict[str, Any], cache: _Cache, base: Path
) -> tuple[float, int, int] | None:
    """``(seconds, peak_bytes, spans)`` of one point (``spans``: its timeline's, an op on
    one rank each), or None where it cannot tell."""
    params.pop("kind", None)
    model = str(params.pop("model", "flow"))
    named = params.pop("protocol", DEFAULTS.protocol)
    if named is not None and not isinstance(named, str):
        return None  # the point reports it (workload.protocol: must be a protocol name)
    protocol = None if named == "none" else named
    calibration = point_calibration(topology, params.pop("calibration", "default"), base)
    placement = placement_beside(params.pop("placement", DEFAULTS.placement), base)
    for engine_only in ("plan", "in_place"):
        params.pop(engine_only, None)
    if model in _CLOSED_FORMS:
        return 0.0, 0, 0
    machine = cache.machines.get((id(topology), id(calibration)))
    if machine is None:
        machine = cache.machines[id(topology), id(calibration)] = Machine.of(topology, calibration)
    calls: list[_Call | None]
    meet = False
    if kind == "collective":
        calls = [_collective_call(params, machine, placement)]
        spans = len(calls[0].nodes) if calls[0] else 0
    else:
        calls, meet, spans = _workload_calls(kind, machine, model, protocol, params)
    if None in calls:
        return None
    # A session decides each distinct call once, as predict does (fast paths included);
    # calls on two streams of one rank may meet on a link and run again in its graph.
    distinct = list({_key(call): call for call in calls if call}.values())
    setups = [_setup(machine, call, model, protocol, cache) for call in distinct]
    estimates = [e for setup, call in zip(setups, distinct, strict=True)
                 for e in call_estimates(setup, call.size_bytes, cache.costs)]  # fmt: skip
    if meet:  # each distinct call once more, transfer by transfer (those that meet run so;
        # counting every repeat of a training step's hundred thousand calls would refuse
        # steps that run in a minute)
        for setup, call in zip(setups, distinct, strict=True):
            estimates += call_estimates(setup, call.size_bytes, cache.costs, general=True)
    seconds = sum(e.seconds for e in estimates)
    if kind == "collective":  # one candidate's schedule at a time
        return seconds, max((e.peak_bytes for e in estimates), default=0), spans
    return seconds, sum(e.peak_bytes for e in estimates), spans  # a session holds all calls


def estimate_run(
    kind: str,
    topology: nx.DiGraph[str],
    params: Mapping[str, Any],
    *,
    base: Path | None = None,
) -> tuple[float, int] | None:
    """``(seconds, peak_bytes)`` one scenario point of ``kind`` (``collective`` or a
    workload) with these workload parameters is expected to take, or None where it
    cannot tell; files named in ``params`` are relative to ``base`` (default: here)."""
    found = _estimate(kind, topology, dict(params), _Cache(), base or Path.cwd())
    return None if found is None else found[:2]


@dataclass(frozen=True)
class _Call:
    collective: str
    algorithm: str | None
    nodes: tuple[str, ...]
    size_bytes: int
    params: Mapping[str, int]


def _collective_call(params: dict[str, Any], machine: Machine, placement: object) -> _Call | None:
    collective, size, n = params.get("collective"), params.get("size_bytes"), params.get("n_ranks")
    n = n or machine.n_gpus
    knobs = {k: v for k, v in params.items() if k not in ("collective", "size_bytes", "n_ranks",
             "algorithm", "kind")}  # fmt: skip
    if not isinstance(collective, str) or not isinstance(n, int) or not isinstance(size, int):
        return None
    if not isinstance(placement, str) or n > machine.n_gpus:
        return None
    for key, value in knobs.items():  # a bad one is the point's own error, not the estimate's
        try:
            check_count(value, key, PARAM_MAXIMUM.get(key, MAX_RANKS), minimum=int(key != "root"))
        except ConfigError:
            return None
    named = params.get("algorithm")
    nodes = place_ranks(machine.topology, n, placement)
    return _Call(collective, None if named is None else str(named), nodes, size, knobs)


def _workload_calls(
    kind: str, machine: Machine, model: str, protocol: Any, params: dict[str, Any]
) -> tuple[list[_Call | None], bool, int]:
    """The calls a workload point makes, recorded without simulating them, whether calls
    on two streams of one rank may run at once (:func:`_streams_meet`), and its ops' spans
    (one per op and rank)."""
    from simcoll.prediction.session import recording_calls  # noqa: PLC0415 - with the workloads
    from simcoll.scenarios.workloads import run_workload  # noqa: PLC0415 - pulls in SimPy

    with recording_calls() as recorded:
        try:
            run_workload(kind, machine.topology, model=model, protocol=protocol, **params)
        except SimcollError:
            raise  # bad parameters: the point will say so
        except (ArithmeticError, ValueError):
            pass  # metrics of calls that took no time: only the calls are needed
    gpus = machine.gpus(machine.n_gpus)
    comms = [r for r in recorded if r.collective != "compute"]
    calls: list[_Call | None] = [
        _Call(r.collective, r.algorithm, tuple(gpus[i] for i in r.ranks), r.size_bytes,
              dict(r.params))
        for r in comms
    ]  # fmt: skip
    return calls, _streams_meet(comms), sum(len(r.ranks) for r in recorded)


def _key(call: _Call) -> tuple[object, ...]:
    return (call.collective, call.algorithm, call.nodes, call.size_bytes,
            tuple(sorted(call.params.items())))  # fmt: skip


def _setup(machine: Machine, call: _Call, model: str, protocol: str | None, cache: _Cache) -> Setup:
    """The call as :func:`~simcoll.prediction.call.call_setup` sets it up (once per group
    and knobs: the plan is the group's)."""
    key = (id(machine), call.collective, call.algorithm, call.nodes, model, protocol,
           tuple(sorted(call.params.items())))  # fmt: skip
    if key not in cache.setups:
        cache.setups[key] = call_setup(machine, call.collective, call.nodes,
                                       algorithm=call.algorithm, protocol=protocol, model=model,
                                       params=dict(call.params) or None)  # fmt: skip
    return cache.setups[key]


def _streams_meet(recorded: Sequence[RecordedCall]) -> bool:
    """Whether some rank has calls on two streams (which may then run at once)."""
    streams: dict[int, str] = {}
    for call in recorded:
        for rank in call.ranks:
            if streams.setdefault(rank, call.stream) != call.stream:
                return True
    return False


def check_cost(
    scenario: Scenario,
    *,
    workers: int,
    max_hours: float = DEFAULT_MAX_HOURS,
    memory_bytes: int | None = None,
) -> str:
    """Refuse a sweep whose estimate exceeds ``max_hours`` on ``workers`` processes, or
    whose largest point would not fit in ``memory_bytes`` (default: this machine's RAM,
    shared by the workers); otherwise return the estimate as a line of text."""
    seconds, peak, counted = estimate_sweep(scenario)
    wall_s = seconds / max(1, workers)
    memory = memory_bytes if memory_bytes is not None else _ram_bytes()
    n_points = scenario.n_points
    if wall_s > max_hours * 3600:
        raise ConfigError(
            f"this sweep would take about {format_duration(wall_s)} on {workers} worker(s) "
            f"({n_points} points, estimated from their transfers at "
            f"{SECONDS_PER_TRANSFER * 1e6:.0f} us each), over the {max_hours:g} h limit; sweep "
            "fewer or smaller points, or raise --max-hours",
            source=scenario.source,
        )
    if memory and peak * min(max(1, workers), n_points) > memory:
        raise ConfigError(
            f"its largest point would need about {format_bytes(peak)} of memory per worker "
            f"({peak // BYTES_PER_TRANSFER} transfers), more than the {format_bytes(memory)} "
            f"this machine has for {workers} worker(s); simulate fewer ranks, chunks or "
            "workers",
            source=scenario.source,
        )
    if not counted:
        return "no estimate for these points"
    what = "collective" if scenario.kind == "collective" else scenario.kind
    return (
        f"estimated about {format_duration(wall_s)} on {workers} worker(s) for the {counted} "
        f"{what} point(s)"
    )


def _ram_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0
