"""Measured runs as data: the measurement CSV, its sidecar JSON, and a crash-safe writer.

A measurement file (DESIGN, "Contracts other parts rely on") is a CSV with the columns of
:data:`MEASUREMENT_COLUMNS`, in that order. Reading needs only the first four
(``collective,n_ranks,size_bytes,time_s``); the bandwidth columns are written for people
and plots and are recomputed from size and time on reading
(:func:`simcoll.output.results.bandwidths`).
Beside ``runs.csv`` lies ``runs.json``, the sidecar: a free JSON object describing the
system, the software versions and the environment.

:func:`simcoll.calibrate.read.read_measurements` reads these files and also what real
machines print: nccl-tests text logs and tables (:mod:`simcoll.calibrate.nccltests`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.files import TOO_DEEP, check_nesting, read_input_text
from simcoll.core.limits import MAX_RANKS, MAX_SIZE_BYTES
from simcoll.output.results import bandwidths

__all__ = [
    "MAX_TIME_S",
    "MEASUREMENT_COLUMNS",
    "REQUIRED_COLUMNS",
    "Measurement",
    "MeasurementSet",
    "MeasurementWriter",
    "check_time_s",
    "csv_rows",
    "measurement_from_cells",
    "parse_measurement_csv",
    "read_sidecar",
    "read_text",
    "select_rows",
    "sidecar_path",
    "to_csv_text",
    "write_sidecar",
]

#: The columns of a measurement CSV, in this order (always all of them when writing).
MEASUREMENT_COLUMNS = (
    "collective",
    "n_ranks",
    "size_bytes",
    "time_s",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
    "in_place",
    "count",
    "dtype",
    "redop",
    "root",
)
#: The columns a measurement CSV must have to be read.
REQUIRED_COLUMNS = MEASUREMENT_COLUMNS[:4]
#: The longest time one measured call may take: a day. A longer one is a slip of units or
#: digits (``1e300`` us), not a run, and would pass for a point the fit must reach.
MAX_TIME_S = 86_400.0


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One measured time: a collective of ``size_bytes`` (nccl-tests ``size``) on n ranks.

    ``collective`` is the canonical simcoll name (``Collective(...).value``); ``count``,
    ``dtype``, ``redop`` and ``root`` are what nccl-tests prints beside the size (0, ``""``
    and -1 when unknown).

    >>> m = Measurement(collective="allgather", n_ranks=4, size_bytes=4000, time_s=1e-6)
    >>> m.algbw_bytes_per_s, m.busbw_bytes_per_s
    (4000000000.0, 3000000000.0)
    """

    collective: str
    n_ranks: int
    size_bytes: int
    time_s: float
    in_place: bool = False
    count: int = 0
    dtype: str = "float"
    redop: str = ""
    root: int = -1

    @property
    def algbw_bytes_per_s(self) -> float:
        """``size_bytes / time_s``, the nccl-tests algorithm bandwidth."""
        return bandwidths(self.collective, self.n_ranks, self.size_bytes, self.time_s)[0]

    @property
    def busbw_bytes_per_s(self) -> float:
        """The algorithm bandwidth times the nccl-tests factor of the collective."""
        return bandwidths(self.collective, self.n_ranks, self.size_bytes, self.time_s)[1]


@dataclass(frozen=True)
class MeasurementSet:
    """The rows of one file, with its metadata (sidecar JSON or parsed log header)."""

    source: str
    rows: tuple[Measurement, ...]
    metadata: dict[str, Any] = field(default_factory=dict)


def sidecar_path(path: str | Path) -> Path:
    """Where the sidecar JSON of a measurement file lies: the same path ending ``.json``.

    >>> sidecar_path("runs/a100.csv").as_posix()
    'runs/a100.json'
    >>> sidecar_path("/")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: /: is a directory, not a file
    """
    named = Path(path)
    if not named.name:  # "/", ".": pathlib's ValueError ("has an empty name") was a traceback
        raise ConfigError("is a directory, not a file", source=str(path))
    return named.with_suffix(".json")


def write_sidecar(path: str | Path, metadata: Mapping[str, Any]) -> Path:
    """Write ``metadata`` as the sidecar JSON of the measurement file ``path``; return its path.

    The file is replaced atomically, so a reader never sees half of it.
    """
    target = sidecar_path(path)
    try:
        text = json.dumps(dict(metadata), indent=2) + "\n"
    except (TypeError, ValueError) as e:
        raise ConfigError(f"metadata is not JSON-serialisable: {e}", source=str(target)) from None
    partial = target.with_name(target.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, target)
    return target


