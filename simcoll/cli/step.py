"""``simcoll step MODEL TOPOLOGY``: one training step of a model on a cluster, or, with
``--search``, every layout that divides the model and fits, ranked by tokens/s."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simcoll.cli._args import SubParsers, positive_int, read_params
from simcoll.cli.step_search import hfu, rows_csv, search, step_row
from simcoll.core.errors import ConfigError
from simcoll.core.shipped import find
from simcoll.topology import gpu_nodes, load, parse_overrides
from simcoll.topology.calibration import Calibration
from simcoll.topology.gpu_spec import gpu_spec
from simcoll.training.attention import ATTENTION_KERNELS
from simcoll.training.compute import compute_basis
from simcoll.training.spec import (
    EAGER_OPS,
    PRECISION_BYTES,
    RECOMPUTE,
    TP_COMM_OVERLAP_IMPLS,
    Parallelism,
    Training,
    Transformer,
    read_model_file,
    record_from,
)
from simcoll.training.step import StepResult, training_step

__all__ = ["add_step"]

#: ``--dp``: the data-parallel mode of each name (``hsdp``: FSDP sharded within a node
#: and replicated across nodes, PyTorch's HYBRID_SHARD).
DP_MODES: dict[str, dict[str, str]] = {
    "ddp": {"data_parallel": "ddp"},
    "zero1": {"data_parallel": "zero1"},
    "zero2": {"data_parallel": "zero2"},
    "zero3": {"data_parallel": "zero3"},
    "fsdp": {"data_parallel": "fsdp", "fsdp_sharding": "full_shard"},
    "hsdp": {"data_parallel": "fsdp", "fsdp_sharding": "hybrid_shard"},
}
#: ``--tp-overlap``: none, or what overlaps the tensor-parallel calls.
TP_OVERLAP = ("none", *TP_COMM_OVERLAP_IMPLS)


def add_step(sub: SubParsers) -> None:
    """Register ``simcoll step``."""
    p = sub.add_parser(
        "step",
        help="simulate one training step of a model on a cluster, or search its layouts",
        description="Simulate one training step of MODEL (a shipped model name, a model "
        "TOML file, or a Hugging Face config.json) on TOPOLOGY: every kernel timed from its "
        "shape on the topology's GPU, every collective on the path `simcoll predict` runs. "
        "Prints step time (s), tokens/s, tokens/s per GPU, MFU and HFU (%), where the first "
        "GPU's time went, and memory per GPU (GB = 1e9 B) with its parts. Every value not "
        "given comes from the model file, else a stated default, and is printed.",
        epilog="examples: simcoll step llama3-70b h100-ib-fat-tree --set n_nodes=8 --tp 8 "
        "--pp 4;  simcoll step llama3-8b dgx-h100 --search --top 5",
    )
    p.add_argument("model", metavar="MODEL",
                   help="a shipped model (llama3-8b, llama3-70b, gpt3-175b, ...), a model "
                   "TOML file (see models/), or a Hugging Face config.json")  # fmt: skip
    p.add_argument("topology", metavar="TOPOLOGY", help="topology TOML file or shipped name")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override a builder parameter of the topology file, e.g. n_nodes=8 "
                   "(repeatable)")  # fmt: skip
    for name, what in (("tp", "tensor"), ("pp", "pipeline"), ("cp", "context"),
                       ("ep", "expert")):  # fmt: skip
        p.add_argument(f"--{name}", type=positive_int, metavar="N", help=f"{what}-parallel degree")
    p.add_argument("--vp", type=positive_int, metavar="N",
                   help="model chunks per pipeline stage (1: 1F1B; more: interleaved)")  # fmt: skip
    p.add_argument("--first-stage-layers", type=positive_int, metavar="N",
                   help="layers on the first pipeline stage, the rest split evenly (Megatron's "
                   "--decoder-first-pipeline-num-layers); with --vp, in the first model chunk "
                   "(torchtitan's split)")  # fmt: skip
    p.add_argument(
        "--last-stage-layers",
        type=positive_int,
        metavar="N",
        help="layers on the last pipeline stage (--decoder-last-pipeline-num-layers); with "
        "--vp, in the last model chunk",
    )
    p.add_argument("--tp-overlap", choices=TP_OVERLAP, metavar="HOW",
                   help="tensor-parallel calls beside the GEMMs: none; userbuffers "
                   "(Transformer Engine, Megatron-LM's --tp-comm-overlap: every call beside "
                   "its pass's compute); async_tp (PyTorch's micro-pipelined TP, torchtitan's "
                   "enable_async_tensor_parallel: each gather and reduce-scatter beside its own "
                   "GEMMs, the backward's reduce-scatters exposed)")  # fmt: skip
    p.add_argument("--dp", choices=tuple(DP_MODES), metavar="MODE",
                   help="data parallelism: ddp, zero1 (Megatron's distributed optimizer), "
                   "zero2, zero3, fsdp (PyTorch FSDP, FULL_SHARD, one unit per block), hsdp "
                   "(FSDP HYBRID_SHARD: sharded within a node, replicated across nodes); "
                   "its degree is what the other degrees leave")  # fmt: skip
    p.add_argument(
        "--micro-batch", type=positive_int, metavar="N", help="sequences per micro-batch"
    )
    p.add_argument("--global-batch", type=positive_int, metavar="N",
                   help="sequences per step over every replica")  # fmt: skip
    p.add_argument("--seq", type=positive_int, metavar="N", help="sequence length, tokens")
    p.add_argument("--recompute", choices=RECOMPUTE,
                   help="activation recomputation: full re-runs each layer's forward in its "
                   "backward (Megatron's --recompute-granularity full), selective the "
                   "attention's scores (nothing under FlashAttention); torchtitan's "
                   "selective checkpointing: sac_op re-runs all but every odd-numbered "
                   "matmul and the attention of each block (selective_ac_option \"op\"), "
                   "sac_layer every second block whole (\"2\")")  # fmt: skip
    p.add_argument("--recompute-early-stop", action="store_true", default=None,
                   help="with --recompute full, sac_op or sac_layer: recompute as PyTorch's "
                   "non-reentrant torch.utils.checkpoint does (FSDP's checkpoint_wrapper, "
                   "torchtitan; PyTorch >= 2.1), which stops once the backward's saved tensors are "
                   "rebuilt: each layer's last GEMM, the MLP's down projection, is not "
                   "re-run")  # fmt: skip
    p.add_argument("--precision", choices=tuple(PRECISION_BYTES), help="GEMM precision")
    p.add_argument("--attention-kernel", choices=ATTENTION_KERNELS,
                   help="the fused attention (default flash2, FlashAttention-2, as PyTorch's "
                   "scaled_dot_product_attention runs; cudnn as Transformer Engine "
                   "runs; triton, FlashAttention's Triton port as llm-foundry ran it, "
                   "measured nowhere: timed as flash2 on the H100, scaled by peak)")  # fmt: skip
    p.add_argument("--eager-ops", metavar="NAME,...", type=_eager_ops,
                   help="elementwise modules PyTorch runs op by op, not fused (eager, no "
                   "torch.compile): any of norm (torchtitan's RMSNorm), rotary, activation "
                   "(silu(a) * b); default: every one fused")  # fmt: skip
    p.add_argument("--separate-projections", action="store_true", default=None,
                   help="run the query, key and value projections, and the gated MLP's "
                   "gate and up projections, as a GEMM each (torchtitan's wq, wk, wv, w1, "
                   "w3), not one fused GEMM (Megatron-Core's linear_qkv and linear_fc1; "
                   "the default)")  # fmt: skip
    p.add_argument("--params", metavar="PARAMS.toml|none",
                   help="network calibration (default: the topology file's)")  # fmt: skip
    p.add_argument("--search", action="store_true",
                   help="try every layout (tp, pp, vp, zero1 or fsdp, micro-batch, the "
                   "lightest recomputation that fits) that divides the model and fits, rank "
                   "by tokens/s; layouts are simulated fastest compute first, and one whose "
                   "compute alone is slower than the best K steps found is not simulated "
                   "(it cannot rank); the flags it chooses itself (--tp --pp --vp --dp "
                   "--micro-batch --recompute --first/last-stage-layers) are refused "
                   "with it")  # fmt: skip
    p.add_argument("--top", type=positive_int, default=10, metavar="K",
                   help="with --search: print the best K (default 10; a larger K simulates "
                   "more layouts)")  # fmt: skip
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="with --search: layouts simulated at once (default 1)")  # fmt: skip
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --search: simulate the layouts on a Dask distributed scheduler "
                   "(tcp://host:8786), as many at once as its workers have threads, as "
                   "`simcoll run --scheduler` runs a sweep's points")  # fmt: skip
    p.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="output format (default table)")  # fmt: skip
    p.set_defaults(run=_step)


def read_model(name: str) -> tuple[Transformer, Mapping[str, Any], Mapping[str, Any]]:
    """A shipped model, a model TOML file, or a Hugging Face ``config.json`` (no defaults)."""
    if Path(name).suffix.lower() == ".json":
        from simcoll.training.hf_config import read_hf_config  # noqa: PLC0415

        return read_hf_config(find(name, "models")), {}, {}
    return read_model_file(name)


def _defaults(
    args: argparse.Namespace, training: Mapping[str, Any], parallel: Mapping[str, Any],
    source: str, n_gpus: int,
) -> tuple[Training, Parallelism, list[str]]:  # fmt: skip
    """The step's training and layout: the flags over the model file's tables over
    simcoll's defaults, and a line per value that came from neither flag nor file."""
    given_t = {"seq_length": args.seq, "micro_batch_size": args.micro_batch,
               "global_batch_size": args.global_batch, "recompute": args.recompute,
               "recompute_early_stop": args.recompute_early_stop,
               "precision": args.precision, "attention_kernel": args.attention_kernel,
               "eager_ops": args.eager_ops,
               "separate_projections": args.separate_projections}  # fmt: skip
    given_p: dict[str, Any] = {"tp": args.tp, "pp": args.pp, "cp": args.cp, "ep": args.ep,
                               "virtual_stages": args.vp,
                               "first_stage_layers": args.first_stage_layers,
                               "last_stage_layers": args.last_stage_layers}  # fmt: skip
    if args.dp:
        given_p.update(DP_MODES[args.dp])
    if args.tp_overlap:
        given_p["tp_comm_overlap"] = args.tp_overlap != "none"
        if args.tp_overlap != "none":
            given_p["tp_comm_overlap_impl"] = args.tp_overlap
    t_table = {**training, **{k: v for k, v in given_t.items() if v is not None}}
    p_table = {**parallel, **{k: v for k, v in given_p.items() if v is not None}}
    p_table.pop("dp", None)  # the degree is what the GPUs leave
    notes = []
    if "seq_length" not in t_table:
        t_table["seq_length"] = 4096
        notes.append("seq 4096 (simcoll's default: give --seq)")
    p = record_from("parallelism", p_table, source).with_gpus(n_gpus)
    if "global_batch_size" not in t_table:
        per = t_table.get("micro_batch_size", 1)
        t_table["global_batch_size"] = per * p.dp * max(1, 4 * p.pp if p.pp > 1 else 1)
        notes.append(f"global batch {t_table['global_batch_size']} sequences (simcoll's "
                     "default: one micro-batch per replica, 4 x pp with pipelining; give "
                     "--global-batch)")  # fmt: skip
    t = record_from("training", t_table, source)
    labels = {"micro_batch_size": "micro-batch", "recompute": "recompute",
              "precision": "precision", "attention_kernel": "attention kernel"}  # fmt: skip
    chosen = SEARCH_CHOOSES_T + SEARCH_CHOOSES_P if args.search else ()  # no default there
    for key, label in labels.items():
        if key not in t_table and key not in chosen:
            notes.append(f"{label} {getattr(t, key)} (simcoll's default)")
    if "data_parallel" not in p_table and "data_parallel" not in chosen:
        notes.append(f"dp {p.data_parallel} (simcoll's default)")
    return t, p, notes


