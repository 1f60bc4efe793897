"""Rows costed by formula instead of simulation: the alpha-beta closed forms and NCCL's own
tuning model (:mod:`simcoll.models`).

A call is decided as the flow model decides it (:func:`simcoll.prediction.call.decide`):
NCCL's pick per size for ``algorithm="nccl"`` (:mod:`simcoll.prediction.nccl_choice`),
else the fastest candidate; an algorithm that runs on NCCL's plan takes the plan's
channels and NCCL's per-call pieces and window (:func:`~simcoll.prediction.simulated.
planned_knobs`), so that where nothing contends the formula is the simulation's time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.protocols import Protocol
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT
from simcoll.models import alphabeta_time_s, nccl_time_s
from simcoll.output.results import Row
from simcoll.plan.channels import Plan
from simcoll.plan.tuning import default_chunks, protocol_allowed
from simcoll.prediction.choices import algorithm_params
from simcoll.prediction.nccl_choice import nccl_choice
from simcoll.prediction.simulated import Setup, nvls_call_chunks, planned_knobs
from simcoll.topology import Router

__all__ = ["CLOSED_FORM_MODELS", "closed_form_rows"]

#: Models that cost a call by formula (:mod:`simcoll.models`) instead of simulating it.
CLOSED_FORM_MODELS = ("analytical", "nccl")
#: NCCL picks its channel count per machine; 16 is what it uses for large messages on
#: an 8-GPU NVSwitch node (the ``nccl`` model needs one: per-channel caps apply).
NCCL_DEFAULT_CHANNELS = 16


def closed_form_rows(
    setup: Setup, sizes_bytes: Sequence[int], params: Mapping[str, int] | None
) -> list[Row]:
    """Rows from the alpha-beta formulas or NCCL's tuning model, one per size: NCCL's pick
    where the setup asks for it, else the fastest choice by formula."""
    router = Router(setup.topology)
    c, n = setup.collective, len(setup.nodes)
    rows: list[Row] = []
    for size in sizes_bytes:
        best: Row | None = None
        refusal: ConfigError | None = None
        picked = nccl_choice(setup, size) if setup.by_nccl and size else setup
        for name in picked.names:
            chosen = algorithm_params(name, c, params, setup.topology, n, rank_nodes=setup.nodes)
            for proto in picked.protocols:
                if not protocol_allowed(proto, name):
                    continue
                try:
                    knobs, used = _knobs(picked, name, proto, size, chosen)
                    time_s = _formula(setup.topology, c, name, proto, setup.model, n, size,
                                      knobs, setup.nodes, router, used)  # fmt: skip
                except ConfigError as error:
                    refusal = error
                    continue
                row = Row.from_time(c, name, n_ranks=n, size_bytes=size, time_s=time_s,
                                    protocol=proto.name if proto else "none",
                                    model=setup.model, root=chosen.get("root", 0))  # fmt: skip
                if best is None or row.time_s < best.time_s:
                    best = row
        if best is None:
            raise refusal or ConfigError(f"no algorithm to cost for {c.value}")
        rows.append(best)
    return rows


def _knobs(
    setup: Setup, name: str, proto: Protocol | None, size_bytes: int, chosen: dict[str, int]
) -> tuple[dict[str, int], Plan | None]:
    """The algorithm's parameters as the flow model builds them, and the plan's channels
    it uses: on the plan, its channels and NCCL's pieces and window; else ~512 KiB pieces
    (:func:`default_chunks`; NCCL's chunks for NVLS all-reduces,
    :func:`~simcoll.prediction.simulated.nvls_call_chunks`) and no plan (a ring in rank
    order, textbook trees)."""
    knobs, used = planned_knobs(setup, name, proto, size_bytes, dict(chosen))
    if used is not None:
        return {**knobs, "n_channels": used.n_channels}, used
    n = len(setup.nodes)
    if setup.collective is Collective.ALLREDUCE and name in ("nvls", "nvls_tree"):
        knobs.setdefault("n_chunks", nvls_call_chunks(name, n, size_bytes, knobs))
    knobs.setdefault("n_chunks", default_chunks(setup.collective, name, n, size_bytes))
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
) -> float:
    if model == "nccl":
        return nccl_time_s(
            topology, collective, name, _nccl_protocol(protocol), n_ranks,
            size_bytes, n_channels=params.get("n_channels", NCCL_DEFAULT_CHANNELS),
            rank_nodes=nodes, router=router,
        )  # fmt: skip
    pipelined = ("ring", "nvls", "nvls_tree", "sharp", "hierarchical", "reducescatter_allgather")
    if name not in pipelined and plan is None:  # textbook: unchunked; a plan's trees pipeline
        params = {k: v for k, v in params.items() if k != "n_chunks"}
    return alphabeta_time_s(
        topology, collective, name, n_ranks, size_bytes, protocol=protocol, rank_nodes=nodes,
        router=router, n_channels=params.get("n_channels", 1),
        n_chunks=params.get("n_chunks", 1),
        max_in_flight=params.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT),
        root=params.get("root", 0), ranks_per_switch=params.get("ranks_per_switch", 0),
        rings=[ch.ring for ch in plan.channels] if plan and name == "ring" else (),
        trees=[ch.tree for ch in plan.channels if ch.tree] if plan and name == "tree" else (),
    )  # fmt: skip


def _nccl_protocol(protocol: Protocol | None) -> str:
    """The NCCL protocol the tuning model costs: the bare links (None, or a calibrated
    "none") as Simple, NCCL's full-bandwidth protocol."""
    return "simple" if protocol is None or protocol.name == "none" else protocol.name
