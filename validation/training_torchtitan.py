"""torchtitan's FSDP2 runs on 64 A100 80 GB, predicted with nothing fitted on them: how
close simcoll's A100 step comes to real FlashAttention-2 training, and with which
attention figures.

The public table (``validation/data/public/training_torchtitan.csv``, from torchtitan's
``docs/performance.md`` @ 6a6f755d2d7f) gives tokens/s per GPU of Llama 3 8B and 70B and
Llama 2 13B and 70B trained with torchtitan's FSDP2 (data parallel only) on 64 A100 80 GB,
bf16, attention through PyTorch's ``scaled_dot_product_attention``, whose A100 kernel is
FlashAttention-2. Every row is simulated as torchtitan ran it: its activation
checkpointing (none; full, ``torch.utils.checkpoint`` with PyTorch's early stop; or its
selective checkpointing per op, "selective op", ``recompute = "sac_op"``: every matmul's
output saved but every second, and the attention's; or per layer, "selective layer",
``sac_layer``: every second block checkpointed whole; in the same non-reentrant
checkpoint with its early stop), and without ``torch.compile``, so that PyTorch eager
runs the rotary embedding and ``silu(w1 x) * w3 x`` op by op, and the RMSNorm too where
the model's train config of the time chose the eager ``rmsnorm`` (70B) over the Triton
``fused_rmsnorm`` (8B, 13B) (``eager_ops``).

Each row runs on ``a100-roce-2to1`` (8 servers) with the A100 80 GB's capacity and HBM
bandwidth in place (as :mod:`validation.training_fsdp`), FSDP reducing in fp32
(torchtitan's default ``mixed_precision_reduce``), at the shipped file's
``kernel_efficiency`` (fitted on one MPT run, not on these), and its attention timed two
ways: as shipped (FlashAttention-2's own A100 benchmark, ``kernels = "a100-sxm"``) and by
the rule the A100 files used before (the H100's FlashAttention-2 figures scaled by the
peaks)::

    python validation/training_torchtitan.py      # about 25 s

Prints a row per run with both errors, then the median |error| of each rule.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from simcoll.topology.io import load
from simcoll.training import Parallelism, Training, read_model_file, training_step
from validation.training_fsdp import A100_80GB, A100_80GB_HBM_BYTES_PER_S, public_rows

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "validation/data/public/training_torchtitan.csv"
#: torchtitan's checkpointing, as the table prints it, by simcoll's recompute mode.
RECOMPUTE = {"no": "none", "full": "full", "selective op": "sac_op",
             "selective layer": "sac_layer"}  # fmt: skip
#: What each model's train config ran op by op (no ``torch.compile``; ``norm_type``
#: ``fused_rmsnorm``, a Triton kernel, for 8B and 13B, ``rmsnorm``, eager, for the 70Bs:
#: torchtitan ``train_configs/*.toml`` @ 157a12c56, April 2024, when the rows were added).
EAGER = {"llama3-8b": ("rotary", "activation"), "llama2-13b": ("rotary", "activation"),
         "llama3-70b": ("norm", "rotary", "activation"),
         "llama2-70b": ("norm", "rotary", "activation")}  # fmt: skip
#: The attention figures, by the ``[gpu]`` table's ``kernels`` key ("" for none).
RULES = {"shipped (FlashAttention-2's A100 benchmark)": "a100-sxm",
         "H100 FlashAttention-2 x peaks": ""}  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One published run."""

    model: str
    n_gpus: int
    seq_length: int
    micro_batch_size: int
    activation_checkpointing: str
    tokens_per_s_per_gpu: float

    @property
    def label(self) -> str:
        return (f"{self.model} {self.n_gpus} GPUs seq {self.seq_length} mb "
                f"{self.micro_batch_size} AC {self.activation_checkpointing}")  # fmt: skip


def read_rows(path: Path = TABLE) -> list[Row]:
    """The A100 rows."""
    return [
        Row(r["model"], int(r["n_gpus"]), int(r["seq_length"]), int(r["micro_batch_size"]),
            r["activation_checkpointing"], float(r["tokens_per_s_per_gpu"]))
        for r in public_rows(path)
        if r["gpu"] == "a100_80gb" and r["activation_checkpointing"] in RECOMPUTE
    ]  # fmt: skip


def simulate(row: Row, kernels: str = "a100-sxm") -> float:
    """Simulated tokens/s per GPU of ``row`` with the ``[gpu]`` table's ``kernels`` key
    (``""``: none, the H100's attention figures scaled by the peaks)."""
    model, _, _ = read_model_file(row.model)
    recompute = RECOMPUTE[row.activation_checkpointing]
    training = Training(seq_length=row.seq_length, micro_batch_size=row.micro_batch_size,
                        global_batch_size=row.micro_batch_size * row.n_gpus,
                        precision="bf16", recompute=recompute,
                        recompute_early_stop=recompute != "none",
                        eager_ops=EAGER[row.model], separate_projections=True)  # fmt: skip
    layout = Parallelism(data_parallel="fsdp", fsdp_reduce_dtype="fp32")
    topology = load("a100-roce-2to1", {"n_nodes": str(row.n_gpus // 8)})
    topology.graph["gpu"] = {**topology.graph["gpu"], **A100_80GB, "kernels": kernels or None}
    topology.graph["gpu_memory_bandwidth_bytes_per_s"] = A100_80GB_HBM_BYTES_PER_S
    return training_step(topology, model, training, layout).metrics["tokens_per_s"] / row.n_gpus


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n", 1)[0]).parse_args(argv)
    rows = read_rows()
    errors: dict[str, list[float]] = {rule: [] for rule in RULES}
    print("| run | measured tokens/s/GPU | " + " | ".join(RULES) + " |")
    print("|---|---|" + "---|" * len(RULES))
    for row in rows:
        cells = []
        for rule, kernels in RULES.items():
            simulated = simulate(row, kernels)
            error_pct = 100 * (simulated / row.tokens_per_s_per_gpu - 1)
            errors[rule].append(abs(error_pct))
            cells.append(f"{simulated:,.0f} ({error_pct:+.1f} %)")
        print(f"| {row.label} | {row.tokens_per_s_per_gpu:,.0f} | " + " | ".join(cells) + " |",
              flush=True)  # fmt: skip
    print()
    for rule, values in errors.items():
        print(f"{rule}: median |error| {statistics.median(values):.1f} %, worst "
              f"{max(values):.1f} % over {len(values)} rows")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
