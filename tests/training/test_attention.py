"""Tests of simcoll.training.attention: the measured attention throughput, interpolated."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from simcoll.training.attention import AttentionShape, attention_flops_per_s

CSV = Path(__file__).resolve().parents[2] / "simcoll/training/data/attention_flops.csv"


def measured() -> list[dict[str, str]]:
    with open(CSV, encoding="utf-8") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def test_the_measured_points_come_back_exactly() -> None:
    rows = measured()
    assert len(rows) == 3 * 3 * 6  # 3 kernels x (forward, forward causal, backward) x 6 lengths
    for r in rows:
        got = attention_flops_per_s(r["gpu"], r["kernel"], r["pass"], r["causal"] == "1",
                                    int(r["seq_length"]))  # fmt: skip
        assert got == pytest.approx(float(r["tflops_per_s"]) * 1e12, rel=1e-12)


def test_between_two_lengths_the_geometric_mean_at_the_geometric_middle() -> None:
    # FlashAttention-2 forward with the mask: 298 at 2k, 319 at 4k (FA3 paper, figure 5)
    got = attention_flops_per_s("h100-sxm", "flash2", "forward", True, round(2048 * 2**0.5))
    assert got == pytest.approx(math.sqrt(298 * 319) * 1e12, rel=1e-4)


def test_outside_the_measured_lengths_the_end_values_and_never_more() -> None:
    at = {int(r["seq_length"]): float(r["tflops_per_s"]) * 1e12 for r in measured()
          if (r["kernel"], r["pass"], r["causal"]) == ("cudnn", "forward", "0")}  # fmt: skip
    assert attention_flops_per_s("h100-sxm", "cudnn", "forward", False, 128) == at[512]
    assert attention_flops_per_s("h100-sxm", "cudnn", "forward", False, 2**17) == at[16384]
    for seq in range(256, 20000, 97):
        assert attention_flops_per_s("h100-sxm", "cudnn", "forward", False, seq) <= max(
            at.values()) * (1 + 1e-12)  # fmt: skip


def test_the_masked_backward_takes_the_forwards_masked_share() -> None:
    # not measured: backward 310 x (forward masked 319 / unmasked 368) at 4k, FlashAttention-2
    got = attention_flops_per_s("h100-sxm", "flash2", "backward", True, 4096)
    assert got == pytest.approx(310 * 319 / 368 * 1e12, rel=1e-12)


def test_flops_by_the_papers_convention() -> None:
    shape = AttentionShape(batch=1, heads=32, seq_q=8192, seq_kv=8192, head_dim=128, causal=False)
    assert shape.forward_flops == 4 * 32 * 8192 * 8192 * 128
    masked = AttentionShape(1, 32, 8192, 8192, 128, causal=True)
    assert masked.forward_flops * 2 == shape.forward_flops
