"""Predict collective times over a range of sizes: the library behind ``simcoll predict``.

A short pipeline, each step in its own layer: place the ranks on GPUs
(:mod:`simcoll.plan.placement`), choose the candidate algorithms and protocols
(:mod:`simcoll.prediction.choices`, :mod:`simcoll.plan.tuning`), apply the calibration, then
per size cost every candidate, by formula (:mod:`simcoll.prediction.closed_form`) or by
simulation (:mod:`simcoll.prediction.simulated`), and keep the fastest row.

>>> from simcoll.topology import switch_star
>>> star = switch_star(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
>>> rows = predict(star, "allgather", [4096, 2**20]).rows
>>> [(r.size_bytes, r.algorithm, round(r.time_s * 1e6, 3)) for r in rows]
[(4096, 'ring', 6.031), (1048576, 'ring', 13.864)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import networkx as nx

from simcoll.algorithms import PARAM_MAXIMUM, build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError
from simcoll.core.limits import MAX_RANKS, check_count, check_size_bytes
from simcoll.output.results import Row, bandwidths
from simcoll.plan.placement import map_ranks
from simcoll.plan.tuning import protocols_for, runnable_with
from simcoll.prediction.choices import DEFAULT_ALGORITHM, candidates
from simcoll.prediction.closed_form import CLOSED_FORM_MODELS, closed_form_rows
from simcoll.prediction.simulated import best_simulated_row
from simcoll.topology import gpu_nodes
from simcoll.topology.calibration import Calibration

__all__ = ["Prediction", "predict"]


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
    protocol: str | None = None,
    model: str = "flow",
    n_ranks: int | None = None,
    params: Mapping[str, int] | None = None,
    skip_too_small: bool = False,
    calibration: Calibration | None = None,
) -> Prediction:
    """Simulate one collective at each size; ``"auto"`` keeps the fastest choice per size.

    Parameters
    ----------
    algorithm
        An algorithm name; ``"auto"``: the algorithms NCCL chooses among
        (:data:`AUTO_FAMILY`, or every one for collectives that have none of them) are
        simulated where the topology supports them and the fastest is kept, per size;
        ``"all"``: the same over every algorithm of the collective.
    protocol
        ``"LL"``, ``"LL128"``, ``"simple"`` (:mod:`simcoll.core.protocols`), ``"auto"`` (the
        fastest per size), or ``None`` to model the links alone.
    params
        Algorithm parameters (``n_channels``...). ``gpus_per_node``, for hierarchical
        algorithms, defaults to the GPUs per ``host`` of the topology; ``n_chunks``
        defaults to what cuts the largest transfer into pieces of about
        :data:`CHUNK_TARGET_BYTES` (at most :data:`MAX_DEFAULT_CHUNKS`).
    calibration
        Fitted parameters (:mod:`simcoll.topology.calibration`) applied to the topology and to
        every protocol, including ``None`` (the bare links). The simulation models use
        them fully; the closed forms use the link latencies and step latencies, and the
        protocol's single efficiency.

    Raises
    ------
    ConfigError, ScheduleError
        On an unknown collective, algorithm or protocol, a bad parameter, an algorithm
        the topology cannot run (NVLS without a reducing switch), or a size that does not
        split (unless ``skip_too_small``, which skips sizes too small to cut instead).
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    n = len(gpu_nodes(topology)) if n_ranks is None else check_count(n_ranks, "n_ranks", MAX_RANKS)
    sizes_bytes = [check_size_bytes(size, "size_bytes") for size in sizes_bytes]
    _check_params(params)
    nodes = map_ranks(topology, n)
    names = candidates(c, algorithm)
    if algorithm not in ("auto", "all"):
        build_schedule(c, algorithm, n_ranks=1, size_bytes=0)  # unknown names fail early
    protocols = protocols_for(protocol)
    names = runnable_with(names, protocols)
    if calibration is not None:
        topology = calibration.apply(topology)
        protocols = [calibration.protocol(p) for p in protocols]
    rows: list[Row] = []
    skipped: list[tuple[int, str]] = []
    if model in CLOSED_FORM_MODELS:
        rows = closed_form_rows(topology, c, sizes_bytes, names, protocols, model, n, params)
    else:
        for size in sizes_bytes:
            best, refusal = best_simulated_row(
                topology, c, size, names, protocols, model, nodes, params
            )
            if best is not None:
                rows.append(best)
            elif refusal is not None:
                if not skip_too_small or not isinstance(refusal, ScheduleError):
                    raise refusal
                skipped.append((size, refusal.message))
    if calibration is not None and calibration.launch_s:
        rows = [_plus(row, calibration.launch_s) for row in rows]
    return Prediction(rows, skipped)


def _check_params(params: Mapping[str, int] | None) -> None:
    """Algorithm parameters are whole numbers, at least 1 (a root at least 0), at most
    their caps: refused here, before any piece count is worked out from them."""
    for key, value in (params or {}).items():
        check_count(value, key, PARAM_MAXIMUM.get(key, MAX_RANKS), minimum=int(key != "root"))


def _plus(row: Row, extra_s: float) -> Row:
    """``row`` taking ``extra_s`` longer (bandwidths follow)."""
    time_s = row.time_s + extra_s
    algbw, busbw = bandwidths(row.collective, row.n_ranks, row.size_bytes, time_s)
    return replace(row, time_s=time_s, algbw_bytes_per_s=algbw, busbw_bytes_per_s=busbw)
