"""nccl-tests output read as measurements: text logs of every layout, and table CSVs.

An nccl-tests run (``all_reduce_perf -b 8 -e 128M -f 2 -g 8``) prints a header of ``#``
lines (settings, one ``#  Rank`` line per rank), a three-line column header, one line per
size with an out-of-place and an in-place half (``time`` in us, ``algbw`` and ``busbw`` in
GB/s, then an error column), and a footer (``# Avg bus bandwidth``). Each line becomes
two :class:`~simcoll.calibrate.measurements.Measurement` rows, out-of-place first.

Two layouts are printed (:mod:`simcoll.calibrate.nccltests.write`) and both, with later
variants, are parsed:

- ``"old"`` (nccl-tests up to about 2021; each test printed its own header): the columns
  after ``type`` depend on the test (all_reduce, reduce_scatter, alltoall: ``redop``;
  all_gather, sendrecv: none; broadcast, gather, scatter: ``root``; reduce: both), the
  error column is ``error`` (``%5.0le``: ``0e+00``, or ``N/A`` without validation), and
  rank lines read ``#   Rank  0 Pid ...``;
- ``"new"`` (from about 2022): every test prints ``size count type redop root``, with ``none``
  and ``-1`` where they do not apply, the error column is ``#wrong`` (``%5g``), and rank
  lines read ``#  Rank  0 Group  0 Pid ...``.

Times print with 2 decimals below 100 us, 1 below 10 ms, none above. The parser also
takes the 2025 variant (``# nccl-tests version ...``, ``# Collective test starting: ...``,
``[0000:07:00]`` bus ids, ``%6g`` error counts), ``cputime`` columns, extra per-half
columns (``#bitdiff``, per-iteration statistics), ``[rank]`` prefixes added by mpirun and
interleaved ``NCCL INFO`` lines.

The formats were read (never copied) from: NVIDIA/nccl-tests ``src/common.cu`` @ d2d40cc
(new layout: header, rank, column-header, data-line and footer printf formats),
``src/all_gather.cu`` @ 0f8c785 and the 2019 ``src/reduce_scatter.cu`` (old per-test
``print_header``/``print_line_header``), ``src/util.cu`` @ 0fdb00a (2025 variant); and the
captured old-layout runs microsoft/superbenchmark ``tests/data/nccl_allreduce.log`` @ f1f5c72
and ``tests/data/nccl_allgather.log`` @ 86e1415.

>>> log = '''# nThread 1 nGpus 2 minBytes 1024 maxBytes 1024 step: 2(factor) warmup iters: 5 \
iters: 20 agg iters: 1 validation: 1 graph: 0
... #
... # Using devices
... #  Rank  0 Group  0 Pid  10000 on      node0 device  0 [0x07] NVIDIA A100-SXM4-40GB
... #  Rank  1 Group  0 Pid  10000 on      node0 device  1 [0x0f] NVIDIA A100-SXM4-40GB
... #
... #       size         count      type   redop    root     time   algbw   busbw #wrong \
    time   algbw   busbw #wrong
... #        (B)    (elements)                               (us)  (GB/s)  (GB/s)       \
     (us)  (GB/s)  (GB/s)
...         1024           256     float     sum      -1    12.50    0.08    0.08      0 \
   12.00    0.09    0.09      0
... # Avg bus bandwidth    : 0.085
... '''
>>> runs = parse_log(log, source="all_reduce_perf.log")
>>> [(m.collective, m.n_ranks, m.size_bytes, m.time_s, m.in_place) for m in runs.rows]
[('allreduce', 2, 1024, 1.25e-05, False), ('allreduce', 2, 1024, 1.2e-05, True)]
>>> runs.metadata["nGpus"], runs.metadata["Avg bus bandwidth"], runs.metadata["layout"]
(2, 0.085, 'new')
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from simcoll.calibrate.measurements import Measurement, MeasurementSet, check_time_s, csv_rows
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.limits import MAX_SIZE_BYTES

__all__ = [
    "TABLE_COLUMNS",
    "TYPE_BYTES",
    "Layout",
    "collective_from_name",
    "is_table_header",
    "n_ranks_from_name",
    "parse_log",
    "parse_table_csv",
]

Layout = Literal["old", "new"]

#: The columns of an nccl-tests table transcribed as CSV (``validation/data/public``).
TABLE_COLUMNS = (
    "size_bytes",
    "count",
    "type",
    "redop",
    "time_us_oop",
    "algbw_oop",
    "busbw_oop",
    "time_us_ip",
    "algbw_ip",
    "busbw_ip",
)

# Test names as they appear in file names (all_reduce_perf, nccl_allgather_...), squashed
# to letters and digits; longer names first so "allreduce" is not read as "reduce".
_NAMES = (
    ("reducescatter", Collective.REDUCESCATTER),
    ("allreduce", Collective.ALLREDUCE),
    ("allgather", Collective.ALLGATHER),
    ("alltoallv", None),  # a different test: per-pair sizes vary
    ("alltoall", Collective.ALLTOALL),
    ("sendrecv", Collective.SENDRECV),
    ("broadcast", Collective.BROADCAST),
    ("reduce", Collective.REDUCE),
    ("gather", Collective.GATHER),
    ("scatter", Collective.SCATTER),
)
_RANKS_IN_NAME = re.compile(r"(?<![0-9a-z])(?:(\d+)x)?(\d+)x(?=[a-z])")
_MPI_TAG = re.compile(r"^\[\d+(?:,\d+)?\](?:<std(?:out|err)>:)?\s?")
_RANK_LINE = re.compile(
    r"#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus_id>[^\]]*)\]\s*(?P<name>.*)"
)
_RANK_START = re.compile(r"#\s*Rank\s+(\d+)\b")
_SETTING = re.compile(r"(?P<key>[A-Za-z]+(?: [A-Za-z]+)*):? (?P<value>\d+(?:\(\w+\))?)")
_SUMMARY = re.compile(r"#\s*(?P<key>[A-Za-z][A-Za-z ]*?)\s+:\s*(?P<value>.*)")
_TEST_NAME = re.compile(r"#\s*Collective test (?:starting|concluded):\s*(?P<name>\S+)")
_VERSION = re.compile(r"#\s*nccl-tests version\s+(?P<version>\S+)(?P<rest>.*)")
_DATA_START = re.compile(r"\s*\d+\s")
_ALIASES = {"bytes": "size", "N": "count", "op": "redop", "cputime": "time"}
#: Bytes per element of the types nccl-tests prints.
TYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "half": 2, "float16": 2, "bfloat16": 2,
              "int32": 4, "uint32": 4, "int": 4, "float": 4, "float32": 4, "int64": 8,
              "uint64": 8, "double": 8, "float64": 8}  # fmt: skip


def collective_from_name(name: str) -> Collective | None:
    """The collective a file or test name names, or None when it names none or several.

    >>> collective_from_name("logs/all_reduce_perf.out"), collective_from_name("run.log")
    (<Collective.ALLREDUCE: 'allreduce'>, None)
    >>> collective_from_name("nccl_reduce_scatter_8xH100.log")
    <Collective.REDUCESCATTER: 'reducescatter'>
    """
    squashed = re.sub(r"[^a-z0-9]", "", Path(name).name.lower())
    found = set()
    for key, collective in _NAMES:
        if key in squashed:
            squashed = squashed.replace(key, "|")
            found.add(collective)
    return found.pop() if len(found) == 1 else None


def n_ranks_from_name(name: str) -> int | None:
    """The number of ranks a file name states as ``8xA100`` or ``2x8xH100``, else None.

    >>> n_ranks_from_name("nccl_allreduce_2x8xH100_ndr.csv"), n_ranks_from_name("a.log")
    (16, None)
    """
    found = {
        int(nodes or 1) * int(gpus)
        for nodes, gpus in _RANKS_IN_NAME.findall(Path(name).name.lower())
    }
    return found.pop() if len(found) == 1 else None


def is_table_header(header: Sequence[str]) -> bool:
    """True when a CSV header is the nccl-tests table layout of :data:`TABLE_COLUMNS`."""
    names = {h.strip() for h in header}
    return "time_us_oop" in names or "time_us_ip" in names


@dataclass(frozen=True)
class _Half:
    """One half of a printed line: the Measurement fields a log states."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    in_place: bool
    time_s: float