def read_sidecar(path: str | Path) -> dict[str, Any]:
    """The sidecar of the measurement file ``path`` as a dict; ``{}`` when there is none."""
    target = sidecar_path(path)
    if not target.exists():
        return {}
    try:
        data = json.loads(read_input_text(target))
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"not valid JSON: {e.msg} (line {e.lineno} column {e.colno})", source=str(target)
        ) from None
    except RecursionError:
        raise ConfigError(TOO_DEEP, source=str(target)) from None
    except ValueError as e:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ConfigError(f"not valid JSON: {str(e).split(';')[0]}", source=str(target)) from None
    check_nesting(data, source=str(target))
    if not isinstance(data, dict):
        raise ConfigError(f"expected a JSON object, got {type(data).__name__}", source=str(target))
    return data


def to_csv_text(rows: Iterable[Measurement]) -> str:
    """Rows as measurement CSV text, header first. Floats keep full precision.

    >>> print(to_csv_text([Measurement(collective="allreduce", n_ranks=2, size_bytes=8,
    ...                                time_s=2e-6, in_place=True)]), end="")
    collective,n_ranks,size_bytes,time_s,algbw_bytes_per_s,busbw_bytes_per_s,in_place,count,\
dtype,redop,root
    allreduce,2,8,2e-06,4000000.0,4000000.0,true,0,float,,-1
    """
    return _csv_line(MEASUREMENT_COLUMNS) + "".join(_csv_line(_cells(m)) for m in rows)


class MeasurementWriter:
    """Append measurements to a CSV as they are measured; a crash keeps every row before it.

    The header is written when the file is new or empty; each :meth:`append` writes one
    line, flushes it and fsyncs the file. Reopening a file that a crash left with half a
    line drops that half line. The sidecar is written first when ``metadata`` is given.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "runs.csv"
    >>> with MeasurementWriter(out, metadata={"gpu": "none"}) as w:
    ...     w.append(Measurement(collective="allreduce", n_ranks=2, size_bytes=8, time_s=1e-5))
    >>> [m.time_s for m in parse_measurement_csv(out.read_text(), str(out))], read_sidecar(out)
    ([1e-05], {'gpu': 'none'})
    """

    def __init__(self, path: str | Path, *, metadata: Mapping[str, Any] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if metadata is not None:
            write_sidecar(self.path, metadata)
        fresh = _prepare_for_append(self.path)
        self._file: TextIO = self.path.open("a", encoding="utf-8", newline="")
        if fresh:
            self._write(_csv_line(MEASUREMENT_COLUMNS))

    def append(self, m: Measurement) -> None:
        """Write one row, flush it and fsync the file."""
        self._write(_csv_line(_cells(m)))

    def close(self) -> None:
        """Close the file (every row is already on disk)."""
        self._file.close()

    def __enter__(self) -> MeasurementWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _write(self, line: str) -> None:
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())


def read_text(path: str | Path) -> str:
    """The UTF-8 text of a measurement file (a regular file of bounded size)."""
    return read_input_text(path)


def _prepare_for_append(path: Path) -> bool:
    """Drop a half line a crash left at the end; refuse another header. True: no rows yet."""
    if not path.exists():
        return True
    with path.open("rb+") as f:
        data = f.read()
        if not data.endswith(b"\n"):
            data = data[: data.rfind(b"\n") + 1]
            f.truncate(len(data))
    if not data:
        return True
    first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()
    if first != ",".join(MEASUREMENT_COLUMNS):
        raise ConfigError(
            f"header is {first!r}, not simcoll's measurement columns; will not append to it",
            source=str(path),
            field="line 1",
        )
    return False


