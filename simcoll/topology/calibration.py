"""Calibrated link parameters: what ``simcoll calibrate`` fits and ``--params`` applies.

Measured collectives run below the wire (DESIGN: "a wire is not a GPU"). simcoll keeps the
topology's link bandwidths as the hardware's and models the difference with three kinds of
parameter, each a physical cause that calibration can fit:

- ``efficiency[class]``: the fraction of a link's bandwidth a transfer over links of that
  class turns into data (NCCL's protocol line format, TCP/IP headers, how many channels or
  SMs drive the links). It multiplies the protocol's own data fraction. The classes
  ``nvls`` and ``collnet`` are in-network switches: a further factor on every transfer to
  or from one (the switch reduces and multicasts below its links' rate).
- ``step_latency_s[class]``: a fixed cost every transfer pays on top of its route (kernel
  launch and flag polling, a host thread waking up, a reduction's setup). It adds to the
  protocol's step latency. Over the network only Simple transfers (and runs without a
  protocol) pay it: it is the cost of Simple's flush and fence, which LL and LL128 do not
  do (:func:`pays_step_latency`).
- ``link_latency_s[kind]``: the latency of one link of that kind, replacing the topology
  file's value (an emulated link whose delay could not be applied, a cable longer than the
  spec sheet's).
- ``link_bandwidth_bytes_per_s[kind]``: the bandwidth of every link of that kind, replacing
  the topology file's, where a path moves data below its wire for a reason of its own (PCIe
  peer-to-peer between two CPU sockets: the root complexes forward it at less than the
  socket link carries), as ``simcoll calibrate`` fits it from a ``p2pBandwidthLatencyTest``
  log (:mod:`simcoll.calibrate.p2p_matrix`). The rate is the link's, shared by the flows
  that cross it.
- ``protocol_efficiency[protocol]``: a factor on one NCCL protocol's data fraction (LL,
  LL128, simple), for what a protocol loses beyond its line format (NCCL caps LL and
  LL128 bandwidth per channel, ``llMaxBw`` in ``src/graph/tuning.cc``).
- ``cta_bus_bandwidth_bytes_per_s[algorithm]``: the bus bandwidth (nccl-tests' busbw) one
  CTA on each GPU adds to a call whose SMs, not its links, bound it: NVLS-tree across
  servers (``nvls_tree_2_servers`` on two, ``nvls_tree`` on more), whose warps reduce,
  send and copy every byte a head moves over the network. A call of C CTAs on servers
  of g GPUs moves at most ``C x g x`` this (``NCCL_MIN_CTAS`` raises C). Written by hand
  from NCCL's own caps (``perChMaxNVLSTreeBw``); ``simcoll calibrate`` does not fit it.
- ``launch_s``: a fixed cost per collective call, whatever its size and steps (launching
  the kernels on every GPU, the host thread handing the call to the library).
- ``floor_s``: the least time a call takes, whatever it moves. nccl-tests times calls
  issued back to back, so a call's GPU work overlaps the host issuing the next one, and
  no call completes faster than the host issues them: with one thread driving 8 GPUs
  (``-g 8``) that is about 34 us, which nccl-tests' own 0-byte rows measure. A call
  whose simulated time (with ``launch_s``) is shorter takes ``floor_s``. Measured, not
  fitted (``simcoll calibrate --fit ...,floor_s``: the median of the 0-byte rows); it
  applies to calls timed alone (``predict``, ``compare``), not inside a workload.

Classes are those of :func:`simcoll.core.protocols.link_class` (``nvlink``, ``pcie``, ``net``);
kinds are link kinds (``nvlink``, ``pcie``, ``cpu_link``, ``ib``, ``ethernet``).

>>> cal = Calibration(efficiency={"net": 0.5}, step_latency_s={"net": 1e-5})
>>> proto = cal.protocol(None)
>>> proto.efficiency_of(["ethernet"]), proto.efficiency_of(["nvlink"])
(0.5, 1.0)
>>> proto.latency_s(["ethernet"]), proto.latency_s(["nvlink"])
(1e-05, 0.0)
"""

