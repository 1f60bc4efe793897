"""A matrix multiplication's time from its shape: measured throughput, or tiles and waves.

A GEMM of shape ``(b, m, n, k)`` (``b`` independent ``[m x k] @ [k x n]`` products) does
``2 b m n k`` FLOPs. How fast a GPU does them depends on the shape: small or thin GEMMs
leave SMs idle or wait on memory.

Where a measured table exists for the GPU (:data:`GEMM_TABLES`, XLA's GPU matmul
performance table, ``simcoll/training/data/xla_gemm_flops.csv``), the throughput is
interpolated in log space between the measured shapes: multilinear in ``log2`` of each
dimension on ``log`` of the FLOP/s. A dimension beyond the largest measured takes the
largest's throughput (never more than was measured); one below the smallest measured
takes the smallest's time (a kernel that small is one partial wave of tiles, so a
smaller one is no faster).

Where none exists, the tile and wave quantisation model of NVIDIA's "Matrix
Multiplication Background User's Guide" (sections 2.2-2.4) gives it: the output is cut
into tiles (256 x 128, 128 x 128 or 64 x 128, whichever wastes least), each SM computes
one tile at a time, and a GEMM of ``t`` tiles on ``s`` SMs runs ``ceil(t / s)`` waves, all
of them as long as a full one. Throughput is then ``full x (useful work / work the waves could
do)``, where ``full`` is the fraction of dense peak the largest GEMMs reach, taken from
the measured H100 table (:func:`full_wave_fraction`), and a GEMM too thin to be compute
bound is bound by its memory traffic instead.

>>> shape = GemmShape(1, 4096, 4096, 4096)
>>> shape.flops
137438953472
>>> tiles_and_waves(GemmShape(1, 256 * 108, 128, 4096), sms=108)  # 256 x 128 tiles: 1 wave
(108, 1)
>>> wave_efficiency(GemmShape(1, 256 * 108, 128, 4096), sms=108)
1.0
>>> round(wave_efficiency(GemmShape(1, 256 * 109, 128, 4096), sms=108), 4)  # 64 x 128: 5 waves
0.8074
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = [
    "GEMM_TABLES",
    "H100_SXM_PEAK_FLOPS_PER_S",
    "TILES",
    "GemmShape",
    "GemmTable",
    "dtype_of",
    "full_wave_fraction",
    "gemm_table",
    "tiles_and_waves",
    "wave_efficiency",
]

DATA = Path(__file__).parent / "data"

#: The measured tables, by the ``[gpu]`` table's ``kernels`` key: the GPU key in XLA's
#: table (``xla/service/gpu/model/default_matmul_perf_table.txtpb``).
GEMM_TABLES = {"h100-sxm": "sm_90", "b200": "sm_100_B200"}

#: Output tiles, rows x columns, the largest first (NVIDIA's Matrix Multiplication
#: Background guide, section 2.2: cuBLAS picks among 256 x 128, 128 x 128 and 64 x 128
#: tiles, and others, by the GEMM's shape).
TILES = ((256, 128), (128, 128), (64, 128))

#: The XLA table's dtype key for each training precision. fp16 runs at bf16's rate on the
#: tensor cores of every GPU with both (the data sheets give one figure); fp32 GEMMs in
#: training frameworks run on TF32 tensor cores, as XLA's f32 measurements do by default.
_DTYPES = {
    "bf16": "bf16xbf16->bf16",
    "fp16": "bf16xbf16->bf16",
    "fp8": "f8e4m3fnxf8e4m3fn->bf16",
    "fp32": "f32xf32->f32",
    "tf32": "f32xf32->f32",
}


def dtype_of(precision: str) -> str:
    """The measured table's dtype key for a training precision.

    >>> dtype_of("fp8")
    'f8e4m3fnxf8e4m3fn->bf16'
    """
    return _DTYPES[precision]


@dataclass(frozen=True)
class GemmShape:
    """``b`` products of ``[m x k] @ [k x n]``."""

    b: float
    m: float
    n: float
    k: float

    @property
    def flops(self) -> float:
        """``2 b m n k``: a multiply and an add per term."""
        return 2 * self.b * self.m * self.n * self.k

    def memory_bytes(self, element_bytes: float, out_bytes: float = 2) -> float:
        """Each input read once and the output written once."""
        return self.b * (element_bytes * (self.m * self.k + self.k * self.n)
                         + out_bytes * self.m * self.n)  # fmt: skip


FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class GemmTable:
    """Measured FLOP/s of one GPU in one dtype on a full grid of ``(b, m, n, k)``."""

    gpu: str
    dtype: str
    axes: tuple[FloatArray, FloatArray, FloatArray, FloatArray]  # sorted b, m, n, k values
    log_flops_per_s: FloatArray  # log(FLOP/s) at every grid point, indexed (b, m, n, k)
    flops_per_s_grid: FloatArray  # the measured FLOP/s themselves, the same way

    @property
    def max_flops_per_s(self) -> float:
        """The largest measured throughput."""
        return float(self.flops_per_s_grid.max())

    def flops_per_s(self, shape: GemmShape) -> float:
        """The interpolated throughput of ``shape`` (see the module docstring)."""
        point = (shape.b, shape.m, shape.n, shape.k)
        weights: list[tuple[tuple[int, int], tuple[float, float]]] = []
        scale = 1.0
        for value, axis in zip(point, self.axes, strict=True):
            lo_value, hi_value = float(axis[0]), float(axis[-1])
            if value < lo_value:
                scale *= value / lo_value  # as long as the smallest measured
            x = math.log2(min(max(value, lo_value), hi_value))
            logs = np.log2(axis)
            i = max(0, min(int(np.searchsorted(logs, x, side="right")) - 1, len(axis) - 2))
            if len(axis) == 1:
                weights.append(((0, 0), (1.0, 0.0)))
                continue
            t = (x - logs[i]) / (logs[i + 1] - logs[i])
            weights.append(((i, i + 1), (1.0 - t, t)))
        if all(w in ((1.0, 0.0), (0.0, 1.0)) for _, w in weights):  # a measured point
            at = tuple(i if wi else j for (i, j), (wi, _) in weights)
            return float(self.flops_per_s_grid[at]) * scale
        log_value = 0.0
        for corner in range(16):
            index, weight = [], 1.0
            for axis_number, ((i, j), (wi, wj)) in enumerate(weights):
                high = bool(corner >> axis_number & 1)
                index.append(j if high else i)
                weight *= wj if high else wi
            if weight:
                log_value += weight * float(self.log_flops_per_s[tuple(index)])
        return math.exp(log_value) * scale


#: Columns of the table that cannot be taken as measured, and what stands in for them:
#: XLA's sm_90 fp8 points reach 2.42-2.59 PFLOP/s at 4096^3, above the H100 SXM's dense
#: fp8 peak of 1.98 (29 of its 375 points are above it), so the H100's fp8 GEMMs take its
#: bf16 measurements times the ratio of the two peaks (2, the data sheet).
_STAND_INS = {("h100-sxm", "fp8"): ("bf16", 2.0)}


@cache
def gemm_table(kernels: str, precision: str) -> GemmTable | None:
    """The measured table for the GPU named by ``kernels`` (:data:`GEMM_TABLES`) in
    ``precision``, or None where there is none."""
    stand_in = _STAND_INS.get((kernels, precision))
    if stand_in is not None:
        base = gemm_table(kernels, stand_in[0])
        if base is None:
            return None
        grid = base.flops_per_s_grid * stand_in[1]
        label = f"{base.dtype} x {stand_in[1]:g}"
        return GemmTable(base.gpu, label, base.axes, np.log(grid), grid)
    gpu = GEMM_TABLES.get(kernels)
    dtype = _DTYPES.get(precision)
    if gpu is None or dtype is None:
        return None
    rows = [r for r in _rows() if r[0] == gpu and r[5] == dtype]
    if not rows:
        return None
    axes = tuple(np.array(sorted({float(r[i]) for r in rows})) for i in range(1, 5))
    grid = np.full(tuple(len(a) for a in axes), np.nan)
    for r in rows:
        index = tuple(int(np.searchsorted(a, float(r[i]))) for i, a in enumerate(axes, 1))
        grid[index] = float(r[6])
    if np.isnan(grid).any():  # the shipped table is a full grid (tests/training/test_gemm.py)
        raise ValueError(f"{gpu} {dtype}: the GEMM table is not a full grid")
    return GemmTable(gpu, dtype, axes, np.log(grid), grid)  # type: ignore[arg-type]


@cache
def _rows() -> list[tuple[str, ...]]:
    with open(DATA / "xla_gemm_flops.csv", encoding="utf-8") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    reader = csv.reader(lines)
    next(reader)  # the header: gpu,b,m,n,k,dtype,flops_per_s
    return [tuple(row) for row in reader]


def tiles_and_waves(
    shape: GemmShape, sms: int, tile: tuple[int, int] = TILES[0]
) -> tuple[int, int]:
    """Output tiles of one product times ``b``, and the waves of them ``sms`` SMs run."""
    tiles = math.ceil(shape.b) * math.ceil(shape.m / tile[0]) * math.ceil(shape.n / tile[1])
    return tiles, math.ceil(tiles / sms)


def wave_efficiency(shape: GemmShape, sms: int) -> float:
    """The useful share of the work the waves could do, with the tile of :data:`TILES`
    that wastes least: tile quantisation (partial tiles at the edges) times wave
    quantisation (a last wave with SMs idle). The smaller tiles' lower data reuse is not
    charged here; a GEMM thin enough to want them is bound by its memory traffic."""
    best = 0.0
    for tile in TILES:
        _, waves = tiles_and_waves(shape, sms, tile)
        best = max(best, shape.b * shape.m * shape.n / (waves * sms * tile[0] * tile[1]))
    return best


#: The H100 SXM's dense tensor-core peaks (NVIDIA H100 data sheet; fp32 GEMMs on TF32).
H100_SXM_PEAK_FLOPS_PER_S = {"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12,
                             "fp32": 494.7e12, "tf32": 494.7e12}  # fmt: skip


def full_wave_fraction(precision: str) -> float:
    """The fraction of dense peak the largest GEMMs reach, for GPUs no table measured: the
    measured H100 table's best in ``precision`` over the H100 SXM's dense peak."""
    table = gemm_table("h100-sxm", precision)
    if table is None:
        table = gemm_table("h100-sxm", "bf16")
        precision = "bf16"
    assert table is not None  # the shipped table has bf16
    return min(1.0, table.max_flops_per_s / H100_SXM_PEAK_FLOPS_PER_S[precision])
