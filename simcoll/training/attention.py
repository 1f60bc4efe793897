"""Fused attention's time from its shape: measured throughput against sequence length.

FlashAttention-style kernels keep the scores on chip; their speed depends on the
sequence length (short sequences do little work per tile), on the causal mask (blocks
above the diagonal are skipped, and the diagonal's blocks are half wasted) and on the
kernel. ``simcoll/training/data/attention_flops.csv`` holds, at head dimension 128:

- the H100's measured forward (with and without the mask) and backward throughput of
  FlashAttention-2, cuDNN and FlashAttention-3 (Shah et al. 2024, figures 5 and 6);
- the A100's forward + backward throughput of FlashAttention-2, with and without the mask
  (FlashAttention-2's own benchmark figure, 2023).

The throughput at a sequence length is interpolated linearly in ``log2`` of the length
on ``log`` of the throughput, and held at the end values outside the measured 512-16k
(never above what was measured). Three gaps in the data are filled by stated rules:

- the backward with the causal mask (the H100 paper measures it without): the
  backward's throughput times the forward's ratio of masked to unmasked at that length;
- forward and backward apart where only their sum was measured (the A100): split so that
  the forward runs ``r`` times as fast as the backward, ``r`` the same kernel's ratio on
  the H100 at that length and mask, and the two together take the measured time;
- a GPU with no table, or a kernel its table lacks: the H100's throughput scaled by the
  ratio of the GPUs' dense 16-bit peaks (``scaled``), said in the step's notes; a kernel
  no table holds (``triton``) takes the H100's FlashAttention-2 figures so.

Other head dimensions use head dimension 128's figures (every shipped model has 128).

FLOPs follow the papers' convention: ``4 s_q s_kv d`` per head and sequence forward,
halved with the mask; the backward ``2.5 x`` that, forward + backward ``3.5 x``.

>>> shape = AttentionShape(batch=2, heads=16, seq_q=4096, seq_kv=4096, head_dim=128,
...                        causal=True)
>>> shape.forward_flops == 4 * 2 * 16 * 4096 * 4096 * 128 // 2
True
>>> round(attention_flops_per_s("h100-sxm", "flash2", "forward", True, 4096) / 1e12)
319
>>> forward = attention_flops_per_s("a100-sxm", "flash2", "forward", True, 4096)
>>> backward = attention_flops_per_s("a100-sxm", "flash2", "backward", True, 4096)
>>> round(3.5 / (1 / forward + 2.5 / backward) / 1e12)  # the measured forward + backward
173
"""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = [
    "ATTENTION_KERNELS",
    "ATTENTION_TABLES",
    "AttentionShape",
    "attention_flops_per_s",
    "measures",
]

DATA = Path(__file__).parent / "data"

#: The fused attention kernels: FlashAttention-2 (PyTorch's scaled_dot_product_attention on
#: CUDA), cuDNN's fused attention (Transformer Engine, NeMo, Megatron-LM), FlashAttention-3,
#: all measured; and FlashAttention's Triton port (llm-foundry's ``attn_impl: triton``, its
#: MPT benchmarks' default until 2024), measured on no GPU.
ATTENTION_KERNELS = ("flash2", "cudnn", "flash3", "triton")

#: The kernel whose H100 figures time one that no table holds.
STAND_IN_KERNEL = "flash2"

#: The measured tables, by the ``[gpu]`` table's ``kernels`` key, with their sources.
ATTENTION_TABLES = {
    "h100-sxm": "Shah et al. 2024",
    "a100-sxm": "FlashAttention-2's benchmark, Dao 2023",
}

#: The table whose forward-to-backward ratio splits a measured forward + backward.
REFERENCE_TABLE = "h100-sxm"

#: The H100 SXM's dense 16-bit peak (data sheet), to scale its figures to other GPUs.
H100_SXM_PEAK_16BIT_FLOPS_PER_S = 989.4e12


@dataclass(frozen=True)
class AttentionShape:
    """One micro-batch's attention on one GPU: ``batch`` sequences, ``heads`` query heads,
    ``seq_q`` query and ``seq_kv`` key positions each."""

    batch: float
    heads: float  # the query heads on this GPU (a share of them under tensor parallelism)
    seq_q: float
    seq_kv: float
    head_dim: int
    causal: bool

    @property
    def forward_flops(self) -> float:
        """``4 s_q s_kv d`` per head and sequence, halved with the causal mask."""
        full = 4 * self.batch * self.heads * self.seq_q * self.seq_kv * self.head_dim
        return full / 2 if self.causal else full


def attention_flops_per_s(
    table: str, kernel: str, pass_: str, causal: bool, seq_length: float
) -> float:
    """The measured (interpolated) throughput of ``kernel``'s ``pass_`` ("forward",
    "backward" or "forward_backward") at ``seq_length`` on the GPU of ``table``."""
    if (
        pass_ != "forward_backward"
        and not _has(table, kernel, pass_, causal)
        and _has(table, kernel, "forward_backward", causal)
    ):
        both = attention_flops_per_s(table, kernel, "forward_backward", causal, seq_length)
        ratio = (attention_flops_per_s(REFERENCE_TABLE, kernel, "forward", causal, seq_length)
                 / attention_flops_per_s(REFERENCE_TABLE, kernel, "backward", causal,
                                         seq_length))  # fmt: skip
        backward = both * (1 / ratio + 2.5) / 3.5
        return ratio * backward if pass_ == "forward" else backward
    if pass_ == "backward" and causal and not _has(table, kernel, pass_, causal):
        ratio = (attention_flops_per_s(table, kernel, "forward", True, seq_length)
                 / attention_flops_per_s(table, kernel, "forward", False, seq_length))  # fmt: skip
        return ratio * attention_flops_per_s(table, kernel, "backward", False, seq_length)
    points = _curve(table, kernel, pass_, causal)
    for (s0, f0), (s1, f1) in itertools.pairwise(points):
        if seq_length <= s0:
            return f0  # at or below the shortest measured: its throughput
        if seq_length < s1:
            t = math.log2(seq_length / s0) / math.log2(s1 / s0)
            return math.exp((1 - t) * math.log(f0) + t * math.log(f1))
    return points[-1][1]  # at or beyond the longest measured


@cache
def measures(table: str, kernel: str) -> bool:
    """Whether ``table`` holds figures of ``kernel`` (else the H100's are scaled).

    >>> measures("a100-sxm", "flash2"), measures("a100-sxm", "flash3")
    (True, False)
    """
    return any(r["gpu"] == table and r["kernel"] == kernel for r in _rows())


@cache
def _has(table: str, kernel: str, pass_: str, causal: bool) -> bool:
    return any(r["gpu"] == table and r["kernel"] == kernel and r["pass"] == pass_
               and r["causal"] == str(int(causal)) for r in _rows())  # fmt: skip


@cache
def _curve(table: str, kernel: str, pass_: str, causal: bool) -> list[tuple[int, float]]:
    rows = [r for r in _rows() if r["gpu"] == table and r["kernel"] == kernel
            and r["pass"] == pass_ and r["causal"] == str(int(causal))]  # fmt: skip
    if not rows:
        raise KeyError(f"no attention figures for {table} {kernel} {pass_} causal={causal}")
    return sorted((int(r["seq_length"]), float(r["tflops_per_s"]) * 1e12) for r in rows)


@cache
def _rows() -> list[dict[str, str]]:
    with open(DATA / "attention_flops.csv", encoding="utf-8") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return list(csv.DictReader(lines))
