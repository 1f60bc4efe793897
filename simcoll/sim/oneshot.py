"""One-shot schedules: when every flow starts at once, the flow model's time is a closed form.

A direct all-to-all sends every block at time 0, with nothing waiting on anything. On a
fabric routed by hashed ECMP its flows collide unevenly, so no symmetry folds them
(:mod:`simcoll.sim.symmetry`), and the general path reshares a million flows at every one
of thousands of instants at 1,024 GPUs. Yet the time it finds is a closed form:

    T = t0 + B / (C_L / n_L), for the link L where C_L / n_L is least,

where ``t0`` is when the flows start (their route latency), ``B`` the bytes each moves,
and ``n_L`` the number of flows crossing link ``L`` of capacity ``C_L``. That holds under
max-min fair sharing whenever the flows sharing links start together, move equal bytes
and no flow joins later:

1. Progressive filling raises every flow to the least fair share ``r(t) = min C_L / n_L(t)``
   over the links still loaded, before it freezes any; so every flow runs at least at
   ``r(t)``.
2. No flow joins, so every ``n_L(t)`` only falls, and ``r(t)`` only rises:
   ``r(t) >= r* = C_L* / n_L*`` for the link ``L*`` where it was least at ``t0``.
3. The ``n_L*`` flows on ``L*`` each run at least at ``r*`` and together at most at
   ``C_L*``: so each runs at exactly ``r*`` while all are there. They started together
   with equal bytes, so they stay equal and all arrive at ``t0 + B / r*``.
4. Every other flow runs at least at ``r*`` all along, so it arrives by then.

A connection whose transfers go one after another (a block cut into pieces) counts as one
flow of all their bytes, when each piece starts the instant the one before it arrives: all
are issued at once (no more of them than the window), or the window is deep enough that
the pieces in flight ahead of one outlast its route latency even at the route's fastest
link. Groups of flows with different starts or sizes are each a closed form of their own
when no link carries two groups. :func:`one_shot` checks all that and otherwise returns
None, for the engine to simulate.

On the clock's grid (:mod:`simcoll.network.clock`) a connection's time is the sum of its
pieces' times, each rounded up to a tick, as the engine adds them.

The closed form gives the time the run ends and the bytes on every link, not each
transfer's arrival: it serves predictions (:mod:`simcoll.prediction`), which need no more.
``tests/sim/test_oneshot.py`` holds it to the engine on hashed-ECMP fat-trees, chunked and
not, and to hand counts.

>>> from simcoll.algorithms import build_schedule
>>> from simcoll.sim.engine import prepare
>>> from simcoll.topology.builders import switch_star
>>> star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
>>> schedule = build_schedule("alltoall", "direct", n_ranks=4, size_bytes=4_000_000)
>>> shot = one_shot(prepare(star, schedule))
>>> round(shot.time_s * 1e6, 6)  # 2 us of latency, then 3 blocks of 1 MB out of one 1 GB/s link
3002.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simcoll.network.clock import TICK_S, on_grid_array
from simcoll.sim.engine import Run

__all__ = ["TICK_S", "OneShot", "link_bound_s", "one_shot"]  # TICK_S: the clock's, for callers

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class OneShot:
    """A one-shot run's closed form: when it ends, and what crossed each link."""

    time_s: float
    link_bytes: FloatArray  # wire bytes over each link, in the run's link order
    critical_link: tuple[str, str]  # the link whose fair share sets the time
    n_flows: int  # connections: each a flow from start to end


