"""``simcoll step --search``: every layout of a model that divides it and fits, simulated
in the order of its compute alone and ranked by tokens/s, here, in forked workers or on a
Dask scheduler (:func:`search`); and the rows a step prints (:func:`step_row`)."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

import networkx as nx

from simcoll.core.errors import SimcollError
from simcoll.output.progress import Progress
from simcoll.scenarios.sweep import check_scheduler_address, dask_client
from simcoll.topology import gpu_nodes
from simcoll.topology.gpu_spec import gpu_spec
from simcoll.training.compute import Efficiency
from simcoll.training.search import Screened, candidate_layouts, screen
from simcoll.training.spec import Parallelism, Training, Transformer
from simcoll.training.step import (
    StepResult,
    compute_bound_s,
    step_calls,
    step_times,
    training_step,
)

__all__ = ["hfu", "rows_csv", "search", "seconds_per_call", "simulate_layout", "step_row"]

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


def hfu(result: StepResult) -> float:
    """Hardware FLOPs utilisation: MFU plus the recomputed share of the forward (a full
    recomputation re-runs 2 of the 6 FLOPs per parameter and token: 4/3)."""
    return float(result.metrics["mfu"]) * (1 + result.metrics["recomputed_fraction"] / 3)


def step_row(result: StepResult, t: Training) -> dict[str, Any]:
    m, p = result.metrics, result.parallelism
    return {
        "tp": p.tp, "pp": p.pp, "vp": p.virtual_stages, "cp": p.cp, "ep": p.ep, "dp": p.dp,
        "first_stage_layers": p.first_stage_layers, "last_stage_layers": p.last_stage_layers,
        "data_parallel": p.data_parallel, "micro_batch_size": t.micro_batch_size,
        "global_batch_size": t.global_batch_size, "seq_length": t.seq_length,
        "recompute": t.recompute, "precision": t.precision,
        "time_s": m["time_s"], "tokens_per_s": m["tokens_per_s"],
        "tokens_per_s_per_gpu": m["tokens_per_s"] / m["n_gpus"], "mfu": m["mfu"],
        "hfu": hfu(result), "memory_total_bytes": m["memory_total_bytes"],
        "memory_capacity_bytes": m["memory_capacity_bytes"],
        "fits_in_memory": bool(m["fits_in_memory"]),
        **{k: m[k] for k in sorted(m) if k.startswith(("exposed_", "compute_s", "idle_s"))},
    }  # fmt: skip


def rows_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    keys = list(rows[0]) if rows else []
    return "\n".join([",".join(keys), *(",".join(str(r[k]) for k in keys) for r in rows)]) + "\n"


_WORK: dict[str, Any] = {}


def simulate_layout(
    topology: nx.DiGraph[str], model: Transformer, s: Screened, calibration: object
) -> dict[str, Any] | str:
    """One screened layout's step as a result row, or why it failed (one line): what
    each worker runs, in a forked process or on a Dask worker."""
    assert s.parallelism is not None
    try:
        result = training_step(topology, model, s.training, s.parallelism,
                               calibration=calibration)  # type: ignore[arg-type]  # fmt: skip
    except SimcollError as error:
        return str(error)
    return step_row(result, s.training)


def _run_one(index: int) -> tuple[int, dict[str, Any] | str]:
    """One screened layout, simulated in this process or a forked worker (the topology
    and model were set before the fork)."""
    w = _WORK
    return index, simulate_layout(w["topology"], w["model"], w["screened"][index],
                                  w["calibration"])  # fmt: skip


def search(  # noqa: PLR0917 - the command's state, handed on once
    args: argparse.Namespace, topology: nx.DiGraph[str], model: Transformer, t: Training,
    p: Parallelism, calibration: object, head: str, n_gpus: int, capacity_bytes: float,
) -> int:  # fmt: skip
    if args.scheduler is not None:
        check_scheduler_address(args.scheduler)  # before anything is screened
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

    runner = _on_dask(args.scheduler) if args.scheduler else _forked(args.workers)
    pruned, interrupted = _in_order(order, runner, done, hopeless)
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
        sys.stdout.write(rows_csv(ranked[: args.top]))
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


class _Handle(Protocol):
    """A layout being simulated: a Pool's AsyncResult or a Dask future, alike."""

    def ready(self) -> bool: ...

    def get(self) -> dict[str, Any] | str: ...


