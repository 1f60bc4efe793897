"""Rows by simulation: build each candidate's schedule, on the plan with NCCL's per-call
tuning for the ring and tree, run it on the symmetric fast path or in closed form where
either is exact (:mod:`simcoll.sim.symmetry`, :mod:`simcoll.sim.oneshot`) or on the
general engine, and keep the fastest choice."""

from __future__ import annotations

import collections
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

import networkx as nx
import numpy as np
import numpy.typing as npt

from simcoll.algorithms import ALGORITHMS, build_schedule
from simcoll.algorithms.chunking import default_n_chunks, pieces_per_block, transfer_count
from simcoll.algorithms.ring import PREFIX_STEPS, ring_prefix
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, LimitError, ScheduleError, SimcollError
from simcoll.core.limits import MAX_TRANSFERS
from simcoll.core.protocols import Protocol
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT, Schedule, check_pieces
from simcoll.output.results import Row
from simcoll.plan.channels import Plan
from simcoll.plan.placement import map_ranks
from simcoll.plan.tuning import (
    MAX_DEFAULT_CHUNKS,
    NVLS_CHANNELS,
    NcclKnobs,
    nvls_chunks,
    protocol_allowed,
    ring_chunks,
    tune_call,
)
from simcoll.prediction.bounds import Bounds
from simcoll.prediction.choices import algorithm_params
from simcoll.sim.channel_symmetry import channel_symmetric
from simcoll.sim.engine import SimulationResult, prepare
from simcoll.sim.oneshot import TICK_S, OneShot, link_bound_s, one_shot
from simcoll.sim.periodic import Periodic, extend_periodic, uniform_links
from simcoll.sim.symmetry import (
    RING_COLLECTIVES,
    SymmetricSchedule,
    simulate_ring_fast,
    simulate_symmetric,
)
from simcoll.topology import Router
from simcoll.topology.calibration import Calibration

T = TypeVar("T")

__all__ = [
    "EXTEND_RINGS",
    "LINK_BOUND_TICKS",
    "LINK_BOUND_TOLERANCE",
    "ONE_SHOT",
    "PERIODIC_FROM_TRANSFERS",
    "Choice",
    "Setup",
    "best_choice",
    "candidate_choices",
    "choice_schedule",
    "planned_knobs",
    "schedule_recipe",
    "zero_bytes_choice",
]

EXTEND_RINGS = False
"""Whether a ring over :data:`PERIODIC_FROM_TRANSFERS` transfers that no symmetry folds
may be simulated for its first :data:`PREFIX_STEPS` steps and extended by their pace
(:mod:`simcoll.sim.periodic`), instead of refused. Off: the extension is not exact (it
was 14.6 % fast on a 40-GPU ring of ``a100-roce-2to1`` with LL128, and 24 % on
``h100-ib-fat-tree`` with one link's latency longer, though its steps kept one pace:
``tests/prediction/test_fast_paths.py``); turned on, rows say it on stderr."""

PERIODIC_FROM_TRANSFERS = MAX_TRANSFERS
"""With :data:`EXTEND_RINGS`, a ring on a plan whose whole schedule would hold more
transfers than this (one schedule's most, 2^24) is extended from its first steps."""

LINK_BOUND_TOLERANCE = 1e-12
"""How close to the best time so far a choice's link bound may come before the choice
is taken as unable to beat it, where a tie would go to the best anyway: within the
engine's own rounding (see :func:`best_choice`), relative, plus :data:`LINK_BOUND_TICKS`
of the clock's grid."""

LINK_BOUND_TICKS = 1024
"""Ticks of the clock (:data:`simcoll.sim.oneshot.TICK_S`, 1024 of them about 0.9 ps)
that a simulated time may lie above its link bound by rounding alone: the engine rounds
each piece's time up to a tick, so a choice whose time sits on the bound still ends a
tick per piece (at most 1,024 on a connection here) after it."""

ONE_SHOT = True
"""Whether a flow-model run whose flows all start at once takes its closed form
(:mod:`simcoll.sim.oneshot`), which is exact, instead of the engine; False forces the
engine (tests compare the two)."""


