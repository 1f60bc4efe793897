"""Least-squares calibration: fit a :class:`~simcoll.topology.calibration.Calibration`
to measured runs.

The model is simcoll itself: for a parameter vector, every measured point (collective,
ranks, size) is simulated with :func:`simcoll.prediction.predict` and the residual is
``log(simulated / measured)``, so a 10 % miss at 4 KiB weighs what it weighs at 1 GiB.
The variables are ``1 / efficiency`` and the latencies in seconds, in which a collective
without shared links is exactly linear (time = latencies + bytes / (efficiency x
bandwidth)), kept to physical values (efficiency in [0.05, 1]: no transfer carries more
data than its wire; times in [0, 1] s). A fit finds which parameters the data can tell
apart (below), scans each fitted time over :data:`SCAN_S` for a start, then descends
(:mod:`simcoll.calibrate.descent`: the least squares of the log errors on the times'
slopes, a simulation per variable and one per trial step). Fitted values left on a bound
are named (:func:`at_bounds`): the data pushed them past what is physical.

Speed: a fit takes tens of passes over the points (the 4 x 8 H100 table's, 7
parameters: 58), so :class:`_Evaluator` keeps every simulated time by what it depends
on. The launch cost is added, never simulated (it only delays the call); with
``protocol="auto"`` each protocol runs on its own and the fastest is kept per size, as
``predict`` does, so moving one protocol's factor re-simulates that protocol only; the
slopes are taken only over the groups asked for; and what one set of slopes or one scan
needs is simulated in worker processes forked once per fit, one per core (the same
numbers, sooner).

Which parameters are fitted is decided by the data, not by hand: a parameter enters only
if its Jacobian column adds rank. From point-to-point runs over routes of one length, a
per-link latency and a per-transfer step latency move every time alike; only the first
(link latency) is fitted and the other is reported as not identifiable and left at its
uncalibrated value (0). Parameters of link classes no measured route crosses have zero
columns and drop out the same way.

>>> from simcoll.topology import switch_star
>>> from simcoll.topology import LinkKind, NodeKind
>>> star = switch_star(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6,
...                    link_kind=LinkKind.ETHERNET, switch_kind=NodeKind.SWITCH)
>>> # "measured": 80 % of the wire and 20 us per link (closed form, 2 links per route)
>>> points = [FitPoint("sendrecv", 2, s, 2 * 20e-6 + s / 0.8e9) for s in (1000, 10**5, 10**7)]
>>> result = fit(star, points, recipe=lambda c, n, s: "direct")
>>> {k: round(v, 9) for k, v in result.calibration.values.items()}
{'efficiency.net': 0.8, 'link_latency_s.ethernet': 2e-05}
>>> result.not_identifiable
['step_latency_s.net', 'launch_s']
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from simcoll.calibrate.descent import PLANNED_STEPS, Problem, descend
from simcoll.calibrate.gloo import Recipe
from simcoll.calibrate.measurements import MAX_TIME_S
from simcoll.calibrate.residuals import time_error
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.protocols import link_class
from simcoll.plan.placement import place_ranks
from simcoll.plan.tuning import NcclKnobs
from simcoll.prediction import predict
from simcoll.prediction.call import Machine, call_setup
from simcoll.prediction.call_cost import CallCosts, expected_s
from simcoll.topology.calibration import (
    LINK_CLASSES,
    MAX_EFFICIENCY,
    MAX_PARAM_S,
    PROTOCOL_NAMES,
    Calibration,
)

__all__ = [
    "ALL_GROUPS",
    "PARAMETER_GROUPS",
    "FitPoint",
    "FitResult",
    "Model",
    "at_bounds",
    "estimate_points",
    "fit",
    "simulate_points",
    "simulations",
]

_TIME_SCALE_S = 1e-6  # scale of a time variable that starts at 0
_STEP = 1e-3  # the identification's difference step, a fraction of the variable's scale
_MAX_JOBS = 8  # worker processes of a fit, at most
_AT_BOUND = 1e-9  # how close to a bound a fitted value is on it, relative to the bound
#: The smallest efficiency a fit may reach: 1/20 of the wire.
MIN_FITTED_EFFICIENCY = 0.05
#: What is fitted by default, in priority order.
PARAMETER_GROUPS = ("efficiency", "link_latency_s", "step_latency_s", "launch_s")
#: Groups that can be asked for (``protocol_efficiency`` only means something with NCCL's
#: protocols, so it is not fitted unless asked; ``floor_s`` is measured from the 0-byte
#: calls, not fitted, and only where asked).
ALL_GROUPS = (*PARAMETER_GROUPS, "protocol_efficiency", "floor_s")
_EFFICIENCIES = ("efficiency.", "protocol_efficiency.")


@dataclass(frozen=True)
class FitPoint:
    """One measured time: what the fit reproduces."""

    collective: str
    n_ranks: int
    size_bytes: int
    time_s: float
    source: str = ""
    #: nccl-tests' in-place half: the call copies nothing from input to output
    #: (:meth:`~simcoll.core.collectives.Collective.local_copy_bytes`).
    in_place: bool = False
    #: Where the ranks ran (:func:`~simcoll.plan.placement.place_ranks`): ``linear``, or
    #: ``per-server:K`` for a run of K ranks on each server.
    placement: str = "linear"


@dataclass(frozen=True)
class FitResult:
    """The fitted parameters, what could not be fitted, and the residual per point."""

    calibration: Calibration
    fitted: list[str]
    not_identifiable: list[str]
    simulated_s: list[float]
    points: list[FitPoint]
    iterations: int
    history: list[float] = field(default_factory=list)
    #: Fitted values on a bound of the fit, in words (:func:`at_bounds`).
    at_bounds: list[str] = field(default_factory=list)

    @property
    def relative_errors(self) -> list[float]:
        """``simulated / measured - 1`` per point
        (:func:`simcoll.calibrate.residuals.time_error`)."""
        return [time_error(p.time_s, s) for s, p in zip(self.simulated_s, self.points, strict=True)]

    def residual_rows(self) -> list[dict[str, Any]]:
        """One dict per point, for the params file."""
        return [
            {
                "source": p.source,
                "collective": p.collective,
                "n_ranks": p.n_ranks,
                "size_bytes": p.size_bytes,
                "measured_s": p.time_s,
                "simulated_s": s,
                "error": time_error(p.time_s, s),
            }
            for p, s in zip(self.points, self.simulated_s, strict=True)
        ]


#: What to simulate for a measured point: ``(collective, n_ranks, size_bytes)`` to a
#: :class:`~simcoll.calibrate.gloo.Recipe` or just an algorithm name.
Model = Callable[[str, int, int], "Recipe | str"]


def simulate_points(
    topology: nx.DiGraph[str],
    points: Sequence[FitPoint],
    calibration: Calibration | None,
    *,
    recipe: Model,
    protocol: str | None = None,
    model: str = "flow",
    progress: Callable[[], None] | None = None,
    knobs: NcclKnobs | None = None,
) -> list[float]:
    """Simulated seconds for every point (one ``predict`` call per recipe and n);
    NaN for a size too small to cut into the algorithm's pieces (4 B over 8 ranks).
    ``progress`` is called once per distinct size simulated (:func:`simulations`);
    ``knobs`` are the NCCL settings the runs were made with (``--nccl``)."""
    out = [math.nan] * len(points)
    for (collective, n_ranks, chosen, in_place, placement), members in _groups(
        points, recipe
    ).items():
        sizes = sorted({points[i].size_bytes for i in members})
        rows = predict(
            topology, collective, sizes, algorithm=chosen.algorithm, protocol=protocol,
            model=model, n_ranks=n_ranks, params=dict(chosen.params) or None,
            calibration=calibration, skip_too_small=True, in_place=in_place,
            progress=progress, knobs=knobs, placement=placement,
        ).rows  # fmt: skip
        by_size = {row.size_bytes: row.time_s for row in rows}
        for i in members:
            out[i] = by_size.get(points[i].size_bytes, math.nan)
    return out


def _groups(
    points: Sequence[FitPoint], recipe: Model
) -> dict[tuple[str, int, Recipe, bool, str], list[int]]:
    """The points each ``predict`` call of :func:`simulate_points` covers."""
    groups: dict[tuple[str, int, Recipe, bool, str], list[int]] = defaultdict(list)
    for i, p in enumerate(points):
        found = recipe(p.collective, p.n_ranks, p.size_bytes)
        chosen = Recipe(found) if isinstance(found, str) else found
        key = (chosen.simulate_as or p.collective, p.n_ranks, chosen, p.in_place, p.placement)
        groups[key].append(i)
    return groups


def simulations(points: Sequence[FitPoint], recipe: Model) -> int:
    """How many calls :func:`simulate_points` decides: one per distinct size of a group."""
    return sum(
        len({points[i].size_bytes for i in members}) for members in _groups(points, recipe).values()
    )


def estimate_points(
    topology: nx.DiGraph[str],
    points: Sequence[FitPoint],
    calibration: Calibration | None,
    *,
    recipe: Model,
    protocol: str | None = None,
    model: str = "flow",
    knobs: NcclKnobs | None = None,
) -> float:
    """Wall seconds :func:`simulate_points` is expected to take, by the path each call
    will run (:func:`simcoll.prediction.call_cost.call_estimates`), without simulating."""
    machine = Machine.of(topology, calibration)
    costs = CallCosts()
    seconds = 0.0
    for (collective, n_ranks, chosen, _, placement), members in _groups(points, recipe).items():
        try:
            gpus = place_ranks(machine.topology, n_ranks, placement)
            setup = call_setup(machine, collective, gpus,
                               algorithm=chosen.algorithm, protocol=protocol, model=model,
                               params=dict(chosen.params) or None, knobs=knobs,
                               placement=placement)  # fmt: skip
        except SimcollError:
            continue  # the simulation says why
        # one size that cannot run (4 B over 8 ranks) costs nothing, not the rest
        seconds += expected_s(setup, sorted({points[i].size_bytes for i in members}), costs)
    return seconds


class _Evaluator:
    """:func:`simulate_points` for one fit, memoised (see the module docstring), and the
    count of its simulations against the count it expects (:meth:`expect`)."""

    def __init__(
        self,
        topology: nx.DiGraph[str],
        points: Sequence[FitPoint],
        *,
        recipe: Model,
        protocol: str | None,
        model: str,
        floor_s: float = 0.0,
        progress: Callable[[int, int], None] | None = None,
        held: dict[str, float] | None = None,
        knobs: NcclKnobs | None = None,
    ) -> None:
        self.topology, self.points, self.recipe, self.model = topology, points, recipe, model
        self.knobs = knobs
        self.floor_s = floor_s
        self.progress = progress
        self.held = held or {}
        # With NCCL's own choice of protocol per size (algorithm "nccl"), one run picks
        # it; otherwise each protocol runs alone and the fastest is kept per size.
        by_nccl = protocol == "auto" and all(
            _algorithm(recipe(p.collective, p.n_ranks, p.size_bytes)) == "nccl" for p in points
        )
        self.protocols: list[str | None] = (
            list(PROTOCOL_NAMES) if protocol == "auto" and not by_nccl else [protocol]
        )
        self._memo: dict[tuple[str | None, tuple[tuple[str, float], ...]], list[float]] = {}
        self.simulations = 0
        self.expected = 0
        self.jobs = _jobs()
        self._pool: Any = None

    def expect(self, passes: int) -> None:
        """About ``passes`` more sets of values are still to be simulated (each a pass per
        protocol): what progress reports as the total, revised as the fit goes on."""
        self.expected = self.simulations + passes * len(self.protocols)

    def raw(self, values: dict[str, float]) -> np.ndarray:
        """Seconds per point with these parameter values (names as :func:`_parameters`),
        over the held ones, before the launch cost and the floor; NaN where none ran."""
        values = {**self.held, **values}
        best = np.full(len(self.points), math.inf)
        for name in self.protocols:
            times = np.asarray(self._protocol_times(name, values), dtype=float)
            best = np.where(np.isfinite(times), np.minimum(best, times), best)
        return np.where(np.isfinite(best), best, math.nan)

    def __call__(self, values: dict[str, float]) -> list[float]:
        """Seconds per point with these parameter values, over the held ones: the launch
        cost added and the floor kept; NaN where none ran."""
        launch_s = {**self.held, **values}.get("launch_s", 0.0)
        return [float(t) for t in np.maximum(self.raw(values) + launch_s, self.floor_s)]

    def prefetch(self, batch: Sequence[dict[str, float]]) -> None:
        """Simulate what ``batch`` will ask for and the memo lacks, in parallel where
        this machine has cores and forks (the results are the same numbers)."""
        tasks = []
        for values in batch:
            for name in self.protocols:
                key = self._key(name, {**self.held, **values})
                if key not in self._memo and key not in tasks:
                    tasks.append(key)
        if len(tasks) < 2 or self.jobs < 2:
            return
        # in order, each as soon as it and those before it are done: progress ticks
        for key, found in zip(tasks, self._workers().imap(_simulate_forked, tasks), strict=True):
            self._memo[key] = found
            self._simulated()

    def _workers(self) -> Any:
        """The fit's worker processes, forked once from this evaluator (each fork of a
        large process copies what it touches: one pool for the fit, not one per batch)."""
        if self._pool is None:
            global _FORKED  # noqa: PLW0603 - what forked workers inherit
            _FORKED = self
            gc.freeze()  # the collector leaves the inherited objects alone in the workers
            try:
                self._pool = multiprocessing.get_context("fork").Pool(self.jobs)
            finally:
                gc.unfreeze()
                _FORKED = None
        return self._pool

    def __enter__(self) -> _Evaluator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """End the worker processes, if any were started."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def _simulated(self) -> None:
        self.simulations += 1
        if self.progress is not None:
            self.progress(self.simulations, max(self.expected, self.simulations))

    def _key(
        self, name: str | None, values: dict[str, float]
    ) -> tuple[str | None, tuple[tuple[str, float], ...]]:
        other = {f"protocol_efficiency.{p}" for p in PROTOCOL_NAMES if name not in (p, "auto")}
        relevant = {k: v for k, v in values.items() if k != "launch_s" and k not in other}
        return name, tuple(sorted(relevant.items()))

    def _protocol_times(self, name: str | None, values: dict[str, float]) -> list[float]:
        key = self._key(name, values)
        found = self._memo.get(key)
        if found is None:
            found = self._simulate(key)
            self._memo[key] = found
            self._simulated()
        return found

    def _simulate(self, key: tuple[str | None, tuple[tuple[str, float], ...]]) -> list[float]:
        name, relevant = key
        calibration = Calibration.from_values(dict(relevant)) if relevant else None
        try:
            return simulate_points(
                self.topology, self.points, calibration,
                recipe=self.recipe, protocol=name, model=self.model, knobs=self.knobs,
            )  # fmt: skip
        except ConfigError:
            if len(self.protocols) == 1:
                raise
            return [math.nan] * len(self.points)  # this protocol cannot run these


