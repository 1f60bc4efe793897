"""One collective call, decided in one place: what runs when a group of GPUs calls a
collective of some size, and how long it takes alone.

``simcoll predict``, a scenario point and every collective of a workload
(:mod:`simcoll.prediction.session`) go through here, so the same call gets the same
answer wherever it comes from:

1. :class:`Machine`: the topology with its calibration applied (the file's own by
   default) and one router that every call on it shares;
2. :func:`call_setup`: for a group of GPUs, the plan NCCL's search builds for exactly
   those GPUs (channels, rings, trees, NICs, PXN), the candidate algorithms and the
   protocols, with the defaults of :data:`DEFAULTS` (the collective's usual algorithm,
   the fastest protocol per size);
3. :func:`decide`: at one size, NCCL's per-call tuning on the plan, every candidate
   simulated alone (:func:`simcoll.prediction.simulated.best_choice`) and the fastest
   kept, then the out-of-place copy, the calibration's launch cost and floor
   (:func:`finished`).

>>> from simcoll.topology import switch_star
>>> machine = Machine.of(switch_star(4, link_bandwidth_bytes_per_s=100e9,
...                                   link_latency_s=1e-6))
>>> setup = call_setup(machine, "allgather", machine.gpus(4), protocol=None)
>>> call = decide(setup, 2**20)  # a ring: 3 steps of 2 us (two links) + 1 MiB / 4 / 100 GB/s
>>> call.row.algorithm, round(call.row.time_s * 1e6, 3), call.choice.result.model
('ring', 13.864, 'flow')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

import networkx as nx

from simcoll.algorithms import build_schedule
from simcoll.core.collectives import Collective, local_copy_s
from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.schedule import Schedule
from simcoll.output.results import Row, bandwidths
from simcoll.plan.channels import Plan
from simcoll.plan.placement import map_ranks, nvls_tree_servers
from simcoll.plan.search import search_plan
from simcoll.plan.tuning import NcclKnobs, protocols_for, runnable_with
from simcoll.prediction.choices import candidates, default_algorithm
from simcoll.prediction.nccl_choice import nccl_choice
from simcoll.prediction.simulated import (
    Choice,
    Setup,
    best_choice,
    choice_schedule,
    smallest_bytes,
    zero_bytes_choice,
)
from simcoll.topology import Router, gpu_nodes
from simcoll.topology.calibration import Calibration

__all__ = [
    "DEFAULTS",
    "Decided",
    "Machine",
    "call_schedule",
    "call_setup",
    "decide",
    "finished",
]


@dataclass(frozen=True)
class Defaults:
    """What a call runs when its caller says nothing: the same for ``simcoll predict``,
    ``simcoll run``, the Python API and workloads."""

    algorithm: None = None  # NCCL's choice: choices.default_algorithm
    protocol: str = "auto"  # the fastest of LL, LL128 and simple, per size
    model: str = "flow"
    plan: str = "nccl"
    placement: str = "linear"
    calibration: str = "default"  # the parameters the topology file names


#: The defaults of every entry point (see :class:`Defaults`).
DEFAULTS = Defaults()


@dataclass(frozen=True, eq=False)
class Machine:
    """A topology as calls run on it: its calibration applied, and what every call on it
    shares (one router, so that routes found for one call serve the next).

    ``topology`` is the calibrated graph; ``calibration`` (None: bare links) also
    calibrates each protocol and gives each call its launch cost and floor.
    """

    topology: nx.DiGraph[str]
    calibration: Calibration | None
    router: Router

    @classmethod
    def of(
        cls,
        topology: nx.DiGraph[str],
        calibration: Calibration | Literal["default"] | None = "default",
    ) -> Machine:
        """``topology`` with ``calibration`` applied: ``"default"`` takes the parameters
        the topology file carries (none: the bare links), None the bare links."""
        if calibration == "default":
            found = topology.graph.get("calibration")
            calibration = found if isinstance(found, Calibration) else None
        if calibration is not None:
            topology = calibration.apply(topology)
        return cls(topology, calibration, Router(topology))

    def gpus(self, n_ranks: int) -> tuple[str, ...]:
        """The GPUs of ranks 0..n_ranks-1 (GPU ``rank`` r for rank r)."""
        return map_ranks(self.topology, n_ranks)

    @property
    def n_gpus(self) -> int:
        """How many GPUs the topology has."""
        return len(gpu_nodes(self.topology))


def call_setup(
    machine: Machine,
    collective: Collective | str,
    nodes: tuple[str, ...],
    *,
    algorithm: str | None = DEFAULTS.algorithm,
    protocol: str | None = DEFAULTS.protocol,
    model: str = DEFAULTS.model,
    params: Mapping[str, int] | None = None,
    plan: Plan | str = DEFAULTS.plan,
    knobs: NcclKnobs | None = None,
    placement: str = DEFAULTS.placement,
) -> Setup:
    """What every size of a call of ``collective`` by the GPUs ``nodes`` shares: the
    candidates, the protocols (calibrated) and the plan.

    ``algorithm`` None is NCCL's choice (:func:`default_algorithm`); ``auto``,
    ``all`` and ``nccl`` are as for :func:`simcoll.prediction.predict`. ``protocol`` None
    runs the links alone. ``plan`` ``"nccl"`` searches NCCL's channels for exactly these
    GPUs (none where they have no servers: one ring in rank order); ``"rank"`` that ring;
    a :class:`Plan` is taken as given.
    """
    c = collective if isinstance(collective, Collective) else Collective.parse(collective)
    if not isinstance(plan, Plan) and plan not in ("nccl", "rank"):
        raise ConfigError(f"expected 'nccl', 'rank' or a Plan, got {plan!r}", field="plan")
    knobs = knobs or NcclKnobs()
    asked = default_algorithm(c) if algorithm is None else algorithm
    by_nccl = asked == "nccl"
    name = knobs.algorithm or ("auto" if by_nccl else asked)
    names = candidates(c, name)
    if name not in ("auto", "all"):
        build_schedule(c, name, n_ranks=1, size_bytes=0)  # unknown names fail early
    protocols = protocols_for(knobs.protocol or protocol)  # for nccl: NCCL_PROTO's role
    spans = nvls_tree_servers(machine.topology, nodes, machine.router)
    if name == "all" and "nvls_tree" in names and not spans:
        names.remove("nvls_tree")  # only where its servers are (by name it says why not)
    if by_nccl and name == "auto" and c is Collective.ALLREDUCE and spans:
        names.append("nvls_tree")  # NCCL's NVLSTree: among its picks across servers
    if by_nccl and name == "auto" and c is Collective.ALLREDUCE and knobs.collnet_enable:
        names += ["collnet_direct", "collnet_chain"]  # NCCL_COLLNET_ENABLE=1: costed too
    names = runnable_with(names, protocols)
    if machine.calibration is not None:
        protocols = [machine.calibration.protocol(p) for p in protocols]
    chosen = plan if isinstance(plan, Plan) else None
    if plan == "nccl" and model != "nccl":  # NCCL's model counts its own channels
        chosen = search_plan(machine.topology, nodes, placement=placement,
                             router=machine.router)  # fmt: skip
        if chosen.source == "rank order":  # no servers: the textbook ring
            chosen = None
    return Setup(machine.topology, c, names, protocols, model, nodes, params, chosen, knobs,
                 placement, machine.router,
                 by_nccl=by_nccl, calibration=machine.calibration)  # fmt: skip


@dataclass(frozen=True, eq=False)
class Decided:
    """What one call runs at one size, and how long it takes alone.

    ``row`` is the call as ``simcoll predict`` prints it: the fastest choice's time with
    the out-of-place copy, the launch cost and the floor (:func:`finished`).
    ``choice`` is what ran: the algorithm, protocol, pieces, the plan's channels used,
    and the result of running it alone (``transfers_s`` is that result's time: the call's
    transfers alone, before the copy, launch and floor). Before its first transfer a call
    waits ``delay_s`` (launch and copy); it takes at least ``floor_s`` in all.
    """

    row: Row
    choice: Choice
    delay_s: float
    floor_s: float

    @property
    def transfers_s(self) -> float:
        """The time of the call's transfers alone, from the first issued to the last."""
        return self.choice.row.time_s


