"""How real libraries run each collective, as simcoll recipes: the model of a backend.

Calibration and comparison must simulate what the measured library did. For NCCL that is
its own choice among ring, tree, NVLS and SHARP by its tuning model, which
``algorithm="nccl"`` reproduces (and its point-to-point path for the rest).
For torch.distributed's gloo backend (CPU tensors, TCP) the algorithm, its segmenting and
its in-flight window are fixed by gloo and torch; ``validation/gloo-algorithms.md`` gives
the sources and the message traces behind :func:`gloo_recipe`.

>>> gloo_recipe("allreduce", 4, 16 * 2**20)
Recipe(algorithm='ring', params=(('n_chunks', 4), ('max_in_flight', 2)), simulate_as=None)
>>> gloo_recipe("reducescatter", 4, 2**20).simulate_as  # gloo all-reduces the whole input
'allreduce'
>>> recipe_for("nccl", "allgather", 8, 2**30)
Recipe(algorithm='nccl', params=(), simulate_as=None)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError

__all__ = ["BACKENDS", "Recipe", "default_protocol", "gloo_recipe", "recipe_for"]

BACKENDS = ("nccl", "gloo")

#: gloo's all-reduce cuts the buffer into segments of at most this many bytes.
GLOO_SEGMENT_BYTES = 2**20


@dataclass(frozen=True)
class Recipe:
    """What to simulate for one measured call: an algorithm, its parameters, and the
    collective to run if the library runs a different one (gloo's reduce-scatter)."""

    algorithm: str
    params: tuple[tuple[str, int], ...] = ()
    simulate_as: str | None = None


def gloo_recipe(collective: str, n_ranks: int, size_bytes: int) -> Recipe:
    """torch 2.13's gloo backend on CPU tensors (validation/gloo-algorithms.md).

    - all-reduce: ring reduce-scatter then ring all-gather in
      N = roundUp(max(ceil(S / 1 MiB), 2n), n) segments, N / n per rank's block, two in
      flight (gloo/allreduce.cc);
    - all-gather: ring, each block sent as two halves, two in flight (gloo/allgather.cc);
    - reduce-scatter: a whole all-reduce of the input, each rank keeping its block;
    - all-to-all, gather, scatter: direct, one message per peer, all posted at once;
    - broadcast: gloo's binomial tree (parent = relative rank minus its highest bit,
      ``msb_tree``). gloo posts the whole buffer per edge, yet on the 4-rank testbed a
      broadcast takes 2 S / B (a root sending to both children at once would take
      3 S / B): the pipelined tree, whose root link carries log2(n) copies, matches it;
    - reduce: a ring reduce-scatter in segments of min(ceil(S / 2n), 1 MiB), two in
      flight, then each rank's reduced block to the root in one message
      (``reducescatter_gather``; gloo/reduce.cc);
    - sendrecv: one message per rank to the next, as nccl-tests.

    >>> [gloo_recipe("allreduce", 4, s).params[0][1] for s in (4096, 2**20, 64 * 2**20)]
    [2, 2, 16]
    """
    name = Collective.parse(collective).value
    if name in ("allreduce", "reducescatter"):
        n = max(n_ranks, 1)
        segments = math.ceil(max(math.ceil(size_bytes / GLOO_SEGMENT_BYTES), 2 * n) / n) * n
        ring = Recipe("ring", (("n_chunks", segments // n), ("max_in_flight", 2)))
        return ring if name == "allreduce" else replace(ring, simulate_as="allreduce")
    if name == "allgather":
        return Recipe("ring", (("n_chunks", 2), ("max_in_flight", 2)))
    if name == "broadcast":
        return Recipe("msb_tree")
    if name == "reduce":  # gloo/reduce.cc: segments of min(ceil(S / 2n), 1 MiB)
        n = max(n_ranks, 1)
        segment = max(1, min(math.ceil(size_bytes / (2 * n)), GLOO_SEGMENT_BYTES))
        segments = math.ceil(max(math.ceil(size_bytes / segment), 2 * n) / n) * n
        return Recipe("reducescatter_gather", (("n_chunks", segments // n), ("max_in_flight", 2)))
    return Recipe("direct", (("n_chunks", 1),))


def recipe_for(backend: str, collective: str, n_ranks: int, size_bytes: int) -> Recipe:
    """The recipe that models ``backend`` running one call."""
    if backend == "gloo":
        return gloo_recipe(collective, n_ranks, size_bytes)
    if backend == "nccl":
        return Recipe("nccl")
    raise ConfigError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")


def default_protocol(backend: str) -> str | None:
    """NCCL's protocols for NCCL (the fastest per size); none (the bare links) for gloo.

    >>> default_protocol("gloo") is None, default_protocol("nccl")
    (True, 'auto')
    """
    return None if backend == "gloo" else "auto"
