"""Gantt charts and link utilisation of a Timeline (simcoll.output.plot.timeline)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simcoll.output.plot import plot_gantt, plot_link_utilisation
from simcoll.sim.timeline import Span, Timeline


def assert_png(path: Path) -> None:
    import matplotlib.image  # noqa: PLC0415 - matplotlib only in plot tests
    import matplotlib.pyplot as plt  # noqa: PLC0415

    image = matplotlib.image.imread(path)
    assert image.ndim == 3
    assert image.shape[0] > 100
    assert image.shape[1] > 100
    assert image.std() > 0  # not a blank canvas
    assert plt.get_fignums() == []  # the figure was closed


def overlapped(n_ranks: int) -> Timeline:
    """Each rank computes 0-40 ms while an all-reduce runs 10-50 ms on its comm stream;
    rank 0 also prefetches on a second stream. Two links: a busy one and an idle one."""
    spans = [Span(rank=r, stream="compute", name="backward", start_s=0.0, end_s=0.04)
             for r in range(n_ranks)]  # fmt: skip
    spans += [Span(rank=r, stream="comm", name="allreduce", start_s=0.01, end_s=0.05)
              for r in range(n_ranks)]  # fmt: skip
    spans.append(Span(rank=0, stream="comm 1", name="allgather", start_s=0.0, end_s=0.005))
    return Timeline(
        n_ranks=n_ranks,
        time_s=0.05,
        spans=tuple(spans),
        links=(("gpu0", "sw"), ("sw", "gpu1"), ("gpu1", "sw")),
        link_bytes=np.array([4e9, 1e9, 0.0]),
        link_busy_s=np.array([0.04, 0.01, 0.0]),
        link_bandwidth_bytes_per_s=np.array([100e9, 100e9, 100e9]),
    )


def test_gantt_writes_a_png(tmp_path: Path) -> None:
    out = plot_gantt(overlapped(4), tmp_path / "a" / "gantt.png", title="DDP step")
    assert out == tmp_path / "a" / "gantt.png"
    assert_png(out)


def test_gantt_leaves_out_ranks_past_the_limit(tmp_path: Path) -> None:
    assert_png(plot_gantt(overlapped(100), tmp_path / "gantt.png", max_ranks=8))


def test_gantt_refuses_a_timeline_without_spans(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no spans"):
        plot_gantt(Timeline(n_ranks=2, time_s=1.0), tmp_path / "gantt.png")


def test_link_utilisation_writes_a_png(tmp_path: Path) -> None:
    # Utilisation = bytes / (bandwidth x run time): 4 GB / (100 GB/s x 50 ms) = 80 %,
    # 1 GB / 5 GB = 20 %; the third link is idle.
    assert_png(plot_link_utilisation(overlapped(2), tmp_path / "links.png"))


def test_link_utilisation_shows_the_busiest_links_only(tmp_path: Path) -> None:
    n_links = 300
    timeline = Timeline(
        n_ranks=2,
        time_s=1.0,
        links=tuple((f"n{i}.gpu", f"leaf{i % 7}") for i in range(n_links)),
        link_bytes=np.linspace(0.0, 2e9, n_links),
        link_busy_s=np.zeros(n_links),
        link_bandwidth_bytes_per_s=np.full(n_links, 2.5e9),
    )
    assert_png(plot_link_utilisation(timeline, tmp_path / "links.png", max_links=20))


def test_link_utilisation_of_idle_links_says_so(tmp_path: Path) -> None:
    idle = Timeline(n_ranks=2, time_s=1.0, links=(("a", "b"),), link_bytes=np.zeros(1),
                    link_busy_s=np.zeros(1), link_bandwidth_bytes_per_s=np.ones(1))  # fmt: skip
    assert_png(plot_link_utilisation(idle, tmp_path / "links.png"))


def test_link_utilisation_refuses_a_timeline_without_links(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no links"):
        plot_link_utilisation(Timeline(n_ranks=2, time_s=1.0), tmp_path / "links.png")


def test_the_gantt_legend_names_only_what_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 31: the p2p Gantt listed "compute" though it has none
    import matplotlib.axes  # noqa: PLC0415

    labels: list[list[str]] = []
    original = matplotlib.axes.Axes.legend

    def legend(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        labels.append([h.get_label() for h in kwargs.get("handles", [])])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", legend)
    copy = Span(rank=0, stream="copy 1", name="c", start_s=0.0, end_s=1.0)
    copies = Timeline(n_ranks=2, time_s=1.0, spans=(copy,))
    plot_gantt(copies, tmp_path / "copies.png")
    plot_gantt(overlapped(2), tmp_path / "both.png")
    assert labels == [["communication"], ["compute", "communication"]]
