"""Scaling curves and the crossover map (simcoll.output.plot.sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simcoll.output.plot import (
    Crossover,
    fastest_by_cell,
    plot_crossover,
    plot_metric,
    plot_scaling,
)
from simcoll.output.results import Row

GiB = 2**30


def row(algorithm: str, n_ranks: int, size_bytes: int, time_s: float, **extra: Any) -> dict:
    """A sweep record (a dict, as results.jsonl holds), all-reduce, busbw the nccl way."""
    busbw = size_bytes / time_s * 2 * (n_ranks - 1) / n_ranks if time_s > 0 else 0.0
    return {"collective": "allreduce", "algorithm": algorithm, "protocol": "simple",
            "n_ranks": n_ranks, "size_bytes": size_bytes, "time_s": time_s,
            "busbw_bytes_per_s": busbw} | extra  # fmt: skip


def assert_png(path: Path) -> None:
    import matplotlib.image  # noqa: PLC0415 - matplotlib only in plot tests
    import matplotlib.pyplot as plt  # noqa: PLC0415

    image = matplotlib.image.imread(path)
    assert image.ndim == 3
    assert image.shape[0] > 100
    assert image.shape[1] > 100
    assert image.std() > 0  # not a blank canvas
    assert plt.get_fignums() == []  # the figure was closed


def ring_and_tree() -> list[dict]:
    """Ring: alpha 2(n-1) x 5 us, beta 2(n-1)/n x S at 100 GB/s. Tree: alpha 2 log2(n) x 5 us,
    beta 2 x S at 100 GB/s. The tree wins small messages on many ranks, the ring large."""
    rows = []
    for n in (2, 4, 8, 16, 32):
        log2n = n.bit_length() - 1
        for size in (2**10, 2**20, 2**25, 2**30):
            rows.append(row("ring", n, size, 2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * size / 1e11))
            rows.append(row("tree", n, size, 2 * log2n * 5e-6 + 2 * size / 1e11))
    return rows


def test_scaling_plots_busbw_and_time(tmp_path: Path) -> None:
    rows = ring_and_tree()
    reference = {"link bandwidth": ([2, 32], [1e11, 1e11])}
    out = plot_scaling(rows, tmp_path / "sub" / "scaling.png", reference=reference)
    assert out == tmp_path / "sub" / "scaling.png"
    assert_png(out)
    assert_png(plot_scaling(rows, tmp_path / "time.png", y="time", title="all-reduce time"))


def test_scaling_accepts_rows_as_objects_and_splits_protocols_when_swept(tmp_path: Path) -> None:
    rows = [
        Row.from_time("allgather", "ring", n_ranks=n, size_bytes=GiB, time_s=0.01 * n, protocol=p)
        for n in (8, 16, 64)
        for p in ("simple", "ll128")
    ]
    assert_png(plot_scaling(rows, tmp_path / "scaling.png"))


def test_scaling_refuses_nothing_to_plot_and_an_unknown_quantity(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no rows"):
        plot_scaling([], tmp_path / "empty.png")
    with pytest.raises(ValueError, match="no rows"):  # size 0 has no bandwidth
        plot_scaling([row("ring", 8, 0, 1e-5)], tmp_path / "empty.png")
    with pytest.raises(ValueError, match="busbw, algbw, time"):
        plot_scaling(ring_and_tree(), tmp_path / "x.png", y="latency")  # type: ignore[arg-type]
    no_busbw = row("ring", 8, 8, 1.0)
    del no_busbw["busbw_bytes_per_s"]
    with pytest.raises(ValueError, match="no 'busbw_bytes_per_s' field"):
        plot_scaling([no_busbw], tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


def test_fastest_by_cell_picks_the_lowest_time_in_every_cell() -> None:
    grid = fastest_by_cell(ring_and_tree())
    assert grid.sizes_bytes == (2**10, 2**20, 2**25, 2**30)
    assert grid.n_ranks == (2, 4, 8, 16, 32)
    # The tree saves 2(n - 1 - log2 n) x 5 us of latency and pays (2 - 2(n-1)/n) S / B =
    # (2/n) S / B more transfer time, so it wins below S* = n (n - 1 - log2 n) x 500 kB:
    # never at n = 2, then S* = 2 MB, 16 MB, 88 MB, 416 MB at n = 4, 8, 16, 32.
    # 1 MiB (1.05 MB) is under all of those, 32 MiB (33.6 MB) under the last two only.
    assert grid.winner == (
        ("ring", "ring", "ring", "ring"),
        ("tree", "tree", "ring", "ring"),
        ("tree", "tree", "ring", "ring"),
        ("tree", "tree", "tree", "ring"),
        ("tree", "tree", "tree", "ring"),
    )
    time = {(r["algorithm"], r["n_ranks"], r["size_bytes"]): r["time_s"] for r in ring_and_tree()}
    assert grid.speedup[4][3] == pytest.approx(time["tree", 32, GiB] / time["ring", 32, GiB])
    assert grid.speedup[4][0] == pytest.approx(time["ring", 32, 1024] / time["tree", 32, 1024])
    assert grid.algorithms == ("ring", "tree")
    assert grid.collective == "allreduce"


def test_fastest_by_cell_takes_each_algorithms_best_protocol_and_leaves_holes() -> None:
    rows = [
        row("ring", 8, 1024, 3e-5, protocol="simple"),
        row("ring", 8, 1024, 1e-5, protocol="ll"),  # the ring's best: 10 us
        row("tree", 8, 1024, 2e-5),
        row("tree", 16, 2048, 4e-5),  # alone in its cell
    ]
    grid = fastest_by_cell(rows)
    assert grid == Crossover(
        collective="allreduce",
        sizes_bytes=(1024, 2048),
        n_ranks=(8, 16),
        algorithms=("ring", "tree"),
        winner=(("ring", None), (None, "tree")),
        speedup=((2.0, None), (None, None)),
    )


def test_fastest_by_cell_breaks_ties_alphabetically() -> None:
    grid = fastest_by_cell([row("tree", 8, 1024, 1e-5), row("ring", 8, 1024, 1e-5)])
    assert grid.winner == (("ring",),)
    assert grid.speedup == ((1.0,),)


def test_fastest_by_cell_refuses_empty_input_and_mixed_collectives() -> None:
    with pytest.raises(ValueError, match="no rows"):
        fastest_by_cell([])
    with pytest.raises(ValueError, match="mix collectives"):
        fastest_by_cell([row("ring", 8, 1024, 1e-5), row("ring", 8, 1024, 1e-5,
                                                          collective="allgather")])  # fmt: skip


def test_crossover_writes_a_map(tmp_path: Path) -> None:
    assert_png(plot_crossover(ring_and_tree(), tmp_path / "crossover.png"))
    big = [row(a, n, 2**k, t) for a, t in (("ring", 1e-5), ("tree", 2e-5))
           for n in (2**i for i in range(1, 12)) for k in range(3, 34)]  # fmt: skip
    assert_png(plot_crossover(big, tmp_path / "big.png", title="no annotations"))


def test_crossover_refuses_empty_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no rows"):
        plot_crossover([], tmp_path / "crossover.png")
    with pytest.raises(ValueError, match="no rows"):  # size 0 has no place on a log2 axis
        plot_crossover([row("ring", 8, 0, 1e-5)], tmp_path / "crossover.png")


def test_scaling_splits_lines_by_a_further_axis_and_plots_algbw(tmp_path: Path) -> None:
    rows = [row("ring", n, GiB, 0.01 * n, **{"topology.file": f"../topologies/{design}.toml",
                                              "algbw_bytes_per_s": GiB / (0.01 * n)})
            for n in (8, 16, 32) for design in ("dgx-h100", "fat-tree")]  # fmt: skip
    out = plot_scaling(rows, tmp_path / "designs.png", y="algbw", series="topology.file")
    assert_png(out)


def test_metric_plots_a_column_against_an_axis(tmp_path: Path) -> None:
    # Broadcast time against the number of chunks, one line per model (numeric x, log2).
    rows = [{"n_chunks": c, "model": m, "time_s": 1e-3 / c + 1e-6 * c * (m == "flow")}
            for c in (1, 2, 4, 8, 16, 32, 64) for m in ("flow", "analytical")]  # fmt: skip
    assert_png(plot_metric(rows, tmp_path / "metric.png", x="n_chunks", series="model"))
    # A categorical x (topology files) and a bandwidth y in GB/s.
    designs = [{"topology.file": f"{d}.toml", "busbw_bytes_per_s": b}
               for d, b in (("pcie", 2e10), ("nvswitch", 3.7e11))]  # fmt: skip
    out = plot_metric(designs, tmp_path / "designs.png", x="topology.file", y="busbw_bytes_per_s")
    assert_png(out)
    with pytest.raises(ValueError, match="no rows"):
        plot_metric([], tmp_path / "empty.png", x="n_chunks")
