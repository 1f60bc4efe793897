"""The flow model's event loop, compiled: a run on its own clock in one numba function.

:mod:`simcoll.sim.engine` releases transfers and :class:`~simcoll.network.fabric.Fabric`
shares bandwidth among them, one SimPy step per instant. That is the reference. For a run
with the ``flow`` model (one schedule, or a workload's execution graph,
:mod:`simcoll.sim.graph`), :func:`run_flows` does the same work here, with
the same arithmetic in the same order where order matters, so every time comes out the
same, bit for bit (``tests/network/test_kernel.py`` checks it on many schedules and
fabrics, with and without the symmetric path's weights):

- the engine's rules (:class:`simcoll.sim.engine._Run`): a transfer is issued when its
  dependencies have arrived, it is next on its connection and the connection's window
  has room; it is sent when its connection's previous transfer is through, at
  ``max(now, issue + latency)``;
- the fabric's (:class:`~simcoll.network.fabric.Fabric`): every finish time on the
  clock's grid (:mod:`simcoll.network.clock`), everything due within two ticks of the
  clock one instant; the flows of the connected component of
  the links whose flow set changed get max-min rates by progressive filling
  (:mod:`simcoll.network.fairshare`); a flow whose rate stands keeps its bytes and
  finish time; the clock moves as SimPy moves it, ``now + (next - now)``.

Three differences in how, none in what: a connection has at most one flow in the
fabric, so the connection is the flow's slot; rates are computed afresh per component
rather than taken from a memo; and progressive filling lowers a link's count as its flows
freeze rather than recounting every flow each round. Progressive filling gives the same
floats in any flow order, and either way of counting, because incidence weights are
whole numbers (1, or a count of copies), so the sums it forms are exact.

numba compiles this module's functions on first use (about 11 s) and caches them beside
the module, so later processes load them in a fraction of a second; the engine runs a
small run on the reference until then (:func:`warm`). Without numba (:func:`available`
is False) every run takes the reference.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simcoll.network.clock import SAME_INSTANT_TICKS, TICK_S

try:
    import numba
except ImportError:  # pragma: no cover - numba is a dependency; the reference still runs
    numba = None  # type: ignore[assignment]

__all__ = ["KernelRun", "available", "run_flows", "warm"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# The fabric's constants (simcoll.network.clock, simcoll.network.fairshare).
_TICK_S = TICK_S
_TICKS_PER_S = 1.0 / TICK_S
_SAME_INSTANT_TICKS = SAME_INSTANT_TICKS
_SAME_INSTANT_RELATIVE = 4.0 * 2.0**-53
_SAME_LEVEL = 1e-12


def available() -> bool:
    """Whether numba is installed, so that :func:`run_flows` runs compiled."""
    return numba is not None


def warm() -> bool:
    """Whether :func:`run_flows` starts at once: compiled in this process already, or in
    numba's cache on disk (an entry left stale by an edit of this module compiles once
    more). Compiling costs about 11 s on the project's 2-core machine, once."""
    if numba is None:  # pragma: no cover
        return False
    if _simulate.signatures:
        return True
    try:
        return os.path.exists(_simulate._cache._cache_file._index_path)
    except AttributeError:  # pragma: no cover - numba's cache laid out otherwise
        return False


@dataclass(frozen=True)
class KernelRun:
    """What :func:`run_flows` fills in besides the per-transfer times it writes in place."""

    deps_left: IntArray  # per transfer: dependencies never met (all 0 after a full run)
    link_busy_s: FloatArray
    instants: int
    reshares: int
    flow_rate_updates: int


