"""Running a scenario's sweep: points in parallel, results kept as they come.

:func:`run_sweep` evaluates every point of a :class:`~simcoll.scenarios.scenario.Scenario`, in
worker processes of this machine (``workers``, default one per core) or on a Dask
cluster (``scheduler``, the address of a ``distributed`` scheduler: a ``LocalCluster``,
dask-jobqueue on Slurm, a Kubernetes deployment). Each finished point is appended to
``results.jsonl`` in the output folder and flushed to disk at once, so a sweep that is
killed loses only the points in flight; running it again into the same folder skips the
points already there. A point that fails is recorded with its error and the others go on.

The files of a run (see :mod:`simcoll.scenarios.report` for the tables and plots made from them):

- ``sweep.json``: what ran (scenario file, its digest, number of points);
- ``results.jsonl``: one line per finished point (``status`` ok or error);
- ``results.csv`` / ``results.json``: the rows of all ok points, in point order;
- ``table.txt``, plots, and ``timelines/`` traces, as the scenario's ``[output]`` asks.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import IO, Any, TypeVar

import networkx as nx

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.units import format_bytes, format_time
from simcoll.models.estimate import BYTES_PER_TRANSFER, SECONDS_PER_TRANSFER, estimate_point
from simcoll.output.results import Row
from simcoll.prediction.pipeline import DEFAULT_ALGORITHM, candidates, predict
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

__all__ = ["PointResult", "SweepResult", "check_scenario", "evaluate_point", "run_sweep"]

_T = TypeVar("_T")
RESULTS_JSONL = "results.jsonl"
SWEEP_JSON = "sweep.json"
#: Files a run writes; a folder holding anything else needs ``force`` to be reused.
OWN_FILES = (
    SWEEP_JSON,
    RESULTS_JSONL,
    "results.csv",
    "results.json",
    "table.txt",
    "timelines",
)


@dataclass(frozen=True, eq=False)
class PointResult:
    """What one point gave: its rows (ok) or its error, and its timeline if asked for."""

    point: Point
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0
    timeline: Timeline | None = None
    skipped: str | None = None  # why the point does not apply (n_ranks > the GPUs there)

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
        }


@dataclass(eq=False)
class SweepResult:
    """Every point of a sweep: rows as plain dicts, failures with their errors."""

    scenario: Scenario
    points: list[PointResult]
    out_dir: Path | None = None
    skipped: int = 0  # points found finished in the output folder and not run again

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Rows of every ok point, in point order; each has the point's axis values."""
        return [row for p in self.points if p.ok for row in p.rows]

    @property
    def failures(self) -> list[PointResult]:
        """Points that failed."""
        return [p for p in self.points if not p.ok]

    def column(self, name: str) -> Any:
        """One column of :attr:`rows` as a numpy array (missing values as None)."""
        import numpy as np  # noqa: PLC0415 - numpy is a dependency; imported where used

        return np.array([row.get(name) for row in self.rows])

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame (needs pandas, which simcoll does not require)."""
        try:
            import pandas as pd  # noqa: PLC0415
        except ImportError:
            raise ConfigError("to_pandas needs pandas: pip install pandas") from None
        return pd.DataFrame(self.rows)


class _NotApplicable(Exception):  # noqa: N818 - not an error: the point does not apply
    """A point that does not apply to its topology (more ranks than GPUs)."""


# -- one point ------------------------------------------------------------------------------


@lru_cache(maxsize=16)
def _topology(file: str, overrides: tuple[tuple[str, str], ...]) -> nx.DiGraph[str]:
    return load(file, dict(overrides))


@lru_cache(maxsize=4)
def _calibration(file: str) -> Calibration:
    return read_calibration(file)


def evaluate_point(scenario: Scenario, point: Point, *, timeline: bool = False) -> PointResult:
    """Run one point. Errors on bad input become the point's error; nothing is raised."""
    started = time.perf_counter()
    try:
        rows, line = _evaluate(scenario, point, timeline=timeline)
    except _NotApplicable as reason:
        return PointResult(point, skipped=str(reason), elapsed_s=time.perf_counter() - started)
    except SimcollError as error:
        return PointResult(point, error=str(error), elapsed_s=time.perf_counter() - started)
    except Exception as error:
        where = traceback.extract_tb(error.__traceback__)[-1]
        text = f"{type(error).__name__}: {error} (at {where.filename}:{where.lineno})"
        return PointResult(point, error=text, elapsed_s=time.perf_counter() - started)
    for row in rows:
        for name, value in point.values.items():
            row.setdefault(name, value)
    return PointResult(point, rows, elapsed_s=time.perf_counter() - started, timeline=line)


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
    protocol = params.pop("protocol", None)
    if protocol in (None, "none"):
        protocol = None
    elif not isinstance(protocol, str):
        raise ConfigError(f"must be a protocol name, got {protocol!r}", field="workload.protocol")
    cal_file = params.pop("calibration", None)
    calibration = _calibration(str(cal_file)) if cal_file else None
    if kind == "collective" and not timeline:
        return _collective_rows(topology, params, model, protocol, calibration), None
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


