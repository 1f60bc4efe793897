"""Accuracy where nothing was fitted: per machine, calibrate on one public table and predict
every other table of that machine (other collectives, other node counts) with the
defaults; never report a table the fit saw.

    python validation/loo.py                 # every machine; writes validation/results/loo/
    python validation/loo.py a100            # one machine (names: --list)
    python validation/loo.py --out DIR       # elsewhere

For each predicted table it prints the median and worst |busbw error| over the sizes from
64 MiB and over those from 1 KiB (busbw error = measured time / simulated time - 1, as
``simcoll compare`` defines it), then the median of those per-table medians over every
predicted table. The commands it runs are echoed on stderr; ``validation/results/loo/``
keeps each fit's ``params.toml`` and each comparison's ``points.csv``, ``summary.csv`` and
``compare.png``, and ``report.md`` the table.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from simcoll.cli import main as simcoll

REPO = Path(__file__).resolve().parents[1]
PUBLIC = "validation/data/public"
OUT = REPO / "validation" / "results" / "loo"
#: The size regimes reported: from 64 MiB (bandwidth) and from 1 KiB (all but the tiniest).
FROM_BYTES = {"from 64 MiB": 64 * 2**20, "from 1 KiB": 2**10}
#: What each fit fits (as the shipped parameter files were fitted), unless the machine says.
FIT = ["--fit", "efficiency,protocol_efficiency,launch_s"]


@dataclass(frozen=True)
class Table:
    """One public nccl-tests table and how the machine ran it (``simcoll`` arguments)."""

    file: str
    args: list[str]

    @property
    def name(self) -> str:
        return Path(self.file).stem

    @property
    def cluster(self) -> str:
        """The machine the run was made on: the file name's last part, its source's name
        for it (``gjaion``, ``qoofyk``; ``nccltests290`` where the source names none).

        >>> _table("nccl_allreduce_4x8xH100_ndr_nccltests309_gjaion").cluster
        'gjaion'
        """
        return self.name.rsplit("_", 1)[-1]

    @property
    def n_nodes(self) -> int:
        """Servers the run spans: ``4x8xH100`` 4, ``8xA100`` 1.

        >>> _table("nccl_allreduce_4x8xH100_ndr_nccltests309_gjaion").n_nodes, \\
        ...     _table("nccl_allreduce_8xA100_nvswitch_superbench").n_nodes
        (4, 1)
        """
        found = re.match(r"nccl_[a-z]+_(\d+)x\d+x", self.name)
        return int(found[1]) if found else 1


@dataclass(frozen=True)
class Machine:
    """A machine's tables: the one calibrated on, and those predicted."""

    name: str
    topology: str
    fit_on: Table
    predict: list[Table] = field(default_factory=list)
    fit: list[str] = field(default_factory=lambda: list(FIT))  # calibrate's fit arguments


def _table(stem: str, *args: str) -> Table:
    return Table(f"{PUBLIC}/{stem}.csv", list(args))


def _h100_allreduce(stem: str, n_nodes: int) -> Table:
    """An all-reduce table of ``n_nodes`` DGX H100 servers of the NDR fat-tree."""
    return _table(stem, "--set", f"n_nodes={n_nodes}", "--collective", "allreduce",
                  "--ranks", str(8 * n_nodes))  # fmt: skip


