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
from typing import Literal

import networkx as nx

from simcoll.algorithms import PARAM_MAXIMUM, build_schedule
from simcoll.core.collectives import Collective, local_copy_s
from simcoll.core.errors import ConfigError, ScheduleError
from simcoll.core.limits import MAX_RANKS, check_count, check_size_bytes
from simcoll.output.results import Row, bandwidths
from simcoll.plan.channels import Plan
from simcoll.plan.placement import place_ranks
from simcoll.plan.search import search_plan
from simcoll.plan.tuning import NcclKnobs, protocols_for, runnable_with
from simcoll.prediction.choices import DEFAULT_ALGORITHM, candidates
from simcoll.prediction.closed_form import CLOSED_FORM_MODELS, closed_form_rows
from simcoll.prediction.nccl_choice import nccl_choice
from simcoll.prediction.simulated import Setup, best_simulated_row
from simcoll.topology import Router, gpu_nodes
from simcoll.topology.calibration import Calibration

__all__ = ["Prediction", "predict"]


@dataclass(frozen=True)
class Prediction:
    """Predicted rows, the sizes skipped because they were too small to cut, and the
    sizes whose ring was extended from its first steps (:mod:`simcoll.sim.periodic`)."""

    rows: list[Row]
    skipped: list[tuple[int, str]] = field(default_factory=list)
    extended: list[int] = field(default_factory=list)


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
    calibration: Calibration | Literal["default"] | None = "default",
    placement: str = "linear",
    plan: Plan | str = "nccl",
    knobs: NcclKnobs | None = None,
    in_place: bool = False,
) -> Prediction:
    """Simulate one collective at each size; ``"auto"`` keeps the fastest choice per size.

    Parameters
    ----------
    algorithm
        An algorithm name; ``"auto"``: the algorithms NCCL chooses among
        (:data:`AUTO_FAMILY`, or every one for collectives that have none of them) are
        simulated where the topology supports them and the fastest is kept, per size;
        ``"all"``: the same over every algorithm of the collective; ``"nccl"``: the
        (algorithm, protocol) NCCL's own tuning model picks per size
        (:mod:`simcoll.models.nccl`), simulated.
    protocol
        ``"LL"``, ``"LL128"``, ``"simple"`` (:mod:`simcoll.core.protocols`), ``"auto"`` (the
        fastest per size), or ``None`` to model the links alone.
    params
        Algorithm parameters (``n_channels``...); they win over the plan's and NCCL's
        tuning. ``gpus_per_node``, for hierarchical algorithms, defaults to the GPUs per
        ``host`` of the topology.
    calibration
        Fitted parameters (:mod:`simcoll.topology.calibration`) applied to the topology
        and to every protocol, including ``None`` (the bare links): ``"default"`` (the
        default) takes those the topology file carries, ``None`` models bare links.
    placement
        Where ranks run: ``linear``, ``random[:SEED]`` or a file
        (:func:`simcoll.plan.placement.place_ranks`).
    plan
        ``"nccl"`` (the default): the channels, rings, trees and NICs NCCL's search builds
        (:func:`simcoll.plan.search.search_plan`), with NCCL's per-call channels and
        pieces (:func:`simcoll.plan.tuning.tune_call`); ``"rank"``: one ring in rank
        order per channel, pieces of about 512 KiB (the textbook ring); or a
        :class:`~simcoll.plan.channels.Plan` (e.g. read from an NCCL log), whose ranks'
        GPUs win over ``placement``.
    knobs
        NCCL's environment settings of the run (channels, buffer, algorithm, protocol).
    in_place
        Time in-place calls (nccl-tests' second half: the input lies inside the output).
        Out-of-place calls (the default, nccl-tests' first half) also copy each GPU's own
        block from input to output (:meth:`Collective.local_copy_bytes`): where the
        topology gives ``gpu_memory_bandwidth_bytes_per_s``, a call takes that copy's
        reading and writing at the memory's bandwidth longer, in every model, as NCCL's
        kernels copy in the pass that sends (:func:`~simcoll.core.collectives.local_copy_s`).

    Raises
    ------
    ConfigError, ScheduleError
        On an unknown collective, algorithm or protocol, a bad parameter, an algorithm
        the topology cannot run (NVLS without a reducing switch), or a size that does not
        split (unless ``skip_too_small``, which skips sizes too small to cut instead).
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    sizes_bytes = [check_size_bytes(size, "size_bytes") for size in sizes_bytes]
    if not isinstance(plan, Plan) and plan not in ("nccl", "rank"):
        raise ConfigError(f"expected 'nccl', 'rank' or a Plan, got {plan!r}", field="plan")
    nodes = _place(topology, n_ranks, placement, plan)  # n_ranks first, then the params
    _check_params(params)
    knobs = knobs or NcclKnobs()
    by_nccl = algorithm == "nccl"
    algorithm = knobs.algorithm or ("auto" if by_nccl else algorithm)
    names = candidates(c, algorithm)
    if algorithm not in ("auto", "all"):
        build_schedule(c, algorithm, n_ranks=1, size_bytes=0)  # unknown names fail early
    protocols = protocols_for(knobs.protocol or ("auto" if by_nccl else protocol))
    names = runnable_with(names, protocols)
    if calibration == "default":
        calibration = topology.graph.get("calibration")
    if calibration is not None:
        topology = calibration.apply(topology)
        protocols = [calibration.protocol(p) for p in protocols]
    chosen_plan = plan if isinstance(plan, Plan) else None
    if plan == "nccl":
        chosen_plan = search_plan(topology, nodes, placement=placement)
        if chosen_plan.source == "rank order":  # no servers: the textbook ring
            chosen_plan = None
    setup = Setup(topology, c, names, protocols, model, nodes, params, chosen_plan, knobs,
                  placement, None if model in CLOSED_FORM_MODELS else Router(topology))  # fmt: skip
    if model in CLOSED_FORM_MODELS:
        prediction = Prediction(closed_form_rows(topology, c, sizes_bytes, names, protocols,
                                                 model, len(nodes), params))  # fmt: skip
    else:
        prediction = _simulated(setup, sizes_bytes, by_nccl=by_nccl, skip=skip_too_small)
    memory_bandwidth = topology.graph.get("gpu_memory_bandwidth_bytes_per_s")
    if memory_bandwidth and not in_place and c.copies_locally:
        rows = [_plus(row, local_copy_s(c, row.size_bytes, row.n_ranks, memory_bandwidth))
                for row in prediction.rows]  # fmt: skip
        prediction = Prediction(rows, prediction.skipped, prediction.extended)
    if calibration is not None and (calibration.launch_s or calibration.floor_s):
        rows = [_called(row, calibration) for row in prediction.rows]
        prediction = Prediction(rows, prediction.skipped, prediction.extended)
    if in_place:
        rows = [replace(row, in_place=True) for row in prediction.rows]
        prediction = Prediction(rows, prediction.skipped, prediction.extended)
    return prediction


def _place(
    topology: nx.DiGraph[str], n_ranks: int | None, placement: str, plan: Plan | str
) -> tuple[str, ...]:
    """The GPU of every rank: the plan's, or ``placement`` of ``n_ranks`` (all GPUs)."""
    if isinstance(plan, Plan):
        return plan.rank_nodes
    n = len(gpu_nodes(topology)) if n_ranks is None else check_count(n_ranks, "n_ranks", MAX_RANKS)
    return place_ranks(topology, n, placement)


