"""Record a PyTorch training step's execution trace and Kineto trace, one file per rank.

A small real model trains a few steps with torch.distributed (gloo on CPU, nccl on GPUs);
one chosen step runs under ``torch.profiler.ExecutionTraceObserver`` (the op graph) and
``torch.profiler.profile`` (the Kineto trace: each op's measured time). The step is
wrapped in ``record_function("simcoll:step")`` and timed on every rank from the barrier
before it to its end. Layouts:

- ``ddp``: an MLP of ``--layers`` square linears (GELU between them) in
  ``DistributedDataParallel`` (its gradient buckets all-reduced asynchronously during the
  backward pass, ``--bucket-mib`` each);
- ``tp``: the same MLP tensor-parallel, Megatron style: pairs of a column-parallel linear
  (each rank a slice of the outputs) and a row-parallel one (a slice of the inputs) whose
  partial outputs are all-reduced (forward); the backward all-reduces the input gradient
  of each column-parallel linear. Each rank holds 1/world of the weights.

Writes into ``--out``: ``NAME-rankR.et.json.gz`` and ``NAME-rankR.kineto.json.gz`` per
rank, and rank 0 writes ``NAME.json`` (torch version, backend, ranks, the model, each
rank's measured step time, host, date, command). Launch one process per rank with
``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set, e.g. on the testbed::

    python -m validation.testbed run validation/topologies/star4-1gbit.toml --timeout-s 900 -- \\
        $PWD/.venv/bin/python $PWD/validation/record_trace.py --layout ddp \\
        --out $PWD/validation/data/traces --name ddp-star4

Only this script imports torch; simcoll never does.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

STEP_ANNOTATION = "simcoll:step"


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", choices=("ddp", "tp"), required=True)
    p.add_argument("--out", type=Path, required=True, help="folder for the trace files")
    p.add_argument("--name", required=True, help="file name stem, e.g. ddp-star4")
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    p.add_argument("--hidden", type=int, default=1024, help="width of every linear")
    p.add_argument("--layers", type=int, default=4, help="linears (tp: an even number)")
    p.add_argument("--batch", type=int, default=256, help="rows per rank per step")
    p.add_argument("--bucket-mib", type=float, default=4.0, help="ddp: bucket cap, MiB")
    p.add_argument("--steps", type=int, default=4, help="steps before the recorded one")
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument("--topology", default="", help="recorded in the sidecar")
    p.add_argument(
        "--sched",
        choices=("other", "inherit"),
        default="other",
        help="other: run under the kernel's fair scheduler (SCHED_OTHER) even where the "
        "launcher set SCHED_RR (the testbed does), so ranks sharing cores share them finely",
    )
    return p.parse_args(argv)


def _tp_modules(torch: Any, dist: Any, hidden: int, layers: int, world: int) -> Any:
    """The tensor-parallel MLP: (column-parallel, GELU, row-parallel + all-reduce) pairs."""

    class _ReduceForward(torch.autograd.Function):  # type: ignore[misc]  # sum the partials
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            dist.all_reduce(x)
            return x

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad

    class _ReduceBackward(torch.autograd.Function):  # type: ignore[misc]  # sum input grads
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            grad = grad.contiguous()
            dist.all_reduce(grad)
            return grad

    class Block(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.column = torch.nn.Linear(hidden, hidden // world)
            self.row = torch.nn.Linear(hidden // world, hidden, bias=False)

        def forward(self, x: Any) -> Any:
            x = _ReduceBackward.apply(x)
            x = torch.nn.functional.gelu(self.column(x))
            return _ReduceForward.apply(self.row(x))

    return torch.nn.Sequential(*[Block() for _ in range(layers // 2)])


def _model(torch: Any, dist: Any, args: argparse.Namespace, world: int, device: Any) -> Any:
    if args.layout == "tp":
        if args.layers % 2 or args.hidden % world:
            sys.exit("tp: --layers must be even and --hidden a multiple of the world size")
        return _tp_modules(torch, dist, args.hidden, args.layers, world).to(device)
    mods: list[Any] = []
    for i in range(args.layers):
        mods.append(torch.nn.Linear(args.hidden, args.hidden))
        if i < args.layers - 1:
            mods.append(torch.nn.GELU())
    net = torch.nn.Sequential(*mods).to(device)
    return torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=args.bucket_mib)


def _write_gz(path: Path, data: Any) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))


def _trim_kineto(path: Path) -> dict[str, Any]:
    """The Kineto trace without what a replay never reads (flow arrows, input strides)."""
    trace: dict[str, Any] = json.loads(path.read_text())
    kept = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") not in ("X", "M"):
            continue
        args = e.get("args", {})
        for key in ("Input Strides", "Concrete Inputs", "Input type"):
            args.pop(key, None)
        kept.append(e)
    trace["traceEvents"] = kept
    return trace


def _write_sidecar(
    args: argparse.Namespace, net: Any, times: list[Any], torch_version: str
) -> None:
    """Rank 0's ``NAME.json``: what ran, where, and every rank's measured step."""
    params = sum(p.numel() * p.element_size() for p in net.parameters())
    sidecar = {
        "name": args.name,
        "layout": args.layout,
        "backend": args.backend,
        "world_size": len(times),
        "step_annotation": STEP_ANNOTATION,
        "model": {
            "hidden": args.hidden,
            "layers": args.layers,
            "batch": args.batch,
            "bucket_mib": args.bucket_mib if args.layout == "ddp" else None,
            "params_bytes_per_rank": params,
        },
        "warmup_steps": args.steps,
        "step_s": [e - s for s, e in times],
        # time.monotonic() at each rank's step start and end: one clock on one host
        "step_start_s": [s for s, _ in times],
        "step_end_s": [e for _, e in times],
        "sched": args.sched,
        "torch": torch_version,
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "GLOO_"))},
        "topology": args.topology,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "files": {
            r: [f"{args.name}-rank{r}.et.json.gz", f"{args.name}-rank{r}.kineto.json.gz"]
            for r in range(len(times))
        },
    }
    Path(args.out / f"{args.name}.json").write_text(json.dumps(sidecar, indent=2) + "\n")
    spans = [round((e - s) * 1e3, 2) for s, e in times]
    whole = max(e for _, e in times) - max(s for s, _ in times)
    print(f"{args.name}: step {spans} ms; last start to last end {whole * 1e3:.2f} ms", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Train, record one step on this rank, write its files; rank 0 the sidecar."""
    import torch  # noqa: PLC0415 - torch only where the harness runs
    import torch.distributed as dist  # noqa: PLC0415
    from torch.profiler import (  # noqa: PLC0415
        ExecutionTraceObserver,
        ProfilerActivity,
        profile,
        record_function,
    )

    args = _args(argv)
    if args.sched == "other" and os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout_s))
    device = (
        torch.device("cuda", rank % torch.cuda.device_count())
        if args.backend == "nccl"
        else torch.device("cpu")
    )
    torch.manual_seed(1234)  # the same weights everywhere (tp: same-shaped slices)
    net = _model(torch, dist, args, world, device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.hidden, generator=gen).to(device)
    if args.layout == "tp":  # every tp rank sees the same batch
        x = torch.randn(args.batch, args.hidden, generator=torch.Generator().manual_seed(0))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = net(x).pow(2).mean()
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args.steps):
        step()
    args.out.mkdir(parents=True, exist_ok=True)
    et_raw = args.out / f"{args.name}-rank{rank}.et.json"
    kineto_raw = args.out / f"{args.name}-rank{rank}.kineto.json"
    et = ExecutionTraceObserver().register_callback(str(et_raw))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        et.start()
        dist.barrier()
        start = time.monotonic()
        with record_function(STEP_ANNOTATION):
            step()
        end = time.monotonic()
        dist.barrier()  # no rank writes its trace (CPU-heavy) while another is in its step
        et.stop()
    et.unregister_callback()
    prof.export_chrome_trace(str(kineto_raw))
    for raw, data in (
        (et_raw, json.loads(et_raw.read_text())),
        (kineto_raw, _trim_kineto(kineto_raw)),
    ):
        _write_gz(Path(f"{raw}.gz"), data)
        raw.unlink()
    times: list[Any] = [None] * world
    dist.all_gather_object(times, (start, end))
    if rank == 0:
        _write_sidecar(args, net, times, torch.__version__)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
