"""Fuzzing the file formats: topology TOML and scenario TOML, mutated and random.

Every case is written to a file and loaded the way ``simcoll`` loads it
(:func:`simcoll.topology.io.load`; :func:`simcoll.scenarios.scenario.load_scenario` then
:func:`simcoll.scenarios.points.check_scenario`). The property: loading either succeeds, and the
result is a valid graph (every GPU routes to every other) or scenario, or it raises a
:class:`~simcoll.core.errors.SimcollError` whose text is one line, starts with the file's path
and names the field (``FILE: FIELD: message``; a whole-file problem, not UTF-8 or not
TOML, may be ``FILE: message``). Any other exception, a multi-line message or a load
that takes longer than :data:`CASE_SECONDS` fails.

The cases start from the shipped files (``topologies/*.toml``,
``topologies/examples/*.toml``, ``scenarios/*.toml``) and from a seed file for each builder
no shipped file names (:data:`SEED_BUILDERS`):

- deterministic mutations of every file: each key deleted or given a value of another
  type (string, number, list, table, boolean), negative, zero, NaN, infinite, huge
  (``1e308``, ``2**63``), a quantity with an unknown unit (``"12 parsecs"``, ``"GB/h"``);
  an unknown key in every table; graph damage in explicit topologies (duplicate node or
  link, a cycle of switches, a GPU with no link, a disconnected half, a missing or
  duplicated rank, a GPU that only routes through a non-transit node); scenario damage
  (a bad ``topology.file``, unknown workload kind, bad sweep axes); and byte damage
  (non-UTF-8 bytes, truncation, an empty file, random bytes);
- hypothesis properties over random mutations, random explicit graphs and random bytes;
- the adversarial kinds of issue 17: deep nesting (65 to 5,000 levels of TOML and JSON in
  topology, scenario, params, node-link and sidecar files), special files (``/dev/zero``,
  a FIFO, a socket, a directory, a symlink to a device, as any loader's input or named
  from inside another file), ``results.jsonl`` lines that are not point records, numbers
  past an int64 or a float (sizes, ranks, channels, times, bandwidths, efficiencies; in
  files and through the API), and odd ``--scheduler`` addresses, fixed and random.

The long run loops over random cases until its time is up and prints one line of counts;
``SIMCOLL_FUZZ_SEED`` (default: the clock) picks the cases, and a failure shows the file's
bytes::

    SIMCOLL_FUZZ_MINUTES=30 pytest -m slow tests/test_fuzz.py -k long -s
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import os
import random
import re
import signal
import socket
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcoll.calibrate.read import read_measurements
from simcoll.core.errors import SimcollError
from simcoll.core.sizes import parse_sizes
from simcoll.scenarios import points
from simcoll.scenarios.scenario import Scenario, load_scenario
from simcoll.topology.calibration import read_calibration
from simcoll.topology.io import load
from simcoll.topology.routing import Router
from simcoll.topology.schema import gpu_nodes, validate

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Source:
    """A file the cases start from: a shipped file, or a seed for a builder none uses."""

    kind: str  # "topology" or "scenario"
    origin: str  # the path in the repository, or "seed: BUILDER"
    raw: bytes

    @property
    def document(self) -> dict[str, Any]:
        return tomllib.loads(self.raw.decode())


def _shipped(kind: str, paths: list[Path]) -> list[Source]:
    """The shipped files, a design of more than :data:`FUZZ_NODES` servers cut to that
    many (each mutation loads it again: the 2,048-GPU default of the three-tier file
    alone took 60 s of mutations, and the same keys are fuzzed on fewer servers)."""
    return [Source(kind, str(p.relative_to(REPO)), _fewer_nodes(p.read_bytes()))
            for p in sorted(paths)]  # fmt: skip


FUZZ_NODES = 32


def _fewer_nodes(text: bytes) -> bytes:
    return re.sub(
        rb"(?m)^n_nodes = (\d+)",
        lambda m: b"n_nodes = %d" % min(int(m.group(1)), FUZZ_NODES),
        text,
    )


_SEED = """schema = 1
builder = "{}"
[params]
n_gpus = 8
link_bandwidth = "300 GB/s"
link_latency = "0.5 us"
link_kind = "nvlink"
"""
SEED_BUILDERS = ["switch_star", "ring", "full_mesh"]
"""The builders no shipped file names."""
TOPOLOGIES = [
    *_shipped("topology", [*REPO.glob("topologies/*.toml"), *REPO.glob("topologies/*/*.toml")]),
    *(Source("topology", f"seed: {b}", _SEED.format(b).encode()) for b in SEED_BUILDERS),
]
SCENARIOS = _shipped("scenario", list(REPO.glob("scenarios/*.toml")))
SOURCES = [*TOPOLOGIES, *SCENARIOS]
CASE_SECONDS = 10.0
"""The longest one load may take before the case counts as a hang (the largest design a
builder accepts, 131,072 GPUs, loads in about 10 s; fuzzed counts are far below or far above it)."""
ROUTE_ALL_PAIRS_UP_TO = 16
"""Graphs with at most this many GPUs have every GPU pair routed; larger ones, rank 0's."""

# -- writing TOML ------------------------------------------------------------------------------


def _toml_string(text: str) -> str:
    """A TOML basic string: every control character (and DEL) escaped."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_value(value: object) -> str:
    """One TOML value, inline (tables as ``{...}``), so any document is one line per key."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{_toml_string(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def dumps(document: dict[str, Any]) -> str:
    """Write a parsed TOML document back as TOML (``tomllib.loads`` gives it back)."""
    return "".join(f"{_toml_string(k)} = {_toml_value(v)}\n" for k, v in document.items())


def test_dumps_round_trips_every_shipped_file() -> None:
    for source in SOURCES:
        assert tomllib.loads(dumps(source.document)) == source.document, source.origin
    odd = {"a\nb": [float("inf"), -(2**63), '\x7f\x00"\\'], "t": {"d": datetime.date(2024, 1, 2)}}
    assert tomllib.loads(dumps(odd)) == odd


# -- mutations ---------------------------------------------------------------------------------

Path_ = tuple[str | int, ...]
NAN, INF = float("nan"), float("inf")

#: A value of every kind a TOML value can take, and the extremes of numbers.
REPLACEMENTS: dict[str, object] = {
    "string": "eight",
    "empty_string": "",
    "integer": 8,
    "float": 2.5,
    "negative": -1,
    "negative_float": -0.5,
    "zero": 0,
    "nan": NAN,
    "inf": INF,
    "minus_inf": -INF,
    "huge_float": 1e308,
    "huge_int": 2**63,
    "minus_huge_int": -(2**63),
    "giant_int": 10**400,  # beyond a float
    "bool": True,
    "list": [1, "a"],
    "empty_list": [],
    "table": {"x": 1},
    "empty_table": {},
    "datetime": datetime.datetime(1979, 5, 27, 7, 32),  # a TOML local datetime
    "unknown_unit": "12 parsecs",
    "unknown_rate": "1 GB/h",
    "ambiguous_unit": "400 Gbps",
    "zero_bandwidth": "0 GB/s",
    "negative_time": "-5 us",
    "nan_quantity": "nan GB/s",
    "huge_quantity": "1e308 TB/s",
    "overflowing_quantity": "1e309 B",
}


def _quantity_variants(text: str) -> dict[str, str]:
    """The same unit with a bad number, or the same number with a bad unit."""
    number, _, unit = text.strip().partition(" ")
    if not unit or not number[:1].isdigit():
        return {}
    return {
        "quantity_zero": f"0 {unit}",
        "quantity_negative": f"-{number} {unit}",
        "quantity_nan": f"nan {unit}",
        "quantity_inf": f"inf {unit}",
        "quantity_huge": f"1e308 {unit}",
        "quantity_overflow": f"1e400 {unit}",
        "quantity_no_unit": number,
        "quantity_parsecs": f"{number} parsecs",
        "quantity_per_hour": f"{number} {unit.split('/')[0]}/h",
        "quantity_bits_ambiguous": f"{number} Gbps",
    }