def one_shot(run: Run) -> OneShot | None:
    """The closed-form result of a prepared flow-model run (see the module), or None
    where it does not hold: a dependency, an in-network switch endpoint, a weighted or
    empty route, a piece of no bytes, a window too shallow to keep a connection's pieces
    back to back, or a group of flows sharing links whose least fair share is not on a
    link of last-started, largest flows only."""
    s = run.s
    if s.n_transfers == 0 or len(s.deps) or s.n_switches:
        return None
    if any(weights is not None for weights in run.pair_weights):
        return None
    wire = np.asarray(run.wire_bytes, dtype=np.float64)
    lengths = np.fromiter(map(len, run.pair_links), dtype=np.int64, count=len(run.pair_links))
    if not (wire > 0).all() or not (lengths > 0).all():
        return None
    flat = np.concatenate(run.pair_links)
    ptr = np.concatenate([[0], np.cumsum(lengths)])
    capacity = run.fabric.capacity_bytes_per_s
    conns = _Connections.of(run)
    flows = _connections(run, conns, wire)
    if flows is None:
        return None
    pair, start_s, bytes_ = flows
    if not _back_to_back(run, conns, wire, np.minimum.reduceat(capacity[flat], ptr[:-1])):
        return None
    # flows sharing links, one group each: when the last starts, and the most bytes
    _, group_of_pair = np.unique(_components(flat, ptr, len(capacity)), return_inverse=True)
    group = group_of_pair[pair]
    n_groups = int(group.max()) + 1
    last_s = np.full(n_groups, -np.inf)
    np.maximum.at(last_s, group, start_s)
    most = np.zeros(n_groups)
    np.maximum.at(most, group, bytes_)
    # per link: flows crossing it, its group, and whether any of them started earlier or
    # moves less than the group's last and largest
    lagging = (start_s != last_s[group]) | (bytes_ != most[group])
    on_pair = np.bincount(pair, minlength=len(lengths))
    lagging_on_pair = np.bincount(pair, weights=lagging, minlength=len(lengths))
    n_on = np.bincount(flat, weights=np.repeat(on_pair, lengths), minlength=len(capacity))
    mixed = np.bincount(flat, weights=np.repeat(lagging_on_pair, lengths), minlength=len(capacity))
    used = np.flatnonzero(n_on)
    link_group = np.zeros(len(capacity), dtype=np.int64)
    link_group[flat] = np.repeat(group_of_pair, lengths)
    share = capacity[used] / n_on[used]
    least = np.full(n_groups, np.inf)
    np.minimum.at(least, link_group[used], share)
    # the proof's link: least fair share of its group, crossed by last and largest flows
    sets = (share == least[link_group[used]]) & (mixed[used] == 0)
    if len(np.unique(link_group[used[sets]])) < n_groups:
        return None
    g = link_group[used[sets]]
    # On the clock's grid, as the engine times it: each piece of a connection after the
    # one before, every piece's time rounded up to a tick (simcoll.network.clock).
    least_of_conn = least[group][np.repeat(np.arange(len(pair)), conns.end - conns.begin)]
    piece_s = on_grid_array(wire[conns.order] / least_of_conn)
    conn_s = np.add.reduceat(piece_s, conns.begin)
    longest = np.zeros(n_groups)
    np.maximum.at(longest, group, conn_s)
    ends_s = last_s[g] + longest[g]
    worst = int(np.argmax(ends_s))
    per_pair = np.bincount(run.pair_of, weights=wire, minlength=len(lengths))
    return OneShot(
        time_s=float(ends_s[worst]),
        link_bytes=np.bincount(flat, np.repeat(per_pair, lengths), len(capacity)).astype(float),
        critical_link=run.links[int(used[sets][worst])],
        n_flows=len(pair),
    )


def _components(flat: IntArray, ptr: IntArray, n_links: int) -> IntArray:
    """Per pair (route ``flat[ptr[p]:ptr[p + 1]]``), the least pair it shares links with,
    directly or through others: a label per connected group. Labels flow from links to
    routes and back, with pointer jumping, until they stand; then every route's links
    carry its label, so routes that share a link share it."""
    n_pairs = len(ptr) - 1
    pair_of_use = np.repeat(np.arange(n_pairs), np.diff(ptr))
    label = np.arange(n_pairs)
    while True:
        on_link = np.full(n_links, n_pairs)
        np.minimum.at(on_link, flat, label[pair_of_use])
        new = np.minimum(label, np.minimum.reduceat(on_link[flat], ptr[:-1]))
        while (new[new] != new).any():
            new = new[new]
        if (new == label).all():
            return label
        label = new


