r"""The symmetric fast path: simulate one rank in ``g`` and one channel in ``c``, exactly.

A ring all-reduce on N GPUs has 2(N-1) x N x channels x chunks transfers (16.8 million at
1,024 GPUs with 8 channels); on a fabric that looks the same from every server, rank
``r + g`` does at every moment what rank ``r`` does, and channel 5 what channel 0 does.
A :class:`SymmetricSchedule` keeps only the *representatives*, the transfers sent by
ranks ``0..g-1`` on channel 0; each stands for its images under shifting every rank by a
multiple of ``g`` (mod N) and for its ``c`` channel copies.

When that is exact
------------------
Time is shared out by max-min fairness (:mod:`simcoll.network.fairshare`). Suppose at
some instant the flows in flight are whole orbits (every copy of a representative is in
flight, with the same bytes left). Progressive filling keeps copies at one rate if every
link ``L`` of a *link class* ``C`` carries the same number ``n(C, F)`` of copies of each
orbit ``F``: links of a class then fill together and freeze the same orbits. Conversely
the copies of one orbit must cross the same classes the same number of times, and have
the same route latency. This module checks both conditions on the actual routes of all
N/g copies of every representative pair (an equitable partition of the links: grouping
links by their load vector ``n(., F)`` and capacity, then checking the flows' side);
with it, induction over the events of the run gives every copy its representative's
issue, start and end times, and the quotient run is the full run.

The quotient fabric then has one link per class and one flow per representative, which
loads each link of class C with ``c x n(C, F)`` copies of its rate: a weighted incidence.
Nothing is approximated: :func:`simulate_symmetric` gives the same times as simulating
:meth:`SymmetricSchedule.expand` (tests check it to 1e-9 on random cases). When the check
fails (ECMP hash collisions break the symmetry; uneven piece sizes break it) it returns
``None`` and the caller takes the general path.

Uneven pieces
-------------
When a block does not split into equal pieces (1 GiB over 24 channels), pieces differ
by one byte and no shift maps them onto each other. ``round_up_pieces=True`` then runs
every piece at the largest piece's size, where the smallest piece has at least
``1 / ROUND_UP_TOLERANCE`` bytes (1,000 B; smaller pieces take the general path): the
engine's own convention (:attr:`simcoll.core.schedule.Schedule.timed_bytes`), so the
fast path gives what the general path gives (``tests/sim/test_symmetry.py``; and
``tests/prediction/test_fast_paths.py`` on random perturbed fabrics).

>>> from simcoll.topology.builders import ring
>>> topo = ring(8, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
>>> sym = ring_symmetric("allreduce", 8, 8 * 2**20, n_channels=2, period_ranks=1)
>>> sym.representatives.n_transfers, sym.n_transfers
(14, 224)
>>> fast = simulate_symmetric(topo, sym)
>>> round(fast.time_s * 1e6, 3)  # 14 steps of 1 us + 2 channels x 0.5 MiB at 100 GB/s
160.801
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.limits import MAX_TRANSFERS
from simcoll.core.protocols import Protocol
from simcoll.core.schedule import (
    _OP_CODES,
    DEFAULT_MAX_IN_FLIGHT,
    ROUND_UP_TOLERANCE,
    Op,
    Schedule,
    _check_header,
    _check_transfers,
    _frozen,
    split_bytes,
)
from simcoll.plan.channels import Plan
from simcoll.plan.placement import map_ranks
from simcoll.sim.engine import SimulationResult, _Run
from simcoll.sim.routes import (
    EdgeFacts,
    Routes,
    link_table,
    pair_efficiency,
    pair_latency_s,
    route_pair,
)
from simcoll.topology import Router

__all__ = [
    "PROBE_ABOVE",
    "SymmetricSchedule",
    "representatives_of",
    "ring_periods",
    "ring_symmetric",
    "simulate_ring_fast",
    "simulate_symmetric",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: Per copy (its source and destination rank, and the plan's waypoints): the links it
#: crosses, its latency and its data fraction, as :func:`symmetric_routes` found them.
CopyRoutes = dict[tuple[int, int, tuple[str, ...]], tuple[list[int], float, float]]

RING_COLLECTIVES = ("allreduce", "reducescatter", "allgather")


@dataclass(frozen=True, eq=False, kw_only=True)
class SymmetricSchedule:
    """A schedule given by representatives and its symmetry.

    ``representatives`` is a :class:`~simcoll.core.schedule.Schedule` over all N ranks that
    holds, of every orbit, the transfer whose source is in ``0..period_ranks-1`` on
    channel 0. Its deps name representatives; ``dep_shift`` (aligned with its ``deps``)
    says by how many periods the transfer actually waited for is shifted.

    The copy of a representative shifted by ``k`` periods on channel ``ch`` runs between
    the images of its ranks under ``r -> (channel_maps[ch][r] + k * period_ranks) mod N``
    (``channel_maps[ch]`` takes channel 0's ring onto channel ch's: the identity when
    every channel's ring is the same, a rotation inside each server when NCCL's channels
    enter each server by a different NIC). Its pieces are those of the blocks of the
    images of its blocks' ranks, on channel ch.
    """

    representatives: Schedule
    period_ranks: int
    channel_copies: int
    dep_shift: IntArray
    channel_maps: IntArray  # (channel_copies, N): rank permutation of each channel
    rounded_up: bool = False  # pieces run at the largest piece's size (module docstring)
    #: Row r, column ch: the plan channel that copy ch of a representative on channel r
    #: runs on. None for rings, whose representatives are all on channel 0 and whose copy
    #: ch runs on channel ch; set by :func:`simcoll.sim.channel_symmetry.channel_symmetric`.
    copy_channels: IntArray | None = None

    @property
    def n_ranks(self) -> int:
        """Ranks of the whole collective."""
        return self.representatives.n_ranks

    @property
    def n_copies(self) -> int:
        """Transfers each representative stands for (itself included)."""
        return self.n_ranks // self.period_ranks * self.channel_copies

    @property
    def n_transfers(self) -> int:
        """Transfers of the whole schedule."""
        return self.representatives.n_transfers * self.n_copies

    def plan_channel(self, channel: int, copy: int) -> int:
        """The plan channel that copy ``copy`` of a representative on ``channel`` runs on.

        >>> ring_symmetric("allgather", 4, 64, n_channels=2).plan_channel(0, 1)
        1
        """
        return copy if self.copy_channels is None else int(self.copy_channels[channel, copy])

    def bytes_sent_per_rank(self) -> IntArray:
        """Data bytes each rank sends, over all copies (as ``Schedule``'s)."""
        return self._per_rank(self.representatives.src)

    def bytes_received_per_rank(self) -> IntArray:
        """Data bytes each rank receives, over all copies (as ``Schedule``'s)."""
        return self._per_rank(self.representatives.dst)

    def _per_rank(self, ranks: IntArray) -> IntArray:
        rep = self.representatives
        n, g = self.n_ranks, self.period_ranks
        per_source = np.bincount(ranks % g, weights=rep.transfer_bytes, minlength=g)
        base = np.arange(g, dtype=np.int64)
        total = np.zeros(n)
        for ch in range(self.channel_copies):
            images = (self.channel_maps[ch][base][:, None] + g * np.arange(n // g)) % n
            np.add.at(total, images, per_source[:, None])
        return _frozen(np.rint(total).astype(np.int64))

    def expand(self) -> Schedule:
        """The whole schedule: every copy of every representative.

        Copy ``(k, ch)`` of representative ``t`` is transfer ``(t * m + k) * c + ch``
        (``m`` = N / period, ``c`` = channel copies), so each connection keeps its order.

        Raises
        ------
        ConfigError
            For a schedule of channel copies (``copy_channels`` set), which only rings'
            piece layout can rebuild: simulate the schedule it was made from instead.
        """
        if self.copy_channels is not None:
            raise ConfigError("expand() rebuilds ring schedules only, not channel copies")
        rep = self.representatives
        n, g, c = self.n_ranks, self.period_ranks, self.channel_copies
        m = n // g
        shift = np.arange(m, dtype=np.int64)
        copy = np.arange(c, dtype=np.int64)
        maps = self.channel_maps

        def image(ranks: IntArray) -> IntArray:
            """Ranks of every copy, shaped (entries, m, c) flattened entry-major."""
            mapped = maps[:, ranks].T  # (entries, c)
            grid = (mapped[:, None, :] + g * shift[None, :, None]) % n
            return grid.reshape(-1)

        src = image(rep.src)
        dst = image(rep.dst)
        channel = np.tile(copy, len(rep.src) * m)
        op = np.repeat(rep.op, m * c)
        # A ring's piece is (block x C + channel) x K + chunk, its block labelled by a rank
        # (the collective's block of that rank, or the all-reduce's ring block): a copy
        # moves the block of the image of that rank, on its own channel.
        n_channels = int(rep.params.get("n_channels", 1))
        n_chunks = int(rep.params.get("n_chunks", 1))
        block = rep.pieces // (n_channels * n_chunks)
        chunk = rep.pieces % n_chunks
        mapped = maps[:, block]  # (c, total pieces)
        grid = (mapped[None, :, :] + g * shift[:, None, None]) % n  # (m, c, total)
        piece_grid = (grid * n_channels + copy[None, :, None]) * n_chunks + chunk[None, None, :]
        pieces_per = np.diff(rep.pieces_indptr)
        piece_csr = _copies_csr(piece_grid, pieces_per)
        deps_per = np.diff(rep.deps_indptr)
        dep_grid = (
            rep.deps[None, None, :] * m + (shift[:, None, None] + self.dep_shift) % m
        ) * c + copy[None, :, None]
        deps = _copies_csr(dep_grid, deps_per)
        schedule = Schedule(
            collective=rep.collective,
            algorithm=rep.algorithm,
            n_ranks=n,
            size_bytes=rep.size_bytes,
            root=rep.root,
            piece_bytes=rep.piece_bytes,
            pieces_per_block=rep.pieces_per_block,
            src=_frozen(src),
            dst=_frozen(dst),
            op=_frozen(op),
            channel=_frozen(channel),
            pieces_indptr=_frozen(piece_csr[0]),
            pieces=_frozen(piece_csr[1]),
            deps_indptr=_frozen(deps[0]),
            deps=_frozen(deps[1]),
            max_in_flight=rep.max_in_flight,
            params=rep.params,
        )
        _check_transfers(schedule)
        return schedule


def _copies_csr(grid: IntArray, per_rep: IntArray) -> tuple[IntArray, IntArray]:
    """CSR lists of the copies from ``grid[k, ch, j]``, entry j shifted for copy (k, ch).

    Entries are grouped by representative (``per_rep`` of each); copy (k, ch) of rep t
    gets t's entries, in order, at row ``(t * m + k) * c + ch``.
    """
    m, c, n_entries = grid.shape
    starts = np.concatenate([[0], np.cumsum(per_rep)]).astype(np.int64)
    first = np.repeat(starts[:-1], per_rep)
    within = np.arange(n_entries, dtype=np.int64) - first
    size = np.repeat(per_rep, per_rep)
    copy_index = np.arange(m * c, dtype=np.int64).reshape(m, c, 1)
    position = first * m * c + copy_index * size + within
    flat = np.empty(n_entries * m * c, dtype=np.int64)
    flat[position.reshape(-1)] = grid.reshape(-1)
    indptr = np.concatenate([[0], np.cumsum(np.repeat(per_rep, m * c))]).astype(np.int64)
    return indptr, flat


def ring_symmetric(
    collective: str,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    period_ranks: int = 1,
    rings: Sequence[Sequence[int]] | None = None,
    round_up_pieces: bool = False,
    pairs_only: bool = False,
) -> SymmetricSchedule | None:
    """The ring schedule of :mod:`simcoll.algorithms.ring`, as representatives.

    ``rings`` (one per channel, from a plan; default: the rank order on every channel)
    must each be unchanged by shifting every rank by ``period_ranks`` (the successor of
    ``r + period`` is the successor of ``r`` plus the period), and each channel's ring
    the image of channel 0's, position by position, under a rank permutation that
    commutes with that shift. Built with numpy, O(representatives): 2(N-1) x n_chunks x
    ``period_ranks`` transfers for an all-reduce (N-1 x ... for reduce-scatter and
    all-gather), whatever ``n_channels``. Returns None when the symmetry does not hold:
    pieces of unequal size (``size_bytes`` not a multiple of the pieces per block),
    unless ``round_up_pieces`` (then every piece is the largest: the module docstring's
    one approximation), or rings that the shift changes.

    >>> sym = ring_symmetric("allgather", 4, 64, period_ranks=2)
    >>> [(int(a), int(b)) for a, b in zip(sym.representatives.src, sym.representatives.dst)]
    [(0, 1), (1, 2), (0, 1), (1, 2), (0, 1), (1, 2)]
    >>> sym.expand().n_transfers
    12
    >>> ring_symmetric("allgather", 4, 64, period_ranks=2, rings=[(0, 3, 2, 1)]) is None
    False

    ``pairs_only`` reduces it to the pairs it sends over: each representative rank's one
    send to its successor (an all-gather's first step), with the same channel maps and
    the same refusals. :func:`symmetric_routes` reads only a schedule's (channel, source,
    destination) pairs, so its verdict on that is its verdict on the ring, for
    ``period_ranks`` transfers instead of 2 (N - 1) x pieces x ``period_ranks`` (at 1,024
    GPUs placed at random, period N: 16 M transfers and some 200 MiB, built only to be
    found not exact).

    >>> ring = [(0, 3, 2, 1, 4, 7, 6, 5)]  # unchanged by a shift of 4 ranks
    >>> pairs = ring_symmetric("allreduce", 8, 2**20, period_ranks=4, rings=ring, pairs_only=True)
    >>> pairs.representatives.src.tolist(), pairs.representatives.dst.tolist()
    ([0, 1, 2, 3], [3, 4, 1, 2])
    >>> whole = ring_symmetric("allreduce", 8, 2**20, period_ranks=4, rings=ring)
    >>> whole.representatives.n_transfers
    56
    """
    head = _ring_head(collective, n_ranks, size_bytes, n_channels, n_chunks, max_in_flight,
                      period_ranks, rings, round_up_pieces=round_up_pieces)  # fmt: skip
    if head is None:
        return None
    coll, orders, maps, piece_sizes, rounded = head
    n, g = n_ranks, period_ranks
    pieces_per_block = len(piece_sizes)
    ring = orders[0]
    position = np.empty(n, dtype=np.int64)
    position[ring] = np.arange(n)
    if pairs_only:
        return _ring_pairs(ring, position, g, maps, max_in_flight, rounded=rounded)
    n_steps = n - 1
    if coll is Collective.ALLREDUCE:
        phases = [(Op.REDUCE, -1), (Op.COPY, 0)]
    elif coll is Collective.REDUCESCATTER:
        phases = [(Op.REDUCE, -1)]
    else:
        phases = [(Op.COPY, 0)]
    total_steps = n_steps * len(phases)
    # Representatives in the ring builder's order: step, chunk, rank (channel 0 only).
    step, chunk, rank = (
        a.reshape(-1)
        for a in np.meshgrid(
            np.arange(total_steps), np.arange(n_chunks), np.arange(g), indexing="ij"
        )
    )
    phase = step // n_steps
    block_at = np.array([at for _, at in phases])[phase]
    here = position[rank]
    block = ring[(here + block_at - (step - phase * n_steps)) % n]
    pieces = (block * n_channels) * n_chunks + chunk
    op = np.array([_OP_CODES[o] for o, _ in phases])[phase]
    n_reps = len(step)
    has_dep = step > 0
    previous = ring[(here[has_dep] - 1) % n]  # the rank whose send this one waits for
    dep = ((step[has_dep] - 1) * n_chunks + chunk[has_dep]) * g + previous % g
    dep_shift = (previous // g).astype(np.int64)
    deps_indptr = np.concatenate([[0], np.cumsum(has_dep)]).astype(np.int64)
    params: dict[str, object] = {
        "n_channels": n_channels,
        "n_chunks": n_chunks,
        "max_in_flight": max_in_flight,
        "period_ranks": g,
    }
    rep = Schedule(
        collective=coll,
        algorithm="ring",
        n_ranks=n,
        size_bytes=size_bytes,
        root=0,
        piece_bytes=_frozen(piece_sizes * coll.n_blocks(n)),
        pieces_per_block=pieces_per_block,
        src=_frozen(rank),
        dst=_frozen(ring[(here + 1) % n]),
        op=_frozen(op),
        channel=_frozen(np.zeros(n_reps, dtype=np.int64)),
        pieces_indptr=_frozen(np.arange(n_reps + 1)),
        pieces=_frozen(pieces),
        deps_indptr=_frozen(deps_indptr),
        deps=_frozen(dep),
        max_in_flight=max_in_flight,
        params=params,
    )
    _check_transfers(rep)
    return SymmetricSchedule(
        representatives=rep,
        period_ranks=g,
        channel_copies=n_channels,
        dep_shift=_frozen(dep_shift),
        channel_maps=_frozen(maps),
        rounded_up=rounded,
    )


def _ring_head(  # noqa: PLR0917 - ring_symmetric's arguments
    collective: str,
    n_ranks: int,
    size_bytes: int,
    n_channels: int,
    n_chunks: int,
    max_in_flight: int,
    period_ranks: int,
    rings: Sequence[Sequence[int]] | None,
    *,
    round_up_pieces: bool,
) -> tuple[Collective, IntArray, IntArray, list[int], bool] | None:
    """What :func:`ring_symmetric` checks before it builds: the collective, the channels'
    rings, their maps, the piece sizes (rounded up where allowed) and whether they were;
    None where the symmetry or the pieces do not hold."""
    coll = Collective(collective)
    if coll.value not in RING_COLLECTIVES:
        raise ConfigError(
            f"no symmetric ring for {collective!r}; valid: {', '.join(RING_COLLECTIVES)}"
        )
    n, g = n_ranks, period_ranks
    if g < 1 or n % g:
        raise ConfigError(f"period_ranks {g} does not divide {n} ranks")
    orders = np.array(
        [tuple(range(n))] * n_channels if rings is None else [tuple(r) for r in rings],
        dtype=np.int64,
    )
    if len(orders) != n_channels:
        raise ConfigError(f"{len(orders)} rings for {n_channels} channels")
    maps = _channel_maps(orders, g)
    if maps is None:
        return None
    ring_blocks = n if coll is Collective.ALLREDUCE else 1
    pieces_per_block = ring_blocks * n_channels * n_chunks
    _check_header(coll, n, size_bytes, pieces_per_block, 0, max_in_flight)
    piece_sizes = split_bytes(coll.block_bytes(size_bytes, n), pieces_per_block)
    rounded = len(set(piece_sizes)) > 1
    if rounded and (not round_up_pieces or min(piece_sizes) * ROUND_UP_TOLERANCE < 1):
        return None
    if rounded:
        piece_sizes = [piece_sizes[0]] * pieces_per_block
    return coll, orders, maps, piece_sizes, rounded


def _ring_pairs(
    ring: IntArray,
    position: IntArray,
    period: int,
    maps: IntArray,
    max_in_flight: int,
    *,
    rounded: bool,
) -> SymmetricSchedule:
    """``ring_symmetric(..., pairs_only=True)``: one send per representative rank."""
    n, g = len(ring), period
    src = np.arange(g, dtype=np.int64)
    rep = Schedule(
        collective=Collective.ALLGATHER,
        algorithm="ring",
        n_ranks=n,
        size_bytes=n,
        root=0,
        piece_bytes=_frozen(np.ones(n, dtype=np.int64)),
        pieces_per_block=1,
        src=_frozen(src),
        dst=_frozen(ring[(position[src] + 1) % n]),
        op=_frozen(np.full(g, _OP_CODES[Op.COPY], dtype=np.int64)),
        channel=_frozen(np.zeros(g, dtype=np.int64)),
        pieces_indptr=_frozen(np.arange(g + 1)),
        pieces=_frozen(src.copy()),
        deps_indptr=_frozen(np.zeros(g + 1, dtype=np.int64)),
        deps=_frozen(np.zeros(0, dtype=np.int64)),
        max_in_flight=max_in_flight,
        params={"n_channels": len(maps), "period_ranks": g},
    )
    _check_transfers(rep)
    return SymmetricSchedule(
        representatives=rep,
        period_ranks=g,
        channel_copies=len(maps),
        dep_shift=_frozen(np.zeros(0, dtype=np.int64)),
        channel_maps=_frozen(maps),
        rounded_up=rounded,
    )


def _channel_maps(orders: IntArray, period: int) -> IntArray | None:
    """Per channel, the rank permutation taking channel 0's ring onto it position by
    position; None unless every ring is unchanged by the shift of ``period`` ranks and
    every permutation commutes with it."""
    n = orders.shape[1]
    maps = np.empty_like(orders)
    shifted = (np.arange(n) + period) % n
    for ch, order in enumerate(orders):
        successor = np.empty(n, dtype=np.int64)
        successor[order] = np.roll(order, -1)
        if not np.array_equal(successor[shifted], (successor + period) % n):
            return None
        maps[ch][orders[0]] = order
        if not np.array_equal(maps[ch][shifted], (maps[ch] + period) % n):
            return None
    return maps


def _copy_route(  # noqa: PLR0917 - one copy's facts, all needed
    known: CopyRoutes,
    topology: nx.DiGraph[str],
    router: Router,
    nodes: tuple[str, ...],
    rep: Schedule,
    protocol: Protocol | None,
    copy: tuple[int, int, tuple[str, ...]],
    link_index: dict[tuple[str, str], int],
    facts: EdgeFacts,
) -> tuple[list[int], float, float]:
    """One copy's links, latency and data fraction (rank ``a`` to ``b`` through ``via``),
    from ``known`` or found and kept there."""
    found = known.get(copy)
    if found is None:
        a, b, via = copy
        edges = route_pair(router, nodes, a, b, via)
        found = known[copy] = (
            [link_index[e] for e in edges],
            pair_latency_s(topology, edges, a, b, rep, nodes, protocol, facts),
            pair_efficiency(topology, edges, protocol, facts),
        )
    return found


def symmetric_routes(  # noqa: PLR0917 - the quotient's inputs
    topology: nx.DiGraph[str],
    sym: SymmetricSchedule,
    nodes: tuple[str, ...],
    protocol: Protocol | None = None,
    router: Router | None = None,
    plan: Plan | None = None,
    known: CopyRoutes | None = None,
) -> tuple[Routes, IntArray] | None:
    """The quotient fabric of ``sym`` on ``topology``, or None if it is not exact.

    Routes every copy of every representative pair (through the plan's NICs and PXN
    proxy on the copy's channel), groups links into classes by capacity and load vector,
    and checks that the copies of each pair cross the classes alike with equal latency
    (see the module docstring). Channels that route alike (the same rank permutation
    and the same plan channel) are routed once and counted as many times. Returns the
    routes over link classes and the class of every topology link (-1 for links no copy
    crosses). ``known`` keeps each copy's links, latency and data fraction for later calls
    with the same ranks' GPUs, protocol and router (the periods
    :func:`simulate_ring_fast` tries in turn route the same copies).
    """
    rep = sym.representatives
    n, g = sym.n_ranks, sym.period_ranks
    router = router or Router(topology)
    table = link_table(topology, router)
    links, link_index = table.links, table.index
    pair = (rep.channel * n + rep.src) * n + rep.dst
    pairs, pair_of = np.unique(pair, return_inverse=True)
    capacity = table.capacity_bytes_per_s
    classes = {int(r): _channel_classes(sym, plan, int(r)) for r in np.unique(rep.channel)}
    facts = table.facts
    known = {} if known is None else known
    shifts = g * np.arange(n // g)
    copy_links: list[list[tuple[list[int], int]]] = []  # [pair] -> (link ids, copies)
    latency = np.zeros(len(pairs))
    efficiency = np.ones(len(pairs))
    for p_index, p in enumerate(pairs.tolist()):
        rep_channel, (src, dst) = p // (n * n), divmod(p % (n * n), n)
        per_copy = []
        latencies = []
        efficiencies = set()
        for ch, weight in classes[rep_channel]:
            sources = (sym.channel_maps[ch][src] + shifts) % n
            targets = (sym.channel_maps[ch][dst] + shifts) % n
            on = sym.plan_channel(rep_channel, ch)
            for a, b in zip(sources.tolist(), targets.tolist(), strict=True):
                via = plan.waypoints(on, a, b) if plan is not None else ()
                found = _copy_route(
                    known, topology, router, nodes, rep, protocol, (a, b, via), link_index, facts
                )
                per_copy.append((found[0], weight))
                latencies.append(found[1])
                efficiencies.add(found[2])
        if max(latencies) - min(latencies) > 1e-12 * max(abs(x) for x in latencies):
            return None
        if len(efficiencies) > 1:
            return None
        latency[p_index] = latencies[0]
        efficiency[p_index] = efficiencies.pop()
        copy_links.append(per_copy)
    # n(L, F): copies of pair F crossing link L.
    load: dict[int, Counter[int]] = defaultdict(Counter)
    for f, per_copy in enumerate(copy_links):
        for route, weight in per_copy:
            for link in route:
                load[link][f] += weight
    signature_class: dict[tuple[float, tuple[tuple[int, int], ...]], int] = {}
    class_of = np.full(len(links), -1, dtype=np.int64)
    for link in sorted(load):
        key = (float(capacity[link]), tuple(sorted(load[link].items())))
        class_of[link] = signature_class.setdefault(key, len(signature_class))
    pair_links: list[IntArray] = []
    pair_weights: list[FloatArray | None] = []
    for f, per_copy in enumerate(copy_links):
        crossings = [Counter(int(class_of[link]) for link in route) for route, _ in per_copy]
        if any(x != crossings[0] for x in crossings[1:]):
            return None
        link_classes = sorted(crossings[0])
        first_link = {int(class_of[link]): link for link in per_copy[0][0]}
        pair_links.append(np.array(link_classes, dtype=np.int64))
        pair_weights.append(
            np.array([load[first_link[k]][f] for k in link_classes], dtype=np.float64)
        )
    class_capacity = np.zeros(len(signature_class))
    for (cap, _), k in signature_class.items():
        class_capacity[k] = cap
    routes = Routes(
        pair_of=pair_of,
        pair_links=pair_links,
        pair_weights=pair_weights,
        latency_s=latency,
        capacity_bytes_per_s=class_capacity,
        efficiency=efficiency,
    )
    return routes, class_of


def _channel_classes(
    sym: SymmetricSchedule, plan: Plan | None, channel: int = 0
) -> list[tuple[int, int]]:
    """Copies of a representative on ``channel`` that route alike, as (one of them, how
    many): same rank permutation and, with a plan, the same plan channel (its rings, trees
    and NICs)."""
    seen: dict[tuple[bytes, int], list[int]] = {}
    for ch in range(sym.channel_copies):
        on = sym.plan_channel(channel, ch)
        key = (
            sym.channel_maps[ch].tobytes(),
            id(plan.channels[on % plan.n_channels]) if plan is not None else 0,
        )
        seen.setdefault(key, []).append(ch)
    return [(members[0], len(members)) for members in seen.values()]


def simulate_symmetric(
    topology: nx.DiGraph[str],
    sym: SymmetricSchedule,
    *,
    model: str = "flow",
    protocol: Protocol | None = None,
    router: Router | None = None,
    plan: Plan | None = None,
    known: CopyRoutes | None = None,
) -> SimulationResult | None:
    """Simulate ``sym`` on its representatives; None if the symmetry is not exact here.

    Ranks go to GPUs as in :func:`simcoll.sim.engine.simulate` (the plan's GPUs, with a
    plan, whose NICs the copies' routes then take). The result's per-transfer
    arrays cover the representatives (``result.schedule`` is
    ``sym.representatives``); its per-link arrays cover every topology link; ``time_s``,
    algbw and busbw are those of the whole collective.
    """
    if model not in {"flow", "ideal"}:
        raise ConfigError(f"the symmetric path runs the flow and ideal models, not {model!r}")
    rep = sym.representatives
    nodes = plan.rank_nodes if plan is not None else map_ranks(topology, rep.n_ranks)
    router = router or Router(topology)
    found = symmetric_routes(topology, sym, nodes, protocol, router, plan, known)
    if found is None:
        return None
    routes, class_of = found
    finish_heap = sym.copy_channels is None
    canonical, label = canonical_routes(routes)
    key = (_schedule_key(rep), _routes_key(canonical), model, repr(protocol), finish_heap)
    runs: dict[object, SimulationResult] = router.memo("symmetric_runs", dict)
    result = runs.get(key)
    if result is None:  # no other group ran a quotient of this shape on this topology
        run = _Run(topology, rep, nodes, model=model, protocol=protocol, packet_bytes=0,
                   routes=canonical, finish_heap=finish_heap, router=router)  # fmt: skip
        result = run.run(model)
        for shared in (result.issue_s, result.start_s, result.end_s):
            shared.setflags(write=False)  # every group a run serves holds these arrays
        if len(runs) >= _KEPT_RUNS:
            runs.clear()
        runs[key] = result
    used = class_of >= 0
    link_bytes = np.zeros(len(class_of))
    link_busy_s = np.zeros(len(class_of))
    link_bytes[used] = result.link_bytes[label[class_of[used]]]
    link_busy_s[used] = result.link_busy_s[label[class_of[used]]]
    return replace(result, schedule=rep, rank_nodes=nodes, link_bytes=link_bytes,
                   link_busy_s=link_busy_s)  # fmt: skip


#: Quotient runs kept per topology (:func:`simulate_symmetric`): a training step's DP
#: groups, each of a few hundred transfers, at a handful of bucket sizes.
_KEPT_RUNS = 256


def canonical_routes(routes: Routes) -> tuple[Routes, IntArray]:
    """``routes`` with its link classes numbered by first use (pairs in order; inside a
    pair by capacity, then weight, then the old number), and ``label[old] = new``.

    Two groups whose quotients are the same up to the numbering of their classes (the
    data-parallel groups of a step, one per rail and stage, on links of their own) get
    equal canonical routes, so one run serves both (:func:`simulate_symmetric`); a tie
    the order does not break only costs a run, never a wrong one.

    >>> r = Routes(pair_of=np.array([0, 1]), pair_links=[np.array([1]), np.array([0, 1])],
    ...            pair_weights=[None, None], latency_s=np.zeros(2),
    ...            capacity_bytes_per_s=np.array([5.0, 9.0]))
    >>> canonical, label = canonical_routes(r)
    >>> [x.tolist() for x in canonical.pair_links], canonical.capacity_bytes_per_s.tolist()
    ([[0], [0, 1]], [9.0, 5.0])
    """
    n_classes = len(routes.capacity_bytes_per_s)
    label = np.full(n_classes, -1, dtype=np.int64)
    taken = 0
    capacity = routes.capacity_bytes_per_s
    for links, weights in zip(routes.pair_links, routes.pair_weights, strict=True):
        w = np.ones(len(links)) if weights is None else weights
        for i in sorted(range(len(links)), key=lambda i: (capacity[links[i]], w[i], links[i])):
            if label[links[i]] < 0:
                label[links[i]] = taken
                taken += 1
    unused = np.flatnonzero(label < 0)
    label[unused] = taken + np.arange(len(unused))
    pair_links: list[IntArray] = []
    pair_weights: list[FloatArray | None] = []
    for links, weights in zip(routes.pair_links, routes.pair_weights, strict=True):
        order = np.argsort(label[links], kind="stable")
        pair_links.append(label[links][order])
        pair_weights.append(None if weights is None else weights[order])
    new_capacity = np.empty(n_classes)
    new_capacity[label] = capacity
    return replace(routes, pair_links=pair_links, pair_weights=pair_weights,
                   capacity_bytes_per_s=new_capacity), label  # fmt: skip


def _routes_key(routes: Routes) -> tuple[object, ...]:
    """Everything a run reads of ``routes``, as bytes."""
    return (
        routes.pair_of.tobytes(),
        tuple(links.tobytes() for links in routes.pair_links),
        tuple(b"" if w is None else w.tobytes() for w in routes.pair_weights),
        routes.latency_s.tobytes(),
        routes.capacity_bytes_per_s.tobytes(),
        b"" if routes.efficiency is None else routes.efficiency.tobytes(),
    )


def _schedule_key(s: Schedule) -> tuple[object, ...]:
    """Everything a run reads of the schedule ``s``, as bytes and values."""
    arrays = (s.src, s.dst, s.op, s.channel, s.piece_bytes, s.pieces_indptr, s.pieces,
              s.deps_indptr, s.deps)  # fmt: skip
    return (s.collective, s.algorithm, s.n_ranks, s.size_bytes, s.root, s.pieces_per_block,
            s.max_in_flight, s.n_switches, repr(sorted(s.params.items())),
            *(a.tobytes() for a in arrays))  # fmt: skip


def simulate_ring_fast(
    topology: nx.DiGraph[str],
    collective: str,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    model: str = "flow",
    protocol: Protocol | None = None,
    plan: Plan | None = None,
    round_up_pieces: bool = False,
    router: Router | None = None,
) -> tuple[SimulationResult, SymmetricSchedule] | None:
    """A ring collective on the symmetric path, with the smallest period that is exact,
    or the period that was exact for the last ring of the same shape on this router's
    topology where that one is exact here too (either is exact: the same times).

    With a ``plan``, its first ``n_channels`` channels' rings (cyclically), GPUs and
    NICs; else every channel's ring is the rank order on the GPUs of ranks 0..N-1.

    Tries the divisors of ``n_ranks`` up to ``n_ranks / 2`` in increasing order, then
    (with several channels) ``n_ranks`` itself: no rank shift, one ring per family of
    channels that are images of each other (a random placement's NCCL rings through each
    NIC in turn). Routes are computed once and reused; None if none is exact or the
    pieces are uneven (and
    not ``round_up_pieces``: see the module docstring), in which case
    :func:`simcoll.sim.engine.simulate` on the whole schedule is the way.

    >>> from simcoll.topology.builders import switch_star
    >>> star = switch_star(16, link_bandwidth_bytes_per_s=50e9, link_latency_s=1e-6)
    >>> result, sym = simulate_ring_fast(star, "allgather", 16, 2**24, n_channels=4)
    >>> sym.period_ranks, sym.representatives.n_transfers, sym.n_transfers
    (1, 15, 960)
    """
    if uneven_pieces(collective, n_ranks, size_bytes, n_channels, n_chunks) and not (
        round_up_pieces and _smallest_piece_bytes(collective, n_ranks, size_bytes,
                                                  n_channels, n_chunks) * ROUND_UP_TOLERANCE >= 1
    ):  # fmt: skip
        return None
    router = router or Router(topology)  # a caller's: routes found for other calls serve
    known: CopyRoutes = {}  # every period routes the same copies: once
    rings = None if plan is None else plan.using(n_channels).rings
    # the period that was exact for the last ring of these ranks' shape on this topology
    # (a step's data-parallel groups, one per rail and stage, alike): tried first, so the
    # periods below it are not built and found inexact for every group again
    exact: dict[object, int] = router.memo("exact_ring_periods", dict)
    shape = (collective, n_ranks, n_channels, n_chunks, rings)
    periods = ring_periods(collective, n_ranks, n_chunks, n_channels)
    if exact.get(shape) in periods:
        periods.remove(exact[shape])
        periods.insert(0, exact[shape])
    nodes = plan.rank_nodes if plan is not None else map_ranks(topology, n_ranks)

    def shaped(period: int, *, pairs_only: bool = False) -> SymmetricSchedule | None:
        return ring_symmetric(collective, n_ranks, size_bytes, n_channels=n_channels,
                              n_chunks=n_chunks, max_in_flight=max_in_flight,
                              period_ranks=period, rings=rings,
                              round_up_pieces=round_up_pieces, pairs_only=pairs_only)  # fmt: skip

    for period in periods:
        if representatives_of(collective, n_ranks, n_chunks, period) > PROBE_ABOVE:
            # many representatives: first the verdict on their pairs alone
            probe = shaped(period, pairs_only=True)
            if probe is None or not symmetric_routes(
                topology, probe, nodes, protocol, router, plan, known
            ):
                continue
        sym = shaped(period)
        if sym is None:
            continue  # the rings are not symmetric under this period: try a longer one
        result = simulate_symmetric(topology, sym, model=model, protocol=protocol,
                                    router=router, plan=plan, known=known)  # fmt: skip
        if result is not None:
            exact[shape] = period
            return result, sym
    return None


#: Rings of more representatives than this are first judged on their pairs alone
#: (``ring_symmetric(..., pairs_only=True)``), and built only where the routes are exact.
PROBE_ABOVE = 1 << 16


def ring_periods(collective: str, n_ranks: int, n_chunks: int, n_channels: int) -> list[int]:
    """The periods :func:`simulate_ring_fast` tries, in order: the divisors of ``n_ranks``
    up to ``n_ranks / 2``, then (with several channels) ``n_ranks`` itself (the channel
    copies only), up to the first whose representatives are more than a schedule may hold.

    >>> ring_periods("allreduce", 8, 1, 1), ring_periods("allreduce", 8, 1, 4)
    ([1, 2, 4], [1, 2, 4, 8])
    """
    periods = [p for p in range(1, n_ranks // 2 + 1) if n_ranks % p == 0]
    if n_channels > 1:
        periods.append(n_ranks)
    fits = [representatives_of(collective, n_ranks, n_chunks, p) <= MAX_TRANSFERS for p in periods]
    return periods[: fits.index(False)] if False in fits else periods


def representatives_of(collective: str, n_ranks: int, n_chunks: int, period_ranks: int) -> int:
    """How many transfers the symmetric path simulates for a ring of ``period_ranks``:
    every step's pieces of one channel's ranks in one period (the periods :func:`simulate_
    ring_fast` tries grow, and at 30,000 GPUs the large ones built for minutes: issue 29).

    >>> representatives_of("allreduce", 8, 2, 1)  # 2 x 7 steps, 2 pieces, one rank
    28
    """
    steps = (2 if collective == "allreduce" else 1) * (n_ranks - 1)
    return steps * n_chunks * period_ranks


def uneven_pieces(
    collective: str, n_ranks: int, size_bytes: int, n_channels: int, n_chunks: int
) -> bool:
    """Whether a ring's pieces differ in size (then no period is exact).

    >>> uneven_pieces("allreduce", 4, 64, 1, 1), uneven_pieces("allreduce", 4, 65, 1, 1)
    (False, True)
    """
    block_bytes, pieces = _block_and_pieces(collective, n_ranks, size_bytes, n_channels, n_chunks)
    return block_bytes % pieces != 0


def _smallest_piece_bytes(
    collective: str, n_ranks: int, size_bytes: int, n_channels: int, n_chunks: int
) -> int:
    block_bytes, pieces = _block_and_pieces(collective, n_ranks, size_bytes, n_channels, n_chunks)
    return block_bytes // pieces


def _block_and_pieces(
    collective: str, n_ranks: int, size_bytes: int, n_channels: int, n_chunks: int
) -> tuple[int, int]:
    """A ring's block bytes and the pieces each block is cut into."""
    coll = Collective(collective)
    ring_blocks = n_ranks if coll is Collective.ALLREDUCE else 1
    return coll.block_bytes(size_bytes, n_ranks), ring_blocks * n_channels * n_chunks
