"""One point of a scenario: its topology, its evaluation, and what it gave.

:func:`evaluate_point` never raises: a bad value at one point becomes that point's error,
and a point asking for more ranks than its topology has GPUs is *skipped*.
:func:`check_scenario` refuses up front what would make every point fail.
"""

from __future__ import annotations

import difflib
import inspect
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, TypeVar

import networkx as nx

from simcoll.algorithms import ALGORITHMS, PLAN_PARAMS
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.files import record_read, recording_reads
from simcoll.output.results import CSV_COLUMNS, Row
from simcoll.plan.placement import place_ranks
from simcoll.prediction import predict
from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.closed_form import CLOSED_FORM_MODELS
from simcoll.scenarios.scenario import (
    ENGINE_KEYS,
    TOPOLOGY_FILE_AXIS,
    TOPOLOGY_PREFIX,
    Point,
    Scenario,
)
from simcoll.sim.timeline import Timeline
from simcoll.topology import gpu_nodes, load
from simcoll.topology.calibration import Calibration, read_calibration
from simcoll.topology.io import source_files
from simcoll.topology.whatif import degrade, fail, parse_degrade

__all__ = [
    "PointResult",
    "check_outputs",
    "check_scenario",
    "default_plots",
    "evaluate_point",
    "scenario_topology",
    "timeline_points",
]

_T = TypeVar("_T")


@dataclass(frozen=True, eq=False)
class PointResult:
    """What one point gave: its rows (ok) or its error, and its timeline if asked for."""

    point: Point
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0
    timeline: Timeline | None = None
    skipped: str | None = None  # why the point does not apply (n_ranks > the GPUs there)
    inputs: dict[str, str] = field(default_factory=dict)  # every file read: its SHA-256

    @property
    def ok(self) -> bool:
        """Whether the point ran to the end (or was skipped as not applicable)."""
        return self.error is None

    @property
    def status(self) -> str:
        """``"ok"``, ``"skipped"`` or ``"error"``."""
        return "error" if self.error else "skipped" if self.skipped else "ok"

    def record(self) -> dict[str, Any]:
        """The point as one ``results.jsonl`` line (no timeline)."""
        return {
            "index": self.point.index,
            "key": self.point.key,
            "values": self.point.values,
            "status": self.status,
            "error": self.error or self.skipped,
            "elapsed_s": self.elapsed_s,
            "rows": self.rows,
            "inputs": self.inputs,
        }


class _NotApplicable(Exception):  # noqa: N818 - not an error: the point does not apply
    """A point that does not apply to its topology (more ranks than GPUs)."""


@lru_cache(maxsize=16)
def _topology(
    file: str, overrides: tuple[tuple[str, str], ...], version: tuple[int, ...]
) -> tuple[nx.DiGraph[str], dict[str, str]]:
    """The loaded topology and the files loading it read (path: SHA-256), cached by path,
    overrides and ``version`` (the files' stat: an edited file is loaded again, never
    served from the cache)."""
    with recording_reads() as reads:
        graph = load(file, dict(overrides))
    return graph, dict(reads)


def _version(file: Path, overrides: dict[str, str]) -> tuple[int, ...]:
    """Inode, size and modification time of every file :func:`load` reads for ``file``."""
    return tuple(n for path in source_files(file, overrides) for n in _stat(path))


def _stat(path: Path) -> tuple[int, int, int]:
    try:
        info = path.stat()
    except (OSError, ValueError):
        return (-1, -1, -1)
    return (info.st_ino, info.st_size, info.st_mtime_ns)


@lru_cache(maxsize=4)
def _calibration(file: str, version: tuple[int, ...]) -> tuple[Calibration, dict[str, str]]:
    """The params file and what reading it read, cached by path and ``version`` (its
    stat), as :func:`_topology`."""
    with recording_reads() as reads:
        calibration = read_calibration(file)
    return calibration, dict(reads)


def timeline_points(scenario: Scenario, points: list[Point]) -> set[int]:
    """The indices of the points whose timeline is kept: ``[output] timelines`` (first,
    all or none; collectives none unless asked for)."""
    choice = scenario.output.get("timelines", "first")
    if scenario.kind == "collective" and "timelines" not in scenario.output:
        choice = "none"
    if choice == "all":
        return {p.index for p in points}
    return {points[0].index} if choice == "first" and points else set()


