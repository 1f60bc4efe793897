"""Units: simcoll computes in bytes, seconds and bytes per second, as floats or ints.

Identifiers carry their unit (``size_bytes``, ``latency_s``, ``bandwidth_bytes_per_s``).
Quantities written by people (``"450 GB/s"``, ``"400 Gbit/s"``, ``"0.7 us"``, ``"256 MiB"``)
are parsed here and only here, at the edge (TOML files and command-line arguments).

Conventions:

- ``KB``, ``MB``, ``GB``, ``TB`` are powers of ten; ``KiB``, ``MiB``, ``GiB``, ``TiB`` are
  powers of two. Bits are spelled out: ``Gbit/s``. ``Gbps``, ``GBps`` and ``Gb/s`` are
  refused as ambiguous.
- Message sizes on the command line follow nccl-tests: a bare suffix ``K``, ``M``, ``G``,
  ``T`` is binary (``8G`` is 8 GiB), see :func:`parse_size_bytes`.

>>> parse_bandwidth_bytes_per_s("450 GB/s")
450000000000.0
>>> parse_bandwidth_bytes_per_s("400 Gbit/s")
50000000000.0
>>> parse_time_s("0.7 us")
7e-07
>>> parse_size_bytes("256 MiB")
268435456
>>> parse_size_bytes("8G")
8589934592
>>> parse_flops_per_s("989 TFLOP/s")
989000000000000.0
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Literal

from simcoll.core.errors import UnitError
from simcoll.core.limits import MAX_SIZE_BYTES

__all__ = [
    "GB",
    "KB",
    "MB",
    "TB",
    "Gbit",
    "GiB",
    "KiB",
    "MiB",
    "TiB",
    "bit",
    "format_bandwidth",
    "format_bytes",
    "format_duration",
    "format_time",
    "ms",
    "ns",
    "parse_bandwidth_bytes_per_s",
    "parse_flops_per_s",
    "parse_quantity",
    "parse_size_bytes",
    "parse_time_s",
    "s",
    "us",
]

B = 1
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
bit = 1 / 8
Gbit = 1e9 * bit
s = 1.0
ms, us, ns = 1e-3, 1e-6, 1e-9

_BYTE_UNITS: dict[str, int] = {
    "B": B,
    "KB": KB, "MB": MB, "GB": GB, "TB": TB,
    "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB,
}  # fmt: skip
# nccl-tests' -b/-e flags: bare K/M/G/T suffixes are binary.
_NCCL_TESTS_SUFFIXES: dict[str, int] = {"": 1, "K": KiB, "M": MiB, "G": GiB, "T": TiB}
_BIT_UNITS: dict[str, float] = {
    "bit": bit, "Kbit": 1e3 * bit, "Mbit": 1e6 * bit, "Gbit": 1e9 * bit, "Tbit": 1e12 * bit,
}  # fmt: skip
_FLOP_UNITS: dict[str, float] = {
    "FLOP/s": 1.0, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15,
}  # fmt: skip
_TIME_UNITS: dict[str, float] = {"s": s, "ms": ms, "us": us, "µs": us, "ns": ns, "ps": 1e-12}
_AMBIGUOUS = {"bps", "Kbps", "Mbps", "Gbps", "Tbps", "Bps", "KBps", "MBps", "GBps", "TBps",
              "b/s", "Kb/s", "Mb/s", "Gb/s", "Tb/s"}  # fmt: skip

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\s\d.+-].*?)?\s*$")

Dimension = Literal["bytes", "seconds", "bytes_per_s", "flops_per_s"]


def _split(text: str) -> tuple[float, str]:
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitError(f"cannot read {text!r} as a number with a unit")
    return float(match.group(1)), match.group(2) or ""


def parse_quantity(text: str | float, *, expect: Dimension) -> float:
    """Parse a quantity string into SI base units (bytes, seconds or bytes per second).

    A plain number (or a string with no unit) is taken to be in base units already.

    Raises
    ------
    UnitError
        If the text does not parse, has a unit of another dimension, an ambiguous unit
        (``Gbps``), or a value that is NaN or infinite.

    >>> parse_quantity("1.5 KiB", expect="bytes")
    1536.0
    >>> parse_quantity("2 ms", expect="seconds")
    0.002
    >>> parse_quantity("25 Gbit/s", expect="bytes_per_s")
    3125000000.0
    >>> parse_quantity("25 Gbps", expect="bytes_per_s")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.UnitError: unit 'Gbps' is ambiguous (bits or bytes?): write '25 Gbit/s' or \
