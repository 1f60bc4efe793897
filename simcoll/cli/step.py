"""``simcoll step MODEL TOPOLOGY``: one training step of a model on a cluster, or, with
``--search``, every layout that divides the model and fits, ranked by tokens/s."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from simcoll.cli._args import SubParsers, positive_int, read_params
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.shipped import find
from simcoll.output.progress import Progress
from simcoll.topology import gpu_nodes, load, parse_overrides
from simcoll.topology.calibration import Calibration
from simcoll.topology.gpu_spec import gpu_spec
from simcoll.training.compute import Efficiency, compute_basis
from simcoll.training.search import Screened, candidate_layouts, screen
from simcoll.training.spec import (
    PRECISION_BYTES,
    RECOMPUTE,
    Parallelism,
    Training,
    Transformer,
    read_model_file,
    record_from,
)
from simcoll.training.step import (
    StepResult,
    compute_bound_s,
    step_calls,
    step_times,
    training_step,
)

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

#: Wall seconds per collective call of a step on 8 GPUs, for the search's estimate before
#: it starts, and how much more a call costs per doubling of the GPUs beyond 8 (a larger
#: graph to build, run and check for meeting calls, several times with SM sharing).
#: Measured on this project's 2-core machine at 791a049: `simcoll step llama3-8b dgx-h100
#: --search --global-batch 64`, 403,000 calls in 13.2 s (3.3e-5 s each); `simcoll step
#: llama3-70b h100-ib-fat-tree --set n_nodes=128 --search`, 14.3 M calls on 1,024 GPUs in
#: 1,728 s (1.2e-4 s each, 3.6x: 1 + 0.4 x 7 doublings = 3.8).
SECONDS_PER_CALL = 3.3e-5
CALL_COST_PER_DOUBLING = 0.4


def seconds_per_call(n_gpus: int) -> float:
    """The estimate's wall seconds per call of a step on ``n_gpus`` GPUs.

    >>> round(seconds_per_call(8) * 1e6, 1), round(seconds_per_call(1024) * 1e6, 1)
    (33.0, 125.4)
    """
    return SECONDS_PER_CALL * (1 + CALL_COST_PER_DOUBLING * max(0.0, math.log2(n_gpus / 8)))


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
                   "--decoder-first-pipeline-num-layers)")  # fmt: skip
    p.add_argument(
        "--last-stage-layers",
        type=positive_int,
        metavar="N",
        help="layers on the last pipeline stage (--decoder-last-pipeline-num-layers)",
    )
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
    p.add_argument("--recompute", choices=RECOMPUTE, help="activation recomputation")
    p.add_argument("--precision", choices=tuple(PRECISION_BYTES), help="GEMM precision")
    p.add_argument("--attention-kernel", choices=("flash2", "cudnn", "flash3"),
                   help="the fused attention (default flash2, FlashAttention-2, as PyTorch's "
                   "scaled_dot_product_attention runs; cudnn as Transformer Engine "
                   "runs)")  # fmt: skip
    p.add_argument("--params", metavar="PARAMS.toml|none",
                   help="network calibration (default: the topology file's)")  # fmt: skip
    p.add_argument("--search", action="store_true",
                   help="try every layout (tp, pp, vp, zero1 or fsdp, micro-batch, the "
                   "lightest recomputation that fits) that divides the model and fits, rank "
                   "by tokens/s; layouts are simulated fastest compute first, and one whose "
                   "compute alone is slower than the best K steps found is not simulated "
                   "(it cannot rank)")  # fmt: skip
    p.add_argument("--top", type=positive_int, default=10, metavar="K",
                   help="with --search: print the best K (default 10; a larger K simulates "
                   "more layouts)")  # fmt: skip
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="with --search: layouts simulated at once (default 1)")  # fmt: skip
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
               "precision": args.precision, "attention_kernel": args.attention_kernel}  # fmt: skip
    given_p: dict[str, Any] = {"tp": args.tp, "pp": args.pp, "cp": args.cp, "ep": args.ep,
                               "virtual_stages": args.vp,
                               "first_stage_layers": args.first_stage_layers,
                               "last_stage_layers": args.last_stage_layers}  # fmt: skip
    if args.dp:
        given_p.update(DP_MODES[args.dp])
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
    for key, label in labels.items():
        if key not in t_table:
            notes.append(f"{label} {getattr(t, key)} (simcoll's default)")
    if "data_parallel" not in p_table:
        notes.append(f"dp {p.data_parallel} (simcoll's default)")
    return t, p, notes


def _step(args: argparse.Namespace) -> int:
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
    head = _head(model, args.topology, n_gpus, gpu.name, compute_basis(gpu, t.precision))
    if args.search:
        return _search(args, topology, model, t, p, calibration, head, n_gpus, gpu.memory_bytes)
    result = training_step(topology, model, t, p, calibration=calibration)  # type: ignore[arg-type]
    rows = [_row(result, t)]
    if args.format == "json":
        sys.stdout.write(json.dumps({"model": model.name, **rows[0]}, indent=2) + "\n")
    elif args.format == "csv":
        sys.stdout.write(_csv(rows))
    else:
        sys.stdout.write(_report(result, t, head))
    return 0


def _head(model: Transformer, topology: str, n_gpus: int, gpu: str, basis: list[str]) -> str:
    lines = [f"# simcoll step: {model.name} on {topology} ({n_gpus} GPUs, {gpu})"]
    lines += [f"# {line}" for line in basis]
    return "\n".join(lines) + "\n"


def _hfu(result: StepResult, t: Training) -> float:
    """Hardware FLOPs utilisation: MFU plus the recomputed forward (full recomputation
    re-runs 2 of the 6 FLOPs per parameter and token)."""
    return float(result.metrics["mfu"]) * (4 / 3 if t.recompute == "full" else 1.0)


def _row(result: StepResult, t: Training) -> dict[str, Any]:
    m, p = result.metrics, result.parallelism
    return {
        "tp": p.tp, "pp": p.pp, "vp": p.virtual_stages, "cp": p.cp, "ep": p.ep, "dp": p.dp,
        "data_parallel": p.data_parallel, "micro_batch_size": t.micro_batch_size,
        "global_batch_size": t.global_batch_size, "seq_length": t.seq_length,
        "recompute": t.recompute, "precision": t.precision,
        "time_s": m["time_s"], "tokens_per_s": m["tokens_per_s"],
        "tokens_per_s_per_gpu": m["tokens_per_s"] / m["n_gpus"], "mfu": m["mfu"],
        "hfu": _hfu(result, t), "memory_total_bytes": m["memory_total_bytes"],
        "memory_capacity_bytes": m["memory_capacity_bytes"],
        "fits_in_memory": bool(m["fits_in_memory"]),
        **{k: m[k] for k in sorted(m) if k.startswith(("exposed_", "compute_s", "idle_s"))},
    }  # fmt: skip


def _csv(rows: Sequence[Mapping[str, Any]]) -> str:
    keys = list(rows[0]) if rows else []
    return "\n".join([",".join(keys), *(",".join(str(r[k]) for k in keys) for r in rows)]) + "\n"


def _report(result: StepResult, t: Training, head: str) -> str:
    m, p, memory = result.metrics, result.parallelism, result.memory
    gb = 1e9
    lines = [
        head.rstrip("\n"),
        f"# layout: tp {p.tp}, pp {p.pp}, vp {p.virtual_stages}, cp {p.cp}, ep {p.ep}, "
        f"dp {p.dp} ({p.data_parallel}); micro-batch {t.micro_batch_size}, global batch "
        f"{t.global_batch_size} ({m['n_microbatches']:.0f} micro-batches per replica), "
        f"seq {t.seq_length}, {t.precision}, recompute {t.recompute}",
        f"step time          {m['time_s']:.4f} s",
        f"tokens/s           {m['tokens_per_s']:,.0f}",
        f"tokens/s per GPU   {m['tokens_per_s'] / m['n_gpus']:,.1f}",
        f"MFU                {100 * m['mfu']:.1f} %",
        f"HFU                {100 * _hfu(result, t):.1f} %",
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


_WORK: dict[str, Any] = {}


def _run_one(index: int) -> tuple[int, dict[str, Any] | str]:
    """One screened layout, simulated in a worker (the topology and model were set before
    the fork)."""
    s: Screened = _WORK["screened"][index]
    try:
        assert s.parallelism is not None
        result = training_step(_WORK["topology"], _WORK["model"], s.training, s.parallelism,
                               calibration=_WORK["calibration"])  # fmt: skip
    except SimcollError as error:
        return index, str(error)
    return index, _row(result, s.training)


def _search(  # noqa: PLR0917 - the command's state, handed on once
    args: argparse.Namespace, topology: nx.DiGraph[str], model: Transformer, t: Training,
    p: Parallelism, calibration: object, head: str, n_gpus: int, capacity_bytes: float,
) -> int:  # fmt: skip
    hosts = [topology.nodes[g].get("host") for g in gpu_nodes(topology)]
    per_node = hosts.count(hosts[0]) if hosts[0] is not None else n_gpus
    candidates = candidate_layouts(model, t, n_gpus, per_node)
    screened = screen(model, t, p, candidates, n_gpus=n_gpus, capacity_bytes=capacity_bytes)
    runnable = [i for i, s in enumerate(screened) if s.parallelism is not None]
    calls = {i: step_calls(model, screened[i].training, screened[i].parallelism)  # type: ignore[arg-type]
             for i in runnable}  # fmt: skip
    gpu = gpu_spec(topology)
    assert gpu is not None  # the caller refused a topology without one
    bounds = {i: _bound_s(model, screened[i], gpu) for i in runnable}
    order = sorted(runnable, key=lambda i: (bounds[i], i))  # the most promising first
    estimate_s = seconds_per_call(n_gpus) * sum(calls.values()) / max(1, args.workers)
    print(f"simcoll step --search: {len(candidates)} layouts, {len(runnable)} divide and fit; "
          f"simulating them, the most promising first, estimated at most about "
          f"{estimate_s:.0f} s (a layout whose compute alone is slower than the best "
          f"{args.top} steps is skipped)", file=sys.stderr)  # fmt: skip
    _WORK.update(screened=screened, topology=topology, model=model, calibration=calibration)
    bar = Progress(sys.stderr, len(runnable), "layouts", tty_only=True,
                   total_weight=float(sum(calls.values())) or None)  # fmt: skip
    results: dict[int, dict[str, Any] | str] = {}
    started = time.perf_counter()

    def done(index: int, outcome: dict[str, Any] | str) -> None:
        results[index] = outcome
        bar.advance(weight=float(calls[index]))

    def hopeless(index: int) -> bool:
        """No step of this layout can beat the ``--top``-th best simulated so far."""
        steps = sorted(float(r["time_s"]) for r in results.values() if isinstance(r, dict))
        top = int(args.top)
        return len(steps) >= top and bounds[index] >= steps[top - 1]

    pruned, interrupted = _in_order(order, args.workers, done, hopeless)
    ranked = sorted((r for r in results.values() if isinstance(r, dict)),
                    key=lambda r: -r["tokens_per_s"])  # fmt: skip
    failed = [(screened[i].candidate.label, r) for i, r in results.items() if isinstance(r, str)]
    dropped = [s for s in screened if s.parallelism is None]
    skipped = [(screened[i].candidate.label, bounds[i]) for i in pruned]
    if args.format == "json":
        sys.stdout.write(json.dumps({"model": model.name, "ranked": ranked[: args.top],
                                     "dropped": [{"layout": s.candidate.label,
                                                  "why": s.dropped} for s in dropped],
                                     "skipped": [{"layout": label, "compute_bound_s": bound}
                                                 for label, bound in skipped]},
                                    indent=2) + "\n")  # fmt: skip
    elif args.format == "csv":
        sys.stdout.write(_csv(ranked[: args.top]))
    else:
        sys.stdout.write(_search_table(ranked[: args.top], head, len(runnable), len(ranked)))
    _why_dropped(dropped, failed, time.perf_counter() - started)
    if skipped:
        worst = ranked[args.top - 1]["time_s"]
        label, bound = skipped[0]
        print(f"simcoll: note: {len(skipped)} layout{'s' if len(skipped) > 1 else ''} not "
              f"simulated: {'their' if len(skipped) > 1 else 'its'} compute alone is slower "
              f"than the slowest of the best {args.top} steps ({worst:.4f} s; e.g. {label}: "
              f"{bound:.4f} s)", file=sys.stderr)  # fmt: skip
    if interrupted:
        print(f"simcoll: interrupted after {len(results)} of {len(runnable)} layouts: the "
              "ranking above is of those only", file=sys.stderr)  # fmt: skip
        return 130
    return 0


def _in_order(
    order: Sequence[int],
    workers: int,
    done: Callable[[int, dict[str, Any] | str], None],
    hopeless: Callable[[int], bool],
) -> tuple[list[int], bool]:
    """Simulate the layouts of ``order`` in that order (``workers`` at once), handing each
    outcome to ``done``, until the next is ``hopeless`` (the order is by bound: so is
    every one after it). Returns the layouts not simulated and whether Ctrl-C or SIGTERM
    stopped it (what was simulated by then is kept)."""
    pending = list(order)
    on_term = signal.signal(signal.SIGTERM, _interrupt)  # a stopped search says what it had
    try:
        if workers > 1 and len(pending) > 1:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                running: dict[int, Any] = {}
                while pending or running:
                    while pending and len(running) < workers and not hopeless(pending[0]):
                        index = pending.pop(0)
                        running[index] = pool.apply_async(_run_one, (index,))
                    if not running:
                        break
                    ready = [i for i, r in running.items() if r.ready()]
                    if not ready:
                        time.sleep(0.05)
                    for index in ready:
                        done(index, running.pop(index).get()[1])
        else:
            while pending and not hopeless(pending[0]):
                index = pending.pop(0)
                done(index, _run_one(index)[1])
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: rank what was simulated
        return [], True
    finally:
        signal.signal(signal.SIGTERM, on_term)
    return pending, False


def _bound_s(model: Transformer, s: Screened, gpu: Any) -> float:
    """The layout's step can be no faster than this (:func:`compute_bound_s`), with the
    compute times its simulation uses."""
    assert s.parallelism is not None
    times = step_times(model, s.training, s.parallelism, gpu, Efficiency())
    return compute_bound_s(model, s.training, s.parallelism, times)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C, so that a search stopped by ``timeout`` or a scheduler prints
    the layouts it finished."""
    raise KeyboardInterrupt


