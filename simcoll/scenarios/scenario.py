"""Scenario files: one question about a cluster design as TOML data.

A scenario names a topology (a file of ``topologies/`` and overrides of its parameters), a
workload (one collective, or a training step from :mod:`simcoll.scenarios.workloads`), the axes to
sweep, and the outputs wanted. ``simcoll run SCENARIO`` runs it (:mod:`simcoll.scenarios.sweep`).
The schema, with every key, is in ``scenarios/README.md``::

    schema = 1
    title = "Ring all-reduce bus bandwidth vs GPU count"

    [topology]
    file = "../topologies/h100-ib-fat-tree.toml"   # relative to this file
    set = { n_nodes = 2 }                         # optional overrides of its [params]

    [workload]
    kind = "collective"                           # or ddp, fsdp, p2p, ... (workloads)
    collective = "allreduce"
    algorithm = "ring"

    [sweep]                                        # every key is an axis; points = product
    size_bytes = "1M:1G"                           # nccl-tests range, or a list
    n_ranks = [2, 4, 8, 16]
    "topology.nic_bandwidth" = ["200 Gbit/s", "400 Gbit/s"]   # or "topology.file" = [...]

    [output]
    plots = ["busbw_vs_size", "scaling"]

Values whose key ends in ``_bytes_per_s``, ``_bytes`` or ``_s`` (or has ``_bytes_per_`` or
``_s_per_`` inside, as ``backward_s_per_layer``) may be written with units (``"400 Gbit/s"``,
``"25 MiB"``, ``"3 ms"``). Scenarios are data: nothing in them is
executed.

>>> spec = parse_scenario({"schema": 1, "topology": {"file": "t.toml"},
...     "workload": {"collective": "allgather"}, "sweep": {"size_bytes": "1K:4K"}},
...     source="demo.toml")
>>> [p.values for p in spec.points()]
[{'size_bytes': 1024}, {'size_bytes': 2048}, {'size_bytes': 4096}]
>>> parse_scenario({"schema": 1, "topology": {"file": "t.toml"},
...     "sweep": {"n_ranks": 8}}, source="demo.toml")
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: demo.toml: sweep.n_ranks: must be a list of values (or a size \
range such as "8:8G"), got 8
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError, SimcollError
from simcoll.core.files import TOO_DEEP, check_nesting, read_input_bytes
from simcoll.core.limits import MAX_SIZE_BYTES
from simcoll.core.shipped import find, is_bare_name, shipped_names
from simcoll.core.sizes import parse_sizes
from simcoll.core.units import parse_bandwidth_bytes_per_s, parse_size_bytes, parse_time_s

__all__ = [
    "MAX_POINTS",
    "SCENARIO_SCHEMA",
    "Point",
    "Scenario",
    "load_scenario",
    "parse_scenario",
]

SCENARIO_SCHEMA = 1
_TOP_KEYS = ("schema", "title", "description", "topology", "workload", "sweep", "output")
_TOPOLOGY_KEYS = ("file", "set")
#: Workload keys the engine reads; the rest go to the workload function.
ENGINE_KEYS = ("kind", "model", "protocol", "calibration", "placement", "plan", "in_place")
PLOTS = (
    "busbw_vs_size",
    "scaling",
    "crossover",
    "metric",
    "breakdown",
    "gantt",
    "link_utilisation",
)
_OUTPUT_KEYS = ("plots", "timelines", "x", "y", "series", "reference_bytes_per_s")
TIMELINE_CHOICES = ("none", "first", "all")
#: ``calibration`` values that name no file: the topology's own parameters, or none.
_NAMED = ("default", "none")
TOPOLOGY_PREFIX = "topology."
TOPOLOGY_FILE_AXIS = "topology.file"
#: The largest scenario file read (the shipped ones are under 4 KiB).
MAX_SCENARIO_BYTES = 2**20
#: The most points one sweep may have (each point is kept in memory, and costs at least
#: a simulation).
MAX_POINTS = 100_000
Value = int | float | str | bool | list[Any]


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its index, and the value of every axis."""

    index: int
    values: dict[str, Value]

    @property
    def key(self) -> str:
        """A stable identity of the point's values (for resuming a sweep)."""
        return json.dumps(self.values, sort_keys=True, separators=(",", ":"))

    @property
    def label(self) -> str:
        """``axis=value`` pairs, for messages and file names."""
        return ", ".join(f"{k}={v}" for k, v in self.values.items()) or "the only point"


