r"""Peer-to-peer rates from CUDA's ``p2pBandwidthLatencyTest``: link parameters fitted on
copies between GPU pairs, to predict the collectives that run over the same links.

The CUDA sample copies between every pair of GPUs, one pair at a time, with P2P off
(staged through host memory) and on, one way and both ways at once, and prints one matrix
per case: the row is the source GPU, the column the destination, the value GB/s (1e9
bytes/s); a bidirectional value is the two directions' sum. Where the GPUs reach each
other by PCIe P2P, a pair's rate is what the PCIe path from root port to root port
moves: on two sockets it is lower across them than inside one, below what the socket link
itself carries (the 8 x RTX 4090 of ``validation/data/public``: 25 GB/s each way inside
a socket, 20.5 across, on links of 31.5 and more).

:func:`fit_p2p` turns a matrix into parameters of a
:class:`~simcoll.topology.calibration.Calibration`:

1. every pair's route on the topology (as a lone flow, it moves at its slowest link's
   bandwidth times its route's efficiency);
2. pairs whose route crosses links of one kind only give that kind's class its
   ``efficiency``: the median of measured over wire rate;
3. pairs that also cross another kind and move slower than step 2 allows (by more than
   :data:`BINDING_TOLERANCE`) give that kind a ``link_bandwidth_bytes_per_s``: the median
   rate at which its links must move the wire bytes for those pairs to be as measured.
   A kind no pair binds is not identifiable and stays as the topology file has it.

Bidirectional matrices are preferred: a collective drives both directions of a link at
once, as they do (each direction moves half the printed value). With P2P on the topology
(``p2p = true``, the default) the ``P2P=Enabled`` matrices are read, else the
``P2P=Disabled`` ones. Only a GPU pair's own copy is measured: nothing here says what two
pairs crossing the same link at once get, which the fitted link's rate, shared by its
flows, assumes.

The files read are the sample's own output (its stdout, as ``tee`` saves it), the CSV
transcription of ``validation/data/public`` (``phase,matrix,src_gpu,dst_gpu,value``, one
phase of one driver per row; a file of several phases must be cut to one), and the output
of NVIDIA's ``nvbandwidth``, whose one-way GPU-to-GPU tests
(``device_to_device_memcpy_{read,write}_{ce,sm}``) are read as P2P=Enabled copies one
way: a write moves the data from the row's GPU to the column's, a read from the column's
to the row's (the tests' code: a read runs on the destination GPU). Its bidirectional and
multi-node tests are not read.

>>> text = '''Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)
...    D\\D     0      1
...      0 900.00  24.00
...      1  24.00 900.00
... Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)
...    D\\D     0      1
...      0 905.00  50.00
...      1  50.00 905.00
... '''
>>> m = parse_p2p_log(text, source="p2p.txt")
>>> [title.split(" Bandwidth")[0] for title in sorted(m.matrices)], m.n_gpus
(['Bidirectional P2P=Enabled', 'Unidirectional P2P=Enabled'], 2)
>>> from simcoll.topology import switch_star
>>> star = switch_star(2, link_bandwidth_bytes_per_s=50e9, link_latency_s=1e-6)
>>> fitted = fit_p2p(star, m)
>>> fitted.efficiency  # 25 GB/s each way over 50 GB/s NVLink
{'nvlink': 0.5}
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.core.errors import ConfigError
from simcoll.core.files import read_input_text
from simcoll.core.protocols import link_class
from simcoll.plan.placement import map_ranks
from simcoll.topology import Router
from simcoll.topology.calibration import MAX_EFFICIENCY, MIN_EFFICIENCY
from simcoll.topology.schema import gpu_nodes

__all__ = [
    "BINDING_TOLERANCE",
    "CSV_HEADER",
    "NVBANDWIDTH_TESTS",
    "P2PFit",
    "P2PMatrices",
    "PairRate",
    "fit_p2p",
    "is_p2p_log",
    "parse_p2p_log",
    "read_p2p_matrices",
]

FloatArray = npt.NDArray[np.float64]

#: A pair slower than its route's fitted efficiency allows by more than this fraction is
#: held back by another kind of link on its route (the matrices' own spread between pairs
#: of one kind is 1-3 %).
BINDING_TOLERANCE = 0.05
#: The header of the CSV transcription (``validation/data/public``).
CSV_HEADER = ("phase", "matrix", "src_gpu", "dst_gpu", "value")
#: nvbandwidth's one-way GPU-to-GPU tests, the way each moves data (``"read"``: column to
#: row), as :func:`fit_p2p` prefers them after the sample's matrices.
NVBANDWIDTH_TESTS = {
    "device_to_device_memcpy_write_ce": "write",
    "device_to_device_memcpy_read_ce": "read",
    "device_to_device_memcpy_write_sm": "write",
    "device_to_device_memcpy_read_sm": "read",
}
#: The bandwidth matrices, in the order :func:`fit_p2p` prefers them, by P2P on or off.
_PREFERRED = {
    True: (
        "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)",
        "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)",
        "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)",  # older samples' title
        *NVBANDWIDTH_TESTS,
    ),
    False: (
        "Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)",
        "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)",
    ),
}
_TITLE = re.compile(r"^(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) Bandwidth.*\(GB/s\)$")
_RUNNING = re.compile(r"^Running (\w+)\.$")
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]*)?$")


@dataclass(frozen=True)
class P2PMatrices:
    """The bandwidth matrices of one ``p2pBandwidthLatencyTest`` run, by title, GB/s."""

    source: str
    matrices: dict[str, FloatArray]

    @property
    def n_gpus(self) -> int:
        """How many GPUs the run measured."""
        return len(next(iter(self.matrices.values())))


@dataclass(frozen=True)
class PairRate:
    """One GPU pair: its measured rate each way and the fitted parameters' rate."""

    src_gpu: int
    dst_gpu: int
    kinds: tuple[str, ...]
    measured_bytes_per_s: float
    simulated_bytes_per_s: float

    @property
    def relative_error(self) -> float:
        """simulated / measured - 1."""
        return self.simulated_bytes_per_s / self.measured_bytes_per_s - 1.0


