"""Memory per pipeline stage: the first stage's activations, the last stage's output layer
and logits, and which stage binds (issue 42), counted by hand."""

from __future__ import annotations

import pytest

from simcoll.training.layout import BACKWARD, interleaved_order
from simcoll.training.memory import (
    activation_bytes_per_layer,
    layers_in_flight,
    memory_per_gpu,
    stage_memory,
)
from simcoll.training.spec import Parallelism, Training, Transformer, virtual_stage_layers

M = Transformer("m", n_layers=4, hidden_size=8, ffn_hidden_size=32, n_heads=2, vocab_size=100)
T = Training(seq_length=16, micro_batch_size=2, global_batch_size=8)  # 4 micro-batches
P = Parallelism(pp=2, dp=1)  # ZeRO-1 over one rank: nothing sharded


def test_each_stage_by_hand() -> None:
    h, v, s, b = 8, 100, 16, 2
    # a layer: q (h x h), k and v (h x 8 each: 2 heads of 4), o (h x h), two norms (h
    # each), a gated MLP (3 x h x 32): 64 + 128 + 64 + 16 + 768
    layer = h * h + 2 * h * 8 + h * h + 2 * h + 3 * h * 32
    assert layer == 1040
    bytes_per_param = 2 + 2 + 12  # bf16 parameters and gradients, Adam's fp32 state
    per_layer_activations = s * b * h * 34  # sequence parallel, FlashAttention, tp 1
    first, last = stage_memory(M, T, P, 0), stage_memory(M, T, P, 1)
    # first stage: 2 layers and the embedding; 1F1B keeps 2 micro-batches alive
    assert first.params_bytes + first.gradients_bytes + first.optimizer_bytes == (
        bytes_per_param * (2 * layer + v * h))  # fmt: skip
    assert first.activations_bytes == 2 * 2 * per_layer_activations
    assert first.logits_bytes == 0
    # last stage: 2 layers, the final norm and the output layer; 1 micro-batch alive and
    # its logits, fp32 and the bf16 the GEMM wrote
    assert last.params_bytes + last.gradients_bytes + last.optimizer_bytes == (
        bytes_per_param * (2 * layer + h + v * h))  # fmt: skip
    assert last.activations_bytes == 1 * 2 * per_layer_activations
    assert last.logits_bytes == (4 + 2) * b * s * v
    # 80,896 B against 82,816 B: the last stage binds
    assert first.total_bytes == 80_896
    assert last.total_bytes == 82_816
    worst = memory_per_gpu(M, T, P)
    assert (worst.stage, worst.total_bytes) == (1, 82_816)


def test_fewer_micro_batches_than_stages_keep_fewer_alive() -> None:
    one = Training(seq_length=16, micro_batch_size=2, global_batch_size=2)  # 1 micro-batch
    assert stage_memory(M, one, P, 0).activations_bytes == 1 * 2 * 16 * 2 * 8 * 34


def test_uneven_stages_hold_their_own_layers() -> None:
    # 4 layers on 3 stages: 2 on the first, the other 2 split 1 and 1
    p = Parallelism(pp=3, dp=1, first_stage_layers=2)
    layer, h, v = 1040, 8, 100  # as counted in test_each_stage_by_hand
    params = [stage_memory(M, T, p, i).params_bytes for i in range(3)]
    assert params == [2 * (2 * layer + v * h), 2 * layer, 2 * (layer + h + v * h)]


def test_the_interleaved_schedule_holds_what_its_warm_up_ran() -> None:
    # Megatron's interleaved 1F1B, pp 4, 2 chunks per stage of 1 layer each (8 layers),
    # 8 micro-batches. A stage r runs (pp - r - 1) x 2 + (v - 1) x pp forwards before its
    # first backward, then one more: stage 0 11, stage 3 5 chunk-forwards of 1 layer. The
    # closed form (1 + (pp - 1) / (pp v)) x (pp - r) x L / pp said 1.375 x 4 x 2 = 11 on the
    # first stage, as counted, and 1.375 x 1 x 2 = 2.75 on the last (5 held).
    m = Transformer("m", n_layers=8, hidden_size=8, ffn_hidden_size=32, n_heads=2,
                    vocab_size=100)  # fmt: skip
    t = Training(seq_length=16, micro_batch_size=1, global_batch_size=8)
    p = Parallelism(pp=4, dp=1, virtual_stages=2)
    per_layer = activation_bytes_per_layer(m, t, p)
    held = [stage_memory(m, t, p, r).activations_bytes / per_layer for r in range(4)]
    assert held == [11, 9, 7, 5]


@pytest.mark.parametrize(("first", "last"), [(0, 0), (1, 3), (3, 1)])
def test_a_long_step_holds_what_three_pipelines_of_micro_batches_hold(
    first: int, last: int
) -> None:
    # The walk stops at 3 pp micro-batches; walked in full, 64 hold no more, even where
    # chunks differ and a steady-state forward outweighs the backward beside it.
    m = Transformer("m", n_layers=12, hidden_size=8, ffn_hidden_size=32, n_heads=2,
                    vocab_size=100)  # fmt: skip
    p = Parallelism(pp=2, virtual_stages=3, first_stage_layers=first, last_stage_layers=last)
    chunks = [float(n) for n in virtual_stage_layers(12, p)]
    for stage in range(2):
        held = peak = 0.0
        for phase, chunk, _ in interleaved_order(stage=stage, n_stages=2, n_microbatches=64,
                                                 n_chunks=3):  # fmt: skip
            held += (-1 if phase == BACKWARD else 1) * chunks[chunk * 2 + stage]
            peak = max(peak, held)
        assert layers_in_flight(m, p, stage, 64) == peak
