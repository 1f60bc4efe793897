"""torchtitan's selective activation checkpointing (``sac_op``, ``sac_layer``): what the
backward re-runs, the calls it issues again and the activations it keeps, against counts
derived here from torchtitan's policy (``parallelize_llama.py`` @ 6a6f755d: save every
``aten.mm`` output but every second, and the fused attention's; checkpoint every second
block under ``selective_ac_option = "2"``)."""

from __future__ import annotations

from collections import Counter

import pytest

from simcoll.core.errors import ConfigError
from simcoll.prediction.session import recording_calls
from simcoll.topology import switch_star
from simcoll.topology.gpu_spec import GpuSpec
from simcoll.training import Parallelism, StepTimes, Training, Transformer, training_step
from simcoll.training.compute import Efficiency
from simcoll.training.flops import layer_ops, recomputed_ops
from simcoll.training.memory import activation_bytes_per_layer
from simcoll.training.step import step_times

B, S = 2, 1024  # sequences per micro-batch, tokens per sequence
# gated MLP, grouped-query attention (kv = 2 heads of 64 = 128 columns)
LLAMA = Transformer("llama-like", n_layers=8, hidden_size=512, ffn_hidden_size=1536,
                    n_heads=8, n_kv_heads=2, vocab_size=1000)  # fmt: skip
PLAIN = Transformer("plain", n_layers=8, hidden_size=256, ffn_hidden_size=1024, n_heads=8,
                    vocab_size=1000, gated_mlp=False)  # fmt: skip
TIMES = StepTimes(forward_s_per_layer=1e-3, backward_s_per_layer=2e-3, head_forward_s=0.0,
                  head_backward_s=0.0, optimizer_s=0.0)  # fmt: skip


def rerun_gemm_flops(m: Transformer, **kw: object) -> float:
    t = Training(seq_length=S, micro_batch_size=B, global_batch_size=B, **kw)  # type: ignore[arg-type]
    return sum(o.flops for o in recomputed_ops(layer_ops(m, t, Parallelism()), t)
               if o.op_class == "gemm")  # fmt: skip


@pytest.mark.parametrize("early_stop", [True, False])
def test_sac_op_reruns_the_even_numbered_matmuls_of_a_llama_block(early_stop: bool) -> None:
    # The block's matmuls in call order: wq (1), wk (2), wv (3), wo (4), w1 (5), w3 (6),
    # w2 (7). The even ones are re-run: wk (h x kv), wo (h x h), w3 (h x f), each
    # 2 tokens k n FLOPs; w2, the last, is saved either way.
    h, kv, f, tokens = 512, 2 * 512 // 8, 1536, B * S
    expected = 2 * tokens * (h * kv + h * h + h * f)
    flops = rerun_gemm_flops(LLAMA, recompute="sac_op", recompute_early_stop=early_stop)
    assert flops == pytest.approx(expected, rel=1e-12)


def test_sac_op_without_a_gated_mlp_reruns_the_down_projection_unless_early_stop() -> None:
    # wq, wk, wv, wo, then w1 (5, saved) and w2 (6): the down projection is even, so it is
    # re-run, but it is the block's last matmul, which PyTorch's early stop never re-runs.
    h, f, tokens = 256, 1024, B * S
    assert rerun_gemm_flops(PLAIN, recompute="sac_op") == 2 * tokens * (h * h + h * h + f * h)
    early = rerun_gemm_flops(PLAIN, recompute="sac_op", recompute_early_stop=True)
    assert early == 2 * tokens * (h * h + h * h)


def test_sac_op_under_fp8_saves_no_matmul() -> None:
    # torchao's float8 matmul is aten._scaled_mm, not in the save list: every GEMM is
    # re-run, as under full recomputation (the same early stop).
    full = rerun_gemm_flops(LLAMA, recompute="full", precision="fp8")
    assert rerun_gemm_flops(LLAMA, recompute="sac_op", precision="fp8") == full