@dataclass(frozen=True)
class P2PFit:
    """What :func:`fit_p2p` found: ``efficiency`` per link class and
    ``link_bandwidth_bytes_per_s`` per link kind (the sections of a params file), the
    matrix it read, every pair's rates, and the kinds no pair could tell."""

    matrix: str
    efficiency: dict[str, float]
    link_bandwidth_bytes_per_s: dict[str, float]
    pairs: list[PairRate] = field(default_factory=list)
    not_identifiable: list[str] = field(default_factory=list)


def is_p2p_log(path: str | Path) -> bool:
    """Whether ``path`` holds ``p2pBandwidthLatencyTest`` matrices (its output, or the
    CSV transcription) or ``nvbandwidth``'s GPU-to-GPU ones: what ``simcoll calibrate``
    reads as such, not as measured calls."""
    try:
        head = read_input_text(path, missing="no such file")[:65536]
    except ConfigError:
        return False
    lines = head.splitlines()
    if lines and tuple(c.strip() for c in lines[0].split(",")) == CSV_HEADER:
        return True
    return any(_TITLE.match(line.strip()) or _RUNNING.match(line.strip())
               or line.startswith("nvbandwidth Version") for line in lines)  # fmt: skip


def _nvbandwidth_test(line: str) -> str | None:
    """The nvbandwidth test a ``Running NAME.`` line starts, if it is one read here."""
    found = _RUNNING.match(line.strip())
    return found[1] if found and found[1] in NVBANDWIDTH_TESTS else None


def read_p2p_matrices(path: str | Path) -> P2PMatrices:
    """The bandwidth matrices of a ``p2pBandwidthLatencyTest`` output, its CSV
    transcription, or an ``nvbandwidth`` output.

    Raises
    ------
    ConfigError
        One line naming the file (and line): no bandwidth matrix, a row that is not
        numbers, a matrix that is not square or whose GPU numbers are not 0..n-1, matrices
        of different sizes, a rate that is not positive, a CSV of several phases.
    """
    source = str(path)
    text = read_input_text(path, missing="no such p2pBandwidthLatencyTest or nvbandwidth file")
    first = text.splitlines()[0] if text.strip() else ""
    if tuple(c.strip() for c in first.split(",")) == CSV_HEADER:
        return _parse_csv(text, source)
    return parse_p2p_log(text, source=source)


