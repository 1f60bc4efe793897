"""A communication plan as data: where each rank runs and, per channel, its ring, its tree
and the NICs its network edges use.

NCCL decides all of this before a byte moves (``src/graph/search.cc`` finds the rings and
trees, ``connect.cc`` joins them across nodes, ``paths.cc`` decides whether a GPU reaches
its NIC through another GPU); :mod:`simcoll.plan.search` computes it the same way, and
:mod:`simcoll.plan.nccl_log` prints it as NCCL does and reads it back from a real log.

A channel is one ring (and one tree) of all the ranks; NCCL runs its channels in
parallel, each on its own share of the buffer. An edge of a ring or tree between two ranks
on different servers leaves the sender's server by a NIC and enters the receiver's by a
NIC: a :class:`NetHop`. When the sending GPU is not the one next to that NIC, NCCL's PXN
has it write over NVLink into the memory of the GPU that is (``proxy``), which posts the
send: the bytes cross sender -> proxy -> NIC -> fabric -> NIC -> receiver.

>>> plan = Plan(rank_nodes=("gpu0", "gpu1"), channels=(Channel(ring=(0, 1)),))
>>> plan.n_channels, plan.rings, plan.waypoints(0, 0, 1)
(1, ((0, 1),), ())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from simcoll.core.errors import ConfigError
from simcoll.plan.trees import Tree

__all__ = ["Channel", "NetHop", "Plan"]


@dataclass(frozen=True)
class NetHop:
    """How one edge between servers crosses the network.

    ``send_nic`` and ``recv_nic`` are NIC nodes of the topology; ``proxy``, when set, is
    the GPU node next to ``send_nic`` that the sender writes through (PXN).
    """

    send_nic: str
    recv_nic: str
    proxy: str | None = None

    def waypoints(self) -> tuple[str, ...]:
        """The nodes the edge's route must pass, in order, between its two GPUs.

        >>> NetHop("n0.nic3", "n1.nic3", proxy="gpu3").waypoints()
        ('gpu3', 'n0.nic3', 'n1.nic3')
        """
        head = (self.proxy,) if self.proxy is not None else ()
        return (*head, self.send_nic, self.recv_nic)


@dataclass(frozen=True, eq=False)
class Channel:
    """One channel: a ring over all ranks, optionally a tree, and its network edges.

    ``ring[i]`` sends to ``ring[i + 1]`` (and the last to the first). ``net`` maps an
    edge ``(src, dst)`` of the ring or the tree that crosses servers to its
    :class:`NetHop`; edges not listed take the topology's own route.
    """

    ring: tuple[int, ...]
    tree: Tree | None = None
    net: Mapping[tuple[int, int], NetHop] = field(default_factory=dict)

    def next_of(self) -> dict[int, int]:
        """Each rank's successor on the ring."""
        n = len(self.ring)
        return {self.ring[i]: self.ring[(i + 1) % n] for i in range(n)}


@dataclass(frozen=True, eq=False)
class Plan:
    """Where each rank runs (``rank_nodes``: GPU node of rank r) and its channels.

    ``placement`` and ``routing`` say how ranks were placed and links chosen, for
    reports; ``source`` says where the plan came from (``search`` or a log file).

    Raises
    ------
    ConfigError
        If a ring is not a permutation of the ranks, or a tree does not span them.
    """

    rank_nodes: tuple[str, ...]
    channels: tuple[Channel, ...]
    placement: str = "linear"
    routing: str = ""
    source: str = "search"

    def __post_init__(self) -> None:
        n = len(self.rank_nodes)
        for index, channel in enumerate(self.channels):
            if sorted(channel.ring) != list(range(n)):
                raise ConfigError(
                    f"channel {index}: ring {list(channel.ring)} is not an order of the {n} ranks",
                    source=self.source if self.source != "search" else None,
                )
            tree = channel.tree
            if tree is not None and sorted(tree.top_down()) != list(range(n)):
                raise ConfigError(
                    f"channel {index}: the tree does not span the {n} ranks",
                    source=self.source if self.source != "search" else None,
                )

    @property
    def n_ranks(self) -> int:
        """Ranks of the plan."""
        return len(self.rank_nodes)

    @property
    def n_channels(self) -> int:
        """Channels of the plan."""
        return len(self.channels)

    @property
    def rings(self) -> tuple[tuple[int, ...], ...]:
        """The ring order of every channel."""
        return tuple(c.ring for c in self.channels)

    @property
    def trees(self) -> tuple[Tree, ...]:
        """The tree of every channel.

        Raises
        ------
        ConfigError
            If a channel has no tree.
        """
        trees = tuple(c.tree for c in self.channels)
        if any(t is None for t in trees):
            raise ConfigError("this plan has no trees (a log without 'Trees' lines?)")
        return trees  # type: ignore[return-value]

    def waypoints(self, channel: int, src: int, dst: int) -> tuple[str, ...]:
        """The nodes the route of ``src -> dst`` on ``channel`` passes, in order (none:
        the topology's own route). Channels beyond the plan's repeat it cyclically."""
        hop = self.channels[channel % self.n_channels].net.get((src, dst))
        return hop.waypoints() if hop is not None else ()

    def using(self, n_channels: int) -> Plan:
        """The plan restricted to its first ``n_channels`` channels (repeated cyclically
        when more are asked for), as NCCL uses fewer channels for small messages.

        >>> plan = Plan(rank_nodes=("a", "b"), channels=(Channel((0, 1)), Channel((1, 0))))
        >>> plan.using(3).rings
        ((0, 1), (1, 0), (0, 1))
        """
        if n_channels < 1:
            raise ConfigError(f"a plan needs at least one channel, got {n_channels}")
        channels = tuple(self.channels[c % self.n_channels] for c in range(n_channels))
        return Plan(self.rank_nodes, channels, self.placement, self.routing, self.source)

    def nic_use(self) -> dict[str, tuple[int, int]]:
        """Per NIC node: how many ring edges leave by it and arrive by it, over channels."""
        use: dict[str, list[int]] = {}
        for channel in self.channels:
            ring_edges = set(channel.next_of().items())
            for edge, hop in channel.net.items():
                if edge not in ring_edges:
                    continue
                use.setdefault(hop.send_nic, [0, 0])[0] += 1
                use.setdefault(hop.recv_nic, [0, 0])[1] += 1
        return {nic: (out, into) for nic, (out, into) in sorted(use.items())}


def ring_plan(rank_nodes: Sequence[str], rings: Sequence[Sequence[int]]) -> Plan:
    """A plan of rings only, no network hops (the topology routes every edge).

    >>> ring_plan(["gpu0", "gpu1", "gpu2"], [[0, 2, 1]]).rings
    ((0, 2, 1),)
    """
    channels = tuple(Channel(ring=tuple(r)) for r in rings)
    return Plan(rank_nodes=tuple(rank_nodes), channels=channels)