def _paths(value: object, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every key and list element below ``value``, parents before children."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from _paths(child, (*prefix, index))


def _parent(document: Any, path: Path_) -> Any:
    for step in path[:-1]:
        document = document[step]
    return document


def _get(document: Any, path: Path_) -> Any:
    return _parent(document, path)[path[-1]]


def _set(document: dict[str, Any], path: Path_, value: object) -> dict[str, Any]:
    out = copy.deepcopy(document)
    _parent(out, path)[path[-1]] = copy.deepcopy(value)
    return out


def _delete(document: dict[str, Any], path: Path_) -> dict[str, Any]:
    out = copy.deepcopy(document)
    del _parent(out, path)[path[-1]]
    return out


def _tables(document: dict[str, Any]) -> Iterator[Path_]:
    yield ()
    for path in _paths(document):
        if isinstance(_get(document, path), dict):
            yield path


def _dotted(path: Path_) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _sampled_paths(document: dict[str, Any]) -> list[Path_]:
    """Every path, but of a long array of tables only the first two and the last element."""
    keep = []
    for path in _paths(document):
        indexes = [step for step in path if isinstance(step, int)]
        lengths = [len(_get(document, path[:i])) for i, s in enumerate(path) if isinstance(s, int)]
        if all(i < 2 or i == n - 1 for i, n in zip(indexes, lengths, strict=True)):
            keep.append(path)
    return keep


def document_mutations(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Deterministic mutations: ``(what, mutated document)``."""
    for path in _sampled_paths(document):
        where = _dotted(path)
        yield f"delete {where}", _delete(document, path)
        for name, value in REPLACEMENTS.items():
            yield f"{where} = {name}", _set(document, path, value)
        current = _get(document, path)
        if isinstance(current, str):
            for name, value in _quantity_variants(current).items():
                yield f"{where} = {name}", _set(document, path, value)
    for path in _tables(document):
        table = _get(document, path) if path else document
        unknown = _set(document, (*path, "colour"), "blue") if path else {**document, "c": 1}
        yield f"unknown key in {_dotted(path) or 'top level'}", unknown
        if table:
            yield f"{_dotted(path) or 'document'} emptied", _set(document, path, {}) if path else {}


def _gpus(document: dict[str, Any]) -> list[int]:
    return [i for i, node in enumerate(document.get("nodes", [])) if node.get("kind") == "gpu"]


def _link(a: str, b: str, kind: str = "pcie") -> dict[str, object]:
    return {"from": a, "to": b, "kind": kind, "bandwidth": "10 GB/s", "latency": "1 us"}


def explicit_mutations(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Graph damage to an explicit (nodes and links) topology."""
    nodes, links = document["nodes"], document["links"]
    gpus = _gpus(document)
    n_gpus = len(gpus)
    first_gpu = nodes[gpus[0]]

    def with_(**changes: object) -> dict[str, Any]:
        return {**copy.deepcopy(document), **changes}

    yield "duplicate node", with_(nodes=[*nodes, dict(nodes[0])])
    yield "duplicate gpu node", with_(nodes=[*nodes, dict(first_gpu)])
    yield "duplicate link", with_(links=[*links, dict(links[0])])
    reverse = {**links[0], "from": links[0]["to"], "to": links[0]["from"]}
    yield "reverse of a duplex link", with_(links=[*links, reverse])
    yield "simplex link", with_(links=[{**links[0], "duplex": False}, *links[1:]])
    yield "self loop", with_(links=[*links, _link(first_gpu["id"], first_gpu["id"])])
    ring = [{"id": f"cyc{i}", "kind": "switch"} for i in range(3)]
    cycle = [_link(f"cyc{i}", f"cyc{(i + 1) % 3}", "ethernet") for i in range(3)]
    yield (
        "cycle of switches",
        with_(nodes=[*nodes, *ring], links=[*links, *cycle, _link(first_gpu["id"], "cyc0")]),
    )
    yield (
        "simplex cycle of switches",
        with_(
            nodes=[*nodes, *ring],
            links=[
                *links,
                *({**c, "duplex": False} for c in cycle),
                _link(first_gpu["id"], "cyc0"),
            ],
        ),
    )
    lonely = {"id": "lonely", "kind": "gpu", "rank": n_gpus}
    yield "gpu with no link", with_(nodes=[*nodes, lonely])
    island = [lonely, {"id": "lonely2", "kind": "gpu", "rank": n_gpus + 1}]
    yield (
        "disconnected half",
        with_(nodes=[*nodes, *island], links=[*links, _link("lonely", "lonely2", "nvlink")]),
    )
    yield (
        "gpu only reached one way",
        with_(
            nodes=[*nodes, lonely],
            links=[*links, {**_link(first_gpu["id"], "lonely"), "duplex": False}],
        ),
    )
    for index in gpus[:2]:
        yield f"nodes[{index}] rank missing", _delete(document, ("nodes", index, "rank"))
        yield (
            f"nodes[{index}] rank duplicated",
            _set(document, ("nodes", index, "rank"), 1 if nodes[index]["rank"] == 0 else 0),
        )
        yield f"nodes[{index}] rank out of range", _set(document, ("nodes", index, "rank"), 99)
        yield f"nodes[{index}] not transit", _set(document, ("nodes", index, "transit"), False)
    for index, node in enumerate(nodes):
        if node.get("kind") != "gpu":
            yield f"nodes[{index}] not transit", _set(document, ("nodes", index, "transit"), False)
            yield f"nodes[{index}] rank on a switch", _set(document, ("nodes", index, "rank"), 0)
            yield (
                f"nodes[{index}] kind gpu without rank",
                _set(document, ("nodes", index, "kind"), "gpu"),
            )
    yield "link to undefined node", with_(links=[*links, _link(first_gpu["id"], "nowhere")])
    yield "no links", with_(links=[])
    yield "no nodes", with_(nodes=[])
    yield "only one gpu", with_(nodes=[{**first_gpu, "rank": 0}], links=[])
    yield "p2p off", with_(p2p=False)
    yield "p2p string", with_(p2p="false")
    yield "routing dmodk", with_(routing={"rule": "dmodk"})
    yield "routing lowest_ids", with_(routing={"rule": "lowest_ids"})
    yield "routing unknown rule", with_(routing={"rule": "shortest"})
    yield "nodes as a table", with_(nodes={"id": "gpu0"})
    yield "links as a list of strings", with_(links=["gpu0 -> sw0"])
    yield "builder with nodes", with_(builder="ring")


def scenario_mutations(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Scenario damage beyond type changes: files, kinds, axes, outputs."""

    def with_(table: str, **changes: object) -> dict[str, Any]:
        out = copy.deepcopy(document)
        out.setdefault(table, {})
        if isinstance(out[table], dict):
            out[table].update(changes)
        return out

    for file in ["nowhere.toml", "", ".", "../scenarios", "../topologies/README.md",
                 "../topologies/examples/dgx-h100.nccl.xml", "broken.toml", "binary.toml",
                 "mutated-topology.toml", "/dev/null", "\x00", "a" * 300]:  # fmt: skip
        yield f"topology.file = {file!r}", with_("topology", file=file)
    yield "topology.set unknown parameter", with_("topology", set={"n_gpu": 4})
    yield "topology.set negative", with_("topology", set={"n_nodes": -1, "n_gpus": -1})
    yield "topology.set huge", with_("topology", set={"n_nodes": 2**63, "n_gpus": 2**63})
    yield "topology.set list", with_("topology", set={"n_nodes": [1, 2]})
    yield "topology.set table", with_("topology", set={"n_nodes": {"a": 1}})
    yield (
        "topology.set zero bandwidth",
        with_("topology", set={"nvlink_bandwidth": "0 GB/s", "nic_bandwidth": "0 GB/s"}),
    )
    yield "topology.set string", with_("topology", set="n_nodes=2")
    for kind in ["nccl", "DDP", "", "collective ", "p2p", "ddp", "moe"]:
        yield f"workload.kind = {kind!r}", with_("workload", kind=kind)
    yield "unknown workload parameter", with_("workload", buckett_bytes="25 MiB")
    yield "unknown collective", with_("workload", collective="allreduction")
    yield "collective number", with_("workload", collective=3)
    yield "calibration missing file", with_("workload", calibration="nowhere.params.toml")
    yield "calibration number", with_("workload", calibration=3)
    for axis, values in [
        ("size_bytes", "1K:1G:1"),
        ("size_bytes", "1K:1G:0"),
        ("size_bytes", "1K:1G:-2"),
        ("size_bytes", "1G:1K"),
        ("size_bytes", "0:0"),
        ("size_bytes", "1:1e400"),
        ("size_bytes", "nan:1G"),
        ("size_bytes", ":"),
        ("size_bytes", "1K:1G:2:2"),
        ("size_bytes", "1 parsec:1G"),
        ("size_bytes", ["1 KiB", "1024 B"]),
        ("size_bytes", [[1, 2], [3]]),
        ("n_ranks", 8),
        ("n_ranks", []),
        ("n_ranks", [2, 2]),
        ("n_ranks", [{"a": 1}]),
        ("n_ranks", [NAN]),
        ("n_ranks", [-1, 0, 2**63]),
        ("kind", ["ddp"]),
        ("collective", ["allreduce", "nope"]),
        ("topology.file", ["nowhere.toml"]),
        ("topology.file", [3]),
        ("topology.file", []),
        ("topology.n_nodes", [[1, 2]]),
        ("topology.n_gpu", [4]),
        ("topology.nvlink_bandwidth", ["12 parsecs"]),
        ("bucket_bytes", ["1 GB/h"]),
        ("backward_s_per_layer", ["-1 ms", "inf s"]),
        ("", [1]),
        ("topology.", [1]),
    ]:
        yield f"sweep.{axis} = {values!r}", with_("sweep", **{axis: values})
    yield "output.plots unknown", with_("output", plots=["pie"])
    yield "output.plots string", with_("output", plots="scaling")
    yield "output.timelines unknown", with_("output", timelines="some")
    yield "output.x number", with_("output", x=3)
    yield "output.reference negative", with_("output", reference_bytes_per_s="-1 GB/s")
    yield "output.reference zero", with_("output", reference_bytes_per_s=0)
    yield "output.reference unit", with_("output", reference_bytes_per_s="400 Gbps")


def byte_mutations(raw: bytes, seed: int) -> Iterator[tuple[str, bytes]]:
    """Damage to the bytes: non-UTF-8, truncation, nothing, noise."""
    rng = random.Random(seed)
    yield "empty file", b""
    yield "only a byte-order mark", b"\xef\xbb\xbf"
    yield "byte-order mark", b"\xef\xbb\xbf" + raw
    yield "UTF-16", raw.decode().encode("utf-16")
    yield "NUL byte", raw.replace(b"\n", b"\n\x00", 1)
    for byte in (b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80"):  # lone, cut, stray, surrogate
        yield f"{byte!r} at start", byte + raw
        yield f"{byte!r} at end", raw + byte
        at = rng.randrange(len(raw))
        yield f"{byte!r} at {at}", raw[:at] + byte + raw[at:]
    for fraction in (0.1, 0.33, 0.5, 0.77, 0.95):
        at = int(len(raw) * fraction)
        yield f"truncated at byte {at}", raw[:at]
    at = rng.randrange(len(raw))
    yield f"truncated at byte {at}", raw[:at]
    yield "random bytes", rng.randbytes(rng.randrange(1, 200))
    yield "random ASCII", bytes(rng.randrange(32, 127) for _ in range(rng.randrange(1, 200)))
    yield "CRLF line ends", raw.replace(b"\n", b"\r\n")
    yield "CR line ends", raw.replace(b"\n", b"\r")
    yield "doubled", raw + raw
    yield "integer of 5000 digits", raw + b"\nx = 1" + b"0" * 5000 + b"\n"


# -- the property ------------------------------------------------------------------------------


class Hang(BaseException):  # a BaseException, so that no loader's `except` catches it
    """A case ran past :data:`CASE_SECONDS`."""


@contextmanager
def time_guard(seconds: float = CASE_SECONDS) -> Iterator[None]:
    """Raise :class:`Hang` if the block runs longer than ``seconds``."""

    def alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


#: Messages of problems with the whole file rather than one field.
WHOLE_FILE = ("not UTF-8", "not valid TOML", "invalid TOML", "no such file", "cannot read",
              "is a directory", "is a device", "is a FIFO", "tables and lists nest")  # fmt: skip


def check_error(error: SimcollError, sources: set[str]) -> None:
    """The error is one line, starts with one of ``sources`` and names a field."""
    text = str(error)
    assert len(text.splitlines()) == 1, f"not one line: {text!r}"
    assert text == text.strip(), f"leading or trailing whitespace: {text!r}"
    assert error.source in sources, f"does not name the file ({sorted(sources)}): {text!r}"
    assert text.startswith(f"{error.source}: "), f"does not start with the file: {text!r}"
    if not error.field:
        assert error.message.startswith(WHOLE_FILE), f"names no field: {text!r}"
    else:
        assert text.startswith(f"{error.source}: {error.field}: "), text
    assert error.message.strip(), f"no message: {text!r}"


def check_graph(graph: Any, path: str) -> None:
    """A loaded topology is valid and its GPUs route to one another (a sample, if big)."""
    validate(graph, source=path)
    gpus = gpu_nodes(graph)
    router = Router(graph)
    if len(gpus) <= ROUTE_ALL_PAIRS_UP_TO:
        pairs = [(a, b) for a in gpus for b in gpus if a != b]
    else:
        step = max(1, len(gpus) // ROUTE_ALL_PAIRS_UP_TO)
        pairs = [(a, b) for a in gpus[::step] for b in (gpus[0], gpus[-1]) if a != b]
        pairs += [(b, a) for a, b in pairs]
    for a, b in pairs:
        assert router.route(a, b), (a, b)


def _importer_files(data: bytes) -> set[str]:
    """The file an importer's ``params.file`` names: its errors start with it."""
    try:
        file = tomllib.loads(data.decode())["params"]["file"]
    except (ValueError, KeyError, TypeError):
        return set()
    return {file} if isinstance(file, str) else set()


def check_topology(path: Path) -> str:
    """Load one topology file; return "ok" or the error's text (the property holds)."""
    with time_guard():
        try:
            graph = load(path)
        except SimcollError as error:
            check_error(error, {str(path), *_importer_files(path.read_bytes())})
            return str(error)
    with time_guard():
        check_graph(graph, str(path))
    return "ok"


def check_scenario(path: Path) -> str:
    """Load and check one scenario file; return "ok" or the error's text."""
    points._topology.cache_clear()  # the cache is keyed by path: every case rewrites its files
    with time_guard():
        try:
            scenario = load_scenario(path)
        except SimcollError as error:
            check_error(error, {str(path)})
            return str(error)
        assert isinstance(scenario, Scenario)
        try:
            points.check_scenario(scenario)
        except SimcollError as error:
            check_error(error, _scenario_sources(scenario))
            return str(error)
        assert scenario.points(), "a scenario has at least one point"
        assert scenario.digest
    return "ok"


def _scenario_sources(scenario: Scenario) -> set[str]:
    """The files a scenario's errors may name: itself and the topology files it names."""
    sources = {scenario.source, str(scenario.topology_file)}
    for value in scenario.axes.get(points.TOPOLOGY_FILE_AXIS, []):
        sources.add(str(scenario.base / str(value)))
    return sources


@dataclass
class Case:
    """One fuzz case: what was done, to which file, and the bytes to load."""

    kind: str  # "topology" or "scenario"
    origin: str
    what: str
    data: bytes

    def run(self, folder: Path) -> str:
        """Write the case into ``folder`` and load it; explain the bytes on failure."""
        path = _layout(folder) / self.kind / "case.toml"
        path.write_bytes(self.data)
        check = check_topology if self.kind == "topology" else check_scenario
        try:
            return check(path)
        except (Exception, Hang) as failure:
            raise AssertionError(
                f"{self.kind} case failed: {self.origin}: {self.what}\n"
                f"{type(failure).__name__}: {failure}\nfile bytes: {self.data!r}"
            ) from failure


def _layout(folder: Path) -> Path:
    """``folder`` with topology/ and scenario/ case folders beside the shipped topologies.

    A scenario case is ``scenario/case.toml``, so its ``../topologies/X.toml`` are the
    shipped files; ``broken.toml``, ``binary.toml`` and ``mutated-topology.toml`` beside it
    are bad topology files it may name.
    """
    if not (folder / "topologies").exists():
        (folder / "topologies").symlink_to(REPO / "topologies")
        (folder / "topology").mkdir()
        scenario = folder / "scenario"
        scenario.mkdir()
        (scenario / "broken.toml").write_text("schema = 1\nbuilder = \n")
        (scenario / "binary.toml").write_bytes(bytes(range(256)))
        mutated = tomllib.loads((REPO / "topologies" / "dgx-h100.toml").read_text())
        mutated["params"]["nvlink_bandwidth"] = "12 parsecs"
        (scenario / "mutated-topology.toml").write_text(dumps(mutated))
    return folder


def _text(document: dict[str, Any]) -> bytes:
    return dumps(document).encode()


def deterministic_cases() -> Iterator[Case]:
    """Every mutation kind of every shipped file (and seed)."""
    for seed, source in enumerate(SOURCES):
        kind, origin, raw, document = source.kind, source.origin, source.raw, source.document
        yield Case(kind, origin, "unchanged", raw)
        for what, mutated in document_mutations(document):
            yield Case(kind, origin, what, _text(mutated))
        if "nodes" in document:
            for what, mutated in explicit_mutations(document):
                yield Case(kind, origin, what, _text(mutated))
        if kind == "scenario":
            for what, mutated in scenario_mutations(document):
                yield Case(kind, origin, what, _text(mutated))
        for what, data in byte_mutations(raw, seed):
            yield Case(kind, origin, what, data)


DETERMINISTIC = list(deterministic_cases())


def _chunks(cases: list[Case], n: int) -> list[list[Case]]:
    return [cases[i::n] for i in range(n)]


N_CHUNKS = 8
#: The default run loads two chunks of eight (a quarter of the cases, every file's);
#: ``-m slow`` loads the other six (80 s on 2 cores).
DEFAULT_CHUNKS = 2


@pytest.mark.parametrize(
    "chunk",
    [c if c < DEFAULT_CHUNKS else pytest.param(c, marks=pytest.mark.slow) for c in range(N_CHUNKS)],
)
def test_deterministic_mutations_load_or_fail_in_one_line(
    chunk: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp(f"fuzz{chunk}")
    for case in _chunks(DETERMINISTIC, N_CHUNKS)[chunk]:
        case.run(folder)


def test_deterministic_cases_cover_every_file_and_kind() -> None:
    origins = {case.origin for case in DETERMINISTIC}
    assert len(origins) == len(SOURCES)
    assert len(DETERMINISTIC) >= 2000


# -- hypothesis: random mutations ----------------------------------------------------------------

_keys = st.one_of(
    st.sampled_from(["schema", "builder", "params", "nodes", "links", "id", "kind", "rank",
                     "file", "set", "sweep", "workload", "output", "n_gpus", "size_bytes"]),
    st.text(max_size=12),
)  # fmt: skip
_quantities = st.builds(
    "{}{}".format,
    st.one_of(
        st.integers(-(2**70), 2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.sampled_from(["", "-", "1e999", "0x10", "1_000"]),
    ),
    st.sampled_from(["", " ", " B", " GB/s", " Gbit/s", " us", " ms", " s", " GiB", " parsecs",
                     " GB/h", " Gbps", "/s", " µs", " KiB/s", " TB/s", "G"]),
)  # fmt: skip
_scalars = st.one_of(
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.sampled_from([0, 1, 2, 3, 4, 8, -1, 2**63, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    _quantities,
    st.sampled_from(["gpu", "nvlink", "switch_star", "collective", "allreduce", "ring", "flow"]),
    st.just(datetime.date(2024, 2, 29)),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=8,
)


@st.composite
def mutated_documents(draw: st.DrawFn, sources: list[Source]) -> Case:
    """A shipped file with one to four random edits: set, delete, or add a key."""
    source = draw(st.sampled_from(sources))
    document = source.document
    edits = []
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(document))
        action = draw(st.sampled_from(["set", "delete", "add"] if paths else ["add"]))
        if action == "add":
            tables = list(_tables(document))
            target = (*draw(st.sampled_from(tables)), draw(_keys))
            document = _set(document, target, draw(_values))
        else:
            target = draw(st.sampled_from(paths))
            if action == "delete":
                document = _delete(document, target)
            else:
                document = _set(document, target, draw(_values))
        edits.append(f"{action} {_dotted(target)}")
    return Case(source.kind, source.origin, ", ".join(edits), _text(document))


@st.composite
def explicit_graphs(draw: st.DrawFn) -> Case:
    """A random explicit topology: random nodes, ranks and links, often almost valid."""
    n_nodes = draw(st.integers(0, 7))
    node_kinds = st.sampled_from(["gpu", "gpu", "gpu", "switch", "nvswitch", "cpu", "nic", "tpu"])
    nodes: list[dict[str, object]] = []
    rank = 0
    for index in range(n_nodes):
        kind = draw(node_kinds)
        node: dict[str, object] = {"id": draw(st.sampled_from([f"n{index}", f"n{index}", "n0"]))}
        node["kind"] = kind
        if kind == "gpu":
            node["rank"] = draw(st.sampled_from([rank, rank, rank, 0, rank + 1, -1, "0"]))
            rank += 1
        if draw(st.booleans()):
            extra = draw(st.sampled_from(["transit", "host", "reduces", "tier", "bogus"]))
            node[extra] = draw(st.one_of(st.booleans(), st.sampled_from(["node0", 1, -1])))
        nodes.append(node)
    ids = [str(node["id"]) for node in nodes] or ["n0"]
    links = []
    for _ in range(draw(st.integers(0, 10))):
        link: dict[str, object] = {
            "from": draw(st.sampled_from([*ids, "ghost"])),
            "to": draw(st.sampled_from([*ids, "ghost"])),
            "kind": draw(st.sampled_from(["nvlink", "pcie", "ib", "ethernet", "cpu_link", "x"])),
            "bandwidth": draw(st.one_of(st.sampled_from(["10 GB/s", "400 Gbit/s"]), _quantities)),
            "latency": draw(st.one_of(st.sampled_from(["1 us", "0 s"]), _quantities)),
        }
        if draw(st.booleans()):
            link["duplex"] = draw(st.one_of(st.booleans(), st.just("yes")))
        links.append(link)
    document: dict[str, object] = {"schema": 1, "nodes": nodes, "links": links}
    if draw(st.booleans()):
        document["p2p"] = draw(st.booleans())
    if draw(st.booleans()):
        rule = draw(st.sampled_from(["ecmp", "lowest_ids", "dmodk", "other"]))
        document["routing"] = {"rule": rule, "ecmp_seed": draw(st.integers(-5, 2**64))}
    return Case("topology", "random explicit graph", f"{n_nodes} nodes", _text(document))


@st.composite
def damaged_bytes(draw: st.DrawFn) -> Case:
    """A shipped file truncated, with bytes inserted, or replaced by random bytes."""
    source = draw(st.sampled_from(SOURCES))
    raw = source.raw
    action = draw(st.sampled_from(["truncate", "insert", "replace", "random"]))
    if action == "random":
        data = draw(st.binary(max_size=300))
    else:
        at = draw(st.integers(0, len(raw)))
        junk = draw(st.binary(min_size=1, max_size=8))
        end = at if action == "insert" else min(len(raw), at + len(junk))
        data = raw[:at] if action == "truncate" else raw[:at] + junk + raw[end:]
    return Case(source.kind, source.origin, action, data)


def any_case() -> st.SearchStrategy[Case]:
    return st.one_of(
        mutated_documents(TOPOLOGIES),
        mutated_documents(SCENARIOS),
        explicit_graphs(),
        damaged_bytes(),
    )


FUZZ = settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(case=mutated_documents(TOPOLOGIES))
def test_random_topology_edits(case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    case.run(_folder(tmp_path_factory))


@FUZZ
@given(case=mutated_documents(SCENARIOS))
def test_random_scenario_edits(case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    case.run(_folder(tmp_path_factory))


@FUZZ
@given(case=explicit_graphs())
def test_random_explicit_graphs(case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    case.run(_folder(tmp_path_factory))


@FUZZ
@given(case=damaged_bytes())
def test_random_byte_damage(case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    case.run(_folder(tmp_path_factory))


_FOLDERS: dict[int, Path] = {}


def _folder(factory: pytest.TempPathFactory) -> Path:
    """One case folder per session (hypothesis calls a test many times)."""
    key = id(factory)
    if key not in _FOLDERS:
        _FOLDERS[key] = factory.mktemp("hypothesis")
    return _FOLDERS[key]


# -- the long run --------------------------------------------------------------------------------


# Read when the module is collected: the root conftest clears SIMCOLL_* for every test.
FUZZ_MINUTES = float(os.environ.get("SIMCOLL_FUZZ_MINUTES", "1"))
FUZZ_SEED = int(os.environ.get("SIMCOLL_FUZZ_SEED", str(time.time_ns())))


@pytest.mark.slow
def test_long_fuzz_run(tmp_path: Path) -> None:
    """Random cases until SIMCOLL_FUZZ_MINUTES (default 1) are up, then one line of counts.

    Run it with ``-s`` to see the line; a failing case raises with its file's bytes.
    SIMCOLL_FUZZ_SEED (default: the time) picks the cases.
    """
    minutes, seed = FUZZ_MINUTES, FUZZ_SEED
    deadline = time.monotonic() + 60 * minutes
    rng = random.Random(seed)
    strategy = any_case()
    loaded = refused = 0
    while time.monotonic() < deadline:
        for case in _draw(strategy, rng.randrange(2**64), 100):
            if case.run(tmp_path) == "ok":
                loaded += 1
            else:
                refused += 1
            if time.monotonic() >= deadline:
                break
    print(
        f"\nfuzz (seed {seed}): {loaded + refused} cases in {minutes:g} min, 0 failed "
        f"({loaded} loaded, {refused} refused in one line)"
    )


def _draw(strategy: st.SearchStrategy[Case], seed: int, n: int) -> list[Case]:
    """``n`` cases drawn from ``strategy`` (generation only: no shrinking, no database)."""
    cases: list[Case] = []

    @hypothesis.seed(seed)
    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def collect(case: Case) -> None:
        cases.append(case)

    collect()
    return cases


# -- exact messages ------------------------------------------------------------------------------

H100 = "topologies/dgx-h100.toml"
ROCE = "topologies/a100-roce-2to1.toml"
RAIL = "topologies/h100-rail-optimized.toml"
TWO = "topologies/examples/two-switches.toml"
FROM_NCCL = "topologies/examples/dgx1-v100-from-nccl.toml"
DDP = "scenarios/ddp-buckets.toml"
SW0 = 'id = "sw0"\nkind = "pcie_switch"\n'
LONELY_GPU = '\n[[nodes]]\nid = "lonely"\nkind = "gpu"\nrank = 4\n'
ONE_WAY_CYCLE = """\
schema = 1
nodes = [{id = "gpu0", kind = "gpu", rank = 0}, {id = "gpu1", kind = "gpu", rank = 1},
         {id = "s0", kind = "switch"}, {id = "s1", kind = "switch"}, {id = "s2", kind = "switch"}]
links = [
  {from = "gpu0", to = "s0", kind = "ib", bandwidth = "50 GB/s", latency = "1 us", duplex = false},
  {from = "gpu1", to = "s1", kind = "ib", bandwidth = "50 GB/s", latency = "1 us", duplex = false},
  {from = "s0", to = "s1", kind = "ib", bandwidth = "50 GB/s", latency = "1 us", duplex = false},
  {from = "s1", to = "s2", kind = "ib", bandwidth = "50 GB/s", latency = "1 us", duplex = false},
  {from = "s2", to = "s0", kind = "ib", bandwidth = "50 GB/s", latency = "1 us", duplex = false},
]
"""


def _edited(origin: str, old: str | bytes, new: str | bytes) -> bytes:
    raw = (REPO / origin).read_bytes()
    old_b = old.encode() if isinstance(old, str) else old
    new_b = new.encode() if isinstance(new, str) else new
    assert old_b in raw, (origin, old)
    return raw.replace(old_b, new_b, 1)


def _before(origin: str, text: str) -> bytes:
    """The file cut just before the first ``text``."""
    raw = (REPO / origin).read_bytes()
    return raw[: raw.index(text.encode())]


#: One representative case of each kind of error: the kind of file, its bytes, and the whole
#: message with the case folder left out. Cases whose id starts with "bug" broke the property
#: (a traceback, a hang, a multi-line or fieldless message) before the loaders were fixed.
EXACT = [
    # -- topology files
    pytest.param(
        "topology",
        _before(H100, "[params]"),
        "topology/case.toml: params.nvlinks_per_gpu: missing; builder 'nvswitch_node' needs "
        "it (required: nvlinks_per_gpu, nvlink_bandwidth, nvlink_latency)",
        id="missing section",
    ),
    pytest.param(
        "topology",
        _edited(H100, 'nvlink_latency = "0.5 us"', ""),
        "topology/case.toml: params.nvlink_latency: missing; builder 'nvswitch_node' needs "
        "it (required: nvlinks_per_gpu, nvlink_bandwidth, nvlink_latency)",
        id="missing key",
    ),
    pytest.param(
        "topology",
        _edited(H100, "n_gpus = 8", 'n_gpus = "8"'),
        "topology/case.toml: params.n_gpus: expected an integer, got str '8'",
        id="wrong type",
    ),
    pytest.param(
        "topology",
        _edited(H100, "n_gpus = 8", "n_gpus = {a = 1}"),
        "topology/case.toml: params.n_gpus: expected an integer, got dict {'a': 1}",
        id="table for a number",
    ),
    pytest.param(
        "topology",
        _edited(H100, "n_gpus = 8", "n_gpus = -1"),
        "topology/case.toml: params.n_gpus: must be an integer >= 1, got -1",
        id="negative count",
    ),
    pytest.param(
        "topology",
        _edited(H100, '"0.5 us"', '"-5 us"'),
        "topology/case.toml: params.nvlink_latency: must be non-negative and finite, got "
        "-4.9999999999999996e-06 s",
        id="negative latency",
    ),
    pytest.param(
        "topology",
        _edited(H100, '"25 GB/s"', '"0 GB/s"'),
        "topology/case.toml: params.nvlink_bandwidth: must be positive and finite, got 0.0 bytes/s",
        id="zero bandwidth",
    ),
    pytest.param(
        "topology",
        _edited(H100, '"25 GB/s"', '"nan GB/s"'),
        "topology/case.toml: params.nvlink_bandwidth: cannot read 'nan GB/s' as a number "
        "with a unit",
        id="NaN quantity",
    ),
    pytest.param(
        "topology",
        _edited(ROCE, "oversubscription = 2.0", "oversubscription = nan"),
        "topology/case.toml: params.oversubscription: must be a number >= 1 (downlinks per "
        "uplink), got nan",
        id="NaN number",
    ),
    pytest.param(
        "topology",
        _edited(ROCE, "oversubscription = 2.0", "oversubscription = inf"),
        "topology/case.toml: params.oversubscription: must be a number >= 1 (downlinks per "
        "uplink), got inf",
        id="inf number",
    ),
    pytest.param(
        "topology",
        _edited(H100, '"25 GB/s"', '"1e308 TB/s"'),
        "topology/case.toml: params.nvlink_bandwidth: must be positive and finite, got inf bytes/s",
        id="huge quantity",
    ),
    pytest.param(
        "topology",
        _edited(H100, '"25 GB/s"', '"12 parsecs"'),
        "topology/case.toml: params.nvlink_bandwidth: unknown unit 'parsecs' in '12 "
        "parsecs'; expected bytes_per_s, e.g. '450 GB/s', '400 Gbit/s'",
        id="unknown unit",
    ),
    pytest.param(
        "topology",
        _edited(H100, '"25 GB/s"', '"25 GB/h"'),
        "topology/case.toml: params.nvlink_bandwidth: unknown unit 'GB/h' in '25 GB/h'; "
        "expected bytes_per_s, e.g. '450 GB/s', '400 Gbit/s'",
        id="unknown rate",
    ),
    pytest.param(
        "topology",
        _edited(H100, "[params]\n", "[params]\ncolour = 1\n"),
        "topology/case.toml: params.colour: unknown parameter of builder 'nvswitch_node'; "
        "valid: n_gpus, nvlinks_per_gpu, nvlink_bandwidth, nvlink_latency, nvls",
        id="unknown key",
    ),
    pytest.param(
        "topology",
        _edited(H100, b"\nn_gpus", b"\nn_\xffgpus"),  # [params]' key, not the description's
        "topology/case.toml: line 18: not UTF-8 text (byte 0xff at offset 1059); save the "
        "file as UTF-8",
        id="not UTF-8",
    ),
    pytest.param(
        "topology",
        _before(H100, 'GB/s"'),
        "topology/case.toml: end of document: invalid TOML: Unterminated string",
        id="truncated",
    ),
    pytest.param(
        "topology",
        b"",
        "topology/case.toml: schema: missing; the file must start with schema = 1",
        id="empty file",
    ),
    pytest.param(
        "topology",
        _edited(TWO, '[[nodes]]\nid = "sw1"', '[[nodes]]\nid = "sw0"'),
        "topology/case.toml: nodes[1].id: 'sw0' is already defined at nodes[0]",
        id="duplicate node",
    ),
    pytest.param(
        "topology",
        _edited(TWO, 'from = "gpu1"\nto = "sw0"', 'from = "gpu0"\nto = "sw0"'),
        "topology/case.toml: links[1]: link gpu0->sw0 is already defined at links[0]",
        id="duplicate link",
    ),
    pytest.param(
        "topology",
        ONE_WAY_CYCLE.encode(),
        "topology/case.toml: gpu0: GPU 'gpu0' (rank 0) cannot reach GPU 'gpu1' (rank 1)",
        id="switch cycle, one way",
    ),
    pytest.param(
        "topology",
        (REPO / TWO).read_bytes() + LONELY_GPU.encode(),
        "topology/case.toml: gpu0: GPU 'gpu0' (rank 0) cannot reach GPU 'lonely' (rank 4)",
        id="GPU with no link",
    ),
    pytest.param(
        "topology",
        _before(TWO, '[[links]]\nfrom = "sw0"'),
        "topology/case.toml: gpu0: GPU 'gpu0' (rank 0) cannot reach GPU 'gpu2' (rank 2)",
        id="disconnected",
    ),
    pytest.param(
        "topology",
        _edited(TWO, "rank = 1\n", ""),
        "topology/case.toml: gpu1: GPU has no 'rank'; expected an int",
        id="rank missing",
    ),
    pytest.param(
        "topology",
        _edited(TWO, "rank = 1\n", "rank = 0\n"),
        "topology/case.toml: gpu1: rank 0 is already held by 'gpu0'; ranks must be unique",
        id="rank duplicated",
    ),
    pytest.param(
        "topology",
        _edited(TWO, "rank = 3\n", "rank = 7\n"),
        "topology/case.toml: gpu3: rank 7 is out of range for 4 GPUs: ranks must be 0..3 "
        "(missing: 3)",
        id="rank out of range",
    ),
    # -- bugs the fuzzing found
    pytest.param(
        "topology",
        _edited(H100, "n_gpus = 8", f"n_gpus = {2**63}"),
        "topology/case.toml: params.n_gpus: the design would have 9223372036854775808 GPUs; "
        "simcoll builds at most 131072",
        id="bug: huge count hangs",
    ),
    pytest.param(
        "topology",
        _edited(RAIL, "rail_nodes_per_leaf = 32", f"rail_nodes_per_leaf = {2**63}"),
        "topology/case.toml: params.rail_nodes_per_leaf: must be at most 4194304, got "
        "9223372036854775808",
        id="bug: huge switch count hangs",
    ),
    pytest.param(
        "topology",
        _SEED.format("full_mesh").replace("n_gpus = 8", "n_gpus = 3000").encode(),
        "topology/case.toml: params.n_gpus: the design would have 8997000 directed links; "
        "simcoll builds at most 4194304",
        id="bug: a full mesh too big to build",
    ),
    pytest.param(
        "topology",
        _edited("topologies/torus-3d.toml", "dim_y = 4", "dim_y = 100000"),
        "topology/case.toml: params.dim_y: the design would have 1600000 GPUs; simcoll builds at "
        "most 131072",
        id="bug: a torus too big to build",
    ),
    pytest.param(
        "topology",
        _edited(H100, "nvlinks_per_gpu = 18", f"nvlinks_per_gpu = {10**400}"),
        "topology/case.toml: params.nvlinks_per_gpu: must be at most 4194304, got " + str(10**400),
        id="bug: integer beyond floats",
    ),
    pytest.param(
        "topology",
        _edited(ROCE, "oversubscription = 2.0", f"oversubscription = {10**400}"),
        "topology/case.toml: params.oversubscription: expected a number, got an integer "
        "beyond floats: " + str(10**400),
        id="bug: float parameter beyond floats",
    ),
    pytest.param(
        "topology",
        (REPO / H100).read_bytes() + b"x = 1" + b"0" * 5000,
        "topology/case.toml: invalid TOML: Exceeds the limit (4300 digits) for integer "
        "string conversion: value has 5001 digits",
        id="bug: 5000-digit integer",
    ),
    pytest.param(
        "topology",
        _edited(TWO, 'kind = "pcie_switch"', 'kind = ["pcie_switch"]'),
        "topology/case.toml: nodes[0].kind: unknown kind ['pcie_switch']; valid: gpu, "
        "nvswitch, pcie_switch, cpu, nic, switch",
        id="bug: kind is a list",
    ),
    pytest.param(
        "topology",
        _edited(TWO, SW0, SW0 + "transit = false\n"),
        "topology/case.toml: gpu0: GPU 'gpu0' (rank 0) cannot reach GPU 'gpu1' (rank 1)",
        id="bug: route only through a non-transit node",
    ),
    pytest.param(
        "topology",
        _edited(ROCE, "oversubscription = 2.0", "oversubscription = 1e308"),
        "topology/case.toml: params.oversubscription: switches of 32 down ports get no uplink "
        "at 1e+308:1",
        id="bug: leaves without uplinks",
    ),
    pytest.param(
        "topology",
        b"schema = 1\nnodes = []\nlinks = []\n",
        'topology/case.toml: nodes: has no GPU (a node of kind = "gpu")',
        id="bug: no GPU",
    ),
    pytest.param(
        "topology",
        (REPO / H100).read_bytes() + b'"" = 1\n',
        "topology/case.toml: gpu: unknown key ''; valid: name, memory, peak_fp32, peak_tf32, "
        "peak_fp16, peak_bf16, peak_fp8, sms, kernels, kernel_efficiency",  # the last table
        id="bug: empty key",
    ),
    pytest.param(
        "topology",
        _edited(H100, "[params]", '"a\\nb" = 1\n[params]'),
        "topology/case.toml: 'a\\nb': unknown key; valid keys: schema, builder, description, "
        "calibration, calibration_when, gpu_memory_bandwidth, host_memory_bandwidth, gpu, "
        "params, routing, transport",
        id="bug: line break in a key",
    ),
    pytest.param(
        "topology",
        _edited(FROM_NCCL, '"dgx1-v100.nccl.xml"', '"\\u0000"'),
        "topology/case.toml: params.file: cannot read '\\x00': embedded null byte",
        id="bug: NUL in an imported file's name",
    ),
    pytest.param(
        "topology",
        _edited(FROM_NCCL, '"dgx1-v100.nccl.xml"', '"nowhere.xml"'),
        "topology/case.toml: params.file: no such file 'nowhere.xml' (relative to the "
        "topology file)",
        id="bug: imported file missing",
    ),
    # -- scenario files
    pytest.param(
        "scenario",
        _edited(
            DDP,
            '[topology]\nfile = "../topologies/h100-ib-fat-tree.toml"\nset = { n_nodes = 2 }',
            "",
        ),
        "scenario/case.toml: topology: missing table",
        id="scenario: missing section",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, 'plots = ["metric", "gantt", "link_utilisation"]', "plots = 3"),
        "scenario/case.toml: output.plots: must be a list of plot names, got 3",
        id="scenario: wrong type",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, '"125 us"', "nan"),
        "scenario/case.toml: workload.backward_s_per_layer: must be a finite number, got nan",
        id="scenario: NaN",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, '"1.36 GB"', '"1.36 parsecs"'),
        "scenario/case.toml: workload.params_bytes: unknown unit 'parsecs' in '1.36 "
        "parsecs'; expected bytes, e.g. '256 MiB', '1 GB'",
        id="scenario: unknown unit",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, b"n_layers", b"n_\xfflayers"),
        "scenario/case.toml: not UTF-8 (byte 769)",
        id="scenario: not UTF-8",
    ),
    pytest.param(
        "scenario",
        _before(DDP, 'us"\n\n[sweep]'),
        "scenario/case.toml: not valid TOML: Unterminated string (at end of document)",
        id="scenario: truncated",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, "../topologies/h100-ib-fat-tree.toml", "nowhere.toml"),
        "scenario/case.toml: topology.file: no such topology file 'scenario/nowhere.toml'",
        id="scenario: bad topology.file",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, 'kind = "ddp"', 'kind = "dpp"'),
        "scenario/case.toml: workload.kind: unknown workload 'dpp'; valid: collective, "
        "concurrent, ddp, fsdp, moe, p2p, pipeline, tensor_parallel_mlp, training_step",
        id="scenario: unknown workload kind",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, 'bucket_bytes = ["1 MiB",', 'bucket_bytes = "1 MiB"\nx = [1,'),
        "scenario/case.toml: sweep.bucket_bytes: must be a list of values (or a size range "
        "such as \"8:8G\"), got '1 MiB'",
        id="scenario: bad sweep axis",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, 'bucket_bytes = ["1 MiB", "2 MiB",', 'bucket_bytes = "1G:1K"\nx = ["2 MiB",'),
        "scenario/case.toml: sweep.bucket_bytes: range '1G:1K' ends below its start",
        id="scenario: bad size range",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, "n_nodes = 2", "n_nodes = [1, 2]"),
        "scenario/case.toml: topology.set.n_nodes: a topology parameter must be a single "
        "value, got [1, 2]",
        id="bug: scenario topology.set list",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, "../topologies/h100-ib-fat-tree.toml", "\\u0000"),
        "scenario/case.toml: topology.file: has a control character: '\\x00'",
        id="bug: scenario NUL in topology.file",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, "../topologies/h100-ib-fat-tree.toml", "a\\nb.toml"),
        "scenario/case.toml: topology.file: has a control character: 'a\\nb.toml'",
        id="bug: scenario line break in topology.file",
    ),
    pytest.param(
        "scenario",
        (REPO / DDP).read_bytes() + b"x = 1" + b"0" * 5000,
        "scenario/case.toml: not valid TOML: Exceeds the limit (4300 digits) for integer "
        "string conversion: value has 5001 digits",
        id="bug: scenario 5000-digit integer",
    ),
    pytest.param(
        "scenario",
        (REPO / DDP).read_bytes() + f"reference_bytes_per_s = {10**400}\n".encode(),
        "scenario/case.toml: output.reference_bytes_per_s: must be a finite number, got an "
        "integer of 401 digits",
        id="bug: scenario integer beyond floats",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, "[workload]", '[workload]\n"a\\nb" = 1'),
        "scenario/case.toml: workload.'a\\nb': is not a parameter name",
        id="bug: scenario line break in a key",
    ),
    pytest.param(
        "scenario",
        _edited(DDP, "[workload]", '[workload]\n"" = 1'),
        "scenario/case.toml: workload.'': is not a parameter name",
        id="bug: scenario empty key",
    ),
]