def _search_table(rows: Sequence[Mapping[str, Any]], head: str, n_fit: int,
                  n_ranked: int) -> str:  # fmt: skip
    simulated = "" if n_ranked == n_fit else f" ({n_ranked} simulated, the others cannot rank)"
    lines = [head.rstrip("\n"),
             f"# the best {len(rows)} of {n_fit} layouts that divide and fit{simulated}, by "
             "tokens/s",
             f"{'#':>3}  {'tp':>2} {'pp':>2} {'vp':>2} {'dp':>5} {'mode':<6} {'mb':>2} "
             f"{'recompute':<9}  {'step (s)':>9}  {'tokens/s/GPU':>12}  {'MFU %':>5}  "
             f"{'memory (GB)':>11}"]  # fmt: skip
    for i, r in enumerate(rows, 1):
        lines.append(
            f"{i:>3}  {r['tp']:>2} {r['pp']:>2} {r['vp']:>2} {r['dp']:>5} "
            f"{r['data_parallel']:<6} {r['micro_batch_size']:>2} {r['recompute']:<9}  "
            f"{r['time_s']:>9.4f}  {r['tokens_per_s_per_gpu']:>12,.1f}  "
            f"{100 * r['mfu']:>5.1f}  {r['memory_total_bytes'] / 1e9:>11.1f}"
        )
    return "\n".join(lines) + "\n"


def _why_dropped(dropped: Sequence[Screened], failed: Sequence[tuple[str, str]],
                 wall_s: float) -> None:  # fmt: skip
    """On stderr: how many layouts were dropped and why, one example each."""
    for kind in ("does not divide", "does not fit"):
        these = [s for s in dropped if s.dropped.startswith(kind)]
        if these:
            verb = kind.replace("does not", "do not") if len(these) > 1 else kind
            print(f"simcoll: note: {len(these)} layout{'s' if len(these) > 1 else ''} {verb} "
                  f"(e.g. {these[0].candidate.label}: "
                  f"{these[0].dropped.removeprefix(kind + ': ')})", file=sys.stderr)  # fmt: skip
    for label, error in failed[:3]:
        print(f"simcoll: note: {label} failed: {error}", file=sys.stderr)
    print(f"simcoll: note: search took {wall_s:.1f} s", file=sys.stderr)
