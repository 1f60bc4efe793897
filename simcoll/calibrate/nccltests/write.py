"""Print nccl-tests logs in their exact layout (old and new), e.g. to turn the public
tables in validation/data/public back into the logs their runs printed.

The printf formats are nccl-tests' own (sources in :mod:`simcoll.calibrate.nccltests.read`,
which parses what this module prints).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from simcoll.calibrate.measurements import Measurement
from simcoll.calibrate.nccltests.read import TYPE_BYTES, Layout
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError

__all__ = ["LogHeader", "format_log", "oop_ip_pairs", "time_text"]

#: The columns after ``type`` in each test's own header, old layout.
_OLD_COLUMNS: dict[Collective, tuple[str, ...]] = {
    Collective.ALLREDUCE: ("redop",),
    Collective.REDUCESCATTER: ("redop",),
    Collective.ALLTOALL: ("redop",),
    Collective.ALLGATHER: (),
    Collective.SENDRECV: (),
    Collective.BROADCAST: ("root",),
    Collective.GATHER: ("root",),
    Collective.SCATTER: ("root",),
    Collective.REDUCE: ("redop", "root"),
}


def oop_ip_pairs(rows: Sequence[Measurement]) -> list[tuple[Measurement, Measurement]]:
    """Rows in the order logs print them (out-of-place, in-place, ...) as one pair per line.

    Raises :class:`ConfigError` when two consecutive rows are not an out-of-place and an
    in-place measurement of one size.
    """
    if len(rows) % 2:
        raise ConfigError(f"{len(rows)} rows do not pair into out-of-place and in-place halves")
    pairs = list(zip(rows[0::2], rows[1::2], strict=True))
    for i, (oop, ip) in enumerate(pairs):
        if oop.in_place or not ip.in_place or oop.size_bytes != ip.size_bytes:
            raise ConfigError(
                f"rows {2 * i + 1} and {2 * i + 2} are not an out-of-place and an in-place "
                f"measurement of one size"
            )
    return pairs


@dataclass(frozen=True, kw_only=True)
class LogHeader:
    """What a log prints above its table; the defaults are nccl-tests' own.

    ``n_gpus`` (GPUs per process) defaults to all the ranks of a host; ``min_bytes`` and
    ``max_bytes`` to the smallest and largest size printed. Ranks are spread over
    ``hosts`` in order, ``n_threads * n_gpus`` to a process.
    """

    n_threads: int = 1
    n_gpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step_factor: int = 2
    warmup_iters: int = 5
    iters: int = 20
    agg_iters: int = 1
    validation: int = 1
    graph: int = 0
    hosts: tuple[str, ...] = ("localhost",)
    device_name: str = "GPU"
    pid: int = 4242


def format_log(
    rows: Sequence[tuple[Measurement, Measurement]],
    *,
    collective: str,
    n_ranks: int,
    layout: Layout = "new",
    header: LogHeader | None = None,
    bandwidths_gb_per_s: Sequence[tuple[float, float, float, float]] | None = None,
) -> str:
    """An nccl-tests log of ``rows`` in the ``"old"`` or ``"new"`` layout, printf for printf.

    Parameters
    ----------
    rows
        One ``(out-of-place, in-place)`` pair per printed line (:func:`oop_ip_pairs`).
    collective, n_ranks
        What the log is of; every row must agree.
    layout
        ``"old"`` (per-test columns, ``error``) or ``"new"`` (``redop root``, ``#wrong``).
    header
        The settings and devices printed above the table.
    bandwidths_gb_per_s
        Per line ``(algbw_oop, busbw_oop, algbw_ip, busbw_ip)`` as an original log printed
        them; by default they are computed from size and time the nccl-tests way.

    >>> m = Measurement(collective="allgather", n_ranks=2, size_bytes=2048, time_s=1.6e-05,
    ...                 count=256)
    >>> ip = Measurement(collective="allgather", n_ranks=2, size_bytes=2048, time_s=2e-05,
    ...                  count=256, in_place=True)
    >>> print(format_log([(m, ip)], collective="allgather", n_ranks=2, layout="old",
    ...                  header=LogHeader(validation=0)).replace(" ", "."))
    #.nThread.1.nGpus.2.minBytes.2048.maxBytes.2048.step:.2(factor).warmup.iters:.5.iters:.20.\
validation:.0.
    #
    #.Using.devices
    #...Rank..0.Pid...4242.on..localhost.device..0.[0x00].GPU
    #...Rank..1.Pid...4242.on..localhost.device..1.[0x00].GPU
    #
    #.............................................out-of-place.......................in-place..........
    #.......size.........count....type.....time...algbw...busbw..error.....time...algbw...busbw\
..error
    #........(B)....(elements).............(us)..(GB/s)..(GB/s)............(us)..(GB/s)..(GB/s)..\
.....
    ........2048...........256...float....16.00....0.13....0.06....N/A....20.00....0.10....0.05\
....N/A
    #.Out.of.bounds.values.:.0.OK
    #.Avg.bus.bandwidth....:.0.0576.
    #
    <BLANKLINE>
    """
    c = Collective.parse(collective)
    h = header or LogHeader()
    for i, pair in enumerate(rows, start=1):
        for m in pair:
            if (m.collective, m.n_ranks) != (c.value, n_ranks):
                raise ConfigError(
                    f"line {i} is {m.collective} on {m.n_ranks} ranks, not {c.value} on {n_ranks}"
                )
    if bandwidths_gb_per_s is not None and len(bandwidths_gb_per_s) != len(rows):
        raise ConfigError(f"{len(bandwidths_gb_per_s)} bandwidth lines for {len(rows)} rows")
    printed = bandwidths_gb_per_s or [
        (o.algbw_bytes_per_s / 1e9, o.busbw_bytes_per_s / 1e9,
         i.algbw_bytes_per_s / 1e9, i.busbw_bytes_per_s / 1e9) for o, i in rows
    ]  # fmt: skip
    old = layout == "old"
    columns = _OLD_COLUMNS[c] if old else ("redop", "root")
    lines = [*_settings_lines(rows, h, n_ranks, old), *_column_lines(columns, old)]
    for (oop, ip), (algbw_oop, busbw_oop, algbw_ip, busbw_ip) in zip(rows, printed, strict=True):
        lines.append(
            _line_prefix(oop, c, n_ranks, columns, old)
            + _half(oop.time_s, algbw_oop, busbw_oop, h.validation, old)
            + _half(ip.time_s, algbw_ip, busbw_ip, h.validation, old)
        )
    busbws = [bw for line in printed for bw in (line[1], line[3])]
    average = sum(busbws) / len(busbws) if busbws else 0.0
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {average:g} ", "#"]
    if not old:
        lines.append("")  # ncclGetLastError(), empty after a clean run
    return "\n".join(lines) + "\n"


def _settings_lines(
    rows: Sequence[tuple[Measurement, Measurement]], h: LogHeader, n_ranks: int, old: bool
) -> list[str]:
    if n_ranks % len(h.hosts):
        raise ConfigError(f"{n_ranks} ranks do not spread evenly over {len(h.hosts)} hosts")
    per_host = n_ranks // len(h.hosts)
    n_gpus = h.n_gpus or per_host
    sizes = [m.size_bytes for m, _ in rows] or [0]
    low = min(sizes) if h.min_bytes is None else h.min_bytes
    high = max(sizes) if h.max_bytes is None else h.max_bytes
    settings = (
        f"# nThread {h.n_threads} nGpus {n_gpus} minBytes {low} maxBytes {high} "
        f"step: {h.step_factor}(factor) warmup iters: {h.warmup_iters} iters: {h.iters} "
    )
    settings += (
        f"validation: {h.validation} "
        if old
        else f"agg iters: {h.agg_iters} validation: {h.validation} graph: {h.graph}"
    )
    lines = [settings, "#", "# Using devices"]
    for rank in range(n_ranks):
        host, device = h.hosts[rank // per_host], rank % per_host
        pid = h.pid + rank // (h.n_threads * n_gpus)
        group = "" if old else " Group  0"
        lines.append(
            f"#{' ' if old else ''}  Rank {rank:2d}{group} Pid {pid:6d} on {host:>10} "
            f"device {device:2d} [0x00] {h.device_name}"
        )
    return [*lines, "#"]


def _column_lines(columns: tuple[str, ...], old: bool) -> list[str]:
    """The three header lines: which half, column names, units."""
    type_width = 6 if old else 8

    def lead(size: str, count: str, type_: str, extra: Sequence[str]) -> str:
        return f"# {size:>10}  {count:>12}  {type_:>{type_width}}" + "".join(
            f"  {x:>6}" for x in extra
        )

    blank = [""] * len(columns)
    # old: "  %5s" error column; new: " %6s" #wrong column (one space, one column wider)
    error = "  error" if old else " #wrong"
    names = f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}{error}"
    units = f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}"
    before = " " * (12 if old else 11)
    return [
        lead("", "", "", blank) + before + "out-of-place" + " " * 23 + "in-place" + " " * 10,
        lead("size", "count", "type", columns) + names + names,
        lead("(B)", "(elements)", "", blank) + units + units,
    ]


def _line_prefix(
    m: Measurement, c: Collective, n_ranks: int, columns: tuple[str, ...], old: bool
) -> str:
    count = m.count
    if not count and m.size_bytes:
        if m.dtype not in TYPE_BYTES:
            raise ConfigError(f"count is 0 and the size of type {m.dtype!r} is unknown")
        count = c.count(m.size_bytes, n_ranks, TYPE_BYTES[m.dtype])
    text = f"{m.size_bytes:12d}  {count:12d}  {m.dtype:>{6 if old else 8}}"
    for column in columns:
        if column == "redop":
            text += f"  {m.redop or ('sum' if c.reduces else 'none'):>6}"
        else:
            text += f"  {m.root:6d}"
    return text


def _half(time_s: float, algbw: float, busbw: float, validation: int, old: bool) -> str:
    error = "N/A" if not validation else (f"{0.0:5.0e}" if old else f"{0:5g}")
    return f"  {time_text(time_s)}  {algbw:6.2f}  {busbw:6.2f}  {error:>5}"


def time_text(time_s: float) -> str:
    """A time as nccl-tests prints it: us in 7 columns, 2 decimals, 1 from 100 us, 0 from 10 ms.

    >>> time_text(3.52e-05), time_text(1.1622e-03), time_text(0.013867)
    ('  35.20', ' 1162.2', '  13867')
    """
    us = Decimal(repr(float(time_s))).scaleb(6)  # so a time read from a log prints back as read
    if us >= 10_000:
        return f"{us:7.0f}"
    return f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"