def parse_p2p_log(text: str, *, source: str) -> P2PMatrices:
    """The bandwidth matrices printed by ``p2pBandwidthLatencyTest`` or ``nvbandwidth``
    (see the module)."""
    matrices: dict[str, FloatArray] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        title = lines[i].strip()
        i += 1
        test = _nvbandwidth_test(title)
        if test is not None:
            i = _nvbandwidth_matrix(lines, i, test, matrices, source)
            continue
        if not _TITLE.match(title):
            continue
        if i >= len(lines) or not lines[i].split()[:1] == ["D\\D"]:
            raise ConfigError(f"line {i + 1}: expected the header 'D\\D 0 1 ...' of "
                              f"{title!r}", source=source)  # fmt: skip
        columns = lines[i].split()[1:]
        i += 1
        rows: list[list[float]] = []
        while i < len(lines) and lines[i].split()[:1] and _NUMBER.match(lines[i].split()[0]):
            cells = lines[i].split()
            if cells[0] != str(len(rows)) or len(cells) != len(columns) + 1:
                raise ConfigError(f"line {i + 1}: row {cells[0]} of {title!r} does not follow "
                                  f"its header ({len(columns)} GPUs, rows 0, 1, ...)",
                                  source=source)  # fmt: skip
            rows.append([_rate(cell, source, i + 1) for cell in cells[1:]])
            i += 1
        _add(matrices, title, rows, columns, source)
    return _checked(matrices, source)


def _nvbandwidth_matrix(
    lines: list[str], i: int, test: str, matrices: dict[str, FloatArray], source: str
) -> int:
    """Read the matrix of nvbandwidth's ``test`` from line ``i`` (its title, then GPU
    numbers, then a row per GPU with ``N/A`` on the diagonal) into ``matrices``, as data
    moves (row to column); the line after it."""
    if i + 1 >= len(lines) or not lines[i].strip().startswith("memcpy"):
        raise ConfigError(f"line {i + 1}: expected the title 'memcpy ... bandwidth (GB/s)' of "
                          f"{test}", source=source)  # fmt: skip
    columns = lines[i + 1].split()
    i += 2
    rows: list[list[float]] = []
    while i < len(lines) and lines[i].split()[:1] == [str(len(rows))]:
        cells = lines[i].split()[1:]
        if len(cells) != len(columns) or len(rows) >= len(cells) or cells[len(rows)] != "N/A":
            raise ConfigError(f"line {i + 1}: row {len(rows)} of {test} does not follow its "
                              f"header ({len(columns)} GPUs, N/A on the diagonal)",
                              source=source)  # fmt: skip
        rows.append([np.nan if k == len(rows) else _rate(cell, source, i + 1)
                     for k, cell in enumerate(cells)])  # fmt: skip
        i += 1
    _add(matrices, test, rows, columns, source)
    if NVBANDWIDTH_TESTS[test] == "read":
        matrices[test] = matrices[test].T.copy()
    return i


def _parse_csv(text: str, source: str) -> P2PMatrices:
    cells: dict[str, dict[tuple[int, int], float]] = {}
    phases: set[str] = set()
    reader = csv.reader(io.StringIO(text))
    next(reader)
    for number, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(CSV_HEADER):
            raise ConfigError(f"line {number}: {len(row)} fields, expected {len(CSV_HEADER)} "
                              f"({','.join(CSV_HEADER)})", source=source)  # fmt: skip
        phase, title, src, dst, value = (c.strip() for c in row)
        if not _TITLE.match(title):
            continue  # latency matrices, connectivity
        phases.add(phase)
        try:
            pair = (int(src), int(dst))
        except ValueError:
            raise ConfigError(f"line {number}: src_gpu and dst_gpu must be GPU numbers, got "
                              f"{src!r}, {dst!r}", source=source) from None  # fmt: skip
        cells.setdefault(title, {})[pair] = _rate(value, source, number)
    if len(phases) > 1:
        raise ConfigError(f"holds the matrices of {len(phases)} runs (phases "
                          f"{', '.join(sorted(phases))}); keep one phase's rows",
                          source=source)  # fmt: skip
    matrices: dict[str, FloatArray] = {}
    for title, values in cells.items():
        n = 1 + max(max(pair) for pair in values)
        if len(values) != n * n or min(min(pair) for pair in values) < 0:
            raise ConfigError(f"matrix {title!r} has {len(values)} entries, not one per GPU "
                              f"pair of GPUs 0..{n - 1}", source=source)  # fmt: skip
        grid = np.empty((n, n))
        for (i, j), rate in values.items():
            grid[i, j] = rate
        matrices[title] = grid
    return _checked(matrices, source)


def _rate(cell: str, source: str, line: int) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise ConfigError(f"line {line}: {cell!r} is not a rate in GB/s", source=source) from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"line {line}: a rate must be positive GB/s, got {cell}", source=source)
    return value


