"""Times no simulation can beat: lower bounds that let ``--algorithm auto`` skip choices.

``auto`` simulates every algorithm and protocol at every size and keeps the fastest. Most
choices lose by far (LL at 8 GiB moves every byte twice; Simple at 64 KiB pays 3.4 us a
step), and a simulation of a loser costs what one of the winner costs. A choice whose
lower bound is no better than the best time simulated so far cannot win, so it is not
simulated: the rows are the same, sooner (:func:`simcoll.prediction.simulated.best_choice`
tries the choices in increasing order of their bounds).

Two bounds, both true of every run of the engine:

- **Bandwidth** (flow model; the ideal model shares no link). Every byte a rank sends
  leaves its GPU over one of the GPU's own links, as ``bytes / efficiency`` on the wire,
  and those links move at most the sum of their bandwidths: some rank needs at least
  ``average bytes sent / (best efficiency x largest GPU egress)``. A ring or NCCL's
  double tree all-reduce sends 2(n-1) x S bytes in all (every ring step, or every tree
  edge up and down, carries a share of S per channel); a ring all-gather or
  reduce-scatter (n-1) x S.
- **Latency**. A transfer ends no sooner than its route's latency plus the protocol's
  step latency after it was issued, and a dependent transfer is issued after it ends: a
  chain of k dependent transfers takes at least k x (smallest step latency + smallest
  link latency). A ring's chain is its 2(n-1) (or n-1) steps; a tree all-reduce's is
  the way up and back down its deepest branch, twice the tree's depth.

Other algorithms get 0: always simulated. The packet model gets none at all
(:func:`simcoll.prediction.simulated.best_choice` simulates every choice there).

>>> from simcoll.topology.builders import switch_star
>>> from simcoll.core.protocols import PROTOCOLS
>>> star = switch_star(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
>>> b = Bounds.of(star, ("gpu0", "gpu1", "gpu2", "gpu3"), model="flow")
>>> # ring all-reduce of 1 GB: each rank sends 2 x 3/4 GB, LL puts it twice on the wire
>>> round(b.time_s("allreduce", "ring", PROTOCOLS["LL"], 10**9) * 1e3, 6)
30.0
>>> # 4 bytes with Simple: 6 steps of 3.4 us protocol latency + 1 us link latency
>>> round(b.time_s("allreduce", "ring", PROTOCOLS["simple"], 4) * 1e6, 6)
26.4
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from simcoll.core.collectives import Collective
from simcoll.core.protocols import Protocol

__all__ = ["Bounds"]

_RING = ("allreduce", "allgather", "reducescatter")
_LINK_CLASSES = ("nvlink", "pcie", "net")


@dataclass(frozen=True)
class Bounds:
    """What the bounds need of one prediction's setup."""

    n_ranks: int
    egress_bytes_per_s: float  # the largest sum of a rank's GPU's link bandwidths
    link_latency_s: float  # the smallest latency of any link
    contention: bool  # links are shared (the flow model): the bandwidth bound holds
    tree_depth: int = 0  # depth of the plan's first tree (0: not known)

    @classmethod
    def of(
        cls,
        topology: nx.DiGraph[str],
        nodes: tuple[str, ...],
        *,
        model: str,
        tree_depth: int = 0,
    ) -> Bounds:
        """The bounds of ranks on ``nodes`` of ``topology``, in ``model``."""
        egress = max((_egress_bytes_per_s(topology, node) for node in set(nodes)), default=0.0)
        latency = min((float(a["latency_s"]) for _, _, a in topology.edges(data=True)), default=0.0)
        return cls(len(nodes), egress, max(0.0, latency), model == "flow", tree_depth)

    def time_s(
        self, collective: str, algorithm: str, protocol: Protocol | None, size_bytes: int
    ) -> float:
        """A time ``algorithm`` with ``protocol`` cannot beat on ``size_bytes`` (0: none
        known). See the module docstring."""
        n = self.n_ranks
        if n < 2 or collective not in _RING:
            return 0.0
        if algorithm == "ring":
            chain = (2 if collective == "allreduce" else 1) * (n - 1)
        elif algorithm == "tree" and collective == "allreduce":
            chain = 2 * self.tree_depth
        else:
            return 0.0
        step_s = 0.0 if protocol is None else min(
            (protocol.step_latency_s.get(c, 0.0) for c in _LINK_CLASSES), default=0.0
        )  # fmt: skip
        latency_bound = chain * (step_s + self.link_latency_s)
        if not self.contention or self.egress_bytes_per_s <= 0:
            return latency_bound
        twice = collective == Collective.ALLREDUCE.value
        sent_bytes = (2 if twice else 1) * (n - 1) * size_bytes / n
        efficiency = 1.0 if protocol is None else max(
            [protocol.efficiency, *protocol.efficiency_by_class.values()]
        )  # fmt: skip
        return max(latency_bound, sent_bytes / (efficiency * self.egress_bytes_per_s))


def _egress_bytes_per_s(topology: nx.DiGraph[str], node: str) -> float:
    """The sum of the bandwidths of ``node``'s outgoing links."""
    return sum(float(attrs["bandwidth_bytes_per_s"]) for _, _, attrs in
               topology.out_edges(node, data=True))  # fmt: skip