@pytest.mark.parametrize(("kind", "data", "message"), EXACT)
def test_exact_messages(kind: str, data: bytes, message: str, tmp_path: Path) -> None:
    folder = _layout(tmp_path)
    path = folder / kind / "case.toml"
    path.write_bytes(data)
    text = (check_topology if kind == "topology" else check_scenario)(path)
    assert text.replace(f"{folder}/", "") == message


def test_a_cycle_of_switches_loads_and_routes_without_looping(tmp_path: Path) -> None:
    duplex = ONE_WAY_CYCLE.replace("duplex = false", "duplex = true")
    path = tmp_path / "cycle.toml"
    path.write_text(duplex)
    assert check_topology(path) == "ok"
    router = Router(load(path))
    assert router.route("gpu0", "gpu1") == (("gpu0", "s0"), ("s0", "s1"), ("s1", "gpu1"))
    assert router.route("gpu1", "gpu0") == (("gpu1", "s1"), ("s1", "s0"), ("s0", "gpu0"))


# -- adversarial input kinds (issue 17) ------------------------------------------------------------
#
# Deep nesting, special files, JSON lines that are not point records, numbers past what an
# int64 or a float holds, and odd scheduler addresses. Each attempt either works or raises
# a SimcollError of one line (naming its file where there is one); TALLY counts them and
# test_adversarial_tally prints the totals (run with -s).

