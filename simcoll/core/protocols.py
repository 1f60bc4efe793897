"""NCCL's protocols as a cost model: how much of the wire is data, and what a step costs.

NCCL moves data with one of three protocols (NVIDIA/nccl ``src/include/device.h`` and the
tuning model in ``src/graph/tuning.cc``, summarised in ``shared/reference/state-of-the-art.md``
section 3):

- ``LL`` (low latency): 8-byte lines of 4 data bytes and a 4-byte flag, so half the wire
  carries data, but a receiver polls the flag instead of waiting for a fence: the lowest
  per-step latency;
- ``LL128``: 128-byte lines of which 120 bytes are data (93.75 %), flags per line;
- ``simple``: the whole buffer is data, with a memory fence and a flag per step: full
  bandwidth and the highest per-step latency.

simcoll models a protocol as two numbers that calibration can refit: the fraction of the
wire that carries data (``efficiency``: a transfer of S bytes puts S / efficiency bytes on
its links) and a latency added to every transfer (``step_latency_s``), by the class of
the slowest link kind on the transfer's route. The latencies are NCCL's per-hop ring
latencies ``hwLat`` (microseconds: NVLink LL 0.6, LL128 1.9, Simple 3.4; PCIe 1.0, 2.5,
5.7; network 2.7, 4.0, 14.0). Transfers to or from an in-network switch endpoint pay
NCCL's latency of the algorithm instead, split over its two legs (up and down): NVLS
25 us (class ``"nvls"``), CollNet/SHARP 31 us (class ``"collnet"``); NCCL runs both with
Simple only.

>>> PROTOCOLS["LL"].efficiency, PROTOCOLS["LL128"].efficiency
(0.5, 0.9375)
>>> round(PROTOCOLS["simple"].latency_s(["nvlink", "nvlink"]) * 1e6, 6)
3.4
>>> round(PROTOCOLS["simple"].latency_s(["pcie", "ib"]) * 1e6, 6)
14.0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from simcoll.core.errors import ConfigError
from simcoll.core.units import us

__all__ = ["PROTOCOLS", "Protocol", "link_class", "parse_protocol"]

_CLASS_OF_KIND = {
    "nvlink": "nvlink",
    "pcie": "pcie",
    "cpu_link": "pcie",
    "ib": "net",
    "ethernet": "net",
}
_CLASS_ORDER = ("nvlink", "pcie", "net")  # slowest last


def link_class(kinds: Iterable[str]) -> str:
    """The latency class of a route: ``"net"`` if it leaves the node, else ``"pcie"`` if it
    crosses PCIe or a CPU link, else ``"nvlink"`` (also for a route with no links).

    >>> link_class(["nvlink", "pcie"]), link_class([])
    ('pcie', 'nvlink')
    """
    classes = {_CLASS_OF_KIND[kind] for kind in kinds}
    return max(classes, key=_CLASS_ORDER.index, default="nvlink")


@dataclass(frozen=True)
class Protocol:
    """A protocol's cost: data fraction of the wire and per-transfer latency by link class."""

    name: str
    efficiency: float
    step_latency_s: dict[str, float] = field(default_factory=dict)
    # Calibrated data fraction per link class; a class not listed uses ``efficiency``.
    efficiency_by_class: dict[str, float] = field(default_factory=dict)
    # A factor on the data fraction of transfers to or from an in-network switch, per
    # endpoint class (``"nvls"``, ``"collnet"``): the switch's own reduction and multicast
    # throughput against its links' rate. Not listed: 1.
    endpoint_efficiency: dict[str, float] = field(default_factory=dict)

    def efficiency_of(self, kinds: Iterable[str], endpoint: str | None = None) -> float:
        """Data fraction of the wire for a transfer over links of these kinds, to or from
        an in-network switch of class ``endpoint`` if given.

        >>> Protocol("p", 0.5, efficiency_by_class={"net": 0.25}).efficiency_of(["ib"])
        0.25
        >>> Protocol("p", 0.5, efficiency_by_class={"net": 0.25}).efficiency_of(["nvlink"])
        0.5
        >>> Protocol("p", 1.0, endpoint_efficiency={"nvls": 0.75}).efficiency_of(["nvlink"], "nvls")
        0.75
        """
        efficiency = self.efficiency_by_class.get(link_class(kinds), self.efficiency)
        return efficiency * self.endpoint_efficiency.get(endpoint, 1.0) if endpoint else efficiency

    def latency_s(self, kinds: Iterable[str], endpoint: str | None = None) -> float:
        """Latency a transfer over links of these kinds pays on top of the links' own.

        ``endpoint`` is ``"nvls"`` or ``"collnet"`` for a transfer to or from an
        in-network switch; protocols that cannot serve it have no such class.
        """
        return self.step_latency_s[endpoint or link_class(kinds)]


PROTOCOLS: dict[str, Protocol] = {
    "LL": Protocol("LL", 0.5, {"nvlink": 0.6 * us, "pcie": 1.0 * us, "net": 2.7 * us}),
    "LL128": Protocol("LL128", 120 / 128, {"nvlink": 1.9 * us, "pcie": 2.5 * us, "net": 4.0 * us}),
    "simple": Protocol(
        "simple",
        1.0,
        {
            "nvlink": 3.4 * us,
            "pcie": 5.7 * us,
            "net": 14.0 * us,
            "nvls": 25.0 / 2 * us,
            "collnet": 31.0 / 2 * us,
        },
    ),
}
"""The three NCCL protocols with NCCL's default costs (see the module docstring)."""


def parse_protocol(name: str) -> Protocol:
    """The protocol called ``name`` (case-insensitive).

    >>> parse_protocol("ll128").name
    'LL128'
    >>> parse_protocol("fast")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: unknown protocol 'fast'; valid: LL, LL128, simple
    """
    for key, protocol in PROTOCOLS.items():
        if key.lower() == name.lower():
            return protocol
    raise ConfigError(f"unknown protocol {name!r}; valid: {', '.join(PROTOCOLS)}")
