"""The output folder of a run: which files are simcoll's, and what it already holds.

The files of a run (see :mod:`simcoll.scenarios.report` for the tables and plots made
from them):

- ``sweep.json``: what ran (scenario file, the digest of its contents, number of points);
- ``results.jsonl``: one line per finished point (``status`` ok or error);
- ``results.csv`` / ``results.json``: the rows of all ok points, in point order;
- ``table.txt``, plots, and ``timelines/`` traces, as the scenario's ``[output]`` asks.

The folder is an :class:`~simcoll.output.folder.OutputFolder`: locked while a run writes
into it, with a manifest of the files simcoll wrote. Files it did not write stay
untouched, ``--force`` or not. A run resumes only from results of the same *contents*:
:func:`run_digest` hashes the scenario's data and the bytes of every file its points
read (topology files, files they import, calibration files), not their paths, so an
edited topology is never resumed from and a moved or relatively named one still is.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError
from simcoll.core.files import file_sha256, read_input_bytes
from simcoll.output.folder import OutputFolder
from simcoll.output.results import Row
from simcoll.scenarios.points import PointResult
from simcoll.scenarios.scenario import PLOTS, TOPOLOGY_FILE_AXIS, Scenario
from simcoll.topology.io import source_files

__all__ = [
    "RESULTS_JSONL",
    "RUN_PATTERN",
    "SWEEP_JSON",
    "iter_records",
    "open_run_folder",
    "prepare_out_dir",
    "run_digest",
]

RESULTS_JSONL = "results.jsonl"
SWEEP_JSON = "sweep.json"
_TABLES = (SWEEP_JSON, RESULTS_JSONL, "results.csv", "results.json", "table.txt")
_PLOT_FILES = "|".join(p.replace("_", "-") for p in PLOTS if p not in ("gantt", "link_utilisation"))
#: Every name a run writes (regular expression): nothing else in a folder is deleted.
RUN_PATTERN = (
    "|".join(name.replace(".", r"\.") for name in _TABLES)
    + rf"|(?:{_PLOT_FILES})\.png|timelines/|timelines/point-\d+(?:\.trace\.json|-[a-z-]+\.png)"
)
#: The longest ``results.jsonl`` line read (a point's rows as JSON).
_MAX_LINE_BYTES = 64 * 2**20
_STATUSES = ("ok", "skipped", "error")


def open_run_folder(out: str | Path) -> OutputFolder:
    """The run's folder, made if needed and locked (see the module docstring)."""
    return OutputFolder.open(out, pattern=RUN_PATTERN)


def run_digest(scenario: Scenario) -> str:
    """A hash of what decides a run's results: the scenario's data and the bytes of every
    file its points read (paths themselves are left out, so cwd does not matter)."""
    digest = hashlib.sha256(scenario.digest.encode())
    files: list[tuple[str, Path]] = [("topology.file", scenario.topology_file)]
    for value in scenario.axes.get(TOPOLOGY_FILE_AXIS, []):
        files.append((f"sweep.topology.file={value}", scenario.base / str(value)))
    calibrations: list[object] = [scenario.workload.get("calibration")]
    calibrations += scenario.axes.get("calibration", [])
    for named in calibrations:
        if isinstance(named, str) and named not in ("default", "none"):
            files.append((f"calibration={named}", scenario.base / named))
    for label, path in files:
        digest.update(label.encode())
        for read in source_files(path, scenario.topology_set):
            digest.update(file_sha256(read).encode())
    return digest.hexdigest()[:16]


def prepare_out_dir(
    folder: OutputFolder, scenario: Scenario, n_points: int, *, force: bool, digest: str
) -> dict[str, PointResult]:
    """Make ``folder`` ready and return the points it already holds (ok ones only).

    Refused without ``force``: a folder with files simcoll did not write, or with
    another scenario's results (or this one's from other contents). With ``force``,
    simcoll's earlier files are deleted and the others left alone. Refused even with
    ``force``: a file of the user's with a name the run writes.
    """
    others = folder.others()
    previous = _read_json(folder.path / SWEEP_JSON) if folder.is_own(SWEEP_JSON) else None
    same = previous is not None and previous.get("digest") == digest
    stale = bool(folder.owned) and not same
    if not force and (others or stale):
        raise ConfigError(_occupied(others, stale), source=str(folder.path))
    clashes = [name for name in others if _is_run_name(name)]
    if clashes:
        raise ConfigError(
            f"holds {_names(clashes)}, which simcoll writes but did not write here; will not "
            "overwrite (move them or choose another --out)",
            source=str(folder.path),
        )
    if not same:
        folder.clear()
    info = {"scenario": scenario.source, "digest": digest, "n_points": n_points}
    folder.write_text(SWEEP_JSON, json.dumps(info, indent=2) + "\n")
    if not same:
        return {}
    return finished_points(folder.path / RESULTS_JSONL, scenario, digest)


def _occupied(others: list[str], stale: bool) -> str:
    """Why a folder needs ``--force``, and what ``--force`` will do there."""
    what = [f"files simcoll did not write ({_names(others)})"] if others else []
    if stale:
        what.append("another scenario's results (or this one's, from other file contents)")
    how = (
        "replace simcoll's results; the other files stay untouched"
        if others and stale
        else "replace them"
        if stale
        else "write beside them; they stay untouched"
    )
    return f"holds {' and '.join(what)}; choose another --out or pass --force to {how}"


