"""Tests of simcoll.training.compute: each kernel's time from its shape."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simcoll.topology.gpu_spec import GpuSpec
from simcoll.training.attention import AttentionShape
from simcoll.training.compute import KERNEL_LAUNCH_S, Efficiency, compute_basis, op_time_s
from simcoll.training.flops import ComputeOp, backward_ops, layer_ops
from simcoll.training.gemm import GemmShape, full_wave_fraction, gemm_table
from simcoll.training.spec import Parallelism, Training, Transformer
from simcoll.training.step import step_times

H100 = GpuSpec("H100", {"bf16": 989e12, "fp8": 1979e12}, 80 * 10**9, 3.35e12, sm_count=132,
               kernels="h100-sxm")  # fmt: skip
A100 = GpuSpec("A100", {"bf16": 312e12}, 40 * 10**9, 1.555e12, sm_count=108)
#: The A100 with its attention table (FlashAttention-2's figures), as the shipped files have it
A100_MEASURED = GpuSpec("A100", {"bf16": 312e12}, 40 * 10**9, 1.555e12, sm_count=108,
                        kernels="a100-sxm")  # fmt: skip


def gemm_op(b: float, m: float, n: float, k: float) -> ComputeOp:
    shape = GemmShape(b, m, n, k)
    return ComputeOp("g", "gemm", shape.flops, shape.memory_bytes(2), gemm=shape)


def test_a_gemm_on_a_measured_gpu_takes_its_flops_over_the_tables_throughput() -> None:
    # beyond the table's largest dimension (4096): the throughput measured at 4096^3
    measured = 780_000_000_000_000 < _at_4096_cubed() < 781_000_000_000_000
    assert measured  # XLA's sm_90 bf16 entry, about 780 TFLOP/s
    op = gemm_op(1, 8192, 8192, 8192)
    expected = 2 * 8192**3 / _at_4096_cubed()
    assert op_time_s(op, H100, "bf16", Efficiency()) == pytest.approx(expected, rel=1e-12)
    # the one fitted scalar scales it
    assert op_time_s(op, H100, "bf16", Efficiency(kernels=0.5)) == pytest.approx(
        2 * expected, rel=1e-12)  # fmt: skip


def test_a_gemm_on_an_unmeasured_gpu_pays_its_waves() -> None:
    # 4096 x 4096 x 8192 on 108 SMs: 512 tiles of 256 x 128 in 5 waves (512 / 540 of the
    # work useful), 1,024 of 128 x 128 in 10 (the same), 2,048 of 64 x 128 in 19 (2,048 /
    # 2,052): the last; compute-bound (arithmetic intensity far above the A100's ridge)
    flops = 2 * 4096 * 4096 * 8192
    useful = 4096 * 4096 / (19 * 108 * 64 * 128)
    expected = flops / (312e12 * full_wave_fraction("bf16") * useful)
    got = op_time_s(gemm_op(1, 4096, 4096, 8192), A100, "bf16", Efficiency())
    assert got == pytest.approx(expected, rel=1e-12)


def test_a_thin_gemm_on_an_unmeasured_gpu_is_bound_by_its_memory() -> None:
    # 16 tokens through a 8192 x 8192 weight: the weight's 128 MiB dominates the traffic
    op = gemm_op(1, 16, 8192, 8192)
    expected = op.memory_bytes / (1.555e12 * 0.8)
    assert op_time_s(op, A100, "bf16", Efficiency()) == pytest.approx(expected, rel=1e-12)


def _attention(shape: AttentionShape, kernel: str) -> ComputeOp:
    """A fused attention forward of ``shape`` run by ``kernel``."""
    return ComputeOp("attention", "attention", shape.forward_flops, 0.0, attention=shape,
                     kernel=kernel)  # fmt: skip


def test_attention_takes_the_measured_throughput_of_its_kernel_and_pass() -> None:
    # the FlashAttention-3 paper's H100 figures at 4k: cuDNN forward with the mask 518
    # TFLOP/s; backward 499 unmasked, times the forward's masked share 518 / 609
    shape = AttentionShape(1, 32, 4096, 4096, 128, causal=True)
    forward = _attention(shape, "cudnn")
    expected = shape.forward_flops / 518e12
    assert op_time_s(forward, H100, "bf16", Efficiency()) == pytest.approx(expected, rel=1e-12)
    (backward,) = backward_ops([forward])
    expected = 2.5 * shape.forward_flops / (499e12 * 518 / 609)
    assert op_time_s(backward, H100, "bf16", Efficiency()) == pytest.approx(expected, rel=1e-12)
    # an unmeasured GPU: the H100's figures scaled by the peaks
    scaled = shape.forward_flops / (518e12 * 312 / 989.4)
    assert op_time_s(forward, A100, "bf16", Efficiency()) == pytest.approx(scaled, rel=1e-12)
    # and so for a kernel the GPU's table lacks: the A100's holds FlashAttention-2 only
    assert op_time_s(forward, A100_MEASURED, "bf16", Efficiency()) == pytest.approx(
        scaled, rel=1e-12
    )


def test_the_a100_times_flashattention_2_from_its_own_benchmark() -> None:
    # FlashAttention-2 on an A100, forward + backward with the mask at 4k: 173 TFLOP/s; the
    # H100's forward runs 368/310 as fast as its backward there (FA3 paper, unmasked: the
    # masked backward takes the forward's masked share). So the backward runs at
    # 173 (310/368 + 2.5)/3.5 and the forward at 368/310 of that.
    shape = AttentionShape(2, 16, 4096, 4096, 128, causal=True)
    forward = _attention(shape, "flash2")
    (backward,) = backward_ops([forward])
    backward_flops_per_s = 173e12 * (310 / 368 + 2.5) / 3.5
    forward_s = shape.forward_flops / (368 / 310 * backward_flops_per_s)
    backward_s = 2.5 * shape.forward_flops / backward_flops_per_s
    assert op_time_s(forward, A100_MEASURED, "bf16", Efficiency()) == pytest.approx(
        forward_s, rel=1e-12
    )
    assert op_time_s(backward, A100_MEASURED, "bf16", Efficiency()) == pytest.approx(backward_s,
                                                                            rel=1e-12)  # fmt: skip
    # together, the measured forward + backward
    assert 3.5 * shape.forward_flops / (forward_s + backward_s) == pytest.approx(173e12)
    assert compute_basis(A100_MEASURED, "bf16")[1] == (
        "attention: measured on a100-sxm (FlashAttention-2's benchmark, Dao 2023), by "
        "sequence length")  # fmt: skip
    assert compute_basis(A100_MEASURED, "bf16", "cudnn")[1].startswith(
        "attention: no measured cudnn table for A100: the H100's")  # fmt: skip


def test_a_kernel_measured_nowhere_takes_flashattention_2_on_the_h100_scaled_by_peak() -> None:
    # llm-foundry's Triton FlashAttention: FlashAttention-2's H100 figure, forward with the
    # mask at 4k, 319 TFLOP/s: as it is on the H100, x 312/989.4 (the peaks) on an A100,
    # even though the A100 has FlashAttention-2's own figures
    shape = AttentionShape(1, 32, 4096, 4096, 128, causal=True)
    forward = _attention(shape, "triton")
    h100_s = shape.forward_flops / 319e12
    assert op_time_s(forward, H100, "bf16", Efficiency()) == pytest.approx(h100_s, rel=1e-12)
    a100_s = shape.forward_flops / (319e12 * 312 / 989.4)
    assert op_time_s(forward, A100_MEASURED, "bf16", Efficiency()) == pytest.approx(
        a100_s, rel=1e-12
    )
    assert compute_basis(A100_MEASURED, "bf16", "triton")[1] == (
        "attention: triton is measured on no GPU: the H100's flash2 throughput x 312/989.4 "
        "TFLOP/s")  # fmt: skip
    assert compute_basis(H100, "bf16", "triton")[1] == (
        "attention: triton is measured on no GPU: the H100's flash2 throughput"
    )


def test_no_kernel_is_shorter_than_its_launch_or_the_smallest_measured() -> None:
    assert op_time_s(gemm_op(1, 1, 1, 1), A100, "bf16", Efficiency()) == KERNEL_LAUNCH_S
    tiny = ComputeOp("norm", "elementwise", 10.0, 10.0)
    assert op_time_s(tiny, H100, "bf16", Efficiency()) == KERNEL_LAUNCH_S
    # on a measured GPU a GEMM below the table takes as long as its smallest, 256^3 (4.99 us)
    table = gemm_table("h100-sxm", "bf16")
    assert table is not None
    smallest_s = 2 * 256**3 / table.flops_per_s(GemmShape(1, 256, 256, 256))
    assert op_time_s(gemm_op(1, 1, 1, 1), H100, "bf16", Efficiency()) == pytest.approx(
        smallest_s, rel=1e-12)  # fmt: skip
    assert smallest_s > KERNEL_LAUNCH_S


def test_the_basis_says_where_each_time_comes_from() -> None:
    assert compute_basis(H100, "bf16") == [
        "GEMMs: XLA's measured table sm_90 (bf16xbf16->bf16), interpolated by shape",
        "attention: measured on h100-sxm (Shah et al. 2024), by sequence length",
    ]
    bare = GpuSpec("X", {"bf16": 100e12}, 10**9)
    assert compute_basis(bare, "bf16")[0] == (
        "GEMMs: no measured table and no SM count for X (add gpu.sms): the roofline with "
        "efficiency.gemm")  # fmt: skip


def test_backward_gemms_are_the_data_and_weight_gradients() -> None:
    up = gemm_op(1, 4096, 2048, 1024)  # [4096 x 1024] @ [1024 x 2048]
    dgrad, wgrad = backward_ops([up])
    assert dgrad.gemm == GemmShape(1, 4096, 1024, 2048)  # dY [4096 x 2048] @ W^T [2048 x 1024]
    assert wgrad.gemm == GemmShape(1, 1024, 2048, 4096)  # X^T [1024 x 4096] @ dY [4096 x 2048]
    assert dgrad.flops + wgrad.flops == 2 * up.flops


def _at_4096_cubed() -> float:
    """XLA's measured sm_90 bf16 FLOP/s of (1, 4096, 4096, 4096), read from the CSV here."""
    path = Path(__file__).resolve().parents[2] / "simcoll/training/data/xla_gemm_flops.csv"
    for line in path.read_text().splitlines():
        if line.startswith("sm_90,1,4096,4096,4096,bf16xbf16->bf16,"):
            return float(line.rsplit(",", 1)[1])
    raise AssertionError("no such row")


