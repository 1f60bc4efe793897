"""Regenerate every comparison in validation/README.md: calibrate, compare, tabulate.

Each dataset is one `simcoll calibrate` (on the runs named as its calibration source,
never on the runs it is judged on, unless it says "self") and one `simcoll compare`
per calibration, with outputs in ``validation/results/NAME/``: ``params.toml``,
``points.csv``, ``summary.csv``, ``compare.png``. The script prints the commands it runs
and a markdown table of the errors per regime.

    python validation/report.py                 # every dataset
    python validation/report.py a100-allgather  # one (names: --list)
"""

from __future__ import annotations

import argparse
import csv
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from simcoll.cli import main as simcoll

REPO = Path(__file__).resolve().parents[1]
LOGS = "validation/data/nccl-tests-logs"
TESTBED = "validation/data/testbed"


@dataclass(frozen=True)
class Dataset:
    """Measured runs, the topology they ran on, and how simcoll is calibrated for them."""

    name: str
    system: str
    topology: str
    measured: list[str]
    calibrate_on: list[str] = field(default_factory=list)
    calibrate_args: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)  # for both commands
    compare_args: list[str] = field(default_factory=list)
    # extra views of the calibrated comparison: (label, more compare arguments)
    views: list[tuple[str, list[str]]] = field(default_factory=list)


def testbed(name: str, stem: str, what: str) -> Dataset:
    """A run of our own on the emulated cluster (``validation/topologies/STEM.toml``, data
    in ``validation/data/testbed/STEM.csv``), calibrated on its sendrecv rows only."""
    data = f"{TESTBED}/{stem}.csv"
    return Dataset(
        name=name,
        system=f"emulated (netns + tbf): {what}; torch gloo; calibrated on its sendrecv only",
        topology=f"validation/topologies/{stem}.toml",
        measured=[data],
        calibrate_on=[data],
        calibrate_args=["--collective", "sendrecv"],
        args=["--backend", "gloo"],
        views=[("calibrated, sizes from 1 MiB", ["--min-size", "1M"])],
    )


DATASETS = [
    Dataset(
        name="a100-allgather",
        system="8x A100 SXM4 NVSwitch, NCCL (SuperBench log); predicted all-gather",
        topology="topologies/dgx-a100.toml",
        measured=[
            f"{LOGS}/nccl_allgather_8xA100_nvswitch_superbench.log",
            f"{LOGS}/nccl_allreduce_8xA100_nvswitch_superbench.log",
        ],
        calibrate_on=[f"{LOGS}/nccl_allreduce_8xA100_nvswitch_superbench.log"],
        calibrate_args=["--fit", "efficiency,protocol_efficiency,launch_s"],
        args=["--algorithm", "ring"],
    ),
    Dataset(
        name="a100-sendrecv",
        system="8x A100 NVSwitch, NCCL sendrecv (li-plus), with the all-reduce calibration",
        topology="topologies/dgx-a100.toml",
        measured=[f"{LOGS}/nccl_sendrecv_8xA100_nvswitch_liplus.log"],
        calibrate_on=[f"{LOGS}/nccl_allreduce_8xA100_nvswitch_superbench.log"],
        calibrate_args=["--fit", "efficiency,protocol_efficiency,launch_s"],
        args=["--algorithm", "ring"],
        compare_args=["--algorithm", "direct"],
    ),
    Dataset(
        name="h100-2x8-allreduce",
        system="2 nodes x 8 H100, NVLink4 + 8x400G IB, NCCL ring (nccl-tests#309)",
        topology="topologies/h100-rail-optimized.toml",
        measured=[f"{LOGS}/nccl_allreduce_2x8xH100_ndr_ring_mincta24_nccltests309_gjaion.log"],
        args=["--set", "n_nodes=2", "--algorithm", "ring", "--nccl", "NCCL_MIN_CTAS=24"],
    ),
    Dataset(
        name="rtx4090-nop2p-allreduce",
        system="8x RTX 4090 PCIe Gen4, no P2P (chlc blog)",
        topology="topologies/pcie-8x-rtx4090.toml",
        measured=[f"{LOGS}/nccl_allreduce_8xRTX4090_pcie_noP2P_chlc.log"],
        args=["--algorithm", "ring"],
    ),
    Dataset(
        name="v100-allreduce",
        system="8x V100 SXM2 hybrid cube mesh, 1 GiB only (OCI tutorial)",
        topology="topologies/dgx1-v100.toml",
        measured=[f"{LOGS}/nccl_allreduce_8xV100_oci_bmgpu38_ocitutorials.log"],
        args=["--algorithm", "ring"],
    ),
    testbed("testbed-star4", "star4-1gbit", "4 ranks, 1 Gbit/s star"),
    testbed(
        "testbed-star4-500mbit",
        "star4-500mbit",
        "the 4-rank star at 500 Mbit/s (host effects halved)",
    ),
    testbed(
        "testbed-two-switches",
        "two-switches-oversubscribed",
        "2 switches x 2 ranks at 1 Gbit/s, 500 Mbit/s uplink, all nine collectives",
    ),
    testbed(
        "testbed-one-slow",
        "star4-one-slow",
        "4 ranks at 1 Gbit/s, rank 3 at 200 Mbit/s, all nine collectives",
    ),
]


