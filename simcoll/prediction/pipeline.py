"""Predict collective times over a range of sizes: the engine behind ``simcoll predict``.

>>> from simcoll.topology import switch_star
>>> star = switch_star(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
>>> rows = predict(star, "allgather", [4096, 2**20]).rows
>>> [(r.size_bytes, r.algorithm, round(r.time_s * 1e6, 3)) for r in rows]
[(4096, 'ring', 6.031), (1048576, 'ring', 13.864)]
"""

from __future__ import annotations

import inspect
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import networkx as nx

from simcoll.algorithms import ALGORITHMS, algorithm_names, build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, ScheduleError, SimcollError, TopologyError, UnitError
from simcoll.core.protocols import PROTOCOLS, Protocol, parse_protocol
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Schedule
from simcoll.core.units import parse_size_bytes
from simcoll.models import alphabeta_time_s, nccl_time_s
from simcoll.output.results import Row, bandwidths
from simcoll.plan.placement import map_ranks
from simcoll.sim.engine import simulate
from simcoll.sim.symmetry import RING_COLLECTIVES, simulate_ring_fast
from simcoll.topology import NodeKind, Router, gpu_nodes
from simcoll.topology.calibration import Calibration

__all__ = [
    "AUTO_FAMILY",
    "Prediction",
    "align_size_bytes",
    "candidates",
    "gpus_per_host",
    "parse_sizes",
    "predict",
    "ranks_per_reducing_switch",
]

#: Element size nccl-tests uses for float, the type it prints by default.
TYPE_SIZE_BYTES = 4
DEFAULT_ALGORITHM = "ring"

_RANGE = re.compile(r"^([^:]+):([^:]+)(?::(\d+))?$")


def parse_sizes(text: str) -> tuple[list[int], bool]:
    """Parse ``--sizes``: a range ``MIN:MAX[:FACTOR]`` or a list ``A,B,C``.

    A range holds MIN, MIN x FACTOR, ... up to MAX (FACTOR 2 by default), as nccl-tests'
    ``-b MIN -e MAX -f FACTOR``; bare K/M/G suffixes are binary (8G = 8 GiB). Returns the
    sizes and whether they came from a range.

    >>> parse_sizes("8:64")
    ([8, 16, 32, 64], True)
    >>> parse_sizes("1K,1M")
    ([1024, 1048576], False)
    >>> parse_sizes("1M:1K")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: --sizes: range '1M:1K' ends below its start
    """
    try:
        match = _RANGE.match(text.strip())
        if match is None:
            sizes = [parse_size_bytes(part.strip()) for part in text.split(",")]
            return sizes, False
        low, high = parse_size_bytes(match.group(1)), parse_size_bytes(match.group(2))
        factor = int(match.group(3) or 2)
    except UnitError as error:
        raise ConfigError(f"--sizes: {error.message}") from None
    if low < 1:
        raise ConfigError(f"--sizes: range {text!r} must start at 1 byte or more")
    if high < low:
        raise ConfigError(f"--sizes: range {text!r} ends below its start")
    if factor < 2:
        raise ConfigError(f"--sizes: range factor in {text!r} must be 2 or more")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes, True


def align_size_bytes(collective: Collective, n_ranks: int, size_bytes: int) -> int:
    """Round a size down the way nccl-tests does: to whole float elements per block.

    >>> align_size_bytes(Collective.ALLGATHER, 3, 1000)
    996
    >>> align_size_bytes(Collective.ALLREDUCE, 3, 1001)
    1000
    """
    per = 1 if collective.n_blocks(n_ranks) == 1 or collective is Collective.SENDRECV else n_ranks
    unit = per * TYPE_SIZE_BYTES
    return size_bytes // unit * unit


@dataclass(frozen=True)
class Prediction:
    """Predicted rows, and the sizes skipped because they were too small to cut."""

    rows: list[Row]
    skipped: list[tuple[int, str]] = field(default_factory=list)