def test_fp8_gemms_pay_transformer_engines_casts_at_the_hbms_bandwidth() -> None:
    # One layer of a tiny model under FP8: before each GEMM [t x k] @ [k x n] a cast of its
    # input and weight with their transposes (read 2 B, write 1 + 1: 4 B per element), in
    # the backward one of its output gradient; under BF16 none. At the H100's 3.35 TB/s
    # and Efficiency().memory, each cast takes its bytes over that bandwidth.
    from simcoll.training.flops import layer_ops  # noqa: PLC0415 - this test's subject
    from simcoll.training.spec import Parallelism, Training, Transformer  # noqa: PLC0415

    m = Transformer("tiny", n_layers=1, hidden_size=1024, ffn_hidden_size=4096, n_heads=8,
                    vocab_size=1000, gated_mlp=False)  # fmt: skip
    t, h, f = 4096, 1024, 4096  # tokens, hidden, MLP
    shapes = {"qkv": (h, 3 * h), "attention out": (h, h), "mlp up": (h, f), "mlp down": (f, h)}

    def casts(precision: str) -> list[ComputeOp]:
        training = Training(seq_length=t, micro_batch_size=1, precision=precision)
        return [o for o in layer_ops(m, training, Parallelism(sequence_parallel=False))
                if o.name.startswith("fp8 cast")]  # fmt: skip

    assert casts("bf16") == []
    forward = {o.name.removeprefix("fp8 cast "): o for o in casts("fp8")}
    assert set(forward) == set(shapes)
    for name, (k, n) in shapes.items():
        assert forward[name].memory_bytes == 4 * (t * k + k * n)
        (back,) = backward_ops([forward[name]])
        assert back.memory_bytes == 4 * t * n
        seconds = op_time_s(back, H100, "fp8", Efficiency())
        assert seconds == pytest.approx(4 * t * n / (3.35e12 * Efficiency().memory), rel=1e-12)


