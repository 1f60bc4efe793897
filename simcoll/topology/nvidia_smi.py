"""The matrix ``nvidia-smi topo -m`` prints, as a simcoll topology.

See :mod:`simcoll.topology.importers` for the sources of the format.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from dataclasses import dataclass

import networkx as nx

from simcoll.core.errors import ConfigError
from simcoll.topology._hardware import (
    _MAX_NVLINKS_PER_GPU,
    GPU_MODELS,
    HOST,
    MAX_NVLINK_COUNT,
    GpuModel,
    GpuName,
    _checked,
    _times,
    hardware_attributes,
    known_models,
)
from simcoll.topology.builders import _add_duplex, _check_number
from simcoll.topology.schema import LinkAttrs, LinkKind, NodeKind, validate

__all__ = ["from_nvidia_smi"]

_SMI_ATTRIBUTES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_SMI_CELL = re.compile(r"X|NV[1-9]\d*|PIX|PXB|PHB|NODE|SYS|SOC")
_SMI_GPU = re.compile(r"GPU(\d+)")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_SMI_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")
_SAME_SWITCH = ("PIX", "PXB")
#: Devices (GPUs and NICs) one matrix may list: ``nvidia-smi topo -m`` prints one host's,
#: 8 to 16 GPUs and as many NICs today; 1,024 is 32 times that. Reading costs the square:
#: 3,000 devices (9 million cells, about what a 64 MiB input holds) took 32 s and 2.4 GB
#: before a byte was simulated (issue 41); 1,024 take about 3 s.
MAX_SMI_DEVICES = 1024
_SAME_CPU = ("PIX", "PXB", "PHB", "NODE")


def from_nvidia_smi(
    text: str,
    *,
    pcie_latency_s: float,
    cpu_link_bandwidth_bytes_per_s: float,
    cpu_link_latency_s: float,
    gpu: GpuName | None = None,
    nvlink_bandwidth_bytes_per_s: float | None = None,
    nvlink_latency_s: float | None = None,
    pcie_bandwidth_bytes_per_s: float | None = None,
    nvswitch: bool | None = None,
) -> nx.DiGraph[str]:
    r"""Build the machine the matrix of ``nvidia-smi topo -m`` describes.

    ::

                GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity
        GPU0     X      NV4     PIX     0-31            0
        GPU1    NV4      X      PHB     0-31            0
        NIC0    PIX     PHB      X

    Row ``GPU<k>`` is ``"gpu<k>"`` (rank k); each NIC column, in order, is
    ``"nic<j>"`` (named after the ``NIC Legend`` or its column). A cell says how two
    devices are joined: ``NV<n>`` is one duplex ``NVLINK`` link of n x
    ``nvlink_bandwidth_bytes_per_s``; the others give the PCIe tree, inferred so:

    - devices related by ``PIX`` or ``PXB`` share a PCIe switch ``"pcie<j>"`` (numbered in
      order of their first device; a chain of switches, PXB, is flattened to one);
      a device with no such partner hangs from its CPU directly;
    - ``PIX``, ``PXB``, ``PHB`` and ``NODE`` put both devices under one CPU, ``SYS``
      (``SOC`` in old drivers) under two. The CPU is ``"cpu<numa>"`` from the ``NUMA
      Affinity`` column; without it, GPUs with the same ``CPU Affinity`` share a CPU
      (numbered ``"cpu0"``... in order) unless the cells contradict it (VMs often give
      every GPU the same CPUs), when the cells alone decide. A group of devices joined
      by those cells none of whose GPUs gives an affinity joins the first CPU it has no
      SYS cell to, or else takes the next free number.

    NV hides the PCIe relation of a GPU pair, so GPUs joined by NVLink are only placed
    on one switch through a third device (a NIC) that is PIX to both. Behind an NVSwitch,
    nvidia-smi shows every GPU pair as NV<all of the GPU's links>: the GPUs then hang
    from one ``"nvsw"`` by one link of that many links each; it ``reduces`` (NVLink
    SHARP) where the ``gpu`` model's NVSwitch boards do (H100 and later). Every link but
    the CPU links is PCIe at ``pcie_bandwidth_bytes_per_s``; the matrix gives no PCIe
    speeds.

    The matrix does not name the GPUs' model: ``gpu`` does. The model gives what is not
    given here (its NVLink's bandwidth and latency, its PCIe host interface), and the
    machine carries its data sheet, name and hardware parameter file as
    :func:`~simcoll.topology.nccl_xml.from_nccl_xml` describes (``graph["hardware"]``,
    ``graph["hardware_params"]``...); without it, ``graph["hardware_note"]`` says so.

    Parameters
    ----------
    text
        The output of ``nvidia-smi topo -m``, tabs or spaces; lines before the header
        (starting ``GPU0``) and the legends after the matrix are allowed.
    pcie_latency_s
        Latency of every PCIe hop.
    cpu_link_bandwidth_bytes_per_s
        Bandwidth between each pair of CPUs, per direction.
    cpu_link_latency_s
        Latency between each pair of CPUs.
    gpu
        The GPUs' model (:class:`~simcoll.topology._hardware.GpuName`).
    nvlink_bandwidth_bytes_per_s
        Bandwidth of one NVLink, per direction (NVLink2 to NVLink4: 25 GB/s); by default
        the ``gpu`` model's, needed where the matrix has NV cells and no ``gpu``.
    nvlink_latency_s
        Latency of every NVLink hop; by default the ``gpu`` model's.
    pcie_bandwidth_bytes_per_s
        Bandwidth of every PCIe link, per direction; by default the ``gpu`` model's host
        interface, needed without one.
    nvswitch
        Whether the GPUs' NVLinks go through an NVSwitch. ``None`` decides from the
        matrix: yes when a GPU's NV counts add up to more than 18 (no GPU has more
        links), which tells the NV18 of a DGX H100 from the NV2 mesh of four V100s.

    Returns
    -------
    networkx.DiGraph
        The validated machine; ``graph.graph["name"]`` is ``"nvidia_smi_<n_gpus>"``.

    Raises
    ------
    ConfigError
        On one line naming the row and column (``row GPU1, column GPU3``): no header, a
        row of the wrong length or not in the header, an unknown cell (``NV`` without a
        count, or more than :data:`~simcoll.topology._hardware.MAX_NVLINK_COUNT` links), a
        matrix that is not symmetric, X off the diagonal, NV to a NIC, an NVSwitch matrix
        whose GPU pairs are not all NV with one count per GPU, relations that contradict
        each other or the affinities, a value neither given nor known from ``gpu``, or a
        bad argument.
    TopologyError
        If the machine breaks the schema, e.g. GPU labels leave a gap.

    Examples
    --------
    >>> from simcoll.core.units import GB, us
    >>> text = '''
    ...         GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity
    ... GPU0     X      NV4     PIX     0-31            0
    ... GPU1    NV4      X      PHB     0-31            0
    ... NIC0    PIX     PHB      X
    ... '''
    >>> g = from_nvidia_smi(
    ...     text, nvlink_bandwidth_bytes_per_s=25 * GB, nvlink_latency_s=0.7 * us,
    ...     pcie_bandwidth_bytes_per_s=31.5 * GB, pcie_latency_s=1 * us,
    ...     cpu_link_bandwidth_bytes_per_s=64 * GB, cpu_link_latency_s=1 * us,
    ... )
    >>> sorted(g.nodes), g.edges["gpu0", "gpu1"]["bandwidth_bytes_per_s"]
    (['cpu0', 'gpu0', 'gpu1', 'nic0', 'pcie0'], 100000000000.0)
    >>> sorted(g.successors("pcie0")), sorted(g.successors("gpu1"))
    (['cpu0', 'gpu0', 'nic0'], ['cpu0', 'gpu0'])
    >>> g.graph["hardware_note"][:55]  # no gpu: no hardware parameters
    "nvidia-smi topo -m does not name the GPUs' model (gpu=N"
    """
    if gpu is not None and not isinstance(gpu, GpuName):
        raise ConfigError(f"must be a GpuName ({known_models()}), got {gpu!r}", field="gpu")
    model = GPU_MODELS[gpu] if gpu is not None else None
    unknown = ("nvidia-smi topo -m does not name the GPUs' model (gpu=NAME names it: "
               f"{known_models()})")  # fmt: skip
    if pcie_bandwidth_bytes_per_s is None and model is not None:
        pcie_bandwidth_bytes_per_s = model.pcie_bandwidth_bytes_per_s
    if pcie_bandwidth_bytes_per_s is None:
        what = f"simcoll knows no host interface of the {model.spec.name}" if model else unknown
        raise ConfigError(f"missing: the matrix gives no PCIe speed, and {what}",
                          field="pcie_bandwidth_bytes_per_s")  # fmt: skip
    pcie = _checked(LinkKind.PCIE, "pcie", pcie_bandwidth_bytes_per_s, pcie_latency_s)
    cpu_link = _checked(
        LinkKind.CPU_LINK, "cpu_link", cpu_link_bandwidth_bytes_per_s, cpu_link_latency_s
    )
    if nvswitch is not None and not isinstance(nvswitch, bool):
        raise ConfigError(f"must be True, False or None, got {nvswitch!r}", field="nvswitch")
    matrix = _read_matrix(text)
    nvlink = _nvlink(matrix, model, unknown, nvlink_bandwidth_bytes_per_s, nvlink_latency_s)
    graph: nx.DiGraph[str] = nx.DiGraph(name=f"nvidia_smi_{len(matrix.gpus)}")
    ids = matrix.node_ids()
    for label in matrix.gpus:
        rank = int(label[3:])
        graph.add_node(ids[label], kind=NodeKind.GPU, rank=rank, host=HOST, transit=False)
    for label in matrix.nics:
        name = matrix.legend.get(label, label)
        graph.add_node(ids[label], kind=NodeKind.NIC, host=HOST, name=name)
    reduces = bool(model and model.nvswitch_reduces)
    _smi_nvlinks(graph, matrix, ids, nvlink, nvswitch, reduces=reduces)
    cpu_of = _smi_cpus(matrix)
    groups = _smi_switch_groups(matrix)
    for j, group in enumerate(groups):
        graph.add_node(f"pcie{j}", kind=NodeKind.PCIE_SWITCH, host=HOST)
        _add_duplex(graph, f"pcie{j}", cpu_of[group[0]], pcie)
        for label in group:
            _add_duplex(graph, ids[label], f"pcie{j}", pcie)
    switched = {label for group in groups for label in group}
    for label in matrix.labels:
        if label not in switched:
            _add_duplex(graph, ids[label], cpu_of[label], pcie)
    cpus = sorted(set(cpu_of.values()), key=lambda cpu: int(cpu[3:]))
    graph.add_nodes_from((cpu, {"kind": NodeKind.CPU, "host": HOST}) for cpu in cpus)
    for a, b in itertools.combinations(cpus, 2):
        _add_duplex(graph, a, b, cpu_link)
    graph.graph.update(hardware_attributes(gpu, unknown))
    return validate(graph)


def _nvlink(
    matrix: _Matrix,
    model: GpuModel | None,
    unknown: str,
    bandwidth_bytes_per_s: float | None,
    latency_s: float | None,
) -> LinkAttrs | None:
    """One NVLink: as given, else the model's; None where the matrix has no NV cell."""
    if bandwidth_bytes_per_s is not None:
        _check_number(bandwidth_bytes_per_s, "nvlink_bandwidth_bytes_per_s", "bytes/s",
                      zero_ok=False)  # fmt: skip
    if latency_s is not None:
        _check_number(latency_s, "nvlink_latency_s", "s", zero_ok=True)
    if not any(cell.startswith("NV") for _, _, cell in matrix.pairs()):
        return None
    if model is not None and not model.nvlinks:
        raise ConfigError(f"the {model.spec.name} has no NVLink, but the matrix has NV cells",
                          field="gpu")  # fmt: skip
    if model is not None:
        if bandwidth_bytes_per_s is None:
            bandwidth_bytes_per_s = model.nvlink_bandwidth_bytes_per_s
        if latency_s is None:
            latency_s = model.nvlink_latency_s
    if bandwidth_bytes_per_s is None:
        raise ConfigError(f"missing: the matrix has NVLinks, and {unknown}",
                          field="nvlink_bandwidth_bytes_per_s")  # fmt: skip
    if latency_s is None:
        raise ConfigError(f"missing: the matrix has NVLinks, and {unknown}",
                          field="nvlink_latency_s")  # fmt: skip
    return _checked(LinkKind.NVLINK, "nvlink", bandwidth_bytes_per_s, latency_s)


