"""One training step of a transformer on a cluster design, on the one path of every call.

:func:`training_step` lays the GPUs out (:mod:`~simcoll.training.layout`), times each
stage's compute from the hardware (:mod:`~simcoll.training.flops`,
:mod:`~simcoll.training.compute`), and records the step in a
:class:`~simcoll.prediction.session.Session`, whose calls are decided as ``simcoll
predict`` decides them (NCCL's pick, the group's own plan, the calibration) and share the
fabric where they meet. What each stage does, per micro-batch and model chunk:

tensor parallel (stream ``tp``)
    per layer, forward and backward, two all-gathers and two reduce-scatters of the layer's
    activations with sequence parallelism, two all-reduces without (Megatron-LM); a
    recomputed forward (``recompute = "full"``) issues the forward's again;
expert parallel (``ep``)
    per layer, the dispatch and combine all-to-alls of the routed tokens, forward and
    backward, in place of the MLP's tensor-parallel calls (experts are not split by TP);
context parallel (``cp``)
    per layer, ``cp - 1`` ring send/recv steps of the keys and values beside the attention
    (twice in backward: the gradients travel too), overlapped with compute;
pipeline (``pp ...``)
    a stage's output activations (``1/tp`` each, Megatron's scatter-gather) copied to the
    next stage's GPUs, and their gradients back;
data parallel (``dp``)
    the last micro-batch's backward issues the gradients in buckets of ``bucket_bytes``
    as its layers finish: reduce-scatters (ZeRO-1/2, Megatron's distributed optimizer) or
    all-reduces (DDP) over the data- and context-parallel ranks, then the optimizer and
    (ZeRO-1/2) the all-gather of the updated parameters;
FSDP (``fsdp``, ``zero3``: PyTorch's ``FullyShardedDataParallel``)
    units of ``fsdp_layers_per_unit`` transformer blocks (one by default: the
    transformer-block wrap policy), and a root unit of what is in no block (embedding,
    final norm, output layer; tied, once). A unit computes once its all-gather is done;
    the root is gathered before a stage's first unit and held until the backward that
    leaves no micro-batch in flight (FSDP does not reshard the root after forward). A
    prefetched gather (``fsdp_forward_prefetch`` in forward, ``backward_pre`` in
    backward) is issued as the unit before it starts computing, with
    ``fsdp_limit_all_gathers`` once the unit two before has finished (at most two units
    gathered; without, at once); one not prefetched (``backward_post``, ``none``, no
    forward prefetch) as the unit before it finishes. After a unit's backward (every
    micro-batch, or the last with ``fsdp_no_sync``) its gradients are cast to
    ``fsdp_reduce_dtype`` and divided (:func:`fsdp_gradient_bytes_per_param`, at the HBM
    bandwidth, on the compute: FSDP's post-backward stream shares the SMs and HBM with
    the next unit's backward), then reduce-scattered, the root's last. A process group's
    collectives run in the order they are issued (one NCCL stream per communicator, as
    PyTorch's ``BackwardPrefetch`` documents it), so ``backward_pre`` issues the next
    gather before the reduce-scatter and ``none`` after it. ``shard_grad_op`` gathers in
    forward only; ``hybrid_shard`` gathers and reduce-scatters in shard groups of
    ``fsdp_shard_size`` ranks (default: those on one node), then all-reduces each shard
    over its replicas (another group: stream ``dp replicate``); ``no_shard`` all-reduces
    each unit's gradients and gathers nothing.

A pass's layers run as one compute span and their calls as repeated calls
(``Session.collective(repeat=)``): the same times as layer by layer where the calls meet
nothing else on a link, at a fraction of the ops. The last backward of a chunk is split
per layer where buckets need it, and FSDP's passes per unit.

Compute beside a collective runs on the SMs its CTAs leave (one per channel, of the
``[gpu]`` table's ``sms``: :mod:`simcoll.prediction.sm_sharing`), where the compute comes
from the table (measured ``times`` are already slowed).

Not modelled: the embedding's and tied weights' extra all-reduces (but FSDP's root unit),
FSDP's CPU issue delays (the CPU is taken to run ahead of the GPUs), FP8 scaling overheads,
the HBM bandwidth calls take from memory-bound kernels, pipeline sends as NCCL p2p calls
(they are copies), uneven expert load beyond the capacity factor, optimizer overlap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import networkx as nx

from simcoll.core.errors import ConfigError, LimitError, SimulationError
from simcoll.core.limits import MAX_STEP_CALLS
from simcoll.core.pauses import gc_paused
from simcoll.prediction.call import DEFAULTS
from simcoll.prediction.session import Op, Session
from simcoll.sim.timeline import COMPUTE, Timeline, overlap_s, union_s
from simcoll.topology.calibration import Calibration
from simcoll.topology.gpu_spec import GpuSpec, gpu_spec
from simcoll.training.compute import Efficiency, op_time_s, ops_time_s, sixteen_bit
from simcoll.training.flops import (
    ACTIVATION_BYTES,
    ComputeOp,
    backward_ops,
    head_ops,
    layer_ops,
    matmul_params,
    model_flops_per_token,
    recomputed_ops,
    recomputed_share,
    row_pieces,
)
from simcoll.training.layout import BACKWARD, FORWARD, Layout, interleaved_order
from simcoll.training.memory import (
    MemoryPerGpu,
    layer_params_per_gpu,
    memory_per_gpu,
    nccl_buffer_bytes,
    params_per_gpu,
    root_params_per_gpu,
)
from simcoll.training.spec import (
    CHECKPOINTED,
    REDUCE_DTYPE_BYTES,
    Parallelism,
    Training,
    Transformer,
    virtual_stage_layers,
)

__all__ = [
    "DIMENSION_STREAMS",
    "StepResult",
    "StepTimes",
    "compute_bound_s",
    "fsdp_gradient_bytes_per_param",
    "fsdp_groups",
    "step_calls",
    "step_times",
    "training_step",
]

#: The stream each dimension's communication runs on; pipeline copies on ``pp ...``.
DIMENSION_STREAMS = {"tp": "tp", "ep": "ep", "cp": "cp", "pp": "pp", "dp": "dp"}
GRAD_BYTES = 2  # gradients reduced in bf16 (Megatron-LM's default)
#: Adam's bytes per parameter of its shard: fp32 parameter, momentum and variance read and
#: written (24), the gradient read (2), the bf16 parameter written (2).
ADAM_BYTES_PER_PARAM = 28


#: A layer's tensor-parallel calls under sequence parallelism, in order, each with the
#: GEMM beside it: the gather before the query, key and value projection, the reduction
#: after the attention's output projection, the MLP's gather and reduction (a mixture of
#: experts has the attention's two only).
TP_SITES = (("allgather", "qkv"), ("reducescatter", "attention out"),
            ("allgather", "mlp up"), ("reducescatter", "mlp down"))  # fmt: skip


@dataclass(frozen=True)
class StepTimes:
    """One GPU's compute per micro-batch: a layer's forward and backward, the output
    layer's (last stage), and the optimizer's once per step; under FSDP, the time per
    parameter of a unit's gradient that its post-backward hook casts and divides before
    each reduce-scatter (:func:`fsdp_gradient_bytes_per_param`)."""

    forward_s_per_layer: float
    backward_s_per_layer: float
    head_forward_s: float
    head_backward_s: float
    optimizer_s: float
    fsdp_gradient_s_per_param: float = 0.0
    #: Per layer, the forward GEMM and its data gradient at each of :data:`TP_SITES` the
    #: model has (PyTorch's async TP fuses a tensor-parallel call into them).
    tp_site_forward_s: tuple[float, ...] = ()
    tp_site_dgrad_s: tuple[float, ...] = ()
    tp_site_recompute_s: tuple[float, ...] = ()  # what the recomputation re-runs of it
    #: The same three as PyTorch's async TP runs them, in ``tp`` pieces of rows
    #: (:func:`~simcoll.training.flops.row_pieces`); () where not so run: the whole GEMMs'.
    tp_site_forward_split_s: tuple[float, ...] = ()
    tp_site_dgrad_split_s: tuple[float, ...] = ()
    tp_site_recompute_split_s: tuple[float, ...] = ()
    #: The copy of a micro-batch's hidden states (read and written at the HBM bandwidth)
    #: beside each tensor-parallel gather and reduce-scatter along the sequence of
    #: ``[b, s, h]`` (``sequence_parallel_dim = 1``, PyTorch DTensor's ``torch.cat``).
    tp_copy_s: float = 0.0
    #: PyTorch's async TP: the sum of the ``tp`` partial outputs a fused GEMM and
    #: reduce-scatter pulled from its peers (``reduce_fn`` in ``_fused_matmul_reduce_scatter
    #: _impl``, ``torch/distributed/_symmetric_memory``): the stacked partials read (the
    #: micro-batch's hidden states) and ``1/tp`` of them written, at the HBM bandwidth.
    tp_reduce_s: float = 0.0


@dataclass(frozen=True)
class StepResult:
    """A simulated step: its timeline, flat metrics (units in every key), memory."""

    timeline: Timeline
    metrics: dict[str, float]
    memory: MemoryPerGpu
    parallelism: Parallelism


def step_times(
    m: Transformer,
    t: Training,
    p: Parallelism,
    gpu: GpuSpec,
    efficiency: Efficiency,
) -> StepTimes:
    """Roofline compute times (backward twice the forward's FLOPs and traffic; the
    recomputation adds what :func:`~simcoll.training.flops.recomputed_ops` re-runs: a full
    one the forward, or the forward up to its last GEMM under PyTorch's early stop, a
    selective one the attention's where FlashAttention does not already recompute it,
    torchtitan's per-op one what its policy does not save, its per-layer one a full
    re-run on every second layer, averaged over the layers).

    Under FP8 the output layer stays in 16 bits: FP8 runs only in Transformer Engine's
    modules, and neither Megatron-Core's output layer (a ``ColumnParallelLinear``) nor
    llm-foundry's MPT head (the tied embedding, ``F.linear``) is one."""
    ops = layer_ops(m, t, p)

    def time_s(items: Iterable[ComputeOp]) -> float:
        return ops_time_s(list(items), gpu, t.precision, efficiency)

    forward = time_s(ops)
    backward = time_s(backward_ops(ops)) + recomputed_share(m, t) * time_s(recomputed_ops(ops, t))
    head = head_ops(m, t, p)
    head_precision = sixteen_bit(gpu, t.precision) if t.precision == "fp8" else t.precision

    def head_time_s(items: Iterable[ComputeOp]) -> float:
        return ops_time_s(list(items), gpu, head_precision, efficiency)

    head_backward = head_time_s(backward_ops(head))
    dense, expert = params_per_gpu(m, p)
    shard = dense / p.shard_degree + expert / max(1, p.shard_degree // p.ep)
    adam = ComputeOp("adam", "optimizer", 10 * shard, ADAM_BYTES_PER_PARAM * shard)
    gradient_s_per_param = 0.0
    if p.is_fsdp and gpu.memory_bandwidth_bytes_per_s is not None:
        gradient_s_per_param = fsdp_gradient_bytes_per_param(t, p) / (
            gpu.memory_bandwidth_bytes_per_s * efficiency.memory)  # fmt: skip
    by_name = {op.name: op for op in [*ops, *backward_ops(ops)]}
    again = {op.name: op for op in recomputed_ops(ops, t)}
    sites = [name for _, name in TP_SITES if name in by_name]

    def site_s(names: Iterable[str], found: dict[str, ComputeOp] = by_name) -> tuple[float, ...]:
        return tuple(op_time_s(found[n], gpu, t.precision, efficiency) if n in found else 0.0
                     for n in names)  # fmt: skip

    fused = (p.tp > 1 and p.sequence_parallel and p.tp_comm_overlap
             and p.tp_comm_overlap_impl == "async_tp")  # fmt: skip
    element_bytes = {"fp8": 1}.get(t.precision, ACTIVATION_BYTES)

    def split_s(names: Iterable[str], found: dict[str, ComputeOp] = by_name,
                inputs_bytes: float = element_bytes) -> tuple[float, ...]:  # fmt: skip
        if not fused:
            return ()
        return tuple(time_s(row_pieces(found[n], p.tp, inputs_bytes)) if n in found else 0.0
                     for n in names)  # fmt: skip

    copy_s = reduce_s = 0.0
    hidden = t.micro_batch_size * t.seq_length // p.cp * m.hidden_size * ACTIVATION_BYTES
    if p.tp > 1 and p.sequence_parallel and p.sequence_parallel_dim == 1:
        copy = ComputeOp("torch.cat", "elementwise", 0.0, 2.0 * hidden)
        copy_s = op_time_s(copy, gpu, t.precision, efficiency)
    if p.tp > 1 and p.sequence_parallel and p.tp_comm_overlap_impl == "async_tp":
        reduce = ComputeOp("async TP partial sum", "elementwise", hidden / ACTIVATION_BYTES,
                           hidden * (1 + 1 / p.tp))  # fmt: skip
        reduce_s = op_time_s(reduce, gpu, t.precision, efficiency)
    return StepTimes(forward, backward, head_time_s(head), head_backward,
                     op_time_s(adam, gpu, "fp32" if "fp32" in gpu.peak_flops_per_s else
                               t.precision, efficiency), gradient_s_per_param,
                     site_s(sites), site_s(f"{n} dgrad" for n in sites),
                     site_s(sites, again), split_s(sites),
                     split_s((f"{n} dgrad" for n in sites), inputs_bytes=ACTIVATION_BYTES),
                     split_s(sites, again), copy_s, reduce_s)  # fmt: skip


def fsdp_gradient_bytes_per_param(t: Training, p: Parallelism) -> int:
    """The HBM traffic per parameter of a unit's unsharded gradient that PyTorch's FSDP
    moves before each reduce-scatter (``_post_backward_hook`` and ``_reduce_grad`` in
    ``torch/distributed/fsdp/_runtime_utils.py``): the cast to ``reduce_dtype`` where the
    gradient is in another dtype (read, write), then the in-place division by the
    gradient pre-divide factor (read, write), which is above 1 for any group of 2 or more
    ranks. The gradient is in the 16-bit parameter dtype under mixed precision: into
    fp32, 2 + 4 bytes to cast and 4 + 4 to divide.

    >>> bf16 = Training(seq_length=2048)
    >>> fsdp = Parallelism(data_parallel="fsdp", dp=8)
    >>> fsdp_gradient_bytes_per_param(bf16, replace(fsdp, fsdp_reduce_dtype="fp32"))
    14
    >>> fsdp_gradient_bytes_per_param(bf16, fsdp)  # divided in bf16 only: 2 + 2
    4
    """
    gradient = 4 if t.precision in ("fp32", "tf32") else 2
    reduced = REDUCE_DTYPE_BYTES[p.fsdp_reduce_dtype]
    cast = gradient + reduced if reduced != gradient else 0
    divide = 2 * reduced if p.dp * p.cp > 1 else 0
    return cast + divide


def _recomputed_fraction(m: Transformer, t: Training, p: Parallelism) -> float:
    """The share of a layer's forward FLOPs its backward runs again (1 for a full
    recomputation, less under PyTorch's early stop, 0 for none)."""
    ops = layer_ops(m, t, p)
    redone = sum(o.flops for o in recomputed_ops(ops, t))
    return recomputed_share(m, t) * redone / sum(o.flops for o in ops)


def _check_shapes(m: Transformer, t: Training, p: Parallelism) -> None:
    chunks = p.pp * p.virtual_stages
    uneven = bool(p.first_stage_layers or p.last_stage_layers)
    if not uneven and m.n_layers % chunks:
        raise ConfigError(f"parallelism: {m.n_layers} layers do not split into pp {p.pp} x "
                          f"virtual_stages {p.virtual_stages} chunks")  # fmt: skip
    per_chunk = virtual_stage_layers(m.n_layers, p)  # refuses what does not split
    if m.n_heads % p.tp or (m.n_kv_heads % p.tp and p.tp % m.n_kv_heads):
        raise ConfigError(f"parallelism: tp {p.tp} does not split {m.n_heads} heads and "
                          f"{m.n_kv_heads} KV heads")  # fmt: skip
    if t.seq_length % (p.cp * (p.tp if p.sequence_parallel else 1)):
        raise ConfigError(f"parallelism: seq_length {t.seq_length} does not split over "
                          f"cp {p.cp} x tp {p.tp}")  # fmt: skip
    if p.ep > 1 and not m.is_moe:
        raise ConfigError(f"parallelism: ep {p.ep} needs a mixture of experts (the model "
                          f"{m.name} has none)")  # fmt: skip
    if m.is_moe and m.n_experts % p.ep:
        raise ConfigError(f"parallelism: ep {p.ep} does not split {m.n_experts} experts")
    odd = next((n for n in per_chunk if n % p.fsdp_layers_per_unit), None)
    if p.is_fsdp and odd is not None:
        raise ConfigError(f"parallelism: fsdp_layers_per_unit {p.fsdp_layers_per_unit} does "
                          f"not split a model chunk's {odd} layers")  # fmt: skip
    if p.is_fsdp and (p.dp * p.cp) % p.shard_degree:
        raise ConfigError(f"parallelism: fsdp_shard_size {p.shard_degree} does not split the "
                          f"{p.dp * p.cp} data- and context-parallel ranks")  # fmt: skip


def check_layout(m: Transformer, t: Training, p: Parallelism) -> None:
    """Refuse, in one line, a layout (its data-parallel degree known: ``p.with_gpus``)
    that does not divide the model or the batch: what :func:`training_step` checks before
    it simulates anything."""
    _check_shapes(m, t, p)
    n_micro = t.n_microbatches(p.dp)
    if p.virtual_stages > 1 and n_micro % p.pp:
        raise ConfigError(f"parallelism: the interleaved schedule needs the micro-batches "
                          f"({n_micro}) to be a multiple of pp ({p.pp})")  # fmt: skip


def chunk_layers(m: Transformer, p: Parallelism) -> list[list[int]]:
    """The layers of each of a stage's model chunks, per stage: ``[stage][chunk]``, chunk
    ``c`` of stage ``k`` the model's ``c x pp + k``-th (an even share, or as
    :func:`~simcoll.training.spec.virtual_stage_layers` splits them).

    >>> m = Transformer("m", n_layers=10, hidden_size=8, ffn_hidden_size=32, n_heads=2,
    ...                 vocab_size=100)
    >>> chunk_layers(m, Parallelism(pp=2, virtual_stages=2, first_stage_layers=1,
    ...                             last_stage_layers=3))
    [[1, 3], [3, 3]]
    """
    per_chunk = virtual_stage_layers(m.n_layers, p)
    return [per_chunk[k :: p.pp] for k in range(p.pp)]


def compute_bound_s(m: Transformer, t: Training, p: Parallelism, times: StepTimes) -> float:
    """A time no simulated step of this layout can beat: the most a pipeline stage must
    compute in a row, with communication free and no SM lent to a call.

    Stage ``k`` starts no compute before the first micro-batch's forward has crossed
    stages ``0 .. k-1`` (``sum f_i``), computes every pass of every micro-batch
    (``W_k``), and its last backward still has to cross stages ``k-1 .. 0`` (``sum b_i``)
    before the first stage's optimizer step. Each term is compute the step makes on one
    stream in that order, whatever the schedule, and calls and SM sharing only add to it.

    >>> m = Transformer("tiny", n_layers=4, hidden_size=1024, ffn_hidden_size=4096,
    ...                 n_heads=8, vocab_size=32000)
    >>> t = Training(seq_length=2048, global_batch_size=8, micro_batch_size=1)
    >>> times = StepTimes(1.0, 2.0, 0.5, 1.0, 0.25)  # s per layer, head, optimizer
    >>> p = Parallelism(pp=2, dp=1)  # 8 micro-batches of 2 layers on each stage
    >>> compute_bound_s(m, t, p, times)  # 2 + (8 x 6 + 8 x 1.5) + 4 + 0.25
    66.25
    """
    n_micro = t.n_microbatches(p.dp)
    layers = chunk_layers(m, p)
    f = [times.forward_s_per_layer * chunks[0] for chunks in layers]  # the first chunk's
    b = [times.backward_s_per_layer * chunks[0] for chunks in layers]
    per_layer_s = times.forward_s_per_layer + times.backward_s_per_layer
    head_s = times.head_forward_s + times.head_backward_s
    best = 0.0
    for k in range(p.pp):
        work = n_micro * per_layer_s * sum(layers[k]) + (n_micro * head_s if k == p.pp - 1
                                                         else 0.0)  # fmt: skip
        best = max(best, sum(f[:k]) + work + sum(b[:k]))
    return best + times.optimizer_s


def step_calls(m: Transformer, t: Training, p: Parallelism) -> int:
    """At least how many calls a step makes (each repetition counted, as a session records
    them), in closed form: every stage, replica, micro-batch and model chunk runs a forward
    and a backward pass, each one compute span and, with tensor parallelism, on each
    context-parallel rank, its layers' tensor-parallel calls (more: recomputation, buckets,
    copies, the optimizer).

    Raises
    ------
    LimitError
        Over :data:`~simcoll.core.limits.MAX_STEP_CALLS`, before any call is made.
    """
    n_micro = t.n_microbatches(p.dp)
    fsdp = p.is_fsdp and p.dp * p.cp > 1
    alike = _replicas_alike(p) if fsdp else _replicas_fold(p)  # one span for every replica
    passes = 2 * n_micro * p.virtual_stages * p.pp * (1 if alike else p.dp)
    layers = max(max(chunks) for chunks in chunk_layers(m, p))  # a bound where chunks differ
    tp_calls = 0 if p.tp == 1 else \
        p.cp * (2 if p.sequence_parallel else 1) * (1 if m.is_moe else 2) * layers  # fmt: skip
    spans = layers // p.fsdp_layers_per_unit if fsdp else 1
    calls = passes * (spans + tp_calls * (p.dp if alike else 1))  # alike: one op, dp calls
    if calls > MAX_STEP_CALLS:
        what = "a compute span" if spans == 1 else f"{spans} compute spans (FSDP units)"
        raise LimitError(f"training step: at least {calls} calls ({passes} passes: forward and "
                         f"backward x {n_micro} micro-batches x {p.virtual_stages} chunks x pp "
                         f"{p.pp} x dp {p.dp}{' at once' if alike else ''}; each {what} and "
                         f"{tp_calls} "
                         f"tensor-parallel calls), more than the {MAX_STEP_CALLS} (2^24) a step "
                         "simulates; use a smaller global_batch_size or fewer layers")  # fmt: skip
    return calls


def fsdp_groups(
    group: Sequence[int], shard_size: int
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """(shard groups, replicate groups) of one data-parallel group under FSDP's hybrid
    sharding (a 2-D device mesh, replicas x shards): consecutive blocks of ``shard_size``
    ranks shard the state, and the ranks at one place in every block hold the same shard.

    >>> fsdp_groups((0, 1, 2, 3, 4, 5), 3)
    ([(0, 1, 2), (3, 4, 5)], [(0, 3), (1, 4), (2, 5)])
    """
    shards = [tuple(group[i : i + shard_size]) for i in range(0, len(group), shard_size)]
    return shards, [tuple(block[i] for block in shards) for i in range(shard_size)]


def _replicas_alike(p: Parallelism) -> bool:
    """Whether every FSDP replica's compute waits for the same ops: one stage, no context
    or expert calls of its own, and one group's gathers. Then one compute op over every
    replica, and each tensor-parallel call as one op over every replica's group
    (:meth:`~simcoll.prediction.session.Session.collectives`), run exactly as one per
    replica do where the replicas' calls take the same time (servers of one shape), at
    ``1 / dp`` of the ops; where they differ, every replica waits for the slowest, as the
    next unit's gathers make it wait anyway."""
    return (p.pp, p.cp, p.ep) == (1, 1, 1) and p.fsdp_sharding != "hybrid_shard"


def _replicas_fold(p: Parallelism) -> bool:
    """Whether, without FSDP, every data-parallel replica's passes run as one set of ops:
    one compute op over every replica's GPUs of a stage, each tensor-parallel call as one
    op over every replica's group, and each pipeline copy as one op of every replica's
    pairs. The replicas run the same passes, wait for the same gradient calls and differ
    only in their GPUs, so where their calls and copies take the same time (servers of one
    shape, routes alike) this is the step one set of ops per replica gives, at ``1 / dp``
    of the ops; where they differ, every replica waits for the slowest, as the gradient
    calls at the step's end make them wait anyway. Context and expert parallelism keep
    one set per replica (their calls span replicas)."""
    return p.dp > 1 and (p.cp, p.ep) == (1, 1)


def _multiple(size_bytes: float, of: int) -> int:
    """``size_bytes`` rounded up to a whole multiple of ``of`` (padding, as FSDP pads)."""
    whole = max(1, -(-int(size_bytes) // of))
    return whole * of


class _Builder:
    """Records one step in a session (see the module docstring)."""

    def __init__(  # noqa: PLR0917 - the step's facts
        self,
        s: Session,
        m: Transformer,
        t: Training,
        p: Parallelism,
        times: StepTimes,
        algorithm: str | None,
    ) -> None:
        self.s, self.m, self.t, self.p, self.times = s, m, t, p, times
        self.algorithm = algorithm
        self.lay = Layout(p)
        self.n_micro = t.n_microbatches(p.dp)
        self.chunk_layers = chunk_layers(m, p)  # per stage: each of its chunks' layers
        tokens = t.micro_batch_size * t.seq_length // p.cp
        self.act_bytes = tokens * m.hidden_size * 2  # one micro-batch's hidden states
        # what each tensor-parallel call moves: the activations, gathered in FP8 (1 byte)
        # where torchao's float8 tensor parallelism casts before the all-gather
        # PyTorch's async TP (with sequence parallelism: it fuses no all-reduce)
        self.fused = p.tp > 1 and p.tp_comm_overlap and p.tp_comm_overlap_impl == "async_tp" \
            and p.sequence_parallel  # fmt: skip
        if self.fused and not times.tp_site_forward_s:
            raise ConfigError("parallelism: tp_comm_overlap_impl async_tp needs each fused "
                              "GEMM's time, which the given step times lack "
                              "(StepTimes.tp_site_forward_s)")  # fmt: skip
        fp8_gathers = p.tp_fp8_all_gather and t.precision == "fp8"
        self.tp_bytes = {"allgather": self.act_bytes // (2 if fp8_gathers else 1),
                         "reducescatter": self.act_bytes, "allreduce": self.act_bytes}  # fmt: skip
        local = tokens // p.tp if p.sequence_parallel else tokens
        routed = local * m.top_k * m.capacity_factor * m.hidden_size * 2
        self.a2a_bytes = _multiple(routed, 2 * p.ep)
        self.kv_bytes = _multiple(2 * tokens * m.kv_size * 2 / p.tp, 2)
        self.layer_dense, self.layer_expert = layer_params_per_gpu(m, p)
        self.vocab_params = m.vocab_size * m.hidden_size / p.tp
        self.tail: dict[tuple[int, int], list[Op]] = {}  # (dp, pp): the last pass's ops
        self.inbox: dict[tuple[str, int, int, int, int], Op] = {}  # the copy in
        self.dp_ops: dict[int, list[Op]] = {}  # per rank: its gradient calls
        self.notes: list[str] = []
        # FSDP: each stage's units, groups, root unit, and what its hooks last saw
        self.fsdp = p.is_fsdp and p.dp * p.cp > 1
        self.unit_params = p.fsdp_layers_per_unit * (self.layer_dense + self.layer_expert)
        self.root_params = [root_params_per_gpu(m, p, stage) for stage in range(p.pp)]
        self.root_held: dict[int, dict[int, list[Op]]] = {i: {} for i in range(p.pp)}
        self.in_flight = dict.fromkeys(range(p.pp), 0)  # micro-batches on a stage
        self.executions: dict[int, list[list[Op]]] = {i: [] for i in range(p.pp)}
        self.replica_of = {r: d for d in range(p.dp) for i in range(p.pp)
                           for r in self.lay.stage(dp=d, pp=i)}  # fmt: skip
        shard = p.shard_degree if p.fsdp_sharding != "no_shard" else p.dp * p.cp
        split = [[fsdp_groups(self.lay.dp_group(tp=t, pp=i), shard) for t in range(p.tp)]
                 for i in range(p.pp)]  # fmt: skip
        self.shard_groups = [[groups for groups, _ in stage] for stage in split]
        self.replicate_groups = [[groups for _, groups in stage] for stage in split]
        self.alike = _replicas_alike(p)
        # without FSDP, every replica's passes as one set of ops (see _replicas_fold)
        self.fold = not self.fsdp and _replicas_fold(p)
        self.stage_ranks = [tuple(r for d in range(p.dp) for r in self.lay.stage(dp=d, pp=i))
                            for i in range(p.pp)]  # fmt: skip
        self.ranks = self.stage_ranks[0]

    # -- the calls of one pass -----------------------------------------------------------

    def _tp_calls(self, n_layers: int, phase: str) -> list[tuple[str, int]]:
        """(collective, repeat) of ``n_layers`` layers' tensor-parallel calls in a pass.

        A full recomputation issues the forward's again in the backward; under PyTorch's
        early stop the last reduction of a dense layer (after the MLP's down projection)
        is not re-run (:meth:`_calls`), where its gathers, each before a
        GEMM, are. (Under PyTorch's async TP with sequence parallelism the calls are
        :meth:`_fused_sites`.)"""
        p = self.p
        if p.tp == 1:
            return []
        per_layer = 1 if self.m.is_moe else 2  # the attention's, and the dense MLP's
        last = self._reduction_ends_layer
        if p.sequence_parallel:
            reductions = self._calls(per_layer, phase, n_layers, ends_layer=last, saved=True)
            gathers = self._calls(per_layer, phase, n_layers, ends_layer=False)
            return [("allgather", gathers), ("reducescatter", reductions)]
        return [("allreduce", self._calls(per_layer, phase, n_layers, ends_layer=last))]

    @property
    def _reduction_ends_layer(self) -> bool:
        """Whether a layer's last tensor-parallel reduction follows its last GEMM, which
        PyTorch's early stop does not re-run: a mixture of experts' last GEMM (the
        experts') is followed by the combine, not by a tensor-parallel call; under FP8 the
        MLP's reduction runs inside te.Linear's autograd Function, which saves (and so
        stops) only once it has run."""
        return not self.m.is_moe and self.t.precision != "fp8"

    def _calls(self, per_layer: int, phase: str, n_layers: int, *, ends_layer: bool,
               saved: bool = False) -> int:  # fmt: skip
        """``n_layers`` layers' calls of a kind issued ``per_layer`` times in a layer's
        forward, with those the backward's recomputation issues again: all under a full
        one; under PyTorch's early stop (``recompute_early_stop``) all but the last where
        that one follows the layer's last GEMM (``ends_layer``: the dense MLP's reduction,
        the experts' combine), which is not re-run; under ``sac_op`` none of a kind whose
        output the policy saves (``saved``: ``reduce_scatter_tensor``); under
        ``sac_layer`` those of every second layer."""
        t = self.t
        again = 0
        if (
            phase == BACKWARD
            and t.recompute in CHECKPOINTED
            and not (saved and t.recompute == "sac_op")
        ):
            again = per_layer - 1 if t.recompute_early_stop and ends_layer else per_layer
        return per_layer * n_layers + round(again * recomputed_share(self.m, t) * n_layers)

    def _pass(self, d: int, pp: int, phase: str, chunk: int, j: int,  # noqa: PLR0917
              after: list[Op], n_layers: int, compute_s: float) -> list[Op]:  # fmt: skip
        """A stage's pass (or part of one) on replica ``d``: compute, then its calls."""
        s, lay, p = self.s, self.lay, self.p
        name = f"{phase} c{chunk} mb{j}"
        groups = [[lay.tp_group(dp=d, pp=pp, cp=c)] for c in range(p.cp)]
        ops = self._work(lay.stage(dp=d, pp=pp), compute_s, name, after, groups, n_layers,
                         phase)  # fmt: skip
        if p.cp > 1:
            k = n_layers * (p.cp - 1) * (2 if phase == BACKWARD else 1)
            for tp in range(p.tp):
                ops.append(s.collective("sendrecv", self.kv_bytes,
                                        lay.cp_group(tp=tp, dp=d, pp=pp),
                                        algorithm=self.algorithm, stream="cp",
                                        name=f"cp ring {name}", after=after, repeat=k))  # fmt: skip
        return ops

    def _pass_all(self, pp: int, phase: str, name: str, after: list[Op],  # noqa: PLR0917
                  n_layers: int, compute_s: float) -> list[Op]:  # fmt: skip
        """A stage's pass on every replica at once (they run alike): one compute op, then
        each tensor-parallel call as one op over every replica's group."""
        groups = [self.lay.tp_group(dp=d, pp=pp, cp=0) for d in range(self.p.dp)]
        return self._work(self.stage_ranks[pp], compute_s, name, after, [groups], n_layers,
                          phase)  # fmt: skip

    def _work(self, ranks: tuple[int, ...], compute_s: float, name: str,  # noqa: PLR0917
              after: list[Op], group_sets: list[list[tuple[int, ...]]], n_layers: int,
              phase: str) -> list[Op]:  # fmt: skip
        """A pass's compute on ``ranks`` and its tensor-parallel calls, each call one op
        per entry of ``group_sets`` (one replica's group per context-parallel rank, or
        every replica's at once); the compute op first."""
        if self.fused:
            return self._fused_work(ranks, compute_s, name, after, group_sets, n_layers, phase)
        copies_s = sum(k * self._copy_s(kind) for kind, k in self._tp_calls(n_layers, phase))
        work = self.s.compute(ranks, compute_s + copies_s, name, after=after)
        ops = [work]
        for groups in group_sets:
            ops += self._tp_chain(groups, name, after, work, n_layers, phase)
        return ops

    def _copy_s(self, kind: str) -> float:
        """The ``torch.cat`` copy beside one unfused sequence-parallel call of ``kind``
        (:attr:`StepTimes.tp_copy_s`, of 16-bit activations; none for an all-reduce)."""
        if kind == "allreduce":
            return 0.0
        return self.times.tp_copy_s * self.tp_bytes[kind] / self.act_bytes

    def _fused_work(self, ranks: tuple[int, ...], compute_s: float, name: str,  # noqa: PLR0917
                    after: list[Op], group_sets: list[list[tuple[int, ...]]], n_layers: int,
                    phase: str) -> list[Op]:  # fmt: skip
        """A pass under PyTorch's async TP: the compute beside no tensor-parallel call
        (the attention, with a context-parallel ring beside it, the norms...); then each
        fused call beside its own GEMMs only (:meth:`_fused_sites`), one site after
        another, so that a call longer than its GEMMs shows, however much other compute
        the pass has; then the unfused calls. The compute op that ends the pass comes
        first.

        A fused call runs its GEMM in ``tp`` pieces, one per shard, pipelined with the
        shards' copies: one piece has no copy beside it (the local shard's, first in an
        all-gather; the first produced, in a reduce-scatter, before anything is sent), so
        a site takes ``g / tp + max(g (1 - 1/tp), c)``; a reduce-scatter then sums the
        partials it pulled (:attr:`StepTimes.tp_reduce_s`)."""
        pairs, exposed = self._fused_sites(n_layers, phase)
        fused_s = sum(gemm_s for _, _, gemm_s, _ in pairs)
        copies_s = sum(k * self._copy_s(kind) for kind, k in exposed)  # the unfused calls'
        sums_s = (sum(k for kind, k, _, _ in pairs if kind == "reducescatter")
                  * self.times.tp_reduce_s)  # fmt: skip
        last = rest = self.s.compute(ranks, max(0.0, compute_s - fused_s) + copies_s + sums_s,
                                     name, after=after)  # fmt: skip
        waits, ops, tp = [rest], [], self.p.tp
        for kind, k, gemm_s, split_s in pairs:
            # the pass's share of the whole GEMMs' time, run as the pieces take it
            g = split_s * min(1.0, compute_s / gemm_s) if gemm_s > 0 else 0.0
            lead = self.s.compute(ranks, g / tp, name, after=waits)
            last = self.s.compute(ranks, g - g / tp, name, after=[lead])
            site = [lead, last]
            for groups in group_sets:
                site.append(self.s.collectives(kind, self.tp_bytes[kind], groups,
                                               algorithm=self.algorithm, stream="tp",
                                               name=f"tp {kind} {name}", after=[lead],
                                               repeat=k))  # fmt: skip
            ops += site
            waits = site[1:]
        for kind, k in exposed:
            waits = [self.s.collectives(kind, self.tp_bytes[kind], groups, algorithm=self.algorithm,
                                        stream="tp", name=f"tp {kind} {name}", after=waits,
                                        repeat=k)
                     for groups in group_sets]  # fmt: skip
            ops += waits
        return [last, *(op for op in [rest, *ops] if op is not last)]

    def _fused_sites(
        self, n_layers: int, phase: str
    ) -> tuple[list[tuple[str, int, float, float]], list[tuple[str, int]]]:
        """``n_layers`` layers' tensor-parallel calls under PyTorch's async TP (Inductor's
        ``micro_pipeline_tp`` pass, ``torch/_inductor/fx_passes/micro_pipeline_tp.py``):
        (collective, repeat, the whole GEMMs' seconds, the same GEMMs' in the fused op's
        row pieces) per site of :data:`TP_SITES`, and (collective, repeat) of those left
        exposed.

        It fuses an all-gather into the GEMMs that read its output
        (``fused_all_gather_matmul``) and a GEMM into the reduce-scatter of its output
        (``fused_matmul_reduce_scatter``). In the forward that is every call, each with
        its site's GEMM; a recomputation re-runs them beside what it re-runs of that GEMM
        (PyTorch's early stop skips the last reduction, ``sac_op`` saves every
        reduction's output). In the backward the
        gathers (the gradients of the forward's reductions) fuse into the data gradient
        of the GEMM they fed; the reductions (of the forward's gathers) reduce a sum of
        GEMMs' outputs (the query, key and value projections' input gradients; the gate
        and up projections'), which the pattern does not match: they stay exposed."""
        t, times = self.t, self.times
        n_sites = len(times.tp_site_forward_s)
        whole = (times.tp_site_forward_s, times.tp_site_dgrad_s, times.tp_site_recompute_s)
        forward_s, dgrad_s, recompute_s = (
            split or whole_s for whole_s, split in zip(whole, (
                times.tp_site_forward_split_s, times.tp_site_dgrad_split_s,
                times.tp_site_recompute_split_s), strict=True))  # fmt: skip
        forward = [(TP_SITES[i][0], times.tp_site_forward_s[i]) for i in range(n_sites)]
        if phase == FORWARD:
            return [(kind, n_layers, n_layers * g, n_layers * forward_s[i])
                    for i, (kind, g) in enumerate(forward)], []  # fmt: skip
        pairs = [("allgather", n_layers, n_layers * times.tp_site_dgrad_s[i],
                  n_layers * dgrad_s[i])
                 for i, (kind, _) in enumerate(forward) if kind == "reducescatter"]  # fmt: skip
        exposed = [("reducescatter", n_layers * (n_sites - len(pairs)))]
        for kind in ("allgather", "reducescatter"):  # the recomputation's, as _calls counts
            sites = [i for i, (k, _) in enumerate(forward) if k == kind]
            ends = kind == "reducescatter" and self._reduction_ends_layer
            total = self._calls(len(sites), BACKWARD, n_layers, ends_layer=ends,
                                saved=kind == "reducescatter") - len(sites) * n_layers  # fmt: skip
            if ends and t.recompute_early_stop:
                sites = sites[:-1]  # the MLP's, after the GEMM early stop does not re-run
            for j, i in enumerate(sites if total else []):  # beside what is re-run of its GEMM
                k = total // len(sites) + (j < total % len(sites))
                if k:
                    pairs.append((kind, k, k * times.tp_site_recompute_s[i],
                                  k * recompute_s[i]))  # fmt: skip
        return pairs, exposed

    def _tp_chain(self, groups: list[tuple[int, ...]], name: str, after: list[Op],  # noqa: PLR0917
                  work: Op, n_layers: int, phase: str) -> list[Op]:  # fmt: skip
        """A pass's tensor-parallel calls, one after another, each one op over ``groups``
        (one replica's group, or every replica's): after the pass's compute ``work``, or
        beside it from the pass's start (``after``) where Transformer Engine's userbuffers
        overlap them (PyTorch's async TP fuses no all-reduce, :meth:`_work`)."""
        p = self.p
        beside = p.tp_comm_overlap and p.tp_comm_overlap_impl == "userbuffers"
        waits, ops = after if beside else [work], []
        for kind, k in self._tp_calls(n_layers, phase):
            last = self.s.collectives(kind, self.tp_bytes[kind], groups, algorithm=self.algorithm,
                                      stream="tp", name=f"tp {kind} {name}", after=waits,
                                      repeat=k)  # fmt: skip
            waits = [last]
            ops.append(last)
        return ops

    def _ep_calls(self, pp: int, phase: str, works: dict[int, list[Op]], n_layers: int,
                  name: str) -> None:  # fmt: skip
        """Each expert-parallel group's all-to-alls, once its replicas' compute is done."""
        p, lay = self.p, self.lay
        k = self._calls(2, phase, n_layers, ends_layer=True)
        for block in range(p.dp // p.ep):
            members = range(block * p.ep, (block + 1) * p.ep)
            after = [op for d in members for op in works[d]]
            for c in range(p.cp):
                for tp in range(p.tp):
                    group = lay.ep_group(tp=tp, cp=c, pp=pp, block=block)
                    op = self.s.collective("alltoall", self.a2a_bytes, group,
                                           algorithm=self.algorithm, stream="ep",
                                           name=f"ep all-to-all {name}", after=after,
                                           repeat=k)  # fmt: skip
                    for d in members:
                        works[d].append(op)

    # -- a pass on every replica -----------------------------------------------------------

    def emit(self, pp: int, phase: str, chunk: int, j: int) -> None:
        """One (phase, chunk, micro-batch) of stage ``pp`` on every replica."""
        if self.fsdp:
            self._emit_fsdp(pp, phase, chunk, j)
            return
        p, times = self.p, self.times
        last_virtual = pp == p.pp - 1 and chunk == p.virtual_stages - 1
        per_layer = times.forward_s_per_layer if phase == FORWARD else times.backward_s_per_layer
        head_s = (times.head_forward_s if phase == FORWARD else times.head_backward_s) \
            if last_virtual else 0.0  # fmt: skip
        buckets = phase == BACKWARD and j == self.n_micro - 1 and p.dp * p.cp > 1  # fmt: skip
        layers = self.chunk_layers[pp][chunk]
        pieces = [1] * layers if buckets and p.overlap_grad_reduce else [layers]
        inputs = {d: self._inputs(d, pp, phase, chunk, j) for d in range(p.dp)}
        pending = 0.0  # gradient bytes per GPU not yet in a bucket
        for index, n_layers in enumerate(pieces):
            works: dict[int, list[Op]] = {}
            extra = head_s if (index == 0 and phase == BACKWARD) or \
                (index == len(pieces) - 1 and phase == FORWARD) else 0.0  # fmt: skip
            if self.fold:  # every replica's pass as one: the same waits, the same times
                after = inputs[0] if index == 0 else self.tail[0, pp]
                works = dict.fromkeys(range(p.dp), self._pass_all(
                    pp, phase, f"{phase} c{chunk} mb{j}", list(dict.fromkeys(after)), n_layers,
                    per_layer * n_layers + extra))  # fmt: skip
            for d in range(p.dp if self.fold else 0, p.dp):  # one pass per replica
                after = inputs[d] if index == 0 else self.tail[d, pp]
                works[d] = self._pass(d, pp, phase, chunk, j, after, n_layers,
                                      per_layer * n_layers + extra)  # fmt: skip
            if self.m.is_moe and p.ep > 1:
                self._ep_calls(pp, phase, works, n_layers, f"{phase} c{chunk} mb{j}")
            for d in range(p.dp):
                self.tail[d, pp] = works[d]
            if buckets:
                pending += n_layers * self.layer_dense * GRAD_BYTES
                first_chunk = pp == 0 and chunk == 0  # the embedding; the last, the output
                if index == len(pieces) - 1:
                    pending += (first_chunk + last_virtual) * self.vocab_params * GRAD_BYTES
                if pending >= p.bucket_bytes or index == len(pieces) - 1:
                    self._reduce_grads(pp, pending, f"c{chunk} bucket {index}")
                    pending = 0.0
                if index == len(pieces) - 1 and self.layer_expert:
                    self._reduce_expert_grads(pp, chunk)
        self._send(pp, phase, chunk, j)

    def _inputs(self, d: int, pp: int, phase: str, chunk: int, j: int) -> list[Op]:
        after = list(self.tail.get((d, pp), []))
        if (phase, d, pp, chunk, j) in self.inbox:
            after.append(self.inbox[phase, d, pp, chunk, j])
        return after

    def _send(self, pp: int, phase: str, chunk: int, j: int) -> None:
        """The pass's output to the next virtual stage (forward) or the previous (backward)."""
        p, lay = self.p, self.lay
        if phase == FORWARD:
            to = (pp + 1, chunk) if pp < p.pp - 1 else (0, chunk + 1)
            if to[1] >= p.virtual_stages:
                return
        else:
            to = (pp - 1, chunk) if pp > 0 else (p.pp - 1, chunk - 1)
            if to[1] < 0:
                return
        if to[0] == pp:  # one stage: nothing to send
            for d in range(p.dp):
                self.inbox[phase, d, to[0], to[1], j] = self.tail[d, pp][0]
            return
        size = _multiple(self.act_bytes / p.tp, 2)
        replicas = [range(p.dp)] if self.fold else [[d] for d in range(p.dp)]
        for these in replicas:  # folded: every replica's copies as one op
            pairs = [(lay.rank(tp=t, cp=c, dp=d, pp=pp), lay.rank(tp=t, cp=c, dp=d, pp=to[0]))
                     for d in these for c in range(p.cp) for t in range(p.tp)]  # fmt: skip
            op = self.s.copies(pairs, size, stream=f"pp {pp}->{to[0]}",
                               name=f"pp {phase} c{chunk} mb{j}",
                               after=self.tail[these[0], pp])  # fmt: skip
            for d in these:
                self.inbox[phase, d, to[0], to[1], j] = op

    def _dp_call(self, kind: str, size: float, group: Sequence[int],  # noqa: PLR0917
                 after: list[Op], name: str, stream: str = "dp") -> Op:  # fmt: skip
        op = self.s.collective(kind, _multiple(size, 2 * len(group)) if kind != "allreduce"
                               else _multiple(size, 2), group, algorithm=self.algorithm,
                               stream=stream, name=name, after=after)  # fmt: skip
        for r in group:
            self.dp_ops.setdefault(r, []).append(op)
        return op

    def _reduce_grads(self, pp: int, size: float, name: str) -> None:
        p, lay = self.p, self.lay
        after = [op for d in range(p.dp) for op in self.tail[d, pp]]
        kind = "allreduce" if p.zero_stage == 0 else "reducescatter"
        for t in range(p.tp):
            self._dp_call(kind, size, lay.dp_group(tp=t, pp=pp), after, f"dp {kind} {name}")

    def _reduce_expert_grads(self, pp: int, chunk: int) -> None:
        p, lay = self.p, self.lay
        if p.dp * p.cp // p.ep <= 1:
            return
        size = self.layer_expert * self.chunk_layers[pp][chunk] * GRAD_BYTES
        after = [op for d in range(p.dp) for op in self.tail[d, pp]]
        kind = "allreduce" if p.zero_stage == 0 else "reducescatter"
        for t in range(p.tp):
            for c in range(p.cp):
                for member in range(p.ep):
                    group = lay.expert_dp_group(tp=t, cp=c, pp=pp, member=member)
                    self._dp_call(kind, size, group, after, f"dp experts {kind} c{chunk}")

    # -- FSDP units (PyTorch's FullyShardedDataParallel) -----------------------------------

    def _fsdp_gather(self, pp: int, params: float, after: list[Op], name: str
                     ) -> dict[int, list[Op]]:  # fmt: skip
        """All-gather ``params`` parameters a GPU holds unsharded (2 bytes each) in every
        shard group of stage ``pp``: per replica, the gathers its GPUs wait for."""
        needs: dict[int, list[Op]] = {d: [] for d in range(self.p.dp)}
        for groups in self.shard_groups[pp]:
            for group in groups:
                op = self._dp_call("allgather", params * 2, group, after, name)
                for d in sorted({self.replica_of[r] for r in group}):
                    needs[d].append(op)
        return needs

    def _fsdp_reduce(self, pp: int, params: float, after: list[Op], name: str) -> None:
        """Reduce the gradients of ``params`` parameters (in the reduce dtype): all-reduce
        them (``no_shard``), or reduce-scatter them in every shard group and, with
        ``hybrid_shard``, all-reduce each shard over its replicas (their own process group:
        stream ``dp replicate``)."""
        p = self.p
        size = params * REDUCE_DTYPE_BYTES[p.fsdp_reduce_dtype]
        if p.fsdp_sharding == "no_shard":
            for t in range(p.tp):
                self._dp_call("allreduce", size, self.lay.dp_group(tp=t, pp=pp), after, name)
            return
        for t, groups in enumerate(self.shard_groups[pp]):
            scatters = [self._dp_call("reducescatter", size, g, after, name) for g in groups]
            shard = _multiple(size, 2 * len(groups[0])) // len(groups[0])
            for group in self.replicate_groups[pp][t] if len(groups) > 1 else []:
                self._dp_call("allreduce", shard, group, scatters, f"{name} replicas",
                              stream="dp replicate")  # fmt: skip

    def _fsdp_gradient(self, pp: int, params: float, after: list[Op], name: str
                       ) -> list[Op]:  # fmt: skip
        """The cast and division of ``params`` parameters' gradient before their reduction,
        on each replica's compute after ``after`` (the ops to reduce after)."""
        duration_s = params * self.times.fsdp_gradient_s_per_param
        if duration_s <= 0:
            return after
        label = f"fsdp gradient cast and divide {name}"
        if self.alike:
            return [self.s.compute(self.stage_ranks[pp], duration_s, label, after=after)]
        return [self.s.compute(self.lay.stage(dp=d, pp=pp), duration_s, label, after=after)
                for d in range(self.p.dp)]  # fmt: skip

    def _heads(self, pp: int, compute_s: float, name: str, after: dict[int, list[Op]]
               ) -> list[Op]:  # fmt: skip
        """The output layer's compute on each replica (one op where replicas are alike)."""
        if self.alike:
            op = self.s.compute(self.ranks, compute_s, name, after=after[0])
            return [op] * self.p.dp
        return [self.s.compute(self.lay.stage(dp=d, pp=pp), compute_s, name, after=after[d])
                for d in range(self.p.dp)]  # fmt: skip

    def _emit_fsdp(self, pp: int, phase: str, chunk: int, j: int) -> None:  # noqa: PLR0912, PLR0915 - a pass, unit by unit
        """One (phase, chunk, micro-batch) of stage ``pp`` on every replica, one FSDP unit
        at a time, each unit's gathers and reduce-scatter issued where FSDP's hooks issue
        them (see the module docstring)."""
        p, times = self.p, self.times
        forward = phase == FORWARD
        name = f"{phase} c{chunk} mb{j}"
        per_unit = p.fsdp_layers_per_unit
        n_units = self.chunk_layers[pp][chunk] // per_unit
        order = list(range(n_units)) if forward else list(range(n_units - 1, -1, -1))
        sharded = p.fsdp_sharding != "no_shard"
        regather = sharded and (forward or p.fsdp_sharding != "shard_grad_op")
        prefetch = p.fsdp_forward_prefetch if forward else \
            p.fsdp_backward_prefetch == "backward_pre"  # fmt: skip
        limit = p.fsdp_limit_all_gathers
        reducing = not forward and (not p.fsdp_no_sync or j == self.n_micro - 1)
        last_virtual = pp == p.pp - 1 and chunk == p.virtual_stages - 1
        owner = chunk == 0  # a micro-batch starts and ends on the stage with this chunk
        root = self.root_params[pp]
        done = self.executions[pp]  # the stage's last two computations (every replica's ops)

        def ended(back: int) -> list[Op]:
            return done[-back] if len(done) >= back else []

        def gather(k: int, after: list[Op]) -> dict[int, list[Op]]:
            return self._fsdp_gather(pp, self.unit_params, after,
                                     f"fsdp all-gather {name} u{order[k]}")  # fmt: skip

        def computed(ops: list[Op]) -> None:
            done.append(ops)
            del done[:-2]

        inputs = {d: self._inputs(d, pp, phase, chunk, j) for d in range(p.dp)}
        if not forward and last_virtual:  # the output layer's backward comes first
            heads = self._heads(pp, times.head_backward_s, f"head {name}", inputs)
            inputs = {d: [heads[d]] for d in range(p.dp)}
            computed(list(dict.fromkeys(heads)))
        # prefetched: issued as the computation before starts; otherwise as its own starts
        first_after = (ended(2) if limit else []) if prefetch else ended(1)
        if owner:
            self.in_flight[pp] += 1 if forward else -1
        if forward and owner and sharded and root and not self.root_held[pp]:
            self.root_held[pp] = self._fsdp_gather(pp, root, first_after,
                                                   f"fsdp all-gather {name} root")  # fmt: skip
        pending: dict[int, dict[int, list[Op]]] = {}  # by position in the pass: its gathers
        for k, unit in enumerate(order):
            if regather and k not in pending:  # not prefetched: issued in its pre-hook
                pending[k] = gather(k, first_after if k == 0 else ended(1))
            if regather and prefetch and k + 1 < n_units:  # forward / backward_pre prefetch
                pending[k + 1] = gather(k + 1, ended(1) if limit else [])
            waits: dict[int, list[Op]] = {}
            for d in range(p.dp):
                waits[d] = list(inputs[d] if k == 0 else self.tail[d, pp])
                waits[d] += pending[k][d] if regather else []
                if k == 0 and self.root_held[pp]:
                    waits[d] += self.root_held[pp][d]
            unit_s = (times.forward_s_per_layer if forward else times.backward_s_per_layer) \
                * per_unit  # fmt: skip
            if self.alike:  # one op for every replica: the same waits, the same times
                ops_all = self._pass_all(pp, phase, name, list(dict.fromkeys(waits[0])),
                                         per_unit, unit_s)  # fmt: skip
                works = dict.fromkeys(range(p.dp), ops_all)
            else:
                works = {d: self._pass(d, pp, phase, chunk, j, waits[d], per_unit, unit_s)
                         for d in range(p.dp)}  # fmt: skip
            if self.m.is_moe and p.ep > 1:
                self._ep_calls(pp, phase, works, per_unit, name)
            for d in range(p.dp):
                self.tail[d, pp] = works[d]
            ops = list(dict.fromkeys(op for d in range(p.dp) for op in works[d]))
            computed(ops)
            if forward:
                continue
            if regather and k + 1 < n_units and p.fsdp_backward_prefetch == "backward_post":
                pending[k + 1] = gather(k + 1, ops)  # in the post-hook, before the reduce
            if reducing:
                prepared = self._fsdp_gradient(pp, self.unit_params, ops, f"{name} u{unit}")
                self._fsdp_reduce(pp, self.unit_params, prepared,
                                  f"fsdp reduce-scatter {name} u{unit}")  # fmt: skip
        if forward and last_virtual:
            tails = {d: self.tail[d, pp] for d in range(p.dp)}
            heads = self._heads(pp, times.head_forward_s, f"head {name}", tails)
            for d in range(p.dp):
                self.tail[d, pp] = [heads[d]]
            computed(list(dict.fromkeys(heads)))
        if not forward and owner:
            if reducing and root:
                prepared = self._fsdp_gradient(pp, root, ended(1), f"{name} root")
                self._fsdp_reduce(pp, root, prepared, f"fsdp reduce-scatter {name} root")
            if not self.in_flight[pp]:
                self.root_held[pp] = {}
        self._send(pp, phase, chunk, j)

    def finish(self) -> None:
        """The optimizer on every stage once its gradients are in, then ZeRO-1/2's
        all-gather of the updated parameters."""
        p, lay, s = self.p, self.lay, self.s
        for pp in range(p.pp):
            steps = []
            for d in range(p.dp):
                ranks = lay.stage(dp=d, pp=pp)
                after = [op for r in ranks for op in self.dp_ops.get(r, [])]
                after += self.tail[d, pp]
                steps.append(s.compute(ranks, self.times.optimizer_s, "optimizer",
                                       after=list(dict.fromkeys(after))))  # fmt: skip
            if p.zero_stage in (1, 2) and not p.is_fsdp and p.dp * p.cp > 1:
                ends = (pp == 0) + (pp == p.pp - 1)  # the embedding, the output layer
                layers = sum(self.chunk_layers[pp])
                params = self.layer_dense * layers + ends * self.vocab_params
                for t in range(p.tp):
                    self._dp_call("allgather", params * 2, lay.dp_group(tp=t, pp=pp), steps,
                                  "dp all-gather params", stream="dp gather")  # fmt: skip

    def run_schedule(self) -> None:
        """Every stage's passes, each once its input exists (a topological order)."""
        p = self.p
        orders = [interleaved_order(stage=i, n_stages=p.pp, n_microbatches=self.n_micro,
                                    n_chunks=p.virtual_stages) for i in range(p.pp)]  # fmt: skip
        done = [0] * p.pp
        progress = True
        while progress:
            progress = False
            for i in range(p.pp):
                while done[i] < len(orders[i]):
                    phase, chunk, j = orders[i][done[i]]
                    if not self._ready(i, phase, chunk, j):
                        break
                    self.emit(i, phase, chunk, j)
                    done[i] += 1
                    progress = True
        if done != [len(o) for o in orders]:  # pragma: no cover - valid schedules finish
            raise SimulationError("training step: the pipeline stages wait for each other")
        self.finish()

    def _ready(self, pp: int, phase: str, chunk: int, j: int) -> bool:
        p = self.p
        first = pp == 0 and chunk == 0
        last = pp == p.pp - 1 and chunk == p.virtual_stages - 1
        if (phase == FORWARD and first) or (phase == BACKWARD and last):
            return True
        return (phase, 0, pp, chunk, j) in self.inbox


@gc_paused()
def training_step(
    topology: nx.DiGraph[str],
    model: Transformer,
    training: Training,
    parallelism: Parallelism,
    *,
    efficiency: Efficiency | None = None,
    times: StepTimes | None = None,
    algorithm: str | None = DEFAULTS.algorithm,
    protocol: str | None = DEFAULTS.protocol,
    calibration: Calibration | Literal["default"] | None = "default",
    memory_check: Literal["flag", "refuse"] = "flag",
    fidelity: str = DEFAULTS.model,
    load_bins: int = 0,
    transfers: bool = False,
) -> StepResult:
    """Simulate one training step (see the module docstring) on every GPU of ``topology``.

    ``times`` replaces the roofline's compute times with measured ones; without it, the
    topology file must give its GPUs' ``[gpu]`` table. ``memory_check="refuse"`` raises
    where the most loaded stage's GPU would not hold its state and activations; ``"flag"``
    reports ``fits_in_memory`` 0 in the metrics. ``fidelity`` is the session's model
    (``flow``, or ``ideal``: no contention); ``transfers`` keeps every transfer in the
    timeline (off: a large step makes millions). Python's cyclic collector is paused
    while it runs (:mod:`simcoll.core.pauses`).

    Returns
    -------
    StepResult
        Its metrics: ``time_s`` (the step), ``tokens_per_s``, ``mfu`` (model FLOPs,
        :func:`~simcoll.training.flops.model_flops_per_token`, over the GPUs' dense
        peak), ``recomputed_fraction`` (the share of a layer's forward FLOPs its backward
        runs again: HFU is MFU x (1 + that / 3)), per-GPU ``memory_*_bytes`` and
        ``fits_in_memory``, ``n_microbatches``, and the breakdown of the first GPU's step
        (rank 0, on the first stage): its ``compute_s``, the communication of each
        dimension not hidden behind its compute (``exposed_tp_s``, ``exposed_ep_s``,
        ``exposed_cp_s``, ``exposed_pp_s``, ``exposed_dp_s``) and ``idle_s`` (the
        pipeline bubble and other waits).
    """
    s = Session(topology, model=fidelity, protocol=protocol, calibration=calibration,
                sm_sharing=times is None)  # fmt: skip
    p = parallelism.with_gpus(s.n_ranks)
    if p.is_fsdp and p.fsdp_sharding == "hybrid_shard" and not p.fsdp_shard_size:
        group = Layout(p).dp_group(tp=0, pp=0)
        hosts = [s.topology.nodes[s.rank_nodes[r]].get("host") for r in group]
        p = replace(p, fsdp_shard_size=hosts.count(hosts[0]))  # those on one node
    _check_shapes(model, training, p)
    step_calls(model, training, p)  # refused here, before any list of them is built
    gpu = gpu_spec(topology)
    if times is None:
        if gpu is None:
            raise ConfigError("a training step needs the GPU's peak FLOP/s and memory: add a "
                              "[gpu] table (topologies/README.md) or give measured times",
                              source=topology.graph.get("source"), field="gpu")  # fmt: skip
        times = step_times(model, training, p, gpu, efficiency or Efficiency())
    memory = memory_per_gpu(model, training, p)
    capacity = gpu.memory_bytes if gpu is not None else float("inf")
    if memory_check == "refuse":  # before any call is decided, then with NCCL's buffers
        _fits(memory, capacity, p)
    builder = _Builder(s, model, training, p, times, algorithm)
    builder.run_schedule()
    binding_rank = Layout(p).stage(dp=0, pp=memory.stage)[0]
    memory = replace(memory, comm_buffers_bytes=nccl_buffer_bytes(
        s.channels_of(binding_rank).values()))  # fmt: skip
    if memory_check == "refuse":
        _fits(memory, capacity, p)
    timeline = s.run(load_bins=load_bins, transfers=transfers)
    step_s = timeline.time_s
    flops = model_flops_per_token(model, training.seq_length) * training.tokens_per_step
    peak = gpu.peak(training.precision) if gpu is not None else float("nan")
    metrics: dict[str, float] = {
        "time_s": step_s,
        "tokens_per_s": training.tokens_per_step / step_s if step_s else float("nan"),
        "mfu": flops / (step_s * s.n_ranks * peak) if step_s else float("nan"),
        "model_flops_per_step": float(flops),
        "recomputed_fraction": _recomputed_fraction(model, training, p),
        "n_gpus": s.n_ranks,
        "tp": p.tp, "pp": p.pp, "dp": p.dp, "ep": p.ep, "cp": p.cp,
        "n_microbatches": builder.n_micro,
        "params": float(matmul_params(model, active=False)),
        "memory_params_bytes": memory.params_bytes,
        "memory_gradients_bytes": memory.gradients_bytes,
        "memory_optimizer_bytes": memory.optimizer_bytes,
        "memory_activations_bytes": memory.activations_bytes,
        "memory_gathered_params_bytes": memory.gathered_params_bytes,
        "memory_unsharded_gradients_bytes": memory.unsharded_gradients_bytes,
        "memory_logits_bytes": memory.logits_bytes,
        "memory_comm_buffers_bytes": memory.comm_buffers_bytes,
        "memory_stage": memory.stage,
        "memory_total_bytes": memory.total_bytes,
        "memory_capacity_bytes": capacity,
        "fits_in_memory": float(memory.total_bytes <= capacity),
        **breakdown(timeline, 0),
    }  # fmt: skip
    return StepResult(timeline, metrics, memory, p)


def _fits(memory: MemoryPerGpu, capacity_bytes: float, p: Parallelism) -> None:
    """Refuse, naming the parts, a GPU whose memory exceeds its capacity."""
    if memory.total_bytes <= capacity_bytes:
        return
    words = {name: name.replace("params", "parameters").replace("_", " ")
             for name in memory.parts}  # fmt: skip
    parts = ", ".join(f"{words[name]} {size / 1e9:.1f}"
                      for name, size in memory.parts.items() if size)  # fmt: skip
    where = f" of pipeline stage {memory.stage}" if p.pp > 1 else ""
    raise ConfigError(f"training step: {memory.total_bytes / 1e9:.1f} GB per GPU{where} "
                      f"({parts}; the largest: {words[memory.largest_part]}) do not fit in "
                      f"{capacity_bytes / 1e9:.0f} GB")  # fmt: skip


def breakdown(timeline: Timeline, rank: int) -> dict[str, float]:
    """Where one GPU's step went: compute, each dimension's exposed communication (its
    calls' time not under compute nor under an earlier dimension's, in the order tp, ep,
    cp, pp, dp) and idle (the rest: the bubble, waiting for other GPUs)."""
    spans = timeline.spans_of(rank)
    covered = [(x.start_s, x.end_s) for x in spans if x.stream == COMPUTE]
    out = {"compute_s": union_s(covered)}
    for dim in ("tp", "ep", "cp", "pp", "dp"):
        mine = [(x.start_s, x.end_s) for x in spans
                if x.stream == dim or x.stream.startswith(dim + " ")]  # fmt: skip
        out[f"exposed_{dim}_s"] = max(0.0, union_s(mine) - overlap_s(mine, covered))
        covered += mine
    out["idle_s"] = max(0.0, timeline.time_s - sum(out.values()))
    return out
