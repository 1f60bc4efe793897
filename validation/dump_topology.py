"""Dump this machine's topology the two ways simcoll's importers read.

Writes, into the folder given (default: the current one):

- ``nccl-topo.xml``: NCCL's own view of the machine, via ``NCCL_TOPO_DUMP_FILE``, from a
  one-rank torch.distributed NCCL all-reduce (needs a CUDA GPU and torch);
- ``nvidia-smi-topo.txt``: the matrix ``nvidia-smi topo -m`` prints.

Load them with a topology file naming ``builder = "nccl_xml"`` or ``"nvidia_smi"`` (see
``topologies/README.md``). Usage: ``python validation/dump_topology.py OUT_DIR``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def dump_nccl_xml(path: Path) -> None:
    """Initialise NCCL once with NCCL_TOPO_DUMP_FILE set; NCCL writes the XML."""
    os.environ["NCCL_TOPO_DUMP_FILE"] = str(path)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29555")
    import torch  # noqa: PLC0415 - only this tool needs torch
    import torch.distributed as dist  # noqa: PLC0415

    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        x = torch.ones(1024, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    smi = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=False)
    (out / "nvidia-smi-topo.txt").write_text(smi.stdout)
    dump_nccl_xml(out / "nccl-topo.xml")
    print(f"wrote {out / 'nccl-topo.xml'} and {out / 'nvidia-smi-topo.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
