"""The layouts ``--search`` tries: torchtitan's split where the layers do not divide."""

from __future__ import annotations

from simcoll.training.search import Candidate, candidate_layouts, edge_layers
from simcoll.training.spec import Parallelism, Training, Transformer, virtual_stage_layers

SIX = Transformer("six", n_layers=6, hidden_size=1024, ffn_hidden_size=4096, n_heads=8,
                  vocab_size=32000)  # fmt: skip


def test_edge_layers_is_torchtitans_split_where_it_is_one() -> None:
    # generate_split_points: k = n // chunks on the first, k + 1 on each of the next
    # n % chunks, k on the rest, the last taking what is left. 126 on 16: 7, then 14
    # chunks of 8 (126 % 16 = 14), the last 126 - 7 - 112 = 7; on 8: 15, 6 x 16, 15.
    # 126 on 5: 25, 26, 25, 25, the last 25 + 1: not first = last with even middles.
    assert edge_layers(126, 16) == 7
    assert edge_layers(126, 8) == 15
    assert edge_layers(126, 5) is None
    assert edge_layers(128, 16) == 0
    assert edge_layers(6, 8) is None  # fewer layers than chunks
    for chunks in (8, 16):
        k = edge_layers(126, chunks)
        p = Parallelism(pp=chunks, first_stage_layers=k, last_stage_layers=k)
        assert virtual_stage_layers(126, p) == [k] + [k + 1] * (chunks - 2) + [k]


def test_the_search_tries_the_split_layouts_counted_by_hand() -> None:
    # 6 layers on 8 GPUs: pp 1 and 2 divide them; pp 4 splits them 1, 2, 2, 1 (6 % 4 =
    # 2 = 4 - 2), and pp 2 x vp 2 the same four chunks; pp 8 (and pp 4 x vp 2) are more
    # chunks than layers; pp 3 and 6 do not divide the GPUs. With tp x pp dividing 8:
    # pp 4 at tp 1, 2; pp 2 vp 2 at tp 1, 2, 4; each with zero1 and micro-batches 1-8.
    t = Training(seq_length=2048, global_batch_size=64)
    split = {c for c in candidate_layouts(SIX, t, 8, 8) if c.edge_layers}
    expected = {Candidate(tp, pp, vp, "zero1", mb, 1)
                for tp, pp, vp in ((1, 4, 1), (2, 4, 1), (1, 2, 2), (2, 2, 2), (4, 2, 2))
                for mb in (1, 2, 4, 8)}  # fmt: skip
    assert split == expected
    assert Candidate(1, 4, 1, "zero1", 1, 1).label == "tp1 pp4 vp1 zero1 mb1 edges 1"
    assert Candidate(1, 4, 1, "zero1", 1, 1).parallelism(Parallelism()).last_stage_layers == 1
