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

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from simcoll.core.errors import ConfigError, SimcollError
from simcoll.output.folder import OutputFolder
from simcoll.output.progress import Progress
from simcoll.scenarios.cost import DEFAULT_MAX_HOURS, check_cost, point_estimates
from simcoll.scenarios.outdir import (
    RESULTS_JSONL,
    jsonable,
    open_run_folder,
    prepare_out_dir,
    run_digest,
)
from simcoll.scenarios.points import PointResult, check_scenario, evaluate_point, timeline_points
from simcoll.scenarios.pool import run_in_processes
from simcoll.scenarios.scenario import (
    Point,
    Scenario,
)

__all__ = [
    "RESULTS_JSONL",
    "SweepResult",
    "check_scheduler_address",
    "check_sweep",
    "dask_client",
    "run_sweep",
]


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


def run_sweep(
    scenario: Scenario,
    out_dir: str | Path | OutputFolder | None = None,
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
        Where ``results.jsonl`` goes as points finish (None: keep results in memory only):
        a path, locked for the sweep, or an open :class:`~simcoll.output.folder.OutputFolder`
        (:func:`~simcoll.scenarios.outdir.open_run_folder`) that the caller keeps locked
        while it also writes the report. A folder already holding this scenario's results,
        from the same file contents, is resumed: finished points are not run again. One
        holding anything else is refused unless ``force``; simcoll never deletes or
        overwrites a file it did not write there (:mod:`simcoll.scenarios.outdir`).
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
    check_sweep(
        scenario, workers=workers, scheduler=scheduler, max_hours=max_hours, progress=progress
    )
    if out_dir is None:
        return _sweep(scenario, None, force, workers, scheduler, progress, on_point)
    if isinstance(out_dir, OutputFolder):
        return _sweep(scenario, out_dir, force, workers, scheduler, progress, on_point)
    with open_run_folder(out_dir) as folder:
        return _sweep(scenario, folder, force, workers, scheduler, progress, on_point)


def check_sweep(
    scenario: Scenario,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    max_hours: float | None = DEFAULT_MAX_HOURS,
    progress: IO[str] | None = None,
) -> None:
    """Refuse, before anything runs or is written, a sweep that would fail every point or
    exceed the limits (:func:`check_scenario`, :func:`check_cost`); print the estimate to
    ``progress``."""
    if scheduler is not None:
        check_scheduler_address(scheduler)
    check_scenario(scenario)
    n_workers = 1 if scheduler is None and workers == 1 else workers or os.cpu_count() or 1
    if max_hours is not None:
        line = check_cost(scenario, workers=n_workers, max_hours=max_hours)
        if progress is not None:
            progress.write(f"{line}\n")


#: The protocols of a Dask scheduler that another machine can reach.
SCHEDULER_PROTOCOLS = ("tcp", "tls")


def check_scheduler_address(address: object) -> None:
    """Refuse, in one line, an address that is not ``tcp://HOST:PORT`` (or ``tls://``,
    or ``HOST:PORT``); IPv6 hosts in brackets, ``tcp://[::1]:8786``.

    >>> check_scheduler_address("tcp://[::1")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: --scheduler: 'tcp://[::1' has an IPv6 host without its \
closing ']'; expected tcp://HOST:PORT
    """
    if not isinstance(address, str) or not address.strip():
        raise ConfigError(f"expected tcp://HOST:PORT, got {address!r}", field="--scheduler")
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in SCHEDULER_PROTOCOLS:
        raise ConfigError(
            f"{address!r} uses {scheme}://, which no other process reaches; expected "
            "tcp://HOST:PORT (or tls://)",
            field="--scheduler",
        )
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise ConfigError(
                f"{address!r} has an IPv6 host without its closing ']'; expected tcp://HOST:PORT",
                field="--scheduler",
            )
        host, port = rest[1:end], rest[end + 1 :].removeprefix(":")
    else:
        host, _, port = rest.rpartition(":")
    if not host or not host.isprintable() or any(c in host for c in " /@?#[]"):
        raise ConfigError(f"{address!r} names no host; expected tcp://HOST:PORT",
                          field="--scheduler")  # fmt: skip
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{address!r} has no port in 1..65535; expected tcp://HOST:PORT",
                          field="--scheduler")  # fmt: skip


