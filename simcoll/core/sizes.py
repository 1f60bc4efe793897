"""Message sizes as nccl-tests takes them: ``--sizes`` ranges and lists, rounded to whole
elements per rank."""

from __future__ import annotations

import re

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, UnitError
from simcoll.core.units import format_bytes, parse_size_bytes

__all__ = [
    "DTYPE_BYTES",
    "REDOPS",
    "TYPE_SIZE_BYTES",
    "align_size_bytes",
    "parse_sizes",
    "size_notes",
]

#: Element size nccl-tests uses for float, the type it prints by default.
TYPE_SIZE_BYTES = 4
#: nccl-tests' data types (``-d``) and their element sizes (``common.cu``'s test_typenames).
DTYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
               "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1,
               "f8e5m2": 1}  # fmt: skip
#: nccl-tests' reduction operations (``-o``).
REDOPS = ("sum", "prod", "max", "min", "avg")
_RANGE = re.compile(r"^([^:]+):([^:]+)(?::([^:]*))?$")
#: The unit a size ends with (``1GB``, ``8 G``, ``2 MiB``): decimal or binary.
_UNIT = re.compile(r"([A-Za-z]+)\s*$")
_DECIMAL = ("KB", "MB", "GB", "TB")
_BINARY = ("K", "M", "G", "T", "KiB", "MiB", "GiB", "TiB")
_POWERS = {"K": 1, "M": 2, "G": 3, "T": 4}  # K is 10^3 or 2^10, M the square, ...


def parse_sizes(text: str) -> tuple[list[int], bool]:
    """Parse ``--sizes``: a range ``MIN:MAX[:FACTOR]`` or a list ``A,B,C``.

    A range holds MIN, MIN x FACTOR, ... up to MAX (FACTOR 2 by default), as nccl-tests'
    ``-b MIN -e MAX -f FACTOR``; bare K/M/G suffixes are binary (8G = 8 GiB). Returns the
    sizes and whether they came from a range.

    >>> parse_sizes("8:64")
    ([8, 16, 32, 64], True)
    >>> parse_sizes("1K,1M")
    ([1024, 1048576], False)
    >>> parse_sizes("1K:1G:1.5")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: --sizes: range factor in '1K:1G:1.5' must be a whole number \
of 2 or more, got '1.5'
    >>> parse_sizes("1M:1K")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: --sizes: range '1M:1K' ends below its start
    """
    try:
        match = _RANGE.match(text.strip())
        if match is None:
            sizes = [parse_size_bytes(part.strip()) for part in text.split(",")]
            return sizes, False
        low, high = parse_size_bytes(match.group(1)), parse_size_bytes(match.group(2))
    except UnitError as error:
        raise ConfigError(f"--sizes: {error.message}") from None
    step = (match.group(3) or "2").strip()
    if not step.isdigit():
        raise ConfigError(
            f"--sizes: range factor in {text!r} must be a whole number of 2 or more, got {step!r}"
        )
    factor = int(step)
    if low < 1:
        raise ConfigError(f"--sizes: range {text!r} must start at 1 byte or more")
    if high < low:
        raise ConfigError(f"--sizes: range {text!r} ends below its start")
    if factor < 2:
        raise ConfigError(f"--sizes: range factor in {text!r} must be 2 or more")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes, True


def size_notes(text: str) -> list[str]:
    """What ``--sizes TEXT`` runs that its writer may not expect, one line each (none:
    ``[]``): a range whose last size falls short of its end, and decimal units (``GB``,
    10^9 B) beside binary ones (``G``, 2^30 B). ``text`` must parse (:func:`parse_sizes`).

    >>> for note in size_notes("1M:1GB"):
    ...     print(note)
    --sizes 1M:1GB: the range stops at 512 MiB (536870912 B); its end, 1GB, is 1000000000 B \
and the next size, 1 GiB, is past it
    --sizes 1M:1GB: GB is 10^9 B, G is 2^30 B: 1GB is 1000000000 B, 1G is 1073741824 B
    >>> size_notes("8:8G"), size_notes("1 KB:4 KB"), size_notes("1K,1M")
    ([], [], [])
    """
    text = text.strip()
    notes = [_short_range(text), _mixed_units(text)]
    return [f"--sizes {text}: {note}" for note in notes if note]


def _short_range(text: str) -> str | None:
    """Where the range ``text`` stops short of its end: the last size and the end."""
    sizes, is_range = parse_sizes(text)
    match = _RANGE.match(text)
    if not is_range or match is None:
        return None
    end_text = match.group(2).strip()
    end = parse_size_bytes(end_text)
    if sizes[-1] == end:
        return None
    last, after = sizes[-1], sizes[-1] * int((match.group(3) or "2").strip())
    shown = format_bytes(last) if format_bytes(last) == f"{last} B" else (
        f"{format_bytes(last)} ({last} B)")  # fmt: skip
    return (f"the range stops at {shown}; its end, {end_text}, is {end} B and the next "
            f"size, {format_bytes(after)}, is past it")  # fmt: skip


def _mixed_units(text: str) -> str | None:
    """What a decimal unit of ``text`` is beside the binary ones it also has."""
    units = [m.group(1) for part in re.split(r"[:,]", text) if (m := _UNIT.search(part))]
    decimal = [unit for unit in units if unit in _DECIMAL]
    if not decimal or not any(unit in _BINARY for unit in units):
        return None
    unit, power = decimal[0], _POWERS[decimal[0][0]]
    return (f"{unit} is 10^{3 * power} B, {unit[0]} is 2^{10 * power} B: 1{unit} is "
            f"{1000**power} B, 1{unit[0]} is {1024**power} B")  # fmt: skip


def align_size_bytes(
    collective: Collective, n_ranks: int, size_bytes: int, type_size_bytes: int = TYPE_SIZE_BYTES
) -> int:
    """Round a size down the way nccl-tests does: to whole elements (float by default) per
    block.

    >>> align_size_bytes(Collective.ALLGATHER, 3, 1000)
    996
    >>> align_size_bytes(Collective.ALLREDUCE, 3, 1001)
    1000
    >>> align_size_bytes(Collective.ALLGATHER, 3, 1000, type_size_bytes=8)
    984
    """
    per = 1 if collective.n_blocks(n_ranks) == 1 or collective is Collective.SENDRECV else n_ranks
    unit = per * type_size_bytes
    return size_bytes // unit * unit