def run_flows(  # noqa: PLR0917 - the run's arrays, as the engine holds them
    pair_of: IntArray,
    wire_bytes: FloatArray,
    latency_s: FloatArray,
    deps_left: IntArray,
    dependents_ptr: IntArray,
    dependents: IntArray,
    conn_of: IntArray,
    conn_order: IntArray,
    conn_end: IntArray,
    conn_window: IntArray,
    pair_links: list[IntArray],
    pair_weights: list[FloatArray | None],
    capacity_bytes_per_s: FloatArray,
    issue_s: FloatArray,
    start_s: FloatArray,
    end_s: FloatArray,
    rate_cap_bytes_per_s: FloatArray | None = None,
) -> KernelRun:
    """Run every transfer to its arrival; fill ``issue_s``, ``start_s`` and ``end_s``.

    The arguments are the engine's (see :class:`simcoll.sim.engine._Run`): per transfer
    its pair, wire bytes, latency, dependencies left and dependents (CSR); per connection
    its transfers in order (``conn_order[conn_end[c - 1]:conn_end[c]]``) and the most of
    them in flight at once (its window); per pair its links and their weights (None for
    all 1); per link its capacity; and optionally per transfer the most rate it may take
    (``inf``: none), which the fabric's flows take as a link of their own
    (:func:`simcoll.network.fairshare.max_min_rates_sparse`).

    One transfer of 1 B over two links of 4 B/s, no latency: it starts at 0 and arrives
    at 0.25 s, two instants.

    >>> one, none = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    >>> end_s = np.full(1, np.nan)
    >>> done = run_flows(one, np.ones(1), np.zeros(1), one.copy(), np.zeros(2, dtype=np.int64),
    ...                  none, one, one, np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64),
    ...                  [np.array([0, 1])],
    ...                  [None], np.array([4.0, 4.0]), np.full(1, np.nan), np.full(1, np.nan),
    ...                  end_s)
    >>> end_s.tolist(), done.instants, done.link_busy_s.tolist()
    ([0.25], 2, [0.25, 0.25])
    """
    lengths = np.array([len(links) for links in pair_links], dtype=np.int64)
    pair_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    link = np.concatenate([*pair_links, np.zeros(0, dtype=np.int64)]).astype(np.int64)
    weight = np.concatenate(
        [np.ones(len(links)) if w is None else w
         for links, w in zip(pair_links, pair_weights, strict=True)] + [np.zeros(0)]
    ).astype(np.float64)  # fmt: skip
    left = np.array(deps_left, dtype=np.int64)
    busy_s = np.zeros(len(capacity_bytes_per_s))
    cap = (np.full(len(pair_of), np.inf) if rate_cap_bytes_per_s is None
           else np.asarray(rate_cap_bytes_per_s, dtype=np.float64))  # fmt: skip
    stats = np.zeros(3, dtype=np.int64)
    notice = _compile_notice()
    _simulate(
        np.asarray(pair_of, dtype=np.int64),
        np.asarray(wire_bytes, dtype=np.float64),
        np.asarray(latency_s, dtype=np.float64),
        left,
        np.asarray(dependents_ptr, dtype=np.int64),
        np.asarray(dependents, dtype=np.int64),
        np.asarray(conn_of, dtype=np.int64),
        np.asarray(conn_order, dtype=np.int64),
        np.asarray(conn_end, dtype=np.int64),
        np.asarray(conn_window, dtype=np.int64),
        pair_ptr,
        link,
        weight,
        np.asarray(capacity_bytes_per_s, dtype=np.float64),
        issue_s,
        start_s,
        end_s,
        busy_s,
        stats,
        cap,
        bool(np.isfinite(cap).any()),
    )
    if notice is not None:
        notice.cancel()
    instants, reshares, updates = stats.tolist()
    return KernelRun(left, busy_s, instants, reshares, updates)


#: Called (by a timer) when the event loop's first call in this process has not returned
#: after :data:`COMPILE_NOTICE_AFTER_S`: numba is compiling it (10-15 s once, then read from
#: its cache). The command line sets it to a line on a terminal's standard error.
COMPILE_NOTICE: Callable[[], None] | None = None
COMPILE_NOTICE_AFTER_S = 1.0


def _compile_notice() -> threading.Timer | None:
    """A started timer for :data:`COMPILE_NOTICE`, before the loop's first call here."""
    if COMPILE_NOTICE is None or numba is None or getattr(_simulate, "signatures", [1]):
        return None
    timer = threading.Timer(COMPILE_NOTICE_AFTER_S, COMPILE_NOTICE)
    timer.daemon = True
    timer.start()
    return timer


