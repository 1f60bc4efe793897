"""Tests of simcoll.training.gemm: measured GEMM throughput by shape, and tiles and waves."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from simcoll.training.gemm import (
    GEMM_TABLES,
    H100_SXM_PEAK_FLOPS_PER_S,
    GemmShape,
    dtype_of,
    full_wave_fraction,
    gemm_table,
    tiles_and_waves,
    wave_efficiency,
)

CSV = Path(__file__).resolve().parents[2] / "simcoll/training/data/xla_gemm_flops.csv"


def measured() -> dict[tuple[str, str], dict[tuple[int, int, int, int], float]]:
    """The shipped table, read here on its own: (gpu, dtype) -> (b, m, n, k) -> FLOP/s."""
    table: dict[tuple[str, str], dict[tuple[int, int, int, int], float]] = defaultdict(dict)
    with open(CSV, encoding="utf-8") as handle:
        for r in csv.DictReader(line for line in handle if not line.startswith("#")):
            shape = (int(r["b"]), int(r["m"]), int(r["n"]), int(r["k"]))
            table[r["gpu"], r["dtype"]][shape] = float(r["flops_per_s"])
    return table


def kernels_of(gpu: str) -> str:
    return next(k for k, v in GEMM_TABLES.items() if v == gpu)


PRECISION_OF = {"bf16xbf16->bf16": "bf16", "f8e4m3fnxf8e4m3fn->bf16": "fp8",
                "f32xf32->f32": "fp32"}  # fmt: skip


def test_every_measured_point_comes_back_exactly() -> None:
    checked = 0
    for (gpu, dtype), points in measured().items():
        if gpu not in GEMM_TABLES.values() or dtype not in PRECISION_OF:
            continue
        table = gemm_table(kernels_of(gpu), PRECISION_OF[dtype])
        assert table is not None
        if (kernels_of(gpu), PRECISION_OF[dtype]) == ("h100-sxm", "fp8"):
            continue  # stood in for by bf16 (test below)
        for (b, m, n, k), flops_per_s in points.items():
            assert table.flops_per_s(GemmShape(b, m, n, k)) == flops_per_s
            checked += 1
    assert checked == 5 * 375  # B200 in three dtypes, the H100 in two; 375 shapes each


def test_no_shape_is_faster_than_the_fastest_measured() -> None:
    rng = np.random.default_rng(42)
    for (gpu, dtype), points in measured().items():
        if gpu not in GEMM_TABLES.values() or dtype not in PRECISION_OF:
            continue
        table = gemm_table(kernels_of(gpu), PRECISION_OF[dtype])
        assert table is not None
        best = max(points.values())
        for _ in range(300):
            b, m, n, k = (float(2 ** rng.uniform(0, 17)) for _ in range(4))
            assert table.flops_per_s(GemmShape(b, m, n, k)) <= best * (1 + 1e-12)


def test_between_two_measured_sizes_the_geometric_mean() -> None:
    # one axis halfway in log2 between two measured values, the others on measured values
    points = measured()["sm_90", "bf16xbf16->bf16"]
    ms = sorted({s[1] for s in points})
    b, n, k = next(iter(points))[0], max(s[2] for s in points), max(s[3] for s in points)
    lo, hi = ms[-2], ms[-1]
    middle = math.sqrt(lo * hi)
    table = gemm_table("h100-sxm", "bf16")
    assert table is not None
    expected = math.sqrt(points[b, lo, n, k] * points[b, hi, n, k])
    assert table.flops_per_s(GemmShape(b, middle, n, k)) == pytest.approx(expected, rel=1e-12)


def test_below_the_smallest_measured_size_it_takes_as_long_as_the_smallest() -> None:
    points = measured()["sm_90", "bf16xbf16->bf16"]
    smallest = min(points)  # lexicographic: the smallest b, then m, ...
    b, m, n, k = smallest
    table = gemm_table("h100-sxm", "bf16")
    assert table is not None
    at_smallest_s = 2 * b * m * n * k / points[smallest]
    small = GemmShape(b, m / 4, n, k)
    assert small.flops / table.flops_per_s(small) == pytest.approx(at_smallest_s, rel=1e-12)


def test_the_table_is_a_full_grid_per_gpu_and_dtype() -> None:
    for (gpu, dtype), points in measured().items():
        axes = [sorted({s[i] for s in points}) for i in range(4)]
        assert len(points) == math.prod(len(a) for a in axes), (gpu, dtype)


def test_tiles_and_waves_by_hand() -> None:
    # 4096 x 4096 output in 256 x 128 tiles: 16 x 32 = 512 tiles; 512 / 132 SMs: 4 waves
    assert tiles_and_waves(GemmShape(1, 4096, 4096, 8192), sms=132) == (512, 4)
    # useful 4096^2 of 4 x 132 tiles of 256 x 128
    got = wave_efficiency(GemmShape(1, 4096, 4096, 8192), sms=132)
    assert got == 4096 * 4096 / (4 * 132 * 256 * 128)
    # every tile wastes the same there: 128 x 128, 1,024 tiles in 8 waves; 64 x 128, 16
    assert tiles_and_waves(GemmShape(1, 4096, 4096, 8192), 132, (128, 128)) == (1024, 8)
    # a partial tile: 300 rows are 2 tiles of 256, 3 of 128 or 5 of 64 rows, one wave each;
    # the 64-row tile wastes least
    assert wave_efficiency(GemmShape(1, 300, 128, 64), sms=108) == 300 * 128 / (108 * 64 * 128)
    # batched: 3 products of 1 tile each
    assert tiles_and_waves(GemmShape(3, 256, 128, 64), sms=2) == (3, 2)


def test_the_full_wave_fraction_is_the_h100_tables_best_over_its_peak() -> None:
    best = max(measured()["sm_90", dtype_of("bf16")].values())
    assert full_wave_fraction("bf16") == min(1.0, best / H100_SXM_PEAK_FLOPS_PER_S["bf16"])


def test_the_h100s_fp8_is_its_bf16_times_the_peaks_ratio() -> None:
    # XLA's sm_90 fp8 points exceed the data sheet's dense fp8 peak: not taken as measured
    table = measured()["sm_90", "f8e4m3fnxf8e4m3fn->bf16"]
    assert max(table.values()) > H100_SXM_PEAK_FLOPS_PER_S["fp8"]
    bf16, fp8 = gemm_table("h100-sxm", "bf16"), gemm_table("h100-sxm", "fp8")
    assert bf16 is not None
    assert fp8 is not None
    for shape in (GemmShape(1, 256, 256, 256), GemmShape(4, 4096, 2048, 4096)):
        assert fp8.flops_per_s(shape) == 2 * bf16.flops_per_s(shape)


def test_no_measured_column_used_is_above_its_gpus_dense_peak() -> None:
    peaks = {
        ("sm_90", "bf16"): 989.4e12,
        ("sm_90", "fp32"): 494.7e12,
        ("sm_100_B200", "bf16"): 2250e12,
        ("sm_100_B200", "fp8"): 4500e12,
        ("sm_100_B200", "fp32"): 1100e12,
    }  # data sheets (B200 TF32 dense 1.1 PFLOP/s)
    for (gpu, precision), peak in peaks.items():
        assert max(measured()[gpu, dtype_of(precision)].values()) <= peak


def test_the_tables_a_gpu_may_name_are_the_ones_held() -> None:
    from simcoll.topology.gpu_spec import KERNEL_TABLES  # noqa: PLC0415
    from simcoll.training.attention import ATTENTION_TABLES  # noqa: PLC0415

    assert set(KERNEL_TABLES) == set(GEMM_TABLES) | set(ATTENTION_TABLES)
