"""What a GPU computes and holds: peak FLOP/s per precision, memory and its bandwidth.

A topology file's optional ``[gpu]`` table gives its GPUs' data-sheet figures, which a
training step (:mod:`simcoll.training`) turns into compute times and a memory check::

    [gpu]
    name = "H100 SXM5 80 GB"
    peak_bf16 = "989.4 TFLOP/s"   # dense, no sparsity
    peak_fp8 = "1978.9 TFLOP/s"
    memory = "80 GB"

The memory's bandwidth is the file's ``gpu_memory_bandwidth``, which out-of-place copies
already pay.

>>> spec = read_gpu_table({"name": "X", "peak_bf16": "100 TFLOP/s", "memory": "16 GB"}, "x.toml")
>>> spec.peak_flops_per_s["bf16"], spec.memory_bytes
(100000000000000.0, 16000000000)
>>> read_gpu_table({"peak_bf16": "-1 TFLOP/s", "memory": "16 GB"}, "x.toml")
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: x.toml: gpu.peak_bf16: must be positive, got -1 TFLOP/s
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import networkx as nx

from simcoll.core.errors import ConfigError, UnitError
from simcoll.core.units import parse_flops_per_s, parse_size_bytes

__all__ = [
    "KERNEL_TABLES",
    "PRECISIONS",
    "GpuSpec",
    "gpu_data",
    "gpu_spec",
    "read_gpu_table",
    "spec_from_data",
]

#: The precisions a ``[gpu]`` table may give a peak for (``peak_<precision>``).
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
_KEYS = (
    "name",
    "memory",
    *(f"peak_{p}" for p in PRECISIONS),
    "sms",
    "kernels",
    "kernel_efficiency",
)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's data-sheet figures (dense peaks, no structured sparsity)."""

    name: str
    peak_flops_per_s: Mapping[str, float]
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float | None = None
    source: str = field(default="", compare=False)
    sm_count: int | None = None  # streaming multiprocessors, for GEMMs' waves of tiles
    kernels: str | None = None  # the measured kernel tables it uses (simcoll.training.gemm)
    kernel_efficiency: float | None = None  # of those tables' throughput, fitted in a file

    def peak(self, precision: str) -> float:
        """The peak FLOP/s in ``precision``; a one-line error naming the file if absent."""
        if precision not in self.peak_flops_per_s:
            given = ", ".join(sorted(self.peak_flops_per_s)) or "none"
            raise ConfigError(f"the GPU {self.name!r} has no peak for {precision} "
                              f"(given: {given}); add gpu.peak_{precision}",
                              source=self.source or None, field="gpu")  # fmt: skip
        return self.peak_flops_per_s[precision]


def read_gpu_table(value: object, source: str) -> GpuSpec:
    """The ``[gpu]`` table of ``source``, checked: known keys, positive quantities, a
    memory size and at least one peak."""
    if not isinstance(value, Mapping):
        raise ConfigError("must be a table", source=source, field="gpu")
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}; valid: {', '.join(_KEYS)}",
                          source=source, field="gpu")  # fmt: skip
    peaks: dict[str, float] = {}
    for precision in PRECISIONS:
        key = f"peak_{precision}"
        if key in value:
            try:
                flops = parse_flops_per_s(value[key])
            except UnitError as error:
                raise ConfigError(error.message, source=source, field=f"gpu.{key}") from None
            except OverflowError:
                raise ConfigError("must be a finite number", source=source,
                                  field=f"gpu.{key}") from None  # fmt: skip
            if not flops > 0:
                raise ConfigError(f"must be positive, got {value[key]}", source=source,
                                  field=f"gpu.{key}")  # fmt: skip
            peaks[precision] = flops
    if not peaks:
        raise ConfigError(f"gives no peak: add one of {', '.join(_KEYS[2:])}", source=source,
                          field="gpu")  # fmt: skip
    if "memory" not in value:
        raise ConfigError("misses memory (the GPU's memory, e.g. '80 GB')", source=source,
                          field="gpu")  # fmt: skip
    try:
        memory_bytes = parse_size_bytes(value["memory"])
    except UnitError as error:
        raise ConfigError(error.message, source=source, field="gpu.memory") from None
    if memory_bytes <= 0:
        raise ConfigError("must be positive", source=source, field="gpu.memory")
    name = value.get("name", "GPU")
    if not isinstance(name, str):
        raise ConfigError("must be a string", source=source, field="gpu.name")
    return GpuSpec(name, peaks, memory_bytes, source=source,
                   sm_count=_sm_count(value.get("sms"), source),
                   kernels=_kernels(value.get("kernels"), source),
                   kernel_efficiency=_fraction(value.get("kernel_efficiency"), source))  # fmt: skip


