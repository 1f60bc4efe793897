"""Rows costed by formula instead of simulation: the alpha-beta closed forms and NCCL's own
tuning model (:mod:`simcoll.models`).

A call is decided as the flow model decides it (:func:`simcoll.prediction.call.decide`):
NCCL's pick per size for ``algorithm="nccl"`` (:mod:`simcoll.prediction.nccl_choice`),
else the fastest candidate; an algorithm that runs on NCCL's plan takes the plan's
channels and NCCL's per-call pieces and window (:func:`~simcoll.prediction.simulated.
planned_knobs`), and every other algorithm the pieces the flow model cuts
(:func:`~simcoll.prediction.simulated.call_chunks`), so that where nothing contends the
formula is the simulation's time.

On ranks of one host (one server, one switch: where nothing else contends) the
analytical model gives a formula's time only where the formula is that time
(:func:`~simcoll.models.alphabeta.inexact_reason`). A choice whose own transfers share
links unevenly as its pipeline fills (NVLS and NVLS-tree all-reduce, NCCL's trees) or
whose steps overlap piece by piece (a stepwise algorithm cut into pieces by request) has
no exact closed form there: it is costed on the flow model instead, its row says
``model = flow``, and :attr:`~simcoll.prediction.pipeline.Prediction.simulated` says
which sizes and why. Across hosts the forms are estimates: rings and trees take the
plan's NICs and each pair's own pace (``python validation/analytical_matrix.py --across``
compares them with the flow model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import networkx as nx

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError, ScheduleError, SimcollError
from simcoll.core.protocols import Protocol
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT
from simcoll.models import NoClosedFormError, alphabeta_time_s, nccl_time_s
from simcoll.models._net import hosts_of
from simcoll.output.results import Row
from simcoll.plan.channels import Plan
from simcoll.plan.tuning import protocol_allowed
from simcoll.prediction.choices import algorithm_params
from simcoll.prediction.nccl_choice import costed_channels, nccl_choice
from simcoll.prediction.simulated import (
    Setup,
    built_chunks,
    call_chunks,
    flow_row,
    planned_knobs,
    smallest_bytes,
    zero_bytes_choice,
)
from simcoll.topology import Router

__all__ = ["CLOSED_FORM_MODELS", "closed_form_rows"]

#: Models that cost a call by formula (:mod:`simcoll.models`) instead of simulating it.
CLOSED_FORM_MODELS = ("analytical", "nccl")


def closed_form_rows(
    setup: Setup,
    sizes_bytes: Sequence[int],
    params: Mapping[str, int] | None,
    *,
    skipped: list[tuple[int, str]] | None = None,
) -> tuple[list[Row], list[tuple[int, str]]]:
    """Rows from the alpha-beta formulas or NCCL's tuning model, one per size: NCCL's pick
    where the setup asks for it, else the fastest choice by formula; and the sizes whose
    choice had no exact form on one host and ran on the flow model instead, with why.

    The analytical model costs the schedule the flow model would build, so it refuses
    what the flow model refuses: a size too small to cut into its pieces raises the
    builder's :class:`ScheduleError`, or, given ``skipped``, is listed there with why."""
    router = setup.router or Router(setup.topology)
    rows: list[Row] = []
    simulated: list[tuple[int, str]] = []
    for size in sizes_bytes:
        picked = nccl_choice(setup, size or smallest_bytes(setup)) if setup.by_nccl else setup
        if size == 0:  # nothing moves: the call's own cost only, as the flow model has it
            rows.append(replace(zero_bytes_choice(picked).row, model=setup.model))
            continue
        best, why_flow, refusal = _fastest(setup, picked, size, params, router)
        if best is None:
            if skipped is not None and isinstance(refusal, ScheduleError):
                skipped.append((size, refusal.message))
                continue
            raise refusal or ConfigError(f"no algorithm to cost for {setup.collective.value}")
        if why_flow:
            simulated.append((size, why_flow))
        rows.append(best)
    return rows, simulated