def _jit(function):  # type: ignore[no-untyped-def]
    """numba's ``njit(cache=True)``; without a writable cache (numba finds none beside the
    module nor in the user's cache directory) ``njit`` alone, compiled in each process;
    the plain function where numba is missing."""
    if numba is None:  # pragma: no cover
        return function
    try:
        return numba.njit(cache=True)(function)
    except RuntimeError:  # pragma: no cover - "cannot cache function ...: no locator"
        return numba.njit(function)


@_jit
def _on_grid(time_s):  # type: ignore[no-untyped-def]
    """simcoll.network.clock.on_grid, compiled: the same arithmetic. ``np.ceil`` keeps the
    ticks a float: numba's ``math.ceil`` returns an int64, which wrapped past 2^63 ticks
    (8,192 s), so a transfer of more than 8,192 s ended at its latency (issue 41); a whole
    float times the tick is exactly what Python's int times the tick gives."""
    return np.ceil(time_s * _TICKS_PER_S) * _TICK_S


@_jit
def _instant_ends(now):  # type: ignore[no-untyped-def]
    """simcoll.network.clock.instant_ends_s, compiled."""
    return max(now + _SAME_INSTANT_TICKS * _TICK_S, now * (1.0 + _SAME_INSTANT_RELATIVE))


# -- binary heaps on arrays: (key, id) ordered, with one more array carried along ---------


@_jit
def _heap_push(key, ident, aux, size, k, i, a):  # type: ignore[no-untyped-def]  # noqa: PLR0917
    at = size
    key[at], ident[at], aux[at] = k, i, a
    while at > 0:
        up = (at - 1) // 2
        if key[at] < key[up] or (key[at] == key[up] and ident[at] < ident[up]):
            key[at], key[up] = key[up], key[at]
            ident[at], ident[up] = ident[up], ident[at]
            aux[at], aux[up] = aux[up], aux[at]
            at = up
        else:
            break
    return size + 1


@_jit
def _heap_sift_down(key, ident, aux, size, at):  # type: ignore[no-untyped-def]
    while True:
        low = at
        for child in (2 * at + 1, 2 * at + 2):
            if child < size and (
                key[child] < key[low] or (key[child] == key[low] and ident[child] < ident[low])
            ):
                low = child
        if low == at:
            return
        key[at], key[low] = key[low], key[at]
        ident[at], ident[low] = ident[low], ident[at]
        aux[at], aux[low] = aux[low], aux[at]
        at = low


@_jit
def _heap_pop(key, ident, aux, size):  # type: ignore[no-untyped-def]
    size -= 1
    key[0], ident[0], aux[0] = key[size], ident[size], aux[size]
    _heap_sift_down(key, ident, aux, size, 0)
    return size