@dataclass
class _Run:
    """What a log has said so far, line by line."""

    source: str
    metadata: dict[str, Any] = field(default_factory=dict)
    ranks: set[int] = field(default_factory=set)
    prefix: tuple[str, ...] = ()
    half_width: int = 0
    trailing: int = 0
    halves: list[_Half] = field(default_factory=list)
    wrong: list[float] = field(default_factory=list)  # each half's error column (0 if N/A)


def parse_log(
    text: str, *, source: str, collective: str | None = None, n_ranks: int | None = None
) -> MeasurementSet:
    """Measurements from the text of one nccl-tests run (old or new layout).

    Parameters
    ----------
    text
        The log; lines that are neither nccl-tests' ``#`` lines nor data lines (NCCL INFO,
        mpirun output) are skipped.
    source
        The file name, for messages and to tell the collective (``all_gather_perf.log``).
    collective
        The collective, when the log (2025 layout) and its file name do not say it.
    n_ranks
        The number of ranks, when the log has no ``#  Rank`` lines; it must agree with them.

    Returns
    -------
    MeasurementSet
        Two rows per data line (out-of-place, in-place) with times in seconds; metadata
        holds the header settings (``nThread``, ``nGpus``, ``minBytes``, ``maxBytes``,
        ``step``, ``warmup iters``, ``iters``, ...), ``devices`` (one dict per rank line),
        the footer (``Out of bounds values``, ``Avg bus bandwidth`` in GB/s) and ``layout``.

    Raises
    ------
    ConfigError
        A data line that does not parse (naming the line), no column header, no data
        lines, or a collective or rank count that cannot be told.
    """
    run = _Run(source)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _MPI_TAG.sub("", raw, count=1).rstrip()
        if line.startswith("#"):
            _comment(run, line, number)
        elif _DATA_START.match(line):
            if not run.half_width:
                raise ConfigError(
                    "a data line before the column header", source=source, field=f"line {number}"
                )
            run.halves += _data_line(run, line, number)
    if not run.half_width:
        raise ConfigError("no nccl-tests column header ('# size count type ...')", source=source)
    if not run.halves:
        raise ConfigError("no data lines under the column header", source=source)
    c = _collective(source, collective, run.metadata.get("Collective test"))
    ranks = _n_ranks(source, n_ranks, run.ranks)
    kept = _passed_check(run)
    rows = tuple(
        Measurement(collective=c.value, n_ranks=ranks, **asdict(half))
        for half, ok in zip(run.halves, kept, strict=True)
        if ok
    )
    if not rows:
        raise ConfigError(
            f"every data line failed nccl-tests' data check ({run.metadata['failed_check']}); "
            "no timing to use",
            source=source,
        )
    return MeasurementSet(source, rows, run.metadata)