def decide(setup: Setup, size_bytes: int, *, in_place: bool = False) -> Decided:
    """The fastest (algorithm, protocol) of ``setup`` at one size, simulated alone, with
    the call's copy, launch and floor. A call of 0 bytes moves nothing: it takes the
    launch cost and the floor only (:func:`zero_bytes_choice`), whatever the collective.

    Raises
    ------
    SimcollError
        Why no candidate could run (a size that does not split, an algorithm the
        topology cannot run...).
    """
    chosen: Choice | None
    refusal: SimcollError | None = None
    if size_bytes == 0:  # nothing moves: the call's own cost only (nccl-tests' 0 B row)
        chosen = zero_bytes_choice(nccl_choice(setup, smallest_bytes(setup)) if setup.by_nccl
                                   else setup)  # fmt: skip
    else:
        chosen, refusal = best_choice(nccl_choice(setup, size_bytes) if setup.by_nccl else setup,
                                      size_bytes)  # fmt: skip
    if chosen is None:
        raise refusal or SimcollError(f"no algorithm ran for {setup.collective.value}")
    copy_s = copy_time_s(setup, size_bytes, in_place=in_place)
    calibration = setup.calibration
    launch_s = calibration.launch_s if calibration is not None else 0.0
    floor_s = calibration.floor_s if calibration is not None else 0.0
    row = finished(chosen.row, setup.topology, calibration, in_place=in_place)
    return Decided(row, chosen, delay_s=launch_s + copy_s, floor_s=floor_s)


