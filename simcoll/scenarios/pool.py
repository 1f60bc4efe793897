"""A sweep's local worker processes: they die with the sweep, and a worker killed mid-point
fails that point only.

Points run in ``spawn`` worker processes (a forked child of a process with threads may
deadlock). Two things can go wrong that a process pool alone does not handle:

- ``kill -9`` of the sweep leaves its workers running, orphans computing for nobody.
  Each worker watches its parent (:func:`_watch_parent`) and exits once it is gone.
- A worker killed mid-point (the out-of-memory killer, a ``kill``) breaks the whole
  pool: every point in flight fails with ``BrokenProcessPool``. Workers report the
  point they start (:func:`_report_start`), so after a break the points that were in
  flight are known; each is run again alone in a fresh worker, and the one whose worker
  dies again is recorded as failed, with the reason. The rest go on in a fresh pool.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.queues import SimpleQueue

from simcoll.scenarios.points import PointResult
from simcoll.scenarios.scenario import Point, Scenario

__all__ = ["WORKER_DIED", "run_in_processes"]

Evaluate = Callable[..., PointResult]

#: The error of a point whose worker process died twice while running it.
WORKER_DIED = (
    "its worker process died while running it, twice (killed by a signal, e.g. by the "
    "out-of-memory killer); the other points went on"
)
#: The error of the points left when worker processes die before starting any.
WORKERS_FAILED = "the worker processes died before they could start this point"
#: How often (seconds) a worker checks that the sweep that started it is still alive.
_PARENT_POLL_S = 0.5
_started: SimpleQueue[int] | None = None  # in a worker: where it reports each point it starts


def run_in_processes(
    evaluate: Evaluate,
    scenario: Scenario,
    todo: list[Point],
    wanted: set[int],
    n_workers: int,
) -> Iterator[PointResult]:
    """``evaluate(scenario, point, timeline=...)`` for every point of ``todo`` on
    ``n_workers`` processes, results as they finish (see the module docstring)."""
    left = list(todo)
    while left:
        started: list[int] = []
        finished: set[int] = set()
        for result in _pool(evaluate, scenario, left, wanted, n_workers, started):
            finished.add(result.point.index)
            yield result
        if len(finished) == len(left):
            return
        suspects = [p for p in left if p.index in set(started) - finished]
        if not finished and not suspects:  # the workers died before any point started
            for point in left:
                yield PointResult(point, error=WORKERS_FAILED)
            return
        for point in suspects:  # alone, so that a death is this point's
            alone = list(_pool(evaluate, scenario, [point], wanted, 1, []))
            yield alone[0] if alone else PointResult(point, error=WORKER_DIED)
        done = finished | {p.index for p in suspects}
        left = [p for p in left if p.index not in done]


def _pool(  # noqa: PLR0917
    evaluate: Evaluate,
    scenario: Scenario,
    points: list[Point],
    wanted: set[int],
    n_workers: int,
    started: list[int],
) -> Iterator[PointResult]:
    """One pool's results until every point is done or a worker dies; ``started`` gets
    the points the workers began (when the pool broke, those in flight among them)."""
    context = multiprocessing.get_context("spawn")
    queue: SimpleQueue[int] = context.SimpleQueue()
    pool = cf.ProcessPoolExecutor(
        max_workers=min(n_workers, len(points)),
        mp_context=context,
        initializer=_init_worker,
        initargs=(os.getpid(), queue),
    )
    futures = [pool.submit(_report_start, evaluate, scenario, p, p.index in wanted) for p in points]
    try:
        for future in cf.as_completed(futures):
            try:
                result = future.result()
            except BrokenProcessPool:
                break
            yield result
    finally:
        for future in futures:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        while not queue.empty():
            started.append(queue.get())
        queue.close()


def _init_worker(parent_pid: int, queue: SimpleQueue[int]) -> None:  # pragma: no cover
    """In a new worker: keep the queue to report on, and watch the sweep that started it."""
    global _started  # noqa: PLW0603 - one per worker process
    _started = queue
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def _watch_parent(parent_pid: int) -> None:  # pragma: no cover - runs in a worker
    """Exit this worker as soon as its parent (the sweep) is gone, as after ``kill -9``:
    an orphan is re-parented, so ``getppid`` changes."""
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_POLL_S)
    os._exit(1)


def _report_start(
    evaluate: Evaluate, scenario: Scenario, point: Point, timeline: bool
) -> PointResult:  # pragma: no cover - runs in a worker
    """Say which point this worker starts, then evaluate it."""
    if _started is not None:
        _started.put(point.index)
    return evaluate(scenario, point, timeline=timeline)
