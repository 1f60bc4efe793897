"""Training throughput where nothing was fitted: fit on one published run, predict the rest.

The public table (``validation/data/public/training_h100_fp8_nemo2412.csv``, NVIDIA NeMo
24.12's pre-training performance summary: FP8, H100) gives tokens/s per GPU for seven
model and layout configurations. Each kernel's time comes from its shape (XLA's measured
H100 GEMM table, the FlashAttention-3 paper's measured cuDNN attention, which Transformer
Engine runs under NeMo). This script fits one number, the fraction of that measured
throughput the run reaches (``Efficiency.kernels``), on one row (by default Llama 2 7B on
8 GPUs), by bisection on the simulated throughput, and predicts every other row with it:
the step of the shipped model file with that row's batch, sequence, TP, PP, CP and
interleaving, on ``h100-ib-fat-tree`` with as many nodes as the row has GPUs / 8, every
collective on the one path, distributed optimizer (ZeRO-1), no recomputation.

    python validation/training_throughput.py             # about 3 minutes on 2 cores
    python validation/training_throughput.py --fit-on gpt3-175b:128 --skip gpt3-175b:512

Every row but the fitted one is a prediction; the fitted row is marked and left out of
the median.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from simcoll.core.errors import SimcollError
from simcoll.topology.io import load
from simcoll.training import Efficiency, Parallelism, Training, read_model_file, training_step

REPO = Path(__file__).resolve().parents[1]

TABLE = REPO / "validation/data/public/training_h100_fp8_nemo2412.csv"
TOPOLOGY = REPO / "topologies/h100-ib-fat-tree.toml"


@dataclass(frozen=True)
class Row:
    """One published run."""

    model: str
    n_gpus: int
    global_batch_size: int
    micro_batch_size: int
    seq_length: int
    tp: int
    pp: int
    cp: int
    vp: int
    tokens_per_s_per_gpu: float

    @property
    def name(self) -> str:
        """``model:gpus``, as ``--fit-on`` names a row."""
        return f"{self.model}:{self.n_gpus}"


def read_rows(path: Path = TABLE) -> list[Row]:
    """The published runs."""
    with path.open(newline="") as handle:
        return [
            Row(r["model"], int(r["n_gpus"]), int(r["global_batch_size"]),
                int(r["micro_batch_size"]), int(r["seq_length"]), int(r["tp"]), int(r["pp"]),
                int(r["cp"]), int(r["vp"]), float(r["tokens_per_s_per_gpu"]))
            for r in csv.DictReader(handle)
        ]  # fmt: skip


def simulate(row: Row, kernel_efficiency: float) -> float:
    """Simulated tokens/s per GPU of ``row`` at that fraction of the measured kernels."""
    model, _, _ = read_model_file(REPO / "models" / f"{row.model}.toml")
    training = Training(seq_length=row.seq_length, micro_batch_size=row.micro_batch_size,
                        global_batch_size=row.global_batch_size, precision="fp8",
                        attention_kernel="cudnn")  # fmt: skip
    layout = Parallelism(tp=row.tp, pp=row.pp, cp=row.cp, virtual_stages=row.vp,
                         data_parallel="zero1", tp_comm_overlap=True)  # fmt: skip
    topology = load(TOPOLOGY, {"n_nodes": str(max(1, row.n_gpus // 8))})
    result = training_step(topology, model, training, layout,
                           efficiency=Efficiency(kernels=kernel_efficiency))  # fmt: skip
    return result.metrics["tokens_per_s"] / row.n_gpus


def fit(row: Row, *, tolerance: float = 1e-4) -> float:
    """The kernel efficiency at which ``row`` simulates its published throughput; 1.0
    where even the measured kernels are too slow."""
    return fit_fraction(lambda e: simulate(row, e), row.tokens_per_s_per_gpu,
                        tolerance=tolerance)  # fmt: skip


def fit_fraction(
    throughput: Callable[[float], float], target: float, *, tolerance: float = 1e-4
) -> float:
    """The fraction in [0.05, 1] at which ``throughput`` (rising with it) meets ``target``,
    by bisection to ``tolerance``; 1.0 where even 1.0 falls short (the caller says so).

    >>> round(fit_fraction(lambda e: 100 * e, 42.0), 3)
    0.42
    """
    low, high = 0.05, 1.0
    if throughput(high) < target:
        return high
    while high - low >= tolerance:
        middle = (low + high) / 2
        if throughput(middle) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--fit-on", default="llama2-7b:8", help="the row to fit on (model:gpus)")
    parser.add_argument("--skip", action="append", default=[], help="rows not to predict")
    args = parser.parse_args(argv)
    rows = read_rows()
    named = {r.name: r for r in rows}
    if args.fit_on not in named:
        print(f"training_throughput: no row {args.fit_on!r}; rows: {', '.join(named)}",
              file=sys.stderr)  # fmt: skip
        return 2
    started = time.perf_counter()
    fitted = fit(named[args.fit_on])
    print(
        f"fitted on {args.fit_on}: efficiency.kernels = {fitted:.4f} of the measured "
        "kernel throughput"
    )
    print()
    print("| row | layout (TP x PP x CP, VP) | measured tokens/s/GPU | simulated | error |")
    print("|---|---|---|---|---|")
    errors: dict[str, list[float]] = {"single-node": [], "multi-node": []}
    for row in rows:
        if row.name in args.skip:
            continue
        try:
            simulated = simulate(row, fitted)
        except SimcollError as error:
            print(f"| {row.name} | | {row.tokens_per_s_per_gpu:,.0f} | failed: {error} | |")
            continue
        error_pct = 100 * (simulated / row.tokens_per_s_per_gpu - 1)
        mark = " (fitted)" if row.name == args.fit_on else ""
        if not mark:
            errors["single-node" if row.n_gpus <= 8 else "multi-node"].append(abs(error_pct))
        layout = f"{row.tp} x {row.pp} x {row.cp}, {row.vp}"
        print(f"| {row.name}{mark} | {layout} | {row.tokens_per_s_per_gpu:,.0f} | "
              f"{simulated:,.0f} | {error_pct:+.1f} % |")  # fmt: skip
    print_errors(errors)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


def print_errors(errors: dict[str, list[float]]) -> None:
    """The median and worst |error| of the predicted rows, in all and per part (single-
    and multi-node)."""
    every = [e for part in errors.values() for e in part]
    if not every:
        return
    print()
    print(f"median |error| over {len(every)} predicted rows: "
          f"{statistics.median(every):.1f} %, worst {max(every):.1f} %")  # fmt: skip
    for part, values in errors.items():
        if values:
            print(f"  {part}: {len(values)} rows, median {statistics.median(values):.1f} %, "
                  f"worst {max(values):.1f} %")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
