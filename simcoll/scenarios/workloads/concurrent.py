"""Several rank groups running collectives at once on one fabric, and what it costs them.

Each group (a communicator) runs one collective call on its own stream; all start at
time 0 and share the links they cross. Each group is then run alone, in a session of
its own, and its slowdown is its time together over its time alone.

Groups are given as lists of ranks, or made by splitting ``n_ranks`` into ``n_groups``:
``"contiguous"`` (0 1 | 2 3) or ``"strided"`` (0 2 | 1 3).

>>> from simcoll.topology import ring
>>> g = ring(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
>>> m = concurrent(g, n_groups=2, size_bytes=2_000_000, protocol=None).metrics  # own links
>>> round(m["time_s_group_0"] * 1e3, 9), m["max_slowdown"]
(2.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import networkx as nx

from simcoll.core.collectives import Collective
from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Session
from simcoll.scenarios.workloads._base import ParamChecker, WorkloadResult, comm_metrics
from simcoll.sim.timeline import COMM, Timeline
from simcoll.topology.calibration import Calibration

__all__ = ["LAYOUTS", "concurrent"]

LAYOUTS = ("contiguous", "strided")


def concurrent(
    topology: nx.DiGraph[str],
    *,
    model: str = DEFAULTS.model,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    groups: list[list[int]] | None = None,
    n_groups: int = 2,
    layout: str = "contiguous",
    n_ranks: int | None = None,
    collective: str = "allreduce",
    size_bytes: int = 64 * 2**20,
    algorithm: str | None = None,
) -> WorkloadResult:
    """Run one collective in every group at once, and each group alone.

    Parameters
    ----------
    groups
        Lists of ranks, one per group; a rank may be in several groups (each group is
        its own communicator, on its own stream). Overrides ``n_groups``/``layout``.
    n_groups, layout, n_ranks
        Otherwise: ranks 0..n_ranks-1 (None: every GPU) split into ``n_groups`` equal
        groups, ``"contiguous"`` or ``"strided"``.
    collective, size_bytes, algorithm
        What each group runs (nccl-tests size).

    Returns
    -------
    WorkloadResult
        Common metrics plus ``n_groups``; per group g ``time_s_group_<g>`` (together),
        ``alone_time_s_group_<g>`` and ``slowdown_group_<g>`` (their ratio, 1 when both
        are 0); ``max_slowdown`` over groups.
    """
    check = ParamChecker("concurrent")
    c = Collective.parse(collective)
    size = check.size_bytes("size_bytes", size_bytes)
    s = Session(topology, model=model, protocol=protocol, calibration=calibration)
    if groups is not None:
        members = _listed(check, groups, s.n_ranks)
    else:
        members = _split(check, check.ranks(s, n_ranks), n_groups=n_groups, layout=layout)

    def run(session: Session, chosen: Sequence[int]) -> Timeline:
        for g in chosen:
            session.collective(c, size, members[g], algorithm=algorithm, stream=_stream(g),
                               name=f"group {g}")  # fmt: skip
        return session.run()

    timeline = run(s, range(len(members)))
    metrics = comm_metrics(timeline, sorted({r for group in members for r in group}))
    metrics["n_groups"] = len(members)
    slowdowns = []
    for g in range(len(members)):
        together = _group_time_s(timeline, members[g], g)
        alone_session = Session(topology, model=model, protocol=protocol, calibration=calibration)
        alone = _group_time_s(run(alone_session, [g]), members[g], g)
        slowdowns.append(together / alone if alone > 0 else 1.0)
        metrics[f"time_s_group_{g}"] = together
        metrics[f"alone_time_s_group_{g}"] = alone
        metrics[f"slowdown_group_{g}"] = slowdowns[-1]
    metrics["max_slowdown"] = max(slowdowns)
    return WorkloadResult("concurrent", timeline, metrics)


def _listed(check: ParamChecker, groups: object, n_gpus: int) -> list[tuple[int, ...]]:
    rule = f"a non-empty list of non-empty lists of distinct ranks 0..{n_gpus - 1}"
    if not isinstance(groups, list | tuple) or not groups:
        raise check.error("groups", rule, groups)
    for group in groups:
        if (
            not isinstance(group, list | tuple)
            or not group
            or len(set(group)) != len(group)
            or any(isinstance(r, bool) or not isinstance(r, int) for r in group)
            or any(not 0 <= r < n_gpus for r in group)
        ):
            raise check.error("groups", rule, groups)
    return [tuple(group) for group in groups]


def _split(
    check: ParamChecker, ranks: tuple[int, ...], *, n_groups: object, layout: object
) -> list[tuple[int, ...]]:
    k = check.count("n_groups", n_groups)
    order = check.choice("layout", layout, LAYOUTS)
    if len(ranks) % k:
        raise check.error("n_groups", f"a divisor of n_ranks = {len(ranks)}", n_groups)
    if order == "strided":
        return [ranks[g::k] for g in range(k)]
    per = len(ranks) // k
    return [ranks[g * per : (g + 1) * per] for g in range(k)]


def _stream(g: int) -> str:
    return COMM if g == 0 else f"{COMM} {g}"


def _group_time_s(timeline: Timeline, ranks: tuple[int, ...], g: int) -> float:
    """When group g's call ended (every call starts at 0)."""
    return max(span.end_s for span in timeline.spans_of(ranks[0], _stream(g)))