@dataclass
class _Matrix:
    """The cells of ``nvidia-smi topo -m``, by (row label, column label)."""

    labels: list[str]
    cells: dict[tuple[str, str], str]
    affinity: dict[str, dict[str, str]]  # GPU label -> {"NUMA Affinity": "0", ...}
    legend: dict[str, str]

    @property
    def gpus(self) -> list[str]:
        return [label for label in self.labels if _SMI_GPU.fullmatch(label)]

    @property
    def nics(self) -> list[str]:
        return [label for label in self.labels if not _SMI_GPU.fullmatch(label)]

    def node_ids(self) -> dict[str, str]:
        ids = {label: f"gpu{label[3:]}" for label in self.gpus}
        ids.update((label, f"nic{j}") for j, label in enumerate(self.nics))
        return ids

    def pairs(self) -> list[tuple[str, str, str]]:
        """Every unordered pair (a, b) in column order, with its cell."""
        return [(a, b, self.cells[a, b]) for a, b in itertools.combinations(self.labels, 2)]


def _read_matrix(text: str) -> _Matrix:
    # nvidia-smi underlines the header with terminal escapes (ESC[4m ... ESC[0m).
    lines = _ANSI_ESCAPE.sub("", text.removeprefix("\ufeff")).splitlines()
    start = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if start is None:
        raise ConfigError(
            "no matrix: expected a header line of columns GPU0, GPU1, ... as "
            "`nvidia-smi topo -m` prints it"
        )
    labels, columns = _read_header(lines[start].split())
    if len(labels) > MAX_SMI_DEVICES:
        raise ConfigError(
            f"lists {len(labels)} devices; one host's matrix has at most {MAX_SMI_DEVICES} "
            "(simcoll.topology.nvidia_smi.MAX_SMI_DEVICES)",
            field="header",
        )
    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        tokens = line.split()
        if not tokens or tokens[0] == "Legend:":
            break
        label, values = tokens[0], tokens[1:]
        if label not in labels:
            raise ConfigError(
                f"is not a column of the header ({', '.join(labels)})", field=f"row {label}"
            )
        if label in affinity or (label, label) in cells:
            raise ConfigError("appears twice", field=f"row {label}")
        is_gpu = _SMI_GPU.fullmatch(label) is not None
        if len(values) != len(labels) + len(columns) and (is_gpu or len(values) != len(labels)):
            expected = f"{len(labels)} cells ({labels[0]}..{labels[-1]})"
            if columns and is_gpu:
                expected += f" then {', '.join(columns)}"
            raise ConfigError(
                f"has {len(values)} values, expected {expected}", field=f"row {label}"
            )
        for column, cell in zip(labels, values, strict=False):
            _check_cell(cell, f"row {label}, column {column}")
            cells[label, column] = "SYS" if cell == "SOC" else cell
        if is_gpu:
            affinity[label] = dict(zip(columns, values[len(labels) :], strict=True))
    legend = {}
    for line in lines[start + 1 :]:
        match = _SMI_LEGEND.fullmatch(line)
        if match:
            legend[match[1]] = match[2]
    matrix = _Matrix(labels, cells, affinity, legend)
    _check_matrix(matrix)
    return matrix


