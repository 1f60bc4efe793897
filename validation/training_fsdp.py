"""FSDP training throughput where nothing was fitted: per GPU type, fit one scalar on one
published run, predict every other run.

The public table (``validation/data/public/training_fsdp_llmfoundry.csv``, MosaicML
llm-foundry's benchmark README) gives tokens/s per GPU of MPT models from 125M to 70B
parameters trained with PyTorch FSDP, data parallel only, on 8 to 512 A100 40 GB, A100
80 GB and H100 80 GB. Each row is simulated as the README states it: the model file
(``validation/data/public/models/mpt-*.toml``), sequence, global and micro batch,
``amp_bf16`` (or ``amp_fp8``), activation checkpointing as full recomputation with
PyTorch's early stop (llm-foundry wraps each block in the non-reentrant
``checkpoint_wrapper``; the runs used PyTorch 2.1, where early stop is on), FSDP
``FULL_SHARD`` or ``SHARD_GRAD_OP`` with one unit per block, ``limit_all_gathers``,
gradients reduced in fp32 under the ``DEFAULT`` mixed precision and bf16 under ``PURE``,
and the attention llm-foundry's benchmarks ran: its Triton port of FlashAttention
(``submit_benchmarks.py``'s ``--attn_impl`` defaulted to ``triton`` until 2024-03-26, after
the tables; TUTORIAL.md: "Our training setups typically use triton"), which no measured
table holds, so that simcoll times it as FlashAttention-2 on the H100 scaled by the GPU's
peak (``attention_kernel = "triton"``); on ``a100-roce-2to1`` (A100: 8 x 200 Gbit/s RoCE
per node, the README's "1600 Gbps node-node interconnect") or ``h100-ib-fat-tree`` (H100:
the README states no fabric), with as many nodes as the row has GPUs / 8.

Per GPU type one number is fitted, ``Efficiency.kernels`` (the fraction of the measured
or modelled kernel throughput reached), by bisection on one row (the 7B model on 8 GPUs
at its default sequence, 2,048, and the largest micro-batch the README gives there), and
every other row of that GPU
is a prediction. The superseded rows (an earlier A100 80 GB table) are left out.

    python validation/training_fsdp.py                       # all three GPU types
    python validation/training_fsdp.py --gpu h100_80gb --max-gpus 64

Prints a row per run with its error, the fitted rows marked, then the median and worst
|error| of the predicted rows, single-node and multi-node apart, and tokens/s per GPU
against GPU count per model (measured and simulated), so that the trend can be compared.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from simcoll.core.errors import SimcollError
from simcoll.topology.io import load
from simcoll.training import Efficiency, Parallelism, Training, read_model_file, training_step
from simcoll.training.step import StepResult
from validation.training_throughput import fit_fraction, print_errors

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "validation/data/public/training_fsdp_llmfoundry.csv"
MODELS = REPO / "validation/data/public/models"
TOPOLOGIES = {"a100_40gb": "a100-roce-2to1", "a100_80gb": "a100-roce-2to1",
              "h100_80gb": "h100-ib-fat-tree"}  # fmt: skip
#: The A100 80 GB SXM4's data sheet (NVIDIA A100 datasheet, 2021): 80 GB at 2,039 GB/s,
#: the same SMs and peaks as the 40 GB part (1,555 GB/s), which the shipped file holds.
A100_80GB = {"name": "A100 SXM4 80 GB", "memory_bytes": 80_000_000_000}
A100_80GB_HBM_BYTES_PER_S = 2.039e12
#: ``--a100-flash2-table``: run every row as FlashAttention-2, the A100's timed by its own
#: benchmark (``kernels = "a100-sxm"``): what validation/README.md reports of that rule.
A100_FLASH2_TABLE = False
FIT_ON = {"a100_40gb": "mpt-7b:8", "a100_80gb": "mpt-7b:8", "h100_80gb": "mpt-7b:8"}


@dataclass(frozen=True)
class Row:
    """One published run."""

    model: str
    n_gpus: int
    gpu: str
    seq_length: int
    global_batch_size: int
    micro_batch_size: int
    precision: str
    activation_checkpointing: bool
    sharding: str
    mp_mode: str
    tokens_per_s_per_gpu: float
    line: int

    @property
    def name(self) -> str:
        """``model:gpus``, as ``--fit-on`` names a row (the first such row of its GPU)."""
        return f"{self.model}:{self.n_gpus}"

    @property
    def label(self) -> str:
        checkpointing = " ckpt" if self.activation_checkpointing else ""
        return (f"{self.model} {self.n_gpus} GPUs seq {self.seq_length} mb "
                f"{self.micro_batch_size}{checkpointing}")  # fmt: skip


def public_rows(path: Path) -> list[dict[str, str]]:
    """A public table's rows by column name, its ``#`` comment lines (sources) skipped."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def read_rows(path: Path = TABLE) -> list[Row]:
    """The published runs of the current README (superseded ones left out)."""
    return [
        Row(r["model"], int(r["n_gpus"]), r["gpu"], int(r["seq_length"]),
            int(r["global_batch_size"]), int(r["micro_batch_size"]), r["precision"],
            r["activation_checkpointing"] == "True", r["sharding"], r["mp_mode"],
            float(r["tokens_per_s_per_gpu"]), int(r["readme_line"]))
        for r in public_rows(path) if r["superseded"] != "true"
    ]  # fmt: skip