@dataclass(frozen=True, eq=False)
class Setup:
    """What every size of one prediction shares: where and how the call runs.

    ``plan`` (None: every channel's ring is the rank order) gives the ring and tree
    algorithms their rings, trees and NICs; ``knobs`` are the NCCL settings of the run.
    """

    topology: nx.DiGraph[str]
    collective: Collective
    names: list[str]
    protocols: list[Protocol | None]
    model: str
    nodes: tuple[str, ...]
    params: Mapping[str, int] | None = None
    plan: Plan | None = None
    knobs: NcclKnobs = field(default_factory=NcclKnobs)
    placement: str = "linear"
    router: Router | None = None  # of topology: shared by every size and choice
    # (size, protocol) of each ring extended from its first steps, as the rows are made
    extended: list[tuple[int, str]] = field(default_factory=list)
    # (size, choices) where choices that might have been faster were too large to simulate
    unsimulated: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    by_nccl: bool = False  # each size runs the (algorithm, protocol) NCCL's model picks
    calibration: Calibration | None = None  # applied already; its launch cost and floor

    @property
    def plan_name(self) -> str:
        """What the rows say of the plan, as ``--plan`` takes it: ``nccl``, ``rank`` (one
        ring in rank order: asked for, or no servers to plan for) or a log file."""
        if self.plan is None:
            return "rank"
        return "nccl" if self.plan.source == "search" else self.plan.source


#: The algorithms that run a plan's rings or trees (the others place ranks only).
PLANNED = ("ring", "tree")


@dataclass(frozen=True, eq=False)
class Choice:
    """One (algorithm, protocol) at one size, simulated alone: its row, what ran, and the
    run's result (its time and every link's wire bytes; per-transfer times where the
    general path ran it).

    ``knobs`` are the algorithm's parameters as built (NCCL's pieces and window on a
    plan, the user's where given) and ``plan`` the plan's channels it used (None: no
    plan), so that :func:`choice_schedule` builds the same schedule again.
    """

    row: Row
    algorithm: str
    protocol: Protocol | None
    knobs: Mapping[str, int]
    plan: Plan | None
    result: SimulationResult | OneShot | Periodic

    @property
    def link_bytes(self) -> npt.NDArray[np.float64]:
        """Wire bytes over each link of the topology (graph edge order)."""
        return self.result.link_bytes


def best_choice(setup: Setup, size_bytes: int) -> tuple[Choice | None, SimcollError | None]:
    """The fastest simulated (algorithm, protocol) at one size, or why none could run.

    Choices are tried in increasing order of their lower bounds (:mod:`.bounds`), and one
    whose bound is no better than the best time so far is not simulated: it cannot win.
    A choice too large to simulate (a :class:`LimitError`: over one schedule's transfers,
    and folded by no fast path) is passed over where another ran; those whose bound was
    below the best time are listed in ``setup.unsimulated``, for callers to say so.
    Ties go to the earlier choice in ``setup.names`` x ``setup.protocols`` order, as if
    every choice were simulated. A choice headed for the general path is routed first,
    and not simulated either if its routes' link bound (:func:`link_bound_s`) is no
    better than the best time, or within :data:`LINK_BOUND_TOLERANCE` of it where a tie
    would go to the best: it could win by no more than that (a pairwise all-to-all
    against the direct one's closed form, on the same links).
    """
    choices, refusal = candidate_choices(setup, size_bytes)
    best: tuple[Choice, int] | None = None
    failed: set[str] = set()
    too_large: list[tuple[float, str, Protocol | None, LimitError]] = []
    for bound, order, name, proto, chosen in sorted(choices, key=lambda c: (c[0], c[1])):
        if name in failed or (best is not None and (bound, order) > (best[0].row.time_s, best[1])):
            continue
        beat = None if best is None else (best[0].row.time_s, best[1] < order)
        try:
            choice = _choice(setup, name, proto, size_bytes, chosen, beat)
        except LimitError as error:  # this choice only: too large to simulate
            if len(choices) == 1:
                raise
            too_large.append((bound, name, proto, error))
            continue
        except (ScheduleError, ConfigError) as error:
            if len(setup.names) == 1 and isinstance(error, ConfigError):
                raise
            refusal = error
            failed.add(name)
            continue
        if choice is None:  # its routes' link bound showed it cannot win
            continue
        if best is None or (choice.row.time_s, order) < (best[0].row.time_s, best[1]):
            best = (choice, order)
    if best is None:
        if too_large:
            raise too_large[0][3]
        return None, refusal
    could_win = [(name, proto) for bound, name, proto, _ in too_large if bound < best[0].row.time_s]
    if could_win:
        names = (f"{name}/{proto.name if proto else 'none'}" for name, proto in could_win)
        setup.unsimulated.append((size_bytes, tuple(names)))
    return best[0], refusal


Candidate = tuple[float, int, str, "Protocol | None", dict[str, int]]