TALLY: Counter[str] = Counter()


def attempt(kind: str, action: Callable[[], object], source: str | None = None) -> str:
    """Run ``action``; "ok", or the text of its one-line SimcollError (else the test fails)."""
    TALLY[f"{kind}: tried"] += 1
    with time_guard():
        try:
            action()
        except SimcollError as error:
            text = str(error)
            assert len(text.splitlines()) == 1, (kind, text)
            assert text == text.strip(), (kind, text)
            if source is not None:
                assert text.startswith(f"{source}: "), (kind, source, text)
            TALLY[f"{kind}: refused in one line"] += 1
            return text
    return "ok"


def _nested(depth: int, shape: str, syntax: str) -> str:
    if syntax == "json":
        return (
            "[" * depth + "]" * depth if shape == "array" else '{"a": ' * depth + "1" + "}" * depth
        )
    return "[" * depth + "]" * depth if shape == "array" else "{a = " * depth + "1" + "}" * depth


NESTING = [(d, s) for d in (65, 600, 5000) for s in ("array", "table")]


@pytest.mark.parametrize(("depth", "shape"), NESTING)
def test_deep_nesting_in_every_file_format(tmp_path: Path, depth: int, shape: str) -> None:
    toml, json_ = _nested(depth, shape, "toml"), _nested(depth, shape, "json")
    files = {
        "topology": ("t.toml", f"schema = 1\nx = {toml}\n", load),
        "scenario": ("s.toml", f"schema = 1\nx = {toml}\n", load_scenario),
        "params": ("p.toml", f"x = {toml}\n", read_calibration),
        "node-link": ("t.json", json_, load),
    }
    for name, text, loader in files.values():
        path = tmp_path / name
        path.write_text(text)
        message = attempt("deep nesting", lambda p=path, f=loader: f(p), str(path))
        assert "nest" in message, message
    runs = tmp_path / "runs.csv"
    runs.write_text("collective,n_ranks,size_bytes,time_s\nallreduce,2,8,1e-5\n")
    runs.with_suffix(".json").write_text(json_)
    sidecar = str(runs.with_suffix(".json"))
    assert "nest" in attempt("deep nesting", lambda: read_measurements(runs), sidecar)


