"""``--algorithm nccl``: the (algorithm, protocol) NCCL's own tuning model picks for a call.

NCCL costs every enabled (algorithm, protocol) with its model (``tuning.cc``; here
:mod:`simcoll.models.nccl`) and runs the fastest (``enqueue.cc:topoGetAlgoInfo``). This
asks the same model, with the communicator's channels, and hands the pick to the simulator:
what NCCL would run, simulated, rather than the fastest by simulation (``auto``). NCCL picks
among what its communicator built: a plan without trees (a log of rings only) offers no
tree.
"""

from __future__ import annotations

from dataclasses import replace

from simcoll.algorithms import algorithm_names
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.protocols import Protocol
from simcoll.models.nccl import NCCL_ALGORITHMS, nccl_time_s
from simcoll.plan.tuning import protocol_allowed
from simcoll.prediction.simulated import Setup

__all__ = [
    "NCCL_DEFAULT_CHANNELS",
    "P2P_LL_THRESHOLD_BYTES",
    "costed_channels",
    "nccl_choice",
]

#: NCCL picks its channel count per machine; 16 is what it uses for large messages on
#: an 8-GPU NVSwitch node (``--model nccl`` searches no plan, and its per-channel caps
#: need a count).
NCCL_DEFAULT_CHANNELS = 16


#: NCCL runs a point-to-point operation of at most this many bytes per peer with LL, a
#: larger one with Simple (``NCCL_P2P_LL_THRESHOLD``, 16384 by default, ``enqueue.cc``).
P2P_LL_THRESHOLD_BYTES = 16384


def nccl_choice(setup: Setup, size_bytes: int) -> Setup:
    """``setup`` narrowed to the one algorithm and protocol NCCL's model picks at this size.

    The protocols are the setup's (all three unless the caller named one, as
    ``NCCL_PROTO`` does); without a protocol NCCL's model costs Simple and the pick runs
    on the links alone.

    Collectives that NCCL's model does not cost (all-to-all, send/recv, gather, scatter:
    nccl-tests runs them as grouped sends and receives) take NCCL's point-to-point path:
    the direct algorithm, with LL where each peer's block is at most
    :data:`P2P_LL_THRESHOLD_BYTES`, else Simple.

    Raises
    ------
    ConfigError
        If NCCL's model costs none of the candidates (the message says why the last
        one was refused).
    """
    n = len(setup.nodes)
    if not any(setup.collective in NCCL_ALGORITHMS.get(name, frozenset()) for name in setup.names):
        return _p2p(setup, size_bytes)
    channels = costed_channels(setup)
    best: tuple[float, str, Protocol | None] | None = None
    refusal: ConfigError | None = None
    for name in _runnable(setup):
        if setup.collective not in NCCL_ALGORITHMS.get(name, frozenset()):
            continue
        for proto in setup.protocols:
            if not protocol_allowed(proto, name):
                continue
            # the bare links (no protocol, or a calibrated "none") as Simple, NCCL's
            # full-bandwidth protocol; the pick then runs on the links alone
            costed = "simple" if proto is None or proto.name == "none" else proto.name
            try:
                time_s = nccl_time_s(setup.topology, setup.collective, name, costed, n,
                                     size_bytes, n_channels=channels,
                                     rank_nodes=setup.nodes, router=setup.router)  # fmt: skip
            except ConfigError as error:
                refusal = error
                continue
            if best is None or time_s < best[0]:
                best = (time_s, name, proto)
    if best is None:
        raise refusal or ConfigError(
            f"NCCL's model costs none of {', '.join(setup.names)} for {setup.collective.value}"
        )
    return replace(setup, names=[best[1]], protocols=[best[2]])


def costed_channels(setup: Setup) -> int:
    """The channels NCCL's model costs a call of ``setup`` with, for its pick and for
    ``--model nccl``'s time alike: the user's ``n_channels`` as asked; else the plan's
    (with no plan, :data:`NCCL_DEFAULT_CHANNELS` for ``--model nccl``, which searches
    none, and the one ring in rank order otherwise) clamped by the knobs
    (``NCCL_MIN_CTAS``...), and at least 2 (NCCL runs NVLS on 2 channels or more).

    >>> from simcoll.plan.tuning import NcclKnobs
    >>> from simcoll.topology import switch_star
    >>> star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    >>> setup = Setup(star, Collective.ALLREDUCE, ["ring"], [None], "nccl", ())
    >>> costed_channels(setup), costed_channels(replace(setup, knobs=NcclKnobs(min_channels=24)))
    (16, 24)
    >>> flow, asked = replace(setup, model="flow"), replace(setup, params={"n_channels": 4})
    >>> costed_channels(flow), costed_channels(asked)
    (2, 4)
    """
    asked = (setup.params or {}).get("n_channels")
    if asked:
        return int(asked)
    if setup.plan is not None:
        planned = setup.plan.n_channels
    else:
        planned = NCCL_DEFAULT_CHANNELS if setup.model == "nccl" else 1
    return max(2, setup.knobs.channels(planned))


def _runnable(setup: Setup) -> list[str]:
    """The candidates the plan can run: NCCL picks among the algorithms its communicator
    built, so a plan read from a log without ``Trees`` lines offers no tree (a rings-only
    log); if that leaves none, the tree's own refusal says why.

    Raises
    ------
    ConfigError
        If the plan has no trees and the tree is the only candidate (``NCCL_ALGO=Tree``).
    """
    treeless = setup.plan is not None and any(c.tree is None for c in setup.plan.channels)
    if not treeless or setup.collective is not Collective.ALLREDUCE:
        return setup.names
    names = [name for name in setup.names if name != "tree"]
    if not names and setup.names:
        raise ConfigError(f"the plan ({setup.plan_name}) has no trees for the tree algorithm")
    return names


def _p2p(setup: Setup, size_bytes: int) -> Setup:
    """NCCL's point-to-point path for ``setup`` (see :func:`nccl_choice`)."""
    if "direct" not in algorithm_names(setup.collective):
        raise ConfigError(f"NCCL's model costs none of {', '.join(setup.names)} for "
                          f"{setup.collective.value}, and its send/receive path is the "
                          "direct algorithm")  # fmt: skip
    per_peer = setup.collective.block_bytes(size_bytes, len(setup.nodes))
    wanted = "LL" if per_peer <= P2P_LL_THRESHOLD_BYTES else "simple"
    protocol = next((p for p in setup.protocols if p is not None and p.name == wanted), None)
    if protocol is None:
        protocol = next((p for p in setup.protocols if protocol_allowed(p, "direct")), None)
    return replace(setup, names=["direct"], protocols=[protocol])