def candidate_choices(setup: Setup, size_bytes: int) -> tuple[list[Candidate], SimcollError | None]:
    """Every (algorithm, protocol) to try, as (lower bound, order, name, protocol, the
    algorithm's parameters), and why an algorithm could not even be set up."""
    n = len(setup.nodes)
    refusal: SimcollError | None = None
    choices: list[Candidate] = []
    bounds = _bounds(setup) if len(setup.names) * len(setup.protocols) > 1 else None
    for name in setup.names:
        try:
            chosen = algorithm_params(name, setup.collective, setup.params, setup.topology, n,
                                      rank_nodes=setup.nodes, knobs=setup.knobs,
                                      calibration=setup.calibration)  # fmt: skip
        except (ScheduleError, ConfigError) as error:
            if len(setup.names) == 1 and isinstance(error, ConfigError):
                raise
            refusal = error
            continue
        for proto in setup.protocols:
            if protocol_allowed(proto, name):
                bound = 0.0 if bounds is None else bounds.time_s(
                    setup.collective.value, name, proto, size_bytes
                )  # fmt: skip
                choices.append((bound, len(choices), name, proto, chosen))
    return choices, refusal


def _bounds(setup: Setup) -> Bounds | None:
    """The lower bounds of this setup's choices; None for the packet model, whose
    store-and-forward costs the bounds do not cover."""
    if setup.model not in {"flow", "ideal"}:
        return None
    plan = setup.plan
    tree = plan.channels[0].tree if plan is not None and plan.n_channels else None
    return Bounds.of(setup.topology, setup.nodes, model=setup.model,
                     tree_depth=tree.depth() if tree is not None else 0)  # fmt: skip


def _choice(  # noqa: PLR0917 - one choice, and the time it must beat
    setup: Setup,
    name: str,
    proto: Protocol | None,
    size_bytes: int,
    chosen: dict[str, int],
    beat: tuple[float, bool] | None = None,
) -> Choice | None:
    """The choice, simulated; None if, about to be simulated on the general path, its
    link bound shows it cannot beat ``beat`` (the best time so far, and whether a tie
    goes to that best)."""
    chosen, used = planned_knobs(setup, name, proto, size_bytes, chosen)
    fast: tuple[Row, SimulationResult | Periodic] | None
    fast = _fast_ring(setup, name, proto, size_bytes, chosen, used)
    if fast is None:
        fast = _periodic_ring(setup, name, proto, size_bytes, chosen, used)
    if fast is not None:
        return Choice(fast[0], name, proto, chosen, used, fast[1])
    schedule = _built(setup, name, size_bytes, chosen, used)
    result: SimulationResult | OneShot | None = _channel_copies(setup, schedule, proto, used)
    if result is None:
        run = prepare(setup.topology, schedule, model=setup.model, protocol=proto,
                      rank_nodes=setup.nodes, plan=used, router=setup.router)  # fmt: skip
        # every flow at once (a direct all-to-all): the time in closed form, where exact
        shot = one_shot(run) if setup.model == "flow" and ONE_SHOT else None
        if shot is None and beat is not None and setup.model == "flow":
            bound_s, best_s = link_bound_s(run), beat[0]
            slack_s = bound_s * LINK_BOUND_TOLERANCE + LINK_BOUND_TICKS * TICK_S
            if bound_s > best_s or (beat[1] and bound_s + slack_s >= best_s):
                run.release()
                return None
        result = shot or run.run(setup.model)
        run.release()
    n = schedule.n_ranks
    row = _result_row(
        setup, schedule, result, proto, used.n_channels if used else schedule.n_channels,
        sent=int(schedule.bytes_sent_per_rank()[:n].max(initial=0)),
        received=int(schedule.bytes_received_per_rank()[:n].max(initial=0)),
    )  # fmt: skip
    return Choice(row, name, proto, chosen, used, result)


def flow_row(  # noqa: PLR0917 - one choice, as the closed forms name it
    setup: Setup,
    name: str,
    proto: Protocol | None,
    size_bytes: int,
    chosen: dict[str, int],
    router: Router | None = None,
) -> Row:
    """One (algorithm, protocol) at one size on the flow model, for a closed-form setup
    (:mod:`simcoll.prediction.closed_form`) where no formula is exact: its row."""
    flow = replace(setup, model="flow", router=setup.router or router or Router(setup.topology))
    choice = _choice(flow, name, proto, size_bytes, dict(chosen))
    if choice is None:  # only with a time to beat, which is not given
        raise SimcollError(f"{name} did not run")
    return choice.row