def _special_files(folder: Path) -> dict[str, Path]:
    fifo = folder / "fifo.toml"
    os.mkfifo(fifo)
    link = folder / "link.toml"
    link.symlink_to("/dev/zero")
    sock = folder / "sock.toml"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    server.close()
    (folder / "dir.toml").mkdir()
    return {
        "/dev/zero": Path("/dev/zero"),
        "/dev/null": Path("/dev/null"),
        "/dev/urandom": Path("/dev/urandom"),
        "a FIFO": fifo,
        "a symlink to /dev/zero": link,
        "a socket": sock,
        "a directory": folder / "dir.toml",
    }


def test_special_files_in_every_loader(tmp_path: Path) -> None:
    loaders: dict[str, Callable[[Path], object]] = {
        "topology": load,
        "scenario": load_scenario,
        "measurements": read_measurements,
        "params": read_calibration,
    }
    for what, path in _special_files(tmp_path).items():
        for name, loader in loaders.items():
            message = attempt("special file", lambda f=loader, p=path: f(p), str(path))
            assert message != "ok", (what, name)
        # named from inside another file: a scenario's topology, an importer's file
        scenario = tmp_path / "s.toml"
        scenario.write_text(f'schema = 1\n[topology]\nfile = "{path}"\n[sweep]\nn_ranks = [2]\n')
        assert attempt("special file", lambda s=scenario: _check(s)) != "ok", what
        importer = tmp_path / "imp.toml"
        importer.write_text(f'schema = 1\nbuilder = "nvidia_smi"\n[params]\nfile = "{path}"\n')
        assert attempt("special file", lambda i=importer: load(i), str(importer)) != "ok", what