def _collective_rows(
    topology: nx.DiGraph[str],
    params: dict[str, Any],
    model: str,
    protocol: str | None,
    calibration: Calibration | None,
) -> list[dict[str, Any]]:
    collective = params.pop("collective", None)
    if not isinstance(collective, str):
        raise ConfigError("must name a collective (a string)", field="workload.collective")
    size = params.pop("size_bytes", None)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ConfigError(
            f"must be a size in bytes (an integer or a string like '1 MiB'), got {size!r}",
            field="workload.size_bytes",
        )
    algorithm = str(params.pop("algorithm", DEFAULT_ALGORITHM))
    n_ranks = params.pop("n_ranks", None)
    if n_ranks is not None and (isinstance(n_ranks, bool) or not isinstance(n_ranks, int)):
        raise ConfigError(f"must be an integer, got {n_ranks!r}", field="workload.n_ranks")
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(
                f"an algorithm parameter must be an integer, got {value!r}",
                field=f"workload.{name}",
            )
    prediction = predict(
        topology,
        collective,
        [size],
        algorithm=algorithm,
        protocol=protocol,
        model=model,
        n_ranks=n_ranks,
        params=params or None,
        calibration=calibration,
    )
    return [_row_dict(row) for row in prediction.rows]


def _row_dict(row: Row) -> dict[str, Any]:
    from dataclasses import asdict  # noqa: PLC0415

    return asdict(row)


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
    else:
        from simcoll.scenarios.workloads import workload_params  # noqa: PLC0415 - pulls in SimPy

        allowed = _located(lambda: workload_params(scenario.kind), scenario, "workload.kind")
        for name, where in names.items():
            if name not in allowed and name not in ENGINE_KEYS:
                raise ConfigError(
                    f"{scenario.kind} has no parameter {name!r}; valid: "
                    f"{', '.join([*allowed, *ENGINE_KEYS[1:]])}",
                    source=scenario.source,
                    field=where,
                )
    if TOPOLOGY_FILE_AXIS not in scenario.axes:
        scenario_topology(scenario, scenario.topology_file, dict(scenario.topology_set))


def scenario_topology(scenario: Scenario, file: Path, overrides: dict[str, str]) -> nx.DiGraph[str]:
    """The topology of a point; errors that come from the scenario name its field.

    A missing topology file is the scenario's ``topology.file``; a bad override is its
    ``topology.set.NAME`` (or the ``topology.NAME`` axis of ``[sweep]``), not ``--set``.
    """
    try:
        return _topology(str(file), tuple(sorted(overrides.items())))
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


def _located(action: Callable[[], _T], scenario: Scenario, field: str) -> _T:
    """``action()``, its error (if any) located in the scenario file at ``field``."""
    try:
        return action()
    except SimcollError as error:
        if error.source:  # the topology file's own error already names its file and field
            raise
        raise error.located(source=scenario.source, field=field) from None


#: A sweep whose estimate is longer than this is refused unless the caller raises it.
DEFAULT_MAX_HOURS = 12.0


def estimate_sweep(scenario: Scenario) -> tuple[float, int, int]:
    """``(seconds, peak_bytes, n_estimated)``: summed simulation seconds over the points
    it can estimate (collective points; see :mod:`simcoll.models.estimate`), the largest peak
    memory of one point, and how many points were estimated."""
    seconds, peak, counted = 0.0, 0, 0
    for point in scenario.points():
        file, overrides, params = scenario.setup(point)
        if scenario.kind != "collective":
            continue
        try:
            c = Collective.parse(str(params.get("collective")))
            n = params.get("n_ranks") or len(
                gpu_nodes(scenario_topology(scenario, file, overrides))
            )
            names = candidates(c, str(params.get("algorithm", DEFAULT_ALGORITHM)))
            size, chunks = params.get("size_bytes"), params.get("n_chunks")
            channels = params.get("n_channels", 1)
            if not all(isinstance(v, int) for v in (n, size, channels)):
                continue
        except SimcollError:
            continue  # the point will report it
        n_protocols = 3 if params.get("protocol") == "auto" else 1
        for name in names:
            e = estimate_point(
                c,
                name,
                n_ranks=int(n),  # type: ignore[arg-type]
                size_bytes=int(size),  # type: ignore[arg-type]
                n_chunks=chunks if isinstance(chunks, int) else None,
                n_channels=int(channels),  # type: ignore[arg-type]
            )
            seconds += e.seconds * n_protocols
            peak = max(peak, e.peak_bytes)
        counted += 1
    return seconds, peak, counted