MACHINES = [
    Machine(
        "a100",
        "topologies/dgx-a100.toml",
        fit_on=_table(
            "nccl_allreduce_8xA100_nvswitch_superbench",
            "--collective",
            "allreduce",
            "--ranks",
            "8",
            "--algorithm",
            "nccl",  # nccl-tests with no NCCL_ALGO: NCCL's own choice per size
        ),
        predict=[
            _table(
                "nccl_allgather_8xA100_nvswitch_superbench",
                "--collective",
                "allgather",
                "--ranks",
                "8",
            ),
            _table(
                "nccl_reducescatter_8xA100_nvswitch_superbench",
                "--collective",
                "reducescatter",
                "--ranks",
                "8",
            ),
            _table(
                "nccl_sendrecv_8xA100_nvswitch_liplus", "--collective", "sendrecv", "--ranks", "8"
            ),
        ],
        # as the shipped dgx-a100.params.toml was fitted (its [fit] command): with the
        # per-step latency, and the floor the fitted table's own 0-byte rows measure
        fit=[
            "--protocol",
            "auto",
            "--fit",
            "efficiency,protocol_efficiency,step_latency_s,launch_s,floor_s",
        ],
    ),
    Machine(
        "h100",
        "topologies/h100-ib-fat-tree.toml",
        fit_on=_table(
            "nccl_allreduce_2x8xH100_ndr_ring_mincta24_nccltests309_gjaion",
            "--set",
            "n_nodes=2",
            "--collective",
            "allreduce",
            "--ranks",
            "16",
            "--algorithm",
            "ring",
            "--nccl",
            "NCCL_MIN_CTAS=24",  # as the run was made
        ),
        predict=[
            _h100_allreduce("nccl_allreduce_4x8xH100_ndr_nccltests309_gjaion", 4),
            # the same thread: NCCL's default on 2 and 8 of gj-aion's nodes, NCCL_MIN_CTAS=24
            # NCCL_IB_QPS_PER_CONNECTION=2 on 8 (the CTAs simulated, not the queue pairs:
            # simcoll has no such knob), and qoofyk's 2 bare-metal and 4 VM nodes from 8 B
            _h100_allreduce("nccl_allreduce_2x8xH100_ndr_nccltests309_gjaion", 2),
            _h100_allreduce("nccl_allreduce_8x8xH100_ndr_nccltests309_gjaion", 8),
            Table(
                f"{PUBLIC}/nccl_allreduce_8x8xH100_ndr_mincta24_qps2_nccltests309_gjaion.csv",
                [*_h100_allreduce("", 8).args, "--nccl", "NCCL_MIN_CTAS=24"],
            ),
            _h100_allreduce("nccl_allreduce_2x8xH100_ndr_nccltests309_qoofyk", 2),
            _h100_allreduce("nccl_allreduce_4x8xH100_ndr_vm_nccltests309_qoofyk", 4),
            _h100_allreduce("nccl_allreduce_8xH100_nvswitch_nccltests290", 1),
        ],
        # the servers' own parameters held (the hardware file), the network's fitted
        fit=[
            "--base",
            "topologies/calibration/hardware/h100-sxm-nvlink4.params.toml",
            "--fit",
            "efficiency.net,step_latency_s.net",
        ],
    ),
    # The RTX 4090's links are fitted on p2pBandwidthLatencyTest's copies between its GPU
    # pairs, in closed form (simcoll.calibrate.p2p_matrix), and predict NCCL's all-reduce
    # over the same path: P2P on with the P2P driver, staged through host memory without.
    Machine(
        "rtx4090",
        "topologies/pcie-8x-rtx4090.toml",
        fit_on=_table("p2p_matrices_8xRTX4090_pcie_P2Pdriver_chlc", "--set", "p2p=true"),
        predict=[
            _table(
                "nccl_allreduce_8xRTX4090_pcie_P2Pdriver_chlc",
                "--set",
                "p2p=true",
                "--collective",
                "allreduce",
                "--ranks",
                "8",
            ),
        ],
        fit=[],
    ),
    Machine(
        "rtx4090-staged",
        "topologies/pcie-8x-rtx4090.toml",
        fit_on=_table("p2p_matrices_8xRTX4090_pcie_noP2P_chlc"),
        predict=[
            _table(
                "nccl_allreduce_8xRTX4090_pcie_noP2P_chlc",
                "--collective",
                "allreduce",
                "--ranks",
                "8",
            ),
        ],
        fit=[],
    ),
]


def run(command: list[str]) -> None:
    """Run one simcoll command, echoing it; stop on failure."""
    print("$ simcoll " + shlex.join(command), file=sys.stderr)
    code = simcoll(command)
    if code:
        raise SystemExit(f"loo: simcoll exited with status {code}")


def errors_by_size(points_csv: Path) -> dict[int, float]:
    """``size_bytes: busbw error`` of a ``simcoll compare`` points.csv (out-of-place)."""
    with points_csv.open(encoding="utf-8") as handle:
        return {int(r["size_bytes"]): float(r["busbw_error"]) for r in csv.DictReader(handle)}


def summarise(errors: dict[int, float]) -> dict[str, tuple[float, int, int] | None]:
    """Per regime of :data:`FROM_BYTES`: (median |error|, worst size, points), or None
    where the table has no size in it.

    >>> summarise({2**10: 0.1, 2**26: -0.3, 2**27: 0.2})["from 64 MiB"]
    (0.25, 67108864, 2)
    """
    out: dict[str, tuple[float, int, int] | None] = {}
    for label, smallest in FROM_BYTES.items():
        kept = {s: abs(e) for s, e in errors.items() if s >= smallest}
        if not kept:
            out[label] = None
            continue
        worst = max(kept, key=lambda s: kept[s])
        out[label] = (statistics.median(kept.values()), worst, len(kept))
    return out


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it is inside it (commands read better)."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def predict_machine(machine: Machine, out: Path = OUT) -> list[tuple[Table, dict[int, float]]]:
    """Calibrate on the machine's fit table and compare every other; their errors."""
    folder = out / machine.name
    folder.mkdir(parents=True, exist_ok=True)
    params = _shown(folder / "params.toml")
    fit = machine.fit_on
    run(
        [
            "calibrate",
            "--topology",
            machine.topology,
            *fit.args,
            *machine.fit,
            "-o",
            params,
            fit.file,
        ]
    )
    found = []
    for table in machine.predict:
        target = folder / table.name
        run(
            [
                "compare",
                "--topology",
                machine.topology,
                *table.args,
                "--params",
                params,
                "--out",
                _shown(target),
                "--force",
                table.file,
            ]
        )
        found.append((table, errors_by_size(target / "points.csv")))
    return found