def _passed_check(run: _Run) -> list[bool]:
    """Which halves passed nccl-tests' data check: a wrong result is no timing.

    New layout: ``#wrong`` counts wrong elements, so any other value than 0 fails. Old
    layout: ``error`` is the largest deviation, failing only past nccl-tests' threshold,
    which the footer's ``Out of bounds values : N FAILED`` reports. A log that says
    FAILED without a line to blame fails every line. The count and the reason go into
    ``metadata["dropped_rows"]`` and ``metadata["failed_check"]``.
    """
    bounds = run.metadata.get("Out of bounds values")
    failed = isinstance(bounds, int) and bounds > 0
    new = run.metadata.get("layout") == "new"
    kept = [not (w > 0 and (new or failed)) for w in run.wrong]
    if failed and all(kept):
        kept = [False] * len(kept)
    if not all(kept):
        run.metadata["dropped_rows"] = kept.count(False)
        run.metadata["failed_check"] = (
            f"the log says 'Out of bounds values : {bounds} FAILED'"
            if failed
            else "#wrong is not 0"
        )
    return kept


def _comment(run: _Run, line: str, number: int) -> None:
    """Take what a ``#`` line says: settings, a rank, the column header, a summary."""
    words = line[1:].split()
    if not words:
        return
    if words[0] == "nThread":
        for m in _SETTING.finditer(line):
            value = m["value"]
            run.metadata[m["key"]] = int(value) if value.isdigit() else value
    elif rank := _RANK_START.match(line):
        run.ranks.add(int(rank[1]))
        run.metadata.setdefault("devices", []).append(_device(line))
    elif words[0] in ("size", "bytes") and ("time" in words or "cputime" in words):
        _column_header(run, words, number)
    elif test := _TEST_NAME.match(line):
        run.metadata["Collective test"] = test["name"]
    elif version := _VERSION.match(line):
        run.metadata["nccl-tests version"] = version["version"]
        for key, value in re.findall(r"(\S+)=(\d+)", version["rest"]):
            run.metadata[key] = int(value)
    elif summary := _SUMMARY.match(line):
        run.metadata[summary["key"].strip()] = _summary_value(summary["value"])