def evaluate_point(scenario: Scenario, point: Point, *, timeline: bool = False) -> PointResult:
    """Run one point. Errors on bad input become the point's error; nothing is raised.

    Every file the point reads (its topology, what that imports, params files, placement
    files...) is recorded with its SHA-256 in the result's ``inputs``, so that a resumed
    point is taken only if none of them changed (:mod:`simcoll.scenarios.outdir`).
    """
    started = time.perf_counter()
    with recording_reads() as reads:
        try:
            rows, line = _evaluate(scenario, point, timeline=timeline)
        except _NotApplicable as reason:
            return PointResult(point, skipped=str(reason), inputs=dict(reads),
                               elapsed_s=time.perf_counter() - started)  # fmt: skip
        except SimcollError as error:
            return PointResult(point, error=str(error), elapsed_s=time.perf_counter() - started)
        except Exception as error:
            where = traceback.extract_tb(error.__traceback__)[-1]
            text = f"{type(error).__name__}: {error} (at {where.filename}:{where.lineno})"
            return PointResult(point, error=text, elapsed_s=time.perf_counter() - started)
    for row in rows:
        for name, value in point.values.items():
            row.setdefault(name, value)
    return PointResult(point, rows, elapsed_s=time.perf_counter() - started, timeline=line,
                       inputs=dict(reads))  # fmt: skip


def _evaluate(
    scenario: Scenario, point: Point, *, timeline: bool
) -> tuple[list[dict[str, Any]], Timeline | None]:
    file, overrides, params = scenario.setup(point)
    topology = scenario_topology(scenario, file, overrides)
    n_gpus = len(gpu_nodes(topology))
    n_ranks = params.get("n_ranks")
    if isinstance(n_ranks, int) and not isinstance(n_ranks, bool) and n_ranks > n_gpus:
        raise _NotApplicable(f"{file.name} has {n_gpus} GPUs, fewer than n_ranks={n_ranks}")
    kind = str(params.pop("kind", "collective"))
    model = str(params.pop("model", "flow"))
    named = params.pop("protocol", DEFAULTS.protocol)
    if not isinstance(named, str):
        raise ConfigError(f"must be a protocol name, got {named!r}", field="workload.protocol")
    protocol = None if named == "none" else named
    calibration = point_calibration(topology, params.pop("calibration", "default"),
                                     scenario.base)  # fmt: skip
    placement = placement_beside(params.pop("placement", "linear"), scenario.base)
    plan = params.pop("plan", "nccl")
    in_place = params.pop("in_place", False)
    if kind == "collective":
        return _collective(topology, params, model, protocol, calibration, placement=placement,
                           plan=plan, in_place=in_place, timeline=timeline)  # fmt: skip
    for name, value, default in (("placement", placement, "linear"), ("plan", plan, "nccl"),
                                 ("in_place", in_place, False)):  # fmt: skip
        if value != default:
            raise ConfigError("applies to kind = 'collective' only", field=f"workload.{name}")
    from simcoll.scenarios.workloads import run_workload  # noqa: PLC0415 - the workloads pull in SimPy

    result = run_workload(
        kind, topology, model=model, protocol=protocol, calibration=calibration, **params
    )
    row = {
        "collective": kind,
        "algorithm": params.get("algorithm", ""),
        "protocol": protocol or "none",
        "n_ranks": params.get("n_ranks", result.timeline.n_ranks),
        "size_bytes": params.get("size_bytes", ""),
        **result.metrics,
    }
    return [row], result.timeline if timeline else None


def point_calibration(topology: nx.DiGraph[str], named: object, base: Path) -> Calibration | None:
    """A point's parameters: the topology file's (``default``), none, or a params file
    (relative to the scenario's folder)."""
    if named == "default":
        found = topology.graph.get("calibration")
        return found if isinstance(found, Calibration) else None
    if named in (None, "none"):
        return None
    if not isinstance(named, str):
        raise ConfigError(f"must be a params file, 'default' or 'none', got {named!r}",
                          field="workload.calibration")  # fmt: skip
    path = base / named
    calibration, reads = _calibration(str(path), _stat(path))
    record_read(reads)
    return calibration


