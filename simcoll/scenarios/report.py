"""The files a sweep leaves: tables (CSV, JSON, nccl-tests text), plots and traces.

:func:`write_report` turns a :class:`~simcoll.scenarios.sweep.SweepResult` into ``results.csv``
(DESIGN's columns first, then the workload's metrics and the sweep axes),
``results.json``, ``table.txt`` and the plots the scenario asks for (by default the ones
its axes make meaningful), each written atomically. :func:`write_timeline` writes one
point's Chrome/Perfetto trace, Gantt chart and link utilisation as the point finishes.

The plots a scenario gets by default are :func:`~simcoll.scenarios.points.default_plots`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.units import format_bytes, format_time
from simcoll.output.folder import OutputFolder
from simcoll.output.results import CSV_COLUMNS, Row, format_table
from simcoll.scenarios.outdir import open_run_folder
from simcoll.scenarios.points import default_plots
from simcoll.scenarios.scenario import Point, Scenario
from simcoll.scenarios.sweep import SweepResult
from simcoll.sim.timeline import Timeline

__all__ = ["default_plots", "format_workload_table", "write_report", "write_timeline"]

_ROW_FIELDS = {f.name for f in fields(Row)}


def write_report(result: SweepResult, out_dir: str | Path | OutputFolder) -> list[Path]:
    """Write the tables and plots of ``result`` into ``out_dir`` (a path, locked while
    writing, or an open run folder); returns what was written. Only files simcoll wrote
    there are replaced (:mod:`simcoll.scenarios.outdir`)."""
    with _folder(out_dir) as folder:
        s = result.scenario
        rows = result.rows
        written = [
            folder.write_text("results.csv", rows_to_csv(rows, s)),
            folder.write_text("results.json", json.dumps(rows, indent=1, default=str) + "\n"),
            folder.write_text("table.txt", format_results(result) + "\n"),
        ]
        if rows:
            wanted = s.output.get("plots") or default_plots(s.kind, s.axes)
            for name in wanted:
                if name in ("gantt", "link_utilisation"):
                    continue  # drawn per timeline, by write_timeline
                path = folder.reserve(f"{name.replace('_', '-')}.png")
                written.append(_plot(name, rows, s, path))
    return written


@contextlib.contextmanager
def _folder(out_dir: str | Path | OutputFolder) -> Iterator[OutputFolder]:
    """An open run folder: the one given, or ``out_dir`` opened (and locked) for the block."""
    if isinstance(out_dir, OutputFolder):
        yield out_dir
        return
    with open_run_folder(out_dir) as folder:
        yield folder


def rows_to_csv(rows: Sequence[dict[str, Any]], scenario: Scenario) -> str:
    """Rows as CSV: DESIGN's columns, then the rest in first-seen order, then the axes."""
    names: dict[str, None] = dict.fromkeys(CSV_COLUMNS)
    for row in rows:
        names.update(dict.fromkeys(k for k in row if k not in scenario.axes))
    names.update(dict.fromkeys(scenario.axes))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(names), lineterminator="\n", restval="")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return text.getvalue()


def format_results(result: SweepResult) -> str:
    """The text table: nccl-tests style per group for collectives, else one aligned table."""
    s = result.scenario
    files: list[Any] = s.axes.get("topology.file") or [s.topology_file]
    topologies = ", ".join(str(f) for f in files)
    parts = [f"# {s.title}", f"# scenario: {s.source}", f"# topology: {topologies}"]
    if s.kind == "collective":
        parts += _collective_tables(result)
    else:
        parts.append(format_workload_table(result.rows, list(s.axes)))
        parts += _optimum(result.rows, s)
    for point in result.points:
        if point.skipped:
            parts.append(
                f"# point {point.point.index} ({point.point.label}) skipped: {point.skipped}"
            )
    for failure in result.failures:
        parts.append(
            f"# point {failure.point.index} ({failure.point.label}) failed: {failure.error}"
        )
    return "\n".join(parts)


