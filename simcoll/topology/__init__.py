"""Topologies: graphs of GPUs, switches and links, their builders, files and routes.

A topology is a ``networkx.DiGraph`` with one edge per link direction, following the
schema in :mod:`simcoll.topology.schema`. Build one with a builder (a single server in
:mod:`~simcoll.topology.machines`, a cluster in :mod:`~simcoll.topology.clusters`),
import the machine you have (:mod:`~simcoll.topology.importers`), or load a
``topologies/*.toml`` file; route on it with a :class:`Router`; inspect it with
:mod:`~simcoll.topology.inspect`.

>>> from simcoll.core.units import GB, us
>>> g = nvswitch_node(4, nvlinks_per_gpu=18, nvlink_bandwidth_bytes_per_s=25 * GB,
...                   nvlink_latency_s=0.5 * us, nvls=True)
>>> gpu_nodes(g)
['gpu0', 'gpu1', 'gpu2', 'gpu3']
>>> Router(g).route("gpu0", "gpu2")
(('gpu0', 'nvsw'), ('nvsw', 'gpu2'))
>>> g.edges["gpu0", "nvsw"]["bandwidth_bytes_per_s"], g.nodes["nvsw"]["reduces"]
(450000000000.0, True)
"""

from __future__ import annotations

from simcoll.topology.builders import full_mesh, ring, switch_star
from simcoll.topology.catalog import BUILDERS, IMPORTERS
from simcoll.topology.clusters import dragonfly, fat_tree, multi_plane, rail_optimized, torus
from simcoll.topology.importers import from_nccl_xml, from_nvidia_smi
from simcoll.topology.io import load, parse_overrides
from simcoll.topology.machines import hybrid_cube_mesh, nvswitch_node, pcie_tree
from simcoll.topology.nodelink import from_node_link, to_node_link
from simcoll.topology.routing import Router, route
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes, validate

__all__ = [
    "BUILDERS",
    "IMPORTERS",
    "LinkKind",
    "NodeKind",
    "Router",
    "dragonfly",
    "fat_tree",
    "from_nccl_xml",
    "from_node_link",
    "from_nvidia_smi",
    "full_mesh",
    "gpu_nodes",
    "hybrid_cube_mesh",
    "load",
    "multi_plane",
    "nvswitch_node",
    "parse_overrides",
    "pcie_tree",
    "rail_optimized",
    "ring",
    "route",
    "switch_star",
    "to_node_link",
    "torus",
    "validate",
]