def smallest_bytes(setup: Setup) -> int:
    """The smallest call that moves data: one 4-byte element per block. A call of 0 bytes
    is labelled with what NCCL picks for it (NCCL itself launches nothing for it).

    >>> from simcoll.topology import switch_star
    >>> star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    >>> smallest_bytes(Setup(star, Collective.ALLTOALL, ["direct"], [None], "flow",
    ...                      ("gpu0", "gpu1", "gpu2", "gpu3")))
    16
    """
    c, n = setup.collective, len(setup.nodes)
    return 4 * {Collective.SENDRECV: 1, Collective.ALLTOALL: n}.get(c, c.n_blocks(n))


def zero_bytes_choice(setup: Setup) -> Choice:
    """A call of 0 bytes, as nccl-tests' first row times it: nothing moves, so its time
    is only what the call costs (the calibration's launch cost and floor, added by the
    caller). The row names the first candidate that runs with one of the protocols.

    >>> from simcoll.core.collectives import Collective
    >>> from simcoll.topology import switch_star
    >>> star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    >>> row = zero_bytes_choice(Setup(star, Collective.ALLTOALL, ["direct"], [None], "flow",
    ...                               ("gpu0", "gpu1", "gpu2", "gpu3"))).row
    >>> row.algorithm, row.size_bytes, row.time_s, row.busbw_bytes_per_s
    ('direct', 0, 0.0, 0.0)
    """
    name = setup.names[0]
    proto = next((p for p in setup.protocols if protocol_allowed(p, name)), None)
    row = Row.from_time(setup.collective, name, n_ranks=len(setup.nodes), size_bytes=0,
                        time_s=0.0, protocol=proto.name if proto else "none",
                        model=setup.model, root=(setup.params or {}).get("root", 0))  # fmt: skip
    row = replace(row, placement=setup.placement,
                  routing=str(setup.topology.graph.get("routing", "ecmp")),
                  plan=setup.plan_name if name in PLANNED else "")  # fmt: skip
    nothing = OneShot(0.0, np.zeros(setup.topology.number_of_edges()), ("", ""), 0)
    return Choice(row, name, proto, dict(setup.params or {}), None, nothing)


def choice_schedule(setup: Setup, choice: Choice) -> Schedule:
    """The whole schedule of ``choice`` (every transfer, whatever path timed it alone),
    to run beside other calls on one fabric; the rows' size is the call's."""
    return _built(setup, choice.algorithm, choice.row.size_bytes, dict(choice.knobs),
                  choice.plan)  # fmt: skip


def schedule_recipe(choice: Choice) -> Callable[[Setup], Schedule]:
    """:func:`choice_schedule` of ``choice`` later, holding what builds it and not the
    run that timed it (whose per-link arrays are the size of the fabric)."""
    name, size_bytes, knobs, plan = (choice.algorithm, choice.row.size_bytes,
                                     dict(choice.knobs), choice.plan)  # fmt: skip
    return lambda setup: _built(setup, name, size_bytes, knobs, plan)


def _built(
    setup: Setup, name: str, size_bytes: int, chosen: dict[str, int], used: Plan | None
) -> Schedule:
    """The schedule of one choice: on the plan's channels used, or on its own. The last
    few are kept: the protocols of one algorithm and size often cut the same schedule
    (the pieces fixed by the caller), and a million-transfer build costs seconds."""
    key = (name, size_bytes, tuple(sorted(chosen.items())))
    for kept_setup, kept_used, kept_key, schedule in _RECENT:
        if kept_setup is setup and kept_used is used and kept_key == key:
            return schedule
    if used is None:
        schedule = _schedule(setup.collective, name, len(setup.nodes), size_bytes, chosen)
    else:
        user_cut = "n_chunks" in (setup.params or {})
        schedule = _planned_schedule(setup, name, size_bytes, chosen, used, fixed=user_cut)
    _RECENT.append((setup, used, key, schedule))
    return schedule


#: The schedules :func:`_built` built last (the setup and plan held, so that they are the
#: same objects when compared, not new ones at a recycled address).
_RECENT: collections.deque[tuple[Setup, Plan | None, tuple[object, ...], Schedule]] = (
    collections.deque(maxlen=2)
)


