"""Predict collective times over a range of sizes: the engine behind ``simcoll predict``.

>>> from simcoll.topology import switch_star
>>> star = switch_star(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
>>> rows = predict(star, "allgather", [4096, 2**20]).rows
>>> [(r.size_bytes, r.algorithm, round(r.time_s * 1e6, 3)) for r in rows]
[(4096, 'ring', 6.031), (1048576, 'ring', 13.864)]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from simcoll.algorithms import algorithm_names, build_schedule
from simcoll.collectives import Collective
from simcoll.engine import map_ranks, simulate
from simcoll.errors import ConfigError, ScheduleError, UnitError
from simcoll.results import Row
from simcoll.topology import gpu_nodes
from simcoll.units import parse_size_bytes

__all__ = ["Prediction", "align_size_bytes", "parse_sizes", "predict"]

#: Element size nccl-tests uses for float, the type it prints by default.
TYPE_SIZE_BYTES = 4
DEFAULT_ALGORITHM = "ring"

_RANGE = re.compile(r"^([^:]+):([^:]+)(?::(\d+))?$")


def parse_sizes(text: str) -> tuple[list[int], bool]:
    """Parse ``--sizes``: a range ``MIN:MAX[:FACTOR]`` or a list ``A,B,C``.

    A range holds MIN, MIN x FACTOR, ... up to MAX (FACTOR 2 by default), as nccl-tests'
    ``-b MIN -e MAX -f FACTOR``; bare K/M/G suffixes are binary (8G = 8 GiB). Returns the
    sizes and whether they came from a range.

    >>> parse_sizes("8:64")
    ([8, 16, 32, 64], True)
    >>> parse_sizes("1K,1M")
    ([1024, 1048576], False)
    >>> parse_sizes("1M:1K")
    Traceback (most recent call last):
    ...
    simcoll.errors.ConfigError: --sizes: range '1M:1K' ends below its start
    """
    try:
        match = _RANGE.match(text.strip())
        if match is None:
            sizes = [parse_size_bytes(part.strip()) for part in text.split(",")]
            return sizes, False
        low, high = parse_size_bytes(match.group(1)), parse_size_bytes(match.group(2))
        factor = int(match.group(3) or 2)
    except UnitError as error:
        raise ConfigError(f"--sizes: {error.message}") from None
    if low < 1:
        raise ConfigError(f"--sizes: range {text!r} must start at 1 byte or more")
    if high < low:
        raise ConfigError(f"--sizes: range {text!r} ends below its start")
    if factor < 2:
        raise ConfigError(f"--sizes: range factor in {text!r} must be 2 or more")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes, True


def align_size_bytes(collective: Collective, n_ranks: int, size_bytes: int) -> int:
    """Round a size down the way nccl-tests does: to whole float elements per block.

    >>> align_size_bytes(Collective.ALLGATHER, 3, 1000)
    996
    >>> align_size_bytes(Collective.ALLREDUCE, 3, 1001)
    1000
    """
    per = 1 if collective.n_blocks(n_ranks) == 1 or collective is Collective.SENDRECV else n_ranks
    unit = per * TYPE_SIZE_BYTES
    return size_bytes // unit * unit


@dataclass(frozen=True)
class Prediction:
    """Predicted rows, and the sizes skipped because they were too small to cut."""

    rows: list[Row]
    skipped: list[tuple[int, str]] = field(default_factory=list)


def predict(
    topology: nx.DiGraph[str],
    collective: Collective | str,
    sizes_bytes: Sequence[int],
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    model: str = "flow",
    n_ranks: int | None = None,
    params: Mapping[str, int] | None = None,
    skip_too_small: bool = False,
) -> Prediction:
    """Simulate one collective at each size; ``algorithm="auto"`` keeps the fastest.

    Raises
    ------
    ConfigError, ScheduleError
        On an unknown collective or algorithm, a bad parameter, or a size that does not
        split (unless ``skip_too_small``, which skips sizes too small to cut instead).
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    n = len(gpu_nodes(topology)) if n_ranks is None else n_ranks
    if n < 1:
        raise ConfigError(f"--ranks must be at least 1, got {n}")
    nodes = map_ranks(topology, n)
    names = algorithm_names(c) if algorithm == "auto" else [algorithm]
    rows: list[Row] = []
    skipped: list[tuple[int, str]] = []
    for size in sizes_bytes:
        best: Row | None = None
        refusal: ScheduleError | None = None
        for name in names:
            try:
                schedule = build_schedule(c, name, n_ranks=n, size_bytes=size, **dict(params or {}))
            except ScheduleError as error:
                refusal = error
                continue
            result = simulate(topology, schedule, model=model, rank_nodes=nodes)
            row = Row.from_time(c, name, n_ranks=n, size_bytes=size, time_s=result.time_s,
                                model=model, root=schedule.root)  # fmt: skip
            if best is None or row.time_s < best.time_s:
                best = row
        if best is not None:
            rows.append(best)
        elif refusal is not None:
            if not skip_too_small:
                raise refusal
            skipped.append((size, refusal.message))
    return Prediction(rows, skipped)
