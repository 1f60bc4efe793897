"""The fit's descent (issue 41): least squares of log errors on a linear model of the
simulated seconds, within a trust region.

The "simulators" here are closed forms written in the tests: a route of two hops of
``latency`` seconds and ``size / (efficiency x 1 GB/s)`` of transfer, the variables
being ``1 / efficiency`` and the latency, as the fit's are.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simcoll.calibrate.descent import Problem, descend

SIZES = np.array([1e3, 1e4, 1e5, 1e6, 1e7, 1e8])
B = 1e9  # bytes per second


def seconds(theta: np.ndarray) -> np.ndarray:
    return 2 * theta[1] + SIZES * theta[0] / B


def problem(measured_s: np.ndarray, raw=seconds, **kwargs) -> Problem:
    return Problem(raw, np.log(measured_s), lower=np.array([1.0, 0.0]),
                   upper=np.array([20.0, math.inf]), scale=np.array([1.0, 1e-6]),
                   active=[0, 1], **kwargs)  # fmt: skip


def test_a_linear_simulator_is_recovered_in_few_simulations() -> None:
    calls: list[np.ndarray] = []

    def counted(theta: np.ndarray) -> np.ndarray:
        calls.append(theta.copy())
        return seconds(theta)

    truth = np.array([1 / 0.8, 25e-6])  # efficiency 0.8, 25 us per hop
    # from the fit's scan, a latency starts at the order of its value (10 us here)
    theta, costs = descend(problem(seconds(truth), counted), np.array([1.0, 10e-6]))
    assert theta == pytest.approx(truth, rel=1e-9)
    assert costs[-1] < 1e-20
    assert costs == sorted(costs, reverse=True)
    # seconds linear in the variables, each step lands where the trust region lets it
    # (the latency at most doubles in the first): the start, then per step 2 slopes and
    # a trial, and 2 slopes that see nothing lower
    assert len(calls) <= 1 + 2 * 3 + 2


def test_a_variable_pushed_past_its_bound_stays_on_it() -> None:
    # measured faster than the wire (efficiency 1.25): 1 / efficiency stops at 1
    truth = np.array([0.8, 10e-6])
    theta, costs = descend(problem(seconds(truth)), np.array([2.0, 0.0]))
    assert theta[0] == 1.0
    assert costs[-1] < costs[0]


def test_the_slopes_are_asked_for_together_and_the_work_ahead_is_told() -> None:
    asked: list[int] = []
    expected: list[int] = []
    truth = np.array([1 / 0.9, 5e-6])
    descend(problem(seconds(truth), prefetch=lambda thetas: asked.append(len(thetas)),
                    expect=expected.append), np.array([1.0, 0.0]))  # fmt: skip
    assert asked[0] == 2  # both slopes of the first step in one batch
    assert expected[0] == 3 * (2 + 1)  # 3 steps planned, each 2 slopes and a trial


def test_jumps_in_the_simulated_times_do_not_stall_the_descent() -> None:
    # Simulated times also move in small jumps (chunks, choices): here 0.1 % up and down
    # every 1e-6 of 1 / efficiency. A slope over 1e-9 s or 1e-6 of a variable sees only
    # the jumps (the old fit's difference step, 1e-3 of a scale, stalled on them); over
    # 1 % of each value, the trend.
    def jumpy(theta: np.ndarray) -> np.ndarray:
        return seconds(theta) * (1 + 1e-3 * (math.floor(theta[0] * 1e6) % 2))

    truth = np.array([1 / 0.7, 40e-6])
    theta, costs = descend(problem(seconds(truth), jumpy), np.array([1.0, 0.0]))
    assert theta == pytest.approx(truth, rel=1e-2)
    assert costs[-1] < 1e-3 * costs[0]


def test_a_fitted_time_added_to_every_call_has_an_exact_slope() -> None:
    # a launch cost (variable 2) adds to every time: its slope is 1, never simulated
    hops = np.array([2, 2, 3, 3, 4, 4])  # routes of 2 to 4 hops: a hop is not a call

    def raw(theta: np.ndarray) -> np.ndarray:
        return hops * theta[1] + SIZES * theta[0] / B

    batches: list[list[np.ndarray]] = []
    truth = np.array([1 / 0.9, 5e-6, 30e-6])
    measured = hops * truth[1] + SIZES * truth[0] / B + truth[2]
    fitted = Problem(raw, np.log(measured), lower=np.array([1.0, 0.0, 0.0]),
                     upper=np.array([20.0, math.inf, math.inf]),
                     scale=np.array([1.0, 1e-6, 1e-6]), active=[0, 1, 2], added=2,
                     prefetch=batches.append)  # fmt: skip
    theta, _ = descend(fitted, np.array([1.0, 3e-6, 10e-6]))
    assert theta == pytest.approx(truth, rel=1e-6)
    # each batch of slopes moves the other two, and the launch cost stays where it was
    assert batches
    assert all(len(batch) <= 2 and len({v[2] for v in batch}) == 1 for batch in batches)
