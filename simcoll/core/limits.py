"""The largest inputs simcoll accepts, and the checks that refuse larger ones in one line.

Each cap sits far above any real use and below what would overflow or exhaust a machine:

- :data:`MAX_SIZE_BYTES` (2^53 B, 8 PiB): sizes are whole bytes held in 64-bit integers
  and divided in floats; above 2^53 a float no longer holds every whole number, and near
  2^63 per-rank sums overflow;
- :data:`MAX_RANKS` (32,768): the most GPUs a topology builder makes;
- :data:`MAX_CHANNELS` (64): NCCL's ``MAXCHANNELS``;
- :data:`MAX_CHUNKS` (4,096) pieces per channel and block (the default is at most 64);
- :data:`MAX_IN_FLIGHT` (2^30) transfers in flight per connection: a window is a limit,
  not storage, so "unlimited" (10^6) is fine; NCCL has 8 slots;
- :data:`MAX_TRANSFERS` (2^24, 16.8 million) transfers in one schedule: about 10 GiB to
  simulate at the engine's ~0.5 KiB per transfer. Larger collectives run on the
  symmetric path, which keeps one rank's transfers;
- :data:`MAX_DEPENDENCIES` (2^25, 33.6 million) dependencies in one schedule: they are
  built as Python integers, about 36 B each (a direct all-reduce on 512 GPUs has 134
  million and reached a MemoryError at 5.5 GB: issue 29);
- :data:`MAX_LOG_BYTES` (512 MiB) of NCCL log read for a plan (``NCCL_DEBUG=INFO`` logs
  of thousands of ranks stay well below); a log's trees are checked to reach every rank
  once from one root, so their depth is below :data:`MAX_RANKS`;
- and below those, what this machine's memory holds: :func:`check_memory` refuses, before
  anything is built, a schedule whose transfers (:data:`TRANSFER_BYTES` each) and
  dependencies (:data:`DEPENDENCY_BYTES`) need more than the memory available now.

>>> check_size_bytes(2**60, "size_bytes")
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: size_bytes: must be at most 2^53 bytes (8 PiB), got \
1152921504606846976
>>> check_count(100_000, "n_channels", MAX_CHANNELS)
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: n_channels: must be at most 64, got 100000
"""

from __future__ import annotations

import numbers
import os

from simcoll.core.errors import ConfigError, LimitError

__all__ = [
    "DEPENDENCY_BYTES",
    "MAX_CHANNELS",
    "MAX_CHUNKS",
    "MAX_DEPENDENCIES",
    "MAX_IN_FLIGHT",
    "MAX_LOG_BYTES",
    "MAX_RANKS",
    "MAX_SIZE_BYTES",
    "MAX_TRANSFERS",
    "TRANSFER_BYTES",
    "available_memory_bytes",
    "check_count",
    "check_memory",
    "check_size_bytes",
    "whole_number",
]

MAX_SIZE_BYTES = 2**53
MAX_RANKS = 2**15
MAX_CHANNELS = 64
MAX_CHUNKS = 4096
MAX_IN_FLIGHT = 2**30
MAX_TRANSFERS = 2**24
MAX_DEPENDENCIES = 2**25
MAX_LOG_BYTES = 512 * 2**20


#: Peak memory per transfer of a schedule built and simulated on the general path:
#: 0.4 KiB measured on a 256-GPU ring (130,560 transfers, 98 MiB), 1.1 KiB on a 1,024-GPU
#: all-to-all (1.05 million transfers, 1,128 MiB); the larger is used.
TRANSFER_BYTES = 1152
#: Peak memory per dependency while a schedule is built (Python integers in lists, then
#: an int64 array): about 36 B (issue 29's direct all-reduce on 512 GPUs).
DEPENDENCY_BYTES = 40


def available_memory_bytes() -> int | None:
    """Memory this machine can give now without swapping (Linux's ``MemAvailable``), or
    its physical memory elsewhere; None where neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(n_transfers: int, n_dependencies: int, what: str) -> None:
    """Refuse ``what`` (a schedule, named for the message) in one line if its transfers
    and dependencies need more memory than is available now, before any is allocated.

    >>> try:
    ...     check_memory(2**40, 0, "alltoall/direct on 2 ranks")
    ... except LimitError as error:
    ...     print(error.message.split(", more than")[0])
    alltoall/direct on 2 ranks would need about 1152 TiB of memory to build and simulate \
(1099511627776 transfers)
    """
    needed = n_transfers * TRANSFER_BYTES + n_dependencies * DEPENDENCY_BYTES
    available = available_memory_bytes()
    if available is None or needed <= available:
        return
    counted = f", {n_dependencies} dependencies" if n_dependencies else ""
    raise LimitError(
        f"{what} would need about {_tib_or_gib(needed)} of memory to build and simulate "
        f"({n_transfers} transfers{counted}), more than the "
        f"{_tib_or_gib(available)} this machine has available; use fewer ranks, chunks or "
        "channels"
    )


def _tib_or_gib(size_bytes: int) -> str:
    if size_bytes >= 2**40:
        return f"{size_bytes / 2**40:.4g} TiB"
    return f"{size_bytes / 2**30:.4g} GiB"


def whole_number(value: object) -> int | None:
    """``value`` as an int if it is an integer (numpy's too, never a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def check_size_bytes(value: object, field: str) -> int:
    """A size in bytes: a whole number in ``0 .. MAX_SIZE_BYTES``; else ConfigError."""
    size = whole_number(value)
    if size is None:
        raise ConfigError(f"must be a whole number of bytes, got {value!r:.60}", field=field)
    if size < 0:
        raise ConfigError(f"must not be negative, got {size}", field=field)
    if size > MAX_SIZE_BYTES:
        raise ConfigError(f"must be at most 2^53 bytes (8 PiB), got {size}", field=field)
    return size


def check_count(value: object, field: str, maximum: int, *, minimum: int = 1) -> int:
    """A whole number in ``minimum .. maximum``; else ConfigError naming ``field``."""
    count = whole_number(value)
    if count is None:
        raise ConfigError(f"must be a whole number, got {value!r:.60}", field=field)
    if count < minimum:
        raise ConfigError(f"must be at least {minimum}, got {count}", field=field)
    if count > maximum:
        raise ConfigError(f"must be at most {maximum}, got {count}", field=field)
    return count
