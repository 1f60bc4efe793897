"""What a user describes: a transformer, how it is trained, and how it is parallelised.

Three frozen records, each checked as it is made, with a one-line error naming the field:

:class:`Transformer`
    the model's shape (layers, hidden and FFN sizes, attention and KV heads, vocabulary,
    and for a mixture of experts the expert count, top-k and capacity factor);
:class:`Training`
    sequence length, micro- and global batch, precision, activation recomputation;
:class:`Parallelism`
    tensor (with or without sequence parallelism), pipeline (1F1B, interleaved), data
    (DDP, ZeRO-1/2/3, FSDP), expert and context parallel degrees, and the order of the
    dimensions over the GPUs (tensor parallel innermost, as Megatron-LM orders them).

A model file (``models/*.toml``) holds a ``[model]`` table and, optionally, ``[training]``
and ``[parallelism]`` defaults; :func:`read_model_file` reads it.

>>> gpt = Transformer("gpt", n_layers=96, hidden_size=12288, ffn_hidden_size=49152,
...                   n_heads=96, vocab_size=50257, gated_mlp=False)
>>> gpt.head_dim, gpt.n_kv_heads
(128, 96)
>>> Parallelism(tp=8, pp=16).with_gpus(1024).dp
8
>>> Parallelism(tp=8, pp=16).with_gpus(1000)
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: parallelism: 1000 GPUs do not split into tp 8 x cp 1 x pp 16 \
(128 GPUs per data-parallel replica)
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError, UnitError
from simcoll.core.files import TOO_DEEP, check_nesting, read_input_text
from simcoll.core.limits import (
    MAX_EXPERTS,
    MAX_HIDDEN_SIZE,
    MAX_LAYERS,
    MAX_PARAMETERS,
    MAX_VOCAB_SIZE,
)
from simcoll.core.shipped import find
from simcoll.core.units import parse_size_bytes
from simcoll.training.attention import ATTENTION_KERNELS

__all__ = [
    "CHECKPOINTED",
    "DIMENSIONS",
    "EAGER_OPS",
    "FSDP_BACKWARD_PREFETCH",
    "FSDP_SHARDING",
    "PRECISION_BYTES",
    "RECOMPUTE",
    "REDUCE_DTYPE_BYTES",
    "TP_COMM_OVERLAP_IMPLS",
    "Parallelism",
    "Training",
    "Transformer",
    "read_model_file",
    "stage_layers",
    "virtual_stage_layers",
]

#: Bytes per element of each training precision's matmul inputs (fp8: its GEMMs' inputs;
#: activations kept for backward and the communicated tensors stay 2 bytes).
PRECISION_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
#: Activation recomputation: none; Megatron's selective (the attention's scores) and full
#: (each layer's forward); torchtitan's selective activation checkpointing per op
#: (``sac_op``) and per layer (``sac_layer``, every second block checkpointed whole).
RECOMPUTE = ("none", "selective", "full", "sac_op", "sac_layer")
#: Elementwise modules that can run op by op (PyTorch eager) instead of fused.
EAGER_OPS = ("norm", "rotary", "activation")
#: The modes that re-run a checkpointed forward, where PyTorch's early stop applies.
CHECKPOINTED = ("full", "sac_op", "sac_layer")
#: The dimensions a rank's coordinates are laid out over, innermost first by default.
DIMENSIONS = ("tp", "cp", "dp", "pp")
DATA_PARALLEL = ("ddp", "zero1", "zero2", "zero3", "fsdp")
#: PyTorch FSDP's sharding strategies (``ShardingStrategy``, lower case).
FSDP_SHARDING = ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")
#: PyTorch FSDP's ``BackwardPrefetch`` (``none``: no prefetch).
FSDP_BACKWARD_PREFETCH = ("backward_pre", "backward_post", "none")
#: Bytes per element of the dtype FSDP reduces gradients in (``MixedPrecision.reduce_dtype``).
REDUCE_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: What overlaps tensor-parallel calls with GEMMs (``tp_comm_overlap``): Transformer
#: Engine's userbuffers (Megatron-LM's ``--tp-comm-overlap``: every call of both passes),
#: or PyTorch's micro-pipelined async TP (``torch._inductor.config._micro_pipeline_tp``,
#: torchtitan's ``enable_async_tensor_parallel``), which fuses an all-gather into the
#: GEMMs that read its output and a GEMM into the reduce-scatter of its output only.
TP_COMM_OVERLAP_IMPLS = ("userbuffers", "async_tp")


def _flag(record: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{record}: {name} must be true or false, got {value!r}")


def _positive_int(
    record: str, name: str, value: object, minimum: int = 1, maximum: int | None = None
) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{record}: {name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{record}: {name} must be at most {maximum} (the most simcoll "
                          f"simulates), got {value}")  # fmt: skip
    return value


#: The caps of a model's shape (:mod:`simcoll.core.limits` says why each is where it is).
_SHAPE_CAPS = {"n_layers": MAX_LAYERS, "hidden_size": MAX_HIDDEN_SIZE,
               "ffn_hidden_size": MAX_HIDDEN_SIZE, "n_heads": MAX_HIDDEN_SIZE,
               "vocab_size": MAX_VOCAB_SIZE}  # fmt: skip


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer's shape (pre-norm, RMSNorm or LayerNorm, rotary or learned
    positions: the last two change no FLOP count that matters here).

    ``gated_mlp``: a SwiGLU MLP (three ``hidden x ffn`` matrices, Llama, Mixtral) or a plain
    one (two, GPT-3). ``n_experts`` > 0 makes every layer's MLP a mixture of that many
    experts, each token routed to ``top_k``; ``capacity_factor`` scales the tokens an
    expert computes (and the all-to-all moves) over the even share.
    """

    name: str
    n_layers: int
    hidden_size: int
    ffn_hidden_size: int
    n_heads: int
    vocab_size: int
    n_kv_heads: int = 0  # 0: as many as n_heads (multi-head attention)
    gated_mlp: bool = True
    n_experts: int = 0
    top_k: int = 1
    capacity_factor: float = 1.0
    tied_embeddings: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        record = f"model {self.name}"
        for name, cap in _SHAPE_CAPS.items():
            _positive_int(record, name, getattr(self, name), maximum=cap)
        _positive_int(record, "n_kv_heads", self.n_kv_heads, 0)
        _positive_int(record, "n_experts", self.n_experts, 0, MAX_EXPERTS)
        _positive_int(record, "top_k", self.top_k)
        for name in ("gated_mlp", "tied_embeddings"):
            _flag(record, name, getattr(self, name))
        if self.n_kv_heads == 0:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.hidden_size % self.n_heads:
            raise ConfigError(f"{record}: hidden_size {self.hidden_size} does not split into "
                              f"{self.n_heads} heads")  # fmt: skip
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"{record}: n_heads {self.n_heads} is not a multiple of "
                              f"n_kv_heads {self.n_kv_heads}")  # fmt: skip
        if self.n_experts and self.top_k > self.n_experts:
            raise ConfigError(f"{record}: top_k {self.top_k} is more than n_experts "
                              f"{self.n_experts}")  # fmt: skip
        factor = self.capacity_factor
        if not (isinstance(factor, int | float) and factor >= 1 and math.isfinite(factor)):
            raise ConfigError(f"{record}: capacity_factor must be a finite number >= 1, got "
                              f"{self.capacity_factor!r}")  # fmt: skip
        from simcoll.training.flops import n_params  # noqa: PLC0415 - flops imports this module

        params = n_params(self)  # exact: every count above is capped
        if params > MAX_PARAMETERS:
            raise ConfigError(f"{record}: its shape makes {params:.3g} parameters, more than "
                              f"the {MAX_PARAMETERS:.3g} (2^50) simcoll simulates; use fewer "
                              "layers or experts, or a narrower model")  # fmt: skip

    @property
    def head_dim(self) -> int:
        """Each attention head's width."""
        return self.hidden_size // self.n_heads

    @property
    def kv_size(self) -> int:
        """The width of the keys (and of the values): ``n_kv_heads x head_dim``."""
        return self.n_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        """True for a mixture of experts."""
        return self.n_experts > 0