def _step(args: argparse.Namespace) -> int:
    if not args.search and (args.scheduler is not None or args.workers > 1):
        flag = "--scheduler" if args.scheduler is not None else "--workers"
        raise ConfigError("it runs the layouts of --search; one step runs in this process "
                          "(add --search, or drop it)", field=flag)  # fmt: skip
    chosen = next((flag for flag, value in SEARCH_CHOOSES.items()
                   if args.search and getattr(args, value) is not None), None)  # fmt: skip
    if chosen is not None:
        raise ConfigError("--search chooses it for each layout it tries (drop the flag, or "
                          "--search)", field=chosen)  # fmt: skip
    model, training, parallel = read_model(args.model)
    topology = load(args.topology, parse_overrides(args.set))
    n_gpus = len(gpu_nodes(topology))
    calibration: Calibration | str | None = "default"
    if args.params == "none":
        calibration = None
    elif args.params is not None:
        calibration = read_params(args.params, topology, args.topology)
    source = str(find(args.model, "models"))
    t, p, notes = _defaults(args, training, parallel, source, n_gpus)
    gpu = gpu_spec(topology)
    if gpu is None:
        raise ConfigError("a training step needs the GPU's peaks and memory: add a [gpu] "
                          "table (topologies/README.md)",
                          source=args.topology, field="gpu")  # fmt: skip
    for line in notes:
        print(f"simcoll: note: default {line}", file=sys.stderr)
    head = _head(
        model, args.topology, n_gpus, gpu.name, compute_basis(gpu, t.precision, t.attention_kernel)
    )
    if args.search:
        given = [f"{key} {table[key]}" for table, keys in ((parallel, SEARCH_CHOOSES_P),
                                                            (training, SEARCH_CHOOSES_T))
                 for key in keys if key in table]  # fmt: skip
        if given:  # the file's choices are layouts like the others, not a constraint
            print(f"simcoll: note: --search chooses these for each layout it tries; the model "
                  f"file's {', '.join(given)} are not kept", file=sys.stderr)  # fmt: skip
        return search(args, topology, model, t, p, calibration, head, n_gpus, gpu.memory_bytes)
    result = training_step(topology, model, t, p, calibration=calibration)  # type: ignore[arg-type]
    for line in result.timeline.notes:
        print(f"simcoll: note: {line}", file=sys.stderr)
    rows = [step_row(result, t)]
    if args.format == "json":
        sys.stdout.write(json.dumps({"model": model.name, **rows[0]}, indent=2) + "\n")
    elif args.format == "csv":
        sys.stdout.write(rows_csv(rows))
    else:
        sys.stdout.write(_report(result, t, head))
    return 0


