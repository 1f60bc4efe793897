"""FLOPs and memory traffic of a transformer's ops, per micro-batch on one GPU.

Two counts are kept apart:

*Model FLOPs* (:func:`model_flops_per_token`) are the convention MFU is reported in
(Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters",
eq. 3; Chowdhery et al. 2022, PaLM, appendix B): ``6 N + 12 L h s`` per token for training,
N the parameters of the matrix multiplications (the output layer included, the input
embedding's lookup not), the attention's two ``s x s`` products counted in full.

*Executed ops* (:func:`layer_ops`, :func:`head_ops`) are what one GPU runs for one
micro-batch: each op's FLOPs and bytes after tensor, sequence, context and expert
parallelism split it, with causal attention computing half of its square under
FlashAttention (which skips the masked blocks; an unfused kernel computes, writes and
reads back every score) and a mixture of experts computing ``capacity_factor`` times its
even share. Their time is a roofline (:mod:`simcoll.training.compute`).

GPT-3 175B (Brown et al. 2020, table 2.1), by the formula written out by hand:

>>> from simcoll.training.spec import Transformer
>>> gpt3 = Transformer("gpt3", n_layers=96, hidden_size=12288, ffn_hidden_size=49152,
...                    n_heads=96, vocab_size=50257, gated_mlp=False)
>>> h, L, s, V = 12288, 96, 2048, 50257
>>> n = L * 12 * h * h + V * h
>>> model_flops_per_token(gpt3, s) == 6 * n + 12 * L * h * s
True
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simcoll.training.attention import AttentionShape
from simcoll.training.gemm import GemmShape
from simcoll.training.spec import Parallelism, Training, Transformer

__all__ = [
    "OP_CLASSES",
    "ComputeOp",
    "backward_ops",
    "head_ops",
    "layer_ops",
    "matmul_params",
    "model_flops_per_token",
    "n_params",
    "recomputed_ops",
    "recomputed_share",
    "row_pieces",
    "saved_matmul_columns",
    "separate_gemms",
]

#: What a compute op is, for its efficiency: a matrix multiplication, the attention's
#: fused kernel, a memory-bound elementwise op (norms, activations, residuals), the
#: optimizer's update.
OP_CLASSES = ("gemm", "attention", "elementwise", "optimizer")
ACTIVATION_BYTES = 2  # activations and gradients are bf16/fp16 in mixed precision


@dataclass(frozen=True)
class ComputeOp:
    """One op on one GPU: its class, FLOPs, and bytes read and written in GPU memory; a
    GEMM also its shape, a fused attention its shape and kernel, so that its time can come
    from measured throughput (:mod:`simcoll.training.compute`)."""

    name: str
    op_class: str
    flops: float
    memory_bytes: float
    gemm: GemmShape | None = None
    attention: AttentionShape | None = None
    kernel: str = ""  # a fused attention's kernel (ATTENTION_KERNELS); "" for unfused
    pass_: str = "forward"
    # a GEMM standing for several matmuls of one input, their output columns in call
    # order (torchtitan's wq, wk, wv; w1, w3); () for one
    matmuls: tuple[float, ...] = ()
    # the GEMMs it runs one after another where its matmuls run apart (torchtitan's
    # separate nn.Linear modules, Training.separate_projections); () for its one ``gemm``
    gemms: tuple[GemmShape, ...] = ()


def _attention_params(m: Transformer) -> int:
    h = m.hidden_size
    return h * (h + 2 * m.kv_size) + h * h


def _mlp_params(m: Transformer) -> int:
    return (3 if m.gated_mlp else 2) * m.hidden_size * m.ffn_hidden_size


def matmul_params(m: Transformer, *, active: bool = True) -> int:
    """Parameters in matrix multiplications: every layer's attention, MLP (``top_k``
    experts where ``active``, all of them otherwise) and router, and the output layer."""
    experts = (m.top_k if active else m.n_experts) if m.is_moe else 1
    router = m.hidden_size * m.n_experts
    per_layer = _attention_params(m) + experts * _mlp_params(m) + router
    return m.n_layers * per_layer + m.vocab_size * m.hidden_size


def n_params(m: Transformer) -> int:
    """Every parameter: the matrix multiplications (all experts), two norms per layer and
    the final one, and the input embedding (shared with the output layer where tied)."""
    norms = (2 * m.n_layers + 1) * m.hidden_size
    embedding = 0 if m.tied_embeddings else m.vocab_size * m.hidden_size
    return matmul_params(m, active=False) + norms + embedding


def model_flops_per_token(m: Transformer, seq_length: int) -> int:
    """Training FLOPs per token by the MFU convention: ``6 N + 12 L h s`` (N: the active
    matrix-multiplication parameters, :func:`matmul_params`)."""
    return 6 * matmul_params(m) + 12 * m.n_layers * m.hidden_size * seq_length


#: Transformer Engine's cast of a 16-bit tensor to FP8 with its transpose: read 2 bytes,
#: write 1 + 1, per element (``fp8_cast_transpose``).
FP8_CAST = "fp8_cast"
FP8_CAST_BYTES = 4


def _gemm(name: str, tokens: float, k: float, n: float, element_bytes: float, *,
          batch: float = 1) -> ComputeOp:  # fmt: skip
    """``batch`` products ``[tokens x k] @ [k x n]``: 2 batch tokens k n FLOPs; the inputs
    and the output once."""
    shape = GemmShape(batch, tokens, n, k)
    return ComputeOp(name, "gemm", float(shape.flops),
                     shape.memory_bytes(element_bytes, ACTIVATION_BYTES), gemm=shape)  # fmt: skip


def row_pieces(op: ComputeOp, n_pieces: int, element_bytes: float) -> list[ComputeOp]:
    """``op``'s GEMM as PyTorch's async TP runs it: ``n_pieces`` GEMMs of ``m / n_pieces``
    rows each (one per shard of the gathered or scattered activations), each of the
    GEMMs it runs apart (:attr:`ComputeOp.gemms`: torchtitan's ``wq``, ``wk``, ``wv``)
    apart. Both fused ops call ``mm`` once per shard and weight
    (``_fused_all_gather_matmul_impl``'s consumer loops over ``Bs``;
    ``_fused_matmul_reduce_scatter_impl`` chunks ``A`` by rows,
    ``torch/distributed/_symmetric_memory/__init__.py``), so each piece runs at the
    throughput of its own, smaller shape and reads its weight again. ``element_bytes``:
    the inputs' bytes (1 under FP8's ``_scaled_mm``), the output's are 16-bit.

    >>> qkv = replace(_gemm("qkv", 8192, 4096, 768, 2), gemms=tuple(
    ...     GemmShape(1, 8192, n, 4096) for n in (512, 128, 128)))
    >>> [(p.gemm.m, p.gemm.n, p.gemm.k) for p in row_pieces(qkv, 8, 2)][:4]
    [(1024.0, 512, 4096), (1024.0, 128, 4096), (1024.0, 128, 4096), (1024.0, 512, 4096)]
    >>> pieces = row_pieces(qkv, 8, 2)
    >>> len(pieces), sum(p.flops for p in pieces) == qkv.flops
    (24, True)
    >>> extra = 2 * (2 * 8192 * 4096 + 7 * 4096 * 768)  # the input twice more, weights 7 times
    >>> sum(p.memory_bytes for p in pieces) - qkv.memory_bytes == extra
    True
    """
    if op.gemm is None:
        raise ValueError(f"row_pieces: {op.name} is not a GEMM")
    out = []
    for _ in range(n_pieces):
        for g in op.gemms or (op.gemm,):
            shape = GemmShape(g.b, g.m / n_pieces, g.n, g.k)
            out.append(replace(op, flops=float(shape.flops), gemm=shape, matmuls=(), gemms=(),
                               memory_bytes=shape.memory_bytes(element_bytes,
                                                               ACTIVATION_BYTES)))  # fmt: skip
    return out


def separate_gemms(op: ComputeOp) -> list[ComputeOp]:
    """``op`` as the GEMMs it runs (:attr:`ComputeOp.gemms`, each with its share of the
    op's traffic by FLOPs), or ``[op]`` where it runs one."""
    if not op.gemms:
        return [op]
    return [replace(op, gemm=g, gemms=(), matmuls=(), flops=float(g.flops),
                    memory_bytes=op.memory_bytes * g.flops / op.flops)
            for g in op.gemms]  # fmt: skip


def backward_ops(forward: list[ComputeOp]) -> list[ComputeOp]:
    """The backward of a forward's ops, in reverse order: a GEMM ``[m x k] @ [k x n]``
    becomes its data gradient ``[m x n] @ [n x k]`` and its weight gradient
    ``[k x m] @ [m x n]``; a fused attention its backward kernel (2.5 times the forward's
    FLOPs by FlashAttention's convention, the scores recomputed); an elementwise op twice
    the forward's FLOPs and traffic (the gradient in, the saved input, the gradient out).

    >>> up = _gemm("up", 4096, 1024, 2048, 2)
    >>> [(o.name, o.gemm) for o in backward_ops([up])]  # doctest: +NORMALIZE_WHITESPACE
    [('up dgrad', GemmShape(b=1, m=4096, n=1024, k=2048)),
     ('up wgrad', GemmShape(b=1, m=1024, n=2048, k=4096))]
    """
    ops: list[ComputeOp] = []
    for op in reversed(forward):
        if op.kernel == FP8_CAST and op.gemm is not None:  # the output gradient's cast
            out = op.gemm.b * op.gemm.m * op.gemm.n
            ops.append(replace(op, name=f"{op.name} grad", flops=float(out),
                               memory_bytes=FP8_CAST_BYTES * out, pass_="backward"))  # fmt: skip
        elif op.gemm is not None:  # gradients in 16 bits
            g = op.gemm
            for name, shape, apart in (
                (f"{op.name} dgrad", GemmShape(g.b, g.m, g.k, g.n),
                 tuple(GemmShape(s.b, s.m, s.k, s.n) for s in op.gemms)),
                (f"{op.name} wgrad", GemmShape(g.b, g.k, g.n, g.m),
                 tuple(GemmShape(s.b, s.k, s.n, s.m) for s in op.gemms)),
            ):  # fmt: skip
                traffic = shape.memory_bytes(ACTIVATION_BYTES, ACTIVATION_BYTES)
                ops.append(replace(op, name=name, flops=float(shape.flops), gemm=shape,
                                   gemms=apart, memory_bytes=traffic,
                                   pass_="backward"))  # fmt: skip
        elif op.attention is not None and op.kernel:
            ops.append(replace(op, flops=2.5 * op.flops, memory_bytes=2 * op.memory_bytes,
                               pass_="backward"))  # fmt: skip
        else:
            ops.append(replace(op, flops=2 * op.flops, memory_bytes=2 * op.memory_bytes,
                               pass_="backward"))  # fmt: skip
    return ops


def layer_ops(m: Transformer, t: Training, p: Parallelism) -> list[ComputeOp]:
    """One layer's forward on one GPU for one micro-batch, in order.

    The GEMMs see the whole (context-parallel share of the) sequence, their weights split
    over ``tp``; norms, residuals and dropout see ``1/tp`` of the tokens where sequence
    parallelism splits them. A mixture of experts routes every token to ``top_k`` experts
    over ``ep`` GPUs (each GPU computes ``top_k x capacity_factor`` times its own tokens).
    """
    e = {"fp8": 1}.get(t.precision, 2)
    h, f, kv = m.hidden_size, m.ffn_hidden_size, m.kv_size
    tokens = t.micro_batch_size * t.seq_length / p.cp
    tp = p.tp
    sp_tokens = tokens / tp if p.sequence_parallel else tokens
    a = ACTIVATION_BYTES
    ops = [
        ComputeOp("norm 1", "elementwise", 4 * sp_tokens * h, 2 * a * sp_tokens * h),
        _projections(
            _gemm("qkv", tokens, h, (h + 2 * kv) / tp, e),
            (h / tp, kv / tp, kv / tp),
            t.separate_projections,
        ),
        # q k^T and p v; FlashAttention skips the causal mask's blocks (half the square)
        # and keeps the scores on chip; an unfused kernel computes and stores them all
        ComputeOp(
            "attention",
            "attention",
            2 * 2 * tokens * t.seq_length * h / tp / (2 if t.flash_attention else 1),
            a * tokens * (2 * h + 2 * kv) / tp
            + (0 if t.flash_attention else 3 * a * tokens * t.seq_length * m.n_heads / tp),
            attention=AttentionShape(
                t.micro_batch_size,
                m.n_heads / tp,
                t.seq_length / p.cp,
                t.seq_length,
                m.head_dim,
                True,
            ),
            kernel=t.attention_kernel if t.flash_attention else "",
        ),
        _gemm("attention out", tokens, h / tp, h, e),
        ComputeOp("residual 1", "elementwise", sp_tokens * h, 3 * a * sp_tokens * h),
        ComputeOp("norm 2", "elementwise", 4 * sp_tokens * h, 2 * a * sp_tokens * h),
    ]
    up = (2 if m.gated_mlp else 1) * f
    if m.is_moe:
        routed = sp_tokens * m.top_k * m.capacity_factor  # tokens this GPU's experts compute
        local = max(1, m.n_experts // p.ep)
        ops += [
            _gemm("router", sp_tokens, h, m.n_experts, e),
            # grouped: each of the GPU's n_experts / ep experts its share of the tokens
            _gemm("experts up", routed / local, h, up, e, batch=local),
            ComputeOp("activation", "elementwise", 4 * routed * f, a * routed * (up + f)),
            _gemm("experts down", routed / local, f, h, e, batch=local),
        ]
    else:
        ops += [
            _projections(
                _gemm("mlp up", tokens, h, up / tp, e),
                (f / tp, f / tp) if m.gated_mlp else (),
                t.separate_projections,
            ),
            ComputeOp("activation", "elementwise", 4 * tokens * f / tp, a * tokens * (up + f) / tp),
            _gemm("mlp down", tokens, f / tp, h, e),
        ]
    ops.append(ComputeOp("residual 2", "elementwise", sp_tokens * h, 3 * a * sp_tokens * h))
    if t.eager_ops:
        ops = _eager(ops, t.eager_ops, tokens * (h + kv) / tp, gated=m.gated_mlp)
    return _with_fp8_casts(ops) if t.precision == "fp8" else ops


def _projections(op: ComputeOp, columns: tuple[float, ...], apart: bool) -> ComputeOp:
    """A GEMM of one input standing for matmuls of ``columns`` output columns each (the
    query, key and value projections; the gate and up projections), run as one GEMM
    (Megatron-Core's ``linear_qkv`` and ``linear_fc1``, MPT's ``Wqkv``) or, ``apart``,
    as one GEMM each (torchtitan's ``wq``, ``wk``, ``wv``, ``w1``, ``w3``: ``nn.Linear``
    modules of their own).

    >>> op = _projections(_gemm("qkv", 8, 4, 6, 2), (4, 1, 1), True)
    >>> op.matmuls, [(g.m, g.n, g.k) for g in op.gemms]
    ((4, 1, 1), [(8, 4, 4), (8, 1, 4), (8, 1, 4)])
    """
    assert op.gemm is not None
    g = op.gemm
    apart = apart and len(columns) > 1
    return replace(
        op,
        matmuls=columns,
        gemms=tuple(GemmShape(g.b, g.m, n, g.k) for n in columns) if apart else (),
    )


#: Bytes per element PyTorch eager moves for torchtitan's ``RMSNorm`` (``x.float()``
#: 2 + 4, ``pow(2)`` 4 + 4, ``mean`` 4, ``x * rsqrt`` 4 + 4, ``type_as`` 4 + 2, ``* weight``
#: 2 + 2; the per-row rsqrt is negligible) and ``apply_rotary_emb`` (``float()`` 2 + 4,
#: the complex product 4 + 4, ``type_as`` 4 + 2), where one fused kernel moves 2 + 2; and
#: per FFN element for ``silu(w1 x) * w3 x`` (``silu`` 2 + 2, the product 4 + 2, where
#: one kernel moves 4 + 2). torchtitan ``models/norms.py``, ``models/llama/model.py``.
EAGER_NORM_BYTES = 36
EAGER_ROTARY_BYTES = 20
EAGER_GATED_EXTRA_BYTES = 4


def _eager(ops: list[ComputeOp], eager: tuple[str, ...], rotated: float, *,
           gated: bool) -> list[ComputeOp]:  # fmt: skip
    """A layer's ops with those ``eager`` names at the bytes PyTorch eager moves for them:
    the norms (``"norm ..."``), the ``gated`` activation (a plain GELU is one kernel
    eager too), and the rotary embedding of its ``rotated`` query and key elements after
    the QKV projection (the fused count charges no rotary: one kernel's 4 bytes per
    element is about 1 % of a layer).

    >>> norm = ComputeOp("norm 1", "elementwise", 4.0 * 8, 4.0 * 8)  # 8 elements, 2 + 2 B
    >>> qkv = ComputeOp("qkv", "gemm", 0.0, 0.0)
    >>> every = ("norm", "rotary", "activation")
    >>> [(o.name, o.memory_bytes) for o in _eager([norm, qkv], every, 10.0, gated=True)]
    [('norm 1', 288.0), ('qkv', 0.0), ('rotary', 200.0)]
    >>> [o.memory_bytes for o in _eager([norm, qkv], ("rotary",), 10.0, gated=True)]
    [32.0, 0.0, 200.0]
    """
    out: list[ComputeOp] = []
    for op in ops:
        if op.name.startswith("norm") and "norm" in eager:
            out.append(replace(op, memory_bytes=op.memory_bytes * EAGER_NORM_BYTES / 4))
        elif op.name == "activation" and gated and "activation" in eager:
            # fused: 2 f read, f written, 2 bytes each (a gated MLP's 6 bytes per element)
            elements = op.memory_bytes / 6
            out.append(replace(op, memory_bytes=op.memory_bytes
                               + EAGER_GATED_EXTRA_BYTES * elements))  # fmt: skip
        else:
            out.append(op)
        if op.name == "qkv" and "rotary" in eager:
            out.append(ComputeOp("rotary", "elementwise", 6 * rotated,
                                 EAGER_ROTARY_BYTES * rotated))  # fmt: skip
    return out


def recomputed_ops(ops: list[ComputeOp], t: Training) -> list[ComputeOp]:
    """What the backward re-runs of a layer whose forward is ``ops`` (:func:`layer_ops`).

    ``recompute = "full"``: the whole forward (Megatron). With ``recompute_early_stop``,
    the forward up to the last tensor the backward saved, as PyTorch's non-reentrant
    checkpoint stops: a 16-bit GEMM is a ``torch.nn.Linear``, whose autograd saves its
    input and weight before it multiplies, so the layer's last GEMM and what follows it are
    not re-run; under FP8 it is Transformer Engine's ``te.Linear``, an autograd Function
    that saves after its GEMM, so only what follows it is skipped. ``selective`` without
    FlashAttention: the attention (Megatron recomputes its scores and softmax).

    Llama 3 8B's layer at 2,048 tokens: early stop skips the MLP's down projection
    (``h x f``, 2 h f FLOPs a token) and the residual after it:

    >>> from simcoll.training.spec import Parallelism, Training, Transformer
    >>> m = Transformer("llama3-8b", n_layers=32, hidden_size=4096, ffn_hidden_size=14336,
    ...                 n_heads=32, n_kv_heads=8, vocab_size=128256)
    >>> t = Training(2048, recompute="full", recompute_early_stop=True)
    >>> ops = layer_ops(m, t, Parallelism())
    >>> [o.name for o in ops if o not in recomputed_ops(ops, t)]
    ['mlp down', 'residual 2']
    >>> skipped = sum(o.flops for o in ops) - sum(o.flops for o in recomputed_ops(ops, t))
    >>> skipped == 2 * 2048 * 4096 * 14336 + 2048 * 4096
    True
    """
    if t.recompute == "selective" and not t.flash_attention:
        return [o for o in ops if o.op_class == "attention"]
    if t.recompute not in ("full", "sac_op", "sac_layer"):
        return []
    if t.recompute_early_stop:
        last = max((i for i, o in enumerate(ops) if o.op_class == "gemm"),
                   default=len(ops) - 1)  # fmt: skip
        ops = ops[: last + 1 if t.precision == "fp8" else last]
    return _not_saved(ops, t) if t.recompute == "sac_op" else list(ops)


def _not_saved(ops: list[ComputeOp], t: Training) -> list[ComputeOp]:
    """What torchtitan's per-op policy re-runs of ``ops``: every op but the fused
    attention and the odd-numbered matmuls (a fused GEMM's :attr:`ComputeOp.matmuls`
    counted one by one; of those it stands for, the re-run ones as one GEMM). Under FP8
    no GEMM is saved: torchao's float8 matmul is ``aten._scaled_mm``, which the policy's
    save list (``aten.mm``...) does not hold.

    >>> from simcoll.training.spec import Parallelism, Training, Transformer
    >>> m = Transformer("llama3-8b", n_layers=32, hidden_size=4096, ffn_hidden_size=14336,
    ...                 n_heads=32, n_kv_heads=8, vocab_size=128256)
    >>> t = Training(2048, recompute="sac_op")  # wk, wo and w3 again; wq, wv, w1, w2 saved
    >>> [(o.name, o.gemm.n if o.gemm else None) for o in recomputed_ops(layer_ops(m, t,
    ...     Parallelism()), t)]  # doctest: +NORMALIZE_WHITESPACE
    [('norm 1', None), ('qkv', 1024.0), ('attention out', 4096), ('residual 1', None),
     ('norm 2', None), ('mlp up', 14336.0), ('activation', None), ('residual 2', None)]
    """
    saved = {id(op): flags for op, _, flags in _policy(ops, t)}
    out: list[ComputeOp] = []
    for op in ops:
        if op.op_class == "attention" and op.kernel:
            continue  # SDPA's output is saved
        if id(op) not in saved:
            out.append(op)
            continue
        assert op.gemm is not None
        columns = op.matmuls or (op.gemm.n,)
        rerun = [n for n, kept in zip(columns, saved[id(op)], strict=True) if not kept]
        if len(rerun) == len(columns):
            out.append(op)
        elif rerun:
            g = op.gemm
            shape = GemmShape(g.b, g.m, sum(rerun), g.k)
            apart = tuple(s for s, kept in zip(op.gemms, saved[id(op)], strict=True)
                          if not kept) if op.gemms else ()  # fmt: skip
            out.append(replace(op, gemm=shape, flops=float(shape.flops), matmuls=(),
                               gemms=apart if len(apart) > 1 else (),
                               memory_bytes=op.memory_bytes * shape.n / g.n))  # fmt: skip
    return out


def _policy(
    ops: list[ComputeOp], t: Training
) -> list[tuple[ComputeOp, tuple[float, ...], tuple[bool, ...]]]:
    """Each GEMM of ``ops`` with its matmuls' output columns (:attr:`ComputeOp.matmuls`)
    and whether torchtitan's per-op policy saves each: the odd-numbered, counted through
    the layer; none under FP8."""
    out = []
    count = 0
    for op in ops:
        if op.op_class != "gemm" or op.gemm is None:
            continue
        columns = op.matmuls or (op.gemm.n,)
        flags = []
        for _ in columns:
            count += 1
            flags.append(t.precision != "fp8" and count % 2 == 1)
        out.append((op, columns, tuple(flags)))
    return out


def saved_matmul_columns(m: Transformer, t: Training) -> float:
    """The output columns (before tensor parallelism) of the matmuls torchtitan's per-op
    policy saves in a layer (:func:`_policy`): a Llama block's ``wq, wv, w1, w2``; none
    under FP8. The float8 scaling's ``abs`` outputs, which the policy also saved from
    bcebc0de5 to 88247277c (Nov 2024 to Feb 2025, removed for the peak memory they cost),
    are not counted.

    >>> m = Transformer("m", n_layers=2, hidden_size=8, ffn_hidden_size=32, n_heads=2,
    ...                 n_kv_heads=1, vocab_size=100)
    >>> saved_matmul_columns(m, Training(16, recompute="sac_op"))  # wq 8, wv 4, w1 32, w2 8
    52.0
    """
    return float(sum(n for _, columns, flags in _policy(layer_ops(m, t, Parallelism()), t)
                     for n, kept in zip(columns, flags, strict=True) if kept))  # fmt: skip


def recomputed_share(m: Transformer, t: Training) -> float:
    """The share of the layers whose backward runs :func:`recomputed_ops`: every one, or
    under ``sac_layer`` every second (torchtitan checkpoints the blocks it counts 2, 4...).

    >>> from simcoll.training.spec import Training, Transformer
    >>> m = Transformer("m", n_layers=5, hidden_size=8, ffn_hidden_size=32, n_heads=2,
    ...                 vocab_size=100)
    >>> recomputed_share(m, Training(16, recompute="sac_layer"))
    0.4
    """
    return (m.n_layers // 2) / m.n_layers if t.recompute == "sac_layer" else 1.0


def _with_fp8_casts(ops: list[ComputeOp]) -> list[ComputeOp]:
    """Before each GEMM, Transformer Engine's ``te.Linear`` casts its input and its weight
    to FP8 with their transposes (the weight-gradient and data-gradient GEMMs read those):
    2 bytes read, 1 + 1 written per element (``FP8_CAST_BYTES``); its backward casts and
    transposes the output gradient the same way (:func:`backward_ops`)."""
    out: list[ComputeOp] = []
    for op in ops:
        if op.op_class == "gemm" and op.gemm is not None:
            g = op.gemm
            elements = g.b * (g.m * g.k + g.k * g.n)  # the input and the weight
            out.append(ComputeOp(f"fp8 cast {op.name}", "elementwise", float(elements),
                                 FP8_CAST_BYTES * elements, gemm=g, kernel=FP8_CAST))  # fmt: skip
        out.append(op)
    return out


def head_ops(m: Transformer, t: Training, p: Parallelism) -> list[ComputeOp]:
    """The last stage's output layer and loss for one micro-batch (the vocabulary split
    over ``tp``, Megatron's vocab-parallel cross-entropy), in 16 bits under FP8 too."""
    e = 2
    tokens = t.micro_batch_size * t.seq_length / p.cp
    vocab = m.vocab_size / p.tp
    return [
        _gemm("logits", tokens, m.hidden_size, vocab, e),
        ComputeOp("cross-entropy", "elementwise", 5 * tokens * vocab, 4 * 2 * tokens * vocab),
    ]