@pytest.mark.parametrize("n_layers", [8, 5])
def test_sac_layer_reruns_every_second_blocks_forward(n_layers: int) -> None:
    # torchtitan checkpoints the blocks it counts 2, 4, ...: floor(L / 2) of L. The mean
    # backward per layer is the plain one plus that share of a full re-run.
    model = Transformer("m", n_layers=n_layers, hidden_size=256, ffn_hidden_size=1024,
                        n_heads=8, vocab_size=1000)  # fmt: skip
    gpu = GpuSpec("GPU", {"bf16": 100e12}, 80 * 10**9)
    par = Parallelism().with_gpus(1)

    def backward_s(recompute: str) -> float:
        t = Training(seq_length=S, micro_batch_size=B, global_batch_size=B, recompute=recompute,
                     recompute_early_stop=recompute != "none")  # fmt: skip
        return step_times(model, t, par, gpu, Efficiency()).backward_s_per_layer

    share = (n_layers // 2) / n_layers
    expected = backward_s("none") + share * (backward_s("full") - backward_s("none"))
    assert backward_s("sac_layer") == pytest.approx(expected, rel=1e-12)


def test_sac_op_keeps_the_block_input_and_the_saved_outputs() -> None:
    # tp 2 with sequence parallelism: the block's input 2 s b h / 2 bytes; the saved wq
    # (h), wv (kv), w1 (f) and w2 (h) outputs and the attention's output (h), each split
    # over tp: 2 s b (2 h + kv + f + h) / 2.
    h, kv, f = 512, 128, 1536
    t = Training(seq_length=S, micro_batch_size=B, recompute="sac_op")
    got = activation_bytes_per_layer(LLAMA, t, Parallelism(tp=2))
    assert got == 2 * S * B * h / 2 + 2 * S * B * (2 * h + kv + f + h) / 2


def test_sac_layer_keeps_half_the_blocks_whole() -> None:
    # 8 layers: 4 checkpointed (their input, 2 s b h), 4 with every activation (34 s b h
    # under FlashAttention, Korthikanti et al.), tp 1.
    h = 512
    t = Training(seq_length=S, micro_batch_size=B, recompute="sac_layer")
    got = activation_bytes_per_layer(LLAMA, t, Parallelism())
    assert got == pytest.approx((2 * S * B * h + 34 * S * B * h) / 2, rel=1e-12)


def recorded(t: Training, par: Parallelism) -> Counter[str]:
    with recording_calls() as calls:
        training_step(switch_star(2, link_bandwidth_bytes_per_s=1e20, link_latency_s=0.0),
                      PLAIN, t, par, times=TIMES, calibration=None, protocol=None)  # fmt: skip
    total: Counter[str] = Counter()
    for c in calls:
        if c.collective != "compute":
            total[c.collective] += c.size_bytes
    return total


def test_sac_op_issues_the_gathers_again_but_not_the_saved_reduce_scatters() -> None:
    # tp 2, sequence parallel, 8 layers, one micro-batch: per layer the forward has 2
    # all-gathers and 2 reduce-scatters, the backward as many. The policy saves
    # reduce_scatter_tensor's output, so the recomputation issues only the gathers again
    # (each feeds a matmul it re-runs: wk, w3... need the gathered input).
    act, L = B * S * 256 * 2, 8
    t = Training(seq_length=S, micro_batch_size=B, global_batch_size=B, recompute="sac_op",
                 recompute_early_stop=True)  # fmt: skip
    calls = recorded(t, Parallelism(tp=2, sequence_parallel=True))
    assert calls["allgather"] == (2 + 2 + 2) * L * act
    assert calls["reducescatter"] == (2 + 2) * L * act


def test_sac_layer_issues_every_second_layers_calls_again() -> None:
    # As a full recomputation with early stop (2 gathers and 1 reduce-scatter again per
    # layer), on 4 of the 8 layers.
    act, L = B * S * 256 * 2, 8
    t = Training(seq_length=S, micro_batch_size=B, global_batch_size=B,
                 recompute="sac_layer", recompute_early_stop=True)  # fmt: skip
    calls = recorded(t, Parallelism(tp=2, sequence_parallel=True))
    assert calls["allgather"] == (2 + 2) * L * act + 2 * (L // 2) * act
    assert calls["reducescatter"] == (2 + 2) * L * act + 1 * (L // 2) * act


def test_early_stop_applies_to_the_checkpointed_modes_only() -> None:
    Training(seq_length=64, recompute="sac_op", recompute_early_stop=True)
    with pytest.raises(ConfigError, match="recompute_early_stop applies to recompute = full, "
                       "sac_op, sac_layer, got recompute 'selective'"):  # fmt: skip
        Training(seq_length=64, recompute="selective", recompute_early_stop=True)
