r"""Plans in NCCL's own words: print a plan as ``NCCL_DEBUG=INFO`` does, read one from a log.

NCCL prints what its graph search decided when a communicator starts (formats read from
``src/graph/rings.cc``, ``src/init.cc``, ``src/transport/net.cc`` and ``p2p.cc`` of NCCL
2.4 to 2.28, and checked on logs posted in NVIDIA/nccl issues):

- rank 0, one line per channel: ``Channel 00/16 :    0   7   6   5 ...``, the ring from
  rank 0 (older versions stop after 20 ranks; 2.28 ends a long line with ``...``);
- every rank: ``Trees [0] 1/-1/-1->0->7 [1] ...``, per channel its children (``-1``:
  none), itself and its parent (2.5-2.7 append ``|up->rank->d0/d1/d2``; 2.4 wrote
  ``up->rank->d0/d1/d2``);
- every connection: ``Channel 00/0 : 1[1] -> 8[0] [send] via NET/IB/0(0)/GDRDMA`` (NIC 0,
  posted by the proxy of rank 0: PXN) or ``... via P2P/IPC`` inside a server; NCCL 2.4
  wrote ``Ring 00 : 1 -> 8 [send] via NET/IB/0``, and the per-rank ``Ring 00 : 7 -> 0 -> 1``
  (previous, rank, next);
- ``comm 0x... rank 0 nRanks 16 nNodes 2 localRanks 8 ...`` (older: ``nranks``).

:func:`format_plan` writes those lines for a :class:`~simcoll.plan.channels.Plan` (every
ring in full), :func:`parse_nccl_log` reads them back from a real log (a line's prefix,
``host:pid:tid [dev]`` or an mpirun tag, is skipped), and :func:`plan_from_log` turns what
was read into a plan on a topology: rank r on the GPU of the placement, NIC ``k`` of a
server its k-th NIC by name.

>>> log = parse_nccl_log('''
... node0:1:2 [0] NCCL INFO Channel 00/02 :    0   1   2   3
... node0:1:2 [0] NCCL INFO Channel 01/02 :    0   3   2   1
... node0:1:2 [1] NCCL INFO Trees [0] 2/-1/-1->1->0 [1] 0/-1/-1->1->2
... ''')
>>> log.rings
{0: (0, 1, 2, 3), 1: (0, 3, 2, 1)}
>>> log.tree_links[0][1]
((2,), 0)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.core.files import read_input_text
from simcoll.core.limits import MAX_LOG_BYTES
from simcoll.plan.channels import Channel, NetHop, Plan
from simcoll.plan.placement import place_ranks
from simcoll.plan.trees import Tree
from simcoll.topology import NodeKind
from simcoll.topology.tiebreak import natural_key

__all__ = [
    "NcclLog",
    "format_plan",
    "log_plan",
    "parse_nccl_log",
    "plan_from_log",
    "read_nccl_log",
]

_INFO = re.compile(r"NCCL INFO (?P<text>.*)$")
_RING_DUMP = re.compile(
    r"^(?:Channel|Ring) (?P<c>\d+)(?:/(?P<n>\d+))? :(?P<ranks>(?:\s+\d+)*)\s*(?:\.\.\.)?\s*$"
)
_RING_PER_RANK = re.compile(r"^Ring (?P<c>\d+) : (?P<prev>\d+) -> (?P<rank>\d+) -> (?P<next>\d+)")
_CONNECTION = re.compile(
    r"^(?:Channel|Ring) (?P<c>\d+)(?:/\d+)? : (?P<src>\d+)(?:\[\w+\])? -> (?P<dst>\d+)"
    r"(?:\[\w+\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)"
)
_NET = re.compile(r"^NET/[^/]+/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?")
_TREES = re.compile(r"\[(?P<c>\d+)\] (?P<body>\S+)")
_COMM = re.compile(r"\brank (?P<rank>\d+) n[Rr]anks (?P<n>\d+)")


@dataclass
class NcclLog:
    """What a log says of a communicator's plan, as ranks and NIC device numbers.

    ``rings[c]`` is channel c's ring from rank 0 (complete), ``tree_links[c][rank]`` its
    ``(children, parent)`` (-1: root), ``net[c, src, dst]`` the ``(send_dev, recv_dev,
    proxy_rank)`` of a connection through NICs (a missing side is None), ``headers[c]``
    the channel count channel c's ring line states (``Channel 00/16``: 16; NCCL 2.4's
    ``Ring 00`` states none).
    """

    source: str = "<log>"
    n_ranks: int | None = None
    rings: dict[int, tuple[int, ...]] = field(default_factory=dict)
    tree_links: dict[int, dict[int, tuple[tuple[int, ...], int]]] = field(default_factory=dict)
    net: dict[tuple[int, int, int], list[int | None]] = field(default_factory=dict)
    headers: dict[int, int] = field(default_factory=dict)


def read_nccl_log(path: str | Path) -> NcclLog:
    """:func:`parse_nccl_log` of a file; errors name it.

    Raises
    ------
    ConfigError
        If the file is missing, not a regular file, too big, not UTF-8, or holds no plan.
    """
    source = str(path)
    text = read_input_text(path, max_bytes=MAX_LOG_BYTES)
    return parse_nccl_log(text, source=source)


def parse_nccl_log(text: str, *, source: str = "<log>") -> NcclLog:
    """Read rings, trees and NIC connections from ``NCCL_DEBUG=INFO`` output.

    A ring dump cut short (20 ranks in NCCL up to 2.2x) is completed from the per-rank
    ``Ring`` lines or the connection lines, which say each rank's next on each channel.

    Raises
    ------
    ConfigError
        If no ring is found, or a ring cannot be completed (the message names the file
        and channel).
    """
    log = NcclLog(source=source)
    dumps: dict[int, tuple[list[int], bool]] = {}
    nexts: dict[int, dict[int, int]] = {}
    rings_connected = False  # connections after "Connected all rings" are the trees'
    for line in _info_lines(text):
        if (m := _COMM.search(line)) is not None:
            log.n_ranks = max(log.n_ranks or 0, int(m["n"]))
        elif line.startswith("Connected all rings"):
            rings_connected = True
        elif line.startswith("Trees "):
            _trees(log, line)
        elif (m := _RING_PER_RANK.match(line)) is not None:
            nexts.setdefault(int(m["c"]), {})[int(m["rank"])] = int(m["next"])
        elif (m := _CONNECTION.match(line)) is not None:
            _connection(log, None if rings_connected else nexts, m)
        elif (m := _RING_DUMP.match(line)) is not None and m["ranks"].strip():
            ranks = [int(r) for r in m["ranks"].split()]
            dumps[int(m["c"])] = (ranks, line.rstrip().endswith("..."))
            if m["n"] is not None:
                log.headers[int(m["c"])] = int(m["n"])
    for channel in sorted(set(dumps) | set(nexts)):
        log.rings[channel] = _ring(log, channel, dumps.get(channel), nexts.get(channel, {}))
    if not log.rings:
        raise ConfigError(
            "no rings found: expected NCCL_DEBUG=INFO lines like 'Channel 00/16 :    0   1 ...'",
            source=source,
        )
    return log


def _info_lines(text: str) -> Iterable[str]:
    for raw in text.splitlines():
        m = _INFO.search(raw)
        if m is not None:
            yield m["text"].strip()


def _trees(log: NcclLog, line: str) -> None:
    for m in _TREES.finditer(line):
        body = m["body"].split("|")[0]
        parts = body.split("->")
        if len(parts) != 3:
            continue
        if "/" in parts[0]:  # 2.5 and later: d0/d1/d2->rank->up
            downs, rank, up = parts[0], parts[1], parts[2]
        else:  # 2.4: up->rank->d0/d1/d2
            up, rank, downs = parts[0], parts[1], parts[2]
        try:
            children = tuple(int(d) for d in downs.split("/") if int(d) >= 0)
            log.tree_links.setdefault(int(m["c"]), {})[int(rank)] = (children, int(up))
        except ValueError:
            continue


def _connection(log: NcclLog, nexts: dict[int, dict[int, int]] | None, m: re.Match[str]) -> None:
    """One connection line: a ring edge (when ``nexts`` is given) and, through a NIC, the
    NICs of a ring or tree edge."""
    channel, src, dst = int(m["c"]), int(m["src"]), int(m["dst"])
    if nexts is not None:
        nexts.setdefault(channel, {}).setdefault(src, dst)
    net = _NET.match(m["via"])
    if net is None:
        return
    hop = log.net.setdefault((channel, src, dst), [None, None, None])
    if m["dir"] == "receive":
        hop[1] = int(net["dev"])
    else:
        hop[0] = int(net["dev"])
        hop[2] = int(net["proxy"]) if net["proxy"] is not None else None


def _ring(
    log: NcclLog, channel: int, dump: tuple[list[int], bool] | None, nexts: dict[int, int]
) -> tuple[int, ...]:
    ranks = list(dump[0]) if dump else [0]
    n = log.n_ranks
    complete = dump is not None and not dump[1] and (n is None or len(ranks) == n)
    if complete and (n is not None or len(ranks) > 20):
        return tuple(ranks)
    if dump is not None and n is None and not nexts and not dump[1]:
        return tuple(ranks)  # no sign that it was cut
    # Follow each rank's next (the per-rank and connection lines), from the dump's end.
    while len(ranks) < (n or 1 << 30):
        following = nexts.get(ranks[-1])
        if following is None or following == ranks[0]:
            break
        ranks.append(following)
    if (n is not None and len(ranks) != n) or len(set(ranks)) != len(ranks):
        raise ConfigError(
            f"channel {channel}: the ring is cut short ({len(ranks)} of {n or '?'} ranks) and "
            "the log has no 'Ring' or connection lines to complete it",
            source=log.source,
        )
    return tuple(ranks)


def log_plan(
    log: NcclLog, topology: nx.DiGraph[str], n_ranks: int, *, placement: str = "linear"
) -> Plan:
    """The plan of ``log`` for a run of ``n_ranks`` ranks placed by ``placement``: what
    ``simcoll predict --plan LOG`` and ``simcoll plan show --plan LOG`` run.

    Raises
    ------
    ConfigError
        If the log's communicator is not of ``n_ranks`` ranks (a plan of 16 ranks never
        stands in for a run of 24), or as :func:`plan_from_log`.
    """
    logged = log.n_ranks if log.n_ranks is not None else len(next(iter(log.rings.values())))
    if logged != n_ranks:
        raise ConfigError(
            f"the log's communicator has {logged} ranks, this run {n_ranks}: give --ranks "
            f"{logged}, or a topology of that many GPUs",
            source=log.source,
        )
    return plan_from_log(log, topology, place_ranks(topology, n_ranks, placement),
                         placement=placement)  # fmt: skip


def plan_from_log(
    log: NcclLog,
    topology: nx.DiGraph[str],
    rank_nodes: Sequence[str],
    *,
    placement: str = "linear",
) -> Plan:
    """The plan a log describes, on ``topology`` with rank r on ``rank_nodes[r]``.

    A channel's NIC device ``k`` on a server is that server's k-th NIC in name order; a
    PXN proxy rank is that rank's GPU. Channels without trees in the log get none.

    Raises
    ------
    ConfigError
        If the log's rank count differs from ``rank_nodes``, a ring is not an order of the
        ranks, a NIC device does not exist on its server, or the ring lines are not the
        channels their header counts (``Channel 00/08`` and four lines: a log cut short).
    """
    n = len(rank_nodes)
    if log.n_ranks is not None and log.n_ranks != n:
        raise ConfigError(f"the log's communicator has {log.n_ranks} ranks, not {n}",
                          source=log.source)  # fmt: skip
    nics = _server_nics(topology)
    channels = []
    for c in sorted(log.rings):
        _check_ranks(log.rings[c], n, f"channel {c}'s ring", log.source)
        tree = _tree(log.tree_links.get(c, {}), n, c, log.source)
        net = {}
        for (channel, src, dst), (send_dev, recv_dev, proxy) in log.net.items():
            if channel != c:
                continue
            _check_ranks([src, dst] + ([proxy] if proxy is not None else []), n,
                         f"channel {c}'s NET line {src} -> {dst}", log.source)  # fmt: skip
            send = _nic(nics, topology, rank_nodes[src], send_dev, log.source)
            recv = _nic(nics, topology, rank_nodes[dst], recv_dev if recv_dev is not None
                        else send_dev, log.source)  # fmt: skip
            via = rank_nodes[proxy] if proxy is not None and proxy != src else None
            net[src, dst] = NetHop(send, recv, via)
        channels.append(Channel(log.rings[c], tree, net))
    _check_channel_count(log)
    routing = str(topology.graph.get("routing", "ecmp"))
    try:
        return Plan(tuple(rank_nodes), tuple(channels), placement, routing, log.source)
    except ConfigError as error:
        raise ConfigError(error.message, source=log.source) from None


def _check_channel_count(log: NcclLog) -> None:
    """Refuse a log whose ring lines are not the channels their header counts: NCCL prints
    ``Channel cc/NN`` for each of its NN channels (``rings.cc``), so fewer lines is a log
    cut short (or an excerpt), and two counts are two communicators.

    >>> _check_channel_count(parse_nccl_log('''
    ... NCCL INFO Channel 00/04 :    0   1
    ... NCCL INFO Channel 01/04 :    0   1
    ... ''', source="run.log"))
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: run.log: its ring lines' header ('Channel cc/04') says 4 \
channels, but the log has lines for 2 (channels 00..01): a log cut short? give rank 0's whole \
NCCL_DEBUG=INFO output
    """
    counts = sorted(set(log.headers.values()))
    if len(counts) > 1:
        raise ConfigError(f"its ring lines' headers ('Channel cc/NN') say "
                          f"{' and '.join(map(str, counts))} channels: the lines of several "
                          "communicators? give one communicator's lines",
                          source=log.source)  # fmt: skip
    if counts and sorted(log.headers) != list(range(counts[0])):
        found = sorted(log.headers)
        raise ConfigError(
            f"its ring lines' header ('Channel cc/{counts[0]:02d}') says {counts[0]} channels, "
            f"but the log has lines for {len(found)} (channels {', '.join(_spans(found))}): a "
            "log cut short? give rank 0's whole NCCL_DEBUG=INFO output",
            source=log.source,
        )


def _spans(channels: list[int]) -> list[str]:
    """Sorted channel numbers as runs: ``[0, 1, 2, 5]`` -> ``['00..02', '05']``."""
    runs: list[list[int]] = []
    for c in channels:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return [f"{r[0]:02d}..{r[-1]:02d}" if len(r) > 1 else f"{r[0]:02d}" for r in runs]


def _check_ranks(ranks: Iterable[int], n: int, what: str, source: str) -> None:
    bad = [r for r in ranks if not 0 <= r < n]
    if bad:
        raise ConfigError(f"{what} names rank {bad[0]}, not one of the {n} ranks 0..{n - 1}",
                          source=source)  # fmt: skip


def _tree(
    links: Mapping[int, tuple[tuple[int, ...], int]], n: int, channel: int, source: str
) -> Tree | None:
    """Channel ``channel``'s tree from its ``Trees`` lines, checked both ways: every rank's
    children name it as their parent and its parent lists it as a child, one root, every
    rank reached from the root once. None where the log gives no ``Trees`` line for some
    rank (a log of one server's ranks): the tree algorithm then refuses the plan.

    Raises
    ------
    ConfigError
        If a line names a rank out of range, or the lines are not one tree.
    """
    if not links:
        return None
    where = f"channel {channel}'s tree"
    _check_ranks(links, n, where, source)
    for rank, (downs, up) in links.items():
        _check_ranks([*downs, *([up] if up >= 0 else [])], n, f"{where} (rank {rank}'s line)",
                     source)  # fmt: skip
    if len(links) != n:
        return None
    parent = tuple(links[r][1] for r in range(n))
    children = tuple(links[r][0] for r in range(n))
    for r in range(n):
        for child in children[r]:
            if parent[child] != r:
                raise ConfigError(f"{where}: rank {r} lists {child} as a child, whose parent "
                                  f"is {parent[child]}", source=source)  # fmt: skip
        if parent[r] >= 0 and r not in children[parent[r]]:
            raise ConfigError(f"{where}: rank {r}'s parent is {parent[r]}, which does not "
                              f"list it as a child", source=source)  # fmt: skip
    roots = [r for r in range(n) if parent[r] < 0]
    if len(roots) != 1:
        raise ConfigError(f"{where} has {len(roots)} roots, not one", source=source)
    seen, stack = {roots[0]}, [roots[0]]
    while stack:
        for child in children[stack.pop()]:
            if child in seen:
                raise ConfigError(f"{where} reaches rank {child} twice", source=source)
            seen.add(child)
            stack.append(child)
    if len(seen) != n:
        missing = min(set(range(n)) - seen)
        raise ConfigError(f"{where} does not reach rank {missing} from its root {roots[0]} "
                          "(a cycle)", source=source)  # fmt: skip
    return Tree(roots[0], parent, children)


def _server_nics(topology: nx.DiGraph[str]) -> dict[object, list[str]]:
    nics: dict[object, list[str]] = {}
    for node, attrs in topology.nodes(data=True):
        if attrs["kind"] is NodeKind.NIC:
            nics.setdefault(attrs.get("host"), []).append(node)
    return {host: sorted(names, key=natural_key) for host, names in nics.items()}


def _nic(
    nics: dict[object, list[str]], topology: nx.DiGraph[str], gpu: str, dev: int | None, source: str
) -> str:
    host = topology.nodes[gpu].get("host")
    here = nics.get(host, [])
    if dev is None or dev >= len(here):
        raise ConfigError(
            f"NIC {dev} of {host or gpu} is not in the topology ({len(here)} NICs there)",
            source=source,
        )
    return here[dev]


def format_plan(plan: Plan, topology: nx.DiGraph[str], *, nvls_channels: int = 0) -> str:
    """The plan as the ``NCCL INFO`` lines NCCL prints for it (every ring in full), with
    ``nvls_channels`` NVLS channels (the plan holds rings and trees only: the caller
    says how many channels an NVLS call runs on these ranks).

    >>> from simcoll.plan.channels import ring_plan
    >>> from simcoll.topology import switch_star
    >>> star = switch_star(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    >>> print(format_plan(ring_plan(["gpu0", "gpu1", "gpu2"], [[0, 2, 1]]), star))
    NCCL INFO comm 0x0 rank 0 nRanks 3 nNodes 1 localRanks 3 localRank 0 MNNVL 0
    NCCL INFO 1 coll channels, 0 nvls channels, 1 p2p channels
    NCCL INFO Channel 00/01 :    0   2   1
    """
    n = plan.n_ranks
    hosts = [topology.nodes[g].get("host") for g in plan.rank_nodes]
    local = hosts.count(hosts[0])
    width = max(3, len(str(n - 1)))
    lines = [
        f"comm 0x0 rank 0 nRanks {n} nNodes {len(set(hosts))} localRanks {local} "
        "localRank 0 MNNVL 0",
        f"{plan.n_channels} coll channels, {nvls_channels} nvls channels, "
        f"{plan.n_channels} p2p channels",
    ]
    for c, channel in enumerate(plan.channels):
        start = channel.ring.index(0)
        ring = channel.ring[start:] + channel.ring[:start]
        ranks = "".join(f" {r:>{width}}" for r in ring)
        lines.append(f"Channel {c:02d}/{plan.n_channels:02d} : {ranks}")  # NCCL's own spacing
    if all(channel.tree is not None for channel in plan.channels):
        lines += _tree_lines(plan)
    nics = _server_nics(topology)
    for c, channel in enumerate(plan.channels):
        for (src, dst), hop in sorted(channel.net.items()):
            lines += _net_lines(plan, nics, topology, c, (src, dst), hop)
    return "\n".join(f"NCCL INFO {line}" for line in lines)


def _tree_lines(plan: Plan) -> list[str]:
    lines = []
    for rank in range(plan.n_ranks):
        parts = []
        for c, channel in enumerate(plan.channels):
            tree = channel.tree
            assert tree is not None  # checked by the caller
            downs = list(tree.children[rank])[:3] + [-1] * (3 - len(tree.children[rank][:3]))
            parts.append(f"[{c}] {'/'.join(map(str, downs))}->{rank}->{tree.parent[rank]}")
        lines.append("Trees " + " ".join(parts))
    return lines


def _net_lines(  # noqa: PLR0917 - one connection's facts
    plan: Plan,
    nics: dict[object, list[str]],
    topology: nx.DiGraph[str],
    channel: int,
    edge: tuple[int, int],
    hop: NetHop,
) -> list[str]:
    src, dst = edge
    local = {g: i for i, g in enumerate(sorted(plan.rank_nodes, key=natural_key))}

    def dev(nic: str) -> int:
        host = topology.nodes[nic].get("host")
        return nics.get(host, [nic]).index(nic)

    proxy = ""
    if hop.proxy is not None and hop.proxy in plan.rank_nodes:
        proxy = f"({plan.rank_nodes.index(hop.proxy)})"
    ends = f"{src}[{local[plan.rank_nodes[src]] % 8}] -> {dst}[{local[plan.rank_nodes[dst]] % 8}]"
    return [
        f"Channel {channel:02d}/0 : {ends} [send] via NET/IB/{dev(hop.send_nic)}{proxy}/GDRDMA",
        f"Channel {channel:02d}/0 : {ends} [receive] via NET/IB/{dev(hop.recv_nic)}/GDRDMA",
    ]
