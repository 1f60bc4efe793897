"""Which GPUs form each parallel group, and in what order a pipeline stage works.

Rank ``r`` has a coordinate on each dimension (``tp``, ``cp``, ``dp``, ``pp``), laid out
in :attr:`~simcoll.training.spec.Parallelism.order`, innermost first: with the default
order, ranks ``0..tp-1`` are one tensor-parallel group (one server, where ``tp`` is 8),
as Megatron-LM lays them out.

>>> from simcoll.training.spec import Parallelism
>>> lay = Layout(Parallelism(tp=2, pp=2, dp=2))
>>> lay.tp_group(dp=1, pp=0, cp=0), lay.dp_group(tp=1, pp=1), lay.stage(dp=0, pp=1)
((2, 3), (5, 7), (4, 5))
>>> interleaved_order(stage=0, n_stages=2, n_microbatches=2, n_chunks=2)[:4]
[('forward', 0, 0), ('forward', 0, 1), ('forward', 1, 0), ('forward', 1, 1)]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from simcoll.core.errors import ConfigError
from simcoll.training.spec import Parallelism

__all__ = ["BACKWARD", "FORWARD", "Layout", "interleaved_order"]

FORWARD, BACKWARD = "forward", "backward"


@dataclass(frozen=True)
class Layout:
    """The groups of a layout whose ``dp`` is known."""

    par: Parallelism

    def _sizes(self) -> dict[str, int]:
        p = self.par
        return {"tp": p.tp, "cp": p.cp, "dp": p.dp, "pp": p.pp}

    @cached_property
    def _strides(self) -> tuple[int, int, int, int]:
        """The rank step of one more tp, cp, dp and pp (``order``: innermost first)."""
        sizes = self._sizes()
        stride, strides = 1, {}
        for dim in self.par.order:
            strides[dim] = stride
            stride *= sizes[dim]
        return tuple(strides.get(dim, 0) for dim in ("tp", "cp", "dp", "pp"))  # type: ignore[return-value]

    def rank(self, *, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        """The rank at these coordinates (a step calls it millions of times at 16,384 GPUs).

        >>> from simcoll.training.spec import Parallelism
        >>> Layout(Parallelism(tp=2, pp=2, dp=3)).rank(tp=1, dp=2, pp=1)  # 1 + 2 x 2 + 1 x 6
        11
        """
        s_tp, s_cp, s_dp, s_pp = self._strides
        return tp * s_tp + cp * s_cp + dp * s_dp + pp * s_pp

    def tp_group(self, *, dp: int, pp: int, cp: int) -> tuple[int, ...]:
        """The tensor-parallel group."""
        return tuple(self.rank(tp=t, cp=cp, dp=dp, pp=pp) for t in range(self.par.tp))

    def cp_group(self, *, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The context-parallel group (a ring)."""
        return tuple(self.rank(tp=tp, cp=c, dp=dp, pp=pp) for c in range(self.par.cp))

    def stage(self, *, dp: int, pp: int) -> tuple[int, ...]:
        """Every GPU of one pipeline stage of one replica (its tensor and context ranks)."""
        return tuple(self.rank(tp=t, cp=c, dp=dp, pp=pp)
                     for c in range(self.par.cp) for t in range(self.par.tp))  # fmt: skip

    def dp_group(self, *, tp: int, pp: int) -> tuple[int, ...]:
        """The ranks that reduce the dense gradients together: data and context parallel."""
        return tuple(self.rank(tp=tp, cp=c, dp=d, pp=pp)
                     for d in range(self.par.dp) for c in range(self.par.cp))  # fmt: skip

    def ep_group(self, *, tp: int, cp: int, pp: int, block: int) -> tuple[int, ...]:
        """Expert-parallel group ``block``: ``ep`` consecutive data-parallel ranks."""
        ep = self.par.ep
        return tuple(self.rank(tp=tp, cp=cp, dp=block * ep + e, pp=pp) for e in range(ep))

    def expert_dp_group(self, *, tp: int, cp: int, pp: int, member: int) -> tuple[int, ...]:
        """The ranks holding the same experts (position ``member`` in every EP group)."""
        ep = self.par.ep
        return tuple(self.rank(tp=tp, cp=cp, dp=b * ep + member, pp=pp)
                     for b in range(self.par.dp // ep))  # fmt: skip


def interleaved_order(
    *, stage: int, n_stages: int, n_microbatches: int, n_chunks: int
) -> list[tuple[str, int, int]]:
    """(phase, model chunk, micro-batch) in the order one stage runs them: 1F1B for one
    chunk; with more, Megatron-LM's interleaved schedule (Narayanan et al. 2021, section
    2.2.2), which needs ``n_microbatches`` to be a multiple of ``n_stages``."""
    p, m, v = n_stages, n_microbatches, n_chunks
    if v > 1 and m % p:
        raise ConfigError(f"parallelism: the interleaved schedule needs the micro-batches "
                          f"({m}) to be a multiple of pp ({p})")  # fmt: skip
    total = m * v

    def chunk_of(k: int, forward: bool) -> int:
        c = (k // p) % v if v > 1 else 0
        return c if forward else v - 1 - c

    def microbatch_of(k: int) -> int:
        return (k // (p * v)) * p + k % p if v > 1 else k

    warm = min((p - stage - 1) * 2 + (v - 1) * p, total) if v > 1 else min(p - stage - 1, total)
    order = [(FORWARD, chunk_of(k, True), microbatch_of(k)) for k in range(warm)]
    for i in range(total - warm):
        k = warm + i
        order.append((FORWARD, chunk_of(k, True), microbatch_of(k)))
        order.append((BACKWARD, chunk_of(i, False), microbatch_of(i)))
    order += [(BACKWARD, chunk_of(k, False), microbatch_of(k)) for k in range(total - warm, total)]
    return order