def _sweep(  # noqa: PLR0917 - run_sweep's own arguments, passed on
    scenario: Scenario,
    folder: OutputFolder | None,
    force: bool,
    workers: int | None,
    scheduler: str | None,
    progress: IO[str] | None,
    on_point: Callable[[PointResult], None] | None,
) -> SweepResult:
    points = scenario.points()
    done: dict[str, PointResult] = {}
    digest = run_digest(scenario) if folder is not None else ""
    if folder is not None:
        done = prepare_out_dir(folder, scenario, len(points), force=force, digest=digest)
    wanted = timeline_points(scenario, points)
    todo = [p for p in points if p.key not in done]
    results: dict[int, PointResult] = {}
    for p in points:
        if p.key in done:
            results[p.index] = replace(done[p.key], point=p)
    weights = _weights(scenario, todo) if progress is not None else {}
    bar = Progress(progress, len(todo), total_weight=sum(weights.values()) or None)
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(folder.appending(RESULTS_JSONL)) if folder else None
        stack.callback(bar.close)
        for result in _execute(scenario, todo, wanted, workers=workers, scheduler=scheduler):
            results[result.point.index] = result
            if log is not None:
                record = {**result.record(), "digest": digest}
                log.write(json.dumps(record, default=jsonable) + "\n")
                log.flush()
                os.fsync(log.fileno())
            if on_point is not None:
                on_point(result)
            bar.advance(failed=not result.ok, weight=weights.get(result.point.index, 1.0))
    ordered = [results[p.index] for p in points if p.index in results]
    out = folder.path if folder is not None else None
    return SweepResult(scenario, ordered, out, skipped=len(points) - len(todo))


def _weights(scenario: Scenario, todo: list[Point]) -> dict[int, float]:
    """Each point's estimated seconds (:func:`simcoll.scenarios.cost.point_estimates`),
    so the bar moves by work done, not by points (issue 31: it sat at 1 of 11 for 10 s,
    then jumped); a point with no estimate weighs the mean of the others. Empty (count
    points) when nothing could be estimated."""
    try:
        known = point_estimates(scenario)
    except SimcollError:
        return {}
    wanted = [known[p.index] for p in todo if p.index in known]
    if not wanted or not sum(wanted):
        return {}
    mean = sum(wanted) / len(wanted)
    return {p.index: known.get(p.index, mean) for p in todo}


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
    yield from run_in_processes(evaluate_point, scenario, todo, wanted, n)


def dask_client(address: str) -> Any:
    """A Dask ``distributed`` client of the scheduler at ``address`` (``--scheduler``);
    a one-line error if Dask is not installed, the address is not one, or nothing answers
    there within 30 s."""
    try:
        from distributed import Client  # noqa: PLC0415 - optional dependency
    except ImportError:
        raise ConfigError(
            "--scheduler needs Dask: pip install 'simcoll[dask]'", field="--scheduler"
        ) from None
    check_scheduler_address(address)
    try:
        return Client(address, timeout=30)  # type: ignore[no-untyped-call]
    except (OSError, ValueError, TypeError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ConfigError(f"cannot reach {address}: {reason}", field="--scheduler") from None


def _on_dask(
    scenario: Scenario, todo: list[Point], wanted: set[int], address: str
) -> Iterator[PointResult]:
    client = dask_client(address)
    from distributed import as_completed  # noqa: PLC0415 - optional: dask_client checked it

    with client:
        futures = [
            client.submit(evaluate_point, scenario, p, timeline=p.index in wanted, pure=False)
            for p in todo
        ]
        for future in as_completed(futures):  # type: ignore[no-untyped-call]
            yield future.result()