@dataclass(frozen=True)
class Scenario:
    """A parsed, validated scenario (see the module docstring)."""

    source: str
    title: str
    description: str
    topology_file: Path
    topology_set: dict[str, str]
    workload: dict[str, Value]
    axes: dict[str, list[Value]]
    output: dict[str, Any] = field(default_factory=dict)
    base: Path = Path()  # the scenario file's folder: relative paths start here

    @property
    def kind(self) -> str:
        """The workload kind (``"collective"`` unless the file says otherwise)."""
        return str(self.workload.get("kind", "collective"))

    @property
    def n_points(self) -> int:
        """How many points the sweep has (the product of the axis lengths), counted
        without making them."""
        return math.prod(len(values) for values in self.axes.values())

    def points(self) -> list[Point]:
        """Every point of the sweep, the last axis varying fastest (at most
        :data:`MAX_POINTS`: :func:`parse_scenario` refuses more)."""
        names = list(self.axes)
        combos = itertools.product(*(self.axes[n] for n in names))
        return [Point(i, dict(zip(names, combo, strict=True))) for i, combo in enumerate(combos)]

    @property
    def digest(self) -> str:
        """A hash of the data that decides the results (not the outputs wanted), paths as
        written, relative to the scenario (not the cwd); ``outdir.run_digest`` adds the
        files' *contents*."""
        workload = dict(self.workload)
        if isinstance(workload.get("calibration"), str) and workload["calibration"] not in _NAMED:
            workload["calibration"] = self._relative(Path(str(workload["calibration"])))
        text = json.dumps(
            [self._relative(self.topology_file), self.topology_set, workload, self.axes],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _relative(self, path: Path) -> str:
        """``path`` relative to the scenario's folder (as the file wrote it)."""
        try:
            return path.relative_to(self.base).as_posix()
        except ValueError:  # an absolute path in the file
            return path.as_posix()

    def setup(self, point: Point) -> tuple[Path, dict[str, str], dict[str, Value]]:
        """The topology file, its overrides and the workload parameters at ``point``.

        A ``topology.file`` axis switches the file (paths relative to the scenario's
        folder); any other ``topology.NAME`` axis overrides the parameter NAME.
        """
        file = self.topology_file
        overrides = dict(self.topology_set)
        params = dict(self.workload)
        for name, value in point.values.items():
            if name == TOPOLOGY_FILE_AXIS:
                file = self.base / str(value)
            elif name.startswith(TOPOLOGY_PREFIX):
                overrides[name.removeprefix(TOPOLOGY_PREFIX)] = _override_text(
                    value, f"sweep.{name}"
                )
            else:
                params[name] = value
        return file, overrides, params


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (or a shipped scenario, by name:
    ``ddp-buckets``); errors name the file and the field."""
    if is_bare_name(path):
        found = find(path, "scenarios")
        if not found.exists():
            raise ConfigError(f"no such scenario file, nor a shipped scenario of that name "
                              f"(shipped: {', '.join(shipped_names('scenarios'))})",
                              source=str(path))  # fmt: skip
        path = found
    source = str(path)
    raw = read_input_bytes(path, missing="no such scenario file", max_bytes=MAX_SCENARIO_BYTES)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"not UTF-8 (byte {error.start})", source=source) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"not valid TOML: {error}", source=source) from None
    except ValueError as error:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ConfigError(f"not valid TOML: {str(error).split(';')[0]}", source=source) from None
    except RecursionError:
        raise ConfigError(TOO_DEEP, source=source) from None
    return parse_scenario(data, source=source, base=Path(path).parent)


def parse_scenario(data: Mapping[str, Any], *, source: str, base: Path | None = None) -> Scenario:
    """Validate scenario data (as read from TOML); file paths resolve against ``base``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"a scenario is a table (a dict), got {type(data).__name__}",
                          source=source)  # fmt: skip
    check_nesting(data, source=source)
    try:
        return _parse(data, source, base or Path())
    except SimcollError as error:
        raise error.located(source=source) from None