def built_chunks(
    setup: Setup, name: str, size_bytes: int, knobs: Mapping[str, int], used: Plan | None
) -> int:
    """The pieces per channel and block :func:`_built` cuts this choice's schedule into,
    found without building it (the closed forms cost the schedule the flow model runs):
    the tuned or asked-for pieces, or one where the bytes are too few for that many and
    the caller did not fix them (:func:`_or_one_piece`, :func:`_schedule`).

    Raises
    ------
    ScheduleError
        As the build would: too few bytes per block even for those pieces.
    """
    c, n = setup.collective, len(setup.nodes)
    channels = used.n_channels if used is not None else knobs.get("n_channels", 1)
    tries: list[int]
    if used is not None:
        chunks = knobs.get("n_chunks", 1)
        fixed = "n_chunks" in (setup.params or {})
        tries = [chunks] if chunks == 1 or fixed else [chunks, 1]
    elif "n_chunks" not in inspect.signature(ALGORITHMS[c, name]).parameters:
        tries = [1]
    elif "n_chunks" in knobs:
        tries = [knobs["n_chunks"]]
    else:
        chunks = call_chunks(c, name, n, size_bytes, knobs)
        tries = [chunks, 1] if chunks > 1 else [1]
    for i, chunks in enumerate(tries):
        pieces = pieces_per_block(c, name, n, n_channels=channels, n_chunks=chunks,
                                  gpus_per_node=knobs.get("gpus_per_node", 8),
                                  planned=used is not None)  # fmt: skip
        try:
            check_pieces(c, n, size_bytes, pieces)
        except ScheduleError:
            if i == len(tries) - 1:
                raise
            continue
        return chunks
    raise AssertionError("unreachable")  # pragma: no cover


def planned_knobs(
    setup: Setup, name: str, proto: Protocol | None, size_bytes: int, chosen: dict[str, int]
) -> tuple[dict[str, int], Plan | None]:
    """The algorithm's parameters as the choice builds them, and the plan's channels it
    uses (None: no plan): NCCL's per-call tuning on the plan where the algorithm takes
    one (:func:`_tuned`), else ``chosen`` as given."""
    plan = _plan_of(setup, name)
    if plan is None:
        return chosen, None
    return _tuned(setup, name, proto, size_bytes, chosen, plan)


def _plan_of(setup: Setup, name: str) -> Plan | None:
    """The plan the algorithm runs on, if it takes one."""
    if setup.plan is None or name not in PLANNED:
        return None
    if name == "tree" and setup.collective is not Collective.ALLREDUCE:
        return None
    if name == "tree" and any(c.tree is None for c in setup.plan.channels):
        raise ConfigError(f"the plan ({setup.plan_name}) has no trees for the tree algorithm")
    return setup.plan


def _tuned(  # noqa: PLR0917 - one call's facts
    setup: Setup,
    name: str,
    proto: Protocol | None,
    size_bytes: int,
    chosen: dict[str, int],
    plan: Plan,
) -> tuple[dict[str, int], Plan]:
    """NCCL's per-call channels, pieces and window on ``plan`` (the user's
    ``n_channels``, ``n_chunks`` and ``max_in_flight`` win), and the plan restricted to
    the channels used."""
    n = len(setup.nodes)
    knobs = dict(chosen)
    channels = knobs.pop("n_channels", None)
    knobs.pop("gpus_per_node", None)  # the plan's trees already span the servers
    tuned = tune_call(
        setup.collective, name, proto.name if proto else None, n, size_bytes,
        n_channels=channels or setup.knobs.channels(plan.n_channels),
        buffsize_bytes=setup.knobs.buffsize_bytes,
    )  # fmt: skip
    used = plan.using(channels or tuned.n_channels)
    knobs.setdefault("n_chunks", tuned.n_chunks)
    knobs.setdefault("max_in_flight", tuned.max_in_flight)
    return knobs, used


def _planned_schedule(
    setup: Setup,
    name: str,
    size_bytes: int,
    knobs: dict[str, int],
    used: Plan,
    *,
    fixed: bool,
) -> Schedule:
    """The schedule on the plan's channels; one piece per block if the bytes are too few
    to cut as tuned (not if the caller ``fixed`` the pieces)."""
    n = len(setup.nodes)
    counted = {**knobs, "n_channels": used.n_channels}
    refuse_if_too_many(setup.collective, name, n, counted, planned=True)
    return _or_one_piece(
        lambda pieces: build_schedule(setup.collective, name, used, n_ranks=n,
                                      size_bytes=size_bytes, **{**knobs, "n_chunks": pieces}),
        knobs["n_chunks"], fixed=fixed,
    )  # fmt: skip


def _or_one_piece(build: Callable[[int], T], pieces: int, *, fixed: bool) -> T:
    """``build(pieces)``, or ``build(1)`` if the bytes are too few to cut that many pieces
    per block (as NCCL sends a small call whole); not where the caller ``fixed`` the
    pieces, or there is only one."""
    try:
        return build(pieces)
    except ScheduleError:
        if pieces == 1 or fixed:
            raise
        return build(1)