#: The flags whose values ``--search`` chooses for each layout it tries (flag: argument).
SEARCH_CHOOSES = {"--tp": "tp", "--pp": "pp", "--vp": "vp", "--dp": "dp",
                  "--micro-batch": "micro_batch", "--recompute": "recompute",
                  "--first-stage-layers": "first_stage_layers",
                  "--last-stage-layers": "last_stage_layers"}  # fmt: skip
#: The model file's keys of those (``[parallelism]``, ``[training]``).
SEARCH_CHOOSES_P = ("tp", "pp", "virtual_stages", "data_parallel", "first_stage_layers",
                    "last_stage_layers")  # fmt: skip
SEARCH_CHOOSES_T = ("micro_batch_size", "recompute")


def _eager_ops(text: str) -> tuple[str, ...]:
    """``--eager-ops``: names of :data:`~simcoll.training.spec.EAGER_OPS`, comma-separated.

    >>> _eager_ops("norm,rotary")
    ('norm', 'rotary')
    """
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in EAGER_OPS]
    if unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(EAGER_OPS)} once each, "
                                         f"got {text!r}")  # fmt: skip
    return names


def _head(model: Transformer, topology: str, n_gpus: int, gpu: str, basis: list[str]) -> str:
    lines = [f"# simcoll step: {model.name} on {topology} ({n_gpus} GPUs, {gpu})"]
    lines += [f"# {line}" for line in basis]
    return "\n".join(lines) + "\n"