def call_schedule(setup: Setup, decided: Decided) -> Schedule:
    """Every transfer of the decided call, to run beside other calls on one fabric."""
    return choice_schedule(setup, decided.choice)


def copy_time_s(setup: Setup, size_bytes: int, *, in_place: bool) -> float:
    """The out-of-place call's own-block copy (:func:`local_copy_s`) at the topology's
    GPU memory bandwidth; 0 in place, or where the topology gives no such bandwidth."""
    memory = setup.topology.graph.get("gpu_memory_bandwidth_bytes_per_s")
    if not memory or in_place or not setup.collective.copies_locally:
        return 0.0
    return local_copy_s(setup.collective, size_bytes, len(setup.nodes), memory)


def finished(
    row: Row, topology: nx.DiGraph[str], calibration: Calibration | None, *, in_place: bool
) -> Row:
    """``row`` (the call's transfers alone) as a call: an out-of-place call's own-block
    copy at the topology's ``gpu_memory_bandwidth_bytes_per_s``, then the calibration's
    launch cost added and its floor applied, as ``simcoll predict`` prints it."""
    memory = topology.graph.get("gpu_memory_bandwidth_bytes_per_s")
    c = Collective.parse(row.collective)
    if memory and not in_place and c.copies_locally:
        row = _plus(row, local_copy_s(c, row.size_bytes, row.n_ranks, memory))
    if calibration is not None and (calibration.launch_s or calibration.floor_s):
        time_s = max(row.time_s + calibration.launch_s, calibration.floor_s)
        row = _plus(row, time_s - row.time_s)
    return replace(row, in_place=True) if in_place else row


def _plus(row: Row, extra_s: float) -> Row:
    """``row`` taking ``extra_s`` longer (bandwidths follow)."""
    time_s = row.time_s + extra_s
    algbw, busbw = bandwidths(row.collective, row.n_ranks, row.size_bytes, time_s)
    return replace(row, time_s=time_s, algbw_bytes_per_s=algbw, busbw_bytes_per_s=busbw)
