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
  that issues a collective inside it (DDP's gradient hook) is cut around the issue; two
  that overlap on the thread without one holding the other count their union (0-3 ms
  and 1-4 ms: 4 ms busy);
- **collectives**: the ``c10d::`` ops (``allreduce_``, ``_allgather_base_``...), with
  their size in nccl-tests' convention and their process group. The host spends the
  op's own duration issuing it; the collective then runs on its process group's
  communication stream. A blocking call (``async_op=False``) holds the next op until it
  ends (the host's wait, inside an op that issued it, is not compute); an asynchronous
  one holds the first later op that touches its tensors' storage (the trace records no
  ``wait``: DDP's bucket copy, a user's read after ``wait()``).

What cannot be timed is refused in one line naming the file, the field and the op, never
dropped: a start or duration that is not finite, a negative duration, an op of the step
that one trace names and the other does not (a record function id missing from either),
a rank or process-group rank that is not a whole number in ``0 .. MAX_RANKS - 1``.

:mod:`simcoll.training.trace` replays what this reads.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError
from simcoll.core.files import MAX_INPUT_BYTES, TOO_DEEP, check_nesting, read_input_bytes
from simcoll.core.limits import MAX_RANKS, check_size_bytes, whole_number

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
    positions: Mapping[int, int] = field(default_factory=dict)  # index in traceEvents


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
        Naming the file and field: not JSON, no ``traceEvents``, an op without ``ts``, a
        start that is not finite, a duration that is not a finite number >= 0 (an op that
        cannot be timed), a record function id that is not an integer, a rank that is not
        a whole number in ``0 .. MAX_RANKS - 1``.
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
    positions: dict[int, int] = {}
    for i, event in enumerate(events):
        where = f"traceEvents[{i}]"
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        args = event.get("args")
        if not isinstance(args, dict) or "Record function id" not in args:
            continue  # not an op of the graph (a kernel, the profiler's own span)
        rf_id = whole_number(args["Record function id"])
        if rf_id is None:
            raise ConfigError(f"must be an integer, got {args['Record function id']!r:.40}",
                              source=source, field=f"{where}.args.Record function id")  # fmt: skip
        start = _field(event, "ts", (int, float), source, where)
        duration = _field(event, "dur", (int, float), source, where)
        if not math.isfinite(start):
            raise ConfigError(f"must be a finite time in us, got {start!r} (record function id "
                              f"{rf_id})", source=source, field=f"{where}.ts")  # fmt: skip
        if not (math.isfinite(duration) and duration >= 0):
            raise ConfigError(f"must be a finite duration >= 0 us, got {duration!r} (record "
                              f"function id {rf_id}: the op cannot be timed)", source=source,
                              field=f"{where}.dur")  # fmt: skip
        tid = event.get("tid", 0)
        timed[rf_id] = (tid if isinstance(tid, int) else hash(tid), start * _US, duration * _US)
        names[rf_id] = str(event.get("name", ""))
        positions[rf_id] = i
    return KinetoTrace(source, timed, _rank(document, source), names, positions)


def _rank(document: dict[str, Any], source: str) -> int | None:
    """``distributedInfo.rank``: None where the trace names no rank, else a whole number in
    ``0 .. MAX_RANKS - 1``."""
    info = document.get("distributedInfo")
    if info is None:
        return None
    if not isinstance(info, dict):
        raise ConfigError(f"must be a table, got a {type(info).__name__}", source=source,
                          field="distributedInfo")  # fmt: skip
    if info.get("rank") is None:
        return None
    rank = whole_number(info["rank"])
    if rank is None or not 0 <= rank < MAX_RANKS:
        raise ConfigError(f"must be a whole number in 0..{MAX_RANKS - 1}, got "
                          f"{info['rank']!r:.40}", source=source,
                          field="distributedInfo.rank")  # fmt: skip
    return rank


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
    where = f"nodes[id={init.id}].inputs.values[0]"
    try:
        listed = json.loads(init.values[0])
    except (ValueError, RecursionError) as error:
        raise ConfigError(f"process groups unreadable (not JSON: {str(error)[:80]})",
                          source=source, field=where) from None  # fmt: skip
    if not isinstance(listed, list) or not all(isinstance(g, dict) for g in listed):
        raise ConfigError("process groups unreadable: not a list of tables", source=source,
                          field=where)  # fmt: skip
    groups = {}
    world = None  # the default group's size: its ranks are listed empty
    for k, g in enumerate(listed):
        here = f"{where}[{k}]"
        if "pg_name" not in g:
            raise ConfigError("a process group without 'pg_name'", source=source, field=here)
        ranks = g.get("ranks")
        if not isinstance(ranks, list):
            raise ConfigError(f"must be a list of ranks, got {ranks!r:.40}", source=source,
                              field=f"{here}.ranks")  # fmt: skip
        for i, rank in enumerate(ranks):
            _check_rank(rank, source, f"{here}.ranks[{i}]")
        if len(set(ranks)) != len(ranks):
            raise ConfigError(f"lists a rank twice: {ranks!r:.80}", source=source,
                              field=f"{here}.ranks")  # fmt: skip
        if not ranks:
            size = whole_number(g.get("group_size"))
            if size is None or not 1 <= size <= MAX_RANKS:
                raise ConfigError(f"must be a whole number in 1..{MAX_RANKS}, got "
                                  f"{g.get('group_size')!r:.40}", source=source,
                                  field=f"{here}.group_size")  # fmt: skip
            world = max(world or 0, size)
        groups[str(g["pg_name"])] = tuple(int(r) for r in ranks)
    return {name: ranks or tuple(range(world or 0)) for name, ranks in groups.items()}


def _check_rank(value: object, source: str, where: str) -> None:
    rank = whole_number(value)
    if rank is None or not 0 <= rank < MAX_RANKS:
        raise ConfigError(f"must be a whole number in 0..{MAX_RANKS - 1}, got {value!r:.40}",
                          source=source, field=where)  # fmt: skip


def _collective(node: _Node, issue_s: float, source: str) -> CollectiveOp:
    name = C10D_COLLECTIVES[node.name]
    where = f"nodes[id={node.id}].inputs"
    tensors = [v for v, t in zip(node.values, node.types, strict=False) if "Tensor" in t]
    if not tensors and node.name != "c10d::barrier":
        raise ConfigError(f"{node.name} has no tensor input", source=source, field=where)
    size = 4 if node.name == "c10d::barrier" else _tensor_bytes(tensors[0])
    if name in _OUTPUT_SIZED or node.name in ("c10d::_reduce_scatter_base_",):
        size = _tensor_bytes(tensors[0])  # output first: the whole buffer
    try:
        size = check_size_bytes(size, "size_bytes")
    except ConfigError as error:
        raise ConfigError(f"{node.name}'s tensor {error.message}", source=source,
                          field=where) from None  # fmt: skip
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
    collective is cut at each issue. Two ops that overlap without one holding the other
    (siblings the measurement shows running at once on one thread) take the union of
    their intervals: the later one only its time after the earlier one ends."""
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
    _check_timed(_replayed(nodes, by_rf.get(mark) if mark is not None else None), by_rf,
                 timing, source)  # fmt: skip
    eps = 1e-9
    on_thread = [
        (rf, t, s, d)
        for rf, (t, s, d) in timing.events.items()
        if t == tid and window[0] - eps <= s and s + d <= window[1] + eps and rf != mark
    ]
    _check_known(on_thread, by_rf, timing, source)
    inside = sorted(
        (t for t in on_thread if not _is_record(by_rf[t[0]])), key=lambda t: (t[2], -t[3])
    )
    ops: list[TraceOp] = []
    i, busy_until = 0, float("-inf")
    while i < len(inside):
        rf, _, start, duration = inside[i]
        end = start + duration
        j = i + 1  # the ops it holds: those inside its interval
        while j < len(inside) and _holds(end, inside[j], eps):
            j += 1
        begin = min(max(start, busy_until), end)  # after what an overlapping sibling covered
        inner = [(by_rf[r], *_after(s, d, begin)) for r, _, s, d in inside[i + 1 : j]]
        ops.extend(_cut(by_rf[rf], begin, end, inner, source))
        busy_until = max(busy_until, end)
        i = j
    return ops, measured


def _holds(end: float, op: tuple[int, int, float, float], eps: float) -> bool:
    """Whether an op starting at or after an op that ends at ``end`` runs inside it."""
    _, _, start, duration = op
    return start < end - eps and start + duration <= end + eps


def _replayed(nodes: Sequence[_Node], step: _Node | None) -> list[_Node]:
    """The graph's ops a replay times: every descendant of the step's node, or without a
    step every node but the tracer's own and the process groups'."""
    if step is None:
        return [
            n for n in nodes if not (n.name.startswith("[pytorch|profiler") or n.name == PG_INIT)
        ]
    children: dict[int, list[_Node]] = {}
    for n in nodes:
        if n.parent != n.id:
            children.setdefault(n.parent, []).append(n)
    found, seen, stack = [], {step.id}, [step]
    while stack:  # without recursion, and once each where the parent links loop
        for kid in children.get(stack.pop().id, []):
            if kid.id not in seen:
                seen.add(kid.id)
                found.append(kid)
                stack.append(kid)
    return found


def _check_timed(
    replayed: Sequence[_Node], by_rf: Mapping[int, _Node], timing: KinetoTrace, source: str
) -> None:
    """Refuse an op of the replayed graph that the Kineto trace does not time (it would be
    dropped, and the step replayed without it)."""
    for node in replayed:
        where = f"nodes[id={node.id}].attrs.rf_id"
        if node.rf_id is None:
            raise ConfigError(f"{node.name} has no record function id: the op cannot be timed",
                              source=source, field=where)  # fmt: skip
        if node.rf_id not in timing.events:
            raise ConfigError(f"{node.name}'s record function id {node.rf_id} has no event in "
                              f"{timing.source}: the op cannot be timed", source=source,
                              field=where)  # fmt: skip
        if by_rf[node.rf_id] is not node:
            raise ConfigError(f"{node.name}'s record function id {node.rf_id} is node "
                              f"{by_rf[node.rf_id].id}'s too: the op's time is ambiguous",
                              source=source, field=where)  # fmt: skip


def _check_known(
    on_thread: Sequence[tuple[int, int, float, float]],
    by_rf: Mapping[int, _Node],
    timing: KinetoTrace,
    source: str,
) -> None:
    """Refuse an op the Kineto trace times on the replayed thread (inside the step) that
    the execution trace does not have: the replay would leave it out."""
    for rf, *_ in on_thread:
        if rf not in by_rf:
            index = timing.positions.get(rf)
            where = "traceEvents" if index is None else f"traceEvents[{index}]"
            raise ConfigError(f"{timing.names.get(rf, 'an op')!r:.60} (record function id {rf}) "
                              f"is not in the execution trace {source}: the op cannot be "
                              "replayed", source=timing.source,
                              field=f"{where}.args.Record function id")  # fmt: skip


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
    for k, (call, issued, took) in enumerate([*calls, (None, end, 0.0)]):
        s, d = _after(issued, took, cursor)  # overlapping the call before: its time after
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


def _after(start: float, duration: float, cursor: float) -> tuple[float, float]:
    """The part of an interval after ``cursor``: (start, duration), unchanged where it
    starts there or later."""
    if start >= cursor:
        return start, duration
    return cursor, max(start + duration - cursor, 0.0)