def predict(
    topology: nx.DiGraph[str],
    collective: Collective | str,
    sizes_bytes: Sequence[int],
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    protocol: str | None = None,
    model: str = "flow",
    n_ranks: int | None = None,
    params: Mapping[str, int] | None = None,
    skip_too_small: bool = False,
    calibration: Calibration | None = None,
) -> Prediction:
    """Simulate one collective at each size; ``"auto"`` keeps the fastest choice per size.

    Parameters
    ----------
    algorithm
        An algorithm name; ``"auto"``: the algorithms NCCL chooses among
        (:data:`AUTO_FAMILY`, or every one for collectives that have none of them) are
        simulated where the topology supports them and the fastest is kept, per size;
        ``"all"``: the same over every algorithm of the collective.
    protocol
        ``"LL"``, ``"LL128"``, ``"simple"`` (:mod:`simcoll.core.protocols`), ``"auto"`` (the
        fastest per size), or ``None`` to model the links alone.
    params
        Algorithm parameters (``n_channels``...). ``gpus_per_node``, for hierarchical
        algorithms, defaults to the GPUs per ``host`` of the topology; ``n_chunks``
        defaults to what cuts the largest transfer into pieces of about
        :data:`CHUNK_TARGET_BYTES` (at most :data:`MAX_DEFAULT_CHUNKS`).
    calibration
        Fitted parameters (:mod:`simcoll.topology.calibration`) applied to the topology and to
        every protocol, including ``None`` (the bare links). The simulation models use
        them fully; the closed forms use the link latencies and step latencies, and the
        protocol's single efficiency.

    Raises
    ------
    ConfigError, ScheduleError
        On an unknown collective, algorithm or protocol, a bad parameter, an algorithm
        the topology cannot run (NVLS without a reducing switch), or a size that does not
        split (unless ``skip_too_small``, which skips sizes too small to cut instead).
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    n = len(gpu_nodes(topology)) if n_ranks is None else n_ranks
    if n < 1:
        raise ConfigError(f"--ranks must be at least 1, got {n}")
    nodes = map_ranks(topology, n)
    names = candidates(c, algorithm)
    if algorithm not in ("auto", "all"):
        build_schedule(c, algorithm, n_ranks=1, size_bytes=0)  # unknown names fail early
    protocols = _protocols(protocol)
    names = _runnable_with(names, protocols)
    if calibration is not None:
        topology = calibration.apply(topology)
        protocols = [calibration.protocol(p) for p in protocols]
    if model in CLOSED_FORM_MODELS:
        closed = _closed_form(topology, c, sizes_bytes, names, protocols, model, n, params)
        if calibration is not None and calibration.launch_s:
            closed = replace(closed, rows=[_plus(r, calibration.launch_s) for r in closed.rows])
        return closed
    rows: list[Row] = []
    skipped: list[tuple[int, str]] = []
    for size in sizes_bytes:
        best, refusal = _best_row(topology, c, size, names, protocols, model, nodes, params)
        if best is not None:
            rows.append(best)
        elif refusal is not None:
            if not skip_too_small or not isinstance(refusal, ScheduleError):
                raise refusal
            skipped.append((size, refusal.message))
    if calibration is not None and calibration.launch_s:
        rows = [_plus(row, calibration.launch_s) for row in rows]
    return Prediction(rows, skipped)


def _plus(row: Row, extra_s: float) -> Row:
    """``row`` taking ``extra_s`` longer (bandwidths follow)."""
    time_s = row.time_s + extra_s
    algbw, busbw = bandwidths(row.collective, row.n_ranks, row.size_bytes, time_s)
    return replace(row, time_s=time_s, algbw_bytes_per_s=algbw, busbw_bytes_per_s=busbw)


#: What ``algorithm="auto"`` picks from: NCCL's own algorithms (ring, trees, NVLS, and
#: SHARP as NCCL's CollNet reaches it). The others (direct, halving-doubling, ...) are
#: simulated on request or with ``"all"``: on hundreds of ranks, all-pairs algorithms put
#: tens of thousands of flows in flight at once and cost minutes to simulate.
AUTO_FAMILY = ("ring", "tree", "nvls", "sharp")


def candidates(collective: Collective, algorithm: str) -> list[str]:
    """The algorithms ``predict`` simulates for ``algorithm`` (a name, auto or all).

    >>> candidates(Collective.ALLTOALL, "auto")
    ['direct', 'pairwise']
    """
    names = algorithm_names(collective)
    if algorithm == "all":
        return names
    if algorithm == "auto":
        return [name for name in names if name in AUTO_FAMILY] or names
    return [algorithm]


#: NCCL's Simple protocol moves a channel's data in steps of 512 KiB (a 4 MiB buffer in
#: NCCL_STEPS = 8 slots, src/include/device.h); simcoll cuts transfers to about that size
#: when the caller does not choose ``n_chunks``, so pipelining is NCCL-like by default.
CHUNK_TARGET_BYTES = 512 * 2**10
MAX_DEFAULT_CHUNKS = 64


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


#: Models that cost a call by formula (:mod:`simcoll.models`) instead of simulating it.
CLOSED_FORM_MODELS = ("analytical", "nccl")
#: NCCL picks its channel count per machine; 16 is what it uses for large messages on
#: an 8-GPU NVSwitch node (the ``nccl`` model needs one: per-channel caps apply).
NCCL_DEFAULT_CHANNELS = 16


def _closed_form(  # noqa: PLR0917 - predict's own arguments, passed on
    topology: nx.DiGraph[str],
    collective: Collective,
    sizes_bytes: Sequence[int],
    names: list[str],
    protocols: list[Protocol | None],
    model: str,
    n_ranks: int,
    params: Mapping[str, int] | None,
) -> Prediction:
    """Rows from the alpha-beta formulas or NCCL's tuning model, fastest choice per size."""
    router = Router(topology)
    nodes = map_ranks(topology, n_ranks)
    rows: list[Row] = []
    for size in sizes_bytes:
        best: Row | None = None
        refusal: ConfigError | None = None
        for name in names:
            chosen = _params(name, collective, params, topology, n_ranks)
            chosen.setdefault("n_chunks", _closed_form_chunks(collective, name, n_ranks, size))
            for proto in protocols:
                if not _allowed(proto, name):
                    continue
                try:
                    time_s = _formula(topology, collective, name, proto, model, n_ranks, size,
                                      chosen, nodes, router)  # fmt: skip
                except ConfigError as error:
                    refusal = error
                    continue
                row = Row.from_time(collective, name, n_ranks=n_ranks, size_bytes=size,
                                    time_s=time_s, protocol=proto.name if proto else "none",
                                    model=model, root=chosen.get("root", 0))  # fmt: skip
                if best is None or row.time_s < best.time_s:
                    best = row
        if best is None:
            raise refusal or ConfigError(f"no algorithm to cost for {collective.value}")
        rows.append(best)
    return Prediction(rows)


