"""Pipeline parallelism: stages on consecutive ranks, micro-batches passed by copies.

Stage i runs on rank i. A micro-batch's forward on stage i waits for its activations
from stage i - 1 and, once computed, copies ``activation_bytes`` to stage i + 1; its
backward on stage i waits for the gradient from stage i + 1 and copies one of the same
size back to stage i - 1. Copies between one pair of ranks, one direction, go one after
another (stream ``"p2p i->j"``); the sender goes on computing meanwhile.

Two orders of work per stage (``schedule``):

``"gpipe"`` (Huang et al. 2019)
    all forwards, then all backwards (a flush per step);
``"1f1b"`` (PipeDream-Flush, Narayanan et al. 2021)
    ``n_stages - i - 1`` warm-up forwards on stage i, then one forward and one backward in
    turn, then the remaining backwards.

With free communication both take ``(m + p - 1) x (f + b)`` for ``m`` micro-batches on
``p`` stages, a bubble of ``(p - 1) / (m + p - 1)`` of the step::

    stage 0 | F0 F1 F2 F3 .  .  .  .  .  .  .  B0 B1 B2 B3 |
    stage 1 |    F0 F1 F2 F3 .  .  .  .  .  B0 B1 B2 B3    |     (GPipe, 4 x 2, f = b)

>>> from simcoll.topology import ring
>>> g = ring(4, link_bandwidth_bytes_per_s=1e12, link_latency_s=0.0)
>>> m = pipeline(g, n_microbatches=4, activation_bytes=0, stage_forward_s=1e-3,
...              stage_backward_s=2e-3).metrics
>>> round(m["time_s"] * 1e3, 9), round(m["bubble_fraction"], 9)  # (4 + 3) x 3 ms, 3/7
(21.0, 0.428571429)
"""

from __future__ import annotations

from typing import Literal

import networkx as nx

from simcoll.core.errors import SimulationError
from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Op, Session
from simcoll.scenarios.workloads._base import ParamChecker, WorkloadResult, comm_metrics
from simcoll.topology.calibration import Calibration

__all__ = ["SCHEDULES", "pipeline", "stage_order"]

SCHEDULES = ("gpipe", "1f1b")
FORWARD, BACKWARD = "forward", "backward"


def stage_order(
    schedule: str, *, stage: int, n_stages: int, n_microbatches: int
) -> list[tuple[str, int]]:
    """The (phase, micro-batch) work of one stage, in the order the stage runs it.

    >>> stage_order("1f1b", stage=0, n_stages=2, n_microbatches=3)
    [('forward', 0), ('forward', 1), ('backward', 0), ('forward', 2), ('backward', 1), \
('backward', 2)]
    """
    m = n_microbatches
    if schedule == "gpipe":
        return [(FORWARD, j) for j in range(m)] + [(BACKWARD, j) for j in range(m)]
    warm = min(n_stages - stage - 1, m)
    order = [(FORWARD, j) for j in range(warm)]
    for j in range(m - warm):
        order += [(FORWARD, warm + j), (BACKWARD, j)]
    return order + [(BACKWARD, j) for j in range(m - warm, m)]


def pipeline(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    n_stages: int | None = None,
    n_microbatches: int = 8,
    activation_bytes: int = 32 * 2**20,
    stage_forward_s: float | list[float] = 1e-3,
    stage_backward_s: float | list[float] = 2e-3,
    schedule: str = "gpipe",
) -> WorkloadResult:
    """Simulate one pipeline-parallel training step (see the module docstring).

    Parameters
    ----------
    n_stages
        Stages, on ranks 0..n_stages-1 (None: every GPU).
    n_microbatches
        Micro-batches per step.
    activation_bytes
        Bytes of each activation copy (and of each gradient copy back).
    stage_forward_s, stage_backward_s
        Compute time of one micro-batch on a stage: one value, or a list per stage.
    schedule
        ``"gpipe"`` or ``"1f1b"``.

    Returns
    -------
    WorkloadResult
        Common metrics plus ``n_stages``, ``n_microbatches``, ``bubble_fraction`` (the
        share of the step the stages are not computing, averaged over stages) and
        ``ideal_bubble_fraction`` = (p - 1) / (m + p - 1), the closed form for uniform
        stages and free communication.
    """
    check = ParamChecker("pipeline")
    order_name = check.choice("schedule", schedule, SCHEDULES)
    m = check.count("n_microbatches", n_microbatches)
    size = check.size_bytes("activation_bytes", activation_bytes)
    s = Session(topology, model=model, protocol=protocol, calibration=calibration)
    p = len(check.ranks(s, n_stages, name="n_stages"))
    compute = {
        FORWARD: check.times_s("stage_forward_s", stage_forward_s, p, "stage"),
        BACKWARD: check.times_s("stage_backward_s", stage_backward_s, p, "stage"),
    }
    orders = [stage_order(order_name, stage=i, n_stages=p, n_microbatches=m) for i in range(p)]
    done = [0] * p
    # inbox[phase, stage, micro-batch]: the copy that brings the stage that work's input
    inbox: dict[tuple[str, int, int], Op] = {}
    progress = True
    while progress:  # each stage as far as its inputs exist, in turn, until all are made
        progress = False
        for i in range(p):
            while done[i] < len(orders[i]):
                phase, j = orders[i][done[i]]
                needs = (phase == FORWARD and i > 0) or (phase == BACKWARD and i < p - 1)
                if needs and (phase, i, j) not in inbox:
                    break
                after = [inbox[phase, i, j]] if needs else []
                work = s.compute([i], compute[phase][i], f"{phase} {j}", after=after)
                peer = i + 1 if phase == FORWARD else i - 1
                if 0 <= peer < p:  # the sender goes on computing while its copy runs
                    inbox[phase, peer, j] = s.copy(i, peer, size, stream=f"p2p {i}->{peer}",
                                                   name=f"{phase} {j} {i}->{peer}",
                                                   after=[work])  # fmt: skip
                done[i] += 1
                progress = True
    if done != [len(order) for order in orders]:  # pragma: no cover - both orders finish
        raise SimulationError(f"pipeline: stages wait for each other ({order_name})")
    timeline = s.run()
    busy_s = m * (sum(compute[FORWARD]) + sum(compute[BACKWARD]))
    total_s = p * timeline.time_s
    metrics = {
        **comm_metrics(timeline, range(p)),
        "n_stages": p,
        "n_microbatches": m,
        "bubble_fraction": 1 - busy_s / total_s if total_s > 0 else 0.0,
        "ideal_bubble_fraction": (p - 1) / (m + p - 1),
    }
    return WorkloadResult("pipeline", timeline, metrics)