def placement_beside(placement: object, base: Path) -> object:
    """A placement file named relative to the scenario's folder, as every path in a
    scenario is; ``linear`` and ``random[:SEED]`` as they are."""
    if not isinstance(placement, str) or placement in ("linear", "random"):
        return placement
    if placement.startswith("random:"):
        return placement
    return str(base / placement)


def _collective(
    topology: nx.DiGraph[str],
    params: dict[str, Any],
    model: str,
    protocol: str | None,
    calibration: Calibration | None,
    *,
    placement: object = "linear",
    plan: object = "nccl",
    in_place: object = False,
    timeline: bool = False,
) -> tuple[list[dict[str, Any]], Timeline | None]:
    """A collective point's rows, as ``predict`` gives them, and with ``timeline`` the
    same call run in a session (the one path: the same time) for its timeline."""
    collective = params.pop("collective", None)
    if not isinstance(collective, str):
        raise ConfigError("must name a collective (a string)", field="workload.collective")
    size = params.pop("size_bytes", None)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ConfigError(
            f"must be a size in bytes (an integer or a string like '1 MiB'), got {size!r}",
            field="workload.size_bytes",
        )
    algorithm = params.pop("algorithm", None)
    if algorithm is not None and not isinstance(algorithm, str):
        raise ConfigError(f"must be an algorithm name, got {algorithm!r}",
                          field="workload.algorithm")  # fmt: skip
    n_ranks = params.pop("n_ranks", None)
    if n_ranks is not None and (isinstance(n_ranks, bool) or not isinstance(n_ranks, int)):
        raise ConfigError(f"must be an integer, got {n_ranks!r}", field="workload.n_ranks")
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(
                f"an algorithm parameter must be an integer, got {value!r}",
                field=f"workload.{name}",
            )
    placed, planned = _text(placement, "workload.placement"), _text(plan, "workload.plan")
    in_place = _flag(in_place, "workload.in_place")
    prediction = predict(topology, collective, [size], algorithm=algorithm, protocol=protocol,
                         model=model, n_ranks=n_ranks, params=params or None,
                         calibration=calibration, placement=placed, plan=planned,
                         in_place=in_place)  # fmt: skip
    rows = [_row_dict(row) for row in prediction.rows]
    if not timeline or model in CLOSED_FORM_MODELS:  # a closed form runs nothing to record
        return rows, None
    from simcoll.prediction.session import Session  # noqa: PLC0415 - only for timelines

    nodes = place_ranks(topology, n_ranks or len(gpu_nodes(topology)), placed)
    session = Session(topology, model=model, protocol=protocol, calibration=calibration,
                      rank_nodes=nodes, plan=planned)  # fmt: skip
    session.collective(collective, size, range(len(nodes)), algorithm=algorithm,
                       params=params or None, in_place=in_place)  # fmt: skip
    return rows, session.run()


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {value!r}", field=field)
    return value


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"must be a string, got {value!r}", field=field)
    return value


def _row_dict(row: Row) -> dict[str, Any]:
    from dataclasses import asdict  # noqa: PLC0415

    return asdict(row)


#: The engine keys a workload other than a collective takes (placement, plan and in_place
#: are a collective's).
_WORKLOAD_ENGINE_KEYS = tuple(k for k in ENGINE_KEYS if k not in ("placement", "plan", "in_place"))


