"""Per-size tuning: how a call is cut into pieces, and which protocols an algorithm runs
with (NCCL runs NVLS and CollNet with Simple only)."""

from __future__ import annotations

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.protocols import PROTOCOLS, Protocol, parse_protocol

__all__ = [
    "CHUNK_TARGET_BYTES",
    "MAX_DEFAULT_CHUNKS",
    "default_chunks",
    "protocol_allowed",
    "protocols_for",
    "ring_chunks",
    "runnable_with",
]

#: NCCL's Simple protocol moves a channel's data in steps of 512 KiB (a 4 MiB buffer in
#: NCCL_STEPS = 8 slots, src/include/device.h); simcoll cuts transfers to about that size
#: when the caller does not choose ``n_chunks``, so pipelining is NCCL-like by default.
CHUNK_TARGET_BYTES = 512 * 2**10
MAX_DEFAULT_CHUNKS = 64


def default_chunks(collective: Collective, name: str, n_ranks: int, size_bytes: int) -> int:
    """The simulator's default chunk count without building a schedule.

    The largest transfer of an unchunked schedule is the whole buffer for algorithms that
    move it whole (chains, trees, in-network), else about one rank's share.
    """
    whole = name in ("nvls", "sharp", "tree", "reduce_broadcast") or collective in (
        Collective.BROADCAST,
        Collective.REDUCE,
    )
    largest = size_bytes if whole else size_bytes // max(1, n_ranks)
    return max(1, min(MAX_DEFAULT_CHUNKS, -(-largest // CHUNK_TARGET_BYTES)))


ALL_PROTOCOLS = ("LL", "LL128", "simple")


# NCCL runs NVLS with the Simple protocol only (state-of-the-art notes, section 3.2).
PROTOCOLS_OF: dict[str, tuple[str, ...]] = {"nvls": ("simple",), "sharp": ("simple",)}


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
