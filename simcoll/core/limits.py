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
  million and reached a MemoryError at 5.5 GB: issue 29).

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

from simcoll.core.errors import ConfigError

__all__ = [
    "MAX_CHANNELS",
    "MAX_CHUNKS",
    "MAX_DEPENDENCIES",
    "MAX_IN_FLIGHT",
    "MAX_RANKS",
    "MAX_SIZE_BYTES",
    "MAX_TRANSFERS",
    "check_count",
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
