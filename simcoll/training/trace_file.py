"""Read a recorded PyTorch step: its execution trace and Kineto trace, as ops per rank.

PyTorch records a step twice: ``torch.profiler.ExecutionTraceObserver`` writes the op
graph (every op with its tensors, as ``[tensor id, storage id, offset, elements, element
bytes, device]``; the process groups in a ``## process_group:init ##`` node), and
``torch.profiler.profile`` writes the Kineto (Chrome) trace: each op's measured start
and duration on its thread, joined to the graph by the record function id (the graph's
``rf_id`` attribute, Kineto's ``Record function id``). This module reads both, plain
JSON (gzip or not), and rebuilds each rank's step as the host thread ran it:

- **compute**: the top-level ops of the host thread, in program order, each taking its
  measured duration (nesting from the Kineto times: the graph's parent links are broken
  after an asynchronous gloo call, whose record function ends on another thread). An op
  that issues a collective inside it (DDP's gradient hook) is cut around the issue;
- **collectives**: the ``c10d::`` ops (``allreduce_``, ``_allgather_base_``...), with
  their size in nccl-tests' convention and their process group. The host spends the
  op's own duration issuing it; the collective then runs on its process group's
  communication stream. A blocking call (``async_op=False``) holds the next op until it
  ends (the host's wait, inside an op that issued it, is not compute); an asynchronous
  one holds the first later op that touches its tensors' storage (the trace records no
  ``wait``: DDP's bucket copy, a user's read after ``wait()``).

:mod:`simcoll.training.trace` replays what this reads.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError
from simcoll.core.files import MAX_INPUT_BYTES, TOO_DEEP, check_nesting, read_input_bytes

__all__ = [
    "C10D_COLLECTIVES",
    "PG_INIT",
    "CollectiveOp",
    "ComputeOp",
    "ExecutionTrace",
    "KinetoTrace",
    "TraceOp",
    "read_execution_trace",
    "read_kineto_durations",
]

#: c10d ops and the simcoll collective each runs (a barrier: an all-reduce of 4 bytes).
C10D_COLLECTIVES = {
    "c10d::allreduce_": "allreduce",
    "c10d::allreduce_coalesced_": "allreduce",
    "c10d::_allgather_base_": "allgather",
    "c10d::allgather_": "allgather",
    "c10d::allgather_into_tensor_coalesced_": "allgather",
    "c10d::_reduce_scatter_base_": "reducescatter",
    "c10d::reduce_scatter_": "reducescatter",
    "c10d::reduce_scatter_tensor_coalesced_": "reducescatter",
    "c10d::broadcast_": "broadcast",
    "c10d::reduce_": "reduce",
    "c10d::alltoall_base_": "alltoall",
    "c10d::alltoall_": "alltoall",
    "c10d::gather_": "gather",
    "c10d::scatter_": "scatter",
    "c10d::barrier": "allreduce",
}
_OUTPUT_SIZED = {"allgather", "gather"}  # nccl-tests: the whole gathered buffer
PG_INIT = "## process_group:init ##"
_US = 1e-6


@dataclass(frozen=True)
class ComputeOp:
    """Host work of one rank: a top-level op (or a piece of one cut around a call)."""

    name: str
    duration_s: float
    node_id: int = -1
    uses: frozenset[int] = frozenset()  # storage ids of the tensors it reads or writes


@dataclass(frozen=True)
class CollectiveOp:
    """One ``c10d::`` collective as one rank issued it."""

    name: str
    collective: str
    size_bytes: int
    async_op: bool = True
    group: str | None = None  # the process group's name, where the trace says which
    issue_s: float = 0.0  # host time of the c10d op itself
    node_id: int = -1
    uses: frozenset[int] = frozenset()


TraceOp = ComputeOp | CollectiveOp


@dataclass(frozen=True)
class KinetoTrace:
    """What a Kineto trace gives a replay: per record function id, its thread, start and
    duration (seconds), the rank it names, and the process groups it lists."""

    source: str
    events: Mapping[int, tuple[int, float, float]]
    rank: int | None = None
    names: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecutionTrace:
    """One rank's step: its ops in program order and the process groups (name to global
    ranks) it knows; ``measured_step_s`` where a Kineto trace timed the step."""

    source: str
    ops: tuple[TraceOp, ...]
    process_groups: Mapping[str, tuple[int, ...]]
    rank: int | None = None
    measured_step_s: float | None = None


# -- reading ------------------------------------------------------------------------------


def _load_json(path: str | Path, what: str) -> Any:
    source = str(path)
    data = read_input_bytes(path, missing=f"no such {what}")
    if data[:2] == b"\x1f\x8b":
        try:
            inflater = zlib.decompressobj(wbits=31)
            data = inflater.decompress(data, MAX_INPUT_BYTES + 1)
        except (zlib.error, EOFError, gzip.BadGzipFile) as error:
            raise ConfigError(f"not a gzip file: {error}", source=source) from None
        if len(data) > MAX_INPUT_BYTES:
            raise ConfigError(f"unpacks to over {MAX_INPUT_BYTES // 2**20} MiB", source=source)
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise ConfigError(f"not a {what} (not JSON: {str(error)[:80]})", source=source) from None
    try:
        check_nesting(document, source=source)
    except RecursionError:
        raise ConfigError(TOO_DEEP, source=source) from None
    return document


def _field(item: Any, key: str, kind: type | tuple[type, ...], source: str, where: str) -> Any:
    value = item.get(key) if isinstance(item, dict) else None
    if not isinstance(value, kind) or (
        isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
    ):
        got = "missing" if value is None else f"a {type(value).__name__}"
        raise ConfigError(
            f"must be a {_kind_name(kind)}, got {got}", source=source, field=f"{where}.{key}"
        )
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds:
        return "number"
    names = {"int": "integer", "str": "string", "list": "list", "dict": "table"}
    return " or ".join(names[k.__name__] for k in kinds)


def read_kineto_durations(path: str | Path) -> KinetoTrace:
    """Read a Kineto trace (``prof.export_chrome_trace``): each op's thread, start and
    duration by record function id, and the rank (``distributedInfo``).

    Raises
    ------
    ConfigError
        Naming the file and field: not JSON, no ``traceEvents``, an op without ``ts``.
    """
    source = str(path)
    document = _load_json(path, "Kineto trace")
    events = (
        _field(document, "traceEvents", list, source, "trace")
        if isinstance(document, dict)
        else _field({}, "traceEvents", list, source, "trace")
    )
    timed: dict[int, tuple[int, float, float]] = {}
    names: dict[int, str] = {}
    for i, event in enumerate(events):
        where = f"traceEvents[{i}]"
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        args = event.get("args")
        rf_id = args.get("Record function id") if isinstance(args, dict) else None
        if not isinstance(rf_id, int):
            continue  # not an op of the graph (a kernel, the profiler's own span)
        start = _field(event, "ts", (int, float), source, where)
        duration = _field(event, "dur", (int, float), source, where)
        tid = event.get("tid", 0)
        timed[rf_id] = (tid if isinstance(tid, int) else hash(tid), start * _US, duration * _US)
        names[rf_id] = str(event.get("name", ""))
    info = document.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return KinetoTrace(source, timed, rank if isinstance(rank, int) else None, names)


@dataclass(frozen=True)
class _Node:
    id: int
    name: str
    parent: int
    rf_id: int | None
    values: tuple[Any, ...]
    types: tuple[str, ...]
    uses: frozenset[int]


def _storages(value: Any, found: set[int]) -> None:
    """Storage ids of every tensor in an ET value ([tensor, storage, offset, n, bytes,
    device], possibly in lists)."""
    if not isinstance(value, list):
        return
    if len(value) == 6 and isinstance(value[1], int) and isinstance(value[5], str):
        found.add(value[1])
        return
    for item in value:
        _storages(item, found)


def _tensor_bytes(value: Any) -> int:
    if not isinstance(value, list):
        return 0
    if (
        len(value) == 6
        and all(isinstance(v, int) for v in value[3:5])
        and isinstance(value[5], str)
    ):
        return int(value[3]) * int(value[4])
    return sum(_tensor_bytes(item) for item in value)


def _nodes(document: Any, source: str) -> list[_Node]:
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise ConfigError(
            "not a PyTorch execution trace: no 'nodes' list", source=source, field="nodes"
        )
    nodes = []
    for i, item in enumerate(document["nodes"]):
        where = f"nodes[{i}]"
        node_id = _field(item, "id", int, source, where)
        name = _field(item, "name", str, source, where)
        parent = _field(item, "ctrl_deps", int, source, where)
        inputs = _field(item, "inputs", dict, source, where)
        outputs = item.get("outputs", {})
        values = _field(inputs, "values", list, source, f"{where}.inputs")
        types = inputs.get("types", [])
        attrs = item.get("attrs", [])
        rf_id = (
            next(
                (a.get("value") for a in attrs if isinstance(a, dict) and a.get("name") == "rf_id"),
                None,
            )
            if isinstance(attrs, list)
            else None
        )
        used: set[int] = set()
        _storages(values, used)
        _storages(outputs.get("values", []) if isinstance(outputs, dict) else [], used)
        nodes.append(
            _Node(
                node_id,
                name,
                parent,
                rf_id if isinstance(rf_id, int) else None,
                tuple(values),
                tuple(str(t) for t in types) if isinstance(types, list) else (),
                frozenset(used),
            )
        )
    return nodes


def _process_groups(nodes: Sequence[_Node], source: str) -> dict[str, tuple[int, ...]]:
    init = next((n for n in nodes if n.name == PG_INIT), None)
    if init is None or not init.values or not isinstance(init.values[0], str):
        raise ConfigError(
            f"no '{PG_INIT}' node: the trace names no process group", source=source, field="nodes"
        )
    try:
        listed = json.loads(init.values[0])
        world = max(int(g["group_size"]) for g in listed if not g["ranks"])
        return {
            str(g["pg_name"]): tuple(int(r) for r in g["ranks"]) or tuple(range(world))
            for g in listed
        }
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(
            f"process groups unreadable ({type(error).__name__}: {error})",
            source=source,
            field=f"nodes[id={init.id}].inputs",
        ) from None


def _collective(node: _Node, issue_s: float, source: str) -> CollectiveOp:
    name = C10D_COLLECTIVES[node.name]
    where = f"nodes[id={node.id}].inputs"
    tensors = [v for v, t in zip(node.values, node.types, strict=False) if "Tensor" in t]
    if not tensors and node.name != "c10d::barrier":
        raise ConfigError(f"{node.name} has no tensor input", source=source, field=where)
    size = 4 if node.name == "c10d::barrier" else _tensor_bytes(tensors[0])
    if name in _OUTPUT_SIZED or node.name in ("c10d::_reduce_scatter_base_",):
        size = _tensor_bytes(tensors[0])  # output first: the whole buffer
    flags = [v for v, t in zip(node.values, node.types, strict=False) if t == "Bool"]
    return CollectiveOp(
        node.name,
        name,
        size,
        async_op=bool(flags[-1]) if flags else False,
        issue_s=issue_s,
        node_id=node.id,
        uses=node.uses,
    )


def read_execution_trace(
    path: str | Path, *, kineto: str | Path | KinetoTrace | None = None, step: str | None = None
) -> ExecutionTrace:
    """Read one rank's execution trace, timed by its Kineto trace where given.

    ``step`` names the record function around the step (only what runs inside it is
    replayed); None takes every op of the host thread. Without a Kineto trace every op
    takes 0 s and the nesting is the graph's own.

    Raises
    ------
    ConfigError
        Naming the file and field: not an execution trace, a node missing a field, no
        process groups, a step annotation that is not there.
    """
    source = str(path)
    nodes = _nodes(_load_json(path, "PyTorch execution trace"), source)
    groups = _process_groups(nodes, source)
    timing = read_kineto_durations(kineto) if isinstance(kineto, (str, Path)) else kineto
    by_rf = {n.rf_id: n for n in nodes if n.rf_id is not None}
    if step is not None and not any(n.name == step for n in nodes):
        raise ConfigError(
            f"no op named {step!r} (the step annotation)", source=source, field="nodes"
        )
    if timing is None:
        ops, measured = _ops_from_graph(nodes, step, source), None
    else:
        ops, measured = _ops_from_times(nodes, by_rf, timing, step, source)
    return ExecutionTrace(source, tuple(ops), groups, timing.rank if timing else None, measured)


def _is_record(node: _Node) -> bool:
    """A backend's own record of a call (``gloo:all_reduce``...) or the tracer's."""
    return node.name.startswith(("gloo:", "nccl:", "[pytorch|profiler")) or node.name == PG_INIT


def _ops_from_graph(nodes: Sequence[_Node], step: str | None, source: str) -> list[TraceOp]:
    children: dict[int, list[_Node]] = {}
    for n in nodes:
        if n.parent != n.id:
            children.setdefault(n.parent, []).append(n)
    roots = (
        [n for n in nodes if n.name == step]
        if step
        else [n for n in nodes if n.name == "[pytorch|profiler|execution_trace|thread]"]
    )
    ops: list[TraceOp] = []

    def walk(node: _Node) -> None:
        if node.name in C10D_COLLECTIVES:
            ops.append(_collective(node, 0.0, source))
            return
        kids = sorted(children.get(node.id, []), key=lambda n: n.id)
        if any(_holds_collective(k, children) for k in kids):
            for kid in kids:
                if not _is_record(kid):
                    walk(kid)
        else:
            ops.append(ComputeOp(node.name, 0.0, node.id, _subtree_uses(node, children)))

    for root in roots:
        for top in sorted(children.get(root.id, []), key=lambda n: n.id):
            if not _is_record(top):
                walk(top)
    return ops


def _holds_collective(node: _Node, children: Mapping[int, list[_Node]]) -> bool:
    return node.name in C10D_COLLECTIVES or any(
        _holds_collective(k, children) for k in children.get(node.id, [])
    )


def _subtree_uses(node: _Node, children: Mapping[int, list[_Node]]) -> frozenset[int]:
    used = set(node.uses)
    for kid in children.get(node.id, []):
        used |= _subtree_uses(kid, children)
    return frozenset(used)


def _ops_from_times(
    nodes: Sequence[_Node],
    by_rf: Mapping[int, _Node],
    timing: KinetoTrace,
    step: str | None,
    source: str,
) -> tuple[list[TraceOp], float | None]:
    """Top-level ops of the host thread by their measured intervals; a top op holding a
    collective is cut at each issue."""
    timed = [(rf, *timing.events[rf]) for rf in by_rf if rf in timing.events]
    if not timed:
        raise ConfigError(
            "no op of this execution trace is in the Kineto trace (record "
            "function ids differ: another run's?)",
            source=timing.source,
            field="traceEvents",
        )
    window, measured, mark = (float("-inf"), float("inf")), None, None
    if step is not None:
        marks = sorted((t for t in timed if by_rf[t[0]].name == step), key=lambda t: t[2])
        if not marks:
            raise ConfigError(
                f"the step {step!r} is not timed here", source=timing.source, field="traceEvents"
            )
        mark, tid, start, duration = marks[0]  # the first, where several steps ran
        window, measured = (start, start + duration), duration
    else:
        counts: dict[int, int] = {}
        for _, t, _, _ in timed:
            counts[t] = counts.get(t, 0) + 1
        tid = max(counts, key=lambda t: counts[t])
    eps = 1e-9
    inside = sorted(
        (
            t
            for t in timed
            if t[1] == tid
            and window[0] - eps <= t[2]
            and t[2] + t[3] <= window[1] + eps
            and t[0] != mark
            and not _is_record(by_rf[t[0]])
        ),
        key=lambda t: (t[2], -t[3]),
    )
    ops: list[TraceOp] = []
    i = 0
    while i < len(inside):
        rf, _, start, duration = inside[i]
        end = start + duration
        j = i + 1
        while j < len(inside) and inside[j][2] < end - eps:
            j += 1
        ops.extend(
            _cut(
                by_rf[rf],
                start,
                end,
                [(by_rf[r], s, d) for r, _, s, d in inside[i + 1 : j]],
                source,
            )
        )
        i = j
    return ops, measured


def _cut(
    top: _Node, start: float, end: float, inner: Sequence[tuple[_Node, float, float]], source: str
) -> list[TraceOp]:
    """One top-level op, or its pieces between the collectives issued inside it."""
    if top.name in C10D_COLLECTIVES:
        return [_collective(top, end - start, source)]
    calls = [(n, s, d) for n, s, d in inner if n.name in C10D_COLLECTIVES]
    if not calls:
        return [
            ComputeOp(
                top.name,
                end - start,
                top.id,
                frozenset(top.uses.union(*(n.uses for n, _, _ in inner))),
            )
        ]
    ops: list[TraceOp] = []
    cursor, blocked = start, False
    for k, (call, s, d) in enumerate([*calls, (None, end, 0.0)]):
        piece = [(n, t) for n, t, _ in inner if cursor <= t < s and n.name not in C10D_COLLECTIVES]
        if blocked:  # the host waited for the blocking call until its next op began
            cursor = min((t for _, t in piece), default=s)
        ops.append(
            ComputeOp(
                f"{top.name} ({k + 1}/{len(calls) + 1})",
                max(s - cursor, 0.0),
                top.id,
                frozenset(top.uses if k == 0 else ()).union(*(n.uses for n, _ in piece)),
            )
        )
        if call is not None:
            ops.append(made := _collective(call, d, source))
            blocked = not made.async_op
        cursor = s + d
    return ops