def check_cost(
    scenario: Scenario,
    *,
    workers: int,
    max_hours: float = DEFAULT_MAX_HOURS,
    memory_bytes: int | None = None,
) -> str:
    """Refuse a sweep whose estimate exceeds ``max_hours`` on ``workers`` processes, or
    whose largest point would not fit in ``memory_bytes`` (default: this machine's RAM,
    shared by the workers); otherwise return the estimate as a line of text."""
    seconds, peak, counted = estimate_sweep(scenario)
    wall_s = seconds / max(1, workers)
    memory = memory_bytes if memory_bytes is not None else _ram_bytes()
    n_points = len(scenario.points())
    if wall_s > max_hours * 3600:
        raise ConfigError(
            f"this sweep would take about {_duration(wall_s)} on {workers} worker(s) "
            f"({n_points} points, estimated from their transfers at "
            f"{SECONDS_PER_TRANSFER * 1e6:.0f} us each), over the {max_hours:g} h limit; sweep "
            "fewer or smaller points, or raise --max-hours",
            source=scenario.source,
        )
    if memory and peak * min(max(1, workers), n_points) > memory:
        raise ConfigError(
            f"its largest point would need about {format_bytes(peak)} of memory per worker "
            f"({peak // BYTES_PER_TRANSFER} transfers), more than the {format_bytes(memory)} "
            f"this machine has for {workers} worker(s); simulate fewer ranks, chunks or "
            "workers",
            source=scenario.source,
        )
    if not counted:
        return "no estimate for workload points"
    return (
        f"estimated about {_duration(wall_s)} on {workers} worker(s) for the {counted} "
        "collective point(s)"
    )


def _duration(seconds: float) -> str:
    """A long duration in the unit that reads best.

    >>> _duration(2013.0), _duration(9000.0), _duration(3e5), _duration(0.5)
    ('33.5 min', '2.5 h', '3.47 days', '500 ms')
    """
    for unit_s, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if seconds >= unit_s:
            return f"{seconds / unit_s:.3g} {unit}"
    return format_time(seconds)


def _ram_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


# -- many points ----------------------------------------------------------------------------


def run_sweep(
    scenario: Scenario,
    out_dir: str | Path | None = None,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    force: bool = False,
    progress: IO[str] | None = None,
    on_point: Callable[[PointResult], None] | None = None,
    max_hours: float | None = DEFAULT_MAX_HOURS,
) -> SweepResult:
    """Evaluate every point of ``scenario`` and return the results.

    Parameters
    ----------
    out_dir
        Where ``results.jsonl`` goes as points finish (None: keep results in memory only).
        A folder already holding this scenario's results is resumed: finished points are
        not run again. One holding anything else is refused unless ``force``.
    workers
        Local worker processes (default: one per core; 1 runs in this process).
    scheduler
        Address of a Dask ``distributed`` scheduler (``tcp://host:8786``); the points run
        on its workers instead of local processes.
    progress
        A stream for the progress bar (e.g. ``sys.stderr``); None for silence.
    on_point
        Called in this process with each point as it finishes (after it is saved).
    max_hours
        Refuse, before starting, a sweep estimated to take longer (:func:`check_cost`);
        None skips the estimate.
    """
    check_scenario(scenario)
    n_workers = 1 if scheduler is None and workers == 1 else workers or os.cpu_count() or 1
    if max_hours is not None:
        line = check_cost(scenario, workers=n_workers, max_hours=max_hours)
        if progress is not None:
            progress.write(f"{line}\n")
    points = scenario.points()
    done: dict[str, PointResult] = {}
    log: IO[str] | None = None
    if out_dir is not None:
        out = Path(out_dir)
        done = _prepare(out, scenario, len(points), force=force)
        log = (out / RESULTS_JSONL).open("a", encoding="utf-8")
    wanted = _timeline_points(scenario, points)
    todo = [p for p in points if p.key not in done]
    results: dict[int, PointResult] = {}
    for p in points:
        if p.key in done:
            results[p.index] = replace(done[p.key], point=p)
    bar = _Progress(progress, len(todo))
    try:
        for result in _execute(scenario, todo, wanted, workers=workers, scheduler=scheduler):
            results[result.point.index] = result
            if log is not None:
                log.write(json.dumps(result.record(), default=_jsonable) + "\n")
                log.flush()
                os.fsync(log.fileno())
            if on_point is not None:
                on_point(result)
            bar.advance(result)
    finally:
        bar.close()
        if log is not None:
            log.close()
    ordered = [results[p.index] for p in points if p.index in results]
    return SweepResult(
        scenario, ordered, Path(out_dir) if out_dir else None, skipped=len(points) - len(todo)
    )


