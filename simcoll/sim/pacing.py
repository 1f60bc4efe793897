"""Paced legs: every stage of a pipeline moves at the pace of its busiest link.

In the flow model a transfer takes whatever rate max-min fairness leaves it, so a
pipeline's stages on fast links race ahead while the first pieces fill it. NCCL's NVLS
kernels do not: a channel's warps are split into groups, one per leg of the pipeline
(NVLS all-reduce: the reduce and the multicast; NVLS-tree: the switch's reduction, the
tree up and down the network, the multicast; ``src/device/all_reduce.h``), and each
group moves one chunk per step, with as many threads as NCCL gave it. Those legs are
bound by the SMs, not the links: more CTAs raise the throughput over the same wires
(``NCCL_MIN_CTAS=24`` takes gj-aion's 8 x 8 H100 NVLS-tree from 321 to 391 GB/s busbw,
NVIDIA/nccl-tests#309), and NCCL sizes its channels so that a leg keeps up with the
busiest link and no more. A leg that runs alone, as while the first chunks pass, does
not go faster: the pipeline fills one chunk-step per stage, which public runs show
(2 x 8 H100 from 64 MiB: time = about S / 250 GB/s x (c + 3) / c, c the chunks each
channel pipelines per head).

:func:`paced_rate_caps` gives such a schedule's SM-issued transfers a rate cap: each
connection moves at most its bytes over the run's *link bound*, the time its busiest
link needs for all the bytes it carries (``max over links of wire bytes / capacity``).
Nothing is fitted: a connection as busy as the busiest link is capped at the rate it
gets there anyway, and the others at the average rate that keeps them in step. What is
SM-issued is :func:`multimem_sends`: what a GPU sends into its switch (its share of a
``multimem.ld_reduce``, its ``multimem.st``). The switch's side of those operations (the
sum coming back, the multicast's copies) is the same operation, cut through; a network
send is the NIC's DMA, at the wire's pace; neither is paced.

The CTAs can bound the pipeline below its busiest link: NVLS-tree's heads reduce, send
and copy every byte that crosses the network with a few warps of each CTA, and NCCL caps
its model of the call at a bus bandwidth per head for that reason (``perChMaxNVLSTreeBw``).
A schedule that gives ``params["sm_bus_bandwidth_bytes_per_s"]`` (the prediction layer
does, from the params file's rate per CTA times the call's CTAs:
:func:`simcoll.plan.tuning.nvls_tree_sm_bus_bandwidth_bytes_per_s`) is paced to
:func:`sm_bound_s`, the time its bus bytes take at that rate, where that is longer than
the link bound. Measured (2026-11-29, gj-aion's 8 x 8 H100, NVIDIA/nccl-tests#309): NCCL's
default 16 CTAs 319-321 GB/s busbw from 2 GiB, simulated 348-352 (373-379 unbound); with
``NCCL_MIN_CTAS=24`` 385-391, simulated 371-379 (the network binds).

A schedule asks for it with ``params["paced"] = True``, as the NVLS builders of
:mod:`simcoll.algorithms.nvls` do, and the engine (:class:`simcoll.sim.engine._Run`)
applies it per call, so a call in a workload is paced as the same call alone. The
pipeline fills one piece per leg, so a piece should be one of NCCL's chunks: NVLS calls
are cut so while they stay under a transfer budget
(:func:`simcoll.prediction.simulated.nvls_call_chunks`).

What it gives (measured 2026-11-27, ``simcoll predict topologies/h100-ib-fat-tree.toml
--set n_nodes=2 --collective allreduce --algorithm nvls_tree``, against qoofyk's and
gj-aion's 2 x 8 runs in ``validation/data/public``): 460 us at 64 MiB (measured 466-477;
418 unpaced), 716 at 128 MiB (748-751; 674), 4,301 at 1 GiB (4,485-4,497; 4,258): from
64 MiB a steady 4-5 % fast, the rate NVLS-tree reaches, where it was 3-14 %. One DGX
H100 at 128 MiB: 611.5 us (measured 613.3; 583.1 unpaced). From 4 to 16 MiB a paced
call is slower than measured (153 us at 4 MiB against 94-111): NCCL cuts its chunks
there and fills its pipeline faster than the model does.

The model's assumption: a leg's warps move no faster than the busiest link lets the
whole pipeline move, with no headroom. A paced connection that waits (on a latency its
window does not hide, or on a dependency) cannot catch up afterwards; with NCCL's 8 slots
per connection and its chunks that costs little, with a window of 1 or 2 a lot.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from simcoll.core.schedule import Schedule
from simcoll.sim.routes import bytes_per_link

__all__ = ["link_bound_of_bytes_s", "multimem_sends", "paced_rate_caps", "sm_bound_s"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def multimem_sends(schedule: Schedule) -> BoolArray:
    """Per transfer, whether a GPU sends it into a switch endpoint: the SM-issued
    multimem accesses of an NVLS schedule (:mod:`simcoll.algorithms.nvls`).

    >>> from simcoll.algorithms.nvls import nvls_allreduce
    >>> s = nvls_allreduce(2, 8)
    >>> list(zip(s.src.tolist(), s.dst.tolist(), multimem_sends(s).tolist()))[:4]
    [(0, 2, True), (1, 2, True), (2, 0, False), (0, 2, True)]
    """
    return (schedule.src < schedule.n_ranks) & (schedule.dst >= schedule.n_ranks)


def sm_bound_s(schedule: Schedule) -> float:
    """The least time the SMs need for a schedule whose CTAs move at most
    ``params["sm_bus_bandwidth_bytes_per_s"]`` of bus bandwidth (nccl-tests' busbw: an
    all-reduce's ``S x 2 (n - 1) / n`` bytes per rank, :func:`simcoll.plan.tuning.
    nvls_tree_sm_bus_bandwidth_bytes_per_s`), seconds; 0 where none is given.

    >>> from simcoll.algorithms.nvls import nvls_tree_allreduce
    >>> s = nvls_tree_allreduce(16, 2**30, sm_bus_bandwidth_bytes_per_s=400 * 10**9)
    >>> round(sm_bound_s(s) * 1e6, 1)  # 1 GiB x 30/16 at 400 GB/s
    5033.2
    """
    bus_bytes_per_s = float(schedule.params.get("sm_bus_bandwidth_bytes_per_s", 0))
    if bus_bytes_per_s <= 0.0:
        return 0.0
    factor = schedule.collective.busbw_factor(schedule.n_ranks)  # nccl-tests' busbw / algbw
    return schedule.size_bytes * factor / bus_bytes_per_s


def link_bound_of_bytes_s(
    *,
    wire_bytes: FloatArray,
    pair_of: IntArray,
    pair_links: list[IntArray],
    pair_weights: list[FloatArray | None],
    capacity_bytes_per_s: FloatArray,
) -> float:
    """The time the busiest link needs for all the wire bytes routed over it, seconds
    (no latency): no run of these transfers ends sooner.

    Two transfers of 3 B over link 0 (6 B/s), one of them on over link 1 (1 B/s):

    >>> link_bound_of_bytes_s(wire_bytes=np.array([3.0, 3.0]), pair_of=np.array([0, 1]),
    ...                       pair_links=[np.array([0]), np.array([0, 1])],
    ...                       pair_weights=[None, None],
    ...                       capacity_bytes_per_s=np.array([6.0, 1.0]))
    3.0
    """
    on_link = bytes_per_link(pair_of, wire_bytes, pair_links, pair_weights,
                             len(capacity_bytes_per_s))  # fmt: skip
    return float((on_link / capacity_bytes_per_s).max(initial=0.0))


def paced_rate_caps(
    *,
    conn_of: IntArray,
    wire_bytes: FloatArray,
    paced: BoolArray,
    pair_of: IntArray,
    pair_links: list[IntArray],
    pair_weights: list[FloatArray | None],
    capacity_bytes_per_s: FloatArray,
    sm_bound_s: float = 0.0,
) -> FloatArray:
    """Per transfer, the most rate it may take, bytes/s: for a ``paced`` transfer that
    crosses a link, its connection's wire bytes over the link bound
    (:func:`link_bound_of_bytes_s`) or over ``sm_bound_s``, the least time the SMs need
    for the call (:func:`sm_bound_s`), whichever is longer; ``inf`` for the others.

    A two-stage pipeline: connection 0 (transfers 0 and 1) on a 4 B/s link, connection 1
    (transfers 2 and 3) on a 2 B/s link, 2 B each. The slow link needs 2 s, so both
    connections move at most 4 B / 2 s; transfer 3 is not paced:

    >>> paced_rate_caps(conn_of=np.array([0, 0, 1, 1]), wire_bytes=np.full(4, 2.0),
    ...                 paced=np.array([True, True, True, False]),
    ...                 pair_of=np.array([0, 0, 1, 1]),
    ...                 pair_links=[np.array([0]), np.array([1])], pair_weights=[None, None],
    ...                 capacity_bytes_per_s=np.array([4.0, 2.0])).tolist()
    [2.0, 2.0, 2.0, inf]
    """
    caps = np.full(len(wire_bytes), np.inf)
    bound_s = link_bound_of_bytes_s(
        wire_bytes=wire_bytes,
        pair_of=pair_of,
        pair_links=pair_links,
        pair_weights=pair_weights,
        capacity_bytes_per_s=capacity_bytes_per_s,
    )
    bound_s = max(bound_s, sm_bound_s)
    if bound_s <= 0.0:
        return caps
    lengths = np.fromiter(map(len, pair_links), dtype=np.int64, count=len(pair_links))
    capped = np.asarray(paced, dtype=bool) & (lengths[pair_of] > 0) & (wire_bytes > 0)
    per_conn = np.bincount(conn_of, weights=wire_bytes)
    caps[capped] = per_conn[conn_of[capped]] / bound_s
    return caps