def _is_run_name(name: str) -> bool:
    return name == "timelines" or re.fullmatch(RUN_PATTERN, name) is not None


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def finished_points(path: Path, scenario: Scenario, digest: str) -> dict[str, PointResult]:
    """Ok points already in ``results.jsonl`` of these contents (``digest``), whose every
    input file (the ``inputs`` each point recorded as it read them: topology, imports,
    params, placement files...) still has the bytes it had; a point that read a file
    since edited, or that recorded none (an older record), runs again.

    A torn last line (from a kill mid-write) is ignored; any other line that is not a
    point record is an error naming the file and the line.
    """
    keys = {p.key: p for p in scenario.points()}
    done: dict[str, PointResult] = {}
    hashes: dict[str, str] = {}
    for number, record in _records(path):
        if record is None or record.get("digest") != digest:
            continue
        point = keys.get(record["key"])
        if point is None or record["status"] not in ("ok", "skipped"):
            continue
        inputs = record.get("inputs")
        if not isinstance(inputs, dict) or any(
            hashes.setdefault(str(name), file_sha256(str(name))) != sha
            for name, sha in inputs.items()
        ):
            continue
        _check_rows(record["rows"], scenario.kind, path, number)
        skipped = record.get("error") if record["status"] == "skipped" else None
        done[point.key] = PointResult(
            point, record["rows"], elapsed_s=record["elapsed_s"], skipped=skipped, inputs=inputs
        )
    return done


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """``(line number, record)`` of a ``results.jsonl``; None for a torn last line."""
    lines = list(_lines(path))
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            if number == len(lines):
                yield number, None
                continue
            raise _bad(path, number, "not a JSON line") from None
        yield number, _check_record(record, path, number)


def _lines(path: Path) -> Iterator[str]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as error:
        reason = "is a symbolic link" if error.errno == errno.ELOOP else error.strerror
        raise ConfigError(f"cannot read: {reason}", source=str(path)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError("is not a regular file", source=str(path))
    with os.fdopen(fd, encoding="utf-8", errors="replace") as handle:
        while line := handle.readline(_MAX_LINE_BYTES + 1):
            if len(line) > _MAX_LINE_BYTES:
                raise ConfigError("a line of more than 64 MiB", source=str(path))
            yield line


def _check_record(record: object, path: Path, number: int) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise _bad(path, number, f"not a point record (a JSON object), got {record!r:.40}")
    checks: dict[str, Callable[[Any], bool]] = {
        "key": lambda v: isinstance(v, str),
        "status": lambda v: v in _STATUSES,
        "rows": lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v),
        "elapsed_s": lambda v: _is_number(v) and v >= 0,
    }
    for name, ok in checks.items():
        if name not in record:
            raise _bad(path, number, f"a point record without {name!r}")
        if not ok(record[name]):
            raise _bad(path, number, f"{name}: not valid in a point record: {record[name]!r:.40}")
    return record


def _check_rows(rows: list[dict[str, Any]], kind: str, path: Path, number: int) -> None:
    """Rows of a resumed point: collective rows carry :class:`Row`'s fields, typed."""
    for row in rows:
        for name, value in row.items():
            if not _is_cell(value):
                raise _bad(path, number, f"rows: {name}: not a number or text: {value!r:.40}")
        if kind != "collective":
            continue
        for name, kind_of in _ROW_TYPES.items():
            value = row.get(name)
            if value is None and name in _ROW_REQUIRED:
                raise _bad(path, number, f"rows: a row without {name!r}")
            if value is not None and not kind_of(value):
                raise _bad(path, number, f"rows: {name}: wrong type: {value!r:.40}")


def _is_cell(value: object) -> bool:
    """A row's value: a number, text, a flag, nothing, or a list of those (an axis of
    lists, as p2p's ``dst_ranks``)."""
    if isinstance(value, list):
        return all(isinstance(v, str | int | float | bool) for v in value)
    return isinstance(value, str | int | float | bool | None)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: object) -> bool:
    return isinstance(value, str)


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


_ROW_TYPES = {
    f.name: {"str": _is_text, "int": _is_int, "bool": _is_bool}.get(str(f.type), _is_number)
    for f in fields(Row)
}
_ROW_REQUIRED = {f.name for f in fields(Row) if f.default is MISSING}


def _bad(path: Path, number: int, message: str) -> ConfigError:
    return ConfigError(
        f"{message}; delete {path.name} (its points run again) or choose another --out",
        source=str(path),
        field=f"line {number}",
    )


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object of the folder's (``sweep.json``), or None where it is not one: a
    FIFO or a device put in its place is refused, never read."""
    try:
        value = json.loads(read_input_bytes(path, max_bytes=_MAX_LINE_BYTES))
    except (ValueError, RecursionError):  # a ConfigError (not a regular file) too
        return None
    return value if isinstance(value, dict) else None


def jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def iter_records(path: str | Path) -> Iterable[dict[str, Any]]:
    """The records of a ``results.jsonl`` (for tools that read a sweep's progress)."""
    for _, record in _records(Path(path)):
        if record is not None:
            yield record