def _timeline_points(scenario: Scenario, points: list[Point]) -> set[int]:
    choice = scenario.output.get("timelines", "first")
    if scenario.kind == "collective" and "timelines" not in scenario.output:
        choice = "none"
    if choice == "all":
        return {p.index for p in points}
    return {points[0].index} if choice == "first" and points else set()


def _execute(
    scenario: Scenario,
    todo: list[Point],
    wanted: set[int],
    *,
    workers: int | None,
    scheduler: str | None,
) -> Iterator[PointResult]:
    if not todo:
        return
    if scheduler is not None:
        yield from _on_dask(scenario, todo, wanted, scheduler)
        return
    n = min(workers or os.cpu_count() or 1, len(todo))
    if n <= 1:
        for p in todo:
            yield evaluate_point(scenario, p, timeline=p.index in wanted)
        return
    # spawn, not fork: a forked child of a process with threads may deadlock.
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=context) as pool:
        futures = [
            pool.submit(evaluate_point, scenario, p, timeline=p.index in wanted) for p in todo
        ]
        try:
            for future in cf.as_completed(futures):
                yield future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _on_dask(
    scenario: Scenario, todo: list[Point], wanted: set[int], address: str
) -> Iterator[PointResult]:
    try:
        from distributed import Client, as_completed  # noqa: PLC0415 - optional dependency
    except ImportError:
        raise ConfigError(
            "--scheduler needs Dask: pip install 'simcoll[dask]'", field="--scheduler"
        ) from None
    try:
        client = Client(address, timeout=30)  # type: ignore[no-untyped-call]
    except OSError as error:
        raise ConfigError(f"cannot reach {address}: {error}", field="--scheduler") from None
    with client:
        futures = [
            client.submit(evaluate_point, scenario, p, timeline=p.index in wanted, pure=False)
            for p in todo
        ]
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            yield future.result()


def _prepare(
    out: Path, scenario: Scenario, n_points: int, *, force: bool
) -> dict[str, PointResult]:
    """Make ``out`` ready and return the points it already holds (ok ones only)."""
    marker = out / SWEEP_JSON
    info = {"scenario": scenario.source, "digest": scenario.digest, "n_points": n_points}
    if out.exists() and any(out.iterdir()):
        previous = _read_json(marker)
        same = previous is not None and previous.get("digest") == scenario.digest
        if not same and not force:
            what = "another scenario's results" if previous else "other files"
            raise ConfigError(
                f"holds {what}; choose another --out or pass --force to replace them",
                source=str(out),
            )
        if not same:
            _clear(out)
    out.mkdir(parents=True, exist_ok=True)
    _write_atomic(marker, json.dumps(info, indent=2) + "\n")
    return _finished(out / RESULTS_JSONL, scenario)


def _clear(out: Path) -> None:
    """Remove what an earlier run wrote (``--force``); other files stay."""
    import shutil  # noqa: PLC0415

    for name in OWN_FILES:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for plot in out.glob("*.png"):
        plot.unlink()


def _finished(path: Path, scenario: Scenario) -> dict[str, PointResult]:
    """Ok points already in ``results.jsonl`` (a torn last line, from a kill, is ignored)."""
    if not path.exists():
        return {}
    keys = {p.key: p for p in scenario.points()}
    done: dict[str, PointResult] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        point = keys.get(record.get("key"))
        status = record.get("status")
        if point is None or status not in ("ok", "skipped"):
            continue
        skipped = record.get("error") if status == "skipped" else None
        done[point.key] = PointResult(
            point, record["rows"], elapsed_s=record["elapsed_s"], skipped=skipped
        )
    return done


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class _Progress:
    """A one-line progress bar on a terminal; a line per tenth of the points otherwise."""

    def __init__(self, stream: IO[str] | None, total: int) -> None:
        self.stream = stream
        self.total = total
        self.count = 0
        self.failed = 0
        self.started = time.perf_counter()
        self.tty = bool(stream is not None and stream.isatty())
        self.shown_tenth = -1

    def advance(self, result: PointResult) -> None:
        self.count += 1
        self.failed += not result.ok
        if self.stream is None or not self.total:
            return
        tenth = 10 * self.count // self.total
        if not self.tty and tenth == self.shown_tenth:
            return
        self.shown_tenth = tenth
        filled = 30 * self.count // self.total
        elapsed = time.perf_counter() - self.started
        left = elapsed / self.count * (self.total - self.count)
        failed = f", {self.failed} failed" if self.failed else ""
        text = (
            f"[{'#' * filled}{'.' * (30 - filled)}] {self.count}/{self.total} points"
            f"{failed}, {elapsed:.1f} s elapsed, ~{left:.0f} s left"
        )
        self.stream.write(("\r" + text) if self.tty else text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.tty and self.count:
            self.stream.write("\n")
            self.stream.flush()


def iter_records(path: str | Path) -> Iterable[dict[str, Any]]:
    """The records of a ``results.jsonl`` (for tools that read a sweep's progress)."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue
