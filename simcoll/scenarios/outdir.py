"""The output folder of a run: which files are simcoll's, and what it already holds.

The files of a run (see :mod:`simcoll.scenarios.report` for the tables and plots made
from them):

- ``sweep.json``: what ran (scenario file, its digest, number of points);
- ``results.jsonl``: one line per finished point (``status`` ok or error);
- ``results.csv`` / ``results.json``: the rows of all ok points, in point order;
- ``table.txt``, plots, and ``timelines/`` traces, as the scenario's ``[output]`` asks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError
from simcoll.scenarios.points import PointResult
from simcoll.scenarios.scenario import (
    Scenario,
)

__all__ = ["OWN_FILES", "RESULTS_JSONL", "SWEEP_JSON", "iter_records", "prepare_out_dir"]

RESULTS_JSONL = "results.jsonl"


SWEEP_JSON = "sweep.json"


#: Files a run writes; a folder holding anything else needs ``force`` to be reused.
OWN_FILES = (
    SWEEP_JSON,
    RESULTS_JSONL,
    "results.csv",
    "results.json",
    "table.txt",
    "timelines",
)


def prepare_out_dir(
    out: Path, scenario: Scenario, n_points: int, *, force: bool
) -> dict[str, PointResult]:
    """Make ``out`` ready and return the points it already holds (ok ones only)."""
    marker = out / SWEEP_JSON
    info = {"scenario": scenario.source, "digest": scenario.digest, "n_points": n_points}
    if out.exists() and any(out.iterdir()):
        previous = read_json(marker)
        same = previous is not None and previous.get("digest") == scenario.digest
        if not same and not force:
            what = "another scenario's results" if previous else "other files"
            raise ConfigError(
                f"holds {what}; choose another --out or pass --force to replace them",
                source=str(out),
            )
        if not same:
            clear_own_files(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(marker, json.dumps(info, indent=2) + "\n")
    return finished_points(out / RESULTS_JSONL, scenario)


def clear_own_files(out: Path) -> None:
    """Remove what an earlier run wrote (``--force``); other files stay."""
    import shutil  # noqa: PLC0415

    for name in OWN_FILES:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for plot in out.glob("*.png"):
        plot.unlink()


def finished_points(path: Path, scenario: Scenario) -> dict[str, PointResult]:
    """Ok points already in ``results.jsonl`` (a torn last line, from a kill, is ignored)."""
    if not path.exists():
        return {}
    keys = {p.key: p for p in scenario.points()}
    done: dict[str, PointResult] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        point = keys.get(record.get("key"))
        status = record.get("status")
        if point is None or status not in ("ok", "skipped"):
            continue
        skipped = record.get("error") if status == "skipped" else None
        done[point.key] = PointResult(
            point, record["rows"], elapsed_s=record["elapsed_s"], skipped=skipped
        )
    return done


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def iter_records(path: str | Path) -> Iterable[dict[str, Any]]:
    """The records of a ``results.jsonl`` (for tools that read a sweep's progress)."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue
