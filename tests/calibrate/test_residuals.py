"""One definition of a point's error and of the median error (issue 41: calibrate printed
12.4 %, the upper of the middle two of its 14 errors, where the residuals it wrote have a
median of 9.97 % and ``compare`` printed 10.0 %)."""

from __future__ import annotations

import pytest

from simcoll.calibrate.compare import ComparedPoint, summarise
from simcoll.calibrate.residuals import max_abs_error, median_abs_error, time_error


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two() -> None:
    errors = [0.3, -0.1, 0.05, -0.2]  # |errors| sorted: 0.05, 0.1, 0.2, 0.3
    assert median_abs_error(errors) == pytest.approx((0.1 + 0.2) / 2)
    assert median_abs_error([0.1, -0.4, 0.2]) == pytest.approx(0.2)
    assert max_abs_error(errors) == pytest.approx(0.3)


def test_compare_summarises_with_the_same_definition() -> None:
    measured_s = [1e-3, 2e-3, 3e-3, 4e-3]
    simulated_s = [1.1e-3, 1.8e-3, 3.6e-3, 4.2e-3]  # +10 %, -10 %, +20 %, +5 %
    points = [ComparedPoint("t.csv", "allreduce", 8, 2**20 * (i + 1), m, s)
              for i, (m, s) in enumerate(zip(measured_s, simulated_s, strict=True))]  # fmt: skip
    every = [row for row in summarise(points) if row["regime"] == "all"]
    assert len(every) == 1
    # |errors| sorted: 0.05, 0.1, 0.1, 0.2; the middle two: 0.1 and 0.1
    assert every[0]["median_abs_time_error"] == pytest.approx((0.1 + 0.1) / 2)
    assert [time_error(m, s) for m, s in zip(measured_s, simulated_s, strict=True)] == (
        pytest.approx([0.1, -0.1, 0.2, 0.05]))  # fmt: skip
