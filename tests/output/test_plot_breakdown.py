"""The breakdown plot: one stacked bar per training-step point; refused without its parts."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest

from simcoll.core.errors import ConfigError
from simcoll.output.plot import BREAKDOWN_PARTS, plot_breakdown
from simcoll.scenarios.scenario import parse_scenario


def _row(tp: int, fits: float) -> dict[str, float]:
    return {"tp": tp, "fits_in_memory": fits} | {p: 0.1 * (i + 1) for i, p in
                                                  enumerate(BREAKDOWN_PARTS)}  # fmt: skip


def test_a_bar_per_point_is_written(tmp_path: Path) -> None:
    path = plot_breakdown([_row(2, 0.0), _row(4, 1.0)], tmp_path / "b.png", label_by=["tp"])
    assert matplotlib.image.imread(path).shape[0] > 100  # a real PNG


def test_rows_without_the_parts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the rows have no compute_s"):
        plot_breakdown([{"tp": 2, "time_s": 1.0}], tmp_path / "b.png", label_by=["tp"])


def test_a_breakdown_of_another_workload_is_refused_before_it_runs(tmp_path: Path) -> None:
    data = {"schema": 1, "topology": {"file": "x.toml"},
            "workload": {"kind": "ddp"}, "output": {"plots": ["breakdown"]}}  # fmt: skip
    with pytest.raises(ConfigError) as info:
        parse_scenario(data, source="s.toml", base=tmp_path)
    assert "output.plots: the breakdown plot shows a training step's parts, not a ddp" in str(
        info.value)  # fmt: skip
