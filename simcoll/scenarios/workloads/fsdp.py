"""Fully sharded data parallel (ZeRO-3, PyTorch FSDP): gather each layer, use it, drop it.

Every rank holds 1/n of each layer's parameters. Before a layer's forward, and again
before its backward, the ranks all-gather the layer; after its backward they
reduce-scatter its gradients. Like FSDP, all-gathers run on one stream (``"comm"``) and
reduce-scatters on another (``"comm 1"``), so a reduce-scatter overlaps the next
all-gather and compute. With ``prefetch`` the next all-gather (in the order forward 0..L-1,
then backward L-1..0) is issued when a layer's compute starts, so it hides behind that
compute (FSDP's forward and backward prefetch, one layer ahead); without it, only once the
compute is done. A layer's flat parameter is padded to a multiple of the rank count, as
FSDP pads it, so the all-gather and reduce-scatter size is ``ceil(bytes / n) x n``::

    compute  |     | fwd 0 | fwd 1 | bwd 1 | bwd 0 |
    comm     | AG0 | AG1   | AG1'  | AG0'  |              (prefetch)
    comm 1                         | RS1   | RS0   |

>>> from simcoll.topology import ring
>>> g = ring(2, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> r = fsdp(g, layer_params_bytes=[2_000_000], forward_s_per_layer=0.0, protocol=None,
...          backward_s_per_layer=0.0)
>>> round(r.metrics["time_s"] * 1e3, 9)  # all-gather, all-gather, reduce-scatter: 1 ms each
3.0
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Op, Session
from simcoll.scenarios.workloads._base import ParamChecker, WorkloadResult, comm_metrics
from simcoll.sim.timeline import COMM
from simcoll.topology.calibration import Calibration

__all__ = ["fsdp"]

REDUCE_SCATTER_STREAM = "comm 1"


def fsdp(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    layer_params_bytes: list[int] | None = None,
    n_layers: int | None = None,
    params_bytes: int | None = None,
    forward_s_per_layer: float | list[float] = 1e-3,
    backward_s_per_layer: float | list[float] = 2e-3,
    prefetch: bool = True,
    optimizer_s: float = 0.0,
    n_ranks: int | None = None,
    algorithm: str | None = None,
) -> WorkloadResult:
    """Simulate one FSDP training step (see the module docstring).

    Parameters
    ----------
    layer_params_bytes, n_layers, params_bytes
        Parameter bytes per layer, as for :func:`~simcoll.scenarios.workloads.ddp.ddp`.
    forward_s_per_layer, backward_s_per_layer
        Compute time of each layer: one value, or a list in forward order.
    prefetch
        Issue the next all-gather when a layer's compute starts (True) or ends (False).
    optimizer_s
        Compute after the last reduce-scatter.
    n_ranks, algorithm
        Ranks 0..n_ranks-1 (None: every GPU); algorithm of both collectives.

    Returns
    -------
    WorkloadResult
        Common metrics plus ``n_layers``, ``prefetch`` (1 or 0), ``allgather_bytes`` and
        ``reducescatter_bytes`` (nccl-tests sizes, summed over the step's calls).
    """
    check = ParamChecker("fsdp")
    layers = check.layer_bytes(layer_params_bytes, n_layers, params_bytes)
    forward = check.times_s("forward_s_per_layer", forward_s_per_layer, len(layers), "layer")
    backward = check.times_s("backward_s_per_layer", backward_s_per_layer, len(layers), "layer")
    ahead = check.flag("prefetch", prefetch)
    optimizer = check.time_s("optimizer_s", optimizer_s)
    s = Session(topology, model=model, protocol=protocol, calibration=calibration)
    ranks = check.ranks(s, n_ranks)
    n = len(ranks)
    sizes = [-(-size // n) * n for size in layers]
    order = [("forward", i) for i in range(len(layers))]
    order += [("backward", i) for i in reversed(range(len(layers)))]

    def gather(k: int, after: list[Op]) -> Op:
        phase, i = order[k]
        return s.collective("allgather", sizes[i], ranks, algorithm=algorithm, stream=COMM,
                            name=f"all-gather {phase} {i}", after=after)  # fmt: skip

    gathers = [gather(0, [])]
    scatters: list[Op] = []
    computed: list[Op] = []  # the compute before: the step goes on once it is done
    for k, (phase, i) in enumerate(order):
        if ahead and k + 1 < len(order):  # prefetch: as the layer's compute starts
            gathers.append(gather(k + 1, [gathers[k], *computed]))
        duration_s = (forward if phase == "forward" else backward)[i]
        computed = [s.compute(ranks, duration_s, f"{phase} {i}", after=[gathers[k]])]
        if phase == "backward":
            scatters = [s.collective("reducescatter", sizes[i], ranks, algorithm=algorithm,
                                     stream=REDUCE_SCATTER_STREAM, name=f"reduce-scatter {i}",
                                     after=computed)]  # fmt: skip
        if not ahead and k + 1 < len(order):  # no prefetch: once the compute is done
            gathers.append(gather(k + 1, computed))
    # one stream: the last reduce-scatter ends after the others
    s.compute(ranks, optimizer, "optimizer", after=scatters)
    timeline = s.run()
    metrics = {
        **comm_metrics(timeline, ranks),
        "n_layers": len(layers),
        "prefetch": float(ahead),
        "allgather_bytes": 2 * sum(sizes),
        "reducescatter_bytes": sum(sizes),
    }
    return WorkloadResult("fsdp", timeline, metrics)