from __future__ import annotations

import math
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.core.files import TOO_DEEP, check_nesting, read_input_text, write_output
from simcoll.core.protocols import Protocol, link_class
from simcoll.core.shipped import data_root
from simcoll.topology.schema import LinkKind

__all__ = [
    "CTA_BOUND_ALGORITHMS",
    "ENDPOINT_CLASSES",
    "HARDWARE_FOLDER",
    "LINK_CLASSES",
    "MAX_EFFICIENCY",
    "PARAMS_MARK",
    "Calibration",
    "foreign_parameters",
    "hardware_calibration",
    "hardware_files",
    "pays_step_latency",
    "read_calibration",
    "write_calibration",
]

LINK_CLASSES = ("nvlink", "pcie", "net")
#: The calls whose CTAs bound their rate (``cta_bus_bandwidth_bytes_per_s``): NVLS-tree on
#: two servers and on more.
CTA_BOUND_ALGORITHMS = ("nvls_tree_2_servers", "nvls_tree")
#: In-network switch endpoints (:func:`simcoll.core.protocols.Protocol.latency_s`): an
#: ``efficiency`` of one of these is a factor on transfers to or from such a switch.
ENDPOINT_CLASSES = ("nvls", "collnet")
#: The first line of a params file simcoll writes: only such a file is replaced.
PARAMS_MARK = "# simcoll calibration parameters, written by `simcoll calibrate`."
#: The largest efficiency: a transfer moves at most its link's bandwidth of data.
MAX_EFFICIENCY = 1.0
#: The smallest: a link a thousand times slower than its wire is a broken link, not a
#: calibration (1e-300 made every time a 300-digit number: issue 29).
MIN_EFFICIENCY = 1e-3
#: The longest time a params file may give (a launch, a floor, a latency): 1 s, a
#: million times NCCL's per-call cost (1e300 s was accepted: issue 29).
MAX_PARAM_S = 1.0
_LINK_KINDS = tuple(kind.value for kind in LinkKind)
PROTOCOL_NAMES = ("LL", "LL128", "simple")
_CALL_KEYS = ("launch_s", "floor_s")  # per call, not per section
_SECTIONS = {
    "efficiency": LINK_CLASSES + ENDPOINT_CLASSES,
    "protocol_efficiency": PROTOCOL_NAMES,
    "step_latency_s": LINK_CLASSES,
    "link_latency_s": _LINK_KINDS,
    "link_bandwidth_bytes_per_s": _LINK_KINDS,
    "cta_bus_bandwidth_bytes_per_s": CTA_BOUND_ALGORITHMS,
}
#: The sections a params file holds only where they are set.
_WRITTEN_WHERE_SET = ("link_bandwidth_bytes_per_s", "cta_bus_bandwidth_bytes_per_s")
#: The sections of per-kind values (not per class).
_PER_KIND = ("link_latency_s", "link_bandwidth_bytes_per_s")
#: The largest link bandwidth a params file may give: a petabyte per second, some 1,000
#: times an NVLink 5 GPU's.
MAX_BANDWIDTH_BYTES_PER_S = 1e15


