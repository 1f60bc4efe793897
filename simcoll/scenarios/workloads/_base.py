"""What every workload returns, and the parameter checks they share.

A workload function takes a topology and keyword-only parameters (from a scenario file,
so numbers, unit strings such as ``"25 MiB"`` or ``"1 ms"``, and lists of those), runs
one :class:`~simcoll.prediction.session.Session` and returns a :class:`WorkloadResult`: the
:class:`~simcoll.sim.timeline.Timeline` and a flat dict of metrics with the unit in every key.

>>> check = ParamChecker("ddp")
>>> check.size_bytes("bucket_bytes", "25 MiB"), check.time_s("optimizer_s", "2 ms")
(26214400, 0.002)
>>> check.count("n_layers", 0)
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: ddp: n_layers must be an integer >= 1, got 0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.limits import MAX_SIZE_BYTES
from simcoll.core.units import parse_size_bytes, parse_time_s
from simcoll.prediction.session import Session
from simcoll.sim.timeline import Timeline

__all__ = ["ParamChecker", "WorkloadResult", "comm_metrics"]

Number = int | float | str


@dataclass(frozen=True, eq=False)
class WorkloadResult:
    """One simulated workload: its name, timeline and metrics.

    ``metrics`` is flat and JSON-able, every key naming its unit. It always holds:

    ``time_s``
        When the last rank finished (the makespan: the max over ranks).
    ``exposed_comm_s``
        Communication time not overlapped by the rank's own compute, for the rank where
        that is largest (the *critical rank*; the lowest such rank on ties).
    ``comm_s``, ``hidden_comm_s``, ``compute_s``
        The critical rank's time inside any collective or copy, the part of it hidden
        behind its compute, and its compute time; ``exposed + hidden == comm``.

    plus the workload's own metrics, listed in its docstring.
    """

    name: str
    timeline: Timeline
    metrics: dict[str, float]

    def __post_init__(self) -> None:
        # numpy scalars become Python numbers, so the metrics go to JSON as they are.
        plain = {
            k: int(v) if isinstance(v, int | np.integer) else float(v)
            for k, v in self.metrics.items()
        }
        object.__setattr__(self, "metrics", plain)


def comm_metrics(timeline: Timeline, ranks: Sequence[int]) -> dict[str, float]:
    """The five common metrics over ``ranks`` (see :class:`WorkloadResult`)."""
    exposed = {r: timeline.exposed_comm_s(r) for r in ranks}
    critical = max(ranks, key=lambda r: exposed[r])  # first maximum: the lowest rank
    comm_s = timeline.comm_s(critical)
    return {
        "time_s": timeline.time_s,
        "compute_s": timeline.compute_s(critical),
        "comm_s": comm_s,
        "exposed_comm_s": exposed[critical],
        "hidden_comm_s": max(0.0, comm_s - exposed[critical]),
    }


#: Counts of things a workload makes one by one (layers, micro-batches, copies, calls,
#: groups): each costs events and memory before any byte moves.
REPEAT_COUNTS = frozenset(
    {"n_layers", "n_microbatches", "n_copies", "iterations", "n_groups", "n_stages"}
)
#: The largest such count (``ddp n_layers = 1e8`` grew past 8 GB before any estimate).
MAX_REPEATS = 100_000


class ParamChecker:
    """Checks one workload's parameters; every error names the workload and the parameter.

    Sizes and times may be unit strings (``"1 MiB"``, ``"0.5 ms"``), as in scenario files.
    """

    def __init__(self, workload: str) -> None:
        self.workload = workload

    def error(self, name: str, rule: str, value: object) -> ConfigError:
        """A one-line ConfigError: ``<workload>: <name> must be <rule>, got <value>``."""
        return ConfigError(f"{self.workload}: {name} must be {rule}, got {value!r}")

    def size_bytes(self, name: str, value: object, *, minimum: int = 0) -> int:
        """A whole number of bytes >= ``minimum`` (an integral float or a unit string too)."""
        rule = f"a whole number of bytes >= {minimum}"
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise self.error(name, rule, value)
        try:
            size = parse_size_bytes(value)
        except SimcollError:
            raise self.error(name, rule, value) from None
        if size < minimum:
            raise self.error(name, rule, value)
        return size

    def sizes_bytes(self, name: str, value: object) -> list[int]:
        """A non-empty list of sizes in bytes, at most :data:`MAX_REPEATS` long."""
        if not isinstance(value, list | tuple) or not value:
            raise self.error(name, "a non-empty list of sizes in bytes", value)
        if len(value) > MAX_REPEATS:
            raise self.error(
                name, f"a list of at most {MAX_REPEATS} sizes", f"{len(value)} of them"
            )
        return [self.size_bytes(name, v) for v in value]

    def count(self, name: str, value: object, *, minimum: int = 1) -> int:
        """An integer >= ``minimum``; at most :data:`MAX_REPEATS` for a count of things the
        workload makes one by one (:data:`REPEAT_COUNTS`), else at most 2^53."""
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(name, f"an integer >= {minimum}", value)
        maximum = MAX_REPEATS if name in REPEAT_COUNTS else MAX_SIZE_BYTES
        if value > maximum:
            raise self.error(name, f"an integer of at most {maximum}", value)
        return value

    def time_s(self, name: str, value: object) -> float:
        """A finite duration >= 0 s (a number of seconds or a unit string)."""
        rule = "a time >= 0 s"
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise self.error(name, rule, value)
        try:
            seconds = parse_time_s(value) if isinstance(value, str) else float(value)
        except SimcollError:
            raise self.error(name, rule, value) from None
        if not (math.isfinite(seconds) and seconds >= 0):
            raise self.error(name, rule, value)
        return seconds

    def times_s(self, name: str, value: object, n: int, what: str) -> list[float]:
        """One time, or a list of ``n`` times (one per ``what``)."""
        if not isinstance(value, list | tuple):
            return [self.time_s(name, value)] * n
        if len(value) != n:
            shown = value if len(value) <= 8 else f"a list of {len(value)}"
            raise self.error(name, f"one time or a list of {n} (one per {what})", shown)
        return [self.time_s(name, v) for v in value]

    def rate(self, name: str, value: object) -> float:
        """A number > 0 (infinity allowed: an operation that takes no time)."""
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.error(name, "a number > 0", value)
        return float(value)

    def flag(self, name: str, value: object) -> bool:
        """True or false."""
        if not isinstance(value, bool):
            raise self.error(name, "true or false", value)
        return value

    def choice(self, name: str, value: object, choices: Sequence[str]) -> str:
        """One of ``choices``."""
        if value not in choices:
            raise self.error(name, f"one of {', '.join(choices)}", value)
        return str(value)

    def ranks(self, session: Session, n_ranks: object, *, name: str = "n_ranks") -> tuple[int, ...]:
        """Ranks ``0 .. n_ranks - 1``; None means every GPU of the topology."""
        if n_ranks is None:
            return tuple(range(session.n_ranks))
        n = self.count(name, n_ranks)
        if n > session.n_ranks:
            rule = f"at most {session.n_ranks} (the topology's GPUs)"
            raise self.error(name, rule, n_ranks)
        return tuple(range(n))

    def layer_bytes(
        self, layer_params_bytes: object, n_layers: object, params_bytes: object
    ) -> list[int]:
        """Bytes per layer: the list given, or ``params_bytes`` split over ``n_layers``.

        An even split gives the remainder's bytes, one each, to the first layers. With
        neither given: 24 layers of 1.36 GB in all (BERT-Large's 340 M fp32 parameters).

        >>> ParamChecker("ddp").layer_bytes(None, 3, 10)
        [4, 3, 3]
        """
        if layer_params_bytes is None:
            n = self.count("n_layers", 24 if n_layers is None else n_layers)
            total = self.size_bytes(
                "params_bytes", 1_360_000_000 if params_bytes is None else params_bytes
            )
            return [total // n + (i < total % n) for i in range(n)]
        layers = self.sizes_bytes("layer_params_bytes", layer_params_bytes)
        if n_layers is not None and n_layers != len(layers):
            raise self.error("n_layers", f"{len(layers)} (the layers listed)", n_layers)
        if params_bytes is not None and params_bytes != sum(layers):
            raise self.error("params_bytes", f"{sum(layers)} (the layers' sum)", params_bytes)
        return layers
