"""Compute beside a call runs on the SMs the call's CTAs leave (simcoll.prediction.sm_sharing).

On one DGX H100 (132 SMs, the file's ``[gpu] sms``), a call of C CTAs (one per channel of
NCCL's plan for the 8 GPUs) that runs for T beside a compute span of d0 alone:

- the call inside the span: d = d0 + C * T / 132 (the SM-seconds it held, handed back at
  the whole GPU's rate);
- the span inside the call: every instant of it shares, d = d0 + C * d / 132, so
  d = d0 * 132 / (132 - C).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simcoll.plan.search import search_plan
from simcoll.prediction.session import Session
from simcoll.prediction.sm_sharing import taken_sm_s
from simcoll.topology.io import load

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "dgx-h100.toml"
SMS = 132  # H100 SXM5's streaming multiprocessors, as dgx-h100.toml's [gpu] table says
SIZE_BYTES = 256 * 2**20


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    return load(TOPOLOGY)


def _ctas(graph) -> int:  # type: ignore[no-untyped-def]
    """NCCL launches one CTA per channel: the channels of its plan for the 8 GPUs."""
    return search_plan(graph, [f"gpu{k}" for k in range(8)]).n_channels


def _run(graph, compute_s: float, sm_sharing: bool):  # type: ignore[no-untyped-def]
    s = Session(graph, sm_sharing=sm_sharing)
    s.compute(range(8), compute_s, "compute")
    s.collective("allgather", SIZE_BYTES, range(8), algorithm="ring", stream="tp")
    timeline = s.run()
    (compute,) = timeline.spans_of(0, "compute")
    (call,) = timeline.spans_of(0, "tp")
    return compute, call


def test_a_call_inside_a_compute_span_stretches_it_by_the_sm_seconds_it_held(graph) -> None:  # type: ignore[no-untyped-def]
    d0 = 0.050  # 50 ms of compute: the all-gather (under 2 ms) runs inside it
    compute, call = _run(graph, d0, sm_sharing=True)
    assert call.start_s == 0.0
    assert call.end_s < d0
    held_s = _ctas(graph) * (call.end_s - call.start_s)
    assert compute.end_s == pytest.approx(d0 + held_s / SMS, rel=1e-9)


def test_a_compute_span_inside_a_call_runs_at_the_sms_left(graph) -> None:  # type: ignore[no-untyped-def]
    d0 = 20e-6  # 20 us of compute, all of it beside the all-gather
    compute, call = _run(graph, d0, sm_sharing=True)
    c = _ctas(graph)
    assert compute.end_s < call.end_s
    assert compute.end_s == pytest.approx(d0 * SMS / (SMS - c), rel=2e-4)  # settled to 1e-4


def test_without_sm_sharing_compute_takes_its_time_alone(graph) -> None:  # type: ignore[no-untyped-def]
    compute, _ = _run(graph, 0.050, sm_sharing=False)
    assert compute.end_s == pytest.approx(0.050, rel=1e-12)


def test_sm_seconds_held_add_over_overlapping_calls() -> None:
    # calls of 16 CTAs on [0, 4] and 8 CTAs on [2, 10]; spans [1, 3] and [3, 12]
    taken = taken_sm_s(np.array([0.0, 2.0]), np.array([4.0, 10.0]), np.array([16, 8]),
                       np.array([1.0, 3.0]), np.array([3.0, 12.0]))  # fmt: skip
    assert taken.tolist() == [16 * 2 + 8 * 1, 16 * 1 + 8 * 7]


@pytest.mark.parametrize("knob", [(), ("NCCL_MAX_CTAS=8",)])
def test_an_nvls_call_holds_nvlss_ctas(graph, knob) -> None:  # type: ignore[no-untyped-def]
    # NCCL runs NVLS on its 16 NVLS CTAs (NVLS_NCHANNELS_SM90, src/transport/nvls.cc),
    # within NCCL_MAX_CTAS; simcoll runs their channels as one schedule channel, but the
    # call still holds every CTA: the span around it grows by 16 (or 8) x T / 132.
    from simcoll.plan.tuning import parse_nccl_knobs  # noqa: PLC0415

    ctas = 8 if knob else 16
    d0 = 0.050
    s = Session(graph, sm_sharing=True, knobs=parse_nccl_knobs(list(knob)))
    s.compute(range(8), d0, "compute")
    s.collective("allreduce", SIZE_BYTES, range(8), algorithm="nvls", stream="tp")
    timeline = s.run()
    (compute,) = timeline.spans_of(0, "compute")
    (call,) = timeline.spans_of(0, "tp")
    assert call.end_s < d0
    assert compute.end_s == pytest.approx(d0 + ctas * (call.end_s - call.start_s) / SMS, rel=1e-9)
