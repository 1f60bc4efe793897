"""The nine collectives, their nccl-tests size conventions and bus-bandwidth factors.

Sizes follow nccl-tests: ``size_bytes`` is the ``size`` column nccl-tests prints for the
same collective (all-gather, reduce-scatter, gather, scatter: the whole buffer of all
ranks; all-to-all: count x n x type size; the rest: one rank's buffer).

Bus bandwidth (nccl-tests ``doc/PERFORMANCE.md``) is ``algbw x factor(n)`` with
``algbw = size_bytes / time_s``:

=================================================  ============
collective                                         factor
=================================================  ============
allreduce                                          2(n-1)/n
allgather, reducescatter, alltoall, gather, scatter  (n-1)/n
broadcast, reduce, sendrecv                        1
=================================================  ============

>>> Collective.parse("allreduce").busbw_factor(8)
1.75
>>> Collective.ALLGATHER.busbw_factor(4)
0.75
"""

from __future__ import annotations

from enum import Enum

from simcoll.core.errors import ConfigError

__all__ = ["Collective", "local_copy_s"]


class Collective(Enum):
    """A collective operation, named as on simcoll's command line."""

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"
    ALLTOALL = "alltoall"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    SENDRECV = "sendrecv"

    @classmethod
    def parse(cls, name: str) -> Collective:
        """Look a collective up by name; an unknown name lists the valid ones.

        >>> Collective.parse("all_reduce")
        Traceback (most recent call last):
        ...
        simcoll.core.errors.ConfigError: unknown collective 'all_reduce'; valid: allreduce, \
allgather, reducescatter, alltoall, broadcast, reduce, gather, scatter, sendrecv
        """
        try:
            return cls(name)
        except ValueError:
            valid = ", ".join(c.value for c in cls)
            raise ConfigError(f"unknown collective {name!r}; valid: {valid}") from None

    @property
    def is_rooted(self) -> bool:
        """True for collectives with a root rank (broadcast, reduce, gather, scatter)."""
        return self in _ROOTED

    @property
    def reduces(self) -> bool:
        """True for collectives that combine data of several ranks with a reduction op."""
        return self in (Collective.ALLREDUCE, Collective.REDUCESCATTER, Collective.REDUCE)

    def busbw_factor(self, n_ranks: int) -> float:
        """The nccl-tests factor from algorithm bandwidth to bus bandwidth."""
        if self is Collective.ALLREDUCE:
            return 2 * (n_ranks - 1) / n_ranks
        if self in (Collective.BROADCAST, Collective.REDUCE, Collective.SENDRECV):
            return 1.0
        return (n_ranks - 1) / n_ranks

    @property
    def copies_locally(self) -> bool:
        """True where an out-of-place call copies input to output (:meth:`local_copy_bytes`)."""
        return self.local_copy_bytes(1, 1) > 0

    def local_copy_bytes(self, size_bytes: int, n_ranks: int) -> int:
        """Bytes one GPU copies from its input to its output buffer in an out-of-place
        call, beside what it sends: what an in-place call does not do.

        NCCL's ring kernels copy in the same pass that sends: the all-gather's first step
        writes each rank's own block into its output as it sends it (``directCopySend``
        rather than ``directSend`` in ``runRing``, ``src/device/all_gather.h``), and the
        broadcast's root writes the whole buffer (``copySend`` rather than ``send``,
        ``src/device/broadcast.h``). The other collectives write their output as they
        receive or reduce it (0 here); gather, scatter and all-to-all copy the rank's own
        block as a send to itself, beside the other peers' sends (0 here too).

        >>> [Collective(c).local_copy_bytes(1024, 8) for c in ("allgather", "broadcast")]
        [128, 1024]
        >>> Collective.ALLREDUCE.local_copy_bytes(1024, 8)
        0
        """
        if self is Collective.ALLGATHER:
            return size_bytes // n_ranks
        if self is Collective.BROADCAST:
            return size_bytes
        return 0

    def n_blocks(self, n_ranks: int) -> int:
        """How many blocks the logical buffer of this collective has.

        A block is the unit of ownership: all-gather, reduce-scatter, gather, scatter and
        send/recv have one block per rank, all-to-all one per (source, destination) pair,
        and the rest a single block.
        """
        if self is Collective.ALLTOALL:
            return n_ranks * n_ranks
        if self in _BLOCK_PER_RANK:
            return n_ranks
        return 1

    def block_bytes(self, size_bytes: int, n_ranks: int) -> int:
        """Bytes in one block, from the nccl-tests size.

        Raises
        ------
        ConfigError
            If ``size_bytes`` does not split into whole blocks (an all-gather of 10 bytes
            over 4 ranks).

        >>> Collective.ALLGATHER.block_bytes(1024, 4), Collective.ALLTOALL.block_bytes(1024, 4)
        (256, 256)
        """
        per = {Collective.SENDRECV: 1, Collective.ALLTOALL: n_ranks}.get(
            self, self.n_blocks(n_ranks)
        )
        if size_bytes % per:
            raise ConfigError(
                f"{self.value} size {size_bytes} B does not divide into {per} equal blocks "
                f"(one per rank); use a multiple of {per} B"
            )
        return size_bytes // per

    def count(self, size_bytes: int, n_ranks: int, type_size_bytes: int = 4) -> int:
        """The element count nccl-tests prints beside ``size_bytes`` (per-rank count)."""
        per_rank = n_ranks if self.n_blocks(n_ranks) > 1 and self is not Collective.SENDRECV else 1
        return size_bytes // type_size_bytes // per_rank

    def initial_holdings(self, n_ranks: int, root: int) -> dict[tuple[int, int], int]:
        """Which blocks each rank holds before the collective, as contributor bitmasks.

        Maps ``(rank, block)`` to a bitmask of ranks whose input the block's data is
        (bit r set: rank r's contribution). Absent keys mean the rank holds nothing valid.
        """
        n = n_ranks
        everyone = {(r, 0): 1 << r for r in range(n)}
        table: dict[Collective, dict[tuple[int, int], int]] = {
            Collective.ALLREDUCE: everyone,
            Collective.REDUCE: everyone,
            Collective.BROADCAST: {(root, 0): 1 << root},
            Collective.REDUCESCATTER: {(r, b): 1 << r for r in range(n) for b in range(n)},
            Collective.ALLGATHER: {(r, r): 1 << r for r in range(n)},
            Collective.GATHER: {(r, r): 1 << r for r in range(n)},
            Collective.SCATTER: {(root, b): 1 << root for b in range(n)},
            Collective.SENDRECV: {(r, r): 1 << r for r in range(n)},
            Collective.ALLTOALL: {(s, s * n + d): 1 << s for s in range(n) for d in range(n)},
        }
        return table[self]

    def final_holdings(self, n_ranks: int, root: int) -> dict[tuple[int, int], int]:
        """Which blocks each rank must hold afterwards, as contributor bitmasks."""
        n = n_ranks
        everyone_bits = (1 << n) - 1
        table: dict[Collective, dict[tuple[int, int], int]] = {
            Collective.ALLREDUCE: {(r, 0): everyone_bits for r in range(n)},
            Collective.REDUCE: {(root, 0): everyone_bits},
            Collective.BROADCAST: {(r, 0): 1 << root for r in range(n)},
            Collective.REDUCESCATTER: {(r, r): everyone_bits for r in range(n)},
            Collective.ALLGATHER: {(r, b): 1 << b for r in range(n) for b in range(n)},
            Collective.GATHER: {(root, b): 1 << b for b in range(n)},
            Collective.SCATTER: {(r, r): 1 << root for r in range(n)},
            Collective.SENDRECV: {((r + 1) % n, r): 1 << r for r in range(n)},
            Collective.ALLTOALL: {(d, s * n + d): 1 << s for s in range(n) for d in range(n)},
        }
        return table[self]


