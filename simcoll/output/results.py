"""Results as data: the one place algbw and busbw are computed, and the table writers.

Definitions follow nccl-tests ``doc/PERFORMANCE.md``: ``algbw = size_bytes / time_s`` and
``busbw = algbw x factor``, the factor given by :meth:`Collective.busbw_factor`.

>>> row = Row.from_time("allreduce", "ring", n_ranks=8, size_bytes=2**30, time_s=0.01)
>>> round(row.algbw_bytes_per_s / 1e9, 4), round(row.busbw_bytes_per_s / 1e9, 4)
(107.3742, 187.9048)
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields

from simcoll.core.collectives import Collective

__all__ = [
    "CSV_COLUMNS",
    "Row",
    "bandwidths",
    "format_side_by_side",
    "format_table",
    "to_csv",
    "to_json",
]

#: The leading CSV columns, in this order (DESIGN's contract); more may follow.
CSV_COLUMNS = (
    "collective",
    "algorithm",
    "protocol",
    "n_ranks",
    "size_bytes",
    "time_s",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
)


def bandwidths(
    collective: Collective | str, n_ranks: int, size_bytes: int, time_s: float
) -> tuple[float, float]:
    """``(algbw, busbw)`` in bytes/s, the nccl-tests way; both 0 when time is 0.

    >>> bandwidths("allgather", 4, 4000, 1e-6)
    (4000000000.0, 3000000000.0)
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    if time_s <= 0:
        return 0.0, 0.0
    algbw = size_bytes / time_s
    return algbw, algbw * c.busbw_factor(n_ranks)


@dataclass(frozen=True, kw_only=True)
class Row:
    """One predicted (or measured) point: a collective of one size on n ranks."""

    collective: str
    algorithm: str
    protocol: str
    n_ranks: int
    size_bytes: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    model: str = "flow"
    count: int = 0
    type: str = "float"
    redop: str = "sum"
    root: int = -1
    # Accounting of the simulated run (0 when unknown, e.g. a measured row): the most
    # data bytes any rank sent and received, and the most bytes (data / protocol
    # efficiency) any directed link carried.
    max_rank_sent_bytes: int = 0
    max_rank_received_bytes: int = 0
    max_link_bytes: float = 0.0
    # How the run was laid out: channels used, where ranks were placed (linear,
    # random:SEED or a file), the routing rule, and the plan (nccl: NCCL's search; rank
    # order; or the NCCL log it was read from).
    n_channels: int = 0
    placement: str = "linear"
    routing: str = ""
    plan: str = ""
    # An in-place call (nccl-tests' second half): no copy of the own block from input to
    # output (Collective.local_copy_bytes).
    in_place: bool = False

    @classmethod
    def from_time(
        cls,
        collective: Collective | str,
        algorithm: str,
        *,
        n_ranks: int,
        size_bytes: int,
        time_s: float,
        protocol: str = "simple",
        model: str = "flow",
        root: int = 0,
    ) -> Row:
        """A row with bandwidths, count, redop and root filled in as nccl-tests prints them."""
        c = collective if isinstance(collective, Collective) else Collective.parse(collective)
        algbw, busbw = bandwidths(c, n_ranks, size_bytes, time_s)
        return cls(
            collective=c.value,
            algorithm=algorithm,
            protocol=protocol,
            n_ranks=n_ranks,
            size_bytes=size_bytes,
            time_s=time_s,
            algbw_bytes_per_s=algbw,
            busbw_bytes_per_s=busbw,
            model=model,
            count=c.count(size_bytes, n_ranks),
            redop="sum" if c.reduces else "none",
            root=root if c.is_rooted else -1,
        )


def _columns() -> list[str]:
    names = [f.name for f in fields(Row)]
    return [*CSV_COLUMNS, *(n for n in names if n not in CSV_COLUMNS)]