@dataclass(frozen=True)
class Calibration:
    """Fitted parameters; a class or kind not listed keeps the uncalibrated value."""

    efficiency: Mapping[str, float] = field(default_factory=dict)
    step_latency_s: Mapping[str, float] = field(default_factory=dict)
    link_latency_s: Mapping[str, float] = field(default_factory=dict)
    link_bandwidth_bytes_per_s: Mapping[str, float] = field(default_factory=dict)
    protocol_efficiency: Mapping[str, float] = field(default_factory=dict)
    cta_bus_bandwidth_bytes_per_s: Mapping[str, float] = field(default_factory=dict)
    launch_s: float = 0.0
    provenance: Mapping[str, Any] = field(default_factory=dict)
    floor_s: float = 0.0
    base: Calibration | None = field(default=None, compare=False)  # the base files', merged above

    def __post_init__(self) -> None:
        for section, valid in _SECTIONS.items():
            for key, value in getattr(self, section).items():
                _check(section, key, value, valid)
        _check("call", "launch_s", self.launch_s, ("launch_s",))
        _check("call", "floor_s", self.floor_s, ("floor_s",))

    def protocol(self, base: Protocol | None) -> Protocol:
        """``base`` (or the bare links, for None) with these efficiencies and latencies.

        >>> from simcoll.core.protocols import PROTOCOLS
        >>> p = Calibration(efficiency={"nvlink": 0.8}).protocol(PROTOCOLS["LL"])
        >>> p.name, p.efficiency_of(["nvlink"]), p.efficiency_of(["pcie"])
        ('LL', 0.4, 0.5)
        """
        name = base.name if base else "none"
        efficiency = (base.efficiency if base else 1.0) * self.protocol_efficiency.get(name, 1.0)
        bare = dict.fromkeys(LINK_CLASSES + ENDPOINT_CLASSES, 0.0)
        step = dict(base.step_latency_s) if base else bare
        for cls, extra_s in self.step_latency_s.items():
            if pays_step_latency(name, cls):
                step[cls] = step.get(cls, 0.0) + extra_s
        by_class = {cls: efficiency * e for cls, e in self.efficiency.items()
                    if cls in LINK_CLASSES}  # fmt: skip
        by_endpoint = {cls: e for cls, e in self.efficiency.items() if cls in ENDPOINT_CLASSES}
        return Protocol(name, efficiency, step, by_class, by_endpoint)

    def apply(self, topology: nx.DiGraph[str]) -> nx.DiGraph[str]:
        """A copy of ``topology`` whose links of calibrated kinds have the fitted latency
        and bandwidth.

        >>> from simcoll.topology import switch_star
        >>> star = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
        >>> g = Calibration(link_bandwidth_bytes_per_s={"nvlink": 5e8}).apply(star)
        >>> sorted({a["bandwidth_bytes_per_s"] for _, _, a in g.edges(data=True)})
        [500000000.0]
        """
        if not self.link_latency_s and not self.link_bandwidth_bytes_per_s:
            return topology
        graph = topology.copy()
        for _, _, attrs in graph.edges(data=True):
            kind = attrs["kind"].value
            if kind in self.link_latency_s:
                attrs["latency_s"] = self.link_latency_s[kind]
            if kind in self.link_bandwidth_bytes_per_s:
                attrs["bandwidth_bytes_per_s"] = self.link_bandwidth_bytes_per_s[kind]
        return graph

    @property
    def values(self) -> dict[str, float]:
        """Every parameter as ``section.key``: the names the fit and the TOML use.

        >>> Calibration(efficiency={"net": 0.9}, link_latency_s={"ethernet": 2e-5}).values
        {'efficiency.net': 0.9, 'link_latency_s.ethernet': 2e-05}
        """
        values = {
            f"{section}.{key}": float(value)
            for section in _SECTIONS
            for key, value in getattr(self, section).items()
        }
        if self.launch_s:
            values["launch_s"] = self.launch_s
        if self.floor_s:
            values["floor_s"] = self.floor_s
        return values

    @classmethod
    def from_values(
        cls, values: Mapping[str, float], provenance: Mapping[str, Any] | None = None
    ) -> Calibration:
        """The inverse of :attr:`values`."""
        sections: dict[str, dict[str, float]] = {section: {} for section in _SECTIONS}
        for name, value in values.items():
            if name not in _CALL_KEYS:
                section, _, key = name.partition(".")
                sections[section][key] = float(value)
        return cls(
            efficiency=sections["efficiency"],
            step_latency_s=sections["step_latency_s"],
            link_latency_s=sections["link_latency_s"],
            link_bandwidth_bytes_per_s=sections["link_bandwidth_bytes_per_s"],
            protocol_efficiency=sections["protocol_efficiency"],
            cta_bus_bandwidth_bytes_per_s=sections["cta_bus_bandwidth_bytes_per_s"],
            launch_s=float(values.get("launch_s", 0.0)),
            floor_s=float(values.get("floor_s", 0.0)),
            provenance=dict(provenance or {}),
        )