_ROOTED = frozenset(
    {Collective.BROADCAST, Collective.REDUCE, Collective.GATHER, Collective.SCATTER}
)
_BLOCK_PER_RANK = frozenset(
    {Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.GATHER, Collective.SCATTER,
     Collective.SENDRECV}
)  # fmt: skip


def local_copy_s(
    collective: Collective, size_bytes: int, n_ranks: int, memory_bandwidth_bytes_per_s: float
) -> float:
    """Seconds an out-of-place call spends copying one GPU's own block from its input to
    its output: the block read and written at the memory's bandwidth.

    NCCL copies in the same pass that sends (:meth:`Collective.local_copy_bytes`), on the
    threads that drive the links, so the copy adds to the call rather than overlapping it.
    On a DGX A100 (8 x A100 40 GB, 1,555 GB/s of HBM2) an out-of-place all-gather of 1 GiB
    copies 128 MiB, 173 us; nccl-tests measured 155 us between its out-of-place and
    in-place halves there (``nccl_allgather_8xA100_nvswitch_superbench.csv`` in
    ``validation/data/public``).

    >>> round(local_copy_s(Collective.ALLGATHER, 2**30, 8, 1555e9) * 1e6, 1)
    172.6
    """
    copied_bytes = collective.local_copy_bytes(size_bytes, n_ranks)
    return 2 * copied_bytes / memory_bandwidth_bytes_per_s