def _csv_line(cells: Iterable[object]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def _cells(m: Measurement) -> list[object]:
    return [
        m.collective,
        m.n_ranks,
        m.size_bytes,
        repr(float(m.time_s)),
        repr(m.algbw_bytes_per_s),
        repr(m.busbw_bytes_per_s),
        "true" if m.in_place else "false",
        m.count,
        m.dtype,
        m.redop,
        m.root,
    ]


def csv_rows(text: str, source: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, cells)`` of CSV text; a malformed line (a cell of more than 131,072
    characters, a NUL) is a one-line ConfigError naming the file and the line."""
    reader = csv.reader(io.StringIO(text))
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise ConfigError(
                f"not a CSV line: {error}", source=source, field=f"line {reader.line_num}"
            ) from None
        yield reader.line_num, cells


def parse_measurement_csv(text: str, source: str) -> tuple[Measurement, ...]:
    reader = csv_rows(text, source)
    header = [name.strip() for name in next(reader, (1, []))[1]]
    if not set(REQUIRED_COLUMNS) & set(header):
        raise ConfigError(
            f"neither a measurement CSV ({','.join(REQUIRED_COLUMNS)}) nor an nccl-tests table "
            f"CSV (size_bytes,count,type,redop,time_us_oop,...); its header is "
            f"{','.join(header)!r}",
            source=source,
            field="line 1",
        )
    for name in REQUIRED_COLUMNS:
        if name not in header:
            raise ConfigError(
                f"missing column {name!r}; a measurement CSV needs {','.join(REQUIRED_COLUMNS)}",
                source=source,
                field="line 1",
            )
    rows = []
    for line, cells in reader:
        if not any(c.strip() for c in cells):
            continue
        values = dict(zip(header, (c.strip() for c in cells), strict=False))
        try:
            rows.append(measurement_from_cells(values))
        except ConfigError as e:
            where = f"line {line}" + (f": {e.field}" if e.field else "")
            raise ConfigError(e.message, source=source, field=where) from None
    return tuple(rows)


def measurement_from_cells(values: Mapping[str, str]) -> Measurement:
    """A checked :class:`Measurement` from the text cells of one CSV row.

    Raises :class:`ConfigError` whose ``field`` is the column at fault.

    >>> measurement_from_cells({"collective": "allreduce", "n_ranks": "8",
    ...                         "size_bytes": "1024", "time_s": "abc"})
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: time_s: not a number: 'abc'
    """
    name = _required(values, "collective")
    try:
        collective = Collective.parse(name).value
    except ConfigError as e:
        raise ConfigError(e.message, field="collective") from None
    n_ranks = _integer("n_ranks", _required(values, "n_ranks"))
    size_bytes = _integer("size_bytes", _required(values, "size_bytes"))
    time_s = _number("time_s", _required(values, "time_s"))
    if n_ranks < 1:
        raise ConfigError(f"must be >= 1, got {n_ranks}", field="n_ranks")
    if size_bytes < 0:
        raise ConfigError(f"must be >= 0, got {size_bytes}", field="size_bytes")
    if size_bytes > MAX_SIZE_BYTES:
        raise ConfigError(f"must be at most 2^53 bytes (8 PiB), got {size_bytes}",
                          field="size_bytes")  # fmt: skip
    if n_ranks > MAX_RANKS:
        raise ConfigError(f"must be at most {MAX_RANKS}, got {n_ranks}", field="n_ranks")
    check_time_s(time_s, repr(time_s), field="time_s")
    return Measurement(
        collective=collective,
        n_ranks=n_ranks,
        size_bytes=size_bytes,
        time_s=time_s,
        in_place=_boolean(values.get("in_place", "")),
        count=_integer("count", values.get("count") or "0"),
        dtype=values.get("dtype") or "float",
        redop=values.get("redop", ""),
        root=_integer("root", values.get("root") or "-1"),
    )


def check_time_s(time_s: float, text: str, *, source: str | None = None, field: str) -> float:
    """``time_s`` if it can be a measured call's time: positive, finite and at most
    :data:`MAX_TIME_S`; else a one-line ConfigError naming ``source`` and ``field``
    (``text``: the time as the file wrote it).

    >>> check_time_s(1e294, "1e300 us (1e+294 s)", source="a.csv", field="line 3: time_us_oop")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: a.csv: line 3: time_us_oop: got 1e300 us (1e+294 s), more \
than a day (86400 s) for one call; is it in other units?
    """
    if not math.isfinite(time_s):
        raise ConfigError(f"not a finite number: {text}", source=source, field=field)
    if time_s <= 0:
        raise ConfigError(f"must be positive, got {text}", source=source, field=field)
    if time_s > MAX_TIME_S:
        raise ConfigError(f"got {text}, more than a day ({MAX_TIME_S:g} s) for one call; is it "
                          "in other units?", source=source, field=field)  # fmt: skip
    return time_s


def _required(values: Mapping[str, str], name: str) -> str:
    text = values.get(name, "")
    if not text:
        raise ConfigError("missing value", field=name)
    return text


def _integer(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"not an integer: {text!r}", field=name) from None


def _number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"not a number: {text!r}", field=name) from None
    if not math.isfinite(value):
        raise ConfigError(f"not a finite number: {text!r}", field=name)
    return value


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("", "false", "0", "no"):
        return False
    if lowered in ("true", "1", "yes"):
        return True
    raise ConfigError(f"not true or false: {text!r}", field="in_place")


def select_rows(
    rows: tuple[Measurement, ...], source: str, collective: str | None, n_ranks: int | None
) -> tuple[Measurement, ...]:
    """The rows of ``collective`` on ``n_ranks`` (each when given); none left is an error."""
    wanted = Collective.parse(collective).value if collective is not None else None
    chosen = tuple(
        m
        for m in rows
        if (wanted is None or m.collective == wanted) and (n_ranks is None or m.n_ranks == n_ranks)
    )
    if rows and not chosen:
        asked = f"{wanted or 'any collective'} on {n_ranks or 'any number of'} ranks"
        has = ", ".join(sorted({f"{m.collective} on {m.n_ranks}" for m in rows}))
        raise ConfigError(f"no rows for {asked}; the file has {has} ranks", source=source)
    return chosen