def _add(
    matrices: dict[str, FloatArray],
    title: str,
    rows: list[list[float]],
    columns: list[str],
    source: str,
) -> None:
    if columns != [str(k) for k in range(len(columns))] or len(rows) != len(columns):
        raise ConfigError(f"matrix {title!r} is not square over GPUs 0..n-1 ({len(rows)} rows, "
                          f"columns {' '.join(columns)})", source=source)  # fmt: skip
    matrices[title] = np.array(rows, dtype=np.float64)


def _checked(matrices: dict[str, FloatArray], source: str) -> P2PMatrices:
    if not matrices:
        raise ConfigError("no GPU-to-GPU bandwidth matrix of p2pBandwidthLatencyTest or "
                          f"nvbandwidth (a line such as '{_PREFERRED[True][0]}' or 'Running "
                          f"{next(iter(NVBANDWIDTH_TESTS))}.')", source=source)  # fmt: skip
    sizes = {len(m) for m in matrices.values()}
    if len(sizes) > 1 or min(sizes) < 2:
        raise ConfigError(f"matrices of {sorted(sizes)} GPUs: one run measures one set of two "
                          "or more GPUs", source=source)  # fmt: skip
    return P2PMatrices(source, matrices)


def fit_p2p(topology: nx.DiGraph[str], matrices: P2PMatrices) -> P2PFit:
    """Fit link efficiencies and bandwidths to a run's pair rates (see the module).

    GPU ``k`` of the matrices is the topology's GPU of rank ``k``. The topology's
    ``p2p`` (graph attribute, default true) picks the P2P=Enabled or P2P=Disabled
    matrices.

    Raises
    ------
    ConfigError
        Where the run measured another number of GPUs than the topology has, or has none
        of the matrices for the topology's P2P setting.
    """
    p2p = topology.graph.get("p2p", True) is not False
    title = next((t for t in _PREFERRED[p2p] if t in matrices.matrices), None)
    if title is None:
        wanted = "P2P=Enabled" if p2p else "P2P=Disabled"
        raise ConfigError(f"has no {wanted} bandwidth matrix, which a topology with p2p = "
                          f"{str(p2p).lower()} needs", source=matrices.source)  # fmt: skip
    n = matrices.n_gpus
    if n != len(gpu_nodes(topology)):
        raise ConfigError(f"measured {n} GPUs; the topology has {len(gpu_nodes(topology))}",
                          source=matrices.source)  # fmt: skip
    per_direction = matrices.matrices[title] * 1e9 / (2.0 if title.startswith("Bi") else 1.0)
    nodes = map_ranks(topology, n)
    router = Router(topology)
    routes = {
        (i, j): router.route(nodes[i], nodes[j]) for i in range(n) for j in range(n) if i != j
    }
    kinds = {pair: tuple(sorted({topology.edges[e]["kind"].value for e in r}))
             for pair, r in routes.items()}  # fmt: skip
    wire = {pair: min(topology.edges[e]["bandwidth_bytes_per_s"] for e in r)
            for pair, r in routes.items()}  # fmt: skip
    measured = {pair: float(per_direction[pair]) for pair in routes}

    efficiency: dict[str, float] = {}
    single = [pair for pair in routes if len(kinds[pair]) == 1]
    for cls in sorted({link_class(kinds[p]) for p in single}):
        ratios = [measured[p] / wire[p] for p in single if link_class(kinds[p]) == cls]
        efficiency[cls] = min(MAX_EFFICIENCY, max(MIN_EFFICIENCY, statistics.median(ratios)))
    single_kinds = {kinds[p][0] for p in single}
    observed: dict[str, list[float]] = {}
    for pair in routes:
        if len(kinds[pair]) == 1:
            continue
        e = efficiency.get(link_class(kinds[pair]))
        others = [k for k in kinds[pair] if k not in single_kinds]
        if e is None or len(others) != 1:
            continue
        if measured[pair] < wire[pair] * e * (1 - BINDING_TOLERANCE):
            observed.setdefault(others[0], []).append(measured[pair] / e)
    bandwidth = {kind: statistics.median(rates) for kind, rates in sorted(observed.items())}
    crossed = sorted({k for ks in kinds.values() for k in ks})
    unknown = [k for k in crossed if k not in single_kinds and k not in bandwidth]
    pairs = []
    for (i, j), route in routes.items():
        e = efficiency.get(link_class(kinds[i, j]), 1.0)
        rates = [bandwidth.get(topology.edges[edge]["kind"].value,
                               topology.edges[edge]["bandwidth_bytes_per_s"])
                 for edge in route]  # fmt: skip
        pairs.append(PairRate(i, j, kinds[i, j], measured[i, j], min(rates) * e))
    return P2PFit(title, efficiency, bandwidth, pairs, unknown)
