"""Replay a recorded PyTorch step (:mod:`simcoll.training.trace_file`) on any topology.

:func:`replay` simulates the ranks' traces together through
:class:`~simcoll.prediction.session.Session`, each call as the backend runs it (gloo:
:func:`simcoll.calibrate.gloo.recipe_for`, on the bare links; NCCL: its own choice).

>>> from simcoll.topology import ring
>>> ops = (ComputeOp("backward", 2e-3),
...        CollectiveOp("c10d::allreduce_", "allreduce", 8_000_000, async_op=False),
...        ComputeOp("step", 1e-3))
>>> trace = ExecutionTrace("rank0.json", ops, process_groups={"0": (0, 1)})
>>> g = ring(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> result = replay([trace, trace], g, calibration=None, backend="gloo")
>>> round(result.step_s * 1e3, 9)  # 2 ms, then each half sent twice at 1 GB/s: 8 ms, 1 ms
11.0

Not modelled: kernels on a GPU (the host ops here are what a CPU run computes; a GPU
trace's device time is the extension: its Kineto kernels, linked by correlation id),
point-to-point ``send``/``recv``, host time between ops (Python, under 1 % here), and
the host work of gloo's threads competing with compute for cores (measured durations
carry what the recorded run had).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import networkx as nx

from simcoll.calibrate.gloo import default_protocol, recipe_for
from simcoll.core.errors import ConfigError
from simcoll.core.limits import whole_number
from simcoll.prediction.session import Op, Session
from simcoll.sim.timeline import Timeline
from simcoll.topology import gpu_nodes
from simcoll.topology.calibration import Calibration, read_calibration
from simcoll.training.trace_file import (
    C10D_COLLECTIVES,
    PG_INIT,
    CollectiveOp,
    ComputeOp,
    ExecutionTrace,
    KinetoTrace,
    TraceOp,
    read_execution_trace,
    read_kineto_durations,
)

__all__ = [
    "C10D_COLLECTIVES",
    "CollectiveOp",
    "ComputeOp",
    "ExecutionTrace",
    "KinetoTrace",
    "ReplayResult",
    "read_execution_trace",
    "read_kineto_durations",
    "replay",
]

GLOO_THREADS = 2  # ProcessGroupGloo's worker threads per group (Options.threads)


@dataclass(frozen=True)
class ReplayResult:
    """A replayed step: simulated time, per rank what it did, and the measured time."""

    step_s: float
    compute_s: tuple[float, ...]
    comm_s: tuple[float, ...]
    exposed_comm_s: tuple[float, ...]
    measured_step_s: float | None
    timeline: Timeline = field(repr=False)


# -- replaying ----------------------------------------------------------------------------


@dataclass
class _Call:
    """A collective matched across its group: per member, its position on that rank."""

    op: CollectiveOp
    group: str
    members: dict[int, int]  # global rank -> index in that rank's ops
    index: int = 0  # its place among its group's calls


def _candidates(trace: ExecutionTrace, rank: int, op: CollectiveOp) -> list[str]:
    if op.group is not None:
        return [op.group]
    return [
        name for name, ranks in trace.process_groups.items() if rank in ranks and len(ranks) > 0
    ]


def _match(traces: Sequence[ExecutionTrace]) -> list[_Call]:
    """Every collective matched with its group's members' (same kind and size, in each
    group's order); raises naming the first rank whose sequence disagrees."""
    queues = [[i for i, op in enumerate(t.ops) if isinstance(op, CollectiveOp)] for t in traces]
    heads = [0] * len(traces)
    calls: list[_Call] = []
    per_group: dict[str, int] = {}
    while any(heads[r] < len(q) for r, q in enumerate(queues)):
        progressed = False
        for r, queue in enumerate(queues):
            if heads[r] >= len(queue):
                continue
            op = traces[r].ops[queue[heads[r]]]
            assert isinstance(op, CollectiveOp)
            fits = [
                g for g in _candidates(traces[r], r, op) if _ready(traces, queues, heads, g, op)
            ]
            if len(fits) != 1:
                continue
            members = traces[r].process_groups[fits[0]]
            calls.append(
                _Call(
                    op,
                    fits[0],
                    {m: queues[m][heads[m]] for m in members},
                    per_group.get(fits[0], 0),
                )
            )
            per_group[fits[0]] = per_group.get(fits[0], 0) + 1
            for m in members:
                heads[m] += 1
            progressed = True
        if not progressed:
            raise _mismatch(traces, queues, heads)
    return calls


def _ready(
    traces: Sequence[ExecutionTrace],
    queues: list[list[int]],
    heads: list[int],
    group: str,
    op: CollectiveOp,
) -> bool:
    members = traces[0].process_groups.get(group, ())
    for m in members:
        if m >= len(traces) or heads[m] >= len(queues[m]):
            return False
        other = traces[m].ops[queues[m][heads[m]]]
        assert isinstance(other, CollectiveOp)
        if (other.collective, other.size_bytes) != (
            op.collective,
            op.size_bytes,
        ) or other.group not in (None, group):
            return False
    return True


def _mismatch(
    traces: Sequence[ExecutionTrace], queues: list[list[int]], heads: list[int]
) -> ConfigError:
    def say(r: int) -> str:
        if heads[r] >= len(queues[r]):
            return f"rank {r} has no collective left"
        op = traces[r].ops[queues[r][heads[r]]]
        assert isinstance(op, CollectiveOp)
        return f"rank {r}'s is {op.collective} of {op.size_bytes} B (node {op.node_id})"

    r = next(r for r in range(len(traces)) if heads[r] < len(queues[r]))
    op = traces[r].ops[queues[r][heads[r]]]
    assert isinstance(op, CollectiveOp)
    others = "; ".join(say(m) for m in range(len(traces)) if m != r)
    return ConfigError(
        f"the ranks' traces disagree on collective {heads[r] + 1}: rank {r}'s is "
        f"{op.collective} of {op.size_bytes} B, with no match in its process "
        f"groups; {others}",
        source=traces[r].source,
        field=f"nodes[id={op.node_id}]",
    )


def _waits(ops: Sequence[TraceOp]) -> dict[int, list[int]]:
    """For each op, the collectives (indices) it waits for: a blocking call holds the next
    op, an asynchronous one the first later op that touches its storage."""
    waits: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        if not isinstance(op, CollectiveOp):
            continue
        later = range(i + 1, len(ops))
        waiter = next((j for j in later if not op.async_op or ops[j].uses & op.uses), None)
        if waiter is not None:
            waits.setdefault(waiter, []).append(i)
    return waits


def replay(
    traces: Sequence[ExecutionTrace],
    topology: nx.DiGraph[str],
    *,
    calibration: Calibration | str | Path | None = "default",
    backend: str = "nccl",
    model: str = "flow",
    gloo_threads: int = GLOO_THREADS,
) -> ReplayResult:
    """Simulate one step from every rank's trace (``traces[r]`` is rank r's) on
    ``topology``, rank r on its GPU of rank r.

    Each collective runs as ``backend`` runs it (gloo: its recipe on the bare links, on
    one of the group's ``gloo_threads`` worker threads in turn; nccl: NCCL's choice, on
    one stream per group). ``calibration`` is a :class:`Calibration`, a params file's
    path, ``"default"`` (the topology file's) or None (the bare links).

    Raises
    ------
    ConfigError
        Naming the file and field: a trace of another rank, more ranks than GPUs, ranks
        whose collectives do not match.
    """
    if not traces:
        raise ConfigError("no trace to replay", field="traces")
    n_gpus = len(gpu_nodes(topology))
    for r, t in enumerate(traces):
        if t.rank is not None and t.rank != r:
            raise ConfigError(
                f"is rank {t.rank}'s trace, given as rank {r}'s",
                source=t.source,
                field="distributedInfo.rank",
            )
        for name, ranks in t.process_groups.items():
            bad = next((r for r in ranks if whole_number(r) is None or r < 0), None)
            if bad is not None:
                raise ConfigError(f"process group {name} has rank {bad!r:.40}; a rank is a whole "
                                  "number >= 0", source=t.source,
                                  field=f"{PG_INIT}.{name}")  # fmt: skip
            if max(ranks, default=0) >= n_gpus:
                raise ConfigError(
                    f"process group {name} has rank {max(ranks)}; the topology "
                    f"has {n_gpus} GPUs (ranks 0..{n_gpus - 1})",
                    source=t.source,
                    field=f"{PG_INIT}.{name}",
                )
            if max(ranks, default=0) >= len(traces):
                raise ConfigError(
                    f"process group {name} has rank {max(ranks)}, but only "
                    f"{len(traces)} traces are given",
                    source=t.source,
                    field=f"{PG_INIT}.{name}",
                )
    session = Session(
        topology,
        model=model,
        protocol=default_protocol(backend),
        calibration=_calibration(calibration),
    )
    _build(session, traces, _match(traces), backend, gloo_threads)
    timeline = session.run(load_bins=0)
    measured = [t.measured_step_s for t in traces]
    n = len(traces)
    return ReplayResult(
        step_s=timeline.time_s,
        compute_s=tuple(timeline.compute_s(r) for r in range(n)),
        comm_s=tuple(timeline.comm_s(r) for r in range(n)),
        exposed_comm_s=tuple(timeline.exposed_comm_s(r) for r in range(n)),
        measured_step_s=max(m for m in measured if m is not None)
        if all(m is not None for m in measured)
        else None,
        timeline=timeline,
    )


def _calibration(given: Calibration | str | Path | None) -> Calibration | Literal["default"] | None:
    if given is None or isinstance(given, Calibration):
        return given
    return "default" if given == "default" else read_calibration(given)


def _build(
    session: Session,
    traces: Sequence[ExecutionTrace],
    calls: Sequence[_Call],
    backend: str,
    gloo_threads: int,
) -> None:
    """Issue every rank's ops into the session, each collective once its whole group has
    issued it."""
    at: dict[tuple[int, int], _Call] = {(m, i): c for c in calls for m, i in c.members.items()}
    waits = [_waits(t.ops) for t in traces]
    done: dict[tuple[int, int], Op] = {}  # (rank, op index) -> its session op
    issued: dict[tuple[int, int], Op] = {}  # (rank, op index) -> the issue's host op
    heads = [0] * len(traces)
    while any(heads[r] < len(t.ops) for r, t in enumerate(traces)):
        moved = False
        for r, t in enumerate(traces):
            while heads[r] < len(t.ops):
                i, op = heads[r], t.ops[heads[r]]
                after = [done[r, w] for w in waits[r].get(i, [])]
                if isinstance(op, ComputeOp):
                    done[r, i] = session.compute([r], op.duration_s, op.name, after=after)
                else:
                    if (r, i) not in issued:
                        issued[r, i] = session.compute([r], op.issue_s, op.name, after=after)
                        moved = True
                    call = at[r, i]
                    if not all(k in issued for k in call.members.items()):
                        break  # the group's other members issue theirs in their turn
                    if (r, i) not in done:  # the last member to issue it starts it
                        _issue(
                            session,
                            call,
                            [issued[k] for k in call.members.items()],
                            done,
                            backend=backend,
                            gloo_threads=gloo_threads,
                        )
                heads[r] += 1
                moved = True
        if not moved:  # cannot happen once _match passed; kept as a guard
            raise ConfigError(
                "the ranks' collectives wait on each other in a cycle",
                source=traces[0].source,
                field="nodes",
            )


def _issue(
    session: Session,
    call: _Call,
    after: list[Op],
    done: dict[tuple[int, int], Op],
    *,
    backend: str,
    gloo_threads: int,
) -> None:
    op, ranks = call.op, sorted(call.members)
    if len(ranks) > 1:
        recipe = recipe_for(backend, op.collective, len(ranks), op.size_bytes)
        stream = (
            f"comm {call.group}"
            if backend != "gloo"
            else f"gloo {call.group}.{call.index % max(gloo_threads, 1)}"
        )
        algorithm = None if recipe.algorithm == "nccl" else recipe.algorithm
        protocol = None if backend == "gloo" else "session"
        made = session.collective(
            recipe.simulate_as or op.collective,
            op.size_bytes,
            ranks,
            algorithm=algorithm,
            params=dict(recipe.params),
            protocol=protocol,
            stream=stream,
            name=f"{op.name} {call.group}#{call.index}",
            after=after,
        )
    else:
        made = after[0]
    for m, j in call.members.items():
        done[m, j] = made