def foreign_parameters(calibration: Calibration, topology: nx.DiGraph[str]) -> list[str]:
    """The calibration's per-link parameters, where none of them applies to a link of
    ``topology`` (a params file of another machine: an RTX 4090's ``efficiency.pcie`` on
    an NVLink-only DGX H100 leaves every link bare); else ``[]``.

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)  # NVLink
    >>> foreign_parameters(Calibration(efficiency={"pcie": 0.5}), star)
    ['efficiency.pcie']
    >>> foreign_parameters(Calibration(efficiency={"pcie": 0.5, "nvlink": 0.9}), star)
    []
    """
    kinds = {attrs["kind"].value for _, _, attrs in topology.edges(data=True)}
    classes = {link_class([kind]) for kind in kinds}
    per_link = [(f"{section}.{key}", key in (kinds if section in _PER_KIND else classes))
                for section in ("efficiency", "step_latency_s", *_PER_KIND)
                for key in getattr(calibration, section)]  # fmt: skip
    if not per_link or any(applies for _, applies in per_link):
        return []
    return [name for name, _ in per_link]


def pays_step_latency(protocol: str, cls: str) -> bool:
    """Whether a transfer of ``protocol`` over links of class ``cls`` pays the fitted
    ``step_latency_s[cls]``: all do, except LL and LL128 over the network.

    A network receive with Simple ends with a flush of the GPUDirect RDMA write and a
    flag after a fence (NCCL's net transport flushes Simple receives only; ``tuning.cc``
    adds the inter-node latency a second time for Simple, "the flush extra latency").
    LL and LL128 carry their flags inside the data lines and do neither, so the extra
    fitted on large Simple transfers across servers is not theirs: a 2-server tree/LL
    all-reduce of 1 KiB paid it on every network hop, 2-3x the measured 25-35 us (issue 32).

    >>> pays_step_latency("LL", "net"), pays_step_latency("LL", "nvlink")
    (False, True)
    >>> pays_step_latency("simple", "net"), pays_step_latency("none", "net")
    (True, True)
    """
    return not (cls == "net" and protocol in ("LL", "LL128"))


def _check(section: str, key: str, value: object, valid: tuple[str, ...]) -> None:
    where = key if section == "call" else f"{section}.{key}"
    if key not in valid:
        raise ConfigError(f"unknown key; valid: {', '.join(valid)}", field=where)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a finite number, got {value!r}", field=where)
    if isinstance(value, int) and abs(value) > sys.float_info.max:  # 10**400: no float
        raise ConfigError(f"must be a finite number, got an integer of {len(str(value))} digits",
                          field=where)  # fmt: skip
    if not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {value!r}", field=where)
    if section.endswith("efficiency") and not MIN_EFFICIENCY <= value <= MAX_EFFICIENCY:
        raise ConfigError(
            f"must be in [{MIN_EFFICIENCY:g}, {MAX_EFFICIENCY:g}], got {value!r}: an efficiency "
            "is the fraction of a link's bandwidth that carries data, and no transfer beats "
            "its wire",
            field=where,
        )
    if section.endswith("bandwidth_bytes_per_s"):
        if not 0 < value <= MAX_BANDWIDTH_BYTES_PER_S:
            raise ConfigError(f"must be a bandwidth in (0, {MAX_BANDWIDTH_BYTES_PER_S:g}] bytes/s, "
                              f"got {value!r}", field=where)  # fmt: skip
        return
    if not section.endswith("efficiency") and not 0 <= value <= MAX_PARAM_S:
        raise ConfigError(f"must be a time in [0, {MAX_PARAM_S:g}] s, got {value!r}",
                          field=where)  # fmt: skip