def _simulated(
    setup: Setup, sizes_bytes: Sequence[int], *, by_nccl: bool, skip: bool
) -> Prediction:
    """The fastest simulated row per size (NCCL's pick, simulated, with ``by_nccl``)."""
    rows: list[Row] = []
    skipped: list[tuple[int, str]] = []
    for size in sizes_bytes:
        best, refusal = best_simulated_row(nccl_choice(setup, size) if by_nccl else setup, size)
        if best is not None:
            rows.append(best)
        elif refusal is not None:
            if not skip or not isinstance(refusal, ScheduleError):
                raise refusal
            skipped.append((size, refusal.message))
    picked = {(row.size_bytes, row.protocol) for row in rows if row.algorithm == "ring"}
    extended = sorted({size for size, proto in setup.extended if (size, proto) in picked})
    return Prediction(rows, skipped, extended)


def _check_params(params: Mapping[str, int] | None) -> None:
    """Algorithm parameters are whole numbers, at least 1 (a root at least 0), at most
    their caps: refused here, before any piece count is worked out from them."""
    for key, value in (params or {}).items():
        check_count(value, key, PARAM_MAXIMUM.get(key, MAX_RANKS), minimum=int(key != "root"))


def _called(row: Row, calibration: Calibration) -> Row:
    """``row`` as a call timed alone: its launch cost added, and at least the floor."""
    time_s = max(row.time_s + calibration.launch_s, calibration.floor_s)
    return _plus(row, time_s - row.time_s)


def _plus(row: Row, extra_s: float) -> Row:
    """``row`` taking ``extra_s`` longer (bandwidths follow)."""
    time_s = row.time_s + extra_s
    algbw, busbw = bandwidths(row.collective, row.n_ranks, row.size_bytes, time_s)
    return replace(row, time_s=time_s, algbw_bytes_per_s=algbw, busbw_bytes_per_s=busbw)
