"""Compute time from the hardware: each kernel from its shape, measured where it can be.

- A GEMM takes its FLOPs over the throughput measured for its shape on the GPU
  (:mod:`simcoll.training.gemm`: XLA's table for the H100 and B200), or, for a GPU with
  no table, over its dense peak times the tile and wave quantisation of its shape on
  the GPU's SMs (the ``[gpu]`` table's ``sms``), bound below by its memory traffic.
- A fused attention (FlashAttention-2, cuDNN, FlashAttention-3) takes its FLOPs over the
  throughput measured for its kernel, pass, mask and sequence length
  (:mod:`simcoll.training.attention`: the H100's and the A100's), scaled by peak on a GPU
  or for a kernel with no table.
- Everything else (norms, activations, residuals, the loss, the optimizer, an unfused
  attention) is a roofline: ``max(F / (peak x e_class), M / (HBM x e_memory))``, with the
  stated efficiencies of :class:`Efficiency`.
- No kernel is shorter than :data:`KERNEL_LAUNCH_S`: the host submits kernels one after
  another, so a stream of tiny kernels runs at the rate they are launched.

Which measured table a GPU uses is its ``[gpu]`` table's ``kernels`` key
(``kernels = "h100-sxm"``); :func:`compute_basis` says, for a GPU, what each kernel's time
comes from. The fraction of the measured (or modelled) GEMM and attention throughput a
real step reaches is the one scalar fitted per GPU type, on one measured step, and stated
in the GPU's file (``kernel_efficiency``); :attr:`Efficiency.kernels` replaces it.

>>> from simcoll.topology.gpu_spec import GpuSpec
>>> gpu = GpuSpec("X", {"bf16": 100e12}, 80 * 10**9, 2e12)
>>> from simcoll.training.flops import ComputeOp
>>> op_time_s(ComputeOp("g", "gemm", 7e12, 1e9), gpu, "bf16", Efficiency(gemm=0.7))  # no shape
0.1
>>> op_time_s(ComputeOp("n", "elementwise", 1e6, 1.6e9), gpu, "bf16", Efficiency(memory=0.8))
0.001
>>> op_time_s(ComputeOp("tiny", "elementwise", 1.0, 1.0), gpu, "bf16", Efficiency())
4e-06
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from simcoll.core.errors import ConfigError
from simcoll.topology.gpu_spec import GpuSpec
from simcoll.training.attention import (
    ATTENTION_TABLES,
    H100_SXM_PEAK_16BIT_FLOPS_PER_S,
    STAND_IN_KERNEL,
    attention_flops_per_s,
    measures,
)
from simcoll.training.flops import ComputeOp, separate_gemms
from simcoll.training.gemm import (
    GemmShape,
    full_wave_fraction,
    gemm_table,
    wave_efficiency,
)

__all__ = [
    "KERNEL_LAUNCH_S",
    "Efficiency",
    "compute_basis",
    "op_time_s",
    "ops_time_s",
    "sixteen_bit",
]

#: The shortest a kernel takes: the host-side cost of submitting one CUDA kernel, about
#: 4-6 us (measured with the CUDA runtime on an RTX 5070 Ti, CUDA 13: "pegainfer (3):
#: From Launch Overhead to CUDA Graph", susun-blog.com), the low end taken.
KERNEL_LAUNCH_S = 4e-6


@dataclass(frozen=True)
class Efficiency:
    """The fraction of peak each roofline op class reaches (``memory``: of the HBM
    bandwidth), and of the measured throughput the shaped kernels reach (``kernels``).

    Defaults (assumed, not fitted): ``gemm`` 0.7 and ``attention`` 0.5 apply only where a
    kernel has no shape or is unfused (large bf16 GEMMs reach about 0.7 of dense peak in
    NVIDIA's published cuBLAS results; FlashAttention-2 about 0.5 on A100, Dao 2023);
    streaming kernels about 0.8 of HBM bandwidth; ``kernels`` 1.0, as measured.
    """

    gemm: float = 0.7
    attention: float = 0.5
    elementwise: float = 0.8
    optimizer: float = 0.8
    memory: float = 0.8
    kernels: float | None = None  # None: the GPU's file's kernel_efficiency, else 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name == "kernels":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise ConfigError(f"efficiency.{f.name} must be in (0, 1], got {value!r}")

    def kernels_on(self, gpu: GpuSpec) -> float:
        """The fraction of the measured kernels' throughput reached on ``gpu``: this
        record's, else the one fitted in the GPU's file (``kernel_efficiency``), else 1."""
        if self.kernels is not None:
            return self.kernels
        return gpu.kernel_efficiency if gpu.kernel_efficiency is not None else 1.0

    @classmethod
    def of(cls, table: Mapping[str, object] | None) -> Efficiency:
        """From a scenario's ``efficiency`` table; unknown keys are refused in one line."""
        table = dict(table or {})
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(table) - set(valid))
        if unknown:
            raise ConfigError(f"efficiency: unknown op class {unknown[0]!r}; valid: "
                              f"{', '.join(valid)}")  # fmt: skip
        return cls(**table)  # type: ignore[arg-type]