def _report(result: StepResult, t: Training, head: str) -> str:
    m, p, memory = result.metrics, result.parallelism, result.memory
    gb = 1e9
    lines = [
        head.rstrip("\n"),
        f"# layout: tp {p.tp}, pp {p.pp}, vp {p.virtual_stages}, cp {p.cp}, ep {p.ep}, "
        f"dp {p.dp} ({p.data_parallel})"
        f"{'; tp overlap ' + p.tp_comm_overlap_impl if p.tp_comm_overlap else ''}"
        f"; micro-batch {t.micro_batch_size}, global batch "
        f"{t.global_batch_size} ({m['n_microbatches']:.0f} micro-batches per replica), "
        f"seq {t.seq_length}, {t.precision}, recompute {t.recompute}"
        f"{' (early stop)' if t.recompute_early_stop else ''}"
        f"{', eager ' + '/'.join(t.eager_ops) if t.eager_ops else ''}"
        f"{', separate projections' if t.separate_projections else ''}",
        f"step time          {m['time_s']:.4f} s",
        f"tokens/s           {m['tokens_per_s']:,.0f}",
        f"tokens/s per GPU   {m['tokens_per_s'] / m['n_gpus']:,.1f}",
        f"MFU                {100 * m['mfu']:.1f} %",
        f"HFU                {100 * hfu(result):.1f} %",
        "first GPU's step   " + ", ".join(
            f"{k.removesuffix('_s').replace('exposed_', 'exposed ').replace('idle', 'bubble/idle')}"
            f" {m[k]:.4f} s" for k in ("compute_s", "exposed_tp_s", "exposed_cp_s",
                                       "exposed_ep_s", "exposed_pp_s", "exposed_dp_s", "idle_s")
            if k in m and (m[k] > 0 or k == "compute_s")),
        f"memory per GPU     {m['memory_total_bytes'] / gb:.1f} of "
        f"{m['memory_capacity_bytes'] / gb:.0f} GB on pipeline stage {memory.stage} "
        f"(the most loaded): " + ", ".join(
            f"{name.replace('_', ' ')} {size / gb:.1f}" for name, size in memory.parts.items()
            if size) + ("" if m["fits_in_memory"] else
                        f"; DOES NOT FIT (largest part: {memory.largest_part.replace('_', ' ')})"),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"
