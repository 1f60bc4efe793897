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


if __name__ == "__main__":
    main()