def _schedule(
    collective: Collective, name: str, n_ranks: int, size_bytes: int, params: dict[str, int]
) -> Schedule:
    """Build a schedule; without ``n_chunks`` given, cut as :func:`call_chunks` says."""
    fn = ALGORITHMS[collective, name]
    if "n_chunks" not in params and "n_chunks" in inspect.signature(fn).parameters:
        n_chunks = call_chunks(collective, name, n_ranks, size_bytes, params)
        refuse_if_too_many(collective, name, n_ranks, {**params, "n_chunks": n_chunks})
        if n_chunks > 1:
            try:
                return build_schedule(collective, name, n_ranks=n_ranks, size_bytes=size_bytes,
                                      n_chunks=n_chunks, **params)  # fmt: skip
            except ScheduleError:  # too few bytes per block for that many pieces: uncut
                pass
    refuse_if_too_many(collective, name, n_ranks, params)
    return build_schedule(collective, name, n_ranks=n_ranks, size_bytes=size_bytes, **params)


def refuse_if_too_many(
    collective: Collective,
    name: str,
    n_ranks: int,
    params: Mapping[str, int],
    *,
    planned: bool = False,
) -> None:
    """Refuse, before anything is built, a schedule of more transfers than one may hold
    (:data:`~simcoll.core.limits.MAX_TRANSFERS`), counted in closed form
    (:func:`~simcoll.algorithms.chunking.transfer_count`).

    Raises
    ------
    LimitError
        Naming the call and the count.
    """
    keys = ("n_channels", "n_chunks", "gpus_per_node", "ranks_per_switch")
    count = transfer_count(collective, name, n_ranks, planned=planned,
                           **{k: params[k] for k in keys if k in params})  # fmt: skip
    if count > MAX_TRANSFERS:
        raise LimitError(
            f"{collective.value}/{name} on {n_ranks} ranks would have {count} transfers, "
            f"more than the {MAX_TRANSFERS} one schedule may hold: too many to simulate; use "
            "fewer ranks, chunks or channels, or the analytical model (--model analytical: "
            "NCCL's model and the closed forms, at any size)"
        )


def call_chunks(
    collective: Collective, name: str, n_ranks: int, size_bytes: int, params: Mapping[str, int]
) -> int:
    """Pieces per channel and block of a call off the plan whose caller gives no
    ``n_chunks``: NCCL's chunks for an NVLS all-reduce (:func:`nvls_call_chunks`), else
    the simulator's rule (:func:`~simcoll.algorithms.chunking.default_n_chunks`: about
    512 KiB per transfer; stepwise algorithms whole). The flow model and the closed forms
    both cut by it."""
    if collective is Collective.ALLREDUCE and name in ("nvls", "nvls_tree"):
        return nvls_call_chunks(name, n_ranks, size_bytes, params)
    return default_n_chunks(collective, name, n_ranks, size_bytes,
                            n_channels=params.get("n_channels", 1),
                            gpus_per_node=params.get("gpus_per_node", 8))  # fmt: skip


#: The most transfers an NVLS call's pieces make while they follow NCCL's chunks one for
#: one; past it a call keeps :data:`MAX_DEFAULT_CHUNKS` pieces per shard or as many as the
#: budget allows, each several of NCCL's chunks (about 0.5 s on the compiled loop).
NVLS_TRANSFER_BUDGET = 2**19