def check_scenario(scenario: Scenario) -> None:
    """Refuse, before any point runs, what would make every point fail: an unknown
    workload kind, collective or parameter name, or a topology file that does not load.

    Values (a bad size at one point, an algorithm that does not exist) are left to the
    points, whose errors are recorded one by one.
    """
    names = {k: f"workload.{k}" for k in scenario.workload}
    names.update({k: f"sweep.{k}" for k in scenario.axes if not k.startswith(TOPOLOGY_PREFIX)})
    if scenario.kind == "collective":
        collective = scenario.workload.get("collective")
        if isinstance(collective, str) and "collective" not in scenario.axes:
            _located(lambda: Collective.parse(collective), scenario, "workload.collective")
        for name, where in names.items():
            _check_collective_key(name, where, scenario.source)
    else:
        from simcoll.scenarios.workloads import workload_params  # noqa: PLC0415 - pulls in SimPy

        allowed = _located(lambda: workload_params(scenario.kind), scenario, "workload.kind")
        for name, where in names.items():
            if name not in allowed and name not in _WORKLOAD_ENGINE_KEYS:
                raise ConfigError(
                    f"{scenario.kind} has no parameter {name!r}; valid: "
                    f"{', '.join([*allowed, *_WORKLOAD_ENGINE_KEYS[1:]])}",
                    source=scenario.source,
                    field=where,
                )
    check_outputs(scenario)
    if TOPOLOGY_FILE_AXIS not in scenario.axes:
        scenario_topology(scenario, scenario.topology_file, dict(scenario.topology_set))


#: What a collective point reads besides the engine keys: its call, and the algorithm
#: parameters (every keyword an algorithm takes that a plan does not give).
_CALL_KEYS = ("collective", "size_bytes", "algorithm", "n_ranks")


def collective_keys() -> list[str]:
    """The workload keys (and sweep axes) a collective scenario may give, besides
    ``topology.NAME`` axes.

    >>> collective_keys()[:5]
    ['collective', 'size_bytes', 'algorithm', 'n_ranks', 'model']
    """
    params = {
        p.name
        for fn in ALGORITHMS.values()
        for p in inspect.signature(fn).parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in PLAN_PARAMS
    }
    return [*_CALL_KEYS, *ENGINE_KEYS[1:], *sorted(params)]


def _check_collective_key(name: str, where: str, source: str) -> None:
    """Refuse a key no collective point reads (``[sweep] bogus``: every point would fail)."""
    valid = collective_keys()
    if name in valid or name == "kind":
        return
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(f"a collective point has no parameter {name!r}; {hint}valid: "
                      f"{', '.join(valid)}, or topology.NAME for a topology parameter",
                      source=source, field=where)  # fmt: skip


def default_plots(kind: str, axes: dict[str, list[Any]]) -> list[str]:
    """The plots that make sense for a workload kind and its sweep axes.

    >>> default_plots("collective", {"size_bytes": [1, 2], "n_ranks": [2, 4]})
    ['busbw_vs_size', 'scaling']
    >>> default_plots("ddp", {"bucket_bytes": [1, 2]})
    ['metric']
    >>> default_plots("training_step", {"tp": [2, 4]})
    ['metric', 'breakdown']
    """
    if kind == "training_step":
        return ["metric", "breakdown"] if axes else ["breakdown"]
    if kind != "collective":
        return ["metric"] if axes else []
    plots = []
    if len(axes.get("size_bytes", [])) > 1:
        plots.append("busbw_vs_size")
    if len(axes.get("n_ranks", [])) > 1:
        plots.append("scaling")
    if len(axes.get("algorithm", [])) > 1 and "size_bytes" in axes and "n_ranks" in axes:
        plots.append("crossover")
    return plots


#: Columns of every row that hold text, not numbers (a plot's y cannot be one of them).
TEXT_COLUMNS = ("collective", "algorithm", "protocol", "model", "type", "redop")
_SCALING_Y = ("busbw", "algbw", "time")


