"""The shared contract: parameter checks, the common metrics and the result's types."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads import WorkloadResult
from simcoll.scenarios.workloads._base import ParamChecker, comm_metrics
from simcoll.sim.timeline import Span, Timeline

check = ParamChecker("ddp")


@pytest.mark.parametrize(
    ("method", "value", "message"),
    [
        ("size_bytes", -1, "ddp: x must be a whole number of bytes >= 0, got -1"),
        ("size_bytes", 1.5, "ddp: x must be a whole number of bytes >= 0, got 1.5"),
        ("size_bytes", True, "ddp: x must be a whole number of bytes >= 0, got True"),
        ("size_bytes", "lots", "ddp: x must be a whole number of bytes >= 0, got 'lots'"),
        ("count", 0, "ddp: x must be an integer >= 1, got 0"),
        ("count", "3", "ddp: x must be an integer >= 1, got '3'"),
        ("time_s", -1e-3, "ddp: x must be a time >= 0 s, got -0.001"),
        ("time_s", "1 GB", "ddp: x must be a time >= 0 s, got '1 GB'"),
        ("rate", 0, "ddp: x must be a number > 0, got 0"),
        ("flag", 1, "ddp: x must be true or false, got 1"),
    ],
)
def test_a_bad_value_names_the_workload_the_parameter_and_the_rule(method, value, message):
    with pytest.raises(ConfigError) as info:
        getattr(check, method)("x", value)
    assert str(info.value) == message


def test_sizes_and_times_take_numbers_and_unit_strings():
    assert check.size_bytes("x", "1 MiB") == 2**20
    assert check.size_bytes("x", 1e6) == 1_000_000
    assert check.time_s("x", "250 us") == pytest.approx(250e-6)
    assert check.times_s("x", 2e-3, 3, "layer") == [2e-3, 2e-3, 2e-3]
    assert check.times_s("x", [1e-3, "2 ms"], 2, "layer") == pytest.approx([1e-3, 2e-3])


def test_a_choice_lists_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        check.choice("layout", "diagonal", ["contiguous", "strided"])
    assert str(info.value) == "ddp: layout must be one of contiguous, strided, got 'diagonal'"


def test_layers_split_evenly_or_come_as_a_list():
    # 10 bytes over 3 layers: 3 each and the one left over to the first layer.
    assert check.layer_bytes(None, 3, 10) == [4, 3, 3]
    assert check.layer_bytes([5, "1 KiB"], None, None) == [5, 1024]
    # Neither given: 24 layers of BERT-Large's 340e6 fp32 parameters.
    assert sum(check.layer_bytes(None, None, None)) == 340_000_000 * 4
    with pytest.raises(
        ConfigError, match=r"^ddp: n_layers must be 2 \(the layers listed\), got 3$"
    ):
        check.layer_bytes([1, 2], 3, None)
    with pytest.raises(ConfigError, match=r"^ddp: params_bytes must be 3 \(the layers' sum\)"):
        check.layer_bytes([1, 2], None, 4)


def test_common_metrics_are_those_of_the_rank_with_the_most_exposed_comm():
    # Rank 0: comm 0-2 under compute 0-2, all hidden. Rank 1: comm 0-3, compute 0-1:
    # 2 s exposed, 1 s hidden. Rank 1 is the critical rank; time is the makespan, 3 s.
    spans = (
        Span(0, "compute", "f", 0.0, 2.0),
        Span(0, "comm", "ar", 0.0, 2.0),
        Span(1, "compute", "f", 0.0, 1.0),
        Span(1, "comm", "ar", 0.0, 3.0),
    )
    metrics = comm_metrics(Timeline(n_ranks=2, time_s=3.0, spans=spans), [0, 1])
    assert metrics == {
        "time_s": 3.0,
        "compute_s": 1.0,
        "comm_s": 3.0,
        "exposed_comm_s": 2.0,
        "hidden_comm_s": 1.0,
    }


def test_result_metrics_are_plain_python_numbers():
    result = WorkloadResult(
        "x", Timeline(n_ranks=1, time_s=0.0), {"a_s": np.float64(0.5), "n": np.int64(3)}
    )
    assert result.metrics == {"a_s": 0.5, "n": 3}
    assert type(result.metrics["a_s"]) is float
    assert type(result.metrics["n"]) is int
    assert json.loads(json.dumps(result.metrics)) == result.metrics