def simulate(row: Row, kernels: float) -> float:
    """Simulated tokens/s per GPU of ``row`` at that fraction of the kernels' throughput."""
    return step(row, kernels).metrics["tokens_per_s"] / row.n_gpus


def step(row: Row, kernels: float) -> StepResult:
    """``row``'s step, simulated at that fraction of the kernels' throughput."""
    model, _, _ = read_model_file(MODELS / f"{row.model}.toml")
    training = Training(seq_length=row.seq_length, micro_batch_size=row.micro_batch_size,
                        global_batch_size=row.global_batch_size,
                        precision="fp8" if row.precision == "amp_fp8" else "bf16",
                        recompute="full" if row.activation_checkpointing else "none",
                        recompute_early_stop=row.activation_checkpointing,
                        attention_kernel="flash2" if A100_FLASH2_TABLE else "triton")  # fmt: skip
    reduce_dtype = "fp32" if row.mp_mode == "DEFAULT" else "bf16"
    layout = Parallelism(data_parallel="fsdp", fsdp_sharding=row.sharding.lower(),
                         fsdp_reduce_dtype=reduce_dtype)  # fmt: skip
    topology = load(TOPOLOGIES[row.gpu], {"n_nodes": str(max(1, row.n_gpus // 8))})
    if row.gpu == "a100_80gb":  # the shipped file's nodes hold A100 40 GB
        topology.graph["gpu"] = {**topology.graph["gpu"], **A100_80GB}
        topology.graph["gpu_memory_bandwidth_bytes_per_s"] = A100_80GB_HBM_BYTES_PER_S
    if A100_FLASH2_TABLE and row.gpu.startswith("a100"):
        topology.graph["gpu"] = {**topology.graph["gpu"], "kernels": "a100-sxm"}
    return training_step(topology, model, training, layout,
                         efficiency=Efficiency(kernels=kernels))  # fmt: skip


def fit(row: Row) -> float:
    """The kernel efficiency at which ``row`` simulates its published throughput (1.0
    where even the measured kernels are too slow)."""
    return fit_fraction(lambda e: simulate(row, e), row.tokens_per_s_per_gpu, tolerance=1e-3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpu", action="append", choices=tuple(TOPOLOGIES),
                        help="GPU types to report (default all)")  # fmt: skip
    parser.add_argument("--max-gpus", type=int, default=512, help="skip larger runs")
    parser.add_argument("--a100-flash2-table", action="store_true",
                        help="run the rows as FlashAttention-2 and time the A100's by its "
                        "own benchmark (kernels = \"a100-sxm\"), not as llm-foundry's "
                        "Triton kernel")  # fmt: skip
    args = parser.parse_args(argv)
    global A100_FLASH2_TABLE  # noqa: PLW0603 - one run's choice, as the bench's EXTEND_RINGS
    A100_FLASH2_TABLE = args.a100_flash2_table
    rows = [r for r in read_rows() if r.n_gpus <= args.max_gpus]
    started = time.perf_counter()
    errors: dict[str, list[float]] = {"single-node": [], "multi-node": []}
    for gpu in args.gpu or list(TOPOLOGIES):
        these = [r for r in rows if r.gpu == gpu]
        fit_row = max((r for r in these if r.name == FIT_ON[gpu] and r.seq_length == 2048),
                      key=lambda r: r.micro_batch_size, default=None)  # fmt: skip
        if fit_row is None:
            print(f"training_fsdp: no row {FIT_ON[gpu]} for {gpu}", file=sys.stderr)
            return 2
        fitted = fit(fit_row)
        print(f"\n{gpu}: fitted on {fit_row.label}: efficiency.kernels = {fitted:.4f}\n")
        print("| run | measured tokens/s/GPU | simulated | error | memory per GPU (GB) |")
        print("|---|---|---|---|---|")
        for row in these:
            try:
                result = step(row, fitted)
            except SimcollError as error:
                print(f"| {row.label} | {row.tokens_per_s_per_gpu:,.0f} | failed: {error} | | |")
                continue
            simulated = result.metrics["tokens_per_s"] / row.n_gpus
            memory = (f"{result.metrics['memory_total_bytes'] / 1e9:.1f} of "
                      f"{result.metrics['memory_capacity_bytes'] / 1e9:.0f}")  # fmt: skip
            error_pct = 100 * (simulated / row.tokens_per_s_per_gpu - 1)
            mark = " (fitted)" if row is fit_row else ""
            if not mark:
                errors["single-node" if row.n_gpus <= 8 else "multi-node"].append(abs(error_pct))
            print(f"| {row.label}{mark} | {row.tokens_per_s_per_gpu:,.0f} | {simulated:,.0f} "
                  f"| {error_pct:+.1f} % | {memory} |", flush=True)  # fmt: skip
    print_errors(errors)
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
