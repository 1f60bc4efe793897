"""The registry and run_workload: names, parameter checks, and the metrics contract."""

from __future__ import annotations

import inspect
import json

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads import WORKLOADS, run_workload, workload_params
from simcoll.topology.gpu_spec import GpuSpec

COMMON = ("time_s", "compute_s", "comm_s", "exposed_comm_s", "hidden_comm_s")


def test_an_unknown_workload_lists_the_valid_ones(ring4):
    with pytest.raises(ConfigError) as info:
        run_workload("dp", ring4)
    assert str(info.value) == (
        "unknown workload 'dp'; valid: collective, concurrent, ddp, fsdp, moe, p2p, "
        "pipeline, tensor_parallel_mlp, training_step"
    )


def test_an_unknown_parameter_lists_the_workloads_parameters(ring4):
    with pytest.raises(ConfigError) as info:
        run_workload("p2p", ring4, dst_rank=1)
    assert str(info.value) == (
        "p2p has no parameter 'dst_rank'; valid: src_rank, dst_ranks, size_bytes, n_copies"
    )


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_workload_has_the_common_signature(name):
    params = inspect.signature(WORKLOADS[name]).parameters
    first, *rest = params.values()
    assert first.name == "topology"
    assert all(p.kind is p.KEYWORD_ONLY for p in rest)
    assert all(p.default is not p.empty for p in rest)
    assert [p.name for p in rest[:3]] == ["model", "protocol", "calibration"]
    assert workload_params(name) == [p.name for p in rest[3:]]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_defaults_run_and_exposed_plus_hidden_is_comm_on_every_rank(name, star8):
    star8.graph["gpu"] = GpuSpec("test GPU", {"bf16": 100e12}, 80 * 10**9)  # a step needs it
    result = run_workload(name, star8, model="ideal")
    assert result.name == name
    assert set(COMMON) <= set(result.metrics)
    assert json.loads(json.dumps(result.metrics)) == result.metrics
    m = result.metrics
    assert m["exposed_comm_s"] + m["hidden_comm_s"] == pytest.approx(m["comm_s"], rel=1e-12)
    t = result.timeline
    for rank in range(t.n_ranks):
        comm, hidden = _comm_and_hidden_s(t.spans_of(rank))
        assert t.comm_s(rank) == pytest.approx(comm, rel=1e-9, abs=1e-15)
        assert t.exposed_comm_s(rank) + hidden == pytest.approx(comm, rel=1e-9, abs=1e-15)
        assert t.exposed_comm_s(rank) <= m["exposed_comm_s"] + 1e-15


def _comm_and_hidden_s(spans):
    """Comm time and comm time under compute, by a sweep over every span boundary that
    counts the comm and compute spans open between two boundaries."""
    edges = sorted(
        (x, step, s.stream == "compute")
        for s in spans
        for x, step in ((s.start_s, 1), (s.end_s, -1))
    )
    comm = hidden = 0.0
    open_comm = open_compute = 0
    last_s = edges[0][0] if edges else 0.0
    for x, step, is_compute in edges:
        if open_comm:
            comm += x - last_s
            hidden += (x - last_s) * (open_compute > 0)
        if is_compute:
            open_compute += step
        else:
            open_comm += step
        last_s = x
    return comm, hidden


def test_a_bad_value_through_run_workload_names_the_parameter(ring4):
    with pytest.raises(ConfigError) as info:
        run_workload("ddp", ring4, bucket_bytes="big")
    assert str(info.value) == "ddp: bucket_bytes must be a whole number of bytes >= 0, got 'big'"