def read_calibration(path: str | Path, *, _seen: tuple[str, ...] = ()) -> Calibration:
    """Read a params TOML written by :func:`write_calibration` (or by hand).

    ``base`` (a path or a list of paths, relative to the file) names the parameters of
    the hardware the file builds on (a GPU and its NVLink, a NIC): theirs are taken first
    and the file's own override them, so every topology built from the same hardware gets
    the same intra-node numbers. :attr:`Calibration.base` keeps them (what a fit on top
    holds fixed).

    Raises
    ------
    ConfigError
        Naming the file and field: a missing file, bad TOML, an unknown section or key,
        a value that is not a number or out of range.
    """
    source = str(path)
    text = read_input_text(path, missing="no such params file")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"not valid TOML: {error}", source=source) from None
    except ValueError as error:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ConfigError(f"not valid TOML: {str(error).split(';')[0]}", source=source) from None
    except RecursionError:
        raise ConfigError(TOO_DEEP, source=source) from None
    check_nesting(document, source=source)
    known = {"schema", "base", *_CALL_KEYS, "fit", "residuals", *_SECTIONS}
    for name in document:
        if name not in known:
            raise ConfigError(f"unknown section; valid: {', '.join(sorted(known))}",
                              source=source, field=name)  # fmt: skip
    sections: dict[str, dict[str, float]] = {}
    for section in _SECTIONS:
        table = document.get(section, {})
        if not isinstance(table, dict):
            raise ConfigError("must be a table of numbers", source=source, field=section)
        sections[section] = table
    provenance = document.get("fit", {})
    if not isinstance(provenance, dict):
        raise ConfigError("must be a table", source=source, field="fit")
    try:
        own = Calibration(
            efficiency=sections["efficiency"],
            step_latency_s=sections["step_latency_s"],
            link_latency_s=sections["link_latency_s"],
            link_bandwidth_bytes_per_s=sections["link_bandwidth_bytes_per_s"],
            protocol_efficiency=sections["protocol_efficiency"],
            cta_bus_bandwidth_bytes_per_s=sections["cta_bus_bandwidth_bytes_per_s"],
            launch_s=document.get("launch_s", 0.0),
            floor_s=document.get("floor_s", 0.0),
            provenance=provenance,
        )
    except ConfigError as error:
        raise error.located(source=source) from None
    held = _bases(document.get("base", []), Path(path), source, _seen)
    if held is None:
        return own
    values = {**held.values, **own.values}
    for key in _CALL_KEYS:  # a call key the file leaves out (0) is the base's
        if key not in document and key in held.values:
            values[key] = held.values[key]
    return replace(Calibration.from_values(values, provenance), base=held)


#: How deep ``base`` files may nest (a file's base's base...).
MAX_BASE_DEPTH = 4

#: The hardware parameter files (a GPU and its NVLink, the host that launches its calls),
#: in the shipped data (:func:`simcoll.core.shipped.data_root`): the ``base`` of the shipped
#: machines' files, and the calibration of an imported machine of that hardware.
HARDWARE_FOLDER = Path("topologies", "calibration", "hardware")


def hardware_calibration(name: str) -> tuple[Calibration, Path]:
    """The hardware parameter file ``name`` (in :data:`HARDWARE_FOLDER`), read, and its
    path: what a machine imported from an NCCL or ``nvidia-smi`` dump is calibrated with
    where its GPUs' model has that file (its ``graph["hardware_params"]``), as a shipped
    topology file is with the file its ``calibration`` key names.

    >>> calibration, path = hardware_calibration("h100-sxm-nvlink4.params.toml")
    >>> path.parent.name, calibration.efficiency["nvls"], calibration.launch_s
    ('hardware', 0.796875, 6.8e-06)

    Raises
    ------
    ConfigError
        Naming the file, where it is missing or not a params file; naming
        ``hardware_params`` where ``name`` is not a file name in that folder.
    """
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ConfigError(f"must name a file of {HARDWARE_FOLDER}/, got {name!r}",
                          field="hardware_params")  # fmt: skip
    path = data_root() / HARDWARE_FOLDER / name
    return read_calibration(path), path


def hardware_files() -> list[Path]:
    """Every hardware parameter file (:data:`HARDWARE_FOLDER`), in name order: the files an
    imported machine's calibration may be read from."""
    return sorted((data_root() / HARDWARE_FOLDER).glob("*.params.toml"))


