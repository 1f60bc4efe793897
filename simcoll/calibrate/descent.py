"""The fit's descent: least squares of log errors, with a simulator for the times.

Each measured point's simulated seconds are, where no links are shared, linear in the
fit's variables (inverse efficiencies and latencies: time = latencies + bytes /
(efficiency x bandwidth)). So each step takes the slopes of the seconds by one
simulation per variable, moved by a difference step, and solves the least squares of
the log errors on that linear model of the seconds, without simulating, within a
trust region; one simulation at the solution says whether the step is taken (the cost
fell) or the region shrinks. Simulated times also move in small jumps (chunks, pieces,
the protocol or algorithm chosen), so slopes over a step of a few per cent of each
value see past the jumps where a slope over 1e-9 s sees one of them; where no step
is found the slopes are taken again over a step ten times shorter.

>>> import numpy as np
>>> sizes = np.array([1e3, 1e5, 1e7])
>>> def seconds(theta):  # 2 hops of theta[1] s and bytes at 1 GB/s x efficiency
...     return 2 * theta[1] + sizes * theta[0] / 1e9
>>> measured = np.log(seconds(np.array([1.25, 20e-6])))  # efficiency 0.8, 20 us per hop
>>> problem = Problem(seconds, measured, lower=np.array([1.0, 0.0]),
...                   upper=np.array([20.0, np.inf]), scale=np.array([1.0, 1e-6]),
...                   active=[0, 1])
>>> theta, costs = descend(problem, np.array([1.0, 0.0]))
>>> [round(float(x), 12) for x in theta], costs[-1] < 1e-20
([1.25, 2e-05], True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["CONVERGED", "PLANNED_STEPS", "SECANT", "SMALLEST_SECANT", "Problem", "descend"]

#: The first difference step of the slopes: a fraction of each variable's value (or,
#: near 0, of its scale).
SECANT = 1e-2
#: The shortest difference step: where no step is found with slopes over this one, the
#: descent ends.
SMALLEST_SECANT = 1e-4
#: The descent has converged when a step lowers the squared log error by less than this
#: fraction of it. Simulated times jump (chunks, pieces, choices): moving one fitted value
#: of the 4 x 8 H100 table's fit by 0.1 % moves its cost by up to 0.16 %, and 1e-4 of a
#: value moved the 2 x 8 ring table's by 20 %; smaller gains chase the jumps. (On the
#: 4 x 8 table, steps down to 1e-3 of the cost end 0.7 % lower, for 30 % more passes.)
CONVERGED = 1e-2
_MAX_STEPS = 30
#: Steps the descent is expected to take, until it takes more (what progress counts on).
PLANNED_STEPS = 3
_MODEL_ITERATIONS = 200  # of the least squares on the linear model: no simulation
_MAX_DAMPING = 1e6
_SMALLEST_S = 1e-15  # a modelled time is at least this (its log must exist)
_EXACT = 1e-24  # a cost this small is a fit exact to rounding


def _nothing(_: object) -> None:
    return None


@dataclass(frozen=True)
class Problem:
    """What the descent minimises: the squared log errors of simulated seconds.

    ``raw`` gives the seconds of every point for a vector of variables, before the
    time ``added`` to each (a launch cost: the variable of that index where it is
    fitted, else ``added_s``) and the ``floor_s`` they are raised to; ``measured`` is
    the log of the measured seconds. Only the ``active`` variables move, within
    ``lower`` and ``upper``; ``scale`` is a variable's size where its value is 0.
    ``prefetch`` is told of variable vectors ``raw`` will be asked for next (to
    simulate them together), ``expect`` of how many more simulations are expected.
    """

    raw: Callable[[np.ndarray], np.ndarray]
    measured: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    scale: np.ndarray
    active: list[int]
    added: int | None = None
    added_s: float = 0.0
    floor_s: float = 0.0
    prefetch: Callable[[list[np.ndarray]], None] = _nothing
    expect: Callable[[int], None] = _nothing

    def totals(self, raw: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """Seconds per point: the added time on top, below the floor raised to it."""
        return np.maximum(raw + self._added(theta), self.floor_s)

    def cost(self, raw: np.ndarray, theta: np.ndarray) -> float:
        """The squared log error of these seconds."""
        r = np.log(self.totals(raw, theta)) - self.measured
        return float(r @ r)

    def _added(self, theta: np.ndarray) -> float:
        return float(theta[self.added]) if self.added is not None else self.added_s


def descend(problem: Problem, theta: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """The variables that minimise ``problem``'s cost from ``theta``, and the costs of
    the start and of each step taken (see the module docstring).

    A variable the last step left on a bound keeps its slopes (only they can move it
    off, and the step keeps it there); they are simulated again before the end. The
    descent ends when a step lowers the cost by less than :data:`CONVERGED` of it, or
    no step is found with slopes over :data:`SMALLEST_SECANT`.
    """
    raw = problem.raw(theta)
    cost = problem.cost(raw, theta)
    history = [cost]
    radius, secant = 1.0, SECANT
    moved = [i for i in problem.active if i != problem.added]
    slopes: np.ndarray | None = None
    columns = moved  # whose slopes are simulated for the next step
    last = False  # the next step is the last unless it finds a lower cost
    for step in range(_MAX_STEPS):
        problem.expect(max(1, PLANNED_STEPS - step) * (len(moved) + 1))
        slopes = _slopes(problem, theta, raw, columns, slopes, secant)
        kept = [j for j in moved if j not in columns]
        theta, raw, cost, radius, taken = _step(problem, theta, raw, cost, slopes, radius, secant)
        if taken:
            converged = history[-1] - cost < CONVERGED * history[-1] or cost < _EXACT
            history.append(cost)
            pinned = [j for j in moved if _on_bound(problem, theta, j)]
            if converged and (last or not pinned):
                break
            last = converged  # but first, the pinned variables' slopes simulated again
            columns = pinned if converged else [j for j in moved if j not in pinned]
        elif last:
            break
        elif kept:  # the kept slopes may be why: all of them again, over the same step
            columns = moved
        else:
            secant /= 10
            if secant < SMALLEST_SECANT:
                break
            radius = max(radius, 4 * secant)
            columns = moved
    return theta, history


def _step(  # noqa: PLR0917 - the descent's state
    problem: Problem,
    theta: np.ndarray,
    raw: np.ndarray,
    cost: float,
    slopes: np.ndarray,
    radius: float,
    secant: float,
) -> tuple[np.ndarray, np.ndarray, float, float, bool]:
    """One step on these slopes: the variables, seconds and cost it reaches, the trust
    radius after it, and whether a step was taken (else the variables as they were:
    the linear model sees nothing lower, or no step longer than the slopes' difference
    step ``secant`` lowered the cost)."""
    while True:
        trial, predicted = _model_step(problem, theta, raw, slopes, radius)
        if cost - predicted <= CONVERGED * cost:
            return theta, raw, cost, radius, False  # the linear model sees nothing lower
        raw_trial = problem.raw(trial)
        cost_trial = problem.cost(raw_trial, trial)
        length = _length(problem, theta, trial)
        if cost_trial < cost:
            ratio = (cost - cost_trial) / (cost - predicted)
            if ratio > 0.75:
                radius = max(radius, 4 * length)
            elif ratio < 0.25:
                radius = max(length / 2, secant)
            return trial, raw_trial, cost_trial, radius, True
        radius = length / 4
        if radius < secant:
            return theta, raw, cost, radius, False
        problem.expect(1)


def _on_bound(problem: Problem, theta: np.ndarray, j: int) -> bool:
    """Whether variable ``j`` sits on one of its bounds."""
    return bool(theta[j] <= problem.lower[j] or theta[j] >= problem.upper[j])


def _slopes(  # noqa: PLR0917 - the descent's state
    problem: Problem,
    theta: np.ndarray,
    raw: np.ndarray,
    columns: list[int],
    previous: np.ndarray | None,
    secant: float,
) -> np.ndarray:
    """d seconds / d variable per point, by forward differences of ``secant`` of each
    variable's value or scale (backward at an upper bound), for ``columns``; the
    others' as ``previous`` had them; the added time's is exact (1 for every point)."""
    steps: dict[int, tuple[np.ndarray, float]] = {}
    for j in columns:
        h = secant * max(abs(theta[j]), problem.scale[j])
        if theta[j] + h > problem.upper[j]:
            h = -h
        trial = theta.copy()
        trial[j] += h
        steps[j] = trial, h
    problem.prefetch([trial for trial, _ in steps.values()])
    slopes = np.zeros((len(raw), len(theta))) if previous is None else previous.copy()
    for j, (trial, h) in steps.items():
        slopes[:, j] = (problem.raw(trial) - raw) / h
    if problem.added is not None:
        slopes[:, problem.added] = 1.0
    return slopes


def _length(problem: Problem, theta: np.ndarray, trial: np.ndarray) -> float:
    """How far ``trial`` is from ``theta``, in the trust region's measure: the largest
    move of a variable, relative to its value or (near 0) its scale."""
    active = problem.active
    width = np.maximum(np.abs(theta[active]), problem.scale[active])
    return float(np.max(np.abs(trial[active] - theta[active]) / width))


def _model_step(
    problem: Problem, theta: np.ndarray, raw: np.ndarray, slopes: np.ndarray, radius: float
) -> tuple[np.ndarray, float]:
    """The least squares of the log errors where each point's seconds are linear in the
    variables (``raw`` at ``theta``, changing by ``slopes``), within the bounds and
    ``radius`` (:func:`_length`) of ``theta``: the variables there and the cost the
    linear model predicts for them. Levenberg-Marquardt, projected on the box, in
    variables divided by their scales; no simulation."""
    active = problem.active
    scale = problem.scale[active]
    origin = theta[active] / scale
    width = radius * np.maximum(np.abs(theta[active]), scale) / scale
    low = np.maximum(problem.lower[active] / scale, origin - width)
    high = np.minimum(problem.upper[active] / scale, origin + width)
    base = raw + problem._added(theta)
    gradient = slopes[:, active] * scale  # d seconds / d scaled variable
    least = max(problem.floor_s, _SMALLEST_S)

    def residual(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seconds = base + gradient @ (u - origin)
        over = seconds > least
        seconds = np.where(over, seconds, least)
        jacobian = np.where(over[:, None], gradient / seconds[:, None], 0.0)
        return np.log(seconds) - problem.measured, jacobian

    u = np.clip(origin, low, high)
    r, jac = residual(u)
    cost = float(r @ r)
    damping = 1e-3
    for _ in range(_MODEL_ITERATIONS):
        normal, gradient_u = jac.T @ jac, jac.T @ r
        while damping < _MAX_DAMPING:
            lhs = normal + damping * np.diag(np.diag(normal) + 1e-30)
            trial = np.clip(u + np.linalg.solve(lhs, -gradient_u), low, high)
            r_trial, jac_trial = residual(trial)
            cost_trial = float(r_trial @ r_trial)
            if cost_trial < cost:
                break
            damping *= 4
        else:
            break
        improvement = cost - cost_trial
        u, r, jac, cost = trial, r_trial, jac_trial, cost_trial
        damping = max(damping / 3, 1e-12)
        if improvement < 1e-12 * cost:
            break
    out = theta.copy()
    out[active] = u * scale
    return out, cost
