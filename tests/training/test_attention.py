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
    # H100: 3 kernels x (forward, forward causal, backward) x 6 lengths;
    # A100: FlashAttention-2's forward + backward, with and without the mask, x 6 lengths
    assert len(rows) == 3 * 3 * 6 + 2 * 6
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


def test_the_a100s_forward_and_backward_split_as_the_h100s_and_add_up_to_the_measured() -> None:
    # FlashAttention-2 on the A100, forward + backward with the mask at 4k: 173 TFLOP/s
    # (the benchmark figure); on the H100 the forward runs 368/310 as fast as the backward
    # at 4k (the masked backward takes the forward's masked share, so the ratio is the
    # unmasked one). Forward f = r b, and 3.5/C = 1/f + 2.5/b, so b = C (1/r + 2.5)/3.5.
    r = 368 / 310
    backward = 173e12 * (1 / r + 2.5) / 3.5
    got_backward = attention_flops_per_s("a100-sxm", "flash2", "backward", True, 4096)
    got_forward = attention_flops_per_s("a100-sxm", "flash2", "forward", True, 4096)
    assert got_backward == pytest.approx(backward, rel=1e-12)
    assert got_forward == pytest.approx(r * backward, rel=1e-12)
    for r_ in measured():
        if r_["pass"] != "forward_backward":
            continue
        seq, causal = int(r_["seq_length"]), r_["causal"] == "1"
        f = attention_flops_per_s(r_["gpu"], r_["kernel"], "forward", causal, seq)
        b = attention_flops_per_s(r_["gpu"], r_["kernel"], "backward", causal, seq)
        assert 3.5 / (1 / f + 2.5 / b) == pytest.approx(float(r_["tflops_per_s"]) * 1e12,
                                                        rel=1e-12)  # fmt: skip


def test_a_kernel_a_table_lacks_is_not_in_it() -> None:
    from simcoll.training.attention import measures  # noqa: PLC0415

    assert measures("a100-sxm", "flash2")
    assert measures("h100-sxm", "cudnn")
    assert not measures("a100-sxm", "cudnn")
    assert not measures("a100-sxm", "flash3")
    assert not measures("h100-sxm", "triton")  # llm-foundry's Triton port: measured nowhere