def test_separate_projections_run_each_matmul_as_a_gemm_of_its_own_shape() -> None:
    # torchtitan's wq, wk, wv: [8192 x 8192] @ [8192 x n] for n = 8192, 1024, 1024, on the
    # A100's waves (108 SMs). n = 8192: 2,048 tiles of 256 x 128 in 19 waves of 108, 2,048
    # / 2,052 useful. n = 1,024: 512 tiles of 128 x 128 in 5 waves, 512 / 540 (256 x 128:
    # 256 / 324; 64 x 128: 1,024 / 1,080). Fused (Megatron's linear_qkv, n = 10,240):
    # 10,240 tiles of 64 x 128 in 95 waves, 10,240 / 10,260. Every one compute-bound.
    peak = 312e12 * full_wave_fraction("bf16")

    def gemm_s(n: int, useful: float) -> float:
        return 2 * 8192 * n * 8192 / (peak * useful)

    apart = gemm_s(8192, 2048 / 2052) + 2 * gemm_s(1024, 512 / 540)
    fused = gemm_s(10240, 10240 / 10260)
    m = Transformer("m", n_layers=1, hidden_size=8192, ffn_hidden_size=8192, n_heads=64,
                    n_kv_heads=8, vocab_size=1000)  # fmt: skip
    for separate, expected in ((True, apart), (False, fused)):
        t = Training(seq_length=8192, separate_projections=separate)
        qkv = next(op for op in layer_ops(m, t, Parallelism()) if op.name == "qkv")
        assert op_time_s(qkv, A100, "bf16", Efficiency()) == pytest.approx(expected, rel=1e-12)
    assert apart > 1.01 * fused  # wk and wv (a fifth of the FLOPs) waste 5 % of their waves
    # their gradients too: dgrad [8192 x n] @ [n x 8192], wgrad [8192 x 8192] @ [8192 x n]
    t = Training(seq_length=8192, separate_projections=True)
    qkv = next(op for op in layer_ops(m, t, Parallelism()) if op.name == "qkv")
    dgrad, wgrad = backward_ops([qkv])
    assert [g.k for g in dgrad.gemms] == [8192, 1024, 1024]
    assert [g.n for g in wgrad.gemms] == [8192, 1024, 1024]
    assert sum(g.flops for g in dgrad.gemms) == dgrad.flops == qkv.flops


