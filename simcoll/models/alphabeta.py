r"""Closed-form alpha-beta times of simcoll's algorithms, with alpha and B read off the topology.

Each algorithm is costed from the pairs of ranks it makes talk at once (a *pattern*):
alpha is the largest route latency among them (plus the protocol's step latency) and B the
bandwidth one pair gets, ``min over links of bandwidth / load`` with ``load`` the pattern's
pairs routed over the link, each weighed by ``1 / efficiency`` (its wire bytes per byte;
see :func:`pattern_cost`). For a ring whose edges share links alike that is DESIGN.md's
rule, ``T = 2(N-1)(alpha_max + k_max (M/N) / B)``: the ring runs at the pace of its most
loaded link (``B / k_max`` when the links are equal). A plan's ring edges take the plan's
NICs (and PXN proxy), as the flow model routes them. Where a ring's pairs are loaded
unevenly (a random placement, hashed ECMP), each pair moves at the pace of its own busiest
link, and the ring takes the longer of its two cycles: round the ring at the pairs' mean
alpha and tau, and its busiest pair's chunks back to back (:func:`_uneven_rings`).

Notation: n ranks, S = ``size_bytes`` (nccl-tests convention: the whole buffer for
all-gather and reduce-scatter), k = ``n_chunks``, W = ``max_in_flight``, tau the time one
chunk of one pair takes on the wire (with contention the channels of a pair share its
bandwidth, so tau does not depend on ``n_channels``). The pipelined forms used throughout
(m steps of k chunks on one connection, and chains of h hops) are those of
:mod:`simcoll.models.pipelines`.

=====================================  =============================================  ==========
algorithm                              time                                           tau
=====================================  =============================================  ==========
ring all-reduce                        P(2(n-1), k)                                   S / (n k B)
ring all-gather, reduce-scatter        P(n-1, k)                                      S / (n k B)
ring broadcast, reduce                 C(n-1, k), hop by hop                          S / (k B)
direct all-gather, reduce-scatter,     P(1, k): every pair at once; a star uplink     S / (n k B)
all-to-all, gather, scatter            carries n - 1 of them, so B = link / (n - 1)
direct broadcast, reduce, send/recv    P(1, k)                                        S / (k B)
direct all-reduce                      P(2, k): reduce-scatter, then all-gather       S / (n k B)
reduce_broadcast all-reduce            C(2, k): direct reduce, then direct broadcast  S / (k B)
nvls all-reduce                        4 alpha + ((n + 1) k + n + 4) tau: every link  S / (n k B)
                                       carries (n + 1) k pieces (reduce to the owner,
                                       multicast from it), plus the pipeline's fill
                                       at the legs' pace (see below)
nvls reduce-scatter                    P(1, n k) + alpha + tau                        S / (n k B)
nvls all-gather                        alpha + n tau + P(1, n k): the store moves at  S / (n k B)
                                       the down links' pace, B / n (see below)
sharp all-reduce                       C(2, k) or, with two levels of switches,       S / (k B)
                                       C(4, k): rank -> group switch (-> root ->
                                       group switch) -> rank, hop by hop
=====================================  =============================================  ==========

These are exact against the flow simulator when each hop's pattern is symmetric (every
pair sees the same latency and load), piece sizes divide evenly and, for ``nvls``, the
reducing switch's links are the GPUs' own (tests/test_analytical.py holds them to 1e-9).
NVLS schedules are paced (:mod:`simcoll.sim.pacing`): what a GPU sends into the switch
moves at most at its connection's bytes over the busiest link's time, so the first
pieces through take a whole step at every leg. For the all-gather that is the store of
a block at B / n (each down link carries all n blocks): n tau for its first piece, where
the unpaced store took tau. The NVLS all-reduce is the exception to exactness: its two
legs share every link (the reduce leg at B n / (n + 1), the store at B / (n + 1)), and
the form is an upper estimate, within tau of the flow model where the window hides the
latency (exact from 3 chunks on 4 GPUs or more), so within 1 % from 64 chunks.
Otherwise they are estimates; for rings loaded unevenly, of the flow model's time where
the busiest pair binds (exact on NCCL's plan over hashed ECMP at 1 GiB,
``tests/prediction/test_closed_form.py``), from below or above where the cycle round the
ring does.

Textbook formulas for the algorithms with several peers per rank, summed over the
algorithm's steps, each step costed as its own pattern (a step that crosses the network
pays the network's alpha and B). They assume one step after the other and do not change
with ``n_chunks`` (unless stated), since a rank's steps would share its links if
pipelined; for k = 1 and n a power of two they equal the simulator on a switch:

===============================  =====================================================
``tree`` all-reduce              double binary tree (Sanders, Speck & Traeff 2009; NCCL's
                                 ``src/graph/trees.cc``), each tree S/2, pipelined in k
                                 chunks: ``2 D (alpha + tau) + 2 (k - 1) tau``, tau =
                                 S/(k B), D the deeper tree's depth (= ceil(log2 n)); for
                                 many chunks 2 D alpha + 2 S/B (a rank sends 2S in all)
``tree`` broadcast, reduce       binomial tree, children served at once: a pipelined
                                 chain of its floor(log2 n) levels, ``(alpha + S/B)`` per
                                 level when nothing is shared
``tree`` gather, scatter         binomial tree: ``ceil(log2 n) alpha + (n-1)/n S/B``
``halving_doubling`` all-reduce  Rabenseifner (Thakur, Rabenseifner & Gropp 2005), halving
                                 from distance n/2 (S/2) down to 1, doubling back up, as
                                 :mod:`simcoll.algorithms.doubling` does:
                                 ``2 log2(n) alpha + 2 (n-1)/n S/B``; for n not a power
                                 of two MPICH folds n - p ranks onto p = 2^floor(log2 n)
                                 with two extra steps of ``alpha + S/B`` (an estimate:
                                 the fold overlaps the first step in the simulator)
``halving_doubling``             recursive halving / doubling:
reduce-scatter, all-gather       ``log2(n) alpha + (n-1)/n S/B`` (+ the fold's steps)
``bruck`` all-gather             ``ceil(log2 n) alpha + (n-1)/n S/B`` (Bruck et al. 1997)
``bruck`` all-to-all             ``ceil(log2 n) (alpha + S/(2B))`` (powers of two)
``pairwise`` all-to-all          ``(n-1) (alpha + S/(n B))``
``hierarchical`` all-reduce      ring reduce-scatter inside each host, ring all-reduce of
                                 S/g across hosts, ring all-gather inside each host
                                 (BlueConnect, Cho et al. 2019): ``2 P(g-1, k) + P(2(N-1),
                                 k)``, g ranks per host, N hosts
``reducescatter_allgather``      a ring reduce-scatter, then a ring all-gather, not
all-reduce                       overlapped: ``2 P(n-1, k)``
``reducescatter_gather`` reduce  gloo's: a ring reduce-scatter, then every block to the
                                 root in one message: ``P(n-1, k) + alpha + (n-1)/n S/B``
===============================  =====================================================

References: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005; P. Sanders, J. Speck, J. L.
Traeff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel
Computing 35(12), 2009; J. Bruck et al., "Efficient algorithms for all-to-all
communications in multiport message-passing systems", IEEE TPDS 8(11), 1997; M. Cho et
al., "BlueConnect", SysML 2019; R. L. Graham et al., "Scalable Hierarchical Aggregation
Protocol (SHArP)", COMHPC 2016.

>>> from simcoll.topology import switch_star
>>> star = switch_star(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
>>> t = alphabeta_time_s(star, "allreduce", "ring", 4, 4_000_000)
>>> round(t * 1e6, 6)  # 2 (n - 1) (alpha + S / (n B)) = 6 (2 us + 10 us)
72.0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import networkx as nx

from simcoll.algorithms.chunking import STEPWISE
from simcoll.algorithms.collnet import collnet_servers, servers_per_switch
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.protocols import Protocol, parse_protocol
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT
from simcoll.models._net import (
    Network,
    NodePair,
    PatternCost,
    fabric_switches,
    hosts_of,
    reducing_switch,
)
from simcoll.models.pipelines import chain_of_hops_time_s, chain_time_s, pipeline_time_s
from simcoll.plan.placement import map_ranks
from simcoll.plan.trees import Tree, binomial_tree, double_binary_tree, msb_binomial_tree
from simcoll.topology import Router

__all__ = [
    "ALPHABETA_ALGORITHMS",
    "NoClosedFormError",
    "PatternCost",
    "alphabeta_algorithm_names",
    "alphabeta_time_s",
    "chain_time_s",
    "pattern_cost",
    "pipeline_time_s",
]

RankPair = tuple[int, int]


class NoClosedFormError(ConfigError):
    """The call has no exact closed form: its own transfers share links unevenly while
    its pipeline fills and drains (NVLS's two legs, a tree's pieces going up and coming
    down), or its steps overlap piece by piece (a stepwise algorithm cut into pieces).
    Raised by :func:`alphabeta_time_s` only when asked for an ``exact`` form."""


@dataclass(frozen=True)
class _Call:
    """One costing request: the network, the ranks' GPUs and the algorithm's parameters."""

    net: Network
    nodes: tuple[str, ...]
    size: int
    ch: int
    k: int
    window: int
    root: int
    algorithm: str
    ranks_per_switch: int = 0
    #: the most bus bandwidth the call's CTAs move (0: no bound; NVLS-tree's)
    sm_bus_bandwidth_bytes_per_s: float = 0.0
    rings: tuple[tuple[int, ...], ...] = ()  # the channels' ring orders; () : rank order
    trees: tuple[Tree, ...] = ()  # the channels' trees; () : NCCL's double binary tree
    #: per channel of ``rings`` or ``trees``: the nodes an edge's route passes (a plan's)
    waypoints: tuple[Mapping[RankPair, tuple[str, ...]], ...] = ()

    @property
    def n(self) -> int:
        return len(self.nodes)

    def node_pairs(self, pairs: Sequence[RankPair]) -> list[NodePair]:
        return [(self.nodes[a], self.nodes[b]) for a, b in pairs]

    def channel_pairs(self, channel: int, pairs: Sequence[RankPair]) -> list[NodePair]:
        """``pairs`` as channel ``channel`` of a plan routes them: through its NICs (and
        PXN proxy) where the plan names them, as the flow model routes them."""
        via = self.waypoints[channel] if channel < len(self.waypoints) else {}
        return [(self.nodes[a], self.nodes[b], *via.get((a, b), ())) for a, b in pairs]

    def cost(self, pairs: Sequence[RankPair], *, share: bool = True) -> PatternCost:
        return self.net.cost(self.node_pairs(pairs), share=share)

    def chain(
        self,
        hops: Sequence[Sequence[NodePair]],
        bytes_per_pair: float,
        *,
        least_s: Sequence[float] = (),
    ) -> float:
        """A pipelined chain whose hop h is the node pairs ``hops[h]``, each moving
        ``bytes_per_pair`` in k chunks. Chunked, the hops run at once and share links;
        unchunked, one after another, each hop alone. Hop h takes at least ``least_s[h] /
        k`` per chunk where given (a paced leg's: :mod:`simcoll.sim.pacing`)."""
        every = [pair for hop in hops for pair in hop]
        load = self.net.load(every) if self.k > 1 else None
        wire = self.net.wire_load(every) if self.k > 1 and self.net.contention else None
        costs = [self.net.cost(hop, load=load, wire=wire) for hop in hops]
        least = list(least_s) + [0.0] * (len(costs) - len(least_s))
        timing = [(cost.alpha_s, max(self.tau(bytes_per_pair / self.k, cost), floor_s / self.k))
                  for cost, floor_s in zip(costs, least, strict=True)]  # fmt: skip
        return chain_of_hops_time_s(timing, self.k, self.window)

    def tau(self, bytes_per_pair: float, cost: PatternCost) -> float:
        """Wire time of ``bytes_per_pair`` split over the channels of one pair.

        With contention the channels of a pair share its bandwidth; without (the ideal
        model) each channel gets the route's whole bandwidth.
        """
        spread = 1 if self.net.contention else self.ch
        return bytes_per_pair / (cost.bandwidth_bytes_per_s * spread)

    def steps(self, steps: Sequence[tuple[Sequence[RankPair], float]]) -> float:
        """Sum of ``alpha + bytes / B`` over steps, each step costed as its own pattern."""
        total = 0.0
        for pairs, bytes_per_pair in steps:
            if pairs:
                cost = self.cost(pairs)
                total += cost.alpha_s + self.tau(bytes_per_pair, cost)
        return total


Formula = Callable[[_Call], float]


# --- ring -----------------------------------------------------------------------------------


def _ring_pairs(ranks: Sequence[int]) -> list[RankPair]:
    """Each rank to the next, cyclically (a 2-rank ring is the two directions of one pair)."""
    g = len(ranks)
    return [(ranks[i], ranks[(i + 1) % g]) for i in range(g)] if g > 1 else []


def _ring(steps_of: Callable[[int], int]) -> Formula:
    def formula(c: _Call) -> float:
        if c.n == 1:
            return 0.0
        if not c.rings:
            pairs = c.node_pairs(_ring_pairs(range(c.n)))
            cost = c.net.cost(pairs)
            tau = c.tau(c.size / (c.n * c.k), cost)
            if not c.net.contention:
                return pipeline_time_s(steps_of(c.n), c.k, cost.alpha_s, tau, c.window)
            return _uneven_rings(c, [pairs], steps_of(c.n), c.size / (c.n * c.k))
        # a plan's channels: every channel's ring at once, each with 1/C of every block
        rings = [c.channel_pairs(ch, _ring_pairs(ring)) for ch, ring in enumerate(c.rings)]
        return _uneven_rings(c, rings, steps_of(c.n), c.size / (c.n * c.k * len(c.rings)))

    return formula


def _uneven_rings(c: _Call, rings: list[list[NodePair]], m: int, chunk_bytes: float) -> float:
    """Rings that run at once, each of ``m`` steps of ``k`` chunks of ``chunk_bytes`` per
    pair, their pairs sharing the links they cross.

    Each pair moves at the pace of the most loaded link on its own route (every pair of a
    link at one data rate, :meth:`~simcoll.models._net.Network.pace`), so its chunk takes
    ``tau_p`` and its latency is ``alpha_p``. A ring's steps form a cycle: a rank sends a
    step once it has the step before from its predecessor, so ``m`` steps take at least
    the pipelined form at the ring's mean ``alpha`` and ``tau``; and each pair sends its
    ``m k`` chunks one after another, so they take at least ``alpha_max + m k tau_max``
    (its busiest pair, whose latency the others' slack hides). The ring takes the larger
    (its dependency graph's two kinds of cycle, the whole ring and one connection); the
    call, its slowest ring. Every pair alike (a symmetric ring), both are the pipelined
    form at that pair's alpha and tau: exact against the flow model, as before; uneven,
    an estimate (the flow model lets a pair that is not the busiest go faster)."""
    wire = c.net.wire_load(pair for ring in rings for pair in ring)
    slowest = 0.0
    for ring in rings:
        alphas = [c.net.latency_s(pair) for pair in ring]
        taus = [chunk_bytes / c.net.pace(pair, wire) for pair in ring]
        cycle = pipeline_time_s(m, c.k, sum(alphas) / len(ring), sum(taus) / len(ring),
                                c.window)  # fmt: skip
        connection = max(alphas) + m * c.k * max(taus)
        slowest = max(slowest, cycle, connection)
    return slowest


def _ring_chain(first: int) -> Formula:
    """Ring broadcast (first hop from the root) or reduce (from root + 1, ending at root),
    along each channel's ring at once where a plan gives them, each with 1/C of S."""

    def formula(c: _Call) -> float:
        n = c.n
        rings = c.rings or (tuple(range(n)),)
        starts = [ring.index(c.root) + first for ring in rings]
        hops = [
            [pair for ch, (ring, s) in enumerate(zip(rings, starts, strict=True))
             for pair in c.channel_pairs(ch, [(ring[(s + h) % n], ring[(s + h + 1) % n])])]
            for h in range(n - 1)
        ]  # fmt: skip
        return c.chain(hops, c.size / len(rings))

    return formula


# --- direct ---------------------------------------------------------------------------------


def _all_pairs(c: _Call) -> list[RankPair]:
    return [(s, d) for s in range(c.n) for d in range(c.n) if s != d]


def _to_root(c: _Call) -> list[RankPair]:
    return [(s, c.root) for s in range(c.n) if s != c.root]


def _from_root(c: _Call) -> list[RankPair]:
    return [(c.root, d) for d in range(c.n) if d != c.root]


def _successor(c: _Call) -> list[RankPair]:
    return _ring_pairs(range(c.n))


def _direct(
    pairs_of: Callable[[_Call], list[RankPair]], per_block: bool, steps: int = 1
) -> Formula:
    """Every pair at once, each moving S (or S / n with ``per_block``) in k chunks."""

    def formula(c: _Call) -> float:
        pairs = pairs_of(c)
        if not pairs:
            return 0.0
        cost = c.cost(pairs)
        block = c.size / c.n if per_block else c.size
        return pipeline_time_s(steps, c.k, cost.alpha_s, c.tau(block / c.k, cost), c.window)

    return formula


def _reduce_broadcast(c: _Call) -> float:
    if c.n == 1:
        return 0.0
    return c.chain([c.node_pairs(_to_root(c)), c.node_pairs(_from_root(c))], c.size)


# --- nvls -----------------------------------------------------------------------------------


def _nvls(collective: Collective) -> Formula:
    def formula(c: _Call) -> float:
        n = c.n
        if n == 1:
            return 0.0
        switch = reducing_switch(c.net.topology, c.nodes, c.algorithm)
        up = [(node, switch) for node in c.nodes]
        down = [(switch, node) for node in c.nodes]
        cost = c.net.cost(up + down)
        alpha = cost.alpha_s
        tau = c.tau(c.size / (n * c.k), cost)
        if collective is Collective.ALLREDUCE:  # reduce to the owner, then multicast
            return 4 * alpha + ((n + 1) * c.k + n + 4) * tau
        if collective is Collective.REDUCESCATTER:  # all n blocks up, then block r down
            return pipeline_time_s(1, n * c.k, alpha, tau, c.window) + alpha + tau
        # the first store, paced at B / n, then every block's pieces down
        return alpha + n * tau + pipeline_time_s(1, n * c.k, alpha, tau, c.window)

    return formula


def _nvls_tree(c: _Call) -> float:
    """NVLS-tree (:func:`simcoll.algorithms.nvls.nvls_tree_allreduce`) as a pipelined
    chain of its hops, each moving half a shard (``S / 2g``) per pair: every GPU up to its
    server's switch (2g halves), the switch down to the heads (2 halves each), the two
    trees over the servers level by level up and then down (each pair once per tree it is
    in, levels counted from the leaves up and from the root down), the heads up to their
    switch, and the switch down to every GPU. An estimate: a level of one tree runs with
    the same level of the other."""
    servers = hosts_of(c.net.topology, c.nodes)
    if len(servers) < 2:
        return _nvls(Collective.ALLREDUCE)(c)
    g = len(servers[0])
    if any(len(server) != g for server in servers):
        raise ConfigError(f"{c.algorithm}: servers hold different numbers of ranks")
    switches = [reducing_switch(c.net.topology, [c.nodes[r] for r in server], c.algorithm)
                for server in servers]  # fmt: skip
    heads = [[c.nodes[server[local]] for server in servers] for local in range(g)]
    gpus_up: list[NodePair] = [(c.nodes[r], switches[j])
                               for j, server in enumerate(servers) for r in server]  # fmt: skip
    to_heads: list[NodePair] = [(switches[j], heads[local][j])
                                for local in range(g) for j in range(len(servers))]  # fmt: skip
    up_levels: list[list[NodePair]] = []
    down_levels: list[list[NodePair]] = []
    for tree in double_binary_tree(len(servers)):
        level = {tree.root: 0}
        for node in tree.top_down()[1:]:
            level[node] = level[tree.parent[node]] + 1
        depth = max(level.values())
        for node, at in level.items():
            if node == tree.root:
                continue
            parent = tree.parent[node]
            while len(up_levels) < depth:
                up_levels.append([])
                down_levels.append([])
            for local in range(g):
                up_levels[depth - at].append((heads[local][node], heads[local][parent]))
                down_levels[at - 1].append((heads[local][parent], heads[local][node]))
    from_heads = [pair[::-1] for pair in to_heads]
    hops = [gpus_up * (2 * g), to_heads * 2, *up_levels, *down_levels, from_heads * 2,
            [pair[::-1] for pair in gpus_up] * (2 * g)]  # fmt: skip
    # the SMs' least time for the call (sim.pacing.sm_bound_s) paces the legs the flow
    # model paces: what a GPU sends into its switch (its share up, a head's store)
    bus = c.sm_bus_bandwidth_bytes_per_s
    sm_s = c.size * Collective.ALLREDUCE.busbw_factor(c.n) / bus if bus > 0 else 0.0
    paced = [sm_s, 0.0, *[0.0] * (len(up_levels) + len(down_levels)), sm_s, 0.0]
    return c.chain(hops, c.size / (2 * g), least_s=paced)


def _sharp(c: _Call) -> float:
    """SHARP: ranks -> group switch (+) [-> root switch (+) -> group switch] -> ranks."""
    n = c.n
    if n == 1:
        return 0.0
    g = c.ranks_per_switch if 0 < c.ranks_per_switch < n else n
    if n % g:
        raise ConfigError(f"{c.algorithm}: ranks_per_switch {g} does not divide {n} ranks")
    groups = [list(range(first, first + g)) for first in range(0, n, g)]
    two_levels = len(groups) > 1
    every = [list(range(n))] * two_levels
    switches = fabric_switches(c.net.topology, c.nodes, groups + every, c.algorithm, c.net.router)
    up = [(c.nodes[r], switches[j]) for j, group in enumerate(groups) for r in group]
    down = [(b, a) for a, b in up]
    hops = [up, down]
    if two_levels:
        root = switches[-1]
        to_root = [(switch, root) for switch in switches[:-1]]
        hops = [up, to_root, [(b, a) for a, b in to_root], down]
    return c.chain(hops, c.size)


def _collnet(chain: bool) -> Formula:
    """NCCL's CollNet all-reduce (:mod:`simcoll.algorithms.collnet`) as a pipelined chain
    of its hops. Direct: every GPU to each other head of its server (``S / G`` a pair),
    the heads up their SHARP trees (one per head index) and back, each head to the other
    GPUs. Chain: per channel ``c`` (head ``c mod G``, ``S / C`` a pair) up the server's
    chain hop by hop, the tree, and down the chain. An estimate where the hops of
    different channels or trees meet on a link."""

    def formula(c: _Call) -> float:
        if c.n == 1:
            return 0.0
        servers = hosts_of(c.net.topology, c.nodes)
        g = len(servers[0])
        collnet_servers(c.algorithm, c.n, g)  # the schedule's refusal, word for word
        if any(len(server) != g for server in servers):
            sizes = [len(server) for server in servers]
            raise ConfigError(f"{c.algorithm}: CollNet reduces across servers of equal "
                              f"size, got {sizes} ranks per server")  # fmt: skip
        n_nodes = len(servers)
        per = servers_per_switch(c.ranks_per_switch, g, n_nodes)
        if n_nodes % per:
            raise ConfigError(f"{c.algorithm}: first-level switches of {per} servers do not "
                              f"split {n_nodes} servers")  # fmt: skip
        heads_of = list(range(min(c.ch, g))) if chain else list(range(g))
        trees = []  # per head index: its first-level groups, and all of them (two levels)
        for h in heads_of:
            members = [server[h] for server in servers]
            groups = [members[j : j + per] for j in range(0, n_nodes, per)]
            trees.append(groups + ([members] if len(groups) > 1 else []))
        # placed in one pass, as the engine places the schedule's endpoints
        switches = iter(fabric_switches(c.net.topology, c.nodes, [g for t in trees for g in t],
                                        c.algorithm, c.net.router, share=True))  # fmt: skip
        tree_up: list[NodePair] = []
        tree_mid: list[NodePair] = []
        for tree in trees:
            placed = [next(switches) for _ in tree]
            groups = tree[:-1] if len(tree) > 1 else tree
            tree_up += [(c.nodes[r], placed[j]) for j, group in enumerate(groups)
                        for r in group]  # fmt: skip
            if len(tree) > 1:
                tree_mid += [(placed[j], placed[-1]) for j in range(len(groups))]
        middle: list[list[NodePair]] = [tree_up, tree_mid, [(b, a) for a, b in tree_mid],
                                        [(b, a) for a, b in tree_up]]  # fmt: skip
        middle = [hop for hop in middle if hop]
        if not chain:
            scatter: list[NodePair] = [(c.nodes[server[a]], c.nodes[server[b]])
                                       for server in servers for a in range(g)
                                       for b in range(g) if a != b]  # fmt: skip
            return _fill_then_bottleneck(c, [scatter, *middle, [(b, a) for a, b in scatter]],
                                         c.size / g)  # fmt: skip
        up: list[list[NodePair]] = [[] for _ in range(g - 1)]
        for channel in range(c.ch):
            h = channel % g
            for server in servers:
                order = [server[(h + i) % g] for i in range(g)]
                for step, i in enumerate(range(g - 1, 0, -1)):
                    up[step].append((c.nodes[order[i]], c.nodes[order[i - 1]]))
        down: list[list[NodePair]] = [[(b, a) for a, b in hop] for hop in reversed(up)]
        # each channel's pairs are listed with its share: no channel spreads a pair again
        return _fill_then_bottleneck(replace(c, ch=1), [*up, *middle, *down], c.size / c.ch)

    return formula


def _fill_then_bottleneck(c: _Call, hops: Sequence[Sequence[NodePair]],
                          bytes_per_pair: float) -> float:  # fmt: skip
    """A long pipelined chain whose hops reuse the same links (CollNet's: a GPU sends in
    the scatter and the gather, up and down the chain): the first of ``k`` chunks through
    every hop as each hop alone moves it, then the other ``k - 1`` at the pace of the
    busiest hop with every hop's pairs on the links. Unchunked (k = 1) it is
    :meth:`_Call.chain`'s sum of the hops alone; :meth:`_Call.chain` would charge the
    fill at the loaded pace too, up to twice the flow model's time for a chain of 16
    hops in 16 chunks."""
    alone = [c.net.cost(hop) for hop in hops]
    chunk = bytes_per_pair / c.k
    fill = sum(cost.alpha_s + c.tau(chunk, cost) for cost in alone)
    if c.k == 1:
        return fill
    every = [pair for hop in hops for pair in hop]
    load = c.net.load(every)
    wire = c.net.wire_load(every) if c.net.contention else None
    loaded = [c.net.cost(hop, load=load, wire=wire) for hop in hops]
    return fill + (c.k - 1) * max(c.tau(chunk, cost) for cost in loaded)


# --- textbook algorithms (per step) ---------------------------------------------------------


def _log2_ceil(n: int) -> int:
    return (n - 1).bit_length()


def _binomial(build: Callable[[int, int], Tree] | None = None) -> Formula:
    """Binomial broadcast: the tree of :mod:`simcoll.algorithms.tree` (MPICH's, or
    ``build``'s), where a rank sends to all its children at once as soon as it has a
    piece, is a pipelined chain of its levels; the edges of one level run together (and
    share links). Exact where every rank's children share its links evenly (a star: a
    rank's sends to its children all start together and move alike)."""
    make = build or binomial_tree

    def formula(c: _Call) -> float:
        if c.n == 1:
            return 0.0
        tree = make(c.n, c.root)
        level = {tree.root: 0}
        hops: list[list[RankPair]] = []
        for rank in tree.top_down()[1:]:
            parent = tree.parent[rank]
            level[rank] = level[parent] + 1
            if len(hops) < level[rank]:
                hops.append([])
            hops[level[rank] - 1].append((parent, rank))
        return c.chain([c.node_pairs(hop) for hop in hops], c.size)

    return formula


def _binomial_steps(towards_root: bool, *, whole: bool = False) -> Formula:
    """MPICH's binomial scatter, gather (a sender passes on the blocks of its whole
    subtree) or reduce (``whole``: the whole buffer over every edge), as
    :mod:`simcoll.algorithms.tree` runs them: a rank serves its children one after
    another, so the edges of mask 2^i run together as one step, ceil(log2 n) steps, each
    costed at its largest transfer."""

    def formula(c: _Call) -> float:
        n, root, block = c.n, c.root, c.size / c.n
        levels = _log2_ceil(n)
        steps: list[tuple[list[RankPair], float]] = []
        for i in range(levels):
            d = 1 << (levels - 1 - i)
            starts = [v for v in range(0, n, 2 * d) if v + d < n]
            pairs = [((root + v) % n, (root + v + d) % n) for v in starts]
            most = max((min(d, n - v - d) for v in starts), default=0)
            if towards_root:
                pairs = [(b, a) for a, b in pairs]
            steps.append((pairs, c.size if whole else most * block))
        return c.steps(steps[::-1] if towards_root else steps)

    return formula


def _double_binary_tree(c: _Call) -> float:
    n = c.n
    if n == 1:
        return 0.0
    if c.trees:
        return _plan_trees(c)
    trees = double_binary_tree(n)
    pairs: list[RankPair] = []
    for rank in range(n):
        for tree in trees:
            up = tree.parent[rank]
            if up >= 0:
                pairs += [(rank, up), (up, rank)]
    depth = max(tree.depth() for tree in trees)
    # A rank's own transfers (up to three per tree) are in the formula: no sharing on top.
    cost = c.cost(pairs, share=False)
    tau = c.tau(c.size / c.k, cost)
    return 2 * depth * (cost.alpha_s + tau) + 2 * (c.k - 1) * tau


def _plan_trees(c: _Call) -> float:
    """A plan's trees, one per channel, each all-reducing 1/C of the buffer in k pieces:
    up the tree (a rank sends once every child's piece is in) and down again.

    The first piece takes its tree's longest path, edge by edge at the edge's own latency
    and pace, where the edges that move it at the same time share the links they cross:
    going up, those of every channel whose senders stand as high above their leaves;
    coming down, those whose receivers stand as deep below their root. Each later piece
    follows at the pace of the busiest pair, every edge up and down sharing the links
    (:meth:`~simcoll.models._net.Network.pace`), each pair's latency hidden behind the
    window's pieces where they cover it. An estimate: the levels of different channels'
    trees do not move in step in the flow model, and later pieces overtake the pace of
    the first where the links allow."""
    net = c.net
    piece = c.size / (len(c.trees) * c.k)
    # per channel, each sending rank's up and down pair, and its step up and down
    edges: list[tuple[int, NodePair, NodePair, int, int]] = []
    for ch, tree in enumerate(c.trees):
        height = dict.fromkeys(range(len(tree.parent)), 0)
        order = tree.top_down()
        for rank in reversed(order[1:]):
            parent = tree.parent[rank]
            height[parent] = max(height[parent], height[rank] + 1)
        depth = {tree.root: 0}
        for rank in order[1:]:
            depth[rank] = depth[tree.parent[rank]] + 1
        for rank in order[1:]:
            up, down = c.channel_pairs(ch, [(rank, tree.parent[rank]), (tree.parent[rank], rank)])
            edges.append((ch, up, down, height[rank], depth[rank]))
    by_step: dict[tuple[str, int], list[NodePair]] = {}
    for _, up, down, up_step, down_step in edges:
        by_step.setdefault(("up", up_step), []).append(up)
        by_step.setdefault(("down", down_step), []).append(down)
    wires = {step: net.wire_load(pairs) for step, pairs in by_step.items()}
    hop: dict[tuple[int, NodePair], float] = {}
    for ch, up, down, up_step, down_step in edges:
        for pair, step in ((up, ("up", up_step)), (down, ("down", down_step))):
            hop[ch, pair] = net.latency_s(pair) + piece / _edge_pace(net, pair, wires[step])
    first = 0.0
    for ch, tree in enumerate(c.trees):
        order = tree.top_down()
        arrived = dict.fromkeys(range(len(tree.parent)), 0.0)  # every piece of its own
        for rank in reversed(order[1:]):  # children before their parent
            parent = tree.parent[rank]
            (up,) = c.channel_pairs(ch, [(rank, parent)])
            arrived[parent] = max(arrived[parent], arrived[rank] + hop[ch, up])
        down_at = {tree.root: arrived[tree.root]}
        for rank in order[1:]:  # parents before their children
            (down,) = c.channel_pairs(ch, [(tree.parent[rank], rank)])
            down_at[rank] = down_at[tree.parent[rank]] + hop[ch, down]
        first = max(first, *down_at.values())
    if c.k == 1:
        return first
    every = [pair for _, up, down, _, _ in edges for pair in (up, down)]
    wire = net.wire_load(every) if net.contention else {}
    w = min(c.window, c.k)

    def behind(pair: NodePair) -> float:  # the later pieces on one pair, w in flight
        alpha, tau = net.latency_s(pair), piece / _edge_pace(net, pair, wire)
        return (c.k - 1) * tau + (c.k - 1) // w * max(0.0, alpha - (w - 1) * tau)

    return first + max(behind(pair) for pair in every)


def _edge_pace(net: Network, pair: NodePair, wire: dict[tuple[str, str], float]) -> float:
    """A pair's pace: its busiest link's share under contention, else its route's
    bottleneck at its efficiency (the ideal model)."""
    if net.contention:
        return net.pace(pair, wire)
    return net.cost([pair], share=False).bandwidth_bytes_per_s


def _fold(n: int) -> tuple[int, list[int]]:
    """MPICH's fold onto p = 2^floor(log2 n) ranks (as ``simcoll.algorithms.doubling``):
    position i is rank 2i + 1 for i < n - p (standing for rank 2i too), else rank i + n - p."""
    p = 1 << (n.bit_length() - 1)
    return p, [2 * i + 1 if i < n - p else i + n - p for i in range(p)]


def _halving_doubling(collective: Collective) -> Formula:
    """Recursive halving (distance p/2 first) and/or doubling (distance 1 first).

    Each step is costed at its largest transfer: a position sends the blocks of the
    positions it stands for, and a folded position stands for two ranks.
    """

    def formula(c: _Call) -> float:
        n, size = c.n, float(c.size)
        p, ranks = _fold(n)
        extra = n - p
        fold_in = [(2 * i, 2 * i + 1) for i in range(extra)]
        fold_out = [(b, a) for a, b in fold_in]
        # Blocks each position stands for, and the bytes of one block.
        if collective is Collective.ALLREDUCE:
            weight, block = [1] * p, size / p  # p sub-blocks of the whole buffer
        else:
            weight, block = [2 if i < extra else 1 for i in range(p)], size / n
        dists = [1 << j for j in range(p.bit_length() - 1)]

        def step(d: int, halving: bool) -> tuple[list[RankPair], float]:
            # Halving: i sends the blocks of its partner's half; doubling: all it holds.
            side = [i ^ d if halving else i for i in range(p)]
            most = max(sum(weight[j] for j in range(p) if j // d == side[i] // d) for i in range(p))
            return [(ranks[i], ranks[i ^ d]) for i in range(p)], most * block

        halving = [step(d, halving=True) for d in reversed(dists)]
        doubling = [step(d, halving=False) for d in dists]
        if collective is Collective.ALLREDUCE:
            steps = [(fold_in, size), *halving, *doubling, (fold_out, size)]
        elif collective is Collective.REDUCESCATTER:
            steps = [(fold_in, size), *halving, (fold_out, size / n)]
        else:
            steps = [(fold_in, size / n), *doubling, (fold_out, size * (n - 1) / n)]
        return c.steps(steps)

    return formula


def _bruck(collective: Collective) -> Formula:
    def formula(c: _Call) -> float:
        n, block = c.n, c.size / c.n
        steps: list[tuple[Sequence[RankPair], float]] = []
        for i in range(_log2_ceil(n)):
            d = 1 << i
            if collective is Collective.ALLGATHER:  # send the 2^i blocks held so far
                steps.append(([(r, (r - d) % n) for r in range(n)], min(d, n - d) * block))
            else:  # all-to-all: the blocks whose distance has bit i set
                count = sum(1 for j in range(n) if j & d)
                steps.append(([(r, (r + d) % n) for r in range(n)], count * block))
        return c.steps(steps)

    return formula


def _pairwise(c: _Call) -> float:
    n = c.n
    return c.steps([([(r, (r + i) % n) for r in range(n)], c.size / n) for i in range(1, n)])


def _hierarchical(c: _Call) -> float:
    groups = hosts_of(c.net.topology, c.nodes)
    g, n_hosts = len(groups[0]), len(groups)
    if any(len(group) != g for group in groups):
        sizes = sorted({len(group) for group in groups})
        raise ConfigError(
            f"{c.algorithm} needs the same number of ranks on every host; got {sizes}"
        )
    intra = [pair for group in groups for pair in _ring_pairs(group)]
    inter = [pair for local in range(g) for pair in _ring_pairs([h[local] for h in groups])]
    if n_hosts == 1 or g == 1:  # one ring, its reduce-scatter streaming into its all-gather
        cost = c.cost(intra if n_hosts == 1 else inter)
        tau = c.tau(c.size / (c.n * c.k), cost)
        return pipeline_time_s(2 * (c.n - 1), c.k, cost.alpha_s, tau, c.window)
    total = 0.0
    if g > 1:
        cost = c.cost(intra)
        tau = c.tau(c.size / (g * c.k), cost)
        total += 2 * pipeline_time_s(g - 1, c.k, cost.alpha_s, tau, c.window)
    if n_hosts > 1:
        cost = c.cost(inter)
        tau = c.tau(c.size / (g * n_hosts * c.k), cost)
        total += pipeline_time_s(2 * (n_hosts - 1), c.k, cost.alpha_s, tau, c.window)
    return total


def _reducescatter_allgather(c: _Call) -> float:
    return 2 * _ring(lambda n: n - 1)(c)


def _reducescatter_gather(c: _Call) -> float:
    """A ring reduce-scatter, then every block to the root in one message, all at once."""
    return _ring(lambda n: n - 1)(c) + _direct(_to_root, per_block=True)(replace(c, k=1))


C = Collective
_FORMULAS: dict[tuple[Collective, str], Formula] = {
    (C.ALLREDUCE, "ring"): _ring(lambda n: 2 * (n - 1)),
    (C.ALLGATHER, "ring"): _ring(lambda n: n - 1),
    (C.REDUCESCATTER, "ring"): _ring(lambda n: n - 1),
    (C.BROADCAST, "ring"): _ring_chain(0),
    (C.REDUCE, "ring"): _ring_chain(1),
    (C.ALLREDUCE, "direct"): _direct(_all_pairs, per_block=True, steps=2),
    (C.ALLGATHER, "direct"): _direct(_all_pairs, per_block=True),
    (C.REDUCESCATTER, "direct"): _direct(_all_pairs, per_block=True),
    (C.ALLTOALL, "direct"): _direct(_all_pairs, per_block=True),
    (C.BROADCAST, "direct"): _direct(_from_root, per_block=False),
    (C.REDUCE, "direct"): _direct(_to_root, per_block=False),
    (C.GATHER, "direct"): _direct(_to_root, per_block=True),
    (C.SCATTER, "direct"): _direct(_from_root, per_block=True),
    (C.SENDRECV, "direct"): _direct(_successor, per_block=False),
    (C.ALLREDUCE, "reduce_broadcast"): _reduce_broadcast,
    (C.ALLREDUCE, "nvls"): _nvls(C.ALLREDUCE),
    (C.REDUCESCATTER, "nvls"): _nvls(C.REDUCESCATTER),
    (C.ALLGATHER, "nvls"): _nvls(C.ALLGATHER),
    (C.ALLREDUCE, "nvls_tree"): _nvls_tree,
    (C.ALLREDUCE, "sharp"): _sharp,
    (C.ALLREDUCE, "collnet_direct"): _collnet(chain=False),
    (C.ALLREDUCE, "collnet_chain"): _collnet(chain=True),
    (C.ALLREDUCE, "tree"): _double_binary_tree,
    (C.BROADCAST, "tree"): _binomial(),
    (C.BROADCAST, "msb_tree"): _binomial(build=msb_binomial_tree),
    (C.REDUCE, "tree"): _binomial_steps(towards_root=True, whole=True),
    (C.SCATTER, "tree"): _binomial_steps(towards_root=False),
    (C.GATHER, "tree"): _binomial_steps(towards_root=True),
    (C.ALLREDUCE, "halving_doubling"): _halving_doubling(C.ALLREDUCE),
    (C.REDUCESCATTER, "halving_doubling"): _halving_doubling(C.REDUCESCATTER),
    (C.ALLGATHER, "halving_doubling"): _halving_doubling(C.ALLGATHER),
    (C.ALLGATHER, "bruck"): _bruck(C.ALLGATHER),
    (C.ALLTOALL, "bruck"): _bruck(C.ALLTOALL),
    (C.ALLTOALL, "pairwise"): _pairwise,
    (C.ALLREDUCE, "hierarchical"): _hierarchical,
    (C.ALLREDUCE, "reducescatter_allgather"): _reducescatter_allgather,
    (C.REDUCE, "reducescatter_gather"): _reducescatter_gather,
}

ALPHABETA_ALGORITHMS: frozenset[tuple[Collective, str]] = frozenset(_FORMULAS)
"""The (collective, algorithm) pairs :func:`alphabeta_time_s` has a formula for."""


def alphabeta_algorithm_names(collective: Collective | str) -> list[str]:
    """Algorithms with an alpha-beta formula for a collective, sorted.

    >>> alphabeta_algorithm_names("alltoall")
    ['bruck', 'direct', 'pairwise']
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    return sorted(name for coll, name in _FORMULAS if coll is c)


def inexact_reason(collective: Collective, algorithm: str, n_chunks: int, n_hosts: int) -> str:
    """Why the formula of ``algorithm`` is an estimate rather than the flow model's time
    where no other call contends ('' where it is exact, as ``tests/prediction/
    test_closed_form.py`` holds it on every shipped single-switch server).

    >>> inexact_reason(Collective.ALLGATHER, "bruck", 1, 1)
    ''
    >>> inexact_reason(Collective.ALLGATHER, "bruck", 4, 1)
    'cut into 4 pieces, its steps overlap piece by piece on shared links'
    """
    c = collective
    if (c, algorithm) in STEPWISE and n_chunks > 1:
        return f"cut into {n_chunks} pieces, its steps overlap piece by piece on shared links"
    if c is Collective.ALLREDUCE and algorithm in ("nvls", "nvls_tree"):
        return "its reduce and multicast legs share every link unevenly as its pipeline fills"
    if c is Collective.ALLREDUCE and algorithm == "tree":
        return "pieces going up and coming down share links unevenly as its trees fill"
    if c is Collective.ALLREDUCE and algorithm == "hierarchical" and n_hosts > 1:
        return "its phases inside and across hosts overlap piece by piece"
    return ""


def alphabeta_time_s(
    topology: nx.DiGraph[str],
    collective: Collective | str,
    algorithm: str,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int = 1,
    n_chunks: int = 1,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    root: int = 0,
    ranks_per_switch: int = 0,
    sm_bus_bandwidth_bytes_per_s: float = 0.0,
    protocol: Protocol | str | None = None,
    contention: bool = True,
    rank_nodes: tuple[str, ...] | None = None,
    router: Router | None = None,
    rings: Sequence[Sequence[int]] = (),
    trees: Sequence[Tree] = (),
    waypoints: Sequence[Mapping[RankPair, tuple[str, ...]]] = (),
    exact: bool = False,
) -> float:
    """Time of one collective call by the alpha-beta formula of its algorithm, in seconds.

    Parameters
    ----------
    topology
        A validated topology; alpha and B come from the routes of the pairs the algorithm
        uses (see the module docstring).
    collective, algorithm
        What to cost, by name; :func:`alphabeta_algorithm_names` lists the algorithms.
    n_ranks
        Ranks, on the GPUs with ``rank`` 0..n_ranks-1 (as :func:`simcoll.sim.engine.simulate`
        places them) unless ``rank_nodes`` says otherwise.
    size_bytes
        Message size, nccl-tests convention; it must split into the collective's blocks.
    n_channels, n_chunks, max_in_flight, root, ranks_per_switch
        As the algorithm functions take them (:mod:`simcoll.algorithms`); an algorithm
        ignores those it has no use for (``ranks_per_switch`` is ``sharp``'s).
    sm_bus_bandwidth_bytes_per_s
        NVLS-tree's: the most bus bandwidth its CTAs move (0: no bound), as
        :func:`simcoll.algorithms.nvls.nvls_tree_allreduce` takes it.
    protocol
        An NCCL protocol (or its name): every transfer pays its step latency on top of
        its route's and moves ``bytes / efficiency`` on the wire, as in ``simulate``.
    contention
        True models the ``flow`` engine (pairs share the links they cross); False the
        ``ideal`` one (every transfer at its route's bottleneck bandwidth).
    rank_nodes
        GPU node of each rank, for a placement other than by ``rank``.
    router
        A :class:`~simcoll.topology.Router` of ``topology`` to reuse across calls (a size
        sweep): routing is most of the cost on a large fabric, and the router caches it.
    rings
        The ring order of each channel (a plan's: NCCL's rings avoid a DGX-1's PCIe); the
        ring algorithms then run every channel's ring at once with 1/C of the data each,
        and ``n_channels`` is ignored. Default: one ring in rank order.
    trees
        The tree of each channel (a plan's: a chain inside each server, a double binary
        tree across them); the tree all-reduce then runs every channel's tree at once
        with 1/C of the data each. Default: NCCL's double binary tree over the ranks.
    waypoints
        Per channel of ``rings`` or ``trees``: the nodes the route of an edge ``(src,
        dst)`` passes, in order (a plan's NICs and PXN proxy,
        :meth:`~simcoll.plan.channels.Plan.waypoints`), as the flow model routes it;
        edges not named take the topology's own route.
    exact
        Refuse (:class:`NoClosedFormError`) where the formula is an estimate of the flow
        model's time rather than that time (:func:`inexact_reason`).

    Raises
    ------
    ConfigError
        On an unknown collective or algorithm (the message lists the valid ones), a size
        that does not split into blocks, bad parameters, more ranks than GPUs, or an
        ``nvls`` algorithm on a topology without a reducing switch.

    Examples
    --------
    >>> from simcoll.topology import switch_star
    >>> star = switch_star(8, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
    >>> t = alphabeta_time_s(star, "broadcast", "direct", 8, 10**6)
    >>> round(t * 1e6, 6)  # alpha + (n - 1) S / B: the root's uplink carries 7 copies
    72.0
    >>> alphabeta_time_s(star, "allreduce", "rings", 8, 64)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: no alpha-beta formula for allreduce/rings; valid: \
collnet_chain, collnet_direct, direct, halving_doubling, hierarchical, nvls, nvls_tree, \
reduce_broadcast, reducescatter_allgather, ring, sharp, tree
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    formula = _FORMULAS.get((c, algorithm))
    if formula is None:
        valid = ", ".join(alphabeta_algorithm_names(c))
        raise ConfigError(f"no alpha-beta formula for {c.value}/{algorithm}; valid: {valid}")
    for name, value in (("n_channels", n_channels), ("n_chunks", n_chunks),
                        ("max_in_flight", max_in_flight)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ConfigError(f"size_bytes must be a non-negative integer, got {size_bytes!r}")
    nodes = map_ranks(topology, n_ranks) if rank_nodes is None else tuple(rank_nodes)
    if len(nodes) != n_ranks:
        raise ConfigError(f"rank_nodes names {len(nodes)} GPUs for {n_ranks} ranks")
    if isinstance(ranks_per_switch, bool) or not isinstance(ranks_per_switch, int):
        raise ConfigError(f"ranks_per_switch must be an integer, got {ranks_per_switch!r}")
    if not 0 <= root < n_ranks:
        raise ConfigError(f"{c.value}: root {root} is not a rank of {n_ranks}")
    c.block_bytes(size_bytes, n_ranks)  # refuses what the schedule builders refuse
    if isinstance(protocol, str):
        protocol = parse_protocol(protocol)
    call = _Call(
        net=Network(topology, protocol=protocol, contention=contention, router=router),
        nodes=nodes,
        size=size_bytes,
        ch=n_channels,
        k=n_chunks,
        window=max_in_flight,
        root=root,
        algorithm=algorithm,
        ranks_per_switch=ranks_per_switch,
        sm_bus_bandwidth_bytes_per_s=sm_bus_bandwidth_bytes_per_s,
        rings=tuple(tuple(ring) for ring in rings),
        trees=tuple(trees),
        waypoints=tuple(waypoints),
    )
    for ring in call.rings:
        if sorted(ring) != list(range(n_ranks)):
            raise ConfigError(f"ring {list(ring)} is not an order of the {n_ranks} ranks")
    if exact and n_ranks > 1:
        hosts = len(hosts_of(topology, nodes))
        reason = inexact_reason(c, algorithm, n_chunks, hosts)
        if reason:
            raise NoClosedFormError(f"{c.value}/{algorithm} has no exact closed form ({reason})")
    return formula(call)


def pattern_cost(
    topology: nx.DiGraph[str],
    pairs: Sequence[RankPair],
    *,
    n_ranks: int | None = None,
    rank_nodes: tuple[str, ...] | None = None,
    protocol: Protocol | str | None = None,
    contention: bool = True,
    router: Router | None = None,
) -> PatternCost:
    """Alpha, per-pair bandwidth and k_max of rank pairs that communicate at once.

    Ranks map to GPUs as in :func:`alphabeta_time_s` (``n_ranks`` defaults to one past
    the largest rank named).

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
    >>> cost = pattern_cost(star, [(0, 1), (0, 2), (0, 3)])  # rank 0 sends to three peers
    >>> cost.k_max, cost.busiest_link, round(cost.bandwidth_bytes_per_s / 1e9, 6)
    (3, ('gpu0', 'sw'), 33.333333)
    """
    if rank_nodes is None:
        needed = n_ranks if n_ranks is not None else 1 + max((max(p) for p in pairs), default=0)
        rank_nodes = map_ranks(topology, needed)
    if isinstance(protocol, str):
        protocol = parse_protocol(protocol)
    net = Network(topology, protocol=protocol, contention=contention, router=router)
    return net.cost([(rank_nodes[a], rank_nodes[b]) for a, b in pairs])
