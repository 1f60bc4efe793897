"""The largest inputs simcoll accepts, and the checks that refuse larger ones in one line.

Each cap sits far above any real use and below what would overflow or exhaust a machine:

- :data:`MAX_SIZE_BYTES` (2^53 B, 8 PiB): sizes are whole bytes held in 64-bit integers
  and divided in floats; above 2^53 a float no longer holds every whole number, and near
  2^63 per-rank sums overflow;
- :data:`MAX_RANKS` (131,072): the most GPUs a topology builder makes;
- :data:`MAX_CHANNELS` (64): NCCL's ``MAXCHANNELS``;
- :data:`MAX_CHUNKS` (4,096) pieces per channel and block (the default is at most 64);
- :data:`MAX_IN_FLIGHT` (2^30) transfers in flight per connection: a window is a limit,
  not storage, so "unlimited" (10^6) is fine; NCCL has 8 slots;
- :data:`MAX_TRANSFERS` (2^24, 16.8 million) transfers in one schedule: about 10 GiB to
  simulate at the engine's ~0.5 KiB per transfer. Larger collectives run on the
  symmetric path, which keeps one rank's transfers;
- :data:`MAX_MEETING_TRANSFERS` (2^23, 8.4 million) transfers in the one run where the
  calls of a training step or session that meet on links share them: that run holds
  each transfer with its call's spans and dependencies in the step's graph, measured at
  0.7-1.3 KiB a transfer (Llama 3 405B on 512 H100, ``validation/training_torchtitan_h100.py``:
  4.7 million in 4.8 GB, 7.2 million in 5.3 GB; its interleaved row grew to 21 GB under the
  single schedule's cap), so a run stays under about 8 GB, the 405B bench's target;
- :data:`MAX_DEPENDENCIES` (2^25, 33.6 million) dependencies in one schedule: they are
  built as Python integers, about 36 B each (a direct all-reduce on 512 GPUs has 134
  million and reached a MemoryError at 5.5 GB: issue 29);
- :data:`MAX_LOG_BYTES` (512 MiB) of NCCL log read for a plan (``NCCL_DEBUG=INFO`` logs
  of thousands of ranks stay well below); a log's trees are checked to reach every rank
  once from one root, so their depth is below :data:`MAX_RANKS`;
- a model's shape, checked before a step builds anything (:data:`MAX_LAYERS`,
  :data:`MAX_HIDDEN_SIZE`, :data:`MAX_VOCAB_SIZE`, :data:`MAX_EXPERTS`,
  :data:`MAX_PARAMETERS`), and the calls one step or session makes
  (:data:`MAX_STEP_CALLS`): ``n_layers = 50000000`` grew past 24 GB and
  ``100000000000`` raised a MemoryError before any estimate (issue 41);
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

try:
    import resource
except ImportError:  # pragma: no cover - not a Unix: no address-space limit to read
    resource = None  # type: ignore[assignment]

from simcoll.core.errors import ConfigError, LimitError

__all__ = [
    "DEPENDENCY_BYTES",
    "MAX_CHANNELS",
    "MAX_CHUNKS",
    "MAX_DEPENDENCIES",
    "MAX_EXPERTS",
    "MAX_HIDDEN_SIZE",
    "MAX_IN_FLIGHT",
    "MAX_LAYERS",
    "MAX_LOG_BYTES",
    "MAX_MEETING_TRANSFERS",
    "MAX_PARAMETERS",
    "MAX_RANKS",
    "MAX_SIZE_BYTES",
    "MAX_STEP_CALLS",
    "MAX_TIME_S",
    "MAX_TRANSFERS",
    "MAX_VOCAB_SIZE",
    "MIN_BANDWIDTH_BYTES_PER_S",
    "TRANSFER_BYTES",
    "available_memory_bytes",
    "check_count",
    "check_memory",
    "check_size_bytes",
    "whole_number",
]

MAX_SIZE_BYTES = 2**53
MAX_RANKS = 2**17
MAX_CHANNELS = 64
MAX_CHUNKS = 4096
MAX_IN_FLIGHT = 2**30
MAX_TRANSFERS = 2**24
MAX_MEETING_TRANSFERS = 2**23
MAX_DEPENDENCIES = 2**25
MAX_LOG_BYTES = 512 * 2**20
#: The slowest link simcoll simulates: 1 bit/s (0.125 B/s), far below any link a standard
#: defines (a 300-baud modem), and fast enough that the largest call (2^53 B) takes a time
#: the simulated clock holds. Links of 1e-300 B/s made times past a float (issue 41).
MIN_BANDWIDTH_BYTES_PER_S = 0.125
#: The longest latency of a link, and the longest compute span of a workload (1e9 s, 32
#: years): far above any real one (a light-hour is 3,600 s; a training run takes months),
#: far below where the clock's ticks of 2^-50 s overflow a float (about 1e293 s), where a
#: span or latency of 1e300 s printed a RuntimeWarning and "the graph cannot finish"
#: (issue 41).
MAX_TIME_S = 1e9

#: Layers of a model (4,096). Llama 3 405B has 126, GPT-3 175B 96, PaLM 540B 118; the
#: deepest transformer published (DeepNet, Wang et al. 2022) has 1,000. A step's calls
#: grow with the layers (a pass's tensor-parallel calls, one gradient bucket per layer).
MAX_LAYERS = 2**12
#: Hidden and FFN width of a model (1,048,576): 64x Llama 3 405B's hidden 16,384 and 14x
#: the widest public FFN (PaLM 540B's 73,728); a layer's activations and weights, the
#: sizes of its calls, grow with it.
MAX_HIDDEN_SIZE = 2**20
#: Vocabulary of a model (16.8 million): 130x Llama 3's 128,256 and 65x the largest in
#: common use (Gemma's 256,000).
MAX_VOCAB_SIZE = 2**24
#: Experts of a mixture of experts (65,536): 32x Switch-C's 2,048, 170x DeepSeek-V3's 256.
MAX_EXPERTS = 2**16
#: Parameters of a model (2^50, 1.1 x 10^15): 1,000x the largest public dense models
#: (about 10^12), and low enough that all of them in fp32 (4 B each; a step's gradient
#: and parameter calls carry at most that) stay under :data:`MAX_SIZE_BYTES`.
MAX_PARAMETERS = 2**50
#: Calls (collectives, copies and compute spans, each repetition counted) one training
#: step or session makes (16.8 million): 28x the 592,000 of Llama 3 405B on 144 H100s
#: (TP 8, PP 9, 256 micro-batches), which take 2 s to record and 150 MB to estimate
#: (about 250 B each); at the cap, about 60 s and 4 GiB before any is simulated.
MAX_STEP_CALLS = 2**24


#: Peak memory per transfer of a schedule built and simulated on the general path:
#: 0.4 KiB measured on a 256-GPU ring (130,560 transfers, 98 MiB), 1.1 KiB on a 1,024-GPU
#: all-to-all (1.05 million transfers, 1,128 MiB); the larger is used.
TRANSFER_BYTES = 1152
#: Peak memory per dependency while a schedule is built (Python integers in lists, then
#: an int64 array): about 36 B (issue 29's direct all-reduce on 512 GPUs).
DEPENDENCY_BYTES = 40


def available_memory_bytes() -> int | None:
    """Memory this process can take now: what the machine gives without swapping (Linux's
    ``MemAvailable``, else its physical memory), and no more than its address-space limit
    leaves (``ulimit -v``: past it an allocation raises MemoryError, which a 15.7-million
    transfer schedule did under a 4 GiB limit, issue 41); None where neither can be read."""
    found = _machine_available_bytes()
    left = _address_space_left_bytes()
    if left is not None:
        found = left if found is None else min(found, left)
    return found


def _machine_available_bytes() -> int | None:
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


def _address_space_left_bytes() -> int | None:
    """The address space this process may still map under its soft ``RLIMIT_AS``, or None
    where it has no such limit (or the platform none to read)."""
    if resource is None:  # pragma: no cover - not a Unix
        return None
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    return max(0, soft - _mapped_bytes())


def _mapped_bytes() -> int:
    """The address space this process maps now (``VmSize``), 0 where it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


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