def _check(path: Path) -> None:
    points._topology.cache_clear()
    points.check_scenario(load_scenario(path))


NOT_RECORDS = [
    "42", "null", "true", '"text"', "[]", "[1, 2]", "{}", '{"key": 1}', '{"key": "x"}',
    '{"key": "x", "status": "ok"}', '{"key": "x", "status": "ok", "rows": 5}',
    '{"key": "x", "status": "maybe", "rows": [], "elapsed_s": 0}',
    '{"key": "x", "status": "ok", "rows": [], "elapsed_s": "soon"}',
    '{"key": "x", "status": "ok", "rows": [], "elapsed_s": -1}',
    "{broken", "", "   ", _nested(600, "array", "json"), _nested(5000, "table", "json"),
    '{"key": "x", "status": "ok", "rows": [], "elapsed_s": 1e999}',
]  # fmt: skip
BAD_ROWS = [
    [1], ["row"], [{"time_s": "fast"}], [{"collective": ["a"]}], [{"n_ranks": {"a": 1}}],
    [{"collective": "allgather", "algorithm": "ring", "protocol": "none", "n_ranks": 4.5,
      "size_bytes": 4096, "time_s": 1.0, "algbw_bytes_per_s": 1.0, "busbw_bytes_per_s": 1.0}],
    [{"collective": "allgather", "algorithm": "ring", "protocol": "none", "n_ranks": 4,
      "size_bytes": 4096, "time_s": None, "algbw_bytes_per_s": 1.0, "busbw_bytes_per_s": 1.0}],
]  # fmt: skip