def _bases(named: object, path: Path, source: str, seen: tuple[str, ...]) -> Calibration | None:
    """The parameters of the files ``base`` names (relative to ``path``'s folder), later
    ones overriding earlier ones; None where it names none."""
    names = [named] if isinstance(named, str) else named
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError("must be a params file's path or a list of them", source=source,
                          field="base")  # fmt: skip
    if not names:
        return None
    if len(seen) >= MAX_BASE_DEPTH:
        raise ConfigError(f"bases nest more than {MAX_BASE_DEPTH} deep ({' -> '.join(seen)})",
                          source=source, field="base")  # fmt: skip
    values: dict[str, float] = {}
    files = []
    for name in names:
        file = path.parent / name
        if str(file.resolve()) in seen:
            raise ConfigError(f"{name} is its own base ({' -> '.join(seen)})", source=source,
                              field="base")  # fmt: skip
        try:
            values.update(read_calibration(file, _seen=(*seen, str(file.resolve()))).values)
        except ConfigError as error:
            raise ConfigError(f"{name}: {error.message}", source=source,
                              field="base") from None  # fmt: skip
        files.append(name)
    return Calibration.from_values(values, {"files": files})


def write_calibration(
    path: str | Path,
    calibration: Calibration,
    residuals: list[dict[str, Any]] | None = None,
    *,
    base: Sequence[str] = (),
) -> Path:
    """Write ``calibration`` (with its provenance and residuals) as a params TOML.

    ``base``: the params files (relative to ``path``) it builds on, written as its
    ``base``. The file is written whole; an existing file is replaced only if simcoll wrote it
    (its first line is :data:`PARAMS_MARK`), see :func:`simcoll.core.files.write_output`.
    """
    lines = [
        PARAMS_MARK,
        "# efficiency: data fraction of the wire per link class (x the protocol's own);",
        "# step_latency_s: added to every transfer over that class (not LL, LL128 over net), s;",
        "# link_latency_s: replaces the topology's latency of every link of that kind, seconds;",
        *(
            ["# link_bandwidth_bytes_per_s: replaces the bandwidth of every link of that kind;"]
            if calibration.link_bandwidth_bytes_per_s
            else []
        ),
        *(
            ["# cta_bus_bandwidth_bytes_per_s: busbw one CTA per GPU adds to an SM-bound call;"]
            if calibration.cta_bus_bandwidth_bytes_per_s
            else []
        ),
        "# protocol_efficiency: factor on an NCCL protocol's data fraction;",
        "# launch_s: added once to every collective call, seconds;",
        "# floor_s: the least time of a call timed back to back (0-byte calls), seconds.",
        "schema = 1",
        *(
            [
                f"base = {_toml(list(base))}  # the hardware this builds on: its parameters, "
                "then these"
            ]
            if base
            else []
        ),
        *(
            [f"launch_s = {_toml(float(calibration.launch_s))}"]
            if calibration.launch_s or not base
            else []
        ),  # with a base, 0 is the base's
        *([f"floor_s = {_toml(float(calibration.floor_s))}"] if calibration.floor_s else []),
        "",
    ]
    for section in _SECTIONS:
        if section in _WRITTEN_WHERE_SET and not getattr(calibration, section):
            continue  # written where set: every other params file stays as it was
        lines.append(f"[{section}]")
        lines += [f"{key} = {_toml(value)}" for key, value in getattr(calibration, section).items()]
        lines.append("")
    lines.append("[fit]")
    lines += [f"{key} = {_toml(value)}" for key, value in calibration.provenance.items()]
    for row in residuals or []:
        lines += ["", "[[residuals]]"]
        lines += [f"{key} = {_toml(value)}" for key, value in row.items()]
    return write_output(path, "\n".join(lines) + "\n", mark=PARAMS_MARK.encode())


def _toml(value: Any) -> str:
    """One TOML value: strings quoted, numbers exact, lists of those.

    >>> import numpy as np
    >>> _toml(["a", 1, 2.5e-05, True, np.float64(0.5)])
    '["a", 1, 2.5e-05, true, 0.5]'
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):  # numpy floats too: written as plain TOML floats
        return repr(float(value)) if math.isfinite(value) else '"nan"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'