def sixteen_bit(gpu: GpuSpec, precision: str) -> str:
    """The precision attention and elementwise ops run in: 16 bits under mixed precision
    (and FP8 training's output layer: see :func:`simcoll.training.step.step_times`)."""
    if precision in ("fp8", "bf16", "fp16"):
        return "bf16" if "bf16" in gpu.peak_flops_per_s else "fp16"
    return precision


def _gemm_time_s(shape: GemmShape, op: ComputeOp, gpu: GpuSpec, precision: str,
                 efficiency: Efficiency) -> float:  # fmt: skip
    table = gemm_table(gpu.kernels, precision) if gpu.kernels else None
    if table is not None:
        return shape.flops / (table.flops_per_s(shape) * efficiency.kernels_on(gpu))
    if gpu.sm_count is None:  # no table, no SM count: the roofline of old
        flops_per_s = gpu.peak(precision) * efficiency.gemm
    else:
        waves = wave_efficiency(shape, gpu.sm_count)
        flops_per_s = (gpu.peak(precision) * full_wave_fraction(precision) * waves
                       * efficiency.kernels_on(gpu))  # fmt: skip
    flops_s = shape.flops / flops_per_s
    if gpu.memory_bandwidth_bytes_per_s is None:
        return flops_s
    return max(flops_s, op.memory_bytes / (gpu.memory_bandwidth_bytes_per_s * efficiency.memory))


def _attention_time_s(op: ComputeOp, gpu: GpuSpec, precision: str,
                      efficiency: Efficiency) -> float:  # fmt: skip
    assert op.attention is not None
    shape = op.attention
    table, kernel = gpu.kernels or "", op.kernel
    scale = 1.0
    if table not in ATTENTION_TABLES or not measures(table, kernel):
        # the H100's figures (FlashAttention-2's for a kernel measured nowhere), scaled by
        # the GPUs' 16-bit peaks
        kernel = kernel if measures("h100-sxm", kernel) else STAND_IN_KERNEL
        if table != "h100-sxm":
            scale = gpu.peak(sixteen_bit(gpu, precision)) / H100_SXM_PEAK_16BIT_FLOPS_PER_S
        table = "h100-sxm"
    flops_per_s = scale * attention_flops_per_s(table, kernel, op.pass_, shape.causal,
                                                shape.seq_q)  # fmt: skip
    return op.flops / (flops_per_s * efficiency.kernels_on(gpu))


