"""Compute slowed by the SMs that communication kernels hold while they overlap it.

An NCCL collective runs as one kernel of one CTA per channel, and each CTA holds one SM
for the whole call (NCCL's kernels are persistent: a channel's CTA loops over its steps
until the call ends; ``NCCL_MIN_CTAS``/``NCCL_MAX_CTAS`` bound the count). A compute
kernel that fills the GPU and runs beside such a call gets the SMs left, so it progresses
at ``(S - C) / S`` of its speed alone while ``C`` of the GPU's ``S`` SMs are held (as the
GPU's block scheduler fills the free SMs). Over a compute span, the work alone ``d0``
takes

    d = d0 + (1 / S) * integral of C(t) over the span,

where ``C(t)`` is the CTAs of the calls running on that GPU at ``t`` (the SM-seconds the
calls held during the span, handed back as time at the full GPU's rate). Copies between
GPUs (``cudaMemcpyPeer``: pipeline sends) run on the copy engines and hold no SM.

:func:`slowed_durations_s` gives each compute op its ``d`` from a run's timeline; a
:class:`~simcoll.prediction.session.Session` made with ``sm_sharing`` runs again with
those durations until they settle (the spans move as they stretch).

Not modelled: the HBM bandwidth the calls take from memory-bound kernels, a call's CTAs
spinning on an early GPU before its peers arrive (the call here opens for its whole group
at once), and compute slowing the calls.

>>> import numpy as np
>>> from simcoll.prediction.sm_sharing import taken_sm_s
>>> # a call of 16 CTAs from 2 to 6 us, one of 8 from 4 to 10 us; compute from 0 to 8 us
>>> float(taken_sm_s(np.array([2e-6, 4e-6]), np.array([6e-6, 10e-6]), np.array([16, 8]),
...                  np.array([0.0]), np.array([8e-6]))[0] * 1e6)  # 16 x 4 + 8 x 4
96.0
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from simcoll.prediction.workgraph import Built, Comm, Compute
from simcoll.sim.graph import GraphResult

__all__ = ["slowed_durations_s", "taken_sm_s"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def taken_sm_s(
    call_start_s: FloatArray,
    call_end_s: FloatArray,
    call_ctas: IntArray,
    span_start_s: FloatArray,
    span_end_s: FloatArray,
) -> FloatArray:
    """Per span ``[span_start_s, span_end_s]``, the SM-seconds the calls
    ``[call_start_s, call_end_s]`` of ``call_ctas`` CTAs held during it (calls of one GPU;
    they may overlap one another)."""
    if len(call_start_s) == 0:
        return np.zeros(len(span_start_s))
    times = np.concatenate([call_start_s, call_end_s])
    steps = np.concatenate([call_ctas, -call_ctas]).astype(np.float64)
    order = np.argsort(times, kind="stable")
    times, rate = times[order], np.cumsum(steps[order])  # CTAs held from each time on
    held = np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(times))])  # integral
    taken: FloatArray = np.interp(span_end_s, times, held) - np.interp(span_start_s, times, held)
    return taken


def slowed_durations_s(
    ops: Sequence[Compute | Comm],
    base_s: dict[int, float],
    ctas: dict[int, int],
    run: tuple[Built, GraphResult],
    sm_count: int,
) -> dict[int, float]:
    """Per compute op of ``base_s`` (its duration alone), its duration beside the calls
    of ``ctas`` (op index: CTAs) as they ran in ``result``: ``d0 + taken / sm_count``,
    read on the op's first GPU (a compute op's GPUs run alike)."""
    built, result = run
    by_rank: dict[int, list[tuple[float, float, int]]] = {}
    for index, n_ctas in ctas.items():
        op = ops[index]
        start_s = float(result.end_s[built.opened[index]])
        end_s = float(result.end_s[built.end[index]])
        if end_s > start_s:
            for r in op.ranks:
                by_rank.setdefault(r, []).append((start_s, end_s, n_ctas))
    spans: dict[int, list[tuple[int, float, float]]] = {}
    for index in base_s:
        op = ops[index]
        node = built.rank_nodes[index][0]
        spans.setdefault(op.ranks[0], []).append(
            (index, float(result.issue_s[node]), float(result.end_s[node]))
        )
    out = dict(base_s)
    for rank, these in spans.items():
        calls = by_rank.get(rank)
        if not calls:
            continue
        a = np.array(calls)
        taken = taken_sm_s(a[:, 0], a[:, 1], a[:, 2].astype(np.int64),
                           np.array([s for _, s, _ in these]),
                           np.array([e for _, _, e in these]))  # fmt: skip
        for (index, _, _), sm_s in zip(these, taken.tolist(), strict=True):
            out[index] = base_s[index] + sm_s / sm_count
    return out
