"""Topologies: graphs of GPUs, switches and links, their builders, files and routes.

A topology is a ``networkx.DiGraph`` with one edge per link direction, following the
schema in :mod:`simcoll.topology.schema`. Build one with a builder, or load a
``topologies/*.toml`` file that names a builder and its parameters; route on it with a
:class:`Router`.

>>> from simcoll.units import GB, us
>>> g = switch_star(4, link_bandwidth_bytes_per_s=300 * GB, link_latency_s=0.5 * us)
>>> gpu_nodes(g)
['gpu0', 'gpu1', 'gpu2', 'gpu3']
>>> Router(g).route("gpu0", "gpu2")
(('gpu0', 'sw'), ('sw', 'gpu2'))
"""

from __future__ import annotations

from simcoll.topology.builders import BUILDERS, full_mesh, ring, switch_star
from simcoll.topology.io import load, parse_overrides
from simcoll.topology.routing import Router, route
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes, validate

__all__ = [
    "BUILDERS",
    "LinkKind",
    "NodeKind",
    "Router",
    "full_mesh",
    "gpu_nodes",
    "load",
    "parse_overrides",
    "ring",
    "route",
    "switch_star",
    "validate",
]