@dataclass(frozen=True)
class Training:
    """How the model is trained: ``global_batch_size`` sequences of ``seq_length`` tokens
    per step, ``micro_batch_size`` at a time per pipeline (data-parallel replica).

    ``flash_attention`` (the default, as Megatron-Core with Transformer Engine runs): the
    attention is one fused kernel that skips the causal mask's blocks and keeps no
    ``s x s`` scores for backward (it recomputes them), so selective recomputation changes
    nothing; without it, the scores and softmax are stored (Korthikanti et al. 2022) unless
    ``recompute`` is ``"selective"``, which recomputes them in backward.
    ``attention_kernel`` names the fused kernel whose measured speed times it
    (:data:`~simcoll.training.attention.ATTENTION_KERNELS`): ``flash2``, FlashAttention-2,
    what PyTorch's ``scaled_dot_product_attention`` runs (the default); ``cudnn``, cuDNN's
    fused attention, what Transformer Engine (NeMo, Megatron-LM) runs; ``flash3``;
    ``triton``, FlashAttention's Triton port as llm-foundry ran it, which no table holds
    (timed as FlashAttention-2 on the H100, scaled by the GPU's peak).

    ``recompute = "full"`` re-runs each layer's whole forward in its backward, as
    Megatron's ``--recompute-granularity full`` does. ``recompute_early_stop`` re-runs it
    as PyTorch's non-reentrant ``torch.utils.checkpoint`` does (``checkpoint_wrapper``
    around each block under FSDP, torchtitan, llm-foundry; PyTorch 2.1 and later): it stops
    as soon as every tensor the backward saved is rebuilt (``set_checkpoint_early_stop``,
    on by default), so the layer's last GEMM, a ``torch.nn.Linear`` that saves its input
    and weight before it multiplies, and all after it, are not re-run
    (:func:`~simcoll.training.flops.recomputed_ops`).

    torchtitan's selective activation checkpointing (``parallelize_llama.py``
    ``_apply_ac_to_transformer_block``, at 6a6f755d, Dec 2024), each block in the same
    non-reentrant checkpoint: ``sac_op`` (``selective_ac_option = "op"``) saves the output
    of every ``aten.mm`` but every second one counted within the block, and of the fused
    attention, and re-runs the rest (norms, rotary, activations, residuals, and the
    second, fourth... matmul: a Llama block's ``wk``, ``wo`` and ``w3``); ``sac_layer``
    (``selective_ac_option = "2"``) checkpoints every second block whole and no other.

    Each norm, the gated activation and the rotary embedding run as one kernel that reads
    its inputs and writes its output once (Transformer Engine, Apex, ``torch.compile``,
    PyTorch's own ``layer_norm``), but those ``eager_ops`` names (``norm``, ``rotary``,
    ``activation``), which run op by op as PyTorch eager runs torchtitan's modules
    without ``torch.compile`` (:func:`~simcoll.training.flops.layer_ops` counts their
    bytes).

    The query, key and value projections run as one GEMM, and so do the gated MLP's gate
    and up projections (Megatron-Core's ``linear_qkv`` and ``linear_fc1``, MPT's
    ``Wqkv``), unless ``separate_projections``: torchtitan's Llama holds ``wq``, ``wk``,
    ``wv``, ``w1`` and ``w3`` as ``nn.Linear`` modules of their own, each a GEMM of its
    own shape in the forward and in both gradients (at tensor parallel 8 on Llama 3 8B,
    ``wk`` and ``wv`` have 128 output columns each), under ``torch.compile`` too
    (Inductor's ``pre_grad_fusion_options`` is empty by default, and PyTorch's async TP
    fuses a gather into such a list of GEMMs, ``fused_all_gather_matmul``'s ``Bs``).
    """

    seq_length: int
    micro_batch_size: int = 1
    global_batch_size: int = 1
    precision: str = "bf16"
    recompute: str = "none"
    recompute_early_stop: bool = False
    flash_attention: bool = True
    attention_kernel: str = "flash2"
    eager_ops: tuple[str, ...] = ()
    separate_projections: bool = False

    def __post_init__(self) -> None:
        for name in ("seq_length", "micro_batch_size", "global_batch_size"):
            _positive_int("training", name, getattr(self, name))
        if self.precision not in PRECISION_BYTES:
            raise ConfigError(f"training: precision must be one of "
                              f"{', '.join(PRECISION_BYTES)}, got {self.precision!r}")  # fmt: skip
        _flag("training", "flash_attention", self.flash_attention)
        if isinstance(self.eager_ops, str) or not isinstance(self.eager_ops, (tuple, list)):
            raise ConfigError(f"training: eager_ops must be a list of some of "
                              f"{', '.join(EAGER_OPS)}, got {self.eager_ops!r}")  # fmt: skip
        eager = tuple(self.eager_ops)
        if not set(eager) <= set(EAGER_OPS) or len(set(eager)) != len(eager):
            raise ConfigError(f"training: eager_ops must list some of {', '.join(EAGER_OPS)} "
                              f"once each, got {list(eager)}")  # fmt: skip
        object.__setattr__(self, "eager_ops", eager)
        if self.attention_kernel not in ATTENTION_KERNELS:
            valid = ", ".join(ATTENTION_KERNELS)
            raise ConfigError(f"training: attention_kernel must be one of {valid}, "
                              f"got {self.attention_kernel!r}")  # fmt: skip
        if self.recompute not in RECOMPUTE:
            raise ConfigError(f"training: recompute must be one of {', '.join(RECOMPUTE)}, "
                              f"got {self.recompute!r}")  # fmt: skip
        _flag("training", "recompute_early_stop", self.recompute_early_stop)
        _flag("training", "separate_projections", self.separate_projections)
        if self.recompute_early_stop and self.recompute not in CHECKPOINTED:
            raise ConfigError(f"training: recompute_early_stop applies to recompute = "
                              f"{', '.join(CHECKPOINTED)}, got recompute "
                              f"{self.recompute!r}")  # fmt: skip

    def n_microbatches(self, dp: int) -> int:
        """Micro-batches per replica and step: ``global / (micro x dp)``, which must divide."""
        per = self.micro_batch_size * dp
        if self.global_batch_size % per:
            raise ConfigError(f"training: global_batch_size {self.global_batch_size} is not a "
                              f"multiple of micro_batch_size x dp = {per}")  # fmt: skip
        return self.global_batch_size // per

    @property
    def tokens_per_step(self) -> int:
        """Tokens of one step over every replica."""
        return self.global_batch_size * self.seq_length


