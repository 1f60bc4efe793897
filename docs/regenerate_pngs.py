"""Regenerate the figures of ``docs/scenarios/`` from the commands the docs name beside them.

Each figure is a copy of a plot that ``simcoll run scenarios/NAME.toml`` writes; this
runs each scenario into a temporary folder and copies the plot over the figure::

    python docs/regenerate_pngs.py            # every figure (about 1 minute here)
    python docs/regenerate_pngs.py ddp-buckets.png
    python docs/regenerate_pngs.py --list     # what comes from where

A figure is written only over a PNG simcoll wrote (``simcoll.output.plot.PNG_MARK``),
never over another file. ``tests/test_docs_figures.py`` checks that every figure of
``docs/scenarios/`` has its source here, and (slow) that this script makes each one.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "docs" / "scenarios"

#: Each figure of docs/scenarios: the scenario that makes it, and the plot of its run.
SOURCES: dict[str, tuple[str, str]] = {
    "allreduce-compositions.png": ("allreduce-compositions", "busbw-vs-size.png"),
    "allreduce-crossover.png": ("allreduce-crossover", "crossover.png"),
    "broadcast-chunks.png": ("broadcast-chunks", "metric.png"),
    "ddp-buckets.png": ("ddp-buckets", "metric.png"),
    "ddp-links-over-time.png": ("ddp-buckets", "timelines/point-0000-links-over-time.png"),
    "p2p-dgx1-gantt.png": ("p2p-dgx1", "timelines/point-0000-gantt.png"),
    "ring-allreduce-law.png": ("ring-allreduce-law", "scaling.png"),
    "scaling-designs.png": ("scaling-designs", "scaling.png"),
    "training-step.png": ("training-step", "metric.png"),
    "training-step-breakdown.png": ("training-step", "breakdown.png"),
}


def regenerate(names: list[str], into: Path = FIGURES) -> list[Path]:
    """Run each scenario the named figures need once and copy its plots into ``into``."""
    from simcoll.core.files import check_output  # noqa: PLC0415 - after argument parsing
    from simcoll.output.plot import PNG_MARK  # noqa: PLC0415

    for name in names:  # before any run: a file simcoll did not write is refused, unchanged
        check_output(str(into / name), mark=PNG_MARK, what=str(into / name))
    written: list[Path] = []
    scenarios = sorted({SOURCES[name][0] for name in names})
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in scenarios:
            out = Path(tmp) / scenario
            command = [sys.executable, "-m", "simcoll", "run",
                       str(REPO / "scenarios" / f"{scenario}.toml"), "--out", str(out)]  # fmt: skip
            print("$", " ".join(command[2:]), file=sys.stderr)
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            for name in names:
                if SOURCES[name][0] != scenario:
                    continue
                target = into / name
                shutil.copyfile(out / SOURCES[name][1], target)
                written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("figures", nargs="*", help="figures to make (default: all)")
    parser.add_argument("--list", action="store_true", help="print each figure's source")
    args = parser.parse_args(argv)
    unknown = [name for name in args.figures if name not in SOURCES]
    if unknown:
        print(f"regenerate_pngs: unknown figure {unknown[0]!r}; known: "
              f"{', '.join(SOURCES)}", file=sys.stderr)  # fmt: skip
        return 2
    if args.list:
        for name, (scenario, plot) in SOURCES.items():
            print(f"{name}: simcoll run scenarios/{scenario}.toml -> {plot}")
        return 0
    from simcoll.core.errors import SimcollError  # noqa: PLC0415

    try:
        written = regenerate(args.figures or list(SOURCES))
    except SimcollError as error:  # a figure that is not simcoll's: one line, not a trace
        print(f"regenerate_pngs: {error}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as error:
        print(f"regenerate_pngs: {' '.join(error.cmd[2:])} failed (exit {error.returncode})",
              file=sys.stderr)  # fmt: skip
        return 1
    for path in written:
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