def _check_cell(cell: str, field: str) -> None:
    """Refuse a cell that is not X, NV<links> (of at most MAX_NVLINK_COUNT links) or a PCIe
    relation."""
    if _SMI_CELL.fullmatch(cell) is None:
        raise ConfigError(
            f"unknown cell {cell!r}; expected X, NV<links>, PIX, PXB, PHB, NODE or SYS",
            field=field,
        )
    if cell.startswith("NV") and (len(cell) > 8 or int(cell[2:]) > MAX_NVLINK_COUNT):
        shown = cell if len(cell) <= 16 else f"{cell[:12]}... ({len(cell) - 2} digits)"
        raise ConfigError(
            f"{shown} is more NVLinks than a GPU has: at most {MAX_NVLINK_COUNT} "
            "(simcoll.topology._hardware.MAX_NVLINK_COUNT; 18 on an H100 or B200)",
            field=field,
        )


def _read_header(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Split the header into device labels and the affinity columns after them."""
    labels: list[str] = []
    columns: list[str] = []
    i = 0
    while i < len(tokens):
        phrase = next((p for p in _SMI_ATTRIBUTES if _starts(tokens[i:], p)), None)
        if phrase is not None:
            columns.append(phrase)
            i += len(phrase.split())
            continue
        if columns:
            raise ConfigError(
                f"unknown column {tokens[i]!r} after {columns[-1]!r}; expected "
                f"{', '.join(_SMI_ATTRIBUTES)}",
                field="header",
            )
        if tokens[i] in labels:
            raise ConfigError(f"column {tokens[i]} appears twice", field="header")
        labels.append(tokens[i])
        i += 1
    return labels, columns


def _starts(tokens: list[str], phrase: str) -> bool:
    words = phrase.split()
    return tokens[: len(words)] == words


def _check_matrix(matrix: _Matrix) -> None:
    """A row per column, X on the diagonal only, symmetric, NV between GPUs only."""
    for label in matrix.labels:
        if (label, label) not in matrix.cells:
            raise ConfigError("has no row", field=f"column {label}")
    for a in matrix.labels:
        if matrix.cells[a, a] != "X":
            raise ConfigError(
                f"is {matrix.cells[a, a]!r}; the diagonal must be X", field=f"row {a}, column {a}"
            )
    gpus = set(matrix.gpus)  # once: per pair, it made a 600-GPU matrix take 50 s (issue 41)
    for a, b, cell in matrix.pairs():
        back = matrix.cells[b, a]
        where = f"row {b}, column {a}"
        if back != cell:
            raise ConfigError(
                f"is {back} but row {a}, column {b} is {cell}; the matrix must be symmetric",
                field=where,
            )
        if cell == "X":
            raise ConfigError("is X, which marks a device with itself", field=where)
        if cell.startswith("NV") and not (a in gpus and b in gpus):
            raise ConfigError(f"is {cell}, but NVLink joins GPUs only", field=where)


def _smi_nvlinks(
    graph: nx.DiGraph[str],
    matrix: _Matrix,
    ids: dict[str, str],
    nvlink: LinkAttrs | None,
    nvswitch: bool | None,
    *,
    reduces: bool,
) -> None:
    """The NVLinks of the NV cells (``nvlink`` is one link; None where there is none): a
    link per GPU pair, or per GPU to one ``"nvsw"`` behind an NVSwitch (``reduces``: it
    reduces in the switch)."""
    counts = {(a, b): int(cell[2:]) for a, b, cell in matrix.pairs() if cell.startswith("NV")}
    if nvlink is None:
        return
    totals: dict[str, int] = defaultdict(int)
    for (a, b), count in counts.items():
        totals[a] += count
        totals[b] += count
    if nvswitch is None:
        nvswitch = any(total > _MAX_NVLINKS_PER_GPU for total in totals.values())
    if not nvswitch:
        for (a, b), count in counts.items():
            _add_duplex(graph, ids[a], ids[b], _times(nvlink, count))
        return
    graph.add_node("nvsw", kind=NodeKind.NVSWITCH, host=HOST, reduces=reduces)
    for gpu in matrix.gpus:
        links = set()
        for other in matrix.gpus:
            cell = matrix.cells[gpu, other]
            if other != gpu and not cell.startswith("NV"):
                raise ConfigError(
                    f"is {cell}, but behind an NVSwitch every GPU pair shows NV<links>",
                    field=f"row {gpu}, column {other}",
                )
            links.add(cell)
        links.discard("X")
        if len(links) > 1:
            raise ConfigError(
                f"has {', '.join(sorted(links))}; behind an NVSwitch a GPU shows its own "
                "link count to every other GPU",
                field=f"row {gpu}",
            )
        if links:
            _add_duplex(graph, ids[gpu], "nvsw", _times(nvlink, int(links.pop()[2:])))


def _smi_switch_groups(matrix: _Matrix) -> list[list[str]]:
    """Devices sharing a PCIe switch (PIX or PXB), in column order; check consistency."""
    groups = [g for g in _components(matrix, _SAME_SWITCH) if len(g) > 1]
    for group in groups:
        for a, b in itertools.combinations(group, 2):
            cell = matrix.cells[a, b]
            if not cell.startswith("NV") and cell not in _SAME_SWITCH:
                raise ConfigError(
                    f"is {cell}, but PIX/PXB cells put {a} and {b} under one PCIe switch",
                    field=f"row {b}, column {a}",
                )
    return groups


def _smi_cpus(matrix: _Matrix) -> dict[str, str]:
    """The CPU of every device: by NUMA (or CPU) affinity, then by PCIe relations."""
    source, keys = _affinity_keys(matrix)
    if source == "CPU Affinity":
        try:
            return _place_cpus(matrix, source, keys)
        except ConfigError:  # a hint only: VMs often give every GPU the same CPUs
            source, keys = "", {}
    return _place_cpus(matrix, source, keys)


def _place_cpus(matrix: _Matrix, source: str, keys: dict[str, str]) -> dict[str, str]:
    numbered: dict[str, int] = {}
    if source == "NUMA Affinity":
        numbered = {key: int(key) for key in keys.values()}
    else:
        for key in keys.values():
            numbered.setdefault(key, len(numbered))
    members: dict[int, list[str]] = defaultdict(list)
    groups = _components(matrix, _SAME_CPU)
    for group in groups:
        keyed = [(label, keys[label]) for label in group if label in keys]
        for (a, x), (b, y) in itertools.pairwise(keyed):
            if x != y:
                raise ConfigError(
                    f"PCIe cells (PIX, PXB, PHB or NODE) put it on the CPU of {a}, but its "
                    f"{source} is {y} and {a}'s is {x}",
                    field=f"row {b}",
                )
        if keyed:
            members[numbered[keyed[0][1]]].extend(group)
    free = max(numbered.values(), default=-1) + 1
    for group in groups:
        if any(label in keys for label in group):
            continue
        # No affinity: the first CPU it has no SYS cell to, else a new one.
        number = next((n for n in sorted(members) if not _any_sys(matrix, group, members[n])), None)
        if number is None:
            number, free = free, free + 1
        members[number].extend(group)
    cpu_of = {label: f"cpu{n}" for n, group in members.items() for label in group}
    for a, b, cell in matrix.pairs():
        if cell == "SYS" and cpu_of[a] == cpu_of[b]:
            raise ConfigError(
                f"is SYS (across CPUs), but the matrix puts {a} and {b} on {cpu_of[a]}",
                field=f"row {b}, column {a}",
            )
    return cpu_of


def _any_sys(matrix: _Matrix, group: list[str], others: list[str]) -> bool:
    return any(matrix.cells[a, b] == "SYS" for a in group for b in others)


def _affinity_keys(matrix: _Matrix) -> tuple[str, dict[str, str]]:
    """Which column places the GPUs on CPUs, and each GPU's value in it."""
    for column, usable in (
        ("NUMA Affinity", lambda value: re.fullmatch(r"\d+", value) is not None),
        ("CPU Affinity", lambda value: value != "N/A"),
    ):
        values = {gpu: matrix.affinity[gpu].get(column, "N/A") for gpu in matrix.gpus}
        if all(usable(value) for value in values.values()):
            return column, values
    return "", {}


def _components(matrix: _Matrix, relations: tuple[str, ...]) -> list[list[str]]:
    """Devices joined by the given cells, each group in column order, groups in order."""
    joined: nx.Graph[str] = nx.Graph()
    joined.add_nodes_from(matrix.labels)
    joined.add_edges_from((a, b) for a, b, cell in matrix.pairs() if cell in relations)
    order = {label: i for i, label in enumerate(matrix.labels)}
    return [sorted(group, key=order.__getitem__) for group in nx.connected_components(joined)]
