"""Replay collectives for real with torch.distributed, timed the nccl-tests way.

Every rank runs the same loop, per collective and size: fill the buffers, ``warmup``
untimed calls, a barrier, ``iters`` timed calls back to back (CUDA synchronised at the
end for NCCL), then the mean time per call is reduced with MAX over ranks (the slowest
rank defines the collective). Buffers are out-of-place, as nccl-tests' first half, and
one call per size is checked against the result the collective must compute. Rank 0
appends each row to the measurement CSV as soon as it is measured (flushed and fsynced:
a crash later keeps it) and writes the sidecar JSON first.

Sizes follow nccl-tests (``size`` column): all-gather and gather the whole output,
reduce-scatter and scatter the whole input, all-to-all the whole per-rank buffer,
sendrecv the buffer each rank sends to rank + 1.

Launch: one process per rank with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` set (torchrun, :mod:`validation.testbed` or ``--nprocs N``, which starts N
local ranks on 127.0.0.1)::

    python -m validation.replay --backend gloo --nprocs 4 --sizes 4K:16M \\
        --collectives allreduce,allgather --out runs/local.csv

Only this module (and its children) import torch; simcoll never does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simcoll.calibrate.measurements import Measurement, MeasurementWriter
from simcoll.core.collectives import Collective
from simcoll.core.errors import SimcollError
from simcoll.core.sizes import parse_sizes

__all__ = ["ReplayConfig", "main", "metadata", "run_rank"]

ALL_COLLECTIVES = tuple(c.value for c in Collective)
ELEMENT_BYTES = 4  # float32, as nccl-tests' default -d float
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "OMP_", "MASTER_", "WORLD_SIZE", "RANK")


@dataclass(frozen=True)
class ReplayConfig:
    """What to run: backend, collectives, sizes and the nccl-tests iteration counts."""

    backend: str
    collectives: tuple[str, ...]
    sizes_bytes: tuple[int, ...]
    out: Path
    warmup: int = 5
    iters: int = 20
    timeout_s: float = 300.0
    topology: str = ""


class UnsupportedError(Exception):
    """The backend has no such collective (torch raises; we record it and go on)."""


def run_rank(config: ReplayConfig) -> int:
    """Run every (collective, size) on this rank; rank 0 writes the rows. Returns 0."""
    import torch  # noqa: PLC0415 - torch only where the harness runs
    import torch.distributed as dist  # noqa: PLC0415

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = _device(config.backend, torch)
    dist.init_process_group(
        config.backend,
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=config.timeout_s),
        **({"device_id": device} if device.type == "cuda" else {}),
    )
    writer = None
    if rank == 0:
        writer = MeasurementWriter(config.out, metadata=metadata(config, world, torch))
    skipped: list[str] = []
    try:
        for name in config.collectives:
            for size in config.sizes_bytes:
                try:
                    time_s = _measure(name, size, rank, world, device, config, torch, dist)
                except UnsupportedError as why:
                    skipped.append(f"{name}: {why}")
                    break
                if writer is not None:
                    writer.append(
                        Measurement(
                            collective=name,
                            n_ranks=world,
                            size_bytes=size,
                            time_s=time_s,
                            count=Collective(name).count(size, world, ELEMENT_BYTES),
                            redop="sum" if Collective(name).reduces else "",
                            root=0 if Collective(name).is_rooted else -1,
                        )
                    )
                    print(f"{name:>14} {size:>12d} B {time_s * 1e6:12.1f} us", flush=True)
    finally:
        if writer is not None:
            writer.close()
            if skipped:
                _note_skipped(config.out, skipped)
        dist.destroy_process_group()
    return 0


def _device(backend: str, torch: Any) -> Any:
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise SimcollError("--backend nccl needs a CUDA GPU; none is visible")
        local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
        torch.cuda.set_device(local % torch.cuda.device_count())
        return torch.device("cuda", local % torch.cuda.device_count())
    return torch.device("cpu")


def _measure(  # noqa: PLR0917 - one rank's facts and torch's modules
    name: str,
    size_bytes: int,
    rank: int,
    world: int,
    device: Any,
    config: ReplayConfig,
    torch: Any,
    dist: Any,
) -> float:
    """Mean seconds per call of one collective at one size, MAX over ranks."""
    call, check = _collective(name, size_bytes, rank, world, device, torch, dist)
    try:
        call()
    except (RuntimeError, ValueError) as error:
        if "not supported" in str(error).lower() or "unsupported" in str(error).lower():
            raise UnsupportedError(str(error).splitlines()[0]) from error
        raise
    check()
    for _ in range(config.warmup - 1):
        call()
    _sync(device, torch)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(config.iters):
        call()
    _sync(device, torch)
    elapsed = torch.tensor([(time.perf_counter() - start) / config.iters], dtype=torch.float64)
    elapsed = elapsed.to(device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item())


def _sync(device: Any, torch: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _collective(  # noqa: PLR0917 - one rank's facts and torch's modules
    name: str, size_bytes: int, rank: int, world: int, device: Any, torch: Any, dist: Any
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The call to time and a check that its last result is right.

    Inputs are filled with ``rank + 1`` (times the element's block index + 1 where the
    collective moves blocks), so each result has a closed form.
    """
    elements = size_bytes // ELEMENT_BYTES
    block = elements // world
    f32 = torch.float32

    def full(n: int, value: float) -> Any:
        return torch.full((n,), float(value), dtype=f32, device=device)

    def expect(tensor: Any, values: Sequence[float], what: str) -> None:
        want = torch.repeat_interleave(
            torch.tensor(values, dtype=f32, device=device), tensor.numel() // len(values)
        )
        if not torch.equal(tensor, want):
            raise SimcollError(f"rank {rank}: {name} of {size_bytes} B computed a wrong {what}")

    if name == "allreduce":
        src, dst = full(elements, rank + 1), full(elements, 0)

        def call() -> None:
            dst.copy_(src)
            dist.all_reduce(dst)

        return call, lambda: expect(dst, [world * (world + 1) / 2], "sum")
    if name == "allgather":
        src, out = full(block, rank + 1), full(block * world, 0)
        return (
            lambda: dist.all_gather_into_tensor(out, src),
            lambda: expect(out, [r + 1 for r in range(world)], "gather"),
        )
    if name == "reducescatter":
        src, out = full(block * world, rank + 1), full(block, 0)
        return (
            lambda: dist.reduce_scatter_tensor(out, src),
            lambda: expect(out, [world * (world + 1) / 2], "sum"),
        )
    if name == "alltoall":
        values = [world * rank + j for j in range(world)]  # block j goes to rank j
        src = torch.repeat_interleave(torch.tensor(values, dtype=f32, device=device), block)
        out = full(block * world, -1)
        return (
            lambda: dist.all_to_all_single(out, src),
            lambda: expect(out, [world * j + rank for j in range(world)], "exchange"),
        )
    if name == "broadcast":
        buf = full(elements, rank + 1)

        def bcast() -> None:
            if rank != 0:
                buf.fill_(0)
            dist.broadcast(buf, src=0)

        return bcast, lambda: expect(buf, [1], "copy of the root's buffer")
    if name == "reduce":
        src, dst = full(elements, rank + 1), full(elements, 0)

        def red() -> None:
            dst.copy_(src)
            dist.reduce(dst, dst=0)

        want = [world * (world + 1) / 2]
        return red, lambda: expect(dst, want, "sum") if rank == 0 else None
    if name == "gather":
        src = full(block, rank + 1)
        outs = [full(block, 0) for _ in range(world)] if rank == 0 else None
        return (
            lambda: dist.gather(src, outs, dst=0),
            lambda: (
                expect(torch.cat(outs), [r + 1 for r in range(world)], "gather") if outs else None
            ),
        )
    if name == "scatter":
        ins = [full(block, r + 1) for r in range(world)] if rank == 0 else None
        out = full(block, 0)
        return (
            lambda: dist.scatter(out, ins, src=0),
            lambda: expect(out, [rank + 1], "block"),
        )
    if name == "sendrecv":
        src, out = full(elements, rank + 1), full(elements, 0)
        right, left = (rank + 1) % world, (rank - 1) % world

        def sendrecv() -> None:
            if world == 1:
                out.copy_(src)
                return
            ops = [dist.P2POp(dist.isend, src, right), dist.P2POp(dist.irecv, out, left)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()

        return sendrecv, lambda: expect(out, [left + 1], "received buffer")
    raise SimcollError(f"unknown collective {name!r}")


def metadata(config: ReplayConfig, world: int, torch: Any) -> dict[str, Any]:
    """The sidecar: system, software versions, environment and what was run."""
    info: dict[str, Any] = {
        "harness": "validation/replay.py (torch.distributed)",
        "backend": config.backend,
        "n_ranks": world,
        "collectives": list(config.collectives),
        "warmup_iters": config.warmup,
        "timed_iters": config.iters,
        "timing": "mean per call over timed iters, MAX over ranks; out-of-place; float32",
        "topology": config.topology,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gloo": "bundled with torch " + torch.__version__,
        "git_revision": _git_revision(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "started_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
    if config.backend == "nccl":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
        info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        info["driver"] = _nvidia_driver()
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git_revision() -> str:
    try:
        root = Path(__file__).resolve().parents[1]
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _nvidia_driver() -> str:
    try:
        return (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            )
            .stdout.splitlines()[0]
            .strip()
        )
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def _note_skipped(out: Path, skipped: list[str]) -> None:
    """Record in the sidecar which collectives the backend lacks."""
    sidecar = out.with_suffix(".json")
    info = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    info["unsupported"] = skipped
    sidecar.write_text(json.dumps(info, indent=2) + "\n")


def launch_local(argv: list[str], nprocs: int, timeout_s: float) -> int:
    """Start ``nprocs`` ranks of this module on 127.0.0.1 and wait for all of them.

    A rank that fails stops the others; a run past ``timeout_s`` is killed. Either way
    the error is one line and the exit status is non-zero.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE=str(nprocs),
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "validation.replay", *argv],
            env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
        )
        for r in range(nprocs)
    ]
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                print(f"replay: rank {rank} exited with status {code}", file=sys.stderr)
                return 1
            if all(c == 0 for c in codes):
                return 0
            if time.monotonic() > deadline:
                late = ", ".join(str(r) for r, c in enumerate(codes) if c is None)
                print(
                    f"replay: rank(s) {late} did not finish within {timeout_s:g} s; killed",
                    file=sys.stderr,
                )
                return 1
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m validation.replay",
        description="Time collectives with torch.distributed the nccl-tests way and append "
        "the results to a measurement CSV (plus a sidecar JSON).",
    )
    parser.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default="gloo",
        help="torch.distributed backend (default gloo, CPU tensors)",
    )
    parser.add_argument(
        "--collectives",
        default=",".join(ALL_COLLECTIVES),
        help="comma-separated simcoll collective names (default: all nine)",
    )
    parser.add_argument(
        "--sizes",
        default="4K:16M",
        help="sizes in bytes, nccl-tests convention (default 4K:16M, x2 steps)",
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per size (5)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per size (20)")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=300.0,
        help="a rank waiting longer than this on a peer fails the run (300)",
    )
    parser.add_argument("--topology", default="", help="topology file, recorded in the sidecar")
    parser.add_argument(
        "--nprocs",
        type=int,
        default=0,
        help="start this many local ranks on 127.0.0.1 instead of reading "
        "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT from the environment",
    )
    parser.add_argument("--out", required=True, type=Path, help="measurement CSV to append to")
    return parser


def config_from(args: argparse.Namespace) -> ReplayConfig:
    """Validate the arguments into a :class:`ReplayConfig` (one-line errors)."""
    names = tuple(n.strip() for n in args.collectives.split(",") if n.strip())
    names = tuple(Collective.parse(n).value for n in names)
    sizes, _ = parse_sizes(args.sizes)
    if args.warmup < 1 or args.iters < 1:
        raise SimcollError("--warmup and --iters must be at least 1")
    return ReplayConfig(
        backend=args.backend,
        collectives=names,
        sizes_bytes=tuple(sizes),
        out=args.out,
        warmup=args.warmup,
        iters=args.iters,
        timeout_s=args.timeout_s,
        topology=args.topology,
    )


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; see ``--help``."""
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    try:
        config = config_from(args)
        if args.nprocs:
            rest = _strip_nprocs(argv)
            return launch_local(rest, args.nprocs, timeout_s=config.timeout_s * 2)
        for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            if name not in os.environ:
                raise SimcollError(f"{name} is not set; launch with torchrun or --nprocs N")
    except SimcollError as error:
        print(f"replay: {error}", file=sys.stderr)
        return 2
    try:
        return run_rank(config)
    except SimcollError as error:
        print(f"replay: rank {os.environ['RANK']}: {error}", file=sys.stderr)
        return 1
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(
            f"replay: rank {os.environ['RANK']}: {type(error).__name__}: {first}", file=sys.stderr
        )
        return 1


def _strip_nprocs(argv: list[str]) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nprocs":
            skip = True
        elif not item.startswith("--nprocs="):
            out.append(item)
    return out


if __name__ == "__main__":
    sys.exit(main())
