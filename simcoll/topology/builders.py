"""Topology builders: pure functions from physical parameters to a validated graph.

Each builder is named after the shape it returns (as NetworkX names its generators),
takes keyword-only physical parameters with their unit in the name, does no I/O, and is
deterministic. Every returned graph passes :func:`simcoll.topology.schema.validate` and
has ``graph.graph["name"]`` set. GPU node ids are ``"gpu<rank>"``.

Bigger designs compose these small ones; :data:`BUILDERS` is the registry that
topology files name in their ``builder`` key. Every builder refuses a design of more than
:data:`MAX_GPUS` GPUs or :data:`MAX_LINKS` directed links before building it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.core.limits import MAX_TIME_S, MIN_BANDWIDTH_BYTES_PER_S
from simcoll.topology.schema import LinkAttrs, LinkKind, NodeKind, validate

__all__ = ["BUILDERS", "MAX_GPUS", "MAX_LINKS", "full_mesh", "ring", "switch_star"]

MAX_GPUS = 2**17
"""The most GPUs a builder makes: 16,384 eight-GPU servers, the largest clusters being
designed now (131,072 GPUs on a multi-plane fabric: about 10 s and 0.8 GiB to build). A
bigger design is refused in one line rather than built for minutes or hours."""
MAX_LINKS = 2**22
"""The most directed links a builder makes (4.2 million: a full mesh of 2,048 GPUs, or
three times the 1.3 million of a 131,072-GPU cluster of 8-GPU servers)."""


def switch_star(
    n_gpus: int,
    *,
    link_bandwidth_bytes_per_s: float,
    link_latency_s: float,
    link_kind: LinkKind = LinkKind.NVLINK,
    switch_kind: NodeKind = NodeKind.NVSWITCH,
) -> nx.DiGraph[str]:
    r"""``n_gpus`` GPUs, each with one full-duplex link to a single non-blocking switch.

    ::

        gpu0  gpu1  gpu2  gpu3
           \    |     |    /
            \   |     |   /
             `-------sw--'

    This is a single NVSwitch box (DGX A100, DGX H100) when the switch is an NVSwitch and
    the link is the aggregate of a GPU's NVLinks. The switch forwards at full rate from
    every port at once, so only the GPU links can be bottlenecks.

    Parameters
    ----------
    n_gpus
        Number of GPUs, ranks 0..n_gpus-1, node ids ``"gpu0"``... The switch is ``"sw"``.
    link_bandwidth_bytes_per_s
        Bandwidth of each GPU link, per direction.
    link_latency_s
        Latency of each GPU link, per direction. A GPU-to-GPU route crosses two links.
    link_kind
        Technology of the GPU links.
    switch_kind
        Kind of the switch node; any kind but ``NodeKind.GPU``.

    Returns
    -------
    networkx.DiGraph
        ``n_gpus + 1`` nodes and ``2 * n_gpus`` directed links.

    Raises
    ------
    ConfigError
        If ``n_gpus < 1``, the bandwidth is not finite and positive, the latency is not
        finite and non-negative, or a kind has the wrong type.

    Examples
    --------
    >>> from simcoll.core.units import GB, us
    >>> g = switch_star(8, link_bandwidth_bytes_per_s=300 * GB, link_latency_s=0.5 * us)
    >>> g.number_of_nodes(), g.number_of_edges(), g.graph["name"]
    (9, 16, 'switch_star_8')
    >>> g.edges["gpu3", "sw"]["bandwidth_bytes_per_s"]
    300000000000.0
    """
    _check_n_gpus(n_gpus)
    _check_kind(switch_kind, NodeKind, "switch_kind")
    if switch_kind is NodeKind.GPU:
        raise ConfigError("the switch cannot be a GPU; pick a switch kind", field="switch_kind")
    attrs = _link_attrs(link_kind, link_bandwidth_bytes_per_s, link_latency_s)
    graph = _gpus(f"switch_star_{n_gpus}", n_gpus)
    graph.add_node("sw", kind=switch_kind)
    for rank in range(n_gpus):
        _add_duplex(graph, f"gpu{rank}", "sw", attrs)
    return validate(graph)


def ring(
    n_gpus: int,
    *,
    link_bandwidth_bytes_per_s: float,
    link_latency_s: float,
    link_kind: LinkKind = LinkKind.NVLINK,
) -> nx.DiGraph[str]:
    """``n_gpus`` GPUs in a ring: GPU i has a full-duplex link to GPU (i + 1) mod n.

    ::

        gpu0 ---- gpu1
         |          |
        gpu3 ---- gpu2

    With two GPUs the ring is a single full-duplex link (two directed links, not four);
    one GPU has no links.

    Parameters
    ----------
    n_gpus
        Number of GPUs, ranks 0..n_gpus-1, node ids ``"gpu0"``...
    link_bandwidth_bytes_per_s
        Bandwidth of each link, per direction.
    link_latency_s
        Latency of each link, per direction.
    link_kind
        Technology of the links.

    Returns
    -------
    networkx.DiGraph
        ``n_gpus`` nodes and ``2 * n_gpus`` directed links for ``n_gpus >= 3``.

    Raises
    ------
    ConfigError
        As :func:`switch_star`.

    Examples
    --------
    >>> from simcoll.core.units import GB, us
    >>> g = ring(4, link_bandwidth_bytes_per_s=50 * GB, link_latency_s=1 * us)
    >>> g.number_of_edges(), sorted(g.successors("gpu0"))
    (8, ['gpu1', 'gpu3'])
    >>> ring(2, link_bandwidth_bytes_per_s=50 * GB, link_latency_s=1 * us).number_of_edges()
    2
    """
    _check_n_gpus(n_gpus)
    attrs = _link_attrs(link_kind, link_bandwidth_bytes_per_s, link_latency_s)
    graph = _gpus(f"ring_{n_gpus}", n_gpus)
    if n_gpus > 1:
        # For n = 2, rank 1's link to (1 + 1) mod 2 = 0 is the one already added.
        for rank in range(n_gpus if n_gpus > 2 else 1):
            _add_duplex(graph, f"gpu{rank}", f"gpu{(rank + 1) % n_gpus}", attrs)
    return validate(graph)


def full_mesh(
    n_gpus: int,
    *,
    link_bandwidth_bytes_per_s: float,
    link_latency_s: float,
    link_kind: LinkKind = LinkKind.NVLINK,
) -> nx.DiGraph[str]:
    r"""``n_gpus`` GPUs with a direct full-duplex link between every pair.

    ::

        gpu0 ------ gpu1
         |  \      /  |
         |    \  /    |
         |     \/     |
         |     /\     |
         |    /  \    |
         |  /      \  |
        gpu3 ------ gpu2

    This is, for instance, an AMD MI300X platform (Infinity Fabric between every pair of
    its 8 GPUs) or NVLink-bridged GPUs without a switch.

    Parameters
    ----------
    n_gpus
        Number of GPUs, ranks 0..n_gpus-1, node ids ``"gpu0"``...
    link_bandwidth_bytes_per_s
        Bandwidth of each link, per direction.
    link_latency_s
        Latency of each link, per direction.
    link_kind
        Technology of the links.

    Returns
    -------
    networkx.DiGraph
        ``n_gpus`` nodes and ``n_gpus * (n_gpus - 1)`` directed links.

    Raises
    ------
    ConfigError
        As :func:`switch_star`.

    Examples
    --------
    >>> from simcoll.core.units import GB, us
    >>> full_mesh(4, link_bandwidth_bytes_per_s=64 * GB, link_latency_s=1 * us).number_of_edges()
    12
    """
    _check_n_gpus(n_gpus)
    _check_size(links=n_gpus * (n_gpus - 1), field="n_gpus")
    attrs = _link_attrs(link_kind, link_bandwidth_bytes_per_s, link_latency_s)
    graph = _gpus(f"full_mesh_{n_gpus}", n_gpus)
    for a in range(n_gpus):
        for b in range(a + 1, n_gpus):
            _add_duplex(graph, f"gpu{a}", f"gpu{b}", attrs)
    return validate(graph)


BUILDERS: dict[str, Callable[..., nx.DiGraph[str]]] = {
    "switch_star": switch_star,
    "ring": ring,
    "full_mesh": full_mesh,
}
"""Builders by the name a topology file gives in its ``builder`` key."""


def _gpus(name: str, n_gpus: int) -> nx.DiGraph[str]:
    graph: nx.DiGraph[str] = nx.DiGraph(name=name)
    for rank in range(n_gpus):
        graph.add_node(f"gpu{rank}", kind=NodeKind.GPU, rank=rank)
    return graph


def _add_duplex(graph: nx.DiGraph[str], a: str, b: str, attrs: LinkAttrs) -> None:
    """Add the two directed links of one full-duplex cable, each with its own attributes."""
    graph.add_edge(a, b, **attrs)
    graph.add_edge(b, a, **attrs)


def _check_n_gpus(n_gpus: int) -> None:
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ConfigError(f"must be an integer >= 1, got {n_gpus!r}", field="n_gpus")
    _check_size(gpus=n_gpus, field="n_gpus")


def _check_size(*, gpus: int = 0, links: int = 0, field: str) -> None:
    """Refuse a design of more than :data:`MAX_GPUS` GPUs or :data:`MAX_LINKS` links."""
    for count, limit, what in ((gpus, MAX_GPUS, "GPUs"), (links, MAX_LINKS, "directed links")):
        if count > limit:
            raise ConfigError(
                f"the design would have {count} {what}; simcoll builds at most {limit}",
                field=field,
            )


def _largest(counts: dict[str, int]) -> str:
    """The name of the largest of several counts whose product is a design's size."""
    return max(counts, key=lambda name: counts[name])


def _check_kind(value: object, enum: type[LinkKind] | type[NodeKind], name: str) -> None:
    if not isinstance(value, enum):
        valid = ", ".join(f"{enum.__name__}.{member.name}" for member in enum)
        raise ConfigError(f"must be one of {valid}, got {value!r}", field=name)


def _link_attrs(kind: LinkKind, bandwidth_bytes_per_s: float, latency_s: float) -> LinkAttrs:
    _check_kind(kind, LinkKind, "link_kind")
    _check_number(bandwidth_bytes_per_s, "link_bandwidth_bytes_per_s", "bytes/s", zero_ok=False)
    _check_number(latency_s, "link_latency_s", "s", zero_ok=True)
    return LinkAttrs(
        kind=kind, bandwidth_bytes_per_s=float(bandwidth_bytes_per_s), latency_s=float(latency_s)
    )


def _check_number(value: float, name: str, unit: str, *, zero_ok: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a number in {unit}, got {value!r}", field=name)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        sign = "non-negative" if zero_ok else "positive"
        raise ConfigError(f"must be {sign} and finite, got {value!r} {unit}", field=name)
    if unit == "bytes/s" and value < MIN_BANDWIDTH_BYTES_PER_S:
        raise ConfigError(f"must be at least {MIN_BANDWIDTH_BYTES_PER_S} bytes/s (1 bit/s), "
                          f"got {value!r} bytes/s", field=name)  # fmt: skip
    if unit == "s" and value > MAX_TIME_S:
        raise ConfigError(f"must be at most {MAX_TIME_S:g} s, got {value!r} s", field=name)
