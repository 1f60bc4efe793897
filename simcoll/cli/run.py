"""``simcoll run SCENARIO``: run a scenario's sweep and write its tables and plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError

__all__ = ["add_run"]


def add_run(sub: argparse._SubParsersAction[Any]) -> None:
    """Register ``simcoll run``."""
    p = sub.add_parser(
        "run",
        help="run a scenario file (a sweep of a collective or a workload) and write results",
        description="Run every point of a scenario (scenarios/*.toml: a topology, a workload, "
        "sweep axes, outputs) in parallel, and write results.csv, results.json, an "
        "nccl-tests-style table.txt, the plots, and Perfetto traces into --out. Each finished "
        "point is saved at once to results.jsonl; running again into the same folder "
        "completes only the missing points. A failed point is recorded with its error and "
        "the others go on.",
        epilog="example: simcoll run scenarios/ddp-buckets.toml --out runs/ddp",
    )
    p.add_argument("scenario", metavar="SCENARIO", help="scenario TOML file")
    p.add_argument("--out", metavar="DIR",
                   help="output folder (default: runs/<scenario name>); files simcoll did "
                   "not write there are never changed")  # fmt: skip
    p.add_argument("--workers", type=int, metavar="N",
                   help="worker processes (default: one per core; 1: in-process)")  # fmt: skip
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the points on a Dask distributed scheduler (tcp://host:8786) "
                   "instead of local processes; needs pip install 'simcoll[dask]'")  # fmt: skip
    p.add_argument("--max-hours", type=float, default=None, metavar="H",
                   help="refuse a sweep estimated to take longer than H hours (default 12); "
                   "the estimate is printed before the sweep starts")  # fmt: skip
    p.add_argument("--force", action="store_true",
                   help="use an --out holding other files (they stay untouched) or another "
                   "scenario's results (simcoll's own files there are replaced)")  # fmt: skip
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from simcoll.scenarios.cost import DEFAULT_MAX_HOURS  # noqa: PLC0415
    from simcoll.scenarios.outdir import open_run_folder  # noqa: PLC0415
    from simcoll.scenarios.points import PointResult  # noqa: PLC0415
    from simcoll.scenarios.report import format_results, write_report, write_timeline  # noqa: PLC0415
    from simcoll.scenarios.scenario import load_scenario  # noqa: PLC0415
    from simcoll.scenarios.sweep import check_sweep, run_sweep  # noqa: PLC0415

    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"must be at least 1, got {args.workers}", field="--workers")
    if args.max_hours is not None and not args.max_hours > 0:
        raise ConfigError(
            f"must be a positive number of hours, got {args.max_hours}", field="--max-hours"
        )
    if args.out == "":
        raise ConfigError("an empty folder name; give a folder (. for this one)", field="--out")
    scenario = load_scenario(args.scenario)
    out = Path(args.out) if args.out is not None else Path("runs") / Path(args.scenario).stem
    n_points = scenario.n_points
    print(f"{scenario.title}: {n_points} point(s), results in {out}/", file=sys.stderr)
    max_hours = args.max_hours if args.max_hours is not None else DEFAULT_MAX_HOURS
    check_sweep(scenario, workers=args.workers, scheduler=args.scheduler, max_hours=max_hours,
                progress=sys.stderr)  # fmt: skip
    with open_run_folder(out) as folder:

        def on_point(result: PointResult) -> None:
            if result.timeline is not None:
                write_timeline(result.timeline, result.point, scenario, folder)

        result = run_sweep(scenario, folder, workers=args.workers, scheduler=args.scheduler,
                           force=args.force, progress=sys.stderr, max_hours=None,
                           on_point=on_point)  # fmt: skip
        written = write_report(result, folder)
        has_timelines = folder.is_own("timelines/")
    print(format_results(result))
    if result.skipped:
        print(f"# {result.skipped} point(s) were already in {out} and were not run again")
    print(f"simcoll: wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    if has_timelines:
        print(f"simcoll: timelines (Perfetto: ui.perfetto.dev; Gantt; link load): "
              f"{out / 'timelines'}/", file=sys.stderr)  # fmt: skip
    if result.failures:
        print(f"simcoll: {len(result.failures)} of {n_points} point(s) failed; see table.txt",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0
