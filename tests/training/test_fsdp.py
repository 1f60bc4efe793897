"""FSDP in the training step (issue 42): one unit per transformer block and a root unit,
gathered and reduce-scattered where PyTorch's hooks issue them, the sharding strategies,
and the memory FSDP holds, each against a closed form or a hand count made here."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from simcoll.core.errors import ConfigError
from simcoll.prediction.session import recording_calls
from simcoll.topology import switch_star
from simcoll.topology.clusters import fat_tree
from simcoll.topology.gpu_spec import GpuSpec
from simcoll.training import (
    Efficiency,
    Parallelism,
    StepTimes,
    Training,
    Transformer,
    training_step,
)
from simcoll.training import step as step_module
from simcoll.training.memory import memory_per_gpu, root_params_per_gpu
from simcoll.training.step import step_calls, step_times

H, L, V, FFN = 256, 8, 1000, 1024
SMALL = Transformer("small", n_layers=L, hidden_size=H, ffn_hidden_size=FFN, n_heads=8,
                    vocab_size=V, gated_mlp=False)  # fmt: skip
# One block's parameters: q, k, v and the output projection (4 h^2), the MLP (2 h x 4h:
# 8 h^2), two norms (2 h); the root unit: embedding and output layer (V h each) and the
# final norm (h).
BLOCK = 4 * H * H + 2 * H * FFN + 2 * H
ROOT = 2 * V * H + H

N, BW, LAT = 4, 1e9, 1e-6  # GPUs on one switch, link bytes/s per direction, link latency


def ring_s(size_bytes: float, n: int = N) -> float:
    """A ring all-gather or reduce-scatter of nccl-tests size S on the star, links alone,
    one channel: n - 1 steps, each S/n in one piece (under NCCL's 512 KiB steps here), so
    each pays the route's latency (two links) and then S/n at the link's bandwidth."""
    assert size_bytes / n <= 512 * 1024
    return (n - 1) * (2 * LAT + size_bytes / n / BW)


# Per block: forward F and backward 2F, each longer than what must hide under it (below).
F = 2e-3
TIMES = StepTimes(forward_s_per_layer=F, backward_s_per_layer=2 * F, head_forward_s=1.5e-3,
                  head_backward_s=3e-3, optimizer_s=1e-3)  # fmt: skip
COMPUTE_S = L * 3 * F + 1.5e-3 + 3e-3  # blocks forward and backward, the output layer's


def step(par: Parallelism, micro_batches: int = 1) -> dict[str, float]:
    t = Training(seq_length=64, global_batch_size=micro_batches * N)
    r = training_step(switch_star(N, link_bandwidth_bytes_per_s=BW, link_latency_s=LAT),
                      SMALL, t, par, times=TIMES, calibration=None, protocol=None)  # fmt: skip
    return r.metrics


FSDP = Parallelism(data_parallel="fsdp", sequence_parallel=False)


def test_a_per_block_step_exposes_only_the_first_gathers_and_the_last_reduce_scatters() -> None:
    # bf16 parameters and gradients: a block's unit moves 2 BLOCK bytes, the root 2 ROOT
    # (both multiples of 2 x 4 bytes: no padding). Ring times on the star:
    unit_s, root_s = ring_s(2 * BLOCK), ring_s(2 * ROOT)
    # Hidden where the unit's neighbours compute longer: forward, gather k + 1 (one call)
    # under block k (F); backward (backward_pre, one NCCL stream per process group, in
    # issue order), reduce-scatter k and gather k + 2 under block k + 1 (2F); the first
    # backward gather under the output layer's backward (3 ms).
    assert 2 * unit_s < 2 * F
    assert unit_s < 3e-3
    # Exposed: the root's and the first block's gathers before the first compute, and the
    # last block's and the root's reduce-scatters after the last; then the optimizer.
    m = step(FSDP)
    first_gathers, last_scatters = root_s + unit_s, unit_s + root_s
    assert m["time_s"] == pytest.approx(first_gathers + COMPUTE_S + last_scatters + 1e-3,
                                        rel=1e-9)  # fmt: skip
    assert m["compute_s"] == pytest.approx(COMPUTE_S + 1e-3, rel=1e-9)
    assert m["exposed_dp_s"] == pytest.approx(first_gathers + last_scatters, rel=1e-9)


def test_no_sync_hides_the_boundary_between_micro_batches() -> None:
    # Two micro-batches. Reducing each: the second forward's gathers queue behind the
    # first backward's last reduce-scatters on the group's one stream, so each micro-batch
    # exposes its own first gathers and last reduce-scatters. With no_sync the first
    # backward reduces nothing: the second forward's root and first-block gathers (issued
    # as block 0's backward starts, 2F long) hide under it.
    unit_s, root_s = ring_s(2 * BLOCK), ring_s(2 * ROOT)
    edges = root_s + unit_s + unit_s + root_s
    assert root_s + unit_s < 2 * F
    each = step(FSDP, micro_batches=2)
    assert each["time_s"] == pytest.approx(2 * (edges + COMPUTE_S) + 1e-3, rel=1e-9)
    once = step(replace(FSDP, fsdp_no_sync=True), micro_batches=2)
    assert once["time_s"] == pytest.approx(edges + 2 * COMPUTE_S + 1e-3, rel=1e-9)


@pytest.mark.parametrize(
    ("changes", "extra_units"),
    [
        # backward_post: block k + 1's gather is issued once block k's backward ends, so it
        # is exposed for each of the 8 blocks (the first too: no prefetch into it)
        ({"fsdp_backward_prefetch": "backward_post"}, 8),
        # none: issued in its own pre-hook, after block k's reduce-scatter on the same
        # stream: both exposed for blocks 1..7, the first block's gather for block 0
        ({"fsdp_backward_prefetch": "none"}, 1 + 2 * 7),
        # no forward prefetch: each block's gather once the block before is done (7)
        ({"fsdp_forward_prefetch": False}, 7),
        # shard_grad_op: nothing gathered in backward, nothing more exposed
        ({"fsdp_sharding": "shard_grad_op"}, 0),
    ],
)  # fmt: skip
def test_prefetch_policies_expose_whole_units(changes: dict[str, Any], extra_units: int) -> None:
    base = step(FSDP)["time_s"]
    m = step(replace(FSDP, **changes))
    assert m["time_s"] == pytest.approx(base + extra_units * ring_s(2 * BLOCK), rel=1e-9)


def recorded(par: Parallelism, model: Transformer = SMALL, micro_batches: int = 1,
             n: int = N) -> Counter[str]:  # fmt: skip
    """Bytes per collective the step asks for, summed over its calls."""
    t = Training(seq_length=64, global_batch_size=micro_batches * n)
    g = switch_star(n, link_bandwidth_bytes_per_s=BW, link_latency_s=LAT)
    with recording_calls() as calls:
        training_step(g, model, t, par, times=TIMES, calibration=None, protocol=None)
    total: Counter[str] = Counter()
    for c in calls:
        total[c.collective] += c.size_bytes * (c.collective != "compute")
    return total


@pytest.mark.parametrize("tied", [False, True])
def test_the_root_unit_holds_the_embedding_the_final_norm_and_the_output_layer(tied: bool) -> None:
    # Everything in no block: V h of embedding, h of final norm, and V h of output layer
    # unless it is the embedding (tied: counted once).
    model = Transformer("small", n_layers=L, hidden_size=H, ffn_hidden_size=FFN, n_heads=8,
                        vocab_size=V, gated_mlp=False, tied_embeddings=tied)  # fmt: skip
    root = V * H + H + (0 if tied else V * H)
    assert root_params_per_gpu(model, FSDP) == root
    # One micro-batch: each block gathered twice (forward, backward), the root once (held
    # from its forward to the end of its backward); all reduce-scattered once. 2 bytes
    # each; root sizes are multiples of 2 x 4 bytes: no padding.
    got = recorded(FSDP, model)
    assert got["allgather"] == 2 * (2 * L * BLOCK + root)
    assert got["reducescatter"] == 2 * (L * BLOCK + root)
    # With two stages, the first holds the embedding, the last the norm and the output
    # layer (a copy of the embedding when tied).
    two = Parallelism(pp=2, dp=2, data_parallel="fsdp")
    assert root_params_per_gpu(model, two, 0) == V * H
    assert root_params_per_gpu(model, two, 1) == H + V * H


def test_each_pipeline_stage_gathers_its_own_root_while_micro_batches_are_in_flight() -> None:
    # pp 2 x dp 2 on 4 GPUs, 2 micro-batches under 1F1B: stage 0 runs F0 F1 B0 B1, so its
    # root (the embedding, V h) stays gathered from F0 to B1: once; stage 1 runs F0 B0 F1
    # B1, with no micro-batch in flight after B0: its root (final norm and output layer,
    # h + V h) twice. Each stage's 4 blocks: gathered in every forward and backward; all
    # reduce-scattered after every backward. Sizes are multiples of 2 x 2 bytes.
    par = Parallelism(pp=2, data_parallel="fsdp", sequence_parallel=False)
    got = recorded(par, micro_batches=1, n=4)  # 4 sequences: 2 micro-batches per replica
    root0, root1 = V * H, H + V * H
    blocks = 2 * 2 * 2 * 4 * 2 * BLOCK  # stages x micro-batches x passes x blocks x bytes
    assert got["allgather"] == blocks + 2 * root0 + 2 * 2 * root1
    assert got["reducescatter"] == blocks // 2 + 2 * (2 * root0 + 2 * root1)


def test_no_sync_reduces_once_and_fp32_doubles_the_reduce_scatter() -> None:
    m = 3  # micro-batches: every one gathers everything, forward and backward
    gathered = m * 2 * (2 * L * BLOCK + ROOT)
    each = recorded(FSDP, micro_batches=m)
    assert (each["allgather"], each["reducescatter"]) == (gathered, m * 2 * (L * BLOCK + ROOT))
    once = recorded(replace(FSDP, fsdp_no_sync=True), micro_batches=m)
    assert (once["allgather"], once["reducescatter"]) == (gathered, 2 * (L * BLOCK + ROOT))
    fp32 = recorded(replace(FSDP, fsdp_reduce_dtype="fp32"))
    assert fp32["reducescatter"] == 4 * (L * BLOCK + ROOT)


@pytest.mark.parametrize(("no_sync", "reducing"), [(False, 3), (True, 1)])
def test_each_reducing_micro_batch_casts_and_divides_its_gradients_first(
    no_sync: bool, reducing: int
) -> None:
    # PyTorch's post-backward hook casts each unit's unsharded gradient to the reduce dtype
    # and divides it before the reduce-scatter, on the GPU: g seconds per parameter here,
    # for every block and the root, once per micro-batch that reduces (3, or 1 with
    # no_sync), on the compute of every GPU
    g = 1e-9
    t = Training(seq_length=64, global_batch_size=3 * N)
    star = switch_star(N, link_bandwidth_bytes_per_s=BW, link_latency_s=LAT)
    par = replace(FSDP, fsdp_no_sync=no_sync)
    compute_s = [
        training_step(star, SMALL, t, par, times=times, calibration=None,
                      protocol=None).metrics["compute_s"]
        for times in (TIMES, replace(TIMES, fsdp_gradient_s_per_param=g))
    ]  # fmt: skip
    assert compute_s[1] - compute_s[0] == pytest.approx(reducing * (L * BLOCK + ROOT) * g,
                                                        rel=1e-9)  # fmt: skip


@pytest.mark.parametrize(("reduce_dtype", "bytes_per_param"),
                         [("fp32", 2 + 4 + 4 + 4), ("bf16", 2 + 2)])  # fmt: skip
def test_the_gradient_cast_and_division_move_their_bytes_at_the_hbm_bandwidth(
    reduce_dtype: str, bytes_per_param: int
) -> None:
    # bf16 gradients: cast to fp32 (read 2, write 4) and divide in place (read and write 4);
    # in bf16 only the division (2 + 2); at 2 TB/s x efficiency.memory 0.8
    gpu = GpuSpec("X", {"bf16": 1e15}, 80 * 10**9, 2e12)
    par = replace(FSDP, fsdp_reduce_dtype=reduce_dtype).with_gpus(N)
    times = step_times(SMALL, Training(seq_length=64, global_batch_size=N), par, gpu,
                       Efficiency(memory=0.8))  # fmt: skip
    assert times.fsdp_gradient_s_per_param == pytest.approx(bytes_per_param / (2e12 * 0.8),
                                                            rel=1e-12)  # fmt: skip


def test_no_shard_all_reduces_each_unit_and_gathers_nothing() -> None:
    got = recorded(replace(FSDP, fsdp_sharding="no_shard"))
    assert (got["allgather"], got["reducescatter"]) == (0, 0)
    assert got["allreduce"] == 2 * (L * BLOCK + ROOT)


def two_nodes() -> Any:
    """2 nodes of 4 GPUs (NVLink inside, one NIC per GPU) on one InfiniBand leaf."""
    return fat_tree(2, gpus_per_node=4, nvlinks_per_gpu=4, nvlink_bandwidth_bytes_per_s=25e9,
                    nvlink_latency_s=1e-6, nics_per_node=4, nic_bandwidth_bytes_per_s=50e9,
                    nic_latency_s=1e-6, pcie_bandwidth_bytes_per_s=60e9, pcie_latency_s=1e-6,
                    fabric_latency_s=1e-6)  # fmt: skip


def ib_bytes(par: Parallelism) -> float:
    """Bytes the step put on the InfiniBand links (NIC to leaf and back), summed."""
    g = two_nodes()
    t = Training(seq_length=64, global_batch_size=8)
    r = training_step(g, SMALL, t, par, times=TIMES, calibration=None, protocol=None)
    kinds = [g.edges[link]["kind"].value for link in r.timeline.links]
    return float(sum(b for b, kind in zip(r.timeline.link_bytes, kinds, strict=True)
                     if kind == "ib"))  # fmt: skip


def test_hybrid_shard_crosses_nodes_only_with_the_replicas_all_reduce() -> None:
    # 8 GPUs, dp 8, one micro-batch each. Shard groups: the 4 GPUs of a node (gathers and
    # reduce-scatters on NVLink); replicate groups: GPU i of each node, 4 groups of 2.
    # After each unit's reduce-scatter, each replicate group all-reduces the unit's
    # shard, X = 2 bytes x params / 4 (sizes padded to 2 x 4 bytes: none here). A ring
    # all-reduce of 2 ranks: each sends X/2 twice, NIC -> leaf -> NIC (2 IB links).
    hybrid = Parallelism(data_parallel="fsdp", fsdp_sharding="hybrid_shard")
    shard_bytes = sum(2 * params // 4 for params in [BLOCK] * L + [ROOT])
    assert ib_bytes(hybrid) == pytest.approx(4 * 2 * shard_bytes * 2, rel=1e-12)
    # fsdp_shard_size 8: one shard group of both nodes, no replica (full_shard's calls)
    assert ib_bytes(replace(hybrid, fsdp_shard_size=8)) == \
        pytest.approx(ib_bytes(FSDP), rel=1e-12)  # fmt: skip


def test_fsdp_memory_counts_the_units_it_holds_gathered() -> None:
    # dp 4, tp 1, one stage: psi = L BLOCK + ROOT parameters, sharded 4 ways: 2 + 2 + 12
    # bytes each. Gathered (limit_all_gathers): 2 blocks and the root, 2 bytes each; the
    # gradient of the largest unit being reduced (a block here), 2 bytes each.
    # Activations: 34 s b h bytes per layer (FlashAttention, sequence parallel notation
    # with t = 1), L layers of one micro-batch.
    s, b = 64, 1
    t = Training(seq_length=s, micro_batch_size=b, global_batch_size=4)
    psi = L * BLOCK + ROOT
    assert BLOCK > ROOT
    mem = memory_per_gpu(SMALL, t, Parallelism(dp=4, data_parallel="fsdp"))
    assert (mem.params_bytes, mem.gradients_bytes, mem.optimizer_bytes) == (
        2 * psi / 4, 2 * psi / 4, 12 * psi / 4)  # fmt: skip
    assert mem.activations_bytes == L * 34 * s * b * H
    assert mem.gathered_params_bytes == 2 * (2 * BLOCK + ROOT)
    assert mem.unsharded_gradients_bytes == 2 * BLOCK
    assert mem.largest_part == "optimizer"  # 3 psi > 2 (2 BLOCK + ROOT) and the rest
    # shard_grad_op keeps every unit gathered from its forward to its backward: 2 psi;
    # no_sync keeps every unsharded gradient too; an fp32 reduce doubles the one reduced.
    four = Parallelism(dp=4, data_parallel="fsdp")
    grad_op = memory_per_gpu(SMALL, t, replace(four, fsdp_sharding="shard_grad_op"))
    assert grad_op.gathered_params_bytes == 2 * psi
    no_sync = memory_per_gpu(SMALL, t, replace(four, fsdp_no_sync=True, fsdp_reduce_dtype="fp32"))
    assert no_sync.unsharded_gradients_bytes == 4 * BLOCK + 2 * psi
    # hybrid over 2-rank shard groups: the state over 2; no_shard: DDP's, nothing gathered
    hybrid = memory_per_gpu(SMALL, t, replace(four, fsdp_sharding="hybrid_shard",
                                              fsdp_shard_size=2))  # fmt: skip
    assert hybrid.optimizer_bytes == 12 * psi / 2
    ddp = memory_per_gpu(SMALL, t, replace(four, fsdp_sharding="no_shard"))
    assert (ddp.params_bytes, ddp.gathered_params_bytes, ddp.unsharded_gradients_bytes) == (
        2 * psi, 0, 0)  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"fsdp_sharding": "zero"}, "parallelism: fsdp_sharding must be one of full_shard, "
         "shard_grad_op, hybrid_shard, no_shard, got 'zero'"),
        ({"fsdp_backward_prefetch": "pre"}, "parallelism: fsdp_backward_prefetch must be one "
         "of backward_pre, backward_post, none, got 'pre'"),
        ({"fsdp_reduce_dtype": "fp8"}, "parallelism: fsdp_reduce_dtype must be one of bf16, "
         "fp16, fp32, got 'fp8'"),
        ({"fsdp_layers_per_unit": 0}, "parallelism: fsdp_layers_per_unit must be an integer "
         ">= 1, got 0"),
        ({"fsdp_no_sync": 1}, "parallelism: fsdp_no_sync must be true or false, got 1"),
    ],
)  # fmt: skip
def test_a_bad_fsdp_option_gets_one_line(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Parallelism(data_parallel="fsdp", **fields)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"fsdp_layers_per_unit": 3}, "parallelism: fsdp_layers_per_unit 3 does not split a "
         "model chunk's 8 layers"),
        ({"fsdp_sharding": "hybrid_shard", "fsdp_shard_size": 3}, "parallelism: "
         "fsdp_shard_size 3 does not split the 4 data- and context-parallel ranks"),
    ],
)  # fmt: skip
def test_a_layout_fsdp_cannot_split_gets_one_line(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        step(Parallelism(data_parallel="fsdp", **fields))
    assert str(info.value) == message


def test_a_steps_calls_count_one_compute_span_per_unit() -> None:
    # dp 4, tp 1, one stage, 3 micro-batches: every replica waits for the same gathers,
    # so one compute span runs each unit on all 4: per micro-batch, forward and backward
    # of 8 units, 2 x 3 x 8 = 48 at least. The session also records the output layer's
    # forward and backward (2 per micro-batch) and each replica's optimizer: 48 + 6 + 4.
    par = Parallelism(data_parallel="fsdp", sequence_parallel=False)
    t = Training(seq_length=64, global_batch_size=3 * N)
    assert step_calls(SMALL, t, par.with_gpus(N)) == 2 * 3 * L
    g = switch_star(N, link_bandwidth_bytes_per_s=BW, link_latency_s=LAT)
    with recording_calls() as calls:
        training_step(g, SMALL, t, par, times=TIMES, calibration=None, protocol=None)
    assert sum(c.collective == "compute" for c in calls) == 2 * 3 * L + 2 * 3 + N


@pytest.mark.parametrize(
    ("sharding", "tp"),
    [("full_shard", 1), ("shard_grad_op", 1), ("no_shard", 1), ("full_shard", 2),
     ("no_shard", 4)],
)  # fmt: skip
def test_one_compute_span_for_every_replica_runs_as_one_each(
    sharding: str, tp: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two nodes of 4 GPUs on InfiniBand, calls sharing links (the flow model): the step
    # with one span per unit for all 8 / tp replicas, and with tensor parallelism each
    # tensor-parallel call as one op over every replica's group, takes the time it takes
    # with one span and one call each.
    par = Parallelism(data_parallel="fsdp", fsdp_sharding=sharding, tp=tp)
    t = Training(seq_length=64, global_batch_size=16)

    def time_s() -> float:
        r = training_step(two_nodes(), SMALL, t, par, times=TIMES, calibration=None,
                          protocol=None)  # fmt: skip
        return float(r.metrics["time_s"])

    alike = time_s()
    monkeypatch.setattr(step_module, "_replicas_alike", lambda _p: False)
    assert time_s() == pytest.approx(alike, rel=1e-12)
