"""Tests of simcoll.prediction.choices: what the topology, NCCL's settings and the params
give an algorithm."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.core.collectives import Collective
from simcoll.plan.tuning import NcclKnobs
from simcoll.prediction.choices import algorithm_params
from simcoll.topology import load
from simcoll.topology.calibration import Calibration, read_calibration

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
#: NCCL's Hopper caps per head (perChMaxNVLSTreeBw: 57.7 GB/s on two servers, 45.5 on
#: more) over its default 16 NVLS CTAs: the rate one CTA per GPU adds.
HOPPER = {"nvls_tree_2_servers": 57.7e9 / 16, "nvls_tree": 45.5e9 / 16}


@pytest.mark.parametrize(
    ("n_nodes", "knobs", "ctas", "bus_gbps"),
    [(2, NcclKnobs(), 16, 8 * 57.7), (4, NcclKnobs(), 16, 8 * 45.5),
     (8, NcclKnobs(min_ctas=24), 24, 8 * 45.5 * 24 / 16),
     (8, NcclKnobs(max_ctas=8), 8, 8 * 45.5 * 8 / 16),
     (8, NcclKnobs(min_channels=24, max_channels=8), 16, 8 * 45.5)],  # rings' only
)  # fmt: skip
def test_nvls_tree_gets_nccls_ctas_and_the_bus_bandwidth_they_move(
    n_nodes: int, knobs: NcclKnobs, ctas: int, bus_gbps: float
) -> None:
    # Servers of 8 GPUs: C CTAs on each GPU, each adding the params' rate per CTA:
    # C x 8 x rate, which is NCCL's per-head cap x 8 heads at its 16 CTAs.
    topology = load(TOPOLOGIES / "h100-ib-fat-tree.toml", overrides={"n_nodes": str(n_nodes)})
    chosen = algorithm_params("nvls_tree", Collective.ALLREDUCE, None, topology, 8 * n_nodes,
                              knobs=knobs, calibration=Calibration(
                                  cta_bus_bandwidth_bytes_per_s=HOPPER))  # fmt: skip
    assert chosen["gpus_per_node"] == 8
    assert chosen["n_ctas"] == ctas
    assert chosen["sm_bus_bandwidth_bytes_per_s"] == pytest.approx(bus_gbps * 1e9, abs=1)


def test_without_a_rate_per_cta_nothing_bounds_the_call() -> None:
    topology = load(TOPOLOGIES / "h100-ib-fat-tree.toml", overrides={"n_nodes": "2"})
    for calibration in (None, Calibration()):  # bare links; params without the section
        chosen = algorithm_params("nvls_tree", Collective.ALLREDUCE, None, topology, 16,
                                  calibration=calibration)  # fmt: skip
        assert chosen["n_ctas"] == 16
        assert "sm_bus_bandwidth_bytes_per_s" not in chosen


def test_the_shipped_h100_cluster_params_carry_nccls_caps() -> None:
    # h100-ib-fat-tree's params hold the network's fit; their base, the H100 server's
    # file, holds NCCL's caps, and the fit keeps them.
    calibration = read_calibration(TOPOLOGIES / "calibration" / "h100-ib-fat-tree.params.toml")
    assert calibration.cta_bus_bandwidth_bytes_per_s == pytest.approx(HOPPER)