def nvls_call_chunks(name: str, n_ranks: int, size_bytes: int, params: Mapping[str, int]) -> int:
    """NVLS and NVLS-tree all-reduce pieces per shard as NCCL pipelines them: a channel
    carries few chunks of a middle-sized call, so filling and draining its pipeline
    takes a large share of the call (:func:`simcoll.plan.tuning.nvls_chunks`), over the
    call's CTAs (``params["n_ctas"]``, NCCL's 16 by default). simcoll runs them as one:
    in the fluid model each channel's share of the links is the rest's, so the pieces
    per channel, not the channels, set the pipeline. A piece
    is one of NCCL's chunks while the call stays within :data:`NVLS_TRANSFER_BUDGET`
    transfers: paced legs (:mod:`simcoll.sim.pacing`) fill the pipeline one piece per
    leg, so a piece of several chunks would fill it as many times slower. The flow and
    analytical models both cut NVLS calls so.

    >>> nvls_call_chunks("nvls", 8, 2**32, {})  # one server: NCCL's 256 chunks
    256
    >>> nvls_call_chunks("nvls_tree", 1024, 2**30, {"gpus_per_node": 8})  # 64 of its 128
    64
    >>> nvls_call_chunks("nvls_tree", 16, 2**26, {"gpus_per_node": 8})  # 128 KiB chunks
    4
    >>> nvls_call_chunks("nvls_tree", 16, 2**26, {"gpus_per_node": 8, "n_ctas": 24})  # 64
    6
    """
    heads = min(params.get("gpus_per_node", n_ranks), n_ranks) if name == "nvls_tree" else n_ranks
    n_nodes = n_ranks // max(1, heads)
    per_chunk = nvls_transfers_per_chunk(name, n_ranks, heads)
    most = max(MAX_DEFAULT_CHUNKS, NVLS_TRANSFER_BUDGET // max(1, per_chunk))
    ctas = params.get("n_ctas", NVLS_CHANNELS)
    return nvls_chunks(name, heads, size_bytes, n_nodes=n_nodes, n_channels=ctas, max_chunks=most)


def nvls_transfers_per_chunk(name: str, n_ranks: int, heads: int) -> int:
    """Transfers an NVLS (``heads = n_ranks``) or NVLS-tree all-reduce schedule
    (:mod:`simcoll.algorithms.nvls`) makes per chunk of each shard: on one server, a
    piece per shard of n shares up, the sum down, the store and n copies; across N
    servers of g heads, two pieces (one per tree) per head, each g + 1 + 1 + g transfers
    per server and 2 (N - 1) over the network.

    >>> nvls_transfers_per_chunk("nvls", 8, 8), nvls_transfers_per_chunk("nvls_tree", 16, 8)
    (144, 608)
    """
    n_nodes = n_ranks // max(1, heads)
    if name == "nvls_tree" and n_nodes > 1:
        return 2 * heads * (n_nodes * (2 * heads + 2) + 2 * (n_nodes - 1))
    return n_ranks * (2 * n_ranks + 2)


def tries_fast_ring(setup: Setup, name: str, knobs: Mapping[str, int], plan: Plan | None) -> bool:
    """Whether a choice tries the exact symmetric ring path (:func:`_fast_ring`), for the
    run and its estimate (:mod:`simcoll.prediction.call_cost`) alike: a ring all-reduce,
    reduce-scatter or all-gather in the flow or ideal model, with no parameter the path
    does not take, on a plan or on ranks in rank order."""
    return (
        name == "ring"
        and setup.model in {"flow", "ideal"}
        and setup.collective.value in RING_COLLECTIVES
        and set(knobs) <= {"n_channels", "n_chunks", "max_in_flight"}
        and (plan is not None or setup.nodes == map_ranks(setup.topology, len(setup.nodes)))
    )


def _fast_ring(  # noqa: PLR0917 - one call's facts
    setup: Setup,
    name: str,
    proto: Protocol | None,
    size_bytes: int,
    knobs: Mapping[str, int],
    plan: Plan | None,
) -> tuple[Row, SimulationResult] | None:
    """A ring row and its result from the exact symmetric path (:mod:`simcoll.sim.symmetry`),
    if it applies.

    It applies to ring all-reduce, reduce-scatter and all-gather in the flow and ideal
    models, when the plan's rings (or the rank order) are unchanged by shifting ranks by
    some period, its channels are images of each other, and the fabric and the piece
    sizes are symmetric under those maps; otherwise None, and the general path runs.
    Same chunk choice as the general path.
    """
    n = len(setup.nodes)
    if not tries_fast_ring(setup, name, knobs, plan):
        return None
    channels = plan.n_channels if plan is not None else knobs.get("n_channels", 1)
    chunks = knobs.get("n_chunks") or ring_chunks(setup.collective, n, size_bytes, channels)
    window = knobs.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT)

    def run(pieces: int) -> tuple[SimulationResult, SymmetricSchedule] | None:
        return simulate_ring_fast(
            setup.topology, setup.collective.value, n, size_bytes, model=setup.model,
            protocol=proto, n_channels=channels, n_chunks=pieces, max_in_flight=window,
            plan=plan, round_up_pieces=True, router=setup.router,
        )  # fmt: skip

    found = _or_one_piece(run, chunks, fixed="n_chunks" in (setup.params or {}))
    if found is None:
        return None
    result, sym = found
    row = _result_row(
        setup, result.schedule, result, proto, channels,
        sent=int(sym.bytes_sent_per_rank().max(initial=0)),
        received=int(sym.bytes_received_per_rank().max(initial=0)),
    )  # fmt: skip
    return row, result