@dataclass(frozen=True)
class _Connections:
    """The run's connections: each one's transfers are ``order[begin[c]:end[c]]``."""

    order: IntArray
    begin: IntArray
    end: IntArray

    @classmethod
    def of(cls, run: Run) -> _Connections:
        end = np.frombuffer(run.conn_end, dtype=np.int64)
        begin = np.concatenate([[0], end[:-1]])
        return cls(np.frombuffer(run.conn_order, dtype=np.int64), begin, end)


def _connections(
    run: Run, conns: _Connections, wire: FloatArray
) -> tuple[IntArray, FloatArray, FloatArray] | None:
    """Per connection: its pair, when its first piece starts, and the bytes of all its
    pieces; None if a connection's pieces do not share one pair (they always do)."""
    first = conns.order[conns.begin]
    pair = run.pair_of[first]
    if (run.pair_of[conns.order] != np.repeat(pair, conns.end - conns.begin)).any():
        return None
    start_s = np.asarray(run.latency_s, dtype=np.float64)[first]
    return pair, start_s, np.add.reduceat(wire[conns.order], conns.begin)


def _back_to_back(run: Run, conns: _Connections, wire: FloatArray, slowest: FloatArray) -> bool:
    """Whether every piece of every connection starts the instant the one before it
    arrives. The first ``max_in_flight`` are issued at time 0. Piece ``j`` after them is
    issued when piece ``j - w`` arrives and starts a latency later, or when piece ``j - 1``
    arrives if that is later; the ``w - 1`` pieces between take at least their bytes at
    the route's slowest link each, so that is later if those cover the latency."""
    w = run.s.max_in_flight
    deep = np.flatnonzero(conns.end - conns.begin > w)
    if not len(deep):
        return True
    least = np.minimum.reduceat(wire[conns.order], conns.begin)[deep]
    first = conns.order[conns.begin[deep]]
    latency_s = np.asarray(run.latency_s, dtype=np.float64)[first]
    shortest_s = least / slowest[run.pair_of[first]]
    return bool(((w - 1) * shortest_s >= latency_s).all())


def link_bound_s(run: Run) -> float:
    """A time no flow-model run of ``run`` can beat: on every link, the earliest start of
    a flow that crosses it (nothing is issued before time 0, and a flow starts after its
    route latency) plus all the link's wire bytes at its bandwidth; and every route's
    latency. A one-shot run ends exactly there (:func:`one_shot`).

    >>> from simcoll.algorithms import build_schedule
    >>> from simcoll.sim.engine import prepare
    >>> from simcoll.topology.builders import switch_star
    >>> star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    >>> pairwise = build_schedule("alltoall", "pairwise", n_ranks=4, size_bytes=4_000_000)
    >>> round(link_bound_s(prepare(star, pairwise)) * 1e6, 6)  # as the direct one's end
    3002.0
    """
    lengths = np.fromiter(map(len, run.pair_links), dtype=np.int64, count=len(run.pair_links))
    latency_s = np.zeros(len(lengths))
    latency_s[run.pair_of] = run.latency_s  # one latency per pair
    bound_s = float(latency_s.max(initial=0.0))
    if not lengths.any():
        return bound_s
    flat = np.concatenate(run.pair_links)
    capacity = run.fabric.capacity_bytes_per_s
    per_pair = np.bincount(run.pair_of, weights=run.wire_bytes, minlength=len(lengths))
    on_link = np.bincount(flat, np.repeat(per_pair, lengths), len(capacity))
    first_s = np.full(len(capacity), np.inf)
    np.minimum.at(first_s, flat, np.repeat(latency_s, lengths))
    used = np.flatnonzero(on_link)
    return max(bound_s, float((first_s[used] + on_link[used] / capacity[used]).max(initial=0.0)))