def _parse(data: Mapping[str, Any], source: str, base: Path) -> Scenario:
    _known(data, _TOP_KEYS, "")
    schema = data.get("schema")
    if schema != SCENARIO_SCHEMA:
        raise ConfigError(f"must be {SCENARIO_SCHEMA}, got {schema!r}", field="schema")
    topology = _table(data, "topology", required=True)
    _known(topology, _TOPOLOGY_KEYS, "topology.")
    file = topology.get("file")
    if not isinstance(file, str) or not file:
        raise ConfigError("must name a topology file (a string)", field="topology.file")
    if not file.isprintable():
        raise ConfigError(f"has a control character: {file!r}", field="topology.file")
    overrides = _table(topology, "set", prefix="topology.")
    workload = _table(data, "workload")
    sweep = _table(data, "sweep")
    for table, prefix in ((overrides, "topology.set."), (workload, "workload."), (sweep, "sweep.")):
        for key in table:
            if _field(prefix, key) != f"{prefix}{key}":
                raise ConfigError("is not a parameter name", field=_field(prefix, key))
    kind = workload.get("kind", "collective")
    if not isinstance(kind, str):
        raise ConfigError(f"must be a string, got {kind!r}", field="workload.kind")
    params = {k: _value(v, f"workload.{k}") for k, v in workload.items()}
    if isinstance(params.get("calibration"), str) and params["calibration"] not in _NAMED:
        params["calibration"] = str(base / str(params["calibration"]))
    axes = {k: _axis(k, v) for k, v in sweep.items()}
    for name in axes:
        if name in ENGINE_KEYS[:1]:
            raise ConfigError("the workload kind cannot be swept", field=f"sweep.{name}")
    _check_size(axes)
    output = _output(_table(data, "output"))
    if "breakdown" in (output.get("plots") or []) and kind != "training_step":
        raise ConfigError(f"the breakdown plot shows a training step's parts, not a {kind} "
                          "point's", field="output.plots")  # fmt: skip
    return Scenario(
        source=source,
        title=_text(data, "title", Path(source).stem),
        description=_text(data, "description", ""),
        topology_file=base / file,
        topology_set={
            k: _override_text(_value(v, f"topology.set.{k}"), f"topology.set.{k}")
            for k, v in overrides.items()
        },
        workload=params,
        axes=axes,
        output=output,
        base=base,
    )


def _check_size(axes: dict[str, list[Value]]) -> None:
    """Refuse a sweep of more than :data:`MAX_POINTS` points, counted, not built."""
    n_points = math.prod(len(values) for values in axes.values())
    if n_points > MAX_POINTS:
        sizes = " x ".join(f"{len(v)} {name}" for name, v in axes.items())
        raise ConfigError(
            f"has {n_points} points ({sizes}), more than the {MAX_POINTS} one run takes; "
            "sweep fewer values, or split it into several scenarios",
            field="sweep",
        )


def _known(table: Mapping[str, Any], keys: tuple[str, ...], prefix: str) -> None:
    for key in table:
        if key not in keys:
            raise ConfigError(f"unknown key; valid: {', '.join(keys)}", field=_field(prefix, key))


def _field(prefix: str, key: str) -> str:
    """``prefix`` and ``key``; a key that is empty, has a control character (a line break)
    or spaces around it is quoted, so that the error stays one readable line."""
    plain = key and key.isprintable() and key.strip() == key
    return f"{prefix}{key}" if plain else f"{prefix}{key!r}"


