"""Shared fixtures: small topologies and paths. (The root conftest keeps the env clean.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.core.units import GB, us
from simcoll.topology import ring, switch_star

REPO = Path(__file__).resolve().parents[1]
TOPOLOGIES = REPO / "topologies"


@pytest.fixture
def star8():
    """8 GPUs on one switch, 100 GB/s and 1 us per link (2 us GPU to GPU)."""
    return switch_star(8, link_bandwidth_bytes_per_s=100 * GB, link_latency_s=1 * us)


@pytest.fixture
def ring4():
    """4 GPUs in a bidirectional ring, 100 GB/s and 2 us per link."""
    return ring(4, link_bandwidth_bytes_per_s=100 * GB, link_latency_s=2 * us)


@pytest.fixture
def repo() -> Path:
    return REPO