def _fraction(value: object, source: str | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"must be a number in (0, 1], got {value!r}", source=source,
                          field="gpu.kernel_efficiency")  # fmt: skip
    return float(value)


def _sm_count(value: object, source: str | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 2**16:
        raise ConfigError(f"must be a positive whole number of SMs, got {value!r}",
                          source=source, field="gpu.sms")  # fmt: skip
    return value


#: The measured kernel tables a ``[gpu]`` table may name (``kernels``), as
#: :mod:`simcoll.training.gemm` (GEMMs) and :mod:`simcoll.training.attention` hold them
#: (their tests check they agree): the A100's has attention only.
KERNEL_TABLES = ("h100-sxm", "b200", "a100-sxm")


def _kernels(value: object, source: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in KERNEL_TABLES:
        valid = ", ".join(KERNEL_TABLES)
        raise ConfigError(f"names no measured kernel table: {value!r}; valid: {valid}",
                          source=source, field="gpu.kernels")  # fmt: skip
    return value


def gpu_data(spec: GpuSpec) -> dict[str, object]:
    """The graph attribute ``"gpu"`` of a spec: plain data, as a node-link dump writes it.

    >>> gpu_data(GpuSpec("X", {"bf16": 1e14}, 16))
    {'name': 'X', 'peak_flops_per_s': {'bf16': 100000000000000.0}, 'memory_bytes': 16}
    """
    data: dict[str, object] = {"name": spec.name,
                               "peak_flops_per_s": dict(spec.peak_flops_per_s),
                               "memory_bytes": spec.memory_bytes}  # fmt: skip
    if spec.sm_count is not None:
        data["sms"] = spec.sm_count
    if spec.kernels is not None:
        data["kernels"] = spec.kernels
    if spec.kernel_efficiency is not None:
        data["kernel_efficiency"] = spec.kernel_efficiency
    return data


def spec_from_data(value: object, source: str | None) -> GpuSpec:
    """A spec from the graph attribute ``"gpu"`` (:func:`gpu_data`), checked; an error names
    ``graph.gpu`` of ``source``."""
    if isinstance(value, GpuSpec):
        return value
    field = "graph.gpu"
    required = {"name", "peak_flops_per_s", "memory_bytes"}
    optional = {"sms", "kernels", "kernel_efficiency"}
    if not isinstance(value, Mapping) or not required <= set(value) <= required | optional:
        raise ConfigError("must be an object of name, peak_flops_per_s and memory_bytes "
                          "(and optionally sms, kernels and kernel_efficiency)",
                          source=source, field=field)  # fmt: skip
    peaks, memory = value["peak_flops_per_s"], value["memory_bytes"]
    good_peaks = isinstance(peaks, Mapping) and peaks and all(
        p in PRECISIONS and isinstance(f, int | float) and not isinstance(f, bool) and f > 0
        for p, f in peaks.items())  # fmt: skip
    if not good_peaks:
        raise ConfigError(f"peak_flops_per_s must map precisions ({', '.join(PRECISIONS)}) to "
                          "positive FLOP/s", source=source, field=field)  # fmt: skip
    if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
        raise ConfigError("memory_bytes must be a positive integer", source=source, field=field)
    return GpuSpec(str(value["name"]), {str(p): float(f) for p, f in peaks.items()}, memory,
                   source=source or "", sm_count=_sm_count(value.get("sms"), source),
                   kernels=_kernels(value.get("kernels"), source),
                   kernel_efficiency=_fraction(value.get("kernel_efficiency"), source))  # fmt: skip


def gpu_spec(topology: nx.DiGraph[str]) -> GpuSpec | None:
    """The topology's GPU figures (its file's ``[gpu]`` table and ``gpu_memory_bandwidth``),
    or None where the file gives no ``[gpu]``."""
    value = topology.graph.get("gpu")
    if value is None:
        return None
    spec = spec_from_data(value, topology.graph.get("source"))
    memory = topology.graph.get("gpu_memory_bandwidth_bytes_per_s")
    return replace(spec, memory_bandwidth_bytes_per_s=memory)