def _fastest(
    setup: Setup,
    picked: Setup,
    size: int,
    params: Mapping[str, int] | None,
    router: Router,
) -> tuple[Row | None, str, SimcollError | None]:
    """The fastest of ``picked``'s choices at one size by formula (or on the flow model
    where no formula is exact: why, else ""), or None and why none could be costed.

    A choice that cannot run here is passed over as the flow model passes it over
    (:func:`~simcoll.prediction.simulated.best_choice`): an algorithm with no NVLS switch
    under ``auto`` is skipped; named alone, its refusal is raised."""
    c, n = setup.collective, len(setup.nodes)
    exact = setup.model == "analytical" and len(hosts_of(setup.topology, setup.nodes)) == 1
    best: Row | None = None
    why_flow = ""
    refusal: SimcollError | None = None
    alone = len(picked.names) == 1
    for name in picked.names:
        try:
            chosen = algorithm_params(name, c, params, setup.topology, n, rank_nodes=setup.nodes,
                                      knobs=setup.knobs, calibration=setup.calibration)  # fmt: skip
        except (ConfigError, ScheduleError) as error:
            if alone and isinstance(error, ConfigError):
                raise
            refusal = error
            continue
        for proto in picked.protocols:
            if not protocol_allowed(proto, name):
                continue
            reason = ""
            try:
                knobs, used = _knobs(picked, name, proto, size, chosen)
                if setup.model == "nccl":  # the channels its pick was costed with
                    knobs["n_channels"] = costed_channels(picked)
                if setup.model == "analytical":  # the pieces the flow model cuts
                    asked = knobs if used is not None else chosen
                    knobs["n_chunks"] = built_chunks(picked, name, size, asked, used)
                try:
                    time_s = _formula(setup.topology, c, name, proto, setup.model, n, size,
                                      knobs, setup.nodes, router, used, exact=exact)  # fmt: skip
                    row = Row.from_time(c, name, n_ranks=n, size_bytes=size, time_s=time_s,
                                        protocol=proto.name if proto else "none",
                                        model=setup.model, root=chosen.get("root", 0))  # fmt: skip
                except NoClosedFormError as why:
                    reason = why.message
                    row = flow_row(picked, name, proto, size, chosen, router)
            except (ConfigError, ScheduleError) as error:
                if alone and isinstance(error, ConfigError) and reason:  # as the flow model
                    raise
                refusal = error
                continue
            if best is None or row.time_s < best.time_s:
                best, why_flow = row, reason
    return best, why_flow, refusal


def _knobs(
    setup: Setup, name: str, proto: Protocol | None, size_bytes: int, chosen: dict[str, int]
) -> tuple[dict[str, int], Plan | None]:
    """The algorithm's parameters as the flow model builds them, and the plan's channels
    it uses: on the plan, its channels and NCCL's pieces and window; else the pieces the
    flow model cuts (:func:`~simcoll.prediction.simulated.call_chunks`) and no plan (a
    ring in rank order, textbook trees)."""
    knobs, used = planned_knobs(setup, name, proto, size_bytes, dict(chosen))
    if used is not None:
        return {**knobs, "n_channels": used.n_channels}, used
    knobs.setdefault(
        "n_chunks", call_chunks(setup.collective, name, len(setup.nodes), size_bytes, knobs)
    )
    return knobs, None


def _formula(  # noqa: PLR0917 - one call of either model
    topology: nx.DiGraph[str],
    collective: Collective,
    name: str,
    protocol: Protocol | None,
    model: str,
    n_ranks: int,
    size_bytes: int,
    params: dict[str, int],
    nodes: tuple[str, ...],
    router: Router,
    plan: Plan | None = None,
    *,
    exact: bool = False,
) -> float:
    if model == "nccl":
        return nccl_time_s(
            topology, collective, name, _nccl_protocol(protocol), n_ranks,
            size_bytes, n_channels=params["n_channels"],
            rank_nodes=nodes, router=router,
        )  # fmt: skip
    planned = plan is not None and name in ("ring", "tree")
    waypoints = [{edge: hop.waypoints() for edge, hop in ch.net.items()}
                 for ch in plan.channels] if plan is not None and planned else []  # fmt: skip
    return alphabeta_time_s(
        topology, collective, name, n_ranks, size_bytes, protocol=protocol, rank_nodes=nodes,
        router=router, n_channels=params.get("n_channels", 1),
        n_chunks=params.get("n_chunks", 1),
        max_in_flight=params.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT),
        root=params.get("root", 0), ranks_per_switch=params.get("ranks_per_switch", 0),
        sm_bus_bandwidth_bytes_per_s=params.get("sm_bus_bandwidth_bytes_per_s", 0),
        rings=[ch.ring for ch in plan.channels] if plan and name == "ring" else (),
        trees=[ch.tree for ch in plan.channels if ch.tree] if plan and name == "tree" else (),
        waypoints=waypoints,
        exact=exact,
    )  # fmt: skip


def _nccl_protocol(protocol: Protocol | None) -> str:
    """The NCCL protocol the tuning model costs: the bare links (None, or a calibrated
    "none") as Simple, NCCL's full-bandwidth protocol."""
    return "simple" if protocol is None or protocol.name == "none" else protocol.name