def test_results_jsonl_lines_that_are_not_records(tmp_path: Path) -> None:
    from simcoll.scenarios.outdir import RESULTS_JSONL, finished_points, run_digest  # noqa: PLC0415
    from simcoll.scenarios.sweep import run_sweep  # noqa: PLC0415

    (tmp_path / "star.toml").write_text(
        _SEED.format("switch_star").replace("n_gpus = 8", "n_gpus = 4")
    )
    path = tmp_path / "s.toml"
    path.write_text(
        'schema = 1\n[topology]\nfile = "star.toml"\n[workload]\ncollective = "allgather"\n'
        '[sweep]\nsize_bytes = ["4 KiB", "8 KiB"]\n'
    )
    scenario = load_scenario(path)
    run_sweep(scenario, tmp_path / "out", workers=1)
    log = tmp_path / "out" / RESULTS_JSONL
    first, second = log.read_text().splitlines()
    digest = run_digest(scenario)
    lines = [*NOT_RECORDS]
    lines += [json.dumps({**json.loads(second), "rows": rows}) for rows in BAD_ROWS]
    for line in lines:
        log.write_text(f"{first}\n{line}\n{second}\n")
        message = attempt("results.jsonl line", lambda: finished_points(log, scenario, digest))
        blank = not line.strip()
        assert message.startswith(f"{log}: line 2: ") or blank, (line[:40], message)