def _table(
    data: Mapping[str, Any], name: str, *, required: bool = False, prefix: str = ""
) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        if required:
            raise ConfigError("missing table", field=f"{prefix}{name}")
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"must be a table, got {value!r}", field=f"{prefix}{name}")
    return value


def _text(data: Mapping[str, Any], name: str, default: str) -> str:
    value = data.get(name, default)
    if not isinstance(value, str):
        raise ConfigError(f"must be a string, got {value!r}", field=name)
    return value


def _value(value: Any, where: str) -> Value:
    """A scalar or list from TOML, with unit strings parsed by the key's unit suffix."""
    name = where.rsplit(".", 1)[-1]
    if isinstance(value, list):
        return [_value(v, where) for v in value]
    if isinstance(value, dict):
        raise ConfigError(f"must be a number, string or list, got a table {value!r}", field=where)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {value!r}", field=where)
    if isinstance(value, int) and abs(value) > sys.float_info.max:
        raise ConfigError(
            f"must be a finite number, got an integer of {len(str(value))} digits", field=where
        )
    try:
        if isinstance(value, str) and name.endswith("_bytes_per_s"):
            return parse_bandwidth_bytes_per_s(value)
        if isinstance(value, str) and (name.endswith("_bytes") or "_bytes_per_" in name):
            return parse_size_bytes(value)
        if isinstance(value, str) and (name.endswith("_s") or "_s_per_" in name):
            return parse_time_s(value)
    except SimcollError as error:
        raise ConfigError(error.message, field=where) from None
    if not isinstance(value, int | float | str | bool):
        raise ConfigError(f"must be a number, string or list, got {value!r}", field=where)
    if name.endswith("_bytes") and not isinstance(value, bool | str) and value > MAX_SIZE_BYTES:
        raise ConfigError(f"must be at most 2^53 bytes (8 PiB), got {value!r}", field=where)
    return value


def _axis(name: str, value: Any) -> list[Value]:
    where = f"sweep.{name}"
    if isinstance(value, str) and ":" in value and name.endswith("_bytes"):
        try:
            sizes, _ = parse_sizes(value)
        except SimcollError as error:
            raise ConfigError(error.message.removeprefix("--sizes: "), field=where) from None
        return list(sizes)
    if not isinstance(value, list) or not value:
        raise ConfigError(
            f'must be a list of values (or a size range such as "8:8G"), got {value!r}',
            field=where,
        )
    values = _value(value, where)
    assert isinstance(values, list)
    if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
        raise ConfigError(f"has a value twice: {value!r}", field=where)
    return values


def _output(table: dict[str, Any]) -> dict[str, Any]:
    _known(table, _OUTPUT_KEYS, "output.")
    plots = table.get("plots")
    if plots is not None:
        if not isinstance(plots, list) or not all(isinstance(p, str) for p in plots):
            raise ConfigError(f"must be a list of plot names, got {plots!r}", field="output.plots")
        for plot in plots:
            if plot not in PLOTS:
                raise ConfigError(
                    f"unknown plot {plot!r}; valid: {', '.join(PLOTS)}", field="output.plots"
                )
    timelines = table.get("timelines", "first")  # collectives: "none" unless asked
    if timelines not in TIMELINE_CHOICES:
        raise ConfigError(
            f"must be one of {', '.join(TIMELINE_CHOICES)}, got {timelines!r}",
            field="output.timelines",
        )
    for key in ("x", "y", "series"):
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"must be a column name, got {table[key]!r}", field=f"output.{key}")
    if "reference_bytes_per_s" in table:
        where = "output.reference_bytes_per_s"
        value = _value(table["reference_bytes_per_s"], where)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"must be a positive bandwidth, got {value!r}", field=where)
        table = {**table, "reference_bytes_per_s": float(value)}
    return table


def _override_text(value: Value, where: str) -> str:
    """A topology override as ``--set`` would give it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        raise ConfigError(
            f"a topology parameter must be a single value, got {value!r}", field=where
        )
    return str(value)
