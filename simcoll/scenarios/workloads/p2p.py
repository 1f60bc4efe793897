"""Point-to-point copies from one GPU to several at once (cudaMemcpyPeer, NCCL send/recv).

For each destination, ``n_copies`` copies of ``size_bytes`` leave ``src_rank`` one after
another on a stream of their own (``"copy <dst>"``), so destinations are served at the
same time and share whatever links their routes have in common. This is the classic
question of why copies from GPU 0 to different GPUs of one server take different times:
the answer is the route (one NVLink, a bonded pair, or PCIe and the CPUs) and what it
shares.

On a 4-GPU ring, GPU 0's copies to its two neighbours use different links, so each runs
at the full 1 GB/s:

>>> from simcoll.topology import ring
>>> g = ring(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> m = p2p(g, src_rank=0, dst_ranks=[1, 3], size_bytes=1_000_000, n_copies=2).metrics
>>> round(m["time_s_to_1"] * 1e3, 9), round(m["bandwidth_bytes_per_s_to_3"] / 1e9, 9)
(2.0, 1.0)
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Session
from simcoll.scenarios.workloads._base import ParamChecker, WorkloadResult, comm_metrics
from simcoll.topology.calibration import Calibration

__all__ = ["p2p"]


def p2p(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    src_rank: int = 0,
    dst_ranks: list[int] | None = None,
    size_bytes: int = 40_000_000,
    n_copies: int = 10,
) -> WorkloadResult:
    """Copy ``n_copies x size_bytes`` from ``src_rank`` to every rank of ``dst_ranks``.

    Parameters
    ----------
    src_rank
        The GPU copied from.
    dst_ranks
        The GPUs copied to, at the same time (default ``[1]``).
    size_bytes
        Bytes per copy (default 10^7 float32 values).
    n_copies
        Copies per destination, back to back.

    Returns
    -------
    WorkloadResult
        Common metrics plus, per destination d, ``time_s_to_<d>`` (when its last copy
        arrived) and ``bandwidth_bytes_per_s_to_<d>`` (its bytes over that time), and
        ``bandwidth_bytes_per_s`` (all bytes over ``time_s``).
    """
    check = ParamChecker("p2p")
    size = check.size_bytes("size_bytes", size_bytes)
    copies = check.count("n_copies", n_copies)
    s = Session(topology, model=model, protocol=protocol, calibration=calibration)
    src = check.count("src_rank", src_rank, minimum=0)
    if src >= s.n_ranks:
        raise check.error("src_rank", f"a rank 0..{s.n_ranks - 1}", src_rank)
    dsts = [1] if dst_ranks is None else dst_ranks
    rule = f"a non-empty list of distinct ranks 0..{s.n_ranks - 1} other than {src}"
    if (
        not isinstance(dsts, list | tuple)
        or not dsts
        or len(set(dsts)) != len(dsts)
        or any(isinstance(d, bool) or not isinstance(d, int) for d in dsts)
        or any(not 0 <= d < s.n_ranks or d == src for d in dsts)
    ):
        raise check.error("dst_ranks", rule, dst_ranks)

    for dst in dsts:  # one stream per destination: its copies one after another
        for k in range(copies):
            s.copy(src, dst, size, stream=f"copy {dst}", name=f"copy {k} {src}->{dst}")
    timeline = s.run()
    metrics = comm_metrics(timeline, [src, *dsts])
    for dst in dsts:
        time_s = max(span.end_s for span in timeline.spans_of(dst, f"copy {dst}"))
        metrics[f"time_s_to_{dst}"] = time_s
        metrics[f"bandwidth_bytes_per_s_to_{dst}"] = copies * size / time_s if time_s else 0.0
    total_s = timeline.time_s
    metrics["bandwidth_bytes_per_s"] = len(dsts) * copies * size / total_s if total_s else 0.0
    return WorkloadResult("p2p", timeline, metrics)
