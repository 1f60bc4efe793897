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
from simcoll.topology._hardware import _MAX_NVLINKS_PER_GPU, HOST, _checked, _times
from simcoll.topology.builders import _add_duplex
from simcoll.topology.schema import LinkAttrs, LinkKind, NodeKind, validate

__all__ = ["from_nvidia_smi"]

_SMI_ATTRIBUTES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_SMI_CELL = re.compile(r"X|NV[1-9]\d*|PIX|PXB|PHB|NODE|SYS|SOC")
_SMI_GPU = re.compile(r"GPU(\d+)")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_SMI_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")
_SAME_SWITCH = ("PIX", "PXB")
_SAME_CPU = ("PIX", "PXB", "PHB", "NODE")


def from_nvidia_smi(
    text: str,
    *,
    nvlink_bandwidth_bytes_per_s: float,
    nvlink_latency_s: float,
    pcie_bandwidth_bytes_per_s: float,
    pcie_latency_s: float,
    cpu_link_bandwidth_bytes_per_s: float,
    cpu_link_latency_s: float,
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
    from one ``"nvsw"`` (``reduces=False``: the matrix does not say the generation; set it
    on H100 and later) by one link of that many links each. Every link but the CPU links
    is PCIe at ``pcie_bandwidth_bytes_per_s``; the matrix gives no PCIe speeds.

    Parameters
    ----------
    text
        The output of ``nvidia-smi topo -m``, tabs or spaces; lines before the header
        (starting ``GPU0``) and the legends after the matrix are allowed.
    nvlink_bandwidth_bytes_per_s
        Bandwidth of one NVLink, per direction (NVLink2 to NVLink4: 25 GB/s).
    nvlink_latency_s
        Latency of every NVLink hop.
    pcie_bandwidth_bytes_per_s
        Bandwidth of every PCIe link, per direction.
    pcie_latency_s
        Latency of every PCIe hop.
    cpu_link_bandwidth_bytes_per_s
        Bandwidth between each pair of CPUs, per direction.
    cpu_link_latency_s
        Latency between each pair of CPUs.
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
        count), a matrix that is not symmetric, X off the diagonal, NV to a NIC, an
        NVSwitch matrix whose GPU pairs are not all NV with one count per GPU, relations
        that contradict each other or the affinities, or a bad argument.
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
    """
    nvlink = _checked(LinkKind.NVLINK, "nvlink", nvlink_bandwidth_bytes_per_s, nvlink_latency_s)
    pcie = _checked(LinkKind.PCIE, "pcie", pcie_bandwidth_bytes_per_s, pcie_latency_s)
    cpu_link = _checked(
        LinkKind.CPU_LINK, "cpu_link", cpu_link_bandwidth_bytes_per_s, cpu_link_latency_s
    )
    if nvswitch is not None and not isinstance(nvswitch, bool):
        raise ConfigError(f"must be True, False or None, got {nvswitch!r}", field="nvswitch")
    matrix = _read_matrix(text)
    graph: nx.DiGraph[str] = nx.DiGraph(name=f"nvidia_smi_{len(matrix.gpus)}")
    ids = matrix.node_ids()
    for label in matrix.gpus:
        rank = int(label[3:])
        graph.add_node(ids[label], kind=NodeKind.GPU, rank=rank, host=HOST, transit=False)
    for label in matrix.nics:
        name = matrix.legend.get(label, label)
        graph.add_node(ids[label], kind=NodeKind.NIC, host=HOST, name=name)
    _smi_nvlinks(graph, matrix, ids, nvlink, nvswitch)
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
    return validate(graph)


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
            if _SMI_CELL.fullmatch(cell) is None:
                raise ConfigError(
                    f"unknown cell {cell!r}; expected X, NV<links>, PIX, PXB, PHB, NODE or SYS",
                    field=f"row {label}, column {column}",
                )
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
        if cell.startswith("NV") and not (a in matrix.gpus and b in matrix.gpus):
            raise ConfigError(f"is {cell}, but NVLink joins GPUs only", field=where)


def _smi_nvlinks(
    graph: nx.DiGraph[str],
    matrix: _Matrix,
    ids: dict[str, str],
    nvlink: LinkAttrs,
    nvswitch: bool | None,
) -> None:
    counts = {(a, b): int(cell[2:]) for a, b, cell in matrix.pairs() if cell.startswith("NV")}
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
    graph.add_node("nvsw", kind=NodeKind.NVSWITCH, host=HOST, reduces=False)
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