'25 GB/s'
    """
    if isinstance(text, bool):
        raise UnitError(f"expected a quantity in {expect}, got a boolean")
    if isinstance(text, int | float):
        value, unit = float(text), ""
    elif isinstance(text, str):
        value, unit = _split(text)
    else:
        raise UnitError(f"expected a quantity in {expect}, got {type(text).__name__}")
    if not math.isfinite(value):
        raise UnitError(f"{text!r} is not a finite number")
    if unit in _AMBIGUOUS:
        stem = unit.removesuffix("/s").removesuffix("ps").removesuffix("b").removesuffix("B")
        raise UnitError(
            f"unit {unit!r} is ambiguous (bits or bytes?): "
            f"write '{_fmt_number(value)} {stem}bit/s' or '{_fmt_number(value)} {stem}B/s'"
        )
    return value * _scale(unit, expect, text)


def _scale(unit: str, expect: Dimension, text: object) -> float:
    if unit == "":
        return 1.0
    if expect == "bytes" and unit in _BYTE_UNITS:
        return float(_BYTE_UNITS[unit])
    if expect == "seconds" and unit in _TIME_UNITS:
        return _TIME_UNITS[unit]
    if expect == "flops_per_s" and unit in _FLOP_UNITS:
        return _FLOP_UNITS[unit]
    if expect == "bytes_per_s" and unit.endswith("/s"):
        per = unit.removesuffix("/s")
        if per in _BYTE_UNITS:
            return float(_BYTE_UNITS[per])
        if per in _BIT_UNITS:
            return _BIT_UNITS[per]
    examples = {"bytes": "'256 MiB', '1 GB'", "seconds": "'0.7 us', '2 ms'",
                "bytes_per_s": "'450 GB/s', '400 Gbit/s'",
                "flops_per_s": "'989 TFLOP/s', '2.25 PFLOP/s'"}  # fmt: skip
    raise UnitError(
        f"unknown unit {unit!r} in {text!r}; expected {expect}, e.g. {examples[expect]}"
    )


def _fmt_number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def parse_size_bytes(text: str | int) -> int:
    """Parse a message or buffer size into a whole number of bytes.

    Accepts unit strings (``"256 MiB"``, ``"1 GB"``) and nccl-tests' shorthand, where a bare
    ``K``, ``M``, ``G`` or ``T`` is a power of two (``"8G"`` is 8 GiB).

    Raises
    ------
    UnitError
        If the size does not parse, is negative, is not a whole number of bytes, or is
        more than :data:`~simcoll.core.limits.MAX_SIZE_BYTES`.

    >>> parse_size_bytes("1K"), parse_size_bytes("1 KB"), parse_size_bytes("1 KiB")
    (1024, 1000, 1024)
    >>> parse_size_bytes("0.5 B")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.UnitError: size '0.5 B' is not a whole number of bytes
    """
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise UnitError(f"expected a size in bytes, got {text!r}")
    if isinstance(text, int):
        size = Fraction(text)
    else:
        match = _QUANTITY.match(text)
        if match is None:
            raise UnitError(f"cannot read {text!r} as a number with a unit")
        value, unit = float(match.group(1)), match.group(2) or ""
        if not math.isfinite(value):
            raise UnitError(f"{text!r} is not a finite number")
        if unit in _AMBIGUOUS:
            parse_quantity(text, expect="bytes")  # raises the ambiguity message
        scale = _NCCL_TESTS_SUFFIXES.get(unit) or _scale(unit, "bytes", text)
        # Exact decimal arithmetic: "4.1 MB" is 4100000 bytes, not 4099999.9999999995.
        size = Fraction(match.group(1)) * Fraction(scale)
    if size < 0:
        raise UnitError(f"size {text!r} is negative")
    if size.denominator != 1:
        raise UnitError(f"size {text!r} is not a whole number of bytes")
    if size > MAX_SIZE_BYTES:
        raise UnitError(f"size {text!r} is more than 2^53 bytes (8 PiB), the largest simcoll takes")
    return int(size)


def parse_time_s(text: str | float) -> float:
    """Parse a duration into seconds. ``"0.7 us"`` -> 7e-07."""
    return parse_quantity(text, expect="seconds")


def parse_bandwidth_bytes_per_s(text: str | float) -> float:
    """Parse a bandwidth into bytes per second. ``"400 Gbit/s"`` -> 5e10."""
    return parse_quantity(text, expect="bytes_per_s")


def parse_flops_per_s(text: str | float) -> float:
    """A compute rate (``"989 TFLOP/s"``) in floating-point operations per second."""
    return parse_quantity(text, expect="flops_per_s")


def format_bytes(size_bytes: float) -> str:
    """Format a byte count with binary prefixes, as a plot axis or a table would.

    >>> format_bytes(8), format_bytes(1536), format_bytes(2**30)
    ('8 B', '1.5 KiB', '1 GiB')
    """
    value = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.4g} {unit}"
        value /= 1024
    return f"{value:.4g} TiB"


def format_time(time_s: float) -> str:
    """Format a duration with the largest unit that keeps it above 1.

    >>> format_time(2.5e-6), format_time(0.0125), format_time(3.0)
    ('2.5 us', '12.5 ms', '3 s')
    """
    for unit, scale in (("s", 1.0), ("ms", ms), ("us", us)):
        if abs(time_s) >= scale:
            return f"{time_s / scale:.4g} {unit}"
    return f"{time_s / ns:.4g} ns"


def format_duration(seconds: float) -> str:
    """A wall-clock duration in the unit that reads best (days, h, min, or :func:`format_time`).

    >>> format_duration(2013.0), format_duration(9000.0), format_duration(3e5)
    ('33.5 min', '2.5 h', '3.47 days')
    >>> format_duration(0.5)
    '500 ms'
    """
    for unit_s, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if seconds >= unit_s:
            return f"{seconds / unit_s:.3g} {unit}"
    return format_time(seconds)


def format_bandwidth(bandwidth_bytes_per_s: float) -> str:
    """Format a bandwidth in GB/s (10^9 bytes per second), as nccl-tests prints it.

    >>> format_bandwidth(4.5e11)
    '450 GB/s'
    """
    return f"{bandwidth_bytes_per_s / GB:.4g} GB/s"
