"""torchtitan's published H100 runs (Llama 3 8B and 70B; FSDP2, TP, CP; bf16 and float8;
eager and ``torch.compile``), one scalar fitted on one of them, the others predicted.

The rows are ``validation/data/public/training_torchtitan.csv``'s H100 rows: torchtitan's
``benchmarks/llama3_h100_202412_torchtitan.md`` (December 2024, torchtitan 9dec370) and
``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`` (June 2025, 820504e), both on
Meta's Grand Teton servers: 8 H100 per host on NVLink, each "96GB HBM2e with 2.4
TB/sec" at a "500W power limit", hosts on a 400 Gb/s-per-GPU RDMA network. Each runs on
``h100-ib-fat-tree`` (its nodes' H100 given 96 GB and 2.4 TB/s; the lower power limit
is left to the fitted scalar) as torchtitan ran it: FSDP2 reducing in fp32, tensor
parallelism with sequence parallelism (async TP as ``tp_comm_overlap`` with
``tp_comm_overlap_impl = "async_tp"``: PyTorch's fused patterns only; DTensor's
``Shard(1)`` of ``[b, s, h]``, ``sequence_parallel_dim = 1``, its copies through
``torch.cat`` beside each unfused call; under float8, torchao's float8 tensor
parallelism gathering in float8, ``tp_fp8_all_gather``), context
parallelism; the micro-batch is the local batch (no gradient accumulation); activation
checkpointing ``full`` or per op (``sac_op``), with PyTorch's early stop; float8
(torchao's tensorwise scaling) as simcoll's ``fp8``; without ``torch.compile`` the
configs' eager ``rmsnorm``, rotary embedding and SwiGLU op by op (``eager_ops``), with
it every one fused; attention as PyTorch's SDPA runs FlashAttention-2.

``Efficiency.kernels`` is fitted on one row (``--fit-on``, by default the 8-GPU FSDP row
in bf16 without ``torch.compile``) and every other row is predicted. Left out, and said
so: float8 with rowwise scaling (simcoll models per-tensor scaling only). The
pipeline-parallel rows run as torchtitan 9dec370 defaults them: as many micro-batches as
stages (``pipeline_parallel_microbatches``), and ``generate_split_points``'s layers per
stage (126 on 8: 15, 16 x 6, 15; interleaved, two chunks per rank, 16 chunks of 7, 8 x 14
and 7). The file's two H200
rows (``benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md``: Trainy on WhiteFiber,
8 H200 per host, 400 Gb/s CX-7 per GPU) run on the same fabric with ``dgx-h200``'s GPU
at its shipped ``kernel_efficiency``, nothing fitted; their float8 all-gathers
(``enable_fsdp_float8_all_gather``) are simulated in bf16, as simcoll's FSDP gathers.
The three Llama 3.1 405B rows of ``docs/performance.md`` (August 2024: FSDP 16 x TP 8 on
128 H100 of 94-95 GB HBM2e at a lower TDP, local batch 2, full checkpointing) run on the
96 GB rows' GPU with the same fitted scalar, ``torch.compile`` as :func:`compiled` reads
their optimizations column::

    python validation/training_torchtitan_h100.py        # about 5 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from simcoll.topology.io import load
from simcoll.training import (
    Parallelism,
    StepResult,
    Training,
    read_model_file,
    training_step,
)
from simcoll.training.compute import Efficiency
from validation.training_fsdp import public_rows
from validation.training_throughput import fit_fraction, print_errors

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "validation/data/public/training_torchtitan.csv"
GPU = "h100_96gb_hbm2e_500w"
H200 = "h200"
#: docs/performance.md's Llama 3.1 405B rows (August 2024): "HBM2e based lower TDP SXM
#: H100(95GB)", "128 H100 (94GB memory)", run as the 96 GB rows (the same servers' kind).
H100_94GB = "h100_94gb_hbm2e"
#: The servers' H100 as the benchmark files state it.
H100_96GB = {"name": "H100 SXM5 96 GB HBM2e (500 W)", "memory_bytes": 96_000_000_000}
H100_96GB_HBM_BYTES_PER_S = 2.4e12
RECOMPUTE = {"full": "full", "selective": "sac_op", "selective op": "sac_op"}
PRECISION = {"bf16": "bf16", "float8": "fp8", "float8 tensorwise": "fp8"}
EAGER = ("norm", "rotary", "activation")
FIT_ON = "llama3-8b 8 GPUs FSDP 8 bf16 selective"
#: The models' layer counts (their files in models/), for the pipeline's split.
MODEL_LAYERS = {"llama3-8b": 32, "llama3-70b": 80, "llama3-405b": 126}


@dataclass(frozen=True)
class Row:
    """One published H100 run."""

    model: str
    n_gpus: int
    seq_length: int
    local_batch: int
    precision: str
    checkpointing: str
    dp_shard: int
    tp: int
    pp: int
    cp: int
    compiled: bool
    async_tp: bool
    tokens_per_s_per_gpu: float
    source: str
    pp_schedule: str = ""

    @property
    def label(self) -> str:
        layout = f"FSDP {self.dp_shard}" + "".join(
            f" {name} {degree}" for name, degree in (("TP", self.tp), ("PP", self.pp),
                                                      ("CP", self.cp))
            if degree > 1)  # fmt: skip
        if self.pp_schedule:
            layout += f" {self.pp_schedule}"
        extras = (" compile" if self.compiled else "") + (" async-TP" if self.async_tp else "")
        seq = f" seq {self.seq_length}" if self.seq_length != 8192 else ""
        return (f"{self.model} {self.n_gpus} GPUs {layout} {self.precision} "
                f"{self.checkpointing}{seq}{extras}")  # fmt: skip

    @property
    def skipped(self) -> str:
        """Why simcoll does not simulate the row ("" if it does)."""
        if self.precision not in PRECISION:
            return f"{self.precision}: simcoll's fp8 is per-tensor scaling"
        return ""

    @property
    def virtual_stages(self) -> int:
        """Model chunks per rank: 2 under torchtitan's interleaved 1F1B (its
        ``generate_split_points`` for a ``PipelineScheduleMulti``), else 1."""
        return 2 if self.pp_schedule.startswith("Interleaved") else 1

    @property
    def micro_batch_size(self) -> int:
        """torchtitan's micro-batch: the local batch, split into as many micro-batches as
        pipeline stages where there are stages (``pipeline_parallel_microbatches``'s
        default)."""
        return self.local_batch // self.pp

    @property
    def edge_stage_layers(self) -> int:
        """The first and last model chunks' layers under ``generate_split_points``:
        ``L // (pp x virtual_stages)``, the middle chunks taking the rest (0 without
        stages)."""
        return 0 if self.pp == 1 else MODEL_LAYERS[self.model] // (self.pp * self.virtual_stages)


def read_rows(path: Path = TABLE, gpu: str = GPU) -> list[Row]:
    """The rows of ``gpu``: the H100's of torchtitan's 2024-12 and 2025-06 benchmark
    files, the H200's, or the 405B rows of August 2024 (``H100_94GB``, whose source leaves
    ``torch.compile`` unstated: :func:`compiled`)."""
    return [
        Row(r["model"], int(r["n_gpus"]), int(r["seq_length"]), int(r["local_batch_size"]),
            r["precision"], r["activation_checkpointing"], int(r["dp_shard"]), int(r["tp"]),
            int(r["pp"]), int(r["cp"]), compiled(r), r["async_tp"] == "true",
            float(r["tokens_per_s_per_gpu"]), r["table"], r["pp_schedule"])
        for r in public_rows(path) if r["gpu"] == gpu
    ]  # fmt: skip


def compiled(row: dict[str, str]) -> bool:
    """Whether ``row`` ran under ``torch.compile``: as stated, or, where the source does
    not say (docs/performance.md's 405B rows), as its optimizations column implies. The
    405B config of the commit that published them (9515a140b, August 2024) compiles and
    runs float8 and async TP: the "Float8 + Async TP" row is that config, "Float8" that
    config without async TP, and "None" none of the three (torchao's float8 then ran
    under compile, the baseline in eager with ``rmsnorm``)."""
    if row["compile"]:
        return row["compile"] == "true"
    return row["precision"] != "bf16"


def step(row: Row, kernels: float | None) -> StepResult:
    """``row``'s step at that fraction of the kernels' measured throughput (an H200 row:
    ``None``, the shipped file's)."""
    model, _, _ = read_model_file(row.model)
    recompute = RECOMPUTE[row.checkpointing]
    training = Training(seq_length=row.seq_length, micro_batch_size=row.micro_batch_size,
                        global_batch_size=row.local_batch * row.dp_shard,
                        precision=PRECISION[row.precision], recompute=recompute,
                        recompute_early_stop=True,
                        eager_ops=() if row.compiled else EAGER,
                        separate_projections=True)  # fmt: skip
    layout = Parallelism(tp=row.tp, cp=row.cp, pp=row.pp, data_parallel="fsdp",
                         fsdp_reduce_dtype="fp32", tp_comm_overlap=row.async_tp,
                         tp_comm_overlap_impl="async_tp", sequence_parallel_dim=1,
                         tp_fp8_all_gather=True,
                         virtual_stages=row.virtual_stages,
                         first_stage_layers=row.edge_stage_layers,
                         last_stage_layers=row.edge_stage_layers)  # fmt: skip
    topology = load("h100-ib-fat-tree", {"n_nodes": str(max(1, row.n_gpus // 8))})
    if kernels is None:  # an H200 row: dgx-h200's GPU and its kernel_efficiency
        h200 = load("dgx-h200").graph
        topology.graph["gpu"] = h200["gpu"]
        topology.graph["gpu_memory_bandwidth_bytes_per_s"] = h200[
            "gpu_memory_bandwidth_bytes_per_s"
        ]
        return training_step(topology, model, training, layout)
    topology.graph["gpu"] = {**topology.graph["gpu"], **H100_96GB}
    topology.graph["gpu_memory_bandwidth_bytes_per_s"] = H100_96GB_HBM_BYTES_PER_S
    return training_step(topology, model, training, layout,
                         efficiency=Efficiency(kernels=kernels))  # fmt: skip


def simulate(row: Row, kernels: float | None) -> float:
    """Simulated tokens/s per GPU of ``row``."""
    return step(row, kernels).metrics["tokens_per_s"] / row.n_gpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--fit-on", default=FIT_ON, help=f"the row to fit (default {FIT_ON!r})")
    args = parser.parse_args(argv)
    rows = read_rows()
    fitted_row = next((r for r in rows if r.label == args.fit_on and not r.skipped), None)
    if fitted_row is None:
        valid = "; ".join(r.label for r in rows if not r.skipped)
        print(f"training_torchtitan_h100: --fit-on: no such row; valid: {valid}",
              file=sys.stderr)  # fmt: skip
        return 2
    kernels = fit_fraction(lambda e: simulate(fitted_row, e), fitted_row.tokens_per_s_per_gpu,
                           tolerance=1e-3)  # fmt: skip
    print(f"fitted on {fitted_row.label}: efficiency.kernels = {kernels:.4f}\n")
    print("| run | measured tokens/s/GPU | simulated | error | memory per GPU (GB) |")
    print("|---|---|---|---|---|")
    errors: dict[str, list[float]] = {"single-node": [], "multi-node": []}
    h200 = read_rows(gpu=H200)
    august = read_rows(gpu=H100_94GB)
    for row in rows + august + h200:
        if row.skipped:
            print(f"| {row.label} | {row.tokens_per_s_per_gpu:,.0f} | not simulated: "
                  f"{row.skipped} | | |")  # fmt: skip
            continue
        result = step(row, None if row in h200 else kernels)
        simulated = result.metrics["tokens_per_s"] / row.n_gpus
        error_pct = 100 * (simulated / row.tokens_per_s_per_gpu - 1)
        memory = (f"{result.metrics['memory_total_bytes'] / 1e9:.1f} of "
                  f"{result.metrics['memory_capacity_bytes'] / 1e9:.0f}")  # fmt: skip
        mark = (" (fitted)" if row is fitted_row else " (H200, shipped file)" if row in h200
                else " (Aug 2024, 94 GB)" if row in august else "")  # fmt: skip
        if row is not fitted_row:
            errors["single-node" if row.n_gpus <= 8 else "multi-node"].append(abs(error_pct))
        print(f"| {row.label}{mark} | {row.tokens_per_s_per_gpu:,.0f} | {simulated:,.0f} | "
              f"{error_pct:+.1f} % | {memory} |", flush=True)  # fmt: skip
    print_errors(errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