def _optimum(rows: list[dict[str, Any]], s: Scenario) -> list[str]:
    """The best point by the plotted metric (``time_s`` by default): the lowest, or the
    highest for a rate or a utilisation (``*_per_s``, ``mfu``); where points report
    ``fits_in_memory``, the best of those that fit."""
    _, y, _ = _metric_axes(s)
    scored = [r for r in rows if isinstance(r.get(y), int | float)]
    if len(scored) < 2 or not s.axes:
        return []
    fitting = [r for r in scored if r.get("fits_in_memory", 1) == 1]
    pool = fitting or scored
    higher = y == "mfu" or y.endswith("_per_s")
    best = (max if higher else min)(pool, key=lambda r: r[y])
    where = ", ".join(f"{k}={_cell(k, best.get(k))}" for k in s.axes)
    among = " (of the points that fit in memory)" if fitting and len(fitting) < len(scored) else ""
    return [f"# {'highest' if higher else 'lowest'} {y}: {_cell(y, best[y])} at {where}{among}"]


def _collective_tables(result: SweepResult) -> list[str]:
    groups: dict[str, list[Row]] = {}
    for point in result.points:
        if not point.ok:
            continue
        others = {k: v for k, v in point.point.values.items() if k != "size_bytes"}
        for row in point.rows:
            label = ", ".join(
                [f"{row['collective']} on {row['n_ranks']} ranks"]
                + [f"{k}={v}" for k, v in others.items() if k != "n_ranks"]
            )
            groups.setdefault(label, []).append(_row(row))
    return [format_table(rows, title=label) + "\n" for label, rows in groups.items()]


def _row(values: dict[str, Any]) -> Row:
    return Row(**{k: v for k, v in values.items() if k in _ROW_FIELDS})


def format_workload_table(rows: Sequence[dict[str, Any]], axes: Sequence[str]) -> str:
    """Workload rows as an aligned table: the axes, then every metric, units in headers.

    >>> print(format_workload_table([{"bucket_bytes": 1048576, "time_s": 0.0125}],
    ...                              ["bucket_bytes"]))
    bucket_bytes   time_s
           1 MiB  12.5 ms
    """
    if not rows:
        return "(no results)"
    skip = {"collective", "algorithm", "protocol", "n_ranks", "size_bytes"} - set(axes)
    names = list(dict.fromkeys([*axes, *(k for r in rows for k in r if k not in skip)]))
    cells = [[_cell(name, row.get(name, "")) for name in names] for row in rows]
    widths = [max(len(n), *(len(c[i]) for c in cells)) for i, n in enumerate(names)]
    lines = ["  ".join(n.rjust(w) for n, w in zip(names, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths, strict=True)) for cell in cells]
    return "\n".join(lines)


