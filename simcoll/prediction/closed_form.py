"""Rows costed by formula instead of simulation: the alpha-beta closed forms and NCCL's own
tuning model (:mod:`simcoll.models`), the fastest choice per size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.protocols import Protocol
from simcoll.core.schedule import DEFAULT_MAX_IN_FLIGHT
from simcoll.models import alphabeta_time_s, nccl_time_s
from simcoll.output.results import Row
from simcoll.plan.placement import map_ranks
from simcoll.plan.tuning import default_chunks, protocol_allowed
from simcoll.prediction.choices import algorithm_params
from simcoll.topology import Router

__all__ = ["CLOSED_FORM_MODELS", "closed_form_rows"]

#: Models that cost a call by formula (:mod:`simcoll.models`) instead of simulating it.
CLOSED_FORM_MODELS = ("analytical", "nccl")
#: NCCL picks its channel count per machine; 16 is what it uses for large messages on
#: an 8-GPU NVSwitch node (the ``nccl`` model needs one: per-channel caps apply).
NCCL_DEFAULT_CHANNELS = 16


def closed_form_rows(  # noqa: PLR0917 - predict's own arguments, passed on
    topology: nx.DiGraph[str],
    collective: Collective,
    sizes_bytes: Sequence[int],
    names: list[str],
    protocols: list[Protocol | None],
    model: str,
    n_ranks: int,
    params: Mapping[str, int] | None,
) -> list[Row]:
    """Rows from the alpha-beta formulas or NCCL's tuning model, fastest choice per size."""
    router = Router(topology)
    nodes = map_ranks(topology, n_ranks)
    rows: list[Row] = []
    for size in sizes_bytes:
        best: Row | None = None
        refusal: ConfigError | None = None
        for name in names:
            chosen = algorithm_params(name, collective, params, topology, n_ranks)
            chosen.setdefault("n_chunks", default_chunks(collective, name, n_ranks, size))
            for proto in protocols:
                if not protocol_allowed(proto, name):
                    continue
                try:
                    time_s = _formula(topology, collective, name, proto, model, n_ranks, size,
                                      chosen, nodes, router)  # fmt: skip
                except ConfigError as error:
                    refusal = error
                    continue
                row = Row.from_time(collective, name, n_ranks=n_ranks, size_bytes=size,
                                    time_s=time_s, protocol=proto.name if proto else "none",
                                    model=model, root=chosen.get("root", 0))  # fmt: skip
                if best is None or row.time_s < best.time_s:
                    best = row
        if best is None:
            raise refusal or ConfigError(f"no algorithm to cost for {collective.value}")
        rows.append(best)
    return rows


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
) -> float:
    if model == "nccl":
        return nccl_time_s(
            topology, collective, name, _nccl_protocol(protocol), n_ranks,
            size_bytes, n_channels=params.get("n_channels", NCCL_DEFAULT_CHANNELS),
            rank_nodes=nodes, router=router,
        )  # fmt: skip
    if name not in ("ring", "nvls", "sharp", "hierarchical", "reducescatter_allgather"):
        params = {k: v for k, v in params.items() if k != "n_chunks"}  # textbook: unchunked
    return alphabeta_time_s(
        topology, collective, name, n_ranks, size_bytes, protocol=protocol, rank_nodes=nodes,
        router=router, n_channels=params.get("n_channels", 1),
        n_chunks=params.get("n_chunks", 1),
        max_in_flight=params.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT),
        root=params.get("root", 0), ranks_per_switch=params.get("ranks_per_switch", 0),
    )  # fmt: skip


def _nccl_protocol(protocol: Protocol | None) -> str:
    """The NCCL protocol the tuning model costs: the bare links (None, or a calibrated
    "none") as Simple, NCCL's full-bandwidth protocol."""
    return "simple" if protocol is None or protocol.name == "none" else protocol.name