def markdown(results: list[tuple[Machine, Table, dict[int, float]]]) -> str:
    """The report: a row per predicted table, then the medians over every table."""
    lines = [
        "| machine | fitted on | predicted | "
        + " | ".join(f"median {k} | worst {k}" for k in FROM_BYTES)
        + " |"
    ]
    lines.append("|" + "---|" * (3 + 2 * len(FROM_BYTES)))
    medians: dict[str, list[float]] = {label: [] for label in FROM_BYTES}
    for machine, table, errors in results:
        cells = []
        for label, found in summarise(errors).items():
            if found is None:
                cells += ["-", "-"]
                continue
            median, worst, _ = found
            medians[label].append(median)
            cells += [f"{100 * median:.1f} %", f"{100 * abs(errors[worst]):.1f} % at {worst} B"]
        lines.append(
            f"| {machine.name} | {machine.fit_on.name} | {table.name} | " + " | ".join(cells) + " |"
        )
    summary = ", ".join(
        f"{label}: {100 * statistics.median(values):.1f} % over {len(values)} tables"
        for label, values in medians.items()
        if values
    )
    return ("\n".join(lines) + f"\n\nMedian of the per-table medians of |busbw error|: {summary}.\n"
            + _cross_cluster(results) + _node_scaling(results))  # fmt: skip


def _medians(errors: dict[int, float]) -> dict[str, float | None]:
    """Per regime of :data:`FROM_BYTES`, the table's median |busbw error| (None: no size)."""
    return {label: found[0] if found else None for label, found in summarise(errors).items()}


def _cross_cluster(results: list[tuple[Machine, Table, dict[int, float]]]) -> str:
    """The tables of another cluster than the one the fit saw, the same hardware: what a
    user with the shipped fit gets on a machine nobody here measured."""
    rows = [(m, t, _medians(e)) for m, t, e in results if t.cluster != m.fit_on.cluster
            and t.n_nodes > 1]  # fmt: skip
    if not rows:
        return ""
    lines = ["\n## Cross-cluster: fitted on one cluster, predicting another\n",
             "| machine | fitted on | predicted | nodes | "
             + " | ".join(f"median {k}" for k in FROM_BYTES) + " |",
             "|" + "---|" * (4 + len(FROM_BYTES))]  # fmt: skip
    for m, t, medians in rows:
        cells = " | ".join("-" if v is None else f"{100 * v:.1f} %" for v in medians.values())
        lines.append(f"| {m.name} | {m.fit_on.cluster} | {t.name} | {t.n_nodes} | {cells} |")
    overall = ", ".join(
        f"{label}: {100 * statistics.median(values):.1f} %"
        for label in FROM_BYTES
        if (values := [v for _, _, md in rows if (v := md[label]) is not None])
    )
    return "\n".join(lines) + f"\n\nMedian over these tables: {overall}.\n"


def _node_scaling(results: list[tuple[Machine, Table, dict[int, float]]]) -> str:
    """Each cluster's default-NCCL tables by node count (2 -> 4 -> 8 nodes)."""
    by_cluster: dict[str, list[tuple[Table, dict[str, float | None]]]] = {}
    for _, t, e in results:
        if "--nccl" not in t.args and "--algorithm" not in t.args and t.n_nodes > 1:
            by_cluster.setdefault(t.cluster, []).append((t, _medians(e)))
    scaling = {c: sorted(ts, key=lambda x: x[0].n_nodes) for c, ts in by_cluster.items()
               if len({t.n_nodes for t, _ in ts}) > 1}  # fmt: skip
    if not scaling:
        return ""
    lines = ["\n## Node scaling: one cluster's default runs on more nodes\n",
             "| cluster | nodes | predicted | " + " | ".join(f"median {k}" for k in FROM_BYTES)
             + " |", "|" + "---|" * (3 + len(FROM_BYTES))]  # fmt: skip
    for cluster, tables in scaling.items():
        for t, medians in tables:
            cells = " | ".join("-" if v is None else f"{100 * v:.1f} %" for v in medians.values())
            lines.append(f"| {cluster} | {t.n_nodes} | {t.name} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="machines to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the machines and stop")
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"output folder (default {_shown(OUT)})"
    )
    args = parser.parse_args(argv)
    known = {m.name: m for m in MACHINES}
    if args.list:
        for m in MACHINES:
            print(
                f"{m.name}: fit on {m.fit_on.name}; predict {', '.join(t.name for t in m.predict)}"
            )
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"loo: unknown machine {unknown[0]!r}; valid: {', '.join(known)}", file=sys.stderr)
        return 2
    chosen = [known[n] for n in args.names] or MACHINES
    out = args.out.resolve()
    os.chdir(REPO)  # the tables and topologies are named relative to the repository
    results = [(m, table, errors) for m in chosen for table, errors in predict_machine(m, out)]
    table = markdown(results)
    if not args.names:
        (out / "report.md").write_text(
            "# Leave-one-out accuracy, regenerated by `python validation/loo.py`\n\n" + table
        )
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