_NUMERIC = ("rank", "group", "pid", "device")


def _device(line: str) -> dict[str, Any]:
    """One ``#  Rank`` line as a dict (old lines have no group)."""
    m = _RANK_LINE.match(line)
    if m is None:
        return {"text": line[1:].strip()}
    numbers = {k: int(v) for k, v in m.groupdict().items() if k in _NUMERIC and v is not None}
    return {**numbers, "host": m["host"], "bus_id": m["bus_id"], "name": m["name"].strip()}


def _summary_value(text: str) -> Any:
    """``'59.7 '`` -> 59.7, ``'0 OK'`` -> 0; anything else stays text."""
    first = (text.split() or [""])[0]
    for kind in (int, float):
        try:
            return kind(first)
        except ValueError:
            pass
    return text.strip()


def _column_header(run: _Run, words: list[str], number: int) -> None:
    names = [_ALIASES.get(w, w) for w in words]
    times = [i for i, name in enumerate(names) if name == "time"]
    if len(times) != 2 or times[1] - times[0] < 3:
        raise ConfigError(
            "a column header without out-of-place and in-place 'time algbw busbw' columns",
            source=run.source,
            field=f"line {number}",
        )
    run.prefix = tuple(names[: times[0]])
    run.half_width = times[1] - times[0]
    run.trailing = 2 if names[-1] == "timestamp" else 0  # printed as "YYYY-mm-dd HH:MM:SS"
    run.metadata["layout"] = "new" if "#wrong" in names else "old"


def _data_line(run: _Run, line: str, number: int) -> list[_Half]:
    where = f"line {number}"
    tokens = line.split()
    if run.trailing:
        tokens = tokens[: -run.trailing]
    n_prefix = len(tokens) - 2 * run.half_width
    # Some versions print a blank root for collectives without one: "sum" then the times.
    blank_root = (
        n_prefix == len(run.prefix) - 1
        and run.prefix[-1:] == ("root",)
        and not tokens[n_prefix - 1].lstrip("-").isdigit()
    )
    if n_prefix != len(run.prefix) and not blank_root:
        raise ConfigError(
            f"expected {len(run.prefix) + 2 * run.half_width} columns "
            f"({' '.join(run.prefix)} and two halves of {run.half_width}), "
            f"found {len(tokens)}: {line.strip()!r}",
            source=run.source,
            field=where,
        )
    values = dict(zip(run.prefix, tokens[:n_prefix], strict=False))
    size = _size(values["size"], source=run.source, field=f"{where}: size")
    count = _whole(values.get("count", "0"), source=run.source, field=f"{where}: count")
    root = _whole(values.get("root", "-1"), source=run.source, field=f"{where}: root", signed=True)
    out = []
    for half, in_place in ((tokens[n_prefix : n_prefix + run.half_width], False),
                           (tokens[n_prefix + run.half_width :], True)):  # fmt: skip
        label = "in-place" if in_place else "out-of-place"
        for name, text in zip(("algbw", "busbw"), half[1:3], strict=True):
            _check_number(run, text, f"{where}: {label} {name}")
        error = half[3] if len(half) > 3 else "N/A"
        if error != "N/A":
            _check_number(run, error, f"{where}: {label} error")
        run.wrong.append(0.0 if error == "N/A" else abs(float(error)))
        time_s = seconds_from_us(half[0], source=run.source, field=f"{where}: {label} time")
        dtype, redop = values.get("type", "float"), values.get("redop", "")
        out.append(_Half(size, count, dtype, redop, root, in_place, time_s))
    return out


def _whole(text: str, *, source: str, field: str, signed: bool = False) -> int:
    """A printed integer; negative only where ``signed`` (a root of -1)."""
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"not an integer: {text!r}", source=source, field=field) from None
    if value < 0 and not signed:
        raise ConfigError(f"must be >= 0, got {value}", source=source, field=field)
    return value


def _size(text: str, *, source: str, field: str) -> int:
    """A printed size in bytes: whole, not negative, at most 2^53 (8 PiB)."""
    size = _whole(text, source=source, field=field)
    if size > MAX_SIZE_BYTES:
        raise ConfigError(f"must be at most 2^53 bytes (8 PiB), got {size}", source=source,
                          field=field)  # fmt: skip
    return size


def _check_number(run: _Run, text: str, where: str) -> None:
    try:
        float(text)
    except ValueError:
        raise ConfigError(f"not a number: {text!r}", source=run.source, field=where) from None


