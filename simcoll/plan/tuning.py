"""Per-size tuning: how many channels a call uses, how it is cut into pieces, how many
pieces are in flight, and which protocols an algorithm runs with.

For the ring and tree algorithms on a plan this is NCCL's own per-call tuning
(``enqueue.cc:getAlgoInfo``/``topoGetAlgoInfo``, ``calcCollChunking``, ``init.cc:
computeBuffSizes``; NCCL 2.18 to 2.28, notes in :func:`tune_call`); the other algorithms
cut transfers to about :data:`CHUNK_TARGET_BYTES`. The knobs NCCL users set in the
environment (``NCCL_MIN_NCHANNELS``, ``NCCL_MAX_NCHANNELS``, ``NCCL_BUFFSIZE``,
``NCCL_ALGO``, ``NCCL_PROTO``) are :class:`NcclKnobs`, given explicitly: simcoll never
reads the environment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, UnitError
from simcoll.core.protocols import PROTOCOLS, Protocol, parse_protocol
from simcoll.core.units import parse_size_bytes

__all__ = [
    "CHUNK_TARGET_BYTES",
    "MAX_DEFAULT_CHUNKS",
    "CallTuning",
    "NcclKnobs",
    "nvls_chunks",
    "nvls_tree_sm_bus_bandwidth_bytes_per_s",
    "parse_nccl_knobs",
    "protocol_allowed",
    "protocols_for",
    "ring_chunks",
    "runnable_with",
    "tune_call",
]

#: NCCL's Simple protocol moves a channel's data in steps of 512 KiB (a 4 MiB buffer in
#: NCCL_STEPS = 8 slots, src/include/device.h); simcoll cuts transfers to about that size
#: when the caller does not choose ``n_chunks``, so pipelining is NCCL-like by default.
CHUNK_TARGET_BYTES = 512 * 2**10
MAX_DEFAULT_CHUNKS = 64


ALL_PROTOCOLS = ("LL", "LL128", "simple")


# NCCL runs NVLS with the Simple protocol only (state-of-the-art notes, section 3.2).
PROTOCOLS_OF: dict[str, tuple[str, ...]] = {
    "nvls": ("simple",),
    "nvls_tree": ("simple",),
    "sharp": ("simple",),
    "collnet_direct": ("simple",),  # all_reduce.h: CollNet runs NCCL_PROTO_SIMPLE only
    "collnet_chain": ("simple",),
}


def protocol_allowed(protocol: Protocol | None, algorithm: str) -> bool:
    """Whether ``algorithm`` runs with ``protocol`` (None or a calibrated "none": the
    bare links, which every algorithm runs on)."""
    if protocol is None or protocol.name == "none":
        return True
    return protocol.name in PROTOCOLS_OF.get(algorithm, ALL_PROTOCOLS)


def runnable_with(names: list[str], protocols: list[Protocol | None]) -> list[str]:
    """The algorithms that can run with one of the protocols asked for.

    Raises
    ------
    ConfigError
        If none can, naming what the (single) algorithm needs.
    """
    runnable = [name for name in names if any(protocol_allowed(p, name) for p in protocols)]
    if not runnable:
        name = names[0]
        asked = ", ".join(p.name for p in protocols if p is not None)
        raise ConfigError(
            f"{name} runs with the {' or '.join(PROTOCOLS_OF[name])} protocol only, not {asked}"
        )
    return runnable


def protocols_for(protocol: str | None) -> list[Protocol | None]:
    if protocol is None:
        return [None]
    if protocol == "auto":
        return list(PROTOCOLS.values())
    return [parse_protocol(protocol)]


def ring_chunks(collective: Collective, n_ranks: int, size_bytes: int, n_channels: int) -> int:
    """Chunks per ring piece that :func:`predict` picks: ~512 KiB transfers, at most 64.

    >>> ring_chunks(Collective.ALLREDUCE, 8, 2**30, 1)  # 128 MiB blocks
    64
    >>> ring_chunks(Collective.ALLREDUCE, 8, 2**24, 2)  # 1 MiB per channel
    2
    """
    ring_blocks = n_ranks if collective is Collective.ALLREDUCE else 1
    parts = ring_blocks * n_channels
    largest = -(-collective.block_bytes(size_bytes, n_ranks) // parts)
    return max(1, min(MAX_DEFAULT_CHUNKS, -(-largest // CHUNK_TARGET_BYTES)))


#: NCCL's NVLS channels on Hopper (``NCCL_NVLS_NCHANNELS``' default) and its NVLS chunk
#: (``NCCL_NVLS_CHUNKSIZE``, 128 KiB), before the per-call cuts of :func:`nvls_chunks`.
NVLS_CHANNELS = 16
NVLS_CHUNK_BYTES = 128 * 2**10
#: The sizes below which NCCL halves the NVLS chunk (``enqueue.cc``), in units of
#: ``channels x heads x chunk`` ("concurrentOps"): (multiple, largest chunk kept above it).
_NVLS_CUTS = ((64, 65536), (8, 32768), (2, 16384))
_NVLS_TREE_CUTS = ((32, 262144), (16, 131072), (4, 65536), (1, 32768))


def nvls_chunks(
    algorithm: str,
    n_heads: int,
    size_bytes: int,
    *,
    n_nodes: int = 1,
    n_channels: int = NVLS_CHANNELS,
    max_chunks: int = MAX_DEFAULT_CHUNKS,
) -> int:
    """Chunks each NVLS channel pipelines per head for an all-reduce of ``size_bytes``:
    the buffer over ``n_heads`` heads and ``n_channels`` channels, in NCCL's chunk for
    that size (``enqueue.cc``: 128 KiB, cut to 64, 32 or 16 KiB for smaller calls, at
    other sizes for NVLS-tree, and at most 64 KiB for NVLS-tree on 4 servers or more),
    at most ``max_chunks``.

    A channel's call takes about ``(chunks + stages - 1)`` chunk times, so few chunks
    per channel leave much of it filling and draining the pipeline: at 64 MiB on two
    8-GPU servers NVLS-tree pipelines 4 chunks of 128 KiB per channel, at 1 GiB 64.

    >>> nvls_chunks("nvls_tree", 8, 64 * 2**20), nvls_chunks("nvls_tree", 8, 32 * 2**20)
    (4, 4)
    >>> nvls_chunks("nvls", 8, 128 * 2**20), nvls_chunks("nvls", 8, 2**30)
    (16, 64)
    >>> nvls_chunks("nvls_tree", 8, 2**30, n_nodes=4)  # 64 KiB chunks from 4 servers
    64
    """
    chunk = NVLS_CHUNK_BYTES
    if algorithm == "nvls_tree" and n_nodes >= 4:  # NCCL_NVLS_TREE_MAX_CHUNKSIZE's default
        chunk = 65536
    concurrent = n_channels * n_heads
    for multiple, largest in _NVLS_TREE_CUTS if algorithm == "nvls_tree" else _NVLS_CUTS:
        if size_bytes < multiple * concurrent * chunk and chunk > largest:
            chunk = largest
    per_channel = -(-size_bytes // (concurrent * chunk))
    return max(1, min(max_chunks, per_channel))


def nvls_tree_sm_bus_bandwidth_bytes_per_s(
    n_nodes: int,
    gpus_per_node: int,
    n_ctas: int,
    cta_bus_bandwidth_bytes_per_s: Mapping[str, float],
) -> int:
    """The most bus bandwidth (nccl-tests' busbw) NVLS-tree's CTAs move across ``n_nodes``
    servers of ``gpus_per_node`` GPUs with ``n_ctas`` CTAs each, bytes/s: what one CTA
    per GPU adds (a params file's ``cta_bus_bandwidth_bytes_per_s``, keyed
    ``nvls_tree_2_servers`` on two servers and ``nvls_tree`` on more) times the GPUs of a
    server and the CTAs; 0 (no bound) on one server or where the params give none.

    The bound is the SMs' work, not the wires': each CTA's warps reduce the switch's sum
    with its tree children's, send it up, and copy what comes down to the children and
    the multicast (``all_reduce.h``, NVLS_TREE: 5 and 4 of its 20 warps), and more CTAs
    raise it over the same wires (``NCCL_MIN_CTAS=24`` takes 8 x 8 H100 from 321 to 391
    GB/s, NVIDIA/nccl-tests#309). The H100 server's params give NCCL's own cap
    (``perChMaxNVLSTreeBw``: 45.5 GB/s per head beyond two servers, at its 16 CTAs).

    >>> hopper = {"nvls_tree_2_servers": 57.7e9 / 16, "nvls_tree": 45.5e9 / 16}
    >>> nvls_tree_sm_bus_bandwidth_bytes_per_s(8, 8, 16, hopper) / 1e9  # 8 heads x 45.5
    364.0
    >>> nvls_tree_sm_bus_bandwidth_bytes_per_s(2, 8, 24, hopper) / 1e9  # 8 x 57.7 x 24/16
    692.4
    >>> nvls_tree_sm_bus_bandwidth_bytes_per_s(1, 8, 16, hopper)  # one server: NVLS
    0
    """
    key = "nvls_tree_2_servers" if n_nodes == 2 else "nvls_tree"
    if n_nodes < 2 or key not in cta_bus_bandwidth_bytes_per_s:
        return 0
    return round(cta_bus_bandwidth_bytes_per_s[key] * gpus_per_node * n_ctas)


#: NCCL's slots per connection (``NCCL_STEPS``, ``src/include/device.h``).
NCCL_STEPS = 8
#: NCCL's default buffers per connection and protocol (``init.cc:computeBuffSizes``):
#: Simple ``NCCL_BUFFSIZE`` 4 MiB; LL 8 lines of 16 B per thread x 512 threads x 8 steps;
#: LL128 120 elements of 8 B per thread x 640 threads x 8 steps.
DEFAULT_BUFFSIZE_BYTES = 4 * 2**20
LL_BUFFSIZE_BYTES = 8 * 16 * 512 * NCCL_STEPS
LL128_BUFFSIZE_BYTES = 120 * 8 * 640 * NCCL_STEPS
#: Compute channels NCCL can run (MAXCHANNELS, 64 from NCCL 2.23; 32 before).
MAX_CHANNELS = 64


@dataclass(frozen=True)
class NcclKnobs:
    """What users of real NCCL set in the environment, as simcoll takes them.

    ``min_channels`` / ``max_channels`` clamp the plan's channels (``NCCL_MIN_NCHANNELS``,
    ``NCCL_MAX_NCHANNELS``; NCCL extends to the minimum by repeating its channels);
    ``min_ctas`` / ``max_ctas`` (``NCCL_MIN_CTAS``, ``NCCL_MAX_CTAS``) clamp those and
    NVLS's CTAs too, which the ``NCHANNELS`` settings leave alone (``connect.cc``,
    ``nvls.cc``); ``buffsize_bytes`` is the Simple buffer (``NCCL_BUFFSIZE``);
    ``algorithm`` and ``protocol`` are ``NCCL_ALGO`` and ``NCCL_PROTO`` (one name each);
    ``collnet_enable`` (``NCCL_COLLNET_ENABLE=1``, with NCCL's SHARP plugin present) lets
    NCCL's pick of an all-reduce consider CollNet Direct and Chain (``init.cc``: off by
    default).
    """

    min_channels: int | None = None
    max_channels: int | None = None
    buffsize_bytes: int = DEFAULT_BUFFSIZE_BYTES
    algorithm: str | None = None
    protocol: str | None = None
    min_ctas: int | None = None
    max_ctas: int | None = None
    collnet_enable: bool = False

    def channels(self, plan_channels: int) -> int:
        """The channels a communicator runs: the plan's, clamped by the knobs.

        >>> NcclKnobs(min_channels=24).channels(16), NcclKnobs(max_ctas=4).channels(16)
        (24, 4)
        """
        return _clamp(plan_channels, (self.min_channels, self._least_ctas),
                      (self.max_channels, self.max_ctas))  # fmt: skip

    def nvls_ctas(self) -> int:
        """The CTAs NCCL runs NVLS and NVLS-tree with: its 16, within ``NCCL_MIN_CTAS``
        and ``NCCL_MAX_CTAS`` (``nvls.cc``; the ``NCHANNELS`` settings do not apply).

        >>> NcclKnobs(min_ctas=24).nvls_ctas(), NcclKnobs(max_channels=4).nvls_ctas()
        (24, 16)
        >>> NcclKnobs(min_ctas=24, max_ctas=8).nvls_ctas()  # NCCL lowers the minimum
        8
        """
        return _clamp(NVLS_CHANNELS, (self._least_ctas,), (self.max_ctas,))

    @property
    def _least_ctas(self) -> int | None:
        """``NCCL_MIN_CTAS``, no more than ``NCCL_MAX_CTAS``: NCCL lowers a minimum above
        the maximum to it, with a warning (``init.cc``)."""
        if self.min_ctas is None or self.max_ctas is None:
            return self.min_ctas
        return min(self.min_ctas, self.max_ctas)


def _clamp(n: int, least: Sequence[int | None], most: Sequence[int | None]) -> int:
    """``n`` at most each of ``most`` and then at least each of ``least`` (None: no
    bound), within 1..:data:`MAX_CHANNELS`."""
    n = min([n, *(m for m in most if m is not None)])
    n = max([n, *(m for m in least if m is not None)])
    return max(1, min(n, MAX_CHANNELS))


_KNOB_OF_ENV = {
    "NCCL_MIN_NCHANNELS": "min_channels",
    "NCCL_MIN_CTAS": "min_ctas",
    "NCCL_MAX_NCHANNELS": "max_channels",
    "NCCL_MAX_CTAS": "max_ctas",
    "NCCL_BUFFSIZE": "buffsize_bytes",
    "NCCL_ALGO": "algorithm",
    "NCCL_PROTO": "protocol",
    "NCCL_COLLNET_ENABLE": "collnet_enable",
}
_NCCL_ALGOS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree",
               "collnet": "collnet_direct",
               "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain"}  # fmt: skip


def parse_nccl_knobs(items: Sequence[str], *, field: str = "--nccl") -> NcclKnobs:
    """``NAME=VALUE`` settings of NCCL's environment variables as :class:`NcclKnobs`.

    >>> knobs = parse_nccl_knobs(["NCCL_MIN_CTAS=24", "NCCL_ALGO=Ring", "NCCL_BUFFSIZE=8388608"])
    >>> knobs.min_ctas, knobs.min_channels, knobs.buffsize_bytes, knobs.algorithm
    (24, None, 8388608, 'ring')

    Raises
    ------
    ConfigError
        On an unknown variable (the message lists the known ones) or a bad value.
    """
    values: dict[str, object] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name, raw = name.strip(), raw.strip()
        where = f"{field} {name}" if name else field
        if not sep or name not in _KNOB_OF_ENV:
            known = ", ".join(_KNOB_OF_ENV)
            raise ConfigError(f"expected NAME=VALUE with NAME one of {known}, got {item!r}",
                              field=field)  # fmt: skip
        knob = _KNOB_OF_ENV[name]
        values[knob] = _knob_value(knob, raw, where)
    return NcclKnobs(**values)  # type: ignore[arg-type]


def _knob_value(knob: str, raw: str, where: str) -> object:
    if knob in ("min_channels", "max_channels", "min_ctas", "max_ctas"):
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_CHANNELS:
            raise ConfigError(f"expected a channel count 1..{MAX_CHANNELS}, got {raw!r}",
                              field=where)  # fmt: skip
        return int(raw)
    if knob == "buffsize_bytes":
        try:
            size = parse_size_bytes(raw)
        except UnitError as error:
            raise ConfigError(error.message, field=where) from None
        if size < NCCL_STEPS * 512:
            raise ConfigError(f"expected at least {NCCL_STEPS * 512} bytes, got {raw!r}",
                              field=where)  # fmt: skip
        return size
    name = raw.strip().lower()
    if knob == "collnet_enable":
        if name not in ("0", "1"):
            raise ConfigError(f"expected 0 or 1, got {raw!r}", field=where)
        return name == "1"
    if knob == "algorithm":
        if name not in _NCCL_ALGOS:
            raise ConfigError(f"expected one of {', '.join(_NCCL_ALGOS)}, got {raw!r}",
                              field=where)  # fmt: skip
        return _NCCL_ALGOS[name]
    try:
        return parse_protocol(raw).name
    except ConfigError as error:
        raise ConfigError(error.message, field=where) from None


@dataclass(frozen=True)
class CallTuning:
    """How one call runs: channels used, pieces per channel and block, pieces in flight
    per connection, and the data bytes of a full piece."""

    n_channels: int
    n_chunks: int
    max_in_flight: int
    piece_bytes: int


def tune_call(
    collective: Collective,
    algorithm: str,
    protocol: str | None,
    n_ranks: int,
    size_bytes: int,
    *,
    n_channels: int,
    buffsize_bytes: int = DEFAULT_BUFFSIZE_BYTES,
) -> CallTuning:
    """NCCL's per-call choices for a ring or tree call on ``n_channels`` channels.

    Channels (``enqueue.cc:getAlgoInfo``): NCCL drops channels while ``nBytes < channels x
    threads x threshold``, with 512 threads (640 for LL128) and a threshold of 64 bytes per
    thread for Simple, 8 for LL128 and 8 (8 x nRanks for the ring) for LL, ``nBytes`` the
    size nccl-tests prints (the whole buffer for all-gather and reduce-scatter).

    Pieces (``init.cc:computeBuffSizes``, ``collectives.h``): a connection has 8 slots
    (``NCCL_STEPS``) of ``buffer / 8``. Simple rings of all-reduce, all-gather and
    reduce-scatter send slices of 2 slots (``SLICESTEPS``), 4 in flight; other Simple calls
    one slot, 8 in flight. LL carries 8 data bytes in a 16-byte line (32 KiB of data a
    slot), LL128 120 of 128 (576,000 bytes a slot); both one slot a piece, 8 in flight.
    A channel's share of a block is cut into pieces of at most that size (NCCL shrinks its
    chunk for small calls), at most :data:`MAX_DEFAULT_CHUNKS` of them (more would not
    change the time by more than their latency, which the window hides).

    >>> t = tune_call(Collective.ALLREDUCE, "ring", "simple", 8, 2**30, n_channels=24)
    >>> t.n_channels, t.n_chunks, t.max_in_flight, t.piece_bytes
    (24, 6, 4, 1048576)
    >>> tune_call(Collective.ALLREDUCE, "ring", "LL", 8, 2**16, n_channels=24).n_channels
    2
    """
    simple = protocol in (None, "none", "simple")
    threads = 640 if protocol == "LL128" else 512
    threshold = 64 if simple else 8
    if protocol == "LL" and algorithm == "ring":
        threshold *= n_ranks
    nc = max(1, n_channels)
    while nc >= 2 and size_bytes < nc * threads * threshold:
        nc -= 1
    if simple:
        slots = 2 if algorithm == "ring" and collective.value in _SLICED else 1
        piece = buffsize_bytes // NCCL_STEPS * slots
        window = NCCL_STEPS // slots
    elif protocol == "LL":
        piece, window = LL_BUFFSIZE_BYTES // NCCL_STEPS // 2, NCCL_STEPS
    else:
        piece, window = LL128_BUFFSIZE_BYTES // NCCL_STEPS * 120 // 128, NCCL_STEPS
    share = _channel_share_bytes(collective, algorithm, n_ranks, size_bytes, nc)
    chunks = max(1, min(MAX_DEFAULT_CHUNKS, math.ceil(share / piece)))
    return CallTuning(nc, chunks, window, piece)


_SLICED = ("allreduce", "allgather", "reducescatter")


def _channel_share_bytes(
    collective: Collective, algorithm: str, n_ranks: int, size_bytes: int, n_channels: int
) -> int:
    """Bytes one channel moves per step: its share of one ring block, or of the buffer
    for chains and trees."""
    if algorithm == "ring" and collective.value in _SLICED:
        blocks = n_ranks if collective is Collective.ALLREDUCE else 1
        block = collective.block_bytes(size_bytes, n_ranks)
        return -(-block // (blocks * n_channels))
    return -(-size_bytes // n_channels)