def _algorithm(found: Recipe | str) -> str:
    return found if isinstance(found, str) else found.algorithm


_FORKED: _Evaluator | None = None


def _simulate_forked(key: tuple[str | None, tuple[tuple[str, float], ...]]) -> list[float]:
    """One simulation in a forked worker, on the evaluator it inherited."""
    assert _FORKED is not None
    return _FORKED._simulate(key)


def _jobs() -> int:
    """Worker processes for a fit: this process's cores, where processes can fork."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, _MAX_JOBS))


def fit(
    topology: nx.DiGraph[str],
    points: Sequence[FitPoint],
    *,
    recipe: Model,
    protocol: str | None = None,
    model: str = "flow",
    parameters: Sequence[str] = PARAMETER_GROUPS,
    progress: Callable[[int, int], None] | None = None,
    held: Calibration | None = None,
    knobs: NcclKnobs | None = None,
) -> FitResult:
    """Fit efficiency, link latency and step latency per class/kind to ``points``.

    Parameters
    ----------
    recipe
        What models each measured call as the library ran it: an algorithm name (e.g.
        ``lambda c, n, s: "ring"``) or a :class:`~simcoll.calibrate.gloo.Recipe` (gloo's, from
        :func:`simcoll.calibrate.gloo.recipe_for`).
    protocol
        Base protocol the calibration refines (``None``: the bare links, as for gloo).
    parameters
        The parameter groups that may be fitted, in priority order (a subset of
        :data:`PARAMETER_GROUPS`). Where two move the times alike (a link latency and a
        launch cost, from one collective's runs), the earlier one is fitted: the order is
        the modeller's statement of which cause is real.
    progress
        Called after each pass over the points (one simulation of every point with one
        set of parameter values and one protocol) with the passes done and the passes
        expected in all: an estimate, revised as the fit goes (how many steps the
        descent takes is known only when it ends).
    held
        Parameters held at their values, not fitted (the hardware a params file builds
        on, its ``base``); the result's calibration holds only what was fitted.
    knobs
        The NCCL settings the runs were made with (``NCCL_MIN_CTAS``...), simulated as
        ``simcoll predict --nccl`` does.

    Raises
    ------
    ConfigError
        With no points, a point of zero time or size, or when nothing is identifiable.
    """
    for p in points:
        _check_time(p)
    floor_s = _floor_s(points) if "floor_s" in parameters else 0.0
    points = [p for p in points if p.size_bytes > 0]
    if not points:
        raise ConfigError("nothing to fit: no measured point with a size above 0 bytes")
    for group in parameters:
        if group.split(".")[0] not in ALL_GROUPS:
            valid = ", ".join(ALL_GROUPS)
            raise ConfigError(f"unknown parameter group {group!r}; valid: {valid} (or one "
                              "parameter of a group: efficiency.net)")  # fmt: skip
    names, start, scale = _parameters(topology)
    held_values = dict(held.values) if held is not None else {}
    held_values.pop("floor_s", None)  # measured from these points' 0-byte calls, or none
    order = [i for group in parameters for i, n in enumerate(names)
             if group in (n, n.split(".")[0]) and n not in held_values]  # fmt: skip
    with _Evaluator(topology, points, recipe=recipe, protocol=protocol, model=model,
                    floor_s=floor_s, progress=progress, held=held_values,
                    knobs=knobs) as evaluate:  # fmt: skip
        evaluate.expect(1 + len(order) + _planned(names, order))
        # the sizes too small to cut (NaN), at the start's values: the identification's base
        kept = np.isfinite(evaluate.raw({names[i]: _value(names[i], start[i]) for i in order}))
        points = [p for p, k in zip(points, kept.tolist(), strict=True) if k]
        if not points:
            raise ConfigError("nothing to fit: every size is too small to cut for its algorithm")
        measured = np.log([p.time_s for p in points])

        def values_of(theta: np.ndarray, active: list[int]) -> dict[str, float]:
            return {names[i]: _value(names[i], theta[i]) for i in active}

        def calibration_of(theta: np.ndarray, active: list[int]) -> Calibration:
            return Calibration.from_values({**values_of(theta, active), "floor_s": floor_s})

        def simulated_of(theta: np.ndarray, active: list[int]) -> list[float]:
            return [float(t) for t in np.asarray(evaluate(values_of(theta, active)))[kept]]

        def residual(theta: np.ndarray, active: list[int]) -> np.ndarray:
            return np.log(simulated_of(theta, active)) - measured

        def prefetch(thetas: list[np.ndarray], active: list[int]) -> None:
            evaluate.prefetch([values_of(theta, active) for theta in thetas])

        # Which parameters the data can tell apart is judged without the floor: at the start
        # (every efficiency 1) small calls run under it, and would hide what moves them.
        evaluate.floor_s = 0.0
        base = residual(start, order)
        jacobian = _jacobian(residual, start, base, order, order, scale, prefetch)
        evaluate.floor_s = floor_s
        active = _identifiable(jacobian, order)
        if not active:
            raise ConfigError("no parameter changes the simulated times of these points")
        evaluate.expect(_planned(names, active))
        n_efficiency = sum(name.startswith(_EFFICIENCIES) for name in names)
        after_scan = _planned(names, active, scan=False)
        start = _scanned(residual, start, active, names, prefetch,
                         lambda left: evaluate.expect(left + after_scan))  # fmt: skip
        launch = names.index("launch_s")
        lower, upper = _bounds(len(names), n_efficiency)
        problem = Problem(
            lambda theta: np.asarray(evaluate.raw(values_of(theta, active)))[kept],
            measured,
            lower=lower,
            upper=upper,
            scale=scale,
            active=active,
            added=launch if launch in active else None,
            added_s=held_values.get("launch_s", 0.0),
            floor_s=floor_s,
            prefetch=lambda thetas: prefetch(thetas, active),
            expect=evaluate.expect,
        )
        theta, history = descend(problem, start)
        calibration = calibration_of(theta, active)
        simulated = simulated_of(theta, active)
        fitted = [names[i] for i in active]
        dropped = [names[i] for i in order if i not in active]
        return FitResult(
            calibration=calibration,
            fitted=fitted,
            not_identifiable=dropped,
            simulated_s=simulated,
            points=list(points),
            iterations=len(history) - 1,
            history=history,
            at_bounds=at_bounds(
                {n: _value(n, theta[i]) for n, i in zip(fitted, active, strict=True)}
            ),
        )


def _check_time(p: FitPoint) -> None:
    """Refuse a measured time that no call takes: not positive, not finite, or over
    :data:`~simcoll.calibrate.measurements.MAX_TIME_S` (a day)."""
    what = f"a measured time of {p.time_s!r} s ({p.collective}, {p.size_bytes} B)"
    if not 0 < p.time_s < math.inf:
        raise ConfigError(f"{what} is not a positive finite number; cannot fit a log error",
                          source=p.source or None)  # fmt: skip
    if p.time_s > MAX_TIME_S:
        raise ConfigError(f"{what} is more than a day ({MAX_TIME_S:g} s) for one call; is it "
                          "in other units?", source=p.source or None)  # fmt: skip


def _planned(names: list[str], fitted: list[int], *, scan: bool = True) -> int:
    """Passes a fit of the parameters ``fitted`` is expected to make once it knows
    them: the scan of each simulated time (:data:`SCAN_S`; not where ``scan`` is done),
    and the descent's steps, each the slopes of every simulated parameter and a trial
    (a launch cost is added to the times, never simulated)."""
    simulated = [i for i in fitted if names[i] != "launch_s"]
    timed = [i for i in simulated if not names[i].startswith(_EFFICIENCIES)]
    return scan * len(timed) * len(SCAN_S) + PLANNED_STEPS * (len(simulated) + 1)


def _floor_s(points: Sequence[FitPoint]) -> float:
    """The median time of the 0-byte calls: what a call costs that moves nothing.

    Raises
    ------
    ConfigError
        If no point is of 0 bytes.
    """
    zero = [p.time_s for p in points if p.size_bytes == 0]
    if not zero:
        raise ConfigError("floor_s is the time of a 0-byte call, and these runs have none "
                          "(nccl-tests prints them with -b 0)", field="--fit")  # fmt: skip
    return float(np.median(zero))


def _parameters(topology: nx.DiGraph[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Names, starting values and scales of the fit's variables.

    The variables are linear in time where links are not shared: ``1 / efficiency`` per
    link class and per protocol (start at 1), each link kind's latency (starts at the
    topology's mean), the step latency per class and the launch cost (start at 0), in
    seconds.
    """
    kinds: dict[str, list[float]] = defaultdict(list)
    for _, _, attrs in topology.edges(data=True):
        kinds[attrs["kind"].value].append(float(attrs["latency_s"]))
    classes = sorted({link_class([k]) for k in kinds}, key=LINK_CLASSES.index)
    names = [f"efficiency.{c}" for c in classes]
    names += [f"protocol_efficiency.{p}" for p in PROTOCOL_NAMES]
    start = [1.0] * len(names)
    scale = [1.0] * len(names)
    for kind, latencies in sorted(kinds.items()):
        names.append(f"link_latency_s.{kind}")
        start.append(float(np.mean(latencies)))
        scale.append(max(float(np.mean(latencies)), _TIME_SCALE_S))
    names += [f"step_latency_s.{c}" for c in classes]
    names.append("launch_s")
    start += [0.0] * (len(classes) + 1)
    scale += [_TIME_SCALE_S] * (len(classes) + 1)
    return names, np.array(start), np.array(scale)


#: Values tried for each fitted time parameter before the least squares start (seconds):
#: the objective is not convex in them where the fastest protocol changes with the
#: latency (a 2-node H100 ring's net step latency: least squares from 0 stopped at 0.07 us,
#: where 18 us fits both 2 and 4 nodes within a few percent).
SCAN_S = (0.0, 1e-6, 3e-6, 10e-6, 30e-6, 100e-6)


def _scanned(  # noqa: PLR0917 - the fit's state, passed through
    residual: Callable[[np.ndarray, list[int]], np.ndarray],
    start: np.ndarray,
    active: list[int],
    names: list[str],
    prefetch: Callable[[list[np.ndarray], list[int]], None],
    expect: Callable[[int], None] | None = None,
) -> np.ndarray:
    """``start`` with each fitted time parameter, in turn, set to the value of
    :data:`SCAN_S` whose residuals are smallest (a coarse search before the fit's local
    one); ``expect`` is told the passes the scan has left after each parameter."""
    theta = start.copy()
    timed = [i for i in active if not names[i].startswith(_EFFICIENCIES)]
    for done, i in enumerate(timed, start=1):
        trials = []
        for value_s in SCAN_S:
            trial = theta.copy()
            trial[i] = value_s
            trials.append(trial)
        prefetch(trials, active)
        costs = [float(np.sum(residual(t, active) ** 2)) for t in trials]
        theta = trials[int(np.argmin(costs))]
        if expect is not None:  # a launch cost's values cost no simulation
            expect(len(SCAN_S) * sum(names[j] != "launch_s" for j in timed[done:]))
    return theta


def _value(name: str, variable: float) -> float:
    """A parameter's value from its fit variable (efficiency is fitted as its inverse)."""
    return 1 / variable if name.startswith(_EFFICIENCIES) else variable


def _jacobian(  # noqa: PLR0917 - the fit's state, passed through
    residual: Callable[[np.ndarray, list[int]], np.ndarray],
    theta: np.ndarray,
    base: np.ndarray,
    columns: list[int],
    active: list[int],
    scale: np.ndarray,
    prefetch: Callable[[list[np.ndarray], list[int]], None] | None = None,
) -> np.ndarray:
    """d residual / d variable, by forward differences of a fraction of each scale
    (``prefetch`` is told every column's point first, to simulate them together)."""
    jacobian = np.zeros((len(base), len(theta)))
    steps = {}
    for j in columns:
        step = theta.copy()
        h = _STEP * scale[j]
        step[j] += h
        steps[j] = step, h
    if prefetch is not None:
        prefetch([step for step, _ in steps.values()], active)
    for j, (step, h) in steps.items():
        jacobian[:, j] = (residual(step, active) - base) / h
    return jacobian


def _identifiable(jacobian: np.ndarray, order: list[int]) -> list[int]:
    """The columns, taken in ``order``, that add rank."""
    chosen: list[int] = []
    for j in order:
        column = jacobian[:, j]
        if np.linalg.norm(column) < 1e-12:
            continue
        trial = jacobian[:, [*chosen, j]]
        trial = trial / np.linalg.norm(trial, axis=0)
        singular = np.linalg.svd(trial, compute_uv=False)
        if singular[-1] > 1e-3 * singular[0]:
            chosen.append(j)
    return chosen


def _bounds(n: int, n_efficiency: int) -> tuple[np.ndarray, np.ndarray]:
    """Physical values of the fit's variables: 1 / efficiency in [1 / MAX_EFFICIENCY,
    1 / MIN_FITTED_EFFICIENCY] (no transfer carries more data than its wire), times in
    [0, MAX_PARAM_S] (what a params file may hold)."""
    lower, upper = np.zeros(n), np.full(n, MAX_PARAM_S)
    lower[:n_efficiency] = 1 / MAX_EFFICIENCY
    upper[:n_efficiency] = 1 / MIN_FITTED_EFFICIENCY
    return lower, upper


def at_bounds(values: dict[str, float]) -> list[str]:
    """The fitted values that sit on a bound of the fit, in words: the data pushed them
    there, and past it is not physical (an efficiency above 1, a time below 0), so
    another cause moves those times, or the model lacks one.

    >>> at_bounds({"efficiency.nvlink": 1.0, "efficiency.net": 0.92, "launch_s": 0.0,
    ...            "link_latency_s.ib": 1e-05})
    ['efficiency.nvlink = 1 is at its upper bound 1', 'launch_s = 0 s is at its lower bound 0 s']
    """
    out = []
    for name, value in values.items():
        if name.startswith(_EFFICIENCIES):
            for side, bound in (("upper", MAX_EFFICIENCY), ("lower", MIN_FITTED_EFFICIENCY)):
                if abs(value - bound) <= _AT_BOUND * bound:
                    out.append(f"{name} = {value:g} is at its {side} bound {bound:g}")
        elif value <= _AT_BOUND * _TIME_SCALE_S:
            out.append(f"{name} = {value:g} s is at its lower bound 0 s")
        elif value >= MAX_PARAM_S * (1 - _AT_BOUND):
            out.append(f"{name} = {value:g} s is at its upper bound {MAX_PARAM_S:g} s")
    return out