def check_outputs(scenario: Scenario) -> None:
    """Refuse, before any point runs, an ``[output]`` ``x``, ``y`` or ``series`` that names
    no column the rows will have, a ``y`` that is not numeric, or a scaling plot of
    another ``y`` than busbw, algbw or time (these used to fail after the whole sweep)."""
    from simcoll.scenarios.workloads import is_metric  # noqa: PLC0415 - pulls in SimPy

    kind = scenario.kind
    row_fields = {f.name for f in fields(Row)}

    def known(name: str) -> bool:
        if name in scenario.axes or name in row_fields:
            return True
        return is_metric("collective" if kind == "collective" else kind, name)

    plots = scenario.output.get("plots") or default_plots(kind, scenario.axes)
    y = scenario.output.get("y")
    keys = ["x", "series"] + (["y"] if y is not None and plots != ["scaling"] else [])
    for key in keys:
        name = scenario.output.get(key)
        if name is not None and not known(name):
            raise ConfigError(
                f"no column {name!r} in the results; valid: the sweep axes "
                f"({', '.join(scenario.axes) or 'none'}), the row columns "
                f"({', '.join(CSV_COLUMNS)}, ...) and the {kind} metrics",
                source=scenario.source,
                field=f"output.{key}",
            )
    axis = scenario.axes.get(str(y), [])
    if y in TEXT_COLUMNS or any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in axis
    ):
        raise ConfigError(f"{y!r} is not a numeric column", source=scenario.source,
                          field="output.y")  # fmt: skip
    scaling = str(y).removesuffix("_s").removesuffix("_bytes_per")
    if y is not None and "scaling" in plots and scaling not in _SCALING_Y:
        raise ConfigError(f"a scaling plot shows busbw, algbw or time, not {y!r}",
                          source=scenario.source, field="output.y")  # fmt: skip


def scenario_topology(scenario: Scenario, file: Path, overrides: dict[str, str]) -> nx.DiGraph[str]:
    """The topology of a point; errors that come from the scenario name its field.

    A missing topology file is the scenario's ``topology.file``; a bad override is its
    ``topology.set.NAME`` (or the ``topology.NAME`` axis of ``[sweep]``), not ``--set``.
    """
    overrides = dict(overrides)
    what_ifs = {name: overrides.pop(name) for name in WHAT_IFS if name in overrides}
    try:
        graph, reads = _topology(str(file), tuple(sorted(overrides.items())),
                                 _version(file, overrides))  # fmt: skip
        record_read(reads)
    except SimcollError as error:
        field = error.field or ""
        if field.startswith("--set "):
            name = field.removeprefix("--set ")
            axis = f"{TOPOLOGY_PREFIX}{name}"
            where = f"sweep.{axis}" if axis in scenario.axes else f"topology.set.{name}"
            raise ConfigError(
                f"{error.message} (in {file})", source=scenario.source, field=where
            ) from None
        if error.source == str(file) and not field and error.message == "no such file":
            swept = TOPOLOGY_FILE_AXIS in scenario.axes
            raise ConfigError(
                f"no such topology file {str(file)!r}",
                source=scenario.source,
                field="sweep.topology.file" if swept else "topology.file",
            ) from None
        raise
    for name, text in what_ifs.items():
        axis = f"{TOPOLOGY_PREFIX}{name}"
        where = f"sweep.{axis}" if axis in scenario.axes else f"topology.set.{name}"
        graph = _located(partial(apply_what_if, graph, name, text), scenario, where)
    return graph


#: Topology what-ifs a scenario may set or sweep as ``topology.degrade`` and
#: ``topology.fail`` (as ``--degrade`` and ``--fail``): comma-separated
#: ``TARGET=FACTOR`` items, or ``TARGET`` items; ``""`` is none.
WHAT_IFS = ("degrade", "fail")


def apply_what_if(graph: nx.DiGraph[str], name: str, text: str) -> nx.DiGraph[str]:
    """``graph`` with a scenario's ``degrade`` or ``fail`` value applied, item by item.

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    >>> apply_what_if(star, "degrade", "gpu0=0.5").edges["gpu0", "sw"]["bandwidth_bytes_per_s"]
    500000000.0
    """
    try:
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            if name == "fail":
                graph = fail(graph, item)
                continue
            graph = degrade(graph, *parse_degrade(item))
    except SimcollError as error:  # the scenario's field, not --degrade or --fail
        raise ConfigError(error.message) from None
    return graph


def _located(action: Callable[[], _T], scenario: Scenario, field: str) -> _T:
    """``action()``, its error (if any) located in the scenario file at ``field``."""
    try:
        return action()
    except SimcollError as error:
        if error.source:  # the topology file's own error already names its file and field
            raise
        raise error.located(source=scenario.source, field=field) from None
