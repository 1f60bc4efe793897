"""Micro-batch size matters in an FSDP step (issue 42): a Llama 2 70B step with PyTorch
FSDP on 64 H100 (8 nodes of h100-ib-fat-tree), 512 sequences of 4,096 tokens, full
recomputation, at micro-batch 2 and 8.

The kernels of a micro-batch take the same time per token at both sizes (their GEMMs are
past the measured table's largest shapes). What differs is FSDP, once per micro-batch:

- its post-backward hook divides each unit's gradient in place before the reduce-scatter
  (bf16, read and write: 4 bytes per parameter, at the HBM bandwidth x 0.8), so the
  compute alone differs by (4 - 1) micro-batches x N x 4 B / (3.35 TB/s x 0.8), N the
  model's parameters counted by hand from its shape;
- every micro-batch gathers each block's parameters for its forward and its backward and
  reduce-scatters its gradients, the same calls at either size, and their CTAs hold SMs
  beside the blocks' compute (simcoll.prediction.sm_sharing): 4 times as many
  micro-batches, 4 times as many SM-seconds, (compute_2 - alone_2) = 4 x (compute_8 -
  alone_8).

So the step at 8 is the faster.
"""

from __future__ import annotations

import pytest

from simcoll.topology.gpu_spec import gpu_spec
from simcoll.topology.io import load
from simcoll.training import Efficiency, Parallelism, Training, read_model_file, training_step
from simcoll.training.step import step_times


def test_smaller_micro_batches_hold_more_sm_seconds_beside_compute() -> None:
    topology = load("h100-ib-fat-tree", {"n_nodes": "8"})
    model, _, _ = read_model_file("llama2-70b")
    layout = Parallelism(tp=1, pp=1, data_parallel="fsdp")
    gpu = gpu_spec(topology)
    assert gpu is not None
    shared, alone, step_s = {}, {}, {}
    for mb in (2, 8):
        training = Training(seq_length=4096, global_batch_size=512, micro_batch_size=mb,
                            recompute="full")  # fmt: skip
        metrics = training_step(topology, model, training, layout).metrics
        times = step_times(model, training, layout.with_gpus(64), gpu, Efficiency())
        # measured times (given): compute as alone, nothing slowed
        plain = training_step(topology, model, training, layout, times=times).metrics
        shared[mb], alone[mb], step_s[mb] = metrics["compute_s"], plain["compute_s"], \
            metrics["time_s"]  # fmt: skip
    # Llama 2 70B: 80 layers of q and o (8192 x 8192), k and v (8192 x 1024), the gated MLP
    # (3 x 8192 x 28672) and two norms, untied embedding and output (32000 x 8192), a norm
    params = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) \
        + 2 * 32000 * 8192 + 8192  # fmt: skip
    divide_s = params * 4 / (3.35e12 * 0.8)  # per micro-batch
    assert alone[2] - alone[8] == pytest.approx((4 - 1) * divide_s, rel=1e-6)
    assert shared[8] > alone[8]
    assert shared[2] - alone[2] == pytest.approx(4 * (shared[8] - alone[8]), rel=1e-6)
    assert step_s[8] < step_s[2]