def _periodic_ring(  # noqa: PLR0917 - one call's facts
    setup: Setup,
    name: str,
    proto: Protocol | None,
    size_bytes: int,
    knobs: Mapping[str, int],
    plan: Plan | None,
) -> tuple[Row, Periodic] | None:
    """A ring row and its result from its first :data:`PREFIX_STEPS` steps, extended by their pace
    (:mod:`simcoll.sim.periodic`), where the whole ring on the plan would have more than
    :data:`PERIODIC_FROM_TRANSFERS` transfers and no symmetry folds it; None where that
    does not apply or the steps keep no one pace, and the general path runs (and
    refuses the whole ring)."""
    n = len(setup.nodes)
    if (
        not EXTEND_RINGS
        or name != "ring"
        or plan is None
        or setup.model != "flow"
        or setup.collective.value not in RING_COLLECTIVES
        or not set(knobs) <= {"n_chunks", "max_in_flight"}
    ):
        return None
    n_steps = (2 if setup.collective is Collective.ALLREDUCE else 1) * (n - 1)
    chunks, window = knobs["n_chunks"], knobs["max_in_flight"]
    if n_steps * n * plan.n_channels * chunks <= PERIODIC_FROM_TRANSFERS:
        return None
    if n_steps < 2 * PREFIX_STEPS:
        return None

    def first_steps(pieces: int) -> Schedule:
        return ring_prefix(setup.collective, n, size_bytes, PREFIX_STEPS,
                           n_channels=plan.n_channels, n_chunks=pieces, max_in_flight=window,
                           rings=plan.rings)  # fmt: skip

    schedule = _or_one_piece(first_steps, chunks, fixed="n_chunks" in (setup.params or {}))
    run = prepare(setup.topology, schedule, model="flow", protocol=proto,
                  rank_nodes=setup.nodes, plan=plan, router=setup.router)  # fmt: skip
    used = np.concatenate([*run.pair_links, np.zeros(0, dtype=np.int64)])
    if uniform_links(setup.topology, used) is not None:  # one slow link: no pace to trust
        run.release()
        return None
    whole = extend_periodic(run.run("flow"), n_steps, run.fabric.capacity_bytes_per_s)
    run.release()
    if whole is None:
        return None
    setup.extended.append((size_bytes, proto.name if proto else "none"))
    n = schedule.n_ranks  # every step sends and receives the same bytes per rank
    per_step_sent = schedule.bytes_sent_per_rank()[:n].max(initial=0) // PREFIX_STEPS
    per_step_received = schedule.bytes_received_per_rank()[:n].max(initial=0) // PREFIX_STEPS
    row = _result_row(
        setup, schedule, whole, proto, plan.n_channels,
        sent=int(per_step_sent) * n_steps, received=int(per_step_received) * n_steps,
    )  # fmt: skip
    return row, whole


def _channel_copies(
    setup: Setup, schedule: Schedule, proto: Protocol | None, plan: Plan | None
) -> SimulationResult | None:
    """The schedule on one channel of each family of copies (NCCL's channels through
    each NIC in turn, :mod:`simcoll.sim.channel_symmetry`), where that is exact; else None.

    Only for a plan's schedules in the flow and ideal models; pieces one byte apart run
    at the largest piece's size, as on the ring's symmetric path. The result's
    per-transfer arrays cover the representatives, its time and per-link bytes the whole
    schedule.
    """
    if plan is None or setup.model not in {"flow", "ideal"}:
        return None
    sym = channel_symmetric(schedule, round_up_pieces=True)
    if sym is None:
        return None
    result = simulate_symmetric(setup.topology, sym, model=setup.model, protocol=proto,
                                plan=plan, router=setup.router)  # fmt: skip
    return None if result is None else replace(result, schedule=schedule)


def _result_row(
    setup: Setup,
    schedule: Schedule,
    result: SimulationResult | OneShot | Periodic,
    protocol: Protocol | None,
    n_channels: int,
    *,
    sent: int,
    received: int,
) -> Row:
    row = Row.from_time(
        schedule.collective,
        schedule.algorithm,
        n_ranks=schedule.n_ranks,
        size_bytes=schedule.size_bytes,
        time_s=result.time_s,
        protocol=protocol.name if protocol else "none",
        model=setup.model,
        root=schedule.root,
    )
    return replace(
        row,
        max_rank_sent_bytes=sent,
        max_rank_received_bytes=received,
        max_link_bytes=float(result.link_bytes.max(initial=0.0)),
        n_channels=n_channels,
        placement=setup.placement,
        routing=str(setup.topology.graph.get("routing", "ecmp")),
        plan=setup.plan_name if schedule.algorithm in PLANNED else "",
    )
