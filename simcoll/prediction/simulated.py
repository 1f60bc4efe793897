"""Rows by simulation: build the schedule with NCCL-sized pieces, run it on the symmetric
fast path where it is exact or on the general engine, and keep the fastest choice."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import replace

import networkx as nx

from simcoll.algorithms import ALGORITHMS, build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, ScheduleError, SimcollError
from simcoll.core.protocols import Protocol
from simcoll.core.schedule import Schedule
from simcoll.output.results import Row
from simcoll.plan.placement import map_ranks
from simcoll.plan.tuning import (
    CHUNK_TARGET_BYTES,
    MAX_DEFAULT_CHUNKS,
    protocol_allowed,
    ring_chunks,
)
from simcoll.prediction.choices import algorithm_params
from simcoll.sim.engine import simulate
from simcoll.sim.symmetry import RING_COLLECTIVES, simulate_ring_fast

__all__ = ["best_simulated_row"]


def _schedule(
    collective: Collective, name: str, n_ranks: int, size_bytes: int, params: dict[str, int]
) -> Schedule:
    """Build a schedule; without ``n_chunks`` given, pick one for ~512 KiB transfers."""
    schedule = build_schedule(collective, name, n_ranks=n_ranks, size_bytes=size_bytes, **params)
    fn = ALGORITHMS[collective, name]
    if "n_chunks" in params or "n_chunks" not in inspect.signature(fn).parameters:
        return schedule
    largest = int(schedule.transfer_bytes.max(initial=0))
    n_chunks = min(MAX_DEFAULT_CHUNKS, -(-largest // CHUNK_TARGET_BYTES))
    if n_chunks <= 1:
        return schedule
    try:
        return build_schedule(
            collective, name, n_ranks=n_ranks, size_bytes=size_bytes, n_chunks=n_chunks, **params
        )
    except ScheduleError:  # too few bytes per block for that many pieces: stay unchunked
        return schedule


def best_simulated_row(  # noqa: PLR0917 - predict's own arguments, passed on
    topology: nx.DiGraph[str],
    collective: Collective,
    size_bytes: int,
    names: list[str],
    protocols: list[Protocol | None],
    model: str,
    nodes: tuple[str, ...],
    params: Mapping[str, int] | None,
) -> tuple[Row | None, SimcollError | None]:
    """The fastest simulated (algorithm, protocol) at one size, or why none could run."""
    n = len(nodes)
    best: Row | None = None
    refusal: SimcollError | None = None
    for name in names:
        try:
            chosen = algorithm_params(name, collective, params, topology, n)
            schedule: Schedule | None = None
            for proto in protocols:
                if not protocol_allowed(proto, name):
                    continue
                row = _fast_ring_row(
                    topology, collective, name, size_bytes, chosen, nodes, model, proto
                )
                if row is None:
                    schedule = schedule or _schedule(collective, name, n, size_bytes, chosen)
                    row = _simulate(topology, schedule, nodes, model=model, protocol=proto)
                if best is None or row.time_s < best.time_s:
                    best = row
        except (ScheduleError, ConfigError) as error:
            if len(names) == 1 and isinstance(error, ConfigError):
                raise
            refusal = error
    return best, refusal


def _fast_ring_row(  # noqa: PLR0917 - best_simulated_row's arguments, passed on
    topology: nx.DiGraph[str],
    collective: Collective,
    name: str,
    size_bytes: int,
    chosen: Mapping[str, int],
    nodes: tuple[str, ...],
    model: str,
    protocol: Protocol | None,
) -> Row | None:
    """A ring row from the exact symmetric path (:mod:`simcoll.sim.symmetry`), if it applies.

    It applies to ring all-reduce, reduce-scatter and all-gather in the flow and ideal
    models, with ranks in the default places, when the fabric and the piece sizes are
    symmetric; otherwise None, and the general path runs. Same chunk choice as
    :func:`_schedule`.
    """
    n = len(nodes)
    if (
        name != "ring"
        or model not in {"flow", "ideal"}
        or collective.value not in RING_COLLECTIVES
        or not set(chosen) <= {"n_channels", "n_chunks", "max_in_flight"}
        or nodes != map_ranks(topology, n)
    ):
        return None
    knobs = dict(chosen)
    if "n_chunks" not in knobs:
        knobs["n_chunks"] = ring_chunks(collective, n, size_bytes, knobs.get("n_channels", 1))
    try:
        found = simulate_ring_fast(
            topology, collective.value, n, size_bytes, model=model, protocol=protocol, **knobs
        )
    except ScheduleError:
        if knobs.get("n_chunks", 1) == 1 or "n_chunks" in chosen:
            raise
        knobs["n_chunks"] = 1  # too few bytes for that many pieces: unchunked, as _schedule
        found = simulate_ring_fast(
            topology, collective.value, n, size_bytes, model=model, protocol=protocol, **knobs
        )
    if found is None:
        return None
    result, sym = found
    row = Row.from_time(
        collective,
        "ring",
        n_ranks=n,
        size_bytes=size_bytes,
        time_s=result.time_s,
        protocol=protocol.name if protocol else "none",
        model=model,
        root=0,
    )
    return replace(
        row,
        max_rank_sent_bytes=int(sym.bytes_sent_per_rank().max(initial=0)),
        max_rank_received_bytes=int(sym.bytes_received_per_rank().max(initial=0)),
        max_link_bytes=float(result.link_bytes.max(initial=0.0)),
    )


def _simulate(
    topology: nx.DiGraph[str],
    schedule: Schedule,
    nodes: tuple[str, ...],
    *,
    model: str,
    protocol: Protocol | None,
) -> Row:
    result = simulate(topology, schedule, model=model, rank_nodes=nodes, protocol=protocol)
    row = Row.from_time(
        schedule.collective,
        schedule.algorithm,
        n_ranks=schedule.n_ranks,
        size_bytes=schedule.size_bytes,
        time_s=result.time_s,
        protocol=protocol.name if protocol else "none",
        model=model,
        root=schedule.root,
    )
    n = schedule.n_ranks
    return replace(
        row,
        max_rank_sent_bytes=int(result.bytes_sent_per_rank[:n].max(initial=0)),
        max_rank_received_bytes=int(result.bytes_received_per_rank[:n].max(initial=0)),
        max_link_bytes=float(result.link_bytes.max(initial=0.0)),
    )