@_jit
def _heap_compact(key, ident, aux, size, version):  # type: ignore[no-untyped-def]
    """Drop stale finish entries (their version is not their slot's) and re-heap."""
    kept = 0
    for at in range(size):
        if aux[at] == version[ident[at]]:
            key[kept], ident[kept], aux[kept] = key[at], ident[at], aux[at]
            kept += 1
    for at in range(kept // 2 - 1, -1, -1):
        _heap_sift_down(key, ident, aux, kept, at)
    return kept


@_jit
def _set_finish(slot, finish_s, version, key, ident, aux, size):  # type: ignore[no-untyped-def]  # noqa: PLR0917
    """Fabric._set_finish: the slot's finish time, in the finish heap under a new version
    (its older entries go stale); the heap drops stale entries when it is full (it has
    room for two per slot, and at most one per slot is current). Returns its size."""
    version[slot] += 1
    if size == len(key):
        size = _heap_compact(key, ident, aux, size, version)
    return _heap_push(key, ident, aux, size, finish_s, slot, version[slot])


@_jit
def _issue(  # type: ignore[no-untyped-def]  # noqa: PLR0917
    c, now, most, conn_next, conn_end, conn_sent, conn_order, in_flight, sending, deps_left,
    issue_s, start_s, latency, wire, flow, remaining, pend_key, pend_id, pend_slot, n_pend,
):  # fmt: skip
    """_Run._try_issue of connection ``c`` (``most``: every connection's window); returns
    the pending heap's new size."""
    while conn_next[c] < conn_end[c] and in_flight[c] < most[c]:
        t = conn_order[conn_next[c]]
        if deps_left[t]:
            break
        conn_next[c] += 1
        in_flight[c] += 1
        issue_s[t] = now
        if not sending[c]:  # else it queues: issued, sent when the one before is through
            sending[c] = True
            conn_sent[c] += 1
            n_pend = _send(c, t, now + latency[t], now, start_s, wire, flow, remaining,
                           pend_key, pend_id, pend_slot, n_pend)  # fmt: skip
    return n_pend


@_jit
def _send(  # type: ignore[no-untyped-def]  # noqa: PLR0917
    c, t, ready_s, now, start_s, wire, flow, remaining, pend_key, pend_id, pend_slot, n_pend
):
    """_Run._send and Fabric.send: transfer ``t`` waits in slot ``c`` for ``ready_s``."""
    start_s[t] = ready_s
    flow[c] = t
    remaining[c] = wire[t]
    return _heap_push(pend_key, pend_id, pend_slot, n_pend, max(ready_s, now), t, c)


# -- the flows on each link: doubly linked lists of incidences (slot * width + k) ----


@_jit
def _link(node, lk, head, node_next, node_prev):  # type: ignore[no-untyped-def]
    node_prev[node] = -1
    node_next[node] = head[lk]
    if head[lk] >= 0:
        node_prev[head[lk]] = node
    head[lk] = node


@_jit
def _unlink(node, lk, head, node_next, node_prev):  # type: ignore[no-untyped-def]
    before, after = node_prev[node], node_next[node]
    if before >= 0:
        node_next[before] = after
    else:
        head[lk] = after
    if after >= 0:
        node_prev[after] = before


@_jit
def _component(  # type: ignore[no-untyped-def]  # noqa: PLR0917
    changed, epoch, head, node_next, width, flow, pair_of, pair_ptr, pair_link, link_seen,
    slot_seen, stack, component,
):  # fmt: skip
    """Fabric._component: the slots linked to the ``changed`` links through shared links,
    into ``component``; returns how many. ``epoch`` is new: it stamps what was seen."""
    n_stack = 0
    for lk in changed:
        link_seen[lk] = epoch
        stack[n_stack] = lk
        n_stack += 1
    n_comp = 0
    while n_stack:
        n_stack -= 1
        node = head[stack[n_stack]]
        while node >= 0:
            slot = node // width
            if slot_seen[slot] != epoch:
                slot_seen[slot] = epoch
                component[n_comp] = slot
                n_comp += 1
                p = pair_of[flow[slot]]
                for e in range(pair_ptr[p], pair_ptr[p + 1]):
                    lk = pair_link[e]
                    if link_seen[lk] != epoch:
                        link_seen[lk] = epoch
                        stack[n_stack] = lk
                        n_stack += 1
            node = node_next[node]
    return n_comp


@_jit
def _uses(component, flow, pair_of, pair_ptr, cap):  # type: ignore[no-untyped-def]
    """How many flow-link incidences the component's flows make (a capped flow's own
    link, its cap, counted)."""
    n_use = 0
    for slot in component:
        t = flow[slot]
        p = pair_of[t]
        n_use += pair_ptr[p + 1] - pair_ptr[p]
        if cap[t] < math.inf:
            n_use += 1
    return n_use


@_jit
def _incidences(  # type: ignore[no-untyped-def]  # noqa: PLR0917
    component, epoch, flow, pair_of, pair_ptr, pair_link, pair_weight, capacity, link_seen,
    link_local, use_flow, use_link, use_weight, local_capacity, cap,
):  # fmt: skip
    """The component's incidences for :func:`_max_min` into ``use_*`` (room for all of
    them), its links numbered from 0 as they are met, with their capacities; returns how
    many links. ``epoch`` is new: it stamps the links numbered. A flow with a rate cap
    gets a link of its own of that capacity (as the reference adds one per capped flow;
    the order of links changes no float, see :func:`_max_min`)."""
    n_local = 0
    at = 0
    for x in range(len(component)):
        t = flow[component[x]]
        if cap[t] < math.inf:
            local_capacity[n_local] = cap[t]
            use_flow[at] = x
            use_link[at] = n_local
            use_weight[at] = 1.0
            n_local += 1
            at += 1
        p = pair_of[t]
        for e in range(pair_ptr[p], pair_ptr[p + 1]):
            lk = pair_link[e]
            if link_seen[lk] != epoch:
                link_seen[lk] = epoch
                link_local[lk] = n_local
                local_capacity[n_local] = capacity[lk]
                n_local += 1
            use_flow[at] = x
            use_link[at] = link_local[lk]
            use_weight[at] = pair_weight[e]
            at += 1
    return n_local


# -- max-min fair rates ----------------------------------------------------------------


@_jit
def _incidence_index(  # type: ignore[no-untyped-def]  # noqa: PLR0917
    n_flows, n_use, n_links, use_flow, use_link, count, filled, on_link, flow_uses,
):  # fmt: skip
    """The incidences of each link (``on_link[count[l]:count[l + 1]]``) and of each flow
    (``flow_uses[x]`` to ``flow_uses[x + 1]``: they come in flow order)."""
    count[: n_links + 1] = 0
    for u in range(n_use):
        count[use_link[u] + 1] += 1
    for lk in range(n_links):
        count[lk + 1] += count[lk]
    filled[:n_links] = count[:n_links]
    for u in range(n_use):
        on_link[filled[use_link[u]]] = u
        filled[use_link[u]] += 1
    flow_uses[: n_flows + 1] = 0
    for u in range(n_use):
        flow_uses[use_flow[u] + 1] = u + 1
    for x in range(n_flows):
        flow_uses[x + 1] = max(flow_uses[x + 1], flow_uses[x])


@_jit
def _max_min(  # type: ignore[no-untyped-def]  # noqa: PLR0912, PLR0917
    n_flows, n_use, n_links, use_flow, use_link, use_weight, capacity, link_work, flow_work,
):  # fmt: skip
    """fairshare._progressive_filling, with the same floats: incidence ``u`` puts flow
    ``use_flow[u]`` on local link ``use_link[u]`` with weight ``use_weight[u]``; the rates
    go to ``flow_work``'s rate array. The work arrays are reused from call to call.

    Each round the reference recounts every active incidence; here a link's count drops
    as its flows freeze (the counts are sums of whole numbers, so they are the same
    floats), so a round costs the links still loaded, and each incidence is met twice in
    all. A flow's rate is the steps added up to the round it freezes in, summed in the
    same order as the reference adds them to every active flow.
    """
    users, left, share, count, filled, loaded, full = link_work
    flow_uses, rate, active, freezing, on_link = flow_work
    users[:n_links] = 0.0
    for u in range(n_use):
        users[use_link[u]] += use_weight[u]
    _incidence_index(n_flows, n_use, n_links, use_flow, use_link, count, filled, on_link,
                     flow_uses)  # fmt: skip
    left[:n_links] = capacity[:n_links]
    n_loaded = 0
    for lk in range(n_links):
        if users[lk] != 0.0:
            loaded[n_loaded] = lk
            n_loaded += 1
    rate[:n_flows] = 0.0
    active[:n_flows] = True
    n_active = n_flows
    level_s = 0.0  # the steps so far, added up as the reference adds them
    while n_active:
        step = math.inf
        for i in range(n_loaded):
            lk = loaded[i]
            share[lk] = left[lk] / users[lk]
            step = min(step, share[lk])
        level_s += step
        saturated = step * (1 + _SAME_LEVEL)
        n_full = 0
        for i in range(n_loaded):
            lk = loaded[i]
            left[lk] -= step * users[lk]
            if share[lk] <= saturated:
                left[lk] = 0.0
                full[n_full] = lk
                n_full += 1
        n_freezing = 0
        for i in range(n_full):
            lk = full[i]
            for j in range(count[lk], count[lk + 1]):
                x = use_flow[on_link[j]]
                if active[x]:
                    active[x] = False
                    rate[x] = level_s
                    freezing[n_freezing] = x
                    n_freezing += 1
        n_active -= n_freezing
        for i in range(n_freezing):
            x = freezing[i]
            for u in range(flow_uses[x], flow_uses[x + 1]):
                users[use_link[u]] -= use_weight[u]
        kept = 0
        for i in range(n_loaded):
            if users[loaded[i]] != 0.0:
                loaded[kept] = loaded[i]
                kept += 1
        n_loaded = kept


# -- the run ---------------------------------------------------------------------------


@_jit
def _simulate(  # type: ignore[no-untyped-def]  # noqa: PLR0912, PLR0915, PLR0917
    pair_of,
    wire,
    latency,
    deps_left,
    dep_ptr,
    dep_idx,
    conn_of,
    conn_order,
    conn_end,
    most,
    pair_ptr,
    pair_link,
    pair_weight,
    capacity,
    issue_s,
    start_s,
    end_s,
    busy_s,
    stats,
    cap,
    capped,
):
    n_conn = len(conn_end)
    n_links = len(capacity)
    # a component's local links: the fabric's, and one per capped flow (one per slot)
    n_room = n_links + (n_conn if capped else 0)
    n_left = len(pair_of)
    # engine: per connection, the next transfer to issue and the next to send (positions
    # in conn_order; those in between are issued and queued)
    conn_next = np.empty(n_conn, dtype=np.int64)
    for c in range(n_conn):
        conn_next[c] = 0 if c == 0 else conn_end[c - 1]
    conn_sent = conn_next.copy()
    in_flight = np.zeros(n_conn, dtype=np.int64)
    sending = np.zeros(n_conn, dtype=np.bool_)
    # fabric: one slot per connection (at most one of its flows is in the fabric)
    flow = np.full(n_conn, -1, dtype=np.int64)
    remaining = np.zeros(n_conn)
    rate = np.zeros(n_conn)
    updated = np.zeros(n_conn)
    version = np.zeros(n_conn, dtype=np.int64)
    joined = np.zeros(n_conn, dtype=np.bool_)
    width = 1
    for p in range(len(pair_ptr) - 1):
        width = max(width, pair_ptr[p + 1] - pair_ptr[p])
    # the flows on each link: doubly linked lists of incidences (slot * width + k)
    head = np.full(n_links, -1, dtype=np.int64)
    on_link = np.zeros(n_links, dtype=np.int64)
    node_next = np.full(n_conn * width, -1, dtype=np.int64)
    node_prev = np.full(n_conn * width, -1, dtype=np.int64)
    busy_since = np.zeros(n_links)
    # heaps: flows waiting to start (start, flow id, slot); finish times (finish, slot,
    # version), an entry counting only while its version is the slot's
    pend_key = np.empty(n_conn)
    pend_id = np.empty(n_conn, dtype=np.int64)
    pend_slot = np.empty(n_conn, dtype=np.int64)
    n_pend = 0
    fin_room = 2 * n_conn + 16
    fin_key = np.empty(fin_room)
    fin_slot = np.empty(fin_room, dtype=np.int64)
    fin_ver = np.empty(fin_room, dtype=np.int64)
    n_fin = 0
    # scratch, stamped by epoch rather than cleared
    changed = np.empty(n_links, dtype=np.int64)
    link_seen = np.zeros(n_links, dtype=np.int64)
    slot_seen = np.zeros(n_conn, dtype=np.int64)
    link_local = np.zeros(n_links, dtype=np.int64)
    touched = np.empty(n_conn, dtype=np.int64)
    touched_at = np.zeros(n_conn, dtype=np.int64)
    n_touched = 0
    due = np.empty(n_conn, dtype=np.int64)
    ids = np.empty(n_conn, dtype=np.int64)
    component = np.empty(n_conn, dtype=np.int64)
    stack = np.empty(n_links, dtype=np.int64)
    # max-min's work arrays: per link of a component (at most every link), per flow and
    # per incidence (grown to the largest component met)
    local_capacity = np.empty(n_room)
    link_work = (np.empty(n_room), np.empty(n_room), np.empty(n_room),
                 np.empty(n_room + 1, dtype=np.int64), np.empty(n_room, dtype=np.int64),
                 np.empty(n_room, dtype=np.int64), np.empty(n_room, dtype=np.int64))  # fmt: skip
    use_flow = np.empty(16, dtype=np.int64)
    use_link = np.empty(16, dtype=np.int64)
    use_weight = np.empty(16)
    on_incidence = np.empty(16, dtype=np.int64)
    flow_uses = np.empty(17, dtype=np.int64)
    new_rate = np.empty(17)
    active = np.empty(17, dtype=np.bool_)
    freezing = np.empty(17, dtype=np.int64)
    epoch = 0
    instants = reshares = updates = 0
    now = 0.0

    batch = 0  # stamps the connections one arrival batch touched
    for c in range(n_conn):  # _Run.start: issue what can be issued at time 0
        n_pend = _issue(c, now, most, conn_next, conn_end, conn_sent, conn_order, in_flight,
                        sending, deps_left, issue_s, start_s, latency, wire, flow, remaining,
                        pend_key, pend_id, pend_slot, n_pend)  # fmt: skip
    while True:
        # -- Fabric._next_event_s, then SimPy's clock --------------------------------
        while n_fin and fin_ver[0] != version[fin_slot[0]]:
            n_fin = _heap_pop(fin_key, fin_slot, fin_ver, n_fin)
        next_s = math.inf
        if n_fin:
            next_s = fin_key[0]
        if n_pend and pend_key[0] < next_s:
            next_s = pend_key[0]
        if next_s == math.inf:
            break
        now = now + max(0.0, next_s - now)
        # -- Fabric._step ------------------------------------------------------------
        due_by = _instant_ends(now)
        epoch += 1
        n_changed = 0
        n_joined = 0
        acted = False
        while True:
            n_due = 0
            while n_fin and fin_key[0] <= due_by:
                slot, ver = fin_slot[0], fin_ver[0]
                n_fin = _heap_pop(fin_key, fin_slot, fin_ver, n_fin)
                if ver == version[slot]:
                    due[n_due] = slot
                    n_due += 1
            if n_due:
                for x in range(n_due):  # Fabric._retire
                    slot = due[x]
                    version[slot] += 1
                    rate[slot] = 0.0
                    if joined[slot]:
                        joined[slot] = False
                        p = pair_of[flow[slot]]
                        for k in range(pair_ptr[p + 1] - pair_ptr[p]):
                            lk = pair_link[pair_ptr[p] + k]
                            _unlink(slot * width + k, lk, head, node_next, node_prev)
                            on_link[lk] -= 1
                            if link_seen[lk] != epoch:
                                link_seen[lk] = epoch
                                changed[n_changed] = lk
                                n_changed += 1
                            if on_link[lk] == 0:
                                busy_s[lk] += now - busy_since[lk]
                    ids[x] = flow[slot]
                    flow[slot] = -1
                arrived = ids[:n_due]
                arrived.sort()
                batch += 1  # _Run._on_arrival
                n_touched = 0
                for x in range(n_due):
                    t = arrived[x]
                    start_s[t] = min(start_s[t], now)
                    end_s[t] = now
                    c = conn_of[t]
                    in_flight[c] -= 1
                    if conn_sent[c] < conn_next[c]:  # its next queued transfer goes
                        nxt = conn_order[conn_sent[c]]
                        conn_sent[c] += 1
                        n_pend = _send(c, nxt, max(now, issue_s[nxt] + latency[nxt]), now,
                                       start_s, wire, flow, remaining, pend_key, pend_id,
                                       pend_slot, n_pend)  # fmt: skip
                    else:
                        sending[c] = False
                    if touched_at[c] != batch:
                        touched_at[c] = batch
                        touched[n_touched] = c
                        n_touched += 1
                    for d in range(dep_ptr[t], dep_ptr[t + 1]):
                        u = dep_idx[d]
                        deps_left[u] -= 1
                        if deps_left[u] == 0:
                            cu = conn_of[u]
                            if touched_at[cu] != batch:
                                touched_at[cu] = batch
                                touched[n_touched] = cu
                                n_touched += 1
                n_left -= n_due
                touched[:n_touched].sort()
                for c in touched[:n_touched]:
                    n_pend = _issue(c, now, most, conn_next, conn_end, conn_sent, conn_order,
                                    in_flight, sending, deps_left, issue_s, start_s, latency,
                                    wire, flow, remaining, pend_key, pend_id, pend_slot,
                                    n_pend)  # fmt: skip
            # Fabric._admit
            n_new = 0
            while n_pend and pend_key[0] <= due_by:
                slot = pend_slot[0]
                n_pend = _heap_pop(pend_key, pend_id, pend_slot, n_pend)
                updated[slot] = now
                p = pair_of[flow[slot]]
                if remaining[slot] <= 0.0 or pair_ptr[p + 1] == pair_ptr[p]:
                    # arrives now, shares nothing
                    n_fin = _set_finish(slot, now, version, fin_key, fin_slot, fin_ver, n_fin)
                    continue
                joined[slot] = True
                n_new += 1
                for k in range(pair_ptr[p + 1] - pair_ptr[p]):
                    lk = pair_link[pair_ptr[p] + k]
                    if on_link[lk] == 0:
                        busy_since[lk] = now
                    _link(slot * width + k, lk, head, node_next, node_prev)
                    on_link[lk] += 1
                    if link_seen[lk] != epoch:
                        link_seen[lk] = epoch
                        changed[n_changed] = lk
                        n_changed += 1
            n_joined += n_new
            if n_due == 0 and n_new == 0:
                break
            acted = True
        if acted:
            instants += 1
        if n_changed == 0 and n_joined == 0:
            continue
        # -- Fabric._reshare: the component of the changed links ----------------------
        epoch += 1
        n_comp = _component(
            changed[:n_changed], epoch, head, node_next, width, flow, pair_of, pair_ptr,
            pair_link, link_seen, slot_seen, stack, component,
        )  # fmt: skip
        if n_comp == 0:
            continue
        reshares += 1
        updates += n_comp
        n_use = _uses(component[:n_comp], flow, pair_of, pair_ptr, cap)
        if n_use > len(use_flow):  # the work arrays grow to the largest component yet
            use_flow = np.empty(2 * n_use, dtype=np.int64)
            use_link = np.empty(2 * n_use, dtype=np.int64)
            use_weight = np.empty(2 * n_use)
            on_incidence = np.empty(2 * n_use, dtype=np.int64)
        if n_comp + 1 > len(new_rate):
            flow_uses = np.empty(2 * n_comp + 1, dtype=np.int64)
            new_rate = np.empty(2 * n_comp + 1)
            active = np.empty(2 * n_comp + 1, dtype=np.bool_)
            freezing = np.empty(2 * n_comp + 1, dtype=np.int64)
        epoch += 1
        n_local = _incidences(
            component[:n_comp], epoch, flow, pair_of, pair_ptr, pair_link, pair_weight, capacity,
            link_seen, link_local, use_flow, use_link, use_weight, local_capacity, cap,
        )  # fmt: skip
        _max_min(n_comp, n_use, n_local, use_flow, use_link, use_weight, local_capacity,
                 link_work, (flow_uses, new_rate, active, freezing, on_incidence))  # fmt: skip
        # -- the new rates: a flow whose rate stands keeps its bytes and finish ------
        for x in range(n_comp):
            slot = component[x]
            if new_rate[x] == rate[slot]:
                continue
            bytes_left = remaining[slot] - rate[slot] * (now - updated[slot])
            remaining[slot] = bytes_left
            updated[slot] = now
            rate[slot] = new_rate[x]
            n_fin = _set_finish(slot, now + _on_grid(max(bytes_left, 0.0) / new_rate[x]), version,
                                fin_key, fin_slot, fin_ver, n_fin)  # fmt: skip
    # Fabric.close: links still busy count up to now.
    for lk in range(n_links):
        if on_link[lk]:
            busy_s[lk] += now - busy_since[lk]
    stats[0], stats[1], stats[2] = instants, reshares, updates