def op_time_s(op: ComputeOp, gpu: GpuSpec, precision: str, efficiency: Efficiency) -> float:
    """One kernel's time (see the module docstring); an op that runs several GEMMs
    (:attr:`~simcoll.training.flops.ComputeOp.gemms`) their times one after another."""
    if op.gemms and op.op_class == "gemm":
        return sum(op_time_s(g, gpu, precision, efficiency) for g in separate_gemms(op))
    if op.gemm is not None and op.op_class == "gemm":
        return max(KERNEL_LAUNCH_S, _gemm_time_s(op.gemm, op, gpu, precision, efficiency))
    if op.attention is not None and op.kernel:
        return max(KERNEL_LAUNCH_S, _attention_time_s(op, gpu, precision, efficiency))
    if op.op_class == "gemm":
        peak, e = gpu.peak(precision), efficiency.gemm
    else:
        peak = gpu.peak(sixteen_bit(gpu, precision))
        e = getattr(efficiency, op.op_class)
    time_s = op.flops / (peak * e)
    if gpu.memory_bandwidth_bytes_per_s is not None:
        memory_s = op.memory_bytes / (gpu.memory_bandwidth_bytes_per_s * efficiency.memory)
        time_s = max(time_s, memory_s)
    return max(KERNEL_LAUNCH_S, time_s)


def ops_time_s(
    ops: Sequence[ComputeOp], gpu: GpuSpec, precision: str, efficiency: Efficiency
) -> float:
    """The ops one after another."""
    return sum(op_time_s(op, gpu, precision, efficiency) for op in ops)


def compute_basis(gpu: GpuSpec, precision: str, attention_kernel: str = "flash2") -> list[str]:
    """What the GEMMs' and the attention's (``attention_kernel``'s) times come from on
    ``gpu``, one line each.

    >>> from simcoll.topology.gpu_spec import GpuSpec
    >>> a100 = GpuSpec("A100", {"bf16": 312e12}, 40 * 10**9, 1.555e12, sm_count=108)
    >>> for line in compute_basis(a100, "bf16"):
    ...     print(line)
    GEMMs: no measured table for A100: tile and wave quantisation on its 108 SMs
    attention: no measured flash2 table for A100: the H100's measured throughput x 312/989.4 TFLOP/s
    """
    table = gemm_table(gpu.kernels, precision) if gpu.kernels else None
    if table is not None:
        gemm = f"GEMMs: XLA's measured table {table.gpu} ({table.dtype}), interpolated by shape"
    elif gpu.sm_count is not None:
        gemm = (f"GEMMs: no measured table for {gpu.name}: tile and wave quantisation on "
                f"its {gpu.sm_count} SMs")  # fmt: skip
    else:
        gemm = (f"GEMMs: no measured table and no SM count for {gpu.name} (add gpu.sms): "
                "the roofline with efficiency.gemm")  # fmt: skip
    source = ATTENTION_TABLES.get(gpu.kernels or "")
    peak = gpu.peak(sixteen_bit(gpu, precision))
    scaled = f"x {peak / 1e12:g}/{H100_SXM_PEAK_16BIT_FLOPS_PER_S / 1e12:g} TFLOP/s"
    if source is not None and measures(gpu.kernels or "", attention_kernel):
        attention = f"attention: measured on {gpu.kernels} ({source}), by sequence length"
    elif not measures("h100-sxm", attention_kernel):
        scaled = "" if gpu.kernels == "h100-sxm" else f" {scaled}"
        attention = (f"attention: {attention_kernel} is measured on no GPU: the H100's "
                     f"{STAND_IN_KERNEL} throughput{scaled}")  # fmt: skip
    else:
        attention = (f"attention: no measured {attention_kernel} table for {gpu.name}: the "
                     f"H100's measured throughput {scaled}")  # fmt: skip
    lines = [gemm, attention]
    if gpu.kernel_efficiency is not None:
        lines.append(f"both at {gpu.kernel_efficiency:g} of that throughput: the GPU's "
                     "kernel_efficiency, fitted on one measured step (its file says "
                     "which)")  # fmt: skip
    return lines
