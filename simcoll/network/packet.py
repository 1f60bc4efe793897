"""The packet model: store-and-forward of MTU-sized packets, hop by hop.

A transfer of S bytes becomes ceil(S / packet_bytes) packets. Each link sends one packet
at a time at its full bandwidth; a packet leaves a link only when it has been received
whole, then queues for the next link of its route. For packet i on the h-th link of the
route, with ``s_h`` = packet bytes / bandwidth of that link::

    end[i, h] = max(end[i - 1, h], end[i, h - 1]) + s_h      (end[i, -1] = start)

A link serves transfers in the order the engine hands them over (first come, first
served): packets of concurrent transfers do not interleave, they queue. That is exact
when nothing is shared, the case the packet model is for (checking the flow model at
small scale); under contention it is FIFO rather than fair, so per-transfer times differ
from the flow model while link busy times still bound the total.

The route latency is paid before the first packet leaves, as in the flow model; a
transfer arrives when its last packet is off its last link.

Speed: one transfer costs O(packets x hops) numpy work and one SimPy event; the recurrence
above is a running maximum per hop (``np.maximum.accumulate``), so even 10^4 packets are
cheap. This model is for small cases: it keeps no fair sharing and is not used at scale.

>>> import simpy
>>> env = simpy.Environment()
>>> arrived = []
>>> fabric = PacketFabric(env, np.array([1e9, 1e9]), lambda ids: arrived.append((env.now, ids)),
...                       packet_bytes=1000)
>>> fabric.send(7, np.array([0, 1]), 4000.0, 0.0)  # 4 packets of 1 us, 2 hops: 5 us
>>> env.run(); [(round(t * 1e6, 9), ids) for t, ids in arrived]
[(5.0, [7])]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import simpy

from simcoll.network.fabric import FabricStats

__all__ = ["DEFAULT_PACKET_BYTES", "PacketFabric"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_PACKET_BYTES = 4096
"""An InfiniBand MTU (4 KiB), also the order of NVLink's and PCIe's largest payloads."""


class PacketFabric:
    """Links that carry packets store-and-forward, first come first served.

    The interface is :class:`~simcoll.network.fabric.Fabric`'s: :meth:`send`, ``stats``,
    ``link_busy_s`` and :meth:`close`.
    """

    def __init__(
        self,
        env: simpy.Environment,
        capacity_bytes_per_s: FloatArray,
        on_arrival: Callable[[list[int]], None],
        *,
        packet_bytes: int = DEFAULT_PACKET_BYTES,
    ) -> None:
        if packet_bytes < 1:
            raise ValueError(f"packet_bytes must be at least 1, got {packet_bytes}")
        self.env = env
        self.capacity_bytes_per_s = np.asarray(capacity_bytes_per_s, dtype=np.float64)
        self.on_arrival = on_arrival
        self.packet_bytes = packet_bytes
        self.stats = FabricStats()
        self.link_busy_s = np.zeros(len(self.capacity_bytes_per_s))
        self._free_s = np.zeros(len(self.capacity_bytes_per_s))

    def send(
        self,
        flow_id: int,
        links: IntArray,
        size_bytes: float,
        start_s: float,
        rate_cap_bytes_per_s: float = math.inf,
    ) -> None:
        """Hand over a transfer whose first packet may leave at ``start_s``."""
        arrival_s = self._reserve(links, size_bytes, start_s, rate_cap_bytes_per_s)
        event = self.env.timeout(max(0.0, arrival_s - self.env.now))
        event.callbacks.append(lambda _event: self.on_arrival([flow_id]))

    def _reserve(
        self, links: IntArray, size_bytes: float, start_s: float, rate_cap_bytes_per_s: float
    ) -> float:
        """Book every packet on every link of the route; return the last packet's end."""
        n_packets = max(1, math.ceil(size_bytes / self.packet_bytes))
        sizes = np.full(n_packets, float(self.packet_bytes))
        sizes[-1] = size_bytes - self.packet_bytes * (n_packets - 1)
        ready = np.full(n_packets, start_s)  # when each packet may enter the next link
        for link in links.tolist():
            rate = min(self.capacity_bytes_per_s[link], rate_cap_bytes_per_s)
            service = sizes / rate
            # end_i = max(end_{i-1}, ready_i) + service_i, with end_{-1} = link free time:
            # end_i = C_i + max(free, max_{j<=i}(ready_j - C_{j-1})), C the cumulative service.
            done = np.cumsum(service)
            before = done - service
            floor = np.maximum.accumulate(np.maximum(ready - before, self._free_s[link]))
            ready = done + floor
            self._free_s[link] = ready[-1]
            self.link_busy_s[link] += float(done[-1])
        return float(ready[-1]) if len(links) else start_s

    def close(self) -> None:
        """Nothing to release: every transfer was booked when it was sent."""
