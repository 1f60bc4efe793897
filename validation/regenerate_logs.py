"""Print the public nccl-tests tables back as nccl-tests logs, each in its version's layout.

Usage: ``python validation/regenerate_logs.py [OUT_DIR]`` (default:
``validation/data/nccl-tests-logs``). Reads every table of ``validation/data/public`` listed
in :data:`LOGS` and writes ``<same name>.log`` with
:func:`simcoll.calibrate.nccltests.write.format_log`:
the SuperBench captures in the old layout (``error`` column, per-test columns), the rest in
the new one (``redop root``, ``#wrong``). Sizes, counts, times and the printed algbw/busbw
are the table's own; the header settings come from what each source states (see the
public README) and nccl-tests' defaults otherwise; host names, process ids and bus ids that
the sources do not give are placeholders. ``# Avg bus bandwidth`` is the mean of the
printed busbw, so it can differ in the last digits from the original run's.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path

from simcoll.calibrate.nccltests import Layout
from simcoll.calibrate.nccltests.write import LogHeader, format_log, oop_ip_pairs
from simcoll.calibrate.read import read_measurements

HERE = Path(__file__).resolve().parent
PUBLIC = HERE / "data" / "public"
DEFAULT_OUT = HERE / "data" / "nccl-tests-logs"

# SuperBench's header: "nThread 1 nGpus 8 minBytes 1 maxBytes 8589934592 ... validation: 0"
_SUPERBENCH = LogHeader(min_bytes=1, max_bytes=2**33, validation=0, device_name="A100-SXM4-40GB")
# chlc: "./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8"
_RTX4090 = LogHeader(min_bytes=8, max_bytes=2**27, device_name="NVIDIA GeForce RTX 4090")

#: Per public table: the layout its nccl-tests version printed, and its header settings.
LOGS: dict[str, tuple[Layout, LogHeader]] = {
    "nccl_allgather_8xA100_nvswitch_superbench.csv": ("old", replace(_SUPERBENCH, pid=112372)),
    "nccl_allreduce_8xA100_nvswitch_superbench.csv": ("old", replace(_SUPERBENCH, pid=112424)),
    "nccl_reducescatter_8xA100_nvswitch_superbench.csv": ("old", replace(_SUPERBENCH, pid=112580)),
    "nccl_allreduce_2x8xH100_ndr_ring_mincta24_nccltests309_gjaion.csv": (
        "new",
        LogHeader(n_gpus=1, hosts=("node0", "node1"), device_name="NVIDIA H100 80GB HBM3"),
    ),
    # "mpirun -np 32 -N 8 ./build/all_reduce_perf -b 1M -e 8G -f 2 -g 1"
    "nccl_allreduce_4x8xH100_ndr_nccltests309_gjaion.csv": (
        "new",
        LogHeader(
            n_gpus=1,
            hosts=("node0", "node1", "node2", "node3"),
            device_name="NVIDIA H100 80GB HBM3",
        ),
    ),
    # gj-aion's default runs on 2 and 8 of the same nodes, and on 8 with NCCL_MIN_CTAS=24
    # NCCL_IB_QPS_PER_CONNECTION=2 ("mpirun -np 64 -N 8 ... -b 1M -e 8G -f 2 -g 1")
    **{
        name: (
            "new",
            LogHeader(
                n_gpus=1,
                hosts=tuple(f"node{i}" for i in range(nodes)),
                device_name="NVIDIA H100 80GB HBM3",
            ),
        )
        for name, nodes in (
            ("nccl_allreduce_2x8xH100_ndr_nccltests309_gjaion.csv", 2),
            ("nccl_allreduce_8x8xH100_ndr_nccltests309_gjaion.csv", 8),
            ("nccl_allreduce_8x8xH100_ndr_mincta24_qps2_nccltests309_gjaion.csv", 8),
        )
    },
    # qoofyk's "all_reduce_perf_mpi -b 8 -e 16g -f 2 -g 1" on 2 bare-metal and 4 VM hosts
    "nccl_allreduce_2x8xH100_ndr_nccltests309_qoofyk.csv": (
        "new",
        LogHeader(
            min_bytes=8,
            max_bytes=2**34,
            n_gpus=1,
            hosts=("bm-h100-01", "bm-h100-02"),
            device_name="NVIDIA H100 80GB HBM3",
        ),
    ),
    "nccl_allreduce_4x8xH100_ndr_vm_nccltests309_qoofyk.csv": (
        "new",
        LogHeader(
            min_bytes=8,
            max_bytes=2**34,
            n_gpus=1,
            hosts=("pt01", "spt01", "spt02", "pt02"),
            device_name="NVIDIA H100 80GB HBM3",
        ),
    ),
    # "all_reduce_perf -g 8", 128M to 4G, warm-up 5, 2 iterations
    "nccl_allreduce_8xH100_nvswitch_nccltests290.csv": (
        "new",
        LogHeader(
            min_bytes=2**27,
            max_bytes=2**32,
            iters=2,
            hosts=("node005",),
            device_name="NVIDIA H100 80GB HBM3",
        ),
    ),
    "nccl_allreduce_8xRTX4090_pcie_P2Pdriver_chlc.csv": ("new", _RTX4090),
    "nccl_allreduce_8xRTX4090_pcie_noP2P_chlc.csv": ("new", _RTX4090),
    # "./build/all_reduce_perf -b 1G -e 1G -f 2 -t 1 -g 8"
    "nccl_allreduce_8xV100_oci_bmgpu38_ocitutorials.csv": (
        "new",
        LogHeader(min_bytes=2**30, max_bytes=2**30, device_name="Tesla V100-SXM2-16GB"),
    ),
    # "./build/sendrecv_perf -b 128M -e 1G -f 2 -g 8"
    "nccl_sendrecv_8xA100_nvswitch_liplus.csv": (
        "new",
        LogHeader(min_bytes=2**27, max_bytes=2**30, device_name="NVIDIA A100 (model not stated)"),
    ),
}


def log_text(table: Path) -> str:
    """The nccl-tests log of one public table."""
    layout, header = LOGS[table.name]
    runs = read_measurements(table)
    with table.open(newline="") as f:
        printed = [
            (float(r["algbw_oop"]), float(r["busbw_oop"]), float(r["algbw_ip"]),
             float(r["busbw_ip"]))
            for r in csv.DictReader(f)
        ]  # fmt: skip
    first = runs.rows[0]
    return format_log(
        oop_ip_pairs(runs.rows),
        collective=first.collective,
        n_ranks=first.n_ranks,
        layout=layout,
        header=header,
        bandwidths_gb_per_s=printed,
    )


def regenerate(out_dir: Path) -> list[Path]:
    """Write one ``.log`` per table of :data:`LOGS` into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in sorted(LOGS):
        path = out_dir / Path(name).with_suffix(".log").name
        path.write_text(log_text(PUBLIC / name), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    for path in regenerate(out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