def to_csv(rows: Iterable[Row]) -> str:
    """Rows as CSV text, :data:`CSV_COLUMNS` first. Floats keep full precision."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=_columns(), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in asdict(row).items()})
    return out.getvalue()


def to_json(rows: Iterable[Row]) -> str:
    """Rows as a JSON array of objects, with units in every key."""
    return json.dumps([asdict(r) for r in rows], indent=2) + "\n"


def format_table(rows: Sequence[Row], *, title: str = "") -> str:
    """Rows as an nccl-tests-style text table (time in us, bandwidths in GB/s).

    >>> print(format_table([Row.from_time("allreduce", "ring", n_ranks=8, size_bytes=1024,
    ...                                   time_s=2e-5)]))  # doctest: +NORMALIZE_WHITESPACE
    #       size         count      type   redop    root     time   algbw   busbw  algorithm \
    protocol
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)
            1024           256     float     sum      -1    20.00    0.05    0.09  ring  simple
    # Avg bus bandwidth    : 0.0896 GB/s
    """
    lines = [f"# {line}" for line in title.splitlines()]
    width = max([len("algorithm"), *(len(r.algorithm) for r in rows)])  # columns stay aligned
    lines.append(
        f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'root':>7} "
        f"{'time':>8} {'algbw':>7} {'busbw':>7}  {'algorithm':<{width}}  protocol"
    )
    lines.append(
        f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'':>7} "
        f"{'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7}"
    )
    for r in rows:
        lines.append(
            f"{r.size_bytes:>12} {r.count:>13} {r.type:>9} {r.redop:>7} {r.root:>7} "
            f"{_time_us(r.time_s):>8} {r.algbw_bytes_per_s / 1e9:>7.2f} "
            f"{r.busbw_bytes_per_s / 1e9:>7.2f}  {r.algorithm:<{width}}  {r.protocol}"
        )
    if rows:
        mean = sum(r.busbw_bytes_per_s for r in rows) / len(rows) / 1e9
        lines.append(f"# Avg bus bandwidth    : {mean:.4g} GB/s")
    return "\n".join(lines)


def format_side_by_side(rows: Sequence[Row], *, title: str = "") -> str:
    """Rows of several algorithms as one table, one column group per algorithm (time in
    us, busbw in GB/s, protocol), a line per size; ``-`` where an algorithm has no row.

    >>> rows = [Row.from_time("allreduce", a, n_ranks=8, size_bytes=1024, time_s=t)
    ...         for a, t in (("ring", 2e-5), ("tree", 1e-5))]
    >>> print(format_side_by_side(rows))  # doctest: +NORMALIZE_WHITESPACE
    #       size         count      type   redop    root |                  ring |\
                      tree
    #        (B)    (elements)                           |     time  busbw proto  |\
         time  busbw proto
    #                                                    |     (us) (GB/s)        |\
         (us) (GB/s)
            1024           256     float     sum      -1 |    20.00   0.09 simple |\
        10.00   0.18 simple
    """
    lines = [f"# {line}" for line in title.splitlines()]
    algorithms = list(dict.fromkeys(r.algorithm for r in rows))
    width = {a: max(22, len(a)) for a in algorithms}  # time 8, busbw 6, protocol 6+
    by_cell = {(r.algorithm, r.size_bytes): r for r in rows}
    first = {r.size_bytes: r for r in reversed(rows)}  # each size's own count, type, redop
    head = [f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'root':>7}",
            f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'':>7}",
            f"#{'':>11} {'':>13} {'':>9} {'':>7} {'':>7}"]  # fmt: skip
    for a in algorithms:
        proto = width[a] - 16
        head[0] += f" |{a:>{width[a]}}"
        head[1] += f" |{'time':>8} {'busbw':>6} {'proto':<{proto}}"
        head[2] += f" |{'(us)':>8} {'(GB/s)':>6} {'':<{proto}}"
    lines += [line.rstrip() for line in head]
    for size in sorted(first):
        r = first[size]
        line = f"{size:>12} {r.count:>13} {r.type:>9} {r.redop:>7} {r.root:>7}"
        for a in algorithms:
            proto = width[a] - 16
            cell = by_cell.get((a, size))
            if cell is None:
                line += f" |{'-':>8} {'-':>6} {'-':<{proto}}"
            else:
                busbw = cell.busbw_bytes_per_s / 1e9
                line += f" |{_time_us(cell.time_s):>8} {busbw:>6.2f} {cell.protocol:<{proto}}"
        lines.append(line.rstrip())
    return "\n".join(lines)


def _time_us(time_s: float) -> str:
    """Microseconds with nccl-tests' precision: 2 decimals, 1 from 100 us, none from 10 ms."""
    us = time_s * 1e6
    if us >= 10_000:
        return f"{us:.0f}"
    return f"{us:.1f}" if us >= 100 else f"{us:.2f}"
