"""The training_step workload: the model file's defaults under the scenario's values, and
one-line errors that name the workload key (or the model file) that caused them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.workloads import run_workload
from simcoll.topology import switch_star
from simcoll.topology.gpu_spec import GpuSpec


def machine(n: int = 8):  # type: ignore[no-untyped-def]
    g = switch_star(n, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
    g.graph["gpu"] = GpuSpec("GPU", {"bf16": 100e12}, 80 * 10**9, 1e12)
    return g


SMALL = {"seq_length": 256, "global_batch_size": 8}


def test_the_scenario_replaces_the_model_files_defaults() -> None:
    # llama3-70b's file says tp 8 x pp 4; on 8 GPUs the scenario's tp 2 x pp 4 leaves dp 1
    m = run_workload("training_step", machine(), transformer="llama3-70b", tp=2, pp=4,
                     **SMALL).metrics  # fmt: skip
    assert (m["tp"], m["pp"], m["dp"], m["n_microbatches"]) == (2, 4, 1, 8)


def test_an_efficiency_scales_the_compute_it_names() -> None:
    # gemm-bound compute: halving the GEMM efficiency about doubles rank 0's compute
    base = run_workload("training_step", machine(), transformer="llama3-8b", tp=8, **SMALL)
    half = run_workload("training_step", machine(), transformer="llama3-8b", tp=8,
                        gemm_efficiency=0.35, **SMALL)  # fmt: skip
    ratio = half.metrics["compute_s"] / base.metrics["compute_s"]
    assert 1.5 < ratio <= 2.0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"transformer": "nope"}, "workload.transformer: no model file 'nope'; shipped: "
         "gpt3-175b, llama2-13b, llama2-70b, llama2-7b, llama3-405b, llama3-70b, llama3-8b, "
         "mixtral-8x7b"),
        ({"precision": "fp4"}, "workload.precision: precision must be one of fp32, tf32, bf16, "
         "fp16, fp8, got 'fp4'"),
        ({"tp": 0}, "workload.tp: tp must be an integer >= 1, got 0"),
        ({"sequence_parallel": "yes"}, "workload.sequence_parallel: sequence_parallel must be "
         "true or false, got 'yes'"),
        ({"gemm_efficiency": 2}, "workload.gemm_efficiency: must be a number in (0, 1], got 2"),
        ({"memory_check": "maybe"}, "workload.memory_check: must be 'flag' or 'refuse', got "
         "'maybe'"),
        ({"bucket_bytes": "lots"}, "workload.bucket_bytes: cannot read 'lots' as a number with "
         "a unit"),
        ({"fsdp_sharding": "zero2"}, "workload.fsdp_sharding: fsdp_sharding must be one of "
         "full_shard, shard_grad_op, hybrid_shard, no_shard, got 'zero2'"),
        ({"fsdp_shard_size": -1}, "workload.fsdp_shard_size: fsdp_shard_size must be an "
         "integer >= 0, got -1"),
    ],
)  # fmt: skip
def test_a_bad_value_names_its_workload_key(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        run_workload("training_step", machine(), **{**SMALL, **params})
    assert str(info.value) == message


def test_a_bad_model_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text('[model]\nname = "m"\nn_layers = 2\nhidden_size = 100\nffn_hidden_size = 4\n'
                   'n_heads = 3\nvocab_size = 10\n')  # fmt: skip
    with pytest.raises(ConfigError) as info:
        run_workload("training_step", machine(), transformer=str(bad), **SMALL)
    assert str(info.value) == f"{bad}: model: hidden_size 100 does not split into 3 heads"


def test_the_fsdp_keys_reach_the_step() -> None:
    # llama3-8b on 8 GPUs, FSDP over all 8 (tp 1, pp 1). shard_grad_op holds every unit
    # gathered: all 2 psi bytes of the model (psi: its parameters, the root unit's
    # embedding and output layer included); full_shard (with limit_all_gathers) 2 blocks
    # and the root. Per block: q and o (h^2 each), k and v (h x kv each), the SwiGLU MLP
    # (3 h f), two norms (2 h); root: embedding and output layer (V h each), final norm.
    common: dict[str, Any] = {"transformer": "llama3-8b", "tp": 1, "pp": 1,
                              "data_parallel": "fsdp", **SMALL}  # fmt: skip
    h, f, kv, layers, vocab = 4096, 14336, 1024, 32, 128256
    block = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    root = 2 * vocab * h + h
    grad_op = run_workload("training_step", machine(), fsdp_sharding="shard_grad_op",
                           **common).metrics  # fmt: skip
    assert grad_op["memory_gathered_params_bytes"] == 2 * (layers * block + root)
    full = run_workload("training_step", machine(), **common).metrics
    assert full["memory_gathered_params_bytes"] == 2 * (2 * block + root)
    two = run_workload("training_step", machine(), fsdp_layers_per_unit=2, **common).metrics
    assert two["memory_gathered_params_bytes"] == 2 * (4 * block + root)
