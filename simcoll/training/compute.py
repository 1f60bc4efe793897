"""Compute time from the hardware: a roofline per op, with an efficiency per op class.

An op of ``F`` FLOPs moving ``M`` bytes of GPU memory takes
``max(F / (peak x e_class), M / (memory bandwidth x e_memory))``: the GPU's dense peak in
the step's precision (attention and elementwise ops in 16 bits, whatever the GEMMs use),
and its HBM bandwidth, from the topology file's ``[gpu]`` table and
``gpu_memory_bandwidth`` (:mod:`simcoll.topology.gpu_spec`).

The efficiencies are what a GPU reaches of its peak on each class of op. The defaults
below are assumptions, stated as such, to be replaced by a fit on one measured
configuration per GPU type (:class:`Efficiency` takes any of them); a user may also give
any op class a measured time per micro-batch and layer.

>>> from simcoll.topology.gpu_spec import GpuSpec
>>> gpu = GpuSpec("X", {"bf16": 100e12}, 80 * 10**9, 2e12)
>>> from simcoll.training.flops import ComputeOp
>>> op_time_s(ComputeOp("g", "gemm", 7e12, 1e9), gpu, "bf16", Efficiency(gemm=0.7))  # compute-bound
0.1
>>> op_time_s(ComputeOp("n", "elementwise", 1e6, 1.6e9), gpu, "bf16", Efficiency(memory=0.8))
0.001
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from simcoll.core.errors import ConfigError
from simcoll.topology.gpu_spec import GpuSpec
from simcoll.training.flops import ComputeOp

__all__ = ["Efficiency", "op_time_s", "ops_time_s"]


@dataclass(frozen=True)
class Efficiency:
    """The fraction of peak each op class reaches (``memory``: of the HBM bandwidth).

    Defaults (assumed, not fitted): large bf16 GEMMs reach about 0.7 of dense peak on
    A100/H100 in NVIDIA's published cuBLAS results; FlashAttention-2 about 0.5 of peak in its
    forward and backward on A100 and H100 (Dao 2023, figures 4-7: 50-73 % forward, 35-63 %
    backward); streaming kernels about 0.8 of HBM bandwidth.
    """

    gemm: float = 0.7
    attention: float = 0.5
    elementwise: float = 0.8
    optimizer: float = 0.8
    memory: float = 0.8

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise ConfigError(f"efficiency.{f.name} must be in (0, 1], got {value!r}")

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


def op_time_s(op: ComputeOp, gpu: GpuSpec, precision: str, efficiency: Efficiency) -> float:
    """One op's roofline time (see the module docstring)."""
    if op.op_class == "gemm":
        peak, e = gpu.peak(precision), efficiency.gemm
    else:
        sixteen = "bf16" if "bf16" in gpu.peak_flops_per_s else "fp16"
        peak = gpu.peak(sixteen if precision in ("fp8", "bf16", "fp16") else precision)
        e = getattr(efficiency, op.op_class)
    flops_s = op.flops / (peak * e)
    if gpu.memory_bandwidth_bytes_per_s is None:
        return flops_s
    return max(flops_s, op.memory_bytes / (gpu.memory_bandwidth_bytes_per_s * efficiency.memory))


def ops_time_s(
    ops: Sequence[ComputeOp], gpu: GpuSpec, precision: str, efficiency: Efficiency
) -> float:
    """The ops one after another."""
    return sum(op_time_s(op, gpu, precision, efficiency) for op in ops)