def test_async_tp_runs_each_fused_gemm_in_row_pieces() -> None:
    # PyTorch's fused_all_gather_matmul: one mm per shard of the gathered activations and
    # per weight. At tp 8 the QKV projection of 8,192 tokens, h = 4,096 (32 heads, 8 KV
    # heads of 128): pieces [1,024 x 4,096] @ [4,096 x n], n = 512, 128, 128 (wq, wk, wv
    # over tp), 8 of each; on the H100 their times from XLA's table by shape.
    m = Transformer("m", n_layers=1, hidden_size=4096, ffn_hidden_size=14336, n_heads=32,
                    n_kv_heads=8, vocab_size=1000)  # fmt: skip
    t = Training(seq_length=8192, separate_projections=True)
    par = Parallelism(tp=8, tp_comm_overlap=True, tp_comm_overlap_impl="async_tp").with_gpus(8)
    times = step_times(m, t, par, H100, Efficiency())
    pieces = [gemm_op(1, 1024, n, 4096) for n in (512, 128, 128)]
    expected = 8 * sum(op_time_s(op, H100, "bf16", Efficiency()) for op in pieces)
    assert times.tp_site_forward_split_s[0] == pytest.approx(expected, rel=1e-12)
    whole = sum(op_time_s(gemm_op(1, 8192, n, 4096), H100, "bf16", Efficiency())
                for n in (512, 128, 128))  # fmt: skip
    assert times.tp_site_forward_s[0] == pytest.approx(whole, rel=1e-12)
    assert times.tp_site_forward_split_s[0] > whole  # smaller pieces, lower throughput
    # the data gradient of the attention's output projection, the backward's gather site:
    # [8,192 x 4,096] @ [4,096 x 512] as 8 pieces of 1,024 rows
    dgrad = 8 * op_time_s(gemm_op(1, 1024, 512, 4096), H100, "bf16", Efficiency())
    assert times.tp_site_dgrad_split_s[1] == pytest.approx(dgrad, rel=1e-12)
    # without async TP nothing is split
    assert step_times(m, t, replace(par, tp_comm_overlap=False), H100,
                      Efficiency()).tp_site_forward_split_s == ()  # fmt: skip