def _cell(name: str, value: Any) -> str:
    """A value with the unit its column name carries (``_s``, ``_bytes``, ``_bytes_per_s``,
    also followed by a qualifier such as ``time_s_to_4``; another ``_per_s``: a rate)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if re.search(r"_bytes_per_s(_|$)", name):
        return f"{value / 1e9:.2f} GB/s"
    if re.search(r"_bytes(_|$)", name):
        return format_bytes(value)
    if re.search(r"_per_s$", name):  # a rate: tokens_per_s
        return f"{value:,.0f}/s"
    if re.search(r"_s(_|$)", name):
        return format_time(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plot(name: str, rows: list[dict[str, Any]], s: Scenario, path: Path) -> Path:
    """Draw one plot; one it cannot draw from these rows is one line naming it (issue 41: a
    scaling plot of 0-byte points raised ValueError after the results were written)."""
    try:
        return _draw(name, rows, s, path)
    except SimcollError:
        raise
    except ValueError as error:
        raise ConfigError(f"cannot draw {name!r} from these results: {error}",
                          source=s.source, field="output.plots") from None  # fmt: skip


def _draw(name: str, rows: list[dict[str, Any]], s: Scenario, path: Path) -> Path:
    from simcoll.output import plot  # noqa: PLC0415 - matplotlib only when plotting

    title = s.title
    reference_bytes_per_s = s.output.get("reference_bytes_per_s")
    if name == "busbw_vs_size":
        extra = [k for k in s.axes if k not in ("size_bytes", "algorithm")]
        series = [
            replace(
                _row(r),
                algorithm=", ".join([str(r["algorithm"])] + [f"{k}={r[k]}" for k in extra]),
            )
            for r in rows
        ]
        return plot.plot_busbw_vs_size(
            series, path, title=title, reference_bytes_per_s=reference_bytes_per_s
        )
    if name == "scaling":
        y = str(s.output.get("y", "busbw")).removesuffix("_s").removesuffix("_bytes_per")
        if y not in ("busbw", "algbw", "time"):
            raise ConfigError(
                f"a scaling plot shows busbw, algbw or time, not {y!r}", field="output.y"
            )
        others = [k for k in s.axes if k not in ("n_ranks", "algorithm", "size_bytes")]
        reference = None
        if reference_bytes_per_s:
            reference = {
                _law_label(rows[0], y, reference_bytes_per_s): _law(rows, y, reference_bytes_per_s)
            }
        return plot.plot_scaling(
            rows,
            path,
            y=y,  # type: ignore[arg-type]
            title=title,
            series=others[0] if others else None,
            reference=reference,
        )
    if name == "crossover":
        return plot.plot_crossover(rows, path, title=title)
    if name == "breakdown":
        try:
            return plot.plot_breakdown(rows, path, label_by=list(s.axes), title=title)
        except ValueError as error:
            raise ConfigError(f"a breakdown plot needs a training step's results: {error}",
                              field="output.plots") from None  # fmt: skip
    x, y_name, series_name = _metric_axes(s)
    return plot.plot_metric(rows, path, x=x, y=y_name, series=series_name, title=title)


def _law(
    rows: list[dict[str, Any]], y: str, bandwidth_bytes_per_s: float
) -> tuple[list[int], list[float]]:
    """What a collective reaches when every rank's link runs at ``bandwidth_bytes_per_s``."""
    c = Collective.parse(str(rows[0]["collective"]))
    size_bytes = int(rows[0]["size_bytes"])
    ranks = sorted({int(r["n_ranks"]) for r in rows})
    if y == "busbw":
        return ranks, [bandwidth_bytes_per_s] * len(ranks)
    algbw = [bandwidth_bytes_per_s / c.busbw_factor(n) if c.busbw_factor(n) else 0.0 for n in ranks]
    if y == "algbw":
        return ranks, algbw
    return ranks, [size_bytes / b if b else 0.0 for b in algbw]


def _law_label(row: dict[str, Any], y: str, bandwidth_bytes_per_s: float) -> str:
    b = f"{bandwidth_bytes_per_s / 1e9:g} GB/s"
    factor = Collective.parse(str(row["collective"])).busbw_factor(4)
    if y == "busbw":
        return f"link bandwidth B = {b}"
    what = "B / busbw factor" if factor != 1.5 else "B n / (2(n-1))"
    return f"{what}, B = {b}" if y == "algbw" else f"size / ({what}), B = {b}"


def _metric_axes(s: Scenario) -> tuple[str, str, str | None]:
    axes = list(s.axes)
    x = s.output.get("x") or (axes[0] if axes else "n_ranks")
    rest = [a for a in axes if a != x]
    series = s.output.get("series") or (rest[0] if rest else None)
    return x, s.output.get("y") or "time_s", series


def write_timeline(
    timeline: Timeline, point: Point, scenario: Scenario, out_dir: str | Path | OutputFolder
) -> list[Path]:
    """One point's trace (Chrome/Perfetto JSON), Gantt chart, and link utilisation over the
    run (bars) and over time (heatmap), in ``timelines/`` of the run folder."""
    from simcoll.output import plot  # noqa: PLC0415
    from simcoll.output.trace import write_chrome_trace  # noqa: PLC0415

    stem = f"timelines/point-{point.index:04d}"
    title = f"{scenario.title} ({point.label})"
    with _folder(out_dir) as folder:
        trace = folder.reserve(f"{stem}.trace.json")
        written = [
            write_chrome_trace(timeline, trace, title=title),
            plot.plot_gantt(timeline, folder.reserve(f"{stem}-gantt.png"), title=title),
            plot.plot_link_utilisation(timeline, folder.reserve(f"{stem}-links.png"), title=title),
        ]
        if timeline.link_load_bytes.size:  # a training step keeps no load over time
            written.append(plot.plot_link_heatmap(
                timeline, folder.reserve(f"{stem}-links-over-time.png"), title=title))  # fmt: skip
        return written