def _in_order(
    order: Sequence[int],
    runner: AbstractContextManager[tuple[int, Callable[[int], _Handle]] | None],
    done: Callable[[int, dict[str, Any] | str], None],
    hopeless: Callable[[int], bool],
) -> tuple[list[int], bool]:
    """Simulate the layouts of ``order`` in that order, handing each outcome to ``done``,
    until the next is ``hopeless`` (the order is by bound: so is every one after it).
    ``runner`` gives (how many at once, how to start one), or None: one at a time here.
    Returns the layouts not simulated and whether Ctrl-C or SIGTERM stopped it (what was
    simulated by then is kept)."""
    pending = list(order)
    on_term = signal.signal(signal.SIGTERM, _interrupt)  # a stopped search says what it had
    try:
        with runner as started:
            if started is None:
                while pending and not hopeless(pending[0]):
                    index = pending.pop(0)
                    done(index, _run_one(index)[1])
                return pending, False
            slots, start = started
            running: dict[int, _Handle] = {}
            while pending or running:
                while pending and len(running) < slots and not hopeless(pending[0]):
                    index = pending.pop(0)
                    running[index] = start(index)
                if not running:
                    break
                ready = [i for i, r in running.items() if r.ready()]
                if not ready:
                    time.sleep(0.05)
                for index in ready:
                    done(index, running.pop(index).get())
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: rank what was simulated
        return [], True
    finally:
        signal.signal(signal.SIGTERM, on_term)
    return pending, False


class _Pooled:
    """A forked worker's layout: the outcome without its index."""

    def __init__(self, result: Any) -> None:
        self._result = result

    def ready(self) -> bool:
        return bool(self._result.ready())

    def get(self) -> dict[str, Any] | str:
        outcome: dict[str, Any] | str = self._result.get()[1]
        return outcome


@contextmanager
def _forked(workers: int) -> Iterator[tuple[int, Callable[[int], _Handle]] | None]:
    """``workers`` forked processes (None for one: in this process)."""
    if workers <= 1:
        yield None
        return
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield workers, lambda index: _Pooled(pool.apply_async(_run_one, (index,)))


class _Future:
    """A Dask future's layout."""

    def __init__(self, future: Any) -> None:
        self._future = future

    def ready(self) -> bool:
        return bool(self._future.done())

    def get(self) -> dict[str, Any] | str:
        outcome: dict[str, Any] | str = self._future.result()
        return outcome


@contextmanager
def _on_dask(address: str) -> Iterator[tuple[int, Callable[[int], _Handle]]]:
    """The layouts on a Dask scheduler's workers, as many at once as they have threads;
    the topology, model and calibration sent to each once."""
    with dask_client(address) as client:
        w = _WORK
        shared = client.scatter([w["topology"], w["model"], w["calibration"]], broadcast=True)
        slots = max(1, sum(client.nthreads().values()))

        def start(index: int) -> _Handle:
            return _Future(client.submit(simulate_layout, shared[0], shared[1],
                                         w["screened"][index], shared[2], pure=False))  # fmt: skip

        yield slots, start


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
             f"{'#':>3}  {'tp':>2} {'pp':>3} {'vp':>2} {'dp':>5} {'mode':<6} {'mb':>2} "
             f"{'recompute':<9}  {'step (s)':>9}  {'tokens/s/GPU':>12}  {'MFU %':>5}  "
             f"{'memory (GB)':>11}"]  # fmt: skip
    for i, r in enumerate(rows, 1):
        pp = f"{r['pp']}*" if r["first_stage_layers"] else str(r["pp"])
        lines.append(
            f"{i:>3}  {r['tp']:>2} {pp:>3} {r['vp']:>2} {r['dp']:>5} "
            f"{r['data_parallel']:<6} {r['micro_batch_size']:>2} {r['recompute']:<9}  "
            f"{r['time_s']:>9.4f}  {r['tokens_per_s_per_gpu']:>12,.1f}  "
            f"{100 * r['mfu']:>5.1f}  {r['memory_total_bytes'] / 1e9:>11.1f}"
        )
    edges = sorted({(r["first_stage_layers"], r["pp"] * r["vp"]) for r in rows
                    if r["first_stage_layers"]})  # fmt: skip
    lines += [f"# *: the first and last of the {chunks} model chunks {k} "
              f"layer{'s' * (k != 1)} each, the others {k + 1} (torchtitan's split)"
              for k, chunks in edges]  # fmt: skip
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
