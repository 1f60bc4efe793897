"""``--model analytical`` against ``--model flow`` on every shipped one-switch server.

Every collective x algorithm x protocol (none, Simple, LL, LL128) x server (DGX A100,
H100, H200, B200, the 4-GPU PCIe switch), with each server's calibration, at every power
of two from 1 KiB to 8 GiB: issue 41's matrix. It prints how many rows the analytical
model costed by formula and the worst difference of those from the flow model's, how
many it left to the flow model (no exact closed form: see
``simcoll/prediction/closed_form.py``), and the (algorithm, protocol) pairs both models
refuse. ``tests/prediction/test_closed_form.py`` holds the same matrix, on fewer sizes,
to 1 %.

    python validation/analytical_matrix.py    # about a minute

``--across`` compares the two models across servers instead, where the closed forms are
estimates: all-reduce from 1 KiB to 1 GiB (every second power of two),
NCCL's pick and the ring, on 2, 4 and 16 H100 nodes (``h100-ib-fat-tree``) and on 4 and
16 A100 nodes of the 2:1 RoCE fat tree routed by hashed ECMP, in rank order and placed at
random; per line the range of analytical / flow over the sizes costed by formula, and
from 64 MiB.

    python validation/analytical_matrix.py --across    # about a minute
"""

from __future__ import annotations

from simcoll.algorithms import ALGORITHMS
from simcoll.core.errors import SimcollError
from simcoll.prediction import predict
from simcoll.topology.io import load

SERVERS = ("dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200", "pcie-4x-switch")
PROTOCOLS = (None, "simple", "LL", "LL128")
SIZES = [2**k for k in range(10, 34)]


def main() -> None:
    compared = by_formula = by_flow = refused = 0
    worst = (0.0, "")
    for server in SERVERS:
        graph = load(f"topologies/{server}.toml")
        for collective, name in sorted(ALGORITHMS, key=lambda pair: (pair[0].value, pair[1])):
            for protocol in PROTOCOLS:
                try:
                    flow = predict(graph, collective, SIZES, algorithm=name, protocol=protocol)
                except SimcollError:  # both models refuse it (NVLS with LL, ...)
                    refused += 1
                    continue
                formula = predict(graph, collective, SIZES, algorithm=name, protocol=protocol,
                                  model="analytical")  # fmt: skip
                for f, a in zip(flow.rows, formula.rows, strict=True):
                    compared += 1
                    if a.model == "flow":
                        by_flow += 1
                        continue
                    by_formula += 1
                    off = abs(a.time_s / f.time_s - 1)
                    if off > worst[0]:
                        where = f"{server} {collective.value}/{name}/{protocol} {f.size_bytes} B"
                        worst = (off, where)
    print(f"{compared} rows compared: {by_formula} by formula, worst {worst[0]:.2e} off "
          f"({worst[1]}); {by_flow} left to the flow model; {refused} (collective, "
          "algorithm, protocol, server) refused by both")  # fmt: skip


ACROSS = (("h100-ib-fat-tree", 2, "linear"), ("h100-ib-fat-tree", 4, "linear"),
          ("h100-ib-fat-tree", 16, "linear"), ("a100-roce-2to1", 4, "linear"),
          ("a100-roce-2to1", 16, "linear"), ("a100-roce-2to1", 16, "random:1"))  # fmt: skip


def across() -> None:
    sizes = [2**k for k in range(10, 31, 2)]
    for file, nodes, placement in ACROSS:
        graph = load(f"topologies/{file}.toml", {"n_nodes": str(nodes)})
        for name in ("nccl", "ring"):
            flow = predict(graph, "allreduce", sizes, algorithm=name, placement=placement)
            formula = predict(graph, "allreduce", sizes, algorithm=name, placement=placement,
                              model="analytical")  # fmt: skip
            ratios = [(a.size_bytes, a.time_s / f.time_s)
                      for a, f in zip(formula.rows, flow.rows, strict=True)
                      if a.model == "analytical"]  # fmt: skip
            large = [r for size, r in ratios if size >= 2**26]
            picks = ", ".join(sorted({f.algorithm for f in flow.rows}))
            low, high = min(r for _, r in ratios), max(r for _, r in ratios)
            print(f"{file} x {nodes} ({placement}), {name} ({picks}): analytical / flow "
                  f"{low:.3f}-{high:.3f} over {len(ratios)} sizes, "
                  f"{min(large):.3f}-{max(large):.3f} from 64 MiB")  # fmt: skip


if __name__ == "__main__":
    import sys

    across() if "--across" in sys.argv[1:] else main()