HUGE = [2**53 + 1, 2**63, 2**64, 10**25, 10**29, 10**400]


def test_huge_numbers_everywhere(tmp_path: Path) -> None:
    import simcoll  # noqa: PLC0415
    from simcoll.calibrate.nccltests.read import parse_log  # noqa: PLC0415
    from simcoll.scenarios.scenario import parse_scenario  # noqa: PLC0415
    from simcoll.topology import switch_star  # noqa: PLC0415

    star = switch_star(4, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
    texts = [*(str(n) for n in HUGE), "1e300", "1e400", "-1e400", "1e-400", "9e15 TiB"]
    csv = tmp_path / "runs.csv"
    for text in texts:
        size = text if text.lstrip("-").isdigit() else "8"
        for cells in (f"allreduce,2,{text},1e-5", f"allreduce,{text},8,1", f"allreduce,2,8,{text}"):
            csv.write_text(f"collective,n_ranks,size_bytes,time_s\n{cells}\n")
            message = attempt("huge number", lambda: read_measurements(csv), str(csv))
            # a size or a rank count past its cap is refused; a time of 1e300 s is only long
            assert message != "ok" or cells.endswith(text), cells
        assert attempt("huge number", lambda t=text: parse_sizes(t)) != "ok", text
        log = LOG_TEMPLATE.replace("SIZE", size).replace("TIME", text.lstrip("-"))
        attempt("huge number", lambda lg=log: parse_log(lg, source="all_reduce_perf.log"))
    for n in HUGE:
        for field in ("size_bytes", "n_ranks", "n_channels", "n_chunks"):
            sweep = {field: [n]}
            data = {"schema": 1, "topology": {"file": "t.toml"}, "sweep": sweep}
            attempt("huge number", lambda d=data: parse_scenario(d, source="s.toml"))
        assert attempt("huge number", lambda n=n: simcoll.build_schedule(
            "allreduce", "ring", n_ranks=4, size_bytes=n)) != "ok"  # fmt: skip
        assert attempt("huge number", lambda n=n: simcoll.build_schedule(
            "allreduce", "ring", n_ranks=n, size_bytes=1024)) != "ok"  # fmt: skip
        assert attempt("huge number", lambda n=n: simcoll.predict(star, "allreduce", [n])) != "ok"
        assert attempt("huge number", lambda n=n: simcoll.predict(
            star, "allreduce", [1024], params={"n_channels": n})) != "ok"  # fmt: skip
        nodelink = tmp_path / "t.json"
        link = {"source": "gpu0", "target": "gpu1", "kind": "nvlink", "latency_s": 1e-6}
        gpus = [{"id": f"gpu{r}", "kind": "gpu", "rank": r} for r in (0, 1)]
        back = {**link, "source": "gpu1", "target": "gpu0", "bandwidth_bytes_per_s": 1e9}
        links = [{**link, "bandwidth_bytes_per_s": n}, back]
        nodelink.write_text(json.dumps({"directed": True, "nodes": gpus, "links": links}))
        message = attempt("huge number", lambda p=nodelink: load(p), str(nodelink))
        assert message == "ok" or "bandwidth" in message
        params = tmp_path / "p.toml"
        params.write_text(f"[efficiency]\nnvlink = {n}\n")
        assert attempt("huge number", lambda p=params: read_calibration(p), str(params)) != "ok"


LOG_TEMPLATE = """\
#  Rank  0 Group  0 Pid  10000 on      node0 device  0 [0x07] NVIDIA A100-SXM4-40GB
#  Rank  1 Group  0 Pid  10000 on      node0 device  1 [0x0f] NVIDIA A100-SXM4-40GB
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        SIZE           256     float     sum      -1    TIME    0.08    0.08      0    12.00    0.09    0.09      0
"""  # noqa: E501 - as nccl-tests prints it

SCHEDULERS = [
    "foo", "", " ", "tcp://", "tcp://[::1", "tcp://[::1]", "tcp://[::1]:", "tcp://[::1]:8786",
    "tcp://host", "tcp://host:", "tcp://host:0", "tcp://host:65536", "tcp://host:99999999999",
    "tcp://host:-1", "tcp://host:port", "tcp://:8786", "inproc://x", "ucx://host:1",
    "http://host:80", "tcp://host/path:1", "tcp://a b:1", "tcp://host:8786\n", "\x00:1",
    "tcp://user@host:1", "tls://host:8786", "host:8786", "tcp://" + "a" * 10_000 + ":1",
    "tcp://[::1]]:1", "tcp://[]:1", "tcp://host:1:2", "::1:8786", "tcp://127.0.0.1:8786",
]  # fmt: skip


@pytest.mark.parametrize("address", SCHEDULERS)
def test_odd_scheduler_addresses(address: str) -> None:
    from simcoll.scenarios.sweep import check_scheduler_address  # noqa: PLC0415

    attempt("scheduler address", lambda: check_scheduler_address(address))


@FUZZ
@given(address=st.text(max_size=40))
def test_random_scheduler_addresses(address: str) -> None:
    from simcoll.scenarios.sweep import check_scheduler_address  # noqa: PLC0415

    attempt("scheduler address", lambda: check_scheduler_address(address))


def test_adversarial_tally() -> None:
    """The totals of the adversarial kinds above (run after them: ``pytest -s``)."""
    kinds = sorted({key.split(": ")[0] for key in TALLY})
    tried = sum(TALLY[f"{k}: tried"] for k in kinds)
    refused = sum(TALLY[f"{k}: refused in one line"] for k in kinds)
    parts = [f"{k} {TALLY[f'{k}: tried']}/{TALLY[f'{k}: refused in one line']}" for k in kinds]
    print(f"\nadversarial inputs: {tried} tried, {refused} refused in one line, 0 tracebacks "
          f"({'; '.join(parts)}; tried/refused)")  # fmt: skip
