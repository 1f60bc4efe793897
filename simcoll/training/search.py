"""Which layout to train a model with: every layout that divides it and fits, ranked.

:func:`candidate_layouts` enumerates the layouts of a model on ``n_gpus`` GPUs: tensor
parallel degrees that are powers of two up to the GPUs of one node, pipeline degrees up
to 16 stages that divide the layers or split them as torchtitan's
``generate_split_points`` does (:func:`edge_layers`: the first and last model chunk one
layer short, Llama 3 405B's 126 layers on 8 or 16 stages), an interleaved schedule of two
chunks per stage where the layers allow it, ZeRO-1 (Megatron's distributed optimizer) and, without
pipeline parallelism, FSDP, and micro-batches of 1 to 8 sequences. For each, the
lightest recomputation whose memory fits is kept (a heavier one only re-runs work: the
same layout, slower); a layout that fits with none is dropped with why.

:func:`screen` sorts them, before anything is simulated, into what runs and what is
dropped (``does not divide`` with the one-line reason, ``does not fit`` with the bytes);
the ones that run are then simulated (``simcoll step --search``) and ranked by tokens/s,
in the order of :func:`~simcoll.training.step.compute_bound_s` (the compute a layout's
busiest stage must do in a row, which no simulated step beats): once the K-th best step
simulated is faster than the next layout's bound, no layout left can rank in the top K,
and the search stops (branch and bound, exact for the top K).

>>> from simcoll.training.spec import Transformer, Training
>>> m = Transformer("tiny", n_layers=4, hidden_size=1024, ffn_hidden_size=4096, n_heads=8,
...                 vocab_size=32000)
>>> layouts = candidate_layouts(m, Training(seq_length=2048, global_batch_size=64), 16, 8)
>>> len(layouts), layouts[0]
(76, Candidate(tp=1, pp=1, vp=1, data_parallel='zero1', micro_batch_size=1, edge_layers=0))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from simcoll.core.errors import ConfigError
from simcoll.training.memory import memory_per_gpu
from simcoll.training.spec import Parallelism, Training, Transformer

#: The recomputation the search tries, least first, keeping the first that fits
#: (Megatron's modes; torchtitan's ``sac_op`` and ``sac_layer`` are stated, not searched).
SEARCHED_RECOMPUTE = ("none", "selective", "full")

__all__ = ["Candidate", "Screened", "candidate_layouts", "edge_layers", "screen"]

MAX_PIPELINE_STAGES = 16
MICRO_BATCH_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Candidate:
    """One layout to try (the data-parallel degree is what the GPUs leave)."""

    tp: int
    pp: int
    vp: int
    data_parallel: str
    micro_batch_size: int
    edge_layers: int = 0  # the first and last model chunk's layers (0: an even split)

    def parallelism(self, base: Parallelism) -> Parallelism:
        """``base`` with this layout's degrees, data-parallel mode and split."""
        return replace(base, tp=self.tp, pp=self.pp, virtual_stages=self.vp, dp=0,
                       data_parallel=self.data_parallel, first_stage_layers=self.edge_layers,
                       last_stage_layers=self.edge_layers)  # fmt: skip

    @property
    def label(self) -> str:
        """``tp2 pp4 vp2 zero1 mb1``, and ``edges 7`` where the first and last chunk hold
        7 layers."""
        edges = f" edges {self.edge_layers}" if self.edge_layers else ""
        return (f"tp{self.tp} pp{self.pp} vp{self.vp} {self.data_parallel} "
                f"mb{self.micro_batch_size}{edges}")  # fmt: skip


@dataclass(frozen=True)
class Screened:
    """A candidate after the checks that need no simulation: the training it runs with
    (its micro-batch and recomputation) and its layout, or why it is dropped."""

    candidate: Candidate
    training: Training
    parallelism: Parallelism | None
    dropped: str = ""  # "does not divide: ..." or "does not fit: ..."
    memory_bytes: float = 0.0


def edge_layers(n_layers: int, chunks: int) -> int | None:
    """How ``n_layers`` split into ``chunks`` model chunks: 0 evenly; ``k`` where
    torchtitan's ``generate_split_points`` gives the first and last chunk ``k`` layers
    and every other ``k + 1`` (its rule: ``k = n // chunks`` first, ``k + 1`` for each of
    the ``n % chunks`` next, ``k`` for the rest, the last taking what is left, which is
    that split exactly when ``n % chunks == chunks - 2``); ``None`` for any other split,
    which the search does not try.

    >>> edge_layers(126, 16), edge_layers(126, 8), edge_layers(128, 16), edge_layers(126, 5)
    (7, 15, 0, None)
    """
    if n_layers % chunks == 0:
        return 0
    base = n_layers // chunks
    if chunks > 2 and base >= 1 and n_layers % chunks == chunks - 2:
        return base
    return None


def candidate_layouts(
    m: Transformer, t: Training, n_gpus: int, gpus_per_node: int
) -> list[Candidate]:
    """Every layout tried (see the module docstring), smallest degrees first."""
    tps = [d for d in (1, 2, 4, 8, 16) if d <= max(1, gpus_per_node) and n_gpus % d == 0]
    out = []
    for tp in tps:
        for pp in range(1, min(m.n_layers, MAX_PIPELINE_STAGES) + 1):
            if n_gpus % (tp * pp):
                continue
            splits = {vp: edge_layers(m.n_layers, pp * vp) for vp in (1, 2) if vp == 1 or pp > 1}
            modes = ["zero1"] + (["fsdp"] if pp == 1 else [])
            for vp, edges in splits.items():
                if edges is None:
                    continue
                for mode in modes:
                    for mb in MICRO_BATCH_SIZES:
                        out.append(Candidate(tp, pp, vp, mode, mb, edges))
    return out


def screen(
    m: Transformer,
    t: Training,
    base: Parallelism,
    candidates: Sequence[Candidate],
    *,
    n_gpus: int,
    capacity_bytes: float,
) -> list[Screened]:
    """Each candidate with the lightest recomputation that fits, or dropped with why.

    Memory here leaves out NCCL's buffers (they follow the decided calls' channels, about
    0.3 GB a GPU on an H100 server); the simulated step counts them and flags a layout
    they push past the GPU's memory."""
    from simcoll.training.step import check_layout  # noqa: PLC0415 - step imports this module's peers

    out = []
    for c in candidates:
        try:
            p = c.parallelism(base).with_gpus(n_gpus)
            trial = replace(t, micro_batch_size=c.micro_batch_size)
            check_layout(m, trial, p)
        except ConfigError as error:
            out.append(Screened(c, t, None, f"does not divide: {error}"))
            continue
        lightest = None
        for recompute in SEARCHED_RECOMPUTE:
            early_stop = t.recompute_early_stop and recompute == "full"
            trial = replace(t, micro_batch_size=c.micro_batch_size, recompute=recompute,
                            recompute_early_stop=early_stop)  # fmt: skip
            memory = memory_per_gpu(m, trial, p).total_bytes
            if memory <= capacity_bytes:
                lightest = Screened(c, trial, p, memory_bytes=memory)
                break
        if lightest is None:
            out.append(Screened(c, trial, None, f"does not fit: {memory / 1e9:.1f} GB with "
                                f"full recomputation, {capacity_bytes / 1e9:.0f} GB per GPU",
                                memory_bytes=memory))  # fmt: skip
        else:
            out.append(lightest)
    return out
