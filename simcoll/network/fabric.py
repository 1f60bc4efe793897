"""The fabric: the one SimPy process that owns flows in flight.

This is the reference. A run on its own clock with the ``flow`` model runs the same rules
compiled (:mod:`simcoll.network.kernel`), to the same floats; runs that share a clock
(workloads) run here.

A flow is one transfer on its whole route. The engine hands it over with
:meth:`Fabric.send` and the time it may start moving bytes (its route latency already
paid: SimGrid's rule, latency before sharing). From then on the fabric

- lets it join the set of flows sharing bandwidth at that time;
- gives every flow its max-min fair rate (:mod:`simcoll.network.fairshare`), or with
  ``contention=False`` the bottleneck capacity of its route as if it were alone;
- sleeps until the next flow finishes or joins, and reports arrivals to the engine
  through ``on_arrival``, all flows finishing at one instant in one call.

Speed: everything due at one instant is handled before rates are recomputed once; the
recomputation covers only the connected component (flows linked through shared links) of
the links whose flow set changed, since max-min rates elsewhere cannot change; rates and
finish times of other flows are left untouched. A component's rates depend only on
its flows' routes, weights and caps (capacities are fixed), and a collective repeats the
same components step after step, so they are kept by that signature and reused: the
rates are the same numbers, computed once. A flow of the component whose rate comes out
unchanged keeps its bytes and finish time as they were (about 40 % of the flows a reshare
of ``ring-1024-nccl`` covers): nothing is pushed, and its finish time is not recomputed
with a new rounding.

Rounding and near-ties: every time the fabric computes is on the clock's grid
(:mod:`simcoll.network.clock`: a finish time is the clock plus the remaining bytes over
the rate, rounded to a tick of 2^-50 s), so a run started later by a whole number of ticks
is the same run, shifted exactly; events at most two ticks apart are one instant. A
collective on many ranks is full of events that tie in exact arithmetic, and the order
in which rounding puts them can steer which flows share a link later, so the last digits
of a large run are not stable under a change of its inputs: scaling every link of
``ring-1024-nccl`` by 1 + 1e-15 moves its simulated time by up to 6e-4 (5.3753 to
5.3784 ms over such perturbations).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from simcoll.network.clock import instant_ends_s, on_grid, on_grid_array
from simcoll.network.fairshare import max_min_rates_sparse

__all__ = ["Fabric", "FabricStats"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Components whose max-min rates are kept for reuse; past this, the memo starts afresh.
# Only components of at most _MEMO_FLOWS flows are kept: larger ones rarely recur, and
# their keys would cost memory.
_MEMO_ENTRIES = 50_000
_MEMO_FLOWS = 256
# Components of at most this many flows are reshared one flow at a time (see _reshare_small).
_SMALL_COMPONENT = 16


@dataclass
class FabricStats:
    """Work counters, for complexity tests and ``simcoll bench``."""

    instants: int = 0  # distinct simulated times at which something happened
    reshares: int = 0  # max-min recomputations (one per instant with a change)
    flow_rate_updates: int = 0  # flows whose rate was recomputed, summed over reshares
    rate_computations: int = 0  # max-min computations (the others came from the memo)


class Fabric:
    """Flows in flight on a set of directed links.

    Parameters
    ----------
    env
        The SimPy environment whose clock is simulated seconds.
    capacity_bytes_per_s
        Capacity of each link, indexed as the ``links`` arrays given to :meth:`send`.
    on_arrival
        Called with the ids of flows that finished, in increasing id order.
    contention
        When false, every flow runs at its route's bottleneck capacity regardless of
        other flows (the ideal network: the closed-form test oracle).

    A flow may use a link several times over per unit of its rate (``weights`` of
    :meth:`send`): the symmetric fast path sends one flow for many identical ones, over
    classes of identical links (:mod:`simcoll.sim.symmetry`).
    """

    def __init__(
        self,
        env: simpy.Environment,
        capacity_bytes_per_s: FloatArray,
        on_arrival: Callable[[list[int]], None],
        *,
        contention: bool = True,
        finish_heap: bool = False,
    ) -> None:
        self.env = env
        self.capacity_bytes_per_s = np.asarray(capacity_bytes_per_s, dtype=np.float64)
        self.on_arrival = on_arrival
        self.contention = contention
        self.stats = FabricStats()
        n_links = len(self.capacity_bytes_per_s)
        self.link_busy_s = np.zeros(n_links)
        self._busy_since = np.full(n_links, math.nan)
        # The flows on each link, for the links a flow has crossed (a fabric has 131,072
        # links at 16,384 GPUs; a call crosses a few of them).
        self._on_link: defaultdict[int, set[int]] = defaultdict(set)
        self._pending: list[tuple[float, int, int]] = []  # (start_s, flow id, slot)
        # Flows in flight live in slots; per-slot state is kept in parallel arrays so that
        # finding the next arrival is one vectorised min.
        self._finish_s = np.zeros(0)
        self._remaining = np.zeros(0)
        self._rate = np.zeros(0)
        self._updated_s = np.zeros(0)
        self._cap = np.zeros(0)
        self._flow_id = np.zeros(0, dtype=np.int64)
        self._links: list[IntArray] = []
        self._link_ids: list[list[int]] = []  # the same, as Python ints: walked one by one
        self._weights: list[FloatArray | None] = []
        self._signature: list[tuple[Any, ...]] = []  # routes, weights, cap: the rate's inputs
        self._rate_memo: dict[tuple[tuple[Any, ...], ...], FloatArray] = {}
        self._ordered_memo: dict[tuple[tuple[Any, ...], ...], FloatArray] = {}
        self._free: list[int] = []
        # With finish_heap, finish times are also kept in a heap of (finish_s, slot,
        # version): an entry counts only while its version is the slot's, so recomputed
        # or retired flows leave stale entries that are dropped when they come up. It
        # pays where components are small and many flows are in flight (the symmetric
        # path's quotient); where components are large, pushing every flow at every
        # reshare costs more than scanning the array.
        self._use_heap = finish_heap
        self._finish_heap: list[tuple[float, int, int]] = []
        self._finish_version: list[int] = []
        self._grow(64)
        self._sleeping = False
        self._wake_pending = False
        self._wake_at = math.inf
        self._process = env.process(self._run())

    # -- storage: one slot per flow, arrays indexed by slot -----------------------------

    def _grow(self, size: int) -> None:
        """Make room for ``size`` slots; new slots are free and idle."""
        old = len(self._finish_s)
        extra = size - old

        def padded(array: FloatArray, fill: float) -> FloatArray:
            return np.concatenate([array, np.full(extra, fill)])

        self._finish_s = padded(self._finish_s, math.inf)
        self._remaining = padded(self._remaining, 0.0)
        self._rate = padded(self._rate, 0.0)
        self._updated_s = padded(self._updated_s, 0.0)
        self._cap = padded(self._cap, math.inf)
        self._flow_id = np.concatenate([self._flow_id, np.full(extra, -1, dtype=np.int64)])
        self._links += [_NO_LINKS] * extra
        self._link_ids += [[] for _ in range(extra)]
        self._weights += [None] * extra
        self._signature += [()] * extra
        self._finish_version += [0] * extra
        self._free += range(size - 1, old - 1, -1)

    def _slot(self) -> int:
        if not self._free:
            self._grow(2 * len(self._finish_s))
        return self._free.pop()

    # -- the public side ----------------------------------------------------------------

    def send(
        self,
        flow_id: int,
        links: IntArray,
        size_bytes: float,
        start_s: float,
        rate_cap_bytes_per_s: float = math.inf,
        *,
        weights: FloatArray | None = None,
    ) -> None:
        """Hand over a flow that starts moving ``size_bytes`` over ``links`` at ``start_s``.

        ``weights`` (one per link, default all 1) is how much of each link the flow uses
        per unit of its rate.
        """
        links = np.asarray(links, dtype=np.int64)
        if weights is not None:
            weights = np.asarray(weights, dtype=np.float64)
        slot = self._slot()
        self._flow_id[slot] = flow_id
        self._links[slot] = links
        self._link_ids[slot] = links.tolist()
        self._weights[slot] = weights
        self._remaining[slot] = float(size_bytes)
        self._cap[slot] = rate_cap_bytes_per_s
        self._signature[slot] = (
            links.tobytes(),
            None if weights is None else weights.tobytes(),
            rate_cap_bytes_per_s,
        )
        start_s = max(on_grid(start_s), self.env.now)
        heapq.heappush(self._pending, (start_s, flow_id, slot))
        if self._sleeping and start_s < self._wake_at and not self._wake_pending:
            # Called from another process while the fabric sleeps past start_s. Wake it
            # through a zero-delay timeout rather than at once, so that the sends of other
            # processes already due at this instant are shared out in the same step.
            self._wake_pending = True
            self.env.timeout(0).callbacks.append(self._wake)

    def _wake(self, _event: object) -> None:
        self._wake_pending = False
        if self._sleeping:
            self._sleeping = False
            self._process.interrupt()

    @property
    def n_in_flight(self) -> int:
        """Flows handed over and not yet arrived."""
        return int(np.count_nonzero(self._flow_id >= 0))

    # -- the process --------------------------------------------------------------------

    def _run(self) -> Generator[Any, Any, None]:
        """The SimPy process: step, then sleep until the next arrival or join."""
        while True:
            self._step()
            next_s = self._next_event_s()
            self._wake_at = next_s
            self._sleeping = True
            try:
                if math.isinf(next_s):
                    yield self.env.event()  # idle until a send() interrupts
                else:
                    yield self.env.timeout(max(0.0, next_s - self.env.now))
            except simpy.Interrupt:
                pass
            self._sleeping = False

    def _next_event_s(self) -> float:
        if self._use_heap:
            heap, version = self._finish_heap, self._finish_version
            while heap and version[heap[0][1]] != heap[0][2]:
                heapq.heappop(heap)
            finish = heap[0][0] if heap else math.inf
        else:
            finish = float(self._finish_s.min()) if len(self._finish_s) else math.inf
        start = self._pending[0][0] if self._pending else math.inf
        return min(finish, start)

    def _due(self, due_by: float) -> list[int]:
        """Slots of the flows that finish by ``due_by``, in increasing slot order."""
        if not self._use_heap:
            return np.flatnonzero(self._finish_s <= due_by).tolist()
        heap, version = self._finish_heap, self._finish_version
        due = []
        while heap and heap[0][0] <= due_by:
            _, slot, v = heapq.heappop(heap)
            if version[slot] == v:
                due.append(slot)
        return sorted(due)

    def _set_finish(self, slot: int, finish_s: float) -> None:
        self._finish_s[slot] = finish_s
        if self._use_heap:
            version = self._finish_version[slot] + 1
            self._finish_version[slot] = version
            if finish_s < math.inf:
                heapq.heappush(self._finish_heap, (finish_s, slot, version))

    def _step(self) -> None:
        """Handle everything due now: arrivals (and what they trigger), then joins."""
        now = self.env.now
        due_by = instant_ends_s(now)
        changed: list[int] = []
        joined: list[int] = []
        acted = False
        while True:
            done_slots = self._due(due_by)
            if done_slots:
                self._retire(done_slots, changed)
                ids = sorted(self._flow_id[done_slots].tolist())
                self._flow_id[done_slots] = -1
                self._free += done_slots
                self.on_arrival(ids)
            new = self._admit(due_by, changed)
            joined += new
            if not done_slots and not new:
                break
            acted = True
        if acted:
            self.stats.instants += 1
        if changed or joined:
            self._reshare(changed, joined)

    def _retire(self, slots: list[int], changed: list[int]) -> None:
        now = self.env.now
        for s in slots:
            self._set_finish(s, math.inf)
            self._rate[s] = 0.0
            for link in self._link_ids[s]:
                members = self._on_link[link]
                if s in members:
                    members.discard(s)
                    changed.append(link)
                    if not members:
                        self.link_busy_s[link] += now - self._busy_since[link]

    def _admit(self, due_by: float, changed: list[int]) -> list[int]:
        now = self.env.now
        joined = []
        while self._pending and self._pending[0][0] <= due_by:
            _, _, slot = heapq.heappop(self._pending)
            self._updated_s[slot] = now
            if self._remaining[slot] <= 0.0 or not self._link_ids[slot]:
                # Nothing to move, or no link to move it over: arrives now, shares nothing.
                self._set_finish(slot, now)
                continue
            joined.append(slot)
            for link in self._link_ids[slot]:
                members = self._on_link[link]
                if not members:
                    self._busy_since[link] = now
                members.add(slot)
                changed.append(link)
        return joined

    # -- sharing ------------------------------------------------------------------------

    def _component(self, links: list[int]) -> list[int]:
        """Slots of all flows connected to ``links`` through shared links."""
        on_link, link_ids = self._on_link, self._link_ids
        seen_links = set(links)
        frontier = list(seen_links)
        slots: set[int] = set()
        while frontier:
            for s in on_link[frontier.pop()]:
                if s not in slots:
                    slots.add(s)
                    for other in link_ids[s]:
                        if other not in seen_links:
                            seen_links.add(other)
                            frontier.append(other)
        return sorted(slots)

    def _reshare(self, changed_links: list[int], joined: list[int]) -> None:
        slots = self._component(changed_links) if self.contention else sorted(joined)
        if not slots:
            return
        self.stats.reshares += 1
        self.stats.flow_rate_updates += len(slots)
        if self.contention and len(slots) <= _SMALL_COMPONENT:
            self._reshare_small(slots)
            return
        now = self.env.now
        idx = np.asarray(slots, dtype=np.int64)
        if self.contention:
            rate = self._component_rates(slots)
        else:
            lengths = [len(self._link_ids[s]) for s in slots]
            links = np.concatenate([self._links[s] for s in slots])
            bottleneck = np.minimum.reduceat(
                self.capacity_bytes_per_s[links], np.cumsum([0, *lengths[:-1]])
            )
            rate = np.minimum(bottleneck, self._cap[idx])
        old = self._rate[idx]
        moved = rate != old  # a flow whose rate stands keeps its bytes and finish time
        if not moved.all():
            idx, rate, old = idx[moved], rate[moved], old[moved]
        self._remaining[idx] -= old * (now - self._updated_s[idx])
        self._updated_s[idx] = now
        self._rate[idx] = rate
        remaining = np.maximum(self._remaining[idx], 0.0)
        finish = now + on_grid_array(remaining / rate)
        self._finish_s[idx] = finish
        if self._use_heap:
            heap, version = self._finish_heap, self._finish_version
            for slot, finish_s in zip(idx.tolist(), finish.tolist(), strict=True):
                version[slot] += 1
                heapq.heappush(heap, (finish_s, slot, version[slot]))

    def _reshare_small(self, slots: list[int]) -> None:
        """:meth:`_reshare` of a few flows, one at a time: the same arithmetic, without
        numpy's per-call cost (most components of a collective have a handful)."""
        now = self.env.now
        rates = self._component_rates(slots).tolist()
        remaining, rate, updated = self._remaining, self._rate, self._updated_s
        for slot, new_rate in zip(slots, rates, strict=True):
            old_rate = rate.item(slot)
            if new_rate == old_rate:  # its bytes and finish time stand
                continue
            left = remaining.item(slot) - old_rate * (now - updated.item(slot))
            remaining[slot] = left
            updated[slot] = now
            rate[slot] = new_rate
            self._set_finish(slot, now + on_grid(max(left, 0.0) / new_rate))

    def _component_rates(self, slots: list[int]) -> FloatArray:
        """Max-min rates of a whole component, from the memo when it was seen before."""
        if len(slots) > _MEMO_FLOWS:
            idx = np.asarray(slots, dtype=np.int64)
            return self._max_min(slots, idx, [len(self._link_ids[s]) for s in slots])
        signature = self._signature
        key = tuple(signature[s] for s in slots)
        rate = self._rate_memo.get(key)
        if rate is None:
            rate = self._rates_in_any_order(slots)
            if len(self._rate_memo) >= _MEMO_ENTRIES:
                self._rate_memo.clear()
            self._rate_memo[key] = rate
        return rate

    def _rates_in_any_order(self, slots: list[int]) -> FloatArray:
        """Max-min rates of a component seen before with its flows in another slot order.

        The memo above is keyed by slot order, which the free list shuffles; here the
        flows are put in the order of their signatures, so one computation serves every
        order (on ``ring-1024-nccl``, 12,724 of 13,043 computations were such repeats).
        Flows with equal signatures are interchangeable: their rates are equal.
        """
        signature = self._signature
        order = sorted(range(len(slots)), key=lambda i: _sortable(signature[slots[i]]))
        ordered = [slots[i] for i in order]
        key = tuple(signature[s] for s in ordered)
        ordered_rate = self._ordered_memo.get(key)
        if ordered_rate is None:
            idx = np.asarray(ordered, dtype=np.int64)
            ordered_rate = self._max_min(ordered, idx, [len(self._link_ids[s]) for s in ordered])
            if len(self._ordered_memo) >= _MEMO_ENTRIES:
                self._ordered_memo.clear()
            self._ordered_memo[key] = ordered_rate
        rate = np.empty(len(slots))
        rate[order] = ordered_rate
        return rate

    def _max_min(self, slots: list[int], idx: IntArray, lengths: list[int]) -> FloatArray:
        """Max-min fair rates of the flows in ``slots`` (a whole component)."""
        self.stats.rate_computations += 1
        flows = np.repeat(np.arange(len(slots)), lengths)
        links = np.concatenate([self._links[s] for s in slots])
        used, local = np.unique(links, return_inverse=True)
        return max_min_rates_sparse(
            flows,
            local,
            self.capacity_bytes_per_s[used],
            n_flows=len(slots),
            rate_cap_bytes_per_s=self._cap[idx],
            weight_of_use=self._weights_of(slots),
        )

    def _weights_of(self, slots: list[int]) -> FloatArray | None:
        """The incidence weights of ``slots`` in ``_reshare``'s order; None if all are 1."""
        weights = [self._weights[s] for s in slots]
        if all(w is None for w in weights):
            return None
        return np.concatenate(
            [
                np.ones(len(self._links[s])) if w is None else w
                for s, w in zip(slots, weights, strict=True)
            ]
        )

    def close(self) -> None:
        """Account link busy time of flows still in flight up to now (end of a run)."""
        now = self.env.now
        for link, members in self._on_link.items():
            if members:
                self.link_busy_s[link] += now - self._busy_since[link]
                self._busy_since[link] = now


_NO_LINKS: IntArray = np.zeros(0, dtype=np.int64)


def _sortable(signature: tuple[Any, ...]) -> tuple[bytes, bytes, float]:
    """A flow's signature (route, weights or None, cap) as a key that always compares."""
    links, weights, cap = signature
    return links, b"" if weights is None else weights, cap