@dataclass(frozen=True)
class Parallelism:
    """How the GPUs split the work.

    ``tp`` tensor parallel (with ``sequence_parallel``: its all-reduces become
    reduce-scatters and all-gathers, Korthikanti et al. 2022; with ``tp_comm_overlap``
    they run beside the GEMMs, as ``tp_comm_overlap_impl`` overlaps them: ``userbuffers``
    every call, ``async_tp`` all but the backward's reduce-scatters, which reduce a sum of
    GEMMs' outputs; ``sequence_parallel_dim`` the activations' dimension they gather and
    scatter: 0, Megatron-LM's sequence-first ``[s, b, h]``; 1, PyTorch DTensor's
    ``Shard(1)`` of ``[b, s, h]`` as torchtitan shards it, where functional collectives
    copy the whole tensor through ``torch.cat`` after each all-gather and before each
    reduce-scatter, ``torch/distributed/_functional_collectives.py``; with
    ``tp_fp8_all_gather`` and FP8 GEMMs the all-gathers move 1 byte an element, as
    torchao's ``Float8ColwiseParallel`` and ``PrepareFloat8ModuleInput`` cast before the
    forward's and ``NoopFwToFloat8BwDynamic`` before the backward's); ``pp``
    pipeline stages, each holding ``virtual_stages`` model chunks (1: 1F1B; more: the
    interleaved schedule of Narayanan et al. 2021); ``dp`` data-parallel replicas (0: every
    GPU left over), whose gradients and optimizer state are kept as ``data_parallel`` says
    (``ddp``: replicated;
    ``zero1``, ``zero2``, ``zero3``: Rajbhandari et al. 2020; ``fsdp``: ZeRO-3);
    ``ep`` expert parallel (the experts split over ``ep`` consecutive data-parallel ranks,
    Megatron-Core's expert-data-parallel layout); ``cp`` context parallel (ring attention
    over the sequence). ``order`` lists the dimensions innermost first: ranks ``0..tp-1``
    are one tensor-parallel group by default.

    With ``fsdp`` (or ``zero3``), the ``fsdp_*`` fields say what PyTorch's
    ``FullyShardedDataParallel`` is given (other data-parallel modes ignore them):
    ``fsdp_layers_per_unit`` transformer blocks per FSDP unit (the wrap policy; the root
    unit holds the embedding, final norm and output layer); ``fsdp_sharding`` its
    ``ShardingStrategy`` (``hybrid_shard`` shards over ``fsdp_shard_size`` data-parallel
    ranks, 0: those on one node, and replicates across them); ``fsdp_forward_prefetch``,
    ``fsdp_backward_prefetch`` and ``fsdp_limit_all_gathers`` when it gathers a unit;
    ``fsdp_no_sync`` accumulates gradients unreduced over the micro-batches (reduced on
    the last); ``fsdp_reduce_dtype`` the gradients' dtype on the wire.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 0
    ep: int = 1
    cp: int = 1
    sequence_parallel: bool = True
    tp_comm_overlap: bool = False
    tp_comm_overlap_impl: str = "userbuffers"
    sequence_parallel_dim: int = 0
    tp_fp8_all_gather: bool = False
    virtual_stages: int = 1
    data_parallel: str = "zero1"
    bucket_bytes: int = 40_000_000 * 4  # Megatron-LM's default: 40 M fp32 elements
    overlap_grad_reduce: bool = True
    order: tuple[str, ...] = DIMENSIONS
    fsdp_layers_per_unit: int = 1
    fsdp_sharding: str = "full_shard"
    fsdp_shard_size: int = 0
    fsdp_forward_prefetch: bool = True
    fsdp_backward_prefetch: str = "backward_pre"
    fsdp_limit_all_gathers: bool = True
    fsdp_no_sync: bool = False
    fsdp_reduce_dtype: str = "bf16"
    first_stage_layers: int = 0  # 0: an even share (Megatron's --decoder-first/last-
    last_stage_layers: int = 0  # pipeline-num-layers; with virtual_stages, the first/last chunk)

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "cp", "virtual_stages", "fsdp_layers_per_unit"):
            _positive_int("parallelism", name, getattr(self, name))
        _positive_int("parallelism", "dp", self.dp, 0)
        _positive_int("parallelism", "fsdp_shard_size", self.fsdp_shard_size, 0)
        _positive_int("parallelism", "bucket_bytes", self.bucket_bytes)
        dim = self.sequence_parallel_dim
        if isinstance(dim, bool) or dim not in (0, 1):
            raise ConfigError("parallelism: sequence_parallel_dim must be 0 (Megatron-LM's "
                              "[s, b, h]) or 1 (PyTorch DTensor's [b, s, h]), "
                              f"got {dim!r}")  # fmt: skip
        for name in ("first_stage_layers", "last_stage_layers"):
            _positive_int("parallelism", name, getattr(self, name), minimum=0)
        flags = ("sequence_parallel", "overlap_grad_reduce", "tp_comm_overlap", "tp_fp8_all_gather",
                 "fsdp_forward_prefetch", "fsdp_limit_all_gathers", "fsdp_no_sync")  # fmt: skip
        for name in flags:
            _flag("parallelism", name, getattr(self, name))
        for name, valid in (("data_parallel", DATA_PARALLEL), ("fsdp_sharding", FSDP_SHARDING),
                            ("fsdp_backward_prefetch", FSDP_BACKWARD_PREFETCH),
                            ("tp_comm_overlap_impl", TP_COMM_OVERLAP_IMPLS),
                            ("fsdp_reduce_dtype", tuple(REDUCE_DTYPE_BYTES))):  # fmt: skip
            if getattr(self, name) not in valid:
                raise ConfigError(f"parallelism: {name} must be one of {', '.join(valid)}, "
                                  f"got {getattr(self, name)!r}")  # fmt: skip
        order = tuple(self.order)
        if sorted(order) != sorted(DIMENSIONS):
            raise ConfigError(f"parallelism: order must list {', '.join(DIMENSIONS)} once each, "
                              f"innermost first, got {list(order)}")  # fmt: skip
        object.__setattr__(self, "order", order)
        if self.dp and self.dp % self.ep:
            raise ConfigError(f"parallelism: ep {self.ep} must divide dp {self.dp} (experts "
                              "split over data-parallel ranks)")  # fmt: skip

    @property
    def is_fsdp(self) -> bool:
        """True where FSDP units gather and reduce the parameters (``fsdp``, ``zero3``)."""
        return self.data_parallel in ("zero3", "fsdp")

    @property
    def zero_stage(self) -> int:
        """0 for DDP, else the ZeRO stage: FSDP is 3 (0 with ``no_shard``: DDP's state)."""
        if self.is_fsdp and self.fsdp_sharding == "no_shard":
            return 0
        return {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}[self.data_parallel]

    @property
    def shard_degree(self) -> int:
        """Over how many ranks ZeRO/FSDP shards the dense state (once ``dp`` is known): the
        data- and context-parallel ranks, ``fsdp_shard_size`` of them with
        ``hybrid_shard`` (0: not resolved yet, taken as all), 1 without sharding."""
        if self.zero_stage == 0:
            return 1
        if self.is_fsdp and self.fsdp_sharding == "hybrid_shard" and self.fsdp_shard_size:
            return self.fsdp_shard_size
        return self.dp * self.cp

    @property
    def n_gpus(self) -> int:
        """GPUs in all (once ``dp`` is known)."""
        return self.tp * self.cp * self.pp * self.dp

    def with_gpus(self, n_gpus: int) -> Parallelism:
        """This layout on ``n_gpus`` GPUs: ``dp`` from the rest where it is 0, checked
        otherwise."""
        replica = self.tp * self.cp * self.pp
        if n_gpus % replica:
            raise ConfigError(f"parallelism: {n_gpus} GPUs do not split into tp {self.tp} x "
                              f"cp {self.cp} x pp {self.pp} ({replica} GPUs per data-parallel "
                              "replica)")  # fmt: skip
        dp = n_gpus // replica
        if self.dp and self.dp != dp:
            raise ConfigError(f"parallelism: tp {self.tp} x cp {self.cp} x pp {self.pp} x "
                              f"dp {self.dp} = {replica * self.dp} GPUs, but the topology has "
                              f"{n_gpus}")  # fmt: skip
        return replace(self, dp=dp)


_RECORDS: dict[str, type[Any]] = {
    "model": Transformer,
    "training": Training,
    "parallelism": Parallelism,
}


def virtual_stage_layers(n_layers: int, p: Parallelism) -> list[int]:
    """Layers of each model chunk, in model order (``pp x virtual_stages`` of them; chunk
    ``v`` runs on pipeline stage ``v % pp``): an even share, or, with
    ``first_stage_layers`` or ``last_stage_layers``, those in the first or last chunk and
    an even share of the rest in the others. Without virtual stages that is Megatron-LM's
    ``--decoder-first-pipeline-num-layers`` and ``--decoder-last-pipeline-num-layers``;
    with them, torchtitan's ``generate_split_points`` (the first and last of its
    ``pp x 2`` stages one layer short where the layers do not split evenly). Llama 3 405B's
    126 layers on 16 stages, 7 on the first and the last (Llama Team 2024, section 3.3.2:
    one layer fewer on each), and as torchtitan interleaves them on 8 ranks:

    >>> virtual_stage_layers(126, Parallelism(pp=16, first_stage_layers=7, last_stage_layers=7))[:3]
    [7, 8, 8]
    >>> split = virtual_stage_layers(126, Parallelism(pp=8, virtual_stages=2,
    ...                              first_stage_layers=7, last_stage_layers=7))
    >>> split[0], split[1:15] == [8] * 14, split[15]
    (7, True, 7)
    >>> virtual_stage_layers(10, Parallelism(pp=4, last_stage_layers=3))
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: parallelism: 7 layers do not split evenly over the \
other 3 pipeline stages (first_stage_layers 0, last_stage_layers 3)
    """
    chunks = p.pp * p.virtual_stages
    fixed = {}
    if p.first_stage_layers:
        fixed[0] = p.first_stage_layers
    if p.last_stage_layers:
        fixed[chunks - 1] = p.last_stage_layers
    if not fixed:
        return [n_layers // chunks] * chunks
    where = "pipeline stages" if p.virtual_stages == 1 else "model chunks (pp x virtual_stages)"
    if chunks == 1 or (len(fixed) == 2 and chunks == 2 and sum(fixed.values()) != n_layers):
        raise ConfigError(f"parallelism: first_stage_layers and last_stage_layers need pp > 1 "
                          f"and to add up to the {n_layers} layers on 2 stages")  # fmt: skip
    others = chunks - len(fixed)
    rest = n_layers - sum(fixed.values())
    if others == 0:
        return [fixed[0], fixed[chunks - 1]]
    given = f"first_stage_layers {p.first_stage_layers}, last_stage_layers {p.last_stage_layers}"
    if rest < others:
        raise ConfigError(f"parallelism: {given} leave {rest} of the {n_layers} layers for the "
                          f"other {others} {where}, fewer than one each")  # fmt: skip
    if rest % others:
        raise ConfigError(f"parallelism: {rest} layers do not split evenly over the other "
                          f"{others} {where} ({given})")  # fmt: skip
    return [fixed.get(i, rest // others) for i in range(chunks)]


def stage_layers(n_layers: int, p: Parallelism) -> list[int]:
    """Layers of each pipeline stage: those of its model chunks
    (:func:`virtual_stage_layers`), ``v % pp`` the stage of chunk ``v``. torchtitan's
    interleaved Llama 3 405B on 8 ranks: 7 + 8 on the first, 8 + 7 on the last:

    >>> stage_layers(126, Parallelism(pp=8, virtual_stages=2, first_stage_layers=7,
    ...                               last_stage_layers=7))
    [15, 16, 16, 16, 16, 16, 16, 15]
    """
    per_stage = [0] * p.pp
    for v, layers in enumerate(virtual_stage_layers(n_layers, p)):
        per_stage[v % p.pp] += layers
    return per_stage


def record_from(
    kind: str, table: Mapping[str, Any], source: str | None, *, field: str | None = None
) -> Any:
    """A :class:`Transformer`, :class:`Training` or :class:`Parallelism` from a TOML table
    (sizes such as ``bucket_bytes`` may be unit strings); errors name ``source`` and
    ``field`` (default: the table's name).

    >>> record_from("training", {"seq_length": 0}, "m.toml")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: m.toml: training: seq_length must be an integer >= 1, got 0
    """
    cls = _RECORDS[kind]
    blame = field or kind
    if not isinstance(table, Mapping):
        raise ConfigError("must be a table", source=source, field=blame)
    valid = [f.name for f in fields(cls)]
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}; valid: {', '.join(valid)}",
                          source=source, field=blame)  # fmt: skip
    values = dict(table)
    if "bucket_bytes" in values:
        try:
            values["bucket_bytes"] = parse_size_bytes(values["bucket_bytes"])
        except UnitError as error:
            blame = field or f"{kind}.bucket_bytes"
            raise ConfigError(error.message, source=source, field=blame) from None
    if "eager_ops" in values and isinstance(values["eager_ops"], str):
        values["eager_ops"] = tuple(x for x in values["eager_ops"].split(",") if x)
    if "order" in values:
        order = values["order"]
        values["order"] = tuple(order.split("-")) if isinstance(order, str) else tuple(order)
    try:
        return cls(**values)
    except ConfigError as error:
        raise ConfigError(error.message.split(": ", 1)[-1], source=source, field=blame) from None
    except TypeError as error:  # a missing required field
        raise ConfigError(str(error).split(".__init__() ")[-1], source=source,
                          field=blame) from None  # fmt: skip


def read_model_file(
    path: str | Path,
) -> tuple[Transformer, Mapping[str, Any], Mapping[str, Any]]:
    """A model file (or a shipped model by name: ``llama3-8b``): its :class:`Transformer`
    and its ``[training]`` and ``[parallelism]`` tables (defaults a scenario's values
    replace), named in every error."""
    path = find(path, "models")
    source = str(path)
    text = read_input_text(path, missing="no such model file")  # bounded, a regular file
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"not TOML: {error}", source=source) from None
    except ValueError as error:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ConfigError(f"not TOML: {str(error).split(';')[0]}", source=source) from None
    except RecursionError:
        raise ConfigError(TOO_DEEP, source=source) from None
    check_nesting(document, source=source)
    unknown = sorted(set(document) - {"schema", "model", "training", "parallelism"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}; valid: schema, model, training, "
                          "parallelism", source=source)  # fmt: skip
    if document.get("schema", 1) != 1:
        raise ConfigError(f"schema {document['schema']!r} is not 1", source=source,
                          field="schema")  # fmt: skip
    if "model" not in document:
        raise ConfigError("misses the [model] table", source=source, field="model")
    model = record_from("model", document["model"], source)
    for kind in ("training", "parallelism"):
        if not isinstance(document.get(kind, {}), Mapping):
            raise ConfigError("must be a table", source=source, field=kind)
    return model, document.get("training", {}), document.get("parallelism", {})
