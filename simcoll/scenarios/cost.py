"""What a sweep will cost, said before it starts: summed simulation seconds and the largest
point's memory, from :mod:`simcoll.models.estimate`; refused over a limit."""

from __future__ import annotations

import os

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.units import format_bytes, format_time
from simcoll.models.estimate import BYTES_PER_TRANSFER, SECONDS_PER_TRANSFER, estimate_point
from simcoll.prediction.choices import DEFAULT_ALGORITHM, candidates
from simcoll.scenarios.points import scenario_topology
from simcoll.scenarios.scenario import (
    Scenario,
)
from simcoll.topology import gpu_nodes

__all__ = ["DEFAULT_MAX_HOURS", "check_cost", "estimate_sweep"]

#: A sweep whose estimate is longer than this is refused unless the caller raises it.
DEFAULT_MAX_HOURS = 12.0


def estimate_sweep(scenario: Scenario) -> tuple[float, int, int]:
    """``(seconds, peak_bytes, n_estimated)``: summed simulation seconds over the points
    it can estimate (collective points; see :mod:`simcoll.models.estimate`), the largest peak
    memory of one point, and how many points were estimated."""
    seconds, peak, counted = 0.0, 0, 0
    for point in scenario.points():
        file, overrides, params = scenario.setup(point)
        if scenario.kind != "collective":
            continue
        try:
            c = Collective.parse(str(params.get("collective")))
            n = params.get("n_ranks") or len(
                gpu_nodes(scenario_topology(scenario, file, overrides))
            )
            names = candidates(c, str(params.get("algorithm", DEFAULT_ALGORITHM)))
            size, chunks = params.get("size_bytes"), params.get("n_chunks")
            channels = params.get("n_channels", 1)
            if not all(isinstance(v, int) for v in (n, size, channels)):
                continue
        except SimcollError:
            continue  # the point will report it
        n_protocols = 3 if params.get("protocol") == "auto" else 1
        for name in names:
            e = estimate_point(
                c,
                name,
                n_ranks=int(n),  # type: ignore[arg-type]
                size_bytes=int(size),  # type: ignore[arg-type]
                n_chunks=chunks if isinstance(chunks, int) else None,
                n_channels=int(channels),  # type: ignore[arg-type]
            )
            seconds += e.seconds * n_protocols
            peak = max(peak, e.peak_bytes)
        counted += 1
    return seconds, peak, counted


def check_cost(
    scenario: Scenario,
    *,
    workers: int,
    max_hours: float = DEFAULT_MAX_HOURS,
    memory_bytes: int | None = None,
) -> str:
    """Refuse a sweep whose estimate exceeds ``max_hours`` on ``workers`` processes, or
    whose largest point would not fit in ``memory_bytes`` (default: this machine's RAM,
    shared by the workers); otherwise return the estimate as a line of text."""
    seconds, peak, counted = estimate_sweep(scenario)
    wall_s = seconds / max(1, workers)
    memory = memory_bytes if memory_bytes is not None else _ram_bytes()
    n_points = scenario.n_points
    if wall_s > max_hours * 3600:
        raise ConfigError(
            f"this sweep would take about {_duration(wall_s)} on {workers} worker(s) "
            f"({n_points} points, estimated from their transfers at "
            f"{SECONDS_PER_TRANSFER * 1e6:.0f} us each), over the {max_hours:g} h limit; sweep "
            "fewer or smaller points, or raise --max-hours",
            source=scenario.source,
        )
    if memory and peak * min(max(1, workers), n_points) > memory:
        raise ConfigError(
            f"its largest point would need about {format_bytes(peak)} of memory per worker "
            f"({peak // BYTES_PER_TRANSFER} transfers), more than the {format_bytes(memory)} "
            f"this machine has for {workers} worker(s); simulate fewer ranks, chunks or "
            "workers",
            source=scenario.source,
        )
    if not counted:
        return "no estimate for workload points"
    return (
        f"estimated about {_duration(wall_s)} on {workers} worker(s) for the {counted} "
        "collective point(s)"
    )


def _duration(seconds: float) -> str:
    """A long duration in the unit that reads best.

    >>> _duration(2013.0), _duration(9000.0), _duration(3e5), _duration(0.5)
    ('33.5 min', '2.5 h', '3.47 days', '500 ms')
    """
    for unit_s, unit in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if seconds >= unit_s:
            return f"{seconds / unit_s:.3g} {unit}"
    return format_time(seconds)


def _ram_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0
