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
    torchtitan's per-op SAC (sac_op)      2 s b (h / t + (c + h) / t)

where ``c`` is the output columns of the matmuls the policy saves (every odd-numbered one
in the block: a Llama block's ``wq``, ``wv``, ``w1``, ``w2``, ``2 h + kv + f``; none under
FP8) and ``h`` the fused attention's output; ``sac_layer`` holds every second layer's
input only and the others' full activations, averaged over the layers.

and ``s b h (10 + 24 / t + 5 a s / (h t))`` without sequence parallelism. Context
parallelism divides ``s``. Under 1F1B the first stage holds ``pp`` micro-batches of its
``L / pp`` layers, ``L`` layers' worth in all (section 4.2.3); the interleaved schedule
``1 + (pp - 1) / (pp v)`` times that. Stage ``i`` keeps ``pp - i`` micro-batches alive
(at most the step's), so the last keeps one, but it also holds the output layer and one
micro-batch's logits (:func:`logits_bytes`); :func:`memory_per_gpu` reports whichever of
the first and last stage holds more, and which.

FSDP (PyTorch's ``FullyShardedDataParallel``) also holds the units it has gathered: with
``limit_all_gathers`` at most two units of ``fsdp_layers_per_unit`` blocks (the one
computing and the one prefetched; all of a stage's without it), and the root unit (the
embedding, final norm and output layer), which stays gathered from its forward to the end
of its backward; with ``shard_grad_op`` every unit, kept gathered from its forward to its
backward. Each gathered parameter costs 2 bytes. Gradients add the unsharded gradient
of the largest unit being reduced, in the reduce dtype, and with ``fsdp_no_sync`` every
unsharded gradient (2 bytes a parameter), accumulated over the micro-batches.
``no_shard`` holds DDP's state and gathers nothing; ``hybrid_shard`` shards over
``fsdp_shard_size`` ranks instead of all.

NCCL's buffers (:func:`nccl_buffer_bytes`): every channel of a communicator receives from
the rank before it into a connection's buffers, one per protocol, allocated in GPU memory
when the communicator first uses the channel (``init.cc:computeBuffSizes``): Simple's
``NCCL_BUFFSIZE`` (4 MiB), LL's 512 KiB and LL128's 4.7 MiB, 9.6 MB a channel. The step
counts, for each communicator the GPU is in, the most channels one of its calls ran on.

>>> zero_model_state_bytes(7_500_000_000, zero_stage=3, dp=64)  # ZeRO paper, figure 1
1875000000.0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from simcoll.core.errors import ConfigError
from simcoll.plan.tuning import DEFAULT_BUFFSIZE_BYTES, LL128_BUFFSIZE_BYTES, LL_BUFFSIZE_BYTES
from simcoll.training.flops import saved_matmul_columns
from simcoll.training.layout import BACKWARD, interleaved_order
from simcoll.training.spec import (
    REDUCE_DTYPE_BYTES,
    Parallelism,
    Training,
    Transformer,
    stage_layers,
    virtual_stage_layers,
)

__all__ = [
    "OPTIMIZER_STATE_BYTES_PER_PARAM",
    "MemoryPerGpu",
    "activation_bytes_per_layer",
    "fsdp_unsharded_bytes",
    "layer_params_per_gpu",
    "layers_in_flight",
    "memory_per_gpu",
    "nccl_buffer_bytes",
    "params_per_gpu",
    "root_params_per_gpu",
    "zero_model_state_bytes",
]

#: K of the ZeRO paper: mixed-precision Adam's fp32 parameters, momentum and variance.
OPTIMIZER_STATE_BYTES_PER_PARAM = 12


@dataclass(frozen=True)
class MemoryPerGpu:
    """The most loaded GPU's memory, in bytes (the first pipeline stage's): the sharded
    state, activations, and FSDP's unsharded parameters and gradients at its peak.

    >>> MemoryPerGpu(2.0, 2.0, 12.0, 30.0, gathered_params_bytes=40.0).largest_part
    'gathered_params'
    """

    params_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    gathered_params_bytes: float = 0.0
    unsharded_gradients_bytes: float = 0.0
    logits_bytes: float = 0.0
    stage: int = 0  # the pipeline stage whose GPU this is
    comm_buffers_bytes: float = 0.0  # NCCL's, once the step's calls are decided

    @property
    def parts(self) -> dict[str, float]:
        """Each part by name (``params``, ``gradients``, ..., ``comm_buffers``)."""
        return {"params": self.params_bytes, "gradients": self.gradients_bytes,
                "optimizer": self.optimizer_bytes, "activations": self.activations_bytes,
                "gathered_params": self.gathered_params_bytes,
                "unsharded_gradients": self.unsharded_gradients_bytes,
                "logits": self.logits_bytes,
                "comm_buffers": self.comm_buffers_bytes}  # fmt: skip

    @property
    def largest_part(self) -> str:
        """The part that binds: the largest (the first named of equals)."""
        parts = self.parts
        return max(parts, key=lambda name: parts[name])

    @property
    def total_bytes(self) -> float:
        """Everything above."""
        return sum(self.parts.values())


#: One channel's receive buffers, one per protocol (NCCL's defaults).
NCCL_CHANNEL_BUFFER_BYTES = DEFAULT_BUFFSIZE_BYTES + LL_BUFFSIZE_BYTES + LL128_BUFFSIZE_BYTES


def nccl_buffer_bytes(channels: Iterable[int]) -> float:
    """NCCL's buffers on one GPU for its communicators' ``channels`` (one count per
    communicator): each channel's receive connection with its Simple, LL and LL128 buffers.

    >>> nccl_buffer_bytes([16, 2])  # 18 x (4 MiB + 512 KiB + 4,915,200 B)
    173408256.0
    """
    return float(sum(channels) * NCCL_CHANNEL_BUFFER_BYTES)


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


def root_params_per_gpu(m: Transformer, p: Parallelism, stage: int = 0) -> float:
    """The parameters of a stage's GPU that are in no transformer block (FSDP's root unit):
    the input embedding (first stage) and the final norm and output layer (last stage),
    each matrix split over ``tp``; tied embeddings on one stage count once.

    >>> from simcoll.training.spec import Transformer
    >>> m = Transformer("m", n_layers=2, hidden_size=8, ffn_hidden_size=32, n_heads=2,
    ...                 vocab_size=100)
    >>> root_params_per_gpu(m, Parallelism()), root_params_per_gpu(m, Parallelism(pp=2), 1)
    (1608.0, 808.0)
    """
    vocab = m.vocab_size * m.hidden_size / p.tp
    first, last = stage == 0, stage == p.pp - 1
    params = vocab if first else 0.0
    if last:
        params += m.hidden_size + (0.0 if m.tied_embeddings and first else vocab)
    return params


def params_per_gpu(m: Transformer, p: Parallelism, stage: int = 0) -> tuple[float, float]:
    """(dense, expert) parameters on a stage's GPUs (the first by default): its ``L / pp``
    layers, and its part of the root (:func:`root_params_per_gpu`)."""
    layer_dense, layer_expert = layer_params_per_gpu(m, p)
    layers = _layers_of(m, p, stage)
    dense = layers * layer_dense + root_params_per_gpu(m, p, stage=stage)
    return dense, layers * layer_expert


def fsdp_unsharded_bytes(m: Transformer, p: Parallelism, stage: int = 0) -> tuple[float, float]:
    """(gathered parameters, unsharded gradients) FSDP holds at its peak on one GPU of a
    stage (the first by default), beyond its shards (see the module docstring); (0, 0)
    but for FSDP over more than one rank."""
    if not p.is_fsdp or p.shard_degree == 1:  # no_shard, or one rank: nothing to gather
        return 0.0, 0.0
    layer_dense, layer_expert = layer_params_per_gpu(m, p)
    unit = p.fsdp_layers_per_unit * (layer_dense + layer_expert)
    root = root_params_per_gpu(m, p, stage=stage)
    n_units = int(_layers_of(m, p, stage)) // p.fsdp_layers_per_unit
    gathered = n_units
    if p.fsdp_sharding != "shard_grad_op" and p.fsdp_limit_all_gathers:
        gathered = min(2, n_units)
    grads = REDUCE_DTYPE_BYTES[p.fsdp_reduce_dtype] * max(unit, root)
    if p.fsdp_no_sync:
        grads += 2 * (n_units * unit + root)
    return 2 * (gathered * unit + root), grads


def activation_bytes_per_layer(m: Transformer, t: Training, p: Parallelism) -> float:
    """One layer's stored activations for one micro-batch (see the module docstring)."""
    s, b, h, a = t.seq_length / p.cp, t.micro_batch_size, m.hidden_size, m.n_heads
    block_input = 2 * s * b * h / (p.tp if p.sequence_parallel else 1)
    if t.recompute == "full":
        return block_input
    if t.recompute == "sac_layer":
        share = (m.n_layers // 2) / m.n_layers
        plain = replace(t, recompute="none", recompute_early_stop=False)
        whole = activation_bytes_per_layer(m, plain, p)
        return share * block_input + (1 - share) * whole
    if t.recompute == "sac_op":
        return block_input + 2 * s * b * (saved_matmul_columns(m, t) + h) / p.tp
    stored_scores = not t.flash_attention and t.recompute != "selective"
    attention = 5 * a * s / h if stored_scores else 0.0
    if p.sequence_parallel:
        return s * b * h * (34 + attention) / p.tp
    return s * b * h * (10 + 24 / p.tp + attention / p.tp)


def _layers_of(m: Transformer, p: Parallelism, stage: int) -> float:
    """The layers on pipeline stage ``stage`` (an even share unless the layout says)."""
    if p.first_stage_layers or p.last_stage_layers:
        return float(stage_layers(m.n_layers, p)[stage])
    return m.n_layers / p.pp


def layers_in_flight(m: Transformer, p: Parallelism, stage: int, n_microbatches: int) -> float:
    """The most layers' activations pipeline stage ``stage`` holds at once: its schedule
    (:func:`~simcoll.training.layout.interleaved_order`, 1F1B or Megatron-LM's interleaved
    one) walked, each forward holding its model chunk's layers until that micro-batch's
    backward of the chunk frees them.

    1F1B keeps ``pp - stage`` micro-batches (at most the step's): 2 stages of 2 layers, 4
    micro-batches, the first stage 2 x 2 layers, the last 1 x 2. Interleaved, 2 chunks
    per stage of 1, 2 | 2, 3 layers (8 on 2 stages, torchtitan's lighter first and last
    chunk): the first stage runs 5 forwards before its first backward (Megatron's warm-up
    ``(pp - 1) x 2 + (v - 1) x pp = 4``, then one): chunk 0 twice, chunk 1 twice, chunk 0,
    1 + 1 + 2 + 2 + 1 = 7 layers; the last, 2 x 2 + 3 = 7.

    >>> from simcoll.training.spec import Transformer
    >>> m = Transformer("m", n_layers=4, hidden_size=8, ffn_hidden_size=32, n_heads=2,
    ...                 vocab_size=100)
    >>> [layers_in_flight(m, Parallelism(pp=2), s, 4) for s in (0, 1)]
    [4.0, 2.0]
    >>> m8 = Transformer("m8", n_layers=8, hidden_size=8, ffn_hidden_size=32, n_heads=2,
    ...                  vocab_size=100)
    >>> uneven = Parallelism(pp=2, virtual_stages=2, first_stage_layers=1, last_stage_layers=3)
    >>> [layers_in_flight(m8, uneven, s, 4) for s in (0, 1)]
    [7.0, 7.0]
    """
    v = p.virtual_stages
    if v == 1:
        layers = [_layers_of(m, p, stage)]
    else:
        chunks = virtual_stage_layers(m.n_layers, p)  # model chunk c * pp + stage here
        layers = [float(chunks[c * p.pp + stage]) for c in range(v)]
    # the warm-up runs at most (v + 1) pp forwards, and the steady state repeats every
    # pp v: 3 pp micro-batches (v forwards each) reach every peak a longer step reaches
    held = peak = 0.0
    order = interleaved_order(stage=stage, n_stages=p.pp,
                              n_microbatches=min(n_microbatches, 3 * p.pp), n_chunks=v)  # fmt: skip
    for phase, chunk, _ in order:
        held += -layers[chunk] if phase == BACKWARD else layers[chunk]
        peak = max(peak, held)
    return peak


def logits_bytes(m: Transformer, t: Training, p: Parallelism) -> float:
    """The last stage's logits for one micro-batch: ``b x s / cp`` tokens by ``V / tp``
    in fp32 (Megatron's vocab-parallel cross-entropy computes in fp32), and the 16-bit
    logits the output GEMM wrote, both alive when the loss runs.

    >>> from simcoll.training.spec import Transformer
    >>> m = Transformer("m", n_layers=2, hidden_size=8, ffn_hidden_size=32, n_heads=2,
    ...                 vocab_size=100)
    >>> logits_bytes(m, Training(seq_length=16, micro_batch_size=2), Parallelism(tp=2))
    9600.0
    """
    return (4 + 2) * t.micro_batch_size * t.seq_length / p.cp * m.vocab_size / p.tp


def stage_memory(m: Transformer, t: Training, p: Parallelism, stage: int) -> MemoryPerGpu:
    """One GPU of pipeline stage ``stage`` under the step's layout (``p`` with ``dp``
    known): its shards of its layers and root part, its activations (the most layers its
    schedule holds at once, :func:`layers_in_flight`: 1F1B keeps ``pp - stage``
    micro-batches alive, at most the step's; the interleaved schedule, on the first
    stage, ``1 + (pp - 1) / (pp v)`` times that where chunks are even, Korthikanti et al.
    2022, and on the last ``(v - 1) pp + 1`` chunks' worth), FSDP's unsharded units, and
    on the last stage the logits."""
    dense, expert = params_per_gpu(m, p, stage)
    k = OPTIMIZER_STATE_BYTES_PER_PARAM
    zero = p.zero_stage
    dense_dp = p.shard_degree if zero else 1
    expert_dp = max(1, dense_dp // p.ep)

    def shard(psi: float, dp: int, bytes_per: float, from_stage: int) -> float:
        return bytes_per * psi / (dp if zero >= from_stage else 1)

    params = shard(dense, dense_dp, 2, 3) + shard(expert, expert_dp, 2, 3)
    grads = shard(dense, dense_dp, 2, 2) + shard(expert, expert_dp, 2, 2)
    optimizer = shard(dense, dense_dp, k, 1) + shard(expert, expert_dp, k, 1)
    try:
        n_micro = t.n_microbatches(p.dp)
    except ConfigError:  # the layout is refused elsewhere; count a full pipeline
        n_micro = p.pp
    try:
        in_flight = layers_in_flight(m, p, stage, n_micro)
    except ConfigError:  # a split or a micro-batch count refused elsewhere: the closed
        alive = min(p.pp - stage, n_micro)  # form for even chunks (Korthikanti et al.)
        in_flight = _layers_of(m, p, stage) * alive * (
            1 + (p.pp - 1) / (p.pp * p.virtual_stages) if p.virtual_stages > 1 else 1)  # fmt: skip
    activations = in_flight * activation_bytes_per_layer(m, t, p)
    gathered, unsharded = fsdp_unsharded_bytes(m, p, stage)
    logits = logits_bytes(m, t, p) if stage == p.pp - 1 else 0.0
    return MemoryPerGpu(params, grads, optimizer, activations, gathered, unsharded, logits,
                        stage)  # fmt: skip


def memory_per_gpu(m: Transformer, t: Training, p: Parallelism) -> MemoryPerGpu:
    """The most loaded GPU's memory under the step's layout (``p`` with ``dp`` known): of
    the first and the last pipeline stage (the middle ones hold less than the first), the
    larger; its ``stage`` says which binds."""
    stages = {0, p.pp - 1}
    if p.first_stage_layers or p.last_stage_layers:
        stages.add(min(1, p.pp - 1))  # the first of the evenly split middle stages
    return max((stage_memory(m, t, p, s) for s in sorted(stages)),
               key=lambda memory: memory.total_bytes)  # fmt: skip