def seconds_from_us(text: str, *, source: str, field: str) -> float:
    """A printed time in microseconds as seconds, exact to the printed digits.

    >>> seconds_from_us("35.20", source="a.log", field="time")
    3.52e-05
    >>> seconds_from_us("N/A", source="a.log", field="line 9: time")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: a.log: line 9: time: not a number: 'N/A'
    >>> seconds_from_us("1e300", source="a.csv", field="line 3: time_us_oop")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: a.csv: line 3: time_us_oop: got 1e300 us (1e+294 s), more \
than a day (86400 s) for one call; is it in other units?
    """
    try:
        us = Decimal(text)
    except InvalidOperation:
        raise ConfigError(f"not a number: {text!r}", source=source, field=field) from None
    if not us.is_finite():
        raise ConfigError(f"not a finite number: {text!r}", source=source, field=field)
    if us <= 0:
        raise ConfigError(f"must be positive, got {text}", source=source, field=field)
    seconds = float(us.scaleb(-6))
    if not 0 < seconds < math.inf:  # 1e400 us is inf, 1e-400 us is 0 as a float
        raise ConfigError(f"out of range: {text} us is {seconds!r} s", source=source, field=field)
    return check_time_s(seconds, f"{text} us ({seconds:g} s)", source=source, field=field)


def _collective(source: str, given: str | None, printed: str | None) -> Collective:
    if given is not None:
        return Collective.parse(given)
    for name in (printed, source):
        if name is not None and (found := collective_from_name(name)) is not None:
            return found
    raise ConfigError("cannot tell the collective; pass --collective", source=source)


def _n_ranks(source: str, given: int | None, listed: set[int]) -> int:
    if given is not None and given < 1:
        raise ConfigError(f"the number of ranks must be >= 1, got {given}", source=source)
    if given is not None and listed and given != len(listed):
        raise ConfigError(
            f"{given} ranks given, but the log lists {len(listed)} ('# Rank' lines)",
            source=source,
        )
    found = given or len(listed) or n_ranks_from_name(source)
    if not found:
        raise ConfigError(
            "cannot tell the number of ranks (no '# Rank' lines); pass --ranks", source=source
        )
    return found


def parse_table_csv(
    text: str, *, source: str, collective: str | None = None, n_ranks: int | None = None
) -> tuple[Measurement, ...]:
    """Measurements from an nccl-tests table transcribed as CSV (:data:`TABLE_COLUMNS`).

    Each line gives an out-of-place and an in-place row (an empty time: that half was not
    in the source). The collective and the number of ranks come from the arguments, else
    from the file name (``nccl_allgather_8xA100_...``: all-gather on 8 ranks).

    >>> rows = parse_table_csv("size_bytes,count,type,redop,time_us_oop,algbw_oop,busbw_oop,"
    ...                        "time_us_ip,algbw_ip,busbw_ip\\n1024,256,float,sum,12.50,0.08,"
    ...                        "0.14,,,\\n", source="nccl_allreduce_8xA100.csv")
    >>> [(m.collective, m.n_ranks, m.size_bytes, m.time_s, m.in_place) for m in rows]
    [('allreduce', 8, 1024, 1.25e-05, False)]
    """
    c = _collective(source, collective, None)
    ranks = _n_ranks(source, n_ranks, set())
    reader = csv_rows(text, source)
    header = next(reader, (1, []))[1]
    if "size_bytes" not in header:
        raise ConfigError("missing column 'size_bytes'", source=source, field="line 1")
    rows = []
    for line, cells in reader:
        if not cells:
            continue
        where = f"line {line}"
        get = {k: v.strip() for k, v in zip(header, cells, strict=False)}
        size = _size(get["size_bytes"] or "0", source=source, field=f"{where}: size_bytes")
        count = _whole(get.get("count") or "0", source=source, field=f"{where}: count")
        for column, in_place in (("time_us_oop", False), ("time_us_ip", True)):
            if not get.get(column):
                continue
            rows.append(
                Measurement(
                    collective=c.value,
                    n_ranks=ranks,
                    size_bytes=size,
                    time_s=seconds_from_us(get[column], source=source, field=f"{where}: {column}"),
                    in_place=in_place,
                    count=count,
                    dtype=get.get("type") or "float",
                    redop=get.get("redop", ""),
                )
            )
    return tuple(rows)
