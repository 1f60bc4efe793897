"""The notebook entry point: run a scenario from Python and get plain tables back.

>>> import simcoll
>>> result = simcoll.run_scenario({
...     "schema": 1,
...     "topology": {"file": "topologies/dgx-a100.toml"},
...     "workload": {"collective": "allreduce", "algorithm": "ring", "size_bytes": "1 GiB",
...                  "calibration": "none"},
...     "sweep": {"n_ranks": [2, 4, 8]},
... })
>>> # on the bare links a ring all-reduce runs at the 300 GB/s of one NVLink direction per
>>> # GPU: busbw 300 (without "calibration": "none", the file's fit: what nccl-tests measures)
>>> [(row["n_ranks"], round(row["busbw_bytes_per_s"] / 1e9)) for row in result.rows]
[(2, 300), (4, 300), (8, 300)]
>>> result.column("n_ranks").tolist()
[2, 4, 8]
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError
from simcoll.scenarios.outdir import open_run_folder
from simcoll.scenarios.points import PointResult
from simcoll.scenarios.scenario import load_scenario, parse_scenario
from simcoll.scenarios.sweep import SweepResult, check_sweep, run_sweep

__all__ = ["run_scenario"]


def run_scenario(
    scenario: str | Path | Mapping[str, Any],
    *,
    out: str | Path | None = None,
    workers: int | None = 1,
    scheduler: str | None = None,
    force: bool = False,
    base: str | Path = ".",
) -> SweepResult:
    """Run a scenario (a TOML file, or the same data as a dict) and return its results.

    Parameters
    ----------
    scenario
        A path to a scenario file, or its contents as a mapping (paths inside resolve
        against ``base``).
    out
        A folder for the same files ``simcoll run --out`` writes (tables, plots, traces,
        and ``results.jsonl`` for resuming); None keeps everything in memory.
    workers, scheduler, force
        As for ``simcoll run``; ``workers=1`` (the default here) runs in this process.

    Returns
    -------
    SweepResult
        ``.rows`` (a list of dicts: DESIGN's columns, the workload's metrics and the axis
        values), ``.column(name)`` (a numpy array), ``.to_pandas()`` (with pandas
        installed), ``.failures`` (points that failed, with their errors).
    """
    if isinstance(scenario, bool) or not isinstance(scenario, str | Path | Mapping):
        raise ConfigError(
            "run_scenario takes a scenario file's path or its contents as a dict, got "
            f"{type(scenario).__name__} {scenario!r:.40}"
        )
    if isinstance(scenario, Mapping):
        spec = parse_scenario(scenario, source="<scenario>", base=Path(base))
    else:
        spec = load_scenario(scenario)
    if out is None:
        return run_sweep(spec, None, workers=workers, scheduler=scheduler)
    from simcoll.scenarios.report import write_report, write_timeline  # noqa: PLC0415

    check_sweep(spec, workers=workers, scheduler=scheduler)
    with open_run_folder(out) as folder:

        def on_point(point: PointResult) -> None:
            if point.timeline is not None:
                write_timeline(point.timeline, point.point, spec, folder)

        result = run_sweep(spec, folder, workers=workers, scheduler=scheduler, force=force,
                           max_hours=None, on_point=on_point)  # fmt: skip
        write_report(result, folder)
    return result
