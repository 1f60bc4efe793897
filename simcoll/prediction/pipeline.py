"""Predict collective times over a range of sizes: the library behind ``simcoll predict``.

A short pipeline, each step in its own layer: place the ranks on GPUs
(:mod:`simcoll.plan.placement`), then the call's setup and, per size, its decision
(:mod:`simcoll.prediction.call`, the one place every collective call is decided: the
plan, the candidates and protocols, every candidate costed by formula
(:mod:`simcoll.prediction.closed_form`) or by simulation
(:mod:`simcoll.prediction.simulated`), the fastest kept, then the copy, launch and floor).

>>> from simcoll.topology import switch_star
>>> star = switch_star(4, link_bandwidth_bytes_per_s=100e9, link_latency_s=1e-6)
>>> rows = predict(star, "allgather", [4096, 2**20], protocol=None).rows  # the links alone
>>> [(r.size_bytes, r.algorithm, round(r.time_s * 1e6, 3)) for r in rows]  # 3 x (2 us + S/4/B)
[(4096, 'ring', 6.031), (1048576, 'ring', 13.864)]
>>> [r.protocol for r in predict(star, "allgather", [4096, 2**20]).rows]  # NCCL's pick
['LL', 'LL']
>>> [r.protocol for r in predict(star, "allgather", [4096, 2**20], algorithm="auto").rows]
['LL', 'LL128']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import networkx as nx

from simcoll.algorithms import PARAM_MAXIMUM
from simcoll.core.collectives import Collective
from simcoll.core.errors import ScheduleError, SimcollError
from simcoll.core.limits import MAX_RANKS, check_count, check_size_bytes
from simcoll.output.results import Row
from simcoll.plan.channels import Plan
from simcoll.plan.placement import per_server_ranks, place_ranks
from simcoll.plan.tuning import NcclKnobs
from simcoll.prediction.call import DEFAULTS, Machine, call_setup, decide, finished
from simcoll.prediction.call_cost import expected_s
from simcoll.prediction.closed_form import CLOSED_FORM_MODELS, closed_form_rows
from simcoll.prediction.simulated import Setup
from simcoll.topology import gpu_nodes
from simcoll.topology.calibration import Calibration

__all__ = ["Prediction", "predict"]


@dataclass(frozen=True)
class Prediction:
    """Predicted rows, the sizes skipped because they were too small to cut, the sizes
    whose ring was extended from its first steps (:mod:`simcoll.sim.periodic`), per
    size the choices passed over as too large to simulate that might have been faster
    (:func:`~simcoll.prediction.simulated.best_choice`), and the sizes ``--model
    analytical`` costed on the flow model (:mod:`simcoll.prediction.closed_form`)."""

    rows: list[Row]
    skipped: list[tuple[int, str]] = field(default_factory=list)
    extended: list[int] = field(default_factory=list)
    unsimulated: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    #: --model analytical: sizes whose choice has no exact closed form on one host and
    #: ran on the flow model instead (its row says so), with the algorithm and why.
    simulated: list[tuple[int, str]] = field(default_factory=list)


def predict(
    topology: nx.DiGraph[str],
    collective: Collective | str,
    sizes_bytes: Sequence[int],
    *,
    algorithm: str | None = DEFAULTS.algorithm,
    protocol: str | None = DEFAULTS.protocol,
    model: str = DEFAULTS.model,
    n_ranks: int | None = None,
    params: Mapping[str, int] | None = None,
    skip_too_small: bool = False,
    calibration: Calibration | Literal["default"] | None = "default",
    placement: str = DEFAULTS.placement,
    plan: Plan | str = DEFAULTS.plan,
    knobs: NcclKnobs | None = None,
    in_place: bool = False,
    progress: Callable[[], None] | None = None,
    estimate: Callable[[float], None] | None = None,
) -> Prediction:
    """Simulate one collective at each size; ``"auto"`` keeps the fastest choice per size.

    Parameters
    ----------
    algorithm
        An algorithm name; None (the default): ``"nccl"``, what nccl-tests with no
        ``NCCL_ALGO`` runs (:func:`~simcoll.prediction.choices.default_algorithm`);
        ``"auto"``: the algorithms NCCL chooses among
        (:data:`AUTO_FAMILY`, or every one for collectives that have none of them) are
        simulated where the topology supports them and the fastest is kept, per size;
        ``"all"``: the same over every algorithm of the collective; ``"nccl"``: the
        (algorithm, protocol) NCCL's own tuning model picks per size
        (:mod:`simcoll.models.nccl`), simulated; NCCL's point-to-point path for the
        collectives its model does not cost.
    protocol
        ``"LL"``, ``"LL128"``, ``"simple"`` (:mod:`simcoll.core.protocols`), ``"auto"`` (the
        default: NCCL's pick per size for ``"nccl"``, else the fastest per size), or
        ``None`` to model the links alone. For ``"nccl"`` a named protocol is
        ``NCCL_PROTO``: NCCL's model picks among the algorithms with that protocol.
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
    progress
        Called once per size simulated (a progress bar's ``advance``).
    estimate
        Called before a simulation starts with the wall seconds it is expected to take
        (:func:`~simcoll.prediction.call_cost.expected_s` over the sizes; not for the
        closed forms, which take milliseconds), so that a caller can say so first.

    Raises
    ------
    ConfigError, ScheduleError
        On an unknown collective, algorithm or protocol, a bad parameter, an algorithm
        the topology cannot run (NVLS without a reducing switch), or a size that does not
        split (unless ``skip_too_small``, which skips sizes too small to cut instead).
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    sizes_bytes = [check_size_bytes(size, "size_bytes") for size in sizes_bytes]
    nodes = _place(topology, n_ranks, placement, plan)  # n_ranks first, then the params
    _check_params(params)
    machine = Machine.of(topology, calibration)
    setup = call_setup(machine, c, nodes, algorithm=algorithm, protocol=protocol, model=model,
                       params=params, plan=plan, knobs=knobs, placement=placement)  # fmt: skip
    if model in CLOSED_FORM_MODELS:
        skipped: list[tuple[int, str]] = []
        rows, simulated = closed_form_rows(setup, sizes_bytes, params,
                                           skipped=skipped if skip_too_small else None)  # fmt: skip
        done = [finished(row, setup.topology, machine.calibration, in_place=in_place)
                for row in rows]  # fmt: skip
        return Prediction(done, skipped, simulated=simulated)
    if estimate is not None:
        estimate(expected_s(setup, sizes_bytes))
    return _simulated(setup, sizes_bytes, skip=skip_too_small, in_place=in_place,
                      progress=progress)  # fmt: skip


def _place(
    topology: nx.DiGraph[str], n_ranks: int | None, placement: str, plan: Plan | str
) -> tuple[str, ...]:
    """The GPU of every rank: the plan's, or ``placement`` of ``n_ranks`` (all GPUs)."""
    if isinstance(plan, Plan):
        return plan.rank_nodes
    if n_ranks is None:  # every GPU, or K a server
        n = per_server_ranks(topology, placement) or len(gpu_nodes(topology))
    else:
        n = check_count(n_ranks, "n_ranks", MAX_RANKS)
    return place_ranks(topology, n, placement)


def _simulated(
    setup: Setup,
    sizes_bytes: Sequence[int],
    *,
    skip: bool,
    in_place: bool,
    progress: Callable[[], None] | None = None,
) -> Prediction:
    """The decided row per size (:func:`~simcoll.prediction.call.decide`)."""
    rows: list[Row] = []
    skipped: list[tuple[int, str]] = []
    for size in sizes_bytes:
        try:
            rows.append(decide(setup, size, in_place=in_place).row)
        except SimcollError as refusal:
            if not skip or not isinstance(refusal, ScheduleError):
                raise
            skipped.append((size, refusal.message))
        if progress is not None:
            progress()
    picked = {(row.size_bytes, row.protocol) for row in rows if row.algorithm == "ring"}
    extended = sorted({size for size, proto in setup.extended if (size, proto) in picked})
    return Prediction(rows, skipped, extended, list(setup.unsimulated))


def _check_params(params: Mapping[str, int] | None) -> None:
    """Algorithm parameters are whole numbers, at least 1 (a root at least 0), at most
    their caps: refused here, before any piece count is worked out from them."""
    for key, value in (params or {}).items():
        check_count(value, key, PARAM_MAXIMUM.get(key, MAX_RANKS), minimum=int(key != "root"))
