"""Memory per GPU: parameters, gradients, optimizer state and activations.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, section 3 and figure 1):
mixed-precision Adam keeps 2 bytes of parameters and 2 of gradients per parameter, and
``K = 12`` bytes of optimizer state (an fp32 copy of the parameters, momentum, variance).
Over ``N_d`` data-parallel ranks, ZeRO-1 shards the optimizer state, ZeRO-2 the gradients
too, ZeRO-3 (FSDP) the parameters too::

    DDP     (2 + 2 + K) x psi
    ZeRO-1  2 psi + 2 psi + K psi / N_d
    ZeRO-2  2 psi + (2 + K) psi / N_d
    ZeRO-3  (2 + 2 + K) psi / N_d

``psi`` is the parameters one GPU holds after tensor and pipeline parallelism split the
model (and expert parallelism its experts, whose own data-parallel degree is
``dp x cp / ep``). Megatron-LM's distributed optimizer is ZeRO-1 over data and context
parallel ranks.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", table 2) per layer and micro-batch, in bytes, for ``s`` tokens,
``b`` sequences, hidden ``h``, ``a`` heads, ``t``-way tensor parallelism::

    no recomputation, sequence parallel   s b h (34 + 5 a s / h) / t
    selective recomputation               s b h 34 / t
    FlashAttention (stores no scores)     s b h 34 / t
    full recomputation                    2 s b h / t   (each layer's input)

and ``s b h (10 + 24 / t + 5 a s / (h t))`` without sequence parallelism. Context
parallelism divides ``s``. Under 1F1B the first stage holds ``pp`` micro-batches of its
``L / pp`` layers, ``L`` layers' worth in all (section 4.2.3); the interleaved schedule
``1 + (pp - 1) / (pp v)`` times that.

>>> zero_model_state_bytes(7_500_000_000, zero_stage=3, dp=64)  # ZeRO paper, figure 1
1875000000.0
"""

from __future__ import annotations

from dataclasses import dataclass

from simcoll.training.spec import Parallelism, Training, Transformer

__all__ = [
    "OPTIMIZER_STATE_BYTES_PER_PARAM",
    "MemoryPerGpu",
    "activation_bytes_per_layer",
    "layer_params_per_gpu",
    "memory_per_gpu",
    "params_per_gpu",
    "zero_model_state_bytes",
]

#: K of the ZeRO paper: mixed-precision Adam's fp32 parameters, momentum and variance.
OPTIMIZER_STATE_BYTES_PER_PARAM = 12


@dataclass(frozen=True)
class MemoryPerGpu:
    """The most loaded GPU's memory, in bytes (the first pipeline stage's)."""

    params_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float

    @property
    def total_bytes(self) -> float:
        """Everything above."""
        return self.params_bytes + self.gradients_bytes + self.optimizer_bytes + \
            self.activations_bytes  # fmt: skip


def zero_model_state_bytes(psi: float, *, zero_stage: int, dp: int) -> float:
    """Parameters, gradients and optimizer state of ``psi`` parameters under a ZeRO stage
    (0: DDP) over ``dp`` data-parallel ranks (see the module docstring)."""
    k = OPTIMIZER_STATE_BYTES_PER_PARAM
    params = 2 * psi / (dp if zero_stage >= 3 else 1)
    grads = 2 * psi / (dp if zero_stage >= 2 else 1)
    optimizer = k * psi / (dp if zero_stage >= 1 else 1)
    return params + grads + optimizer


def layer_params_per_gpu(m: Transformer, p: Parallelism) -> tuple[float, float]:
    """(dense, expert) parameters of one layer on one GPU: attention and a dense MLP split
    over ``tp``, norms whole, the router replicated, the experts split over ``ep``."""
    h = m.hidden_size
    mlp = (3 if m.gated_mlp else 2) * h * m.ffn_hidden_size
    dense = (h * (h + 2 * m.kv_size) + h * h) / p.tp + 2 * h
    if m.is_moe:
        return dense + h * m.n_experts, m.n_experts * mlp / p.ep
    return dense + mlp / p.tp, 0.0


def params_per_gpu(m: Transformer, p: Parallelism) -> tuple[float, float]:
    """(dense, expert) parameters on the first stage's GPUs: its ``L / pp`` layers, and the
    input embedding split over ``tp``; with one stage, the output layer and the final norm
    too."""
    layer_dense, layer_expert = layer_params_per_gpu(m, p)
    layers = m.n_layers / p.pp
    vocab = m.vocab_size * m.hidden_size / p.tp
    dense = layers * layer_dense + vocab
    if p.pp == 1:
        dense += m.hidden_size + (0 if m.tied_embeddings else vocab)
    return dense, layers * layer_expert


def activation_bytes_per_layer(m: Transformer, t: Training, p: Parallelism) -> float:
    """One layer's stored activations for one micro-batch (see the module docstring)."""
    s, b, h, a = t.seq_length / p.cp, t.micro_batch_size, m.hidden_size, m.n_heads
    if t.recompute == "full":
        return 2 * s * b * h / (p.tp if p.sequence_parallel else 1)
    stored_scores = not t.flash_attention and t.recompute != "selective"
    attention = 5 * a * s / h if stored_scores else 0.0
    if p.sequence_parallel:
        return s * b * h * (34 + attention) / p.tp
    return s * b * h * (10 + 24 / p.tp + attention / p.tp)


def memory_per_gpu(m: Transformer, t: Training, p: Parallelism) -> MemoryPerGpu:
    """The first pipeline stage's GPU under the step's layout (``p`` with ``dp`` known)."""
    dense, expert = params_per_gpu(m, p)
    k = OPTIMIZER_STATE_BYTES_PER_PARAM
    stage = p.zero_stage
    dense_dp = p.dp * p.cp
    expert_dp = max(1, dense_dp // p.ep)

    def shard(psi: float, dp: int, bytes_per: float, from_stage: int) -> float:
        return bytes_per * psi / (dp if stage >= from_stage else 1)

    params = shard(dense, dense_dp, 2, 3) + shard(expert, expert_dp, 2, 3)
    grads = shard(dense, dense_dp, 2, 2) + shard(expert, expert_dp, 2, 2)
    optimizer = shard(dense, dense_dp, k, 1) + shard(expert, expert_dp, k, 1)
    in_flight = m.n_layers * (1 + (p.pp - 1) / (p.pp * p.virtual_stages)
                              if p.virtual_stages > 1 else 1)  # fmt: skip
    if p.pp == 1:
        in_flight = m.n_layers  # one micro-batch's layers at a time
    activations = in_flight * activation_bytes_per_layer(m, t, p)
    return MemoryPerGpu(params, grads, optimizer, activations)