def _closed_form_chunks(collective: Collective, name: str, n_ranks: int, size_bytes: int) -> int:
    """The simulator's default chunk count (:func:`_schedule`) without building a schedule.

    The largest transfer of an unchunked schedule is the whole buffer for algorithms that
    move it whole (chains, trees, in-network), else about one rank's share.
    """
    whole = name in ("nvls", "sharp", "tree", "reduce_broadcast") or collective in (
        Collective.BROADCAST,
        Collective.REDUCE,
    )
    largest = size_bytes if whole else size_bytes // max(1, n_ranks)
    return max(1, min(MAX_DEFAULT_CHUNKS, -(-largest // CHUNK_TARGET_BYTES)))


def _formula(  # noqa: PLR0917 - one call of either model
    topology: nx.DiGraph[str],
    collective: Collective,
    name: str,
    protocol: Protocol | None,
    model: str,
    n_ranks: int,
    size_bytes: int,
    params: dict[str, int],
    nodes: tuple[str, ...],
    router: Router,
) -> float:
    if model == "nccl":
        return nccl_time_s(
            topology, collective, name, _nccl_protocol(protocol), n_ranks,
            size_bytes, n_channels=params.get("n_channels", NCCL_DEFAULT_CHANNELS),
            rank_nodes=nodes, router=router,
        )  # fmt: skip
    if name not in ("ring", "nvls", "sharp", "hierarchical", "reducescatter_allgather"):
        params = {k: v for k, v in params.items() if k != "n_chunks"}  # textbook: unchunked
    return alphabeta_time_s(
        topology, collective, name, n_ranks, size_bytes, protocol=protocol, rank_nodes=nodes,
        router=router, n_channels=params.get("n_channels", 1),
        n_chunks=params.get("n_chunks", 1),
        max_in_flight=params.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT),
        root=params.get("root", 0), ranks_per_switch=params.get("ranks_per_switch", 0),
    )  # fmt: skip


def _best_row(  # noqa: PLR0917 - predict's own arguments, passed on
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
            chosen = _params(name, collective, params, topology, n)
            schedule: Schedule | None = None
            for proto in protocols:
                if not _allowed(proto, name):
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


ALL = ("LL", "LL128", "simple")
# NCCL runs NVLS with the Simple protocol only (state-of-the-art notes, section 3.2).
_PROTOCOLS_OF: dict[str, tuple[str, ...]] = {"nvls": ("simple",), "sharp": ("simple",)}


def _nccl_protocol(protocol: Protocol | None) -> str:
    """The NCCL protocol the tuning model costs: the bare links (None, or a calibrated
    "none") as Simple, NCCL's full-bandwidth protocol."""
    return "simple" if protocol is None or protocol.name == "none" else protocol.name


def _allowed(protocol: Protocol | None, algorithm: str) -> bool:
    """Whether ``algorithm`` runs with ``protocol`` (None or a calibrated "none": the
    bare links, which every algorithm runs on)."""
    if protocol is None or protocol.name == "none":
        return True
    return protocol.name in _PROTOCOLS_OF.get(algorithm, ALL)


def _runnable_with(names: list[str], protocols: list[Protocol | None]) -> list[str]:
    """The algorithms that can run with one of the protocols asked for.

    Raises
    ------
    ConfigError
        If none can, naming what the (single) algorithm needs.
    """
    runnable = [name for name in names if any(_allowed(p, name) for p in protocols)]
    if not runnable:
        name = names[0]
        asked = ", ".join(p.name for p in protocols if p is not None)
        raise ConfigError(
            f"{name} runs with the {' or '.join(_PROTOCOLS_OF[name])} protocol only, not {asked}"
        )
    return runnable


def _protocols(protocol: str | None) -> list[Protocol | None]:
    if protocol is None:
        return [None]
    if protocol == "auto":
        return list(PROTOCOLS.values())
    return [parse_protocol(protocol)]


def _params(
    name: str,
    collective: Collective,
    params: Mapping[str, int] | None,
    topology: nx.DiGraph[str],
    n_ranks: int,
) -> dict[str, int]:
    """The user's parameters, plus ``gpus_per_node`` from the topology where it applies."""
    chosen = dict(params or {})
    fn = ALGORITHMS.get((collective, name))
    accepted = inspect.signature(fn).parameters if fn is not None else {}
    if "gpus_per_node" in accepted:
        chosen.setdefault("gpus_per_node", gpus_per_host(topology, n_ranks))
    if "ranks_per_switch" in accepted and "ranks_per_switch" not in chosen:
        per_switch = ranks_per_reducing_switch(topology, n_ranks)
        if per_switch:
            chosen["ranks_per_switch"] = per_switch
    return chosen


def ranks_per_reducing_switch(topology: nx.DiGraph[str], n_ranks: int) -> int:
    """Ranks per nearest in-network-reducing fabric switch, when they group evenly.

    Each rank's GPU has a nearest fabric switch (kind ``switch``) with ``reduces`` true
    (fewest hops, then smallest id); when those switches split the ranks into equal runs
    of consecutive ranks, that run length is returned (the first level of a SHARP tree),
    else 0.
    """
    switches = sorted(
        node
        for node, attrs in topology.nodes.items()
        if attrs["kind"] is NodeKind.SWITCH and attrs.get("reduces") is True
    )
    if not switches:
        return 0
    router = Router(topology)
    nearest = []
    for gpu in gpu_nodes(topology)[:n_ranks]:
        hops = []
        for switch in switches:
            try:
                hops.append((len(router.route(gpu, switch)), switch))
            except TopologyError:
                continue
        if not hops:
            return 0
        nearest.append(min(hops)[1])
    runs = [len(list(run)) for _, run in itertools.groupby(nearest)]
    if len(runs) != len(set(nearest)) or len(set(runs)) != 1:
        return 0
    return runs[0]


def gpus_per_host(topology: nx.DiGraph[str], n_ranks: int) -> int:
    """GPUs per server among the first ``n_ranks`` GPUs, from their ``host`` attribute.

    Ranks without a host count as one server; unequal servers give the largest count
    that divides them all (so hierarchical groups never straddle two servers).

    >>> from simcoll.topology import switch_star
    >>> gpus_per_host(switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0), 4)
    4
    """
    hosts: dict[object, int] = {}
    for node in gpu_nodes(topology)[:n_ranks]:
        host = topology.nodes[node].get("host")
        hosts[host] = hosts.get(host, 0) + 1
    return math.gcd(*hosts.values())


def ring_chunks(collective: Collective, n_ranks: int, size_bytes: int, n_channels: int) -> int:
    """Chunks per ring piece that :func:`predict` picks: ~512 KiB transfers, at most 64.

    >>> ring_chunks(Collective.ALLREDUCE, 8, 2**30, 1)  # 128 MiB blocks
    64
    >>> ring_chunks(Collective.ALLREDUCE, 8, 2**24, 2)  # 1 MiB per channel
    2
    """
    ring_blocks = n_ranks if collective is Collective.ALLREDUCE else 1
    parts = ring_blocks * n_channels
    largest = -(-collective.block_bytes(size_bytes, n_ranks) // parts)
    return max(1, min(MAX_DEFAULT_CHUNKS, -(-largest // CHUNK_TARGET_BYTES)))


def _fast_ring_row(  # noqa: PLR0917 - _best_row's arguments, passed on
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
