"""Running a scenario's sweep: points in parallel, results kept as they come.

:func:`run_sweep` evaluates every point of a :class:`~simcoll.scenarios.scenario.Scenario`, in
worker processes of this machine (``workers``, default one per core) or on a Dask
cluster (``scheduler``, the address of a ``distributed`` scheduler: a ``LocalCluster``,
dask-jobqueue on Slurm, a Kubernetes deployment). Each finished point is appended to
``results.jsonl`` in the output folder and flushed to disk at once, so a sweep that is
killed loses only the points in flight; running it again into the same folder skips the
points already there. A point that fails is recorded with its error and the others go on.

The files it writes are those of :mod:`simcoll.scenarios.outdir`; one point is
:mod:`simcoll.scenarios.points`, and the estimate it checks first :mod:`simcoll.scenarios.cost`.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from simcoll.core.errors import ConfigError
from simcoll.scenarios.cost import DEFAULT_MAX_HOURS, check_cost
from simcoll.scenarios.outdir import RESULTS_JSONL, jsonable, prepare_out_dir
from simcoll.scenarios.points import PointResult, check_scenario, evaluate_point
from simcoll.scenarios.scenario import (
    Point,
    Scenario,
)

__all__ = ["RESULTS_JSONL", "SweepResult", "run_sweep"]


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


# -- one point ------------------------------------------------------------------------------


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
        done = prepare_out_dir(out, scenario, len(points), force=force)
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
                log.write(json.dumps(result.record(), default=jsonable) + "\n")
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
