"""``simcoll bench``: the fixed speed and scale suite, each case in its own process."""

from __future__ import annotations

import argparse

from simcoll.cli._args import SubParsers, positive_int

__all__ = ["add_bench"]


def add_bench(sub: SubParsers) -> None:
    from simcoll.scenarios.bench import CASES  # noqa: PLC0415 - the suite's table, for --help

    cases = "\n".join(
        f"  {c.name:<14} {c.description}"
        + (f" (target < {c.target_wall_s:g} s)" if c.target_wall_s else "")
        for c in CASES
    )
    bench = sub.add_parser(
        "bench",
        help="run the fixed speed and scale suite (ranks, transfers, events, wall s, memory)",
        description="Run simcoll's benchmark suite on this machine, each case in its own "
        "process, and print per case: ranks, transfers of the whole schedule, transfers "
        "simulated (representatives on the exact symmetric path), events (distinct "
        "simulated instants), simulated time (ms), wall time (s), events per second, peak "
        "memory (MiB), busbw (GB/s = 1e9 B/s), the path taken and the wall-time target. "
        "Rows print as cases finish; a case past --timeout-s is stopped and reported.",
        epilog=f"cases:\n{cases}\n\nexample: simcoll bench --cases ring-8,ring-1024",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--cases", type=_case_names, metavar="NAME,...",
                       help="run only these cases (default: all)")  # fmt: skip
    bench.add_argument("--timeout-s", type=positive_int, default=600, metavar="S",
                       help="stop a case after S seconds of wall time (default 600)")  # fmt: skip
    bench.add_argument("--format", choices=("table", "csv", "json"), default="table",
                       help="output format (default table)")  # fmt: skip
    bench.set_defaults(run=_bench)


def _case_names(text: str) -> list[str]:
    from simcoll.scenarios.bench import CASES  # noqa: PLC0415

    names = [n.strip() for n in text.split(",") if n.strip()]
    valid = [c.name for c in CASES]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown case {', '.join(unknown) or repr(text)}; valid: {', '.join(valid)}"
        )
    return names


def _bench(args: argparse.Namespace) -> int:
    from simcoll.scenarios.bench import print_rows, run_bench  # noqa: PLC0415

    rows = print_rows(run_bench(args.cases, timeout_s=args.timeout_s), args.format)
    return 0 if all(r.status == "ok" for r in rows) else 1
