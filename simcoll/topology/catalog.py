"""The builders and importers that topology files name in their ``builder`` key.

>>> sorted(BUILDERS)[:3]
['dragonfly', 'fat_tree', 'full_mesh']
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

from simcoll.topology import builders, clusters, importers, machines

__all__ = ["BUILDERS", "IMPORTERS"]

BUILDERS: dict[str, Callable[..., nx.DiGraph[str]]] = {
    **builders.BUILDERS,
    **machines.BUILDERS,
    **clusters.BUILDERS,
}
"""Builders by name: pure functions of keyword parameters returning a validated graph."""

IMPORTERS: dict[str, Callable[..., nx.DiGraph[str]]] = {
    "nccl_xml": importers.from_nccl_xml,
    "nvidia_smi": importers.from_nvidia_smi,
}
"""Importers by name: pure functions of a file's text (``params.file``) and parameters."""