def run(command: list[str]) -> None:
    """Run one simcoll command, echoing it; stop on failure."""
    print("$ simcoll " + " ".join(shlex.quote(c) for c in command), file=sys.stderr)
    code = simcoll(command)
    if code:
        raise SystemExit(f"report: simcoll exited with status {code}")


def report(dataset: Dataset) -> list[dict[str, str]]:
    """Calibrate (if the dataset has a source) and compare; the summary rows, labelled."""
    out = REPO / "validation" / "results" / dataset.name
    out.mkdir(parents=True, exist_ok=True)
    base = ["--topology", dataset.topology, *dataset.args]
    rows = []
    variants: list[tuple[str, list[str]]] = [("uncalibrated", [])]
    if dataset.calibrate_on:
        params = str((out / "params.toml").relative_to(REPO))
        run(["calibrate", *dataset.calibrate_on, *base, *dataset.calibrate_args, "-o", params])
        variants.append(("calibrated", ["--params", params]))
        variants += [(label, ["--params", params, *more]) for label, more in dataset.views]
    for index, (label, extra) in enumerate(variants):
        if label == "calibrated" or not dataset.calibrate_on:
            folder = out
        else:
            folder = out / ("uncalibrated" if index == 0 else f"view{index - 1}")
        target = str(folder.relative_to(REPO))
        # --force: the folder also holds params.toml and the variants' folders (each folder
        # lists what compare wrote there in .simcoll-manifest.json, and only that is replaced)
        run(["compare", *dataset.measured, *base, *dataset.compare_args, *extra,
             "--out", target, "--force"])  # fmt: skip
        with (folder / "summary.csv").open(encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                rows.append({"dataset": dataset.name, "variant": label, **row})
    return rows


def markdown(rows: list[dict[str, str]]) -> str:
    """The README table: errors in percent, one row per file, variant and regime."""
    head = ("| dataset | simulated | measured file | collective | regime | points | "
            "mean time err | median abs time err | median abs busbw err |")  # fmt: skip
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if r["regime"] == "all":
            continue
        pct = {k: 100 * float(r[k]) for k in
               ("mean_time_error", "median_abs_time_error", "median_abs_busbw_error")}  # fmt: skip
        lines.append(
            f"| {r['dataset']} | {r['variant']} | {r['source']} | {r['collective']} | "
            f"{r['regime']} | {r['points']} | {pct['mean_time_error']:+.1f} % | "
            f"{pct['median_abs_time_error']:.1f} % | {pct['median_abs_busbw_error']:.1f} % |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="datasets to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the datasets and stop")
    args = parser.parse_args(argv)
    known = {d.name: d for d in DATASETS}
    if args.list:
        for d in DATASETS:
            print(f"{d.name}: {d.system}")
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"report: unknown dataset {unknown[0]!r}; valid: {', '.join(known)}",
              file=sys.stderr)  # fmt: skip
        return 2
    chosen = [known[n] for n in args.names] or DATASETS
    missing = [f for d in chosen for f in d.measured + d.calibrate_on if not (REPO / f).exists()]
    if missing:
        print(f"report: no such file {missing[0]} (make it first; see validation/README.md)",
              file=sys.stderr)  # fmt: skip
        return 2
    rows = [row for d in chosen for row in report(d)]
    table = markdown(rows)
    if not args.names:
        (REPO / "validation" / "results" / "report.md").write_text(
            "# Every comparison, regenerated by `python validation/report.py`\n\n" + table + "\n"
        )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
