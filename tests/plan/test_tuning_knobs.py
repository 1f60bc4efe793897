"""NCCL's per-call tuning and environment knobs (simcoll.plan.tuning), by hand."""

from __future__ import annotations

import pytest

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.plan.tuning import NcclKnobs, parse_nccl_knobs, tune_call

AR = Collective.ALLREDUCE


@pytest.mark.parametrize(
    ("protocol", "size_bytes", "channels"),
    [
        # Simple: keep c channels while size >= c x 512 threads x 64 B = c x 32 KiB.
        ("simple", 24 * 32768, 24),
        ("simple", 24 * 32768 - 1, 23),
        ("simple", 5 * 32768, 5),
        ("simple", 100, 1),
        # LL on a ring of 8: threshold 8 B x 8 ranks x 512 threads = 32 KiB per channel.
        ("LL", 3 * 32768, 3),
        # LL128: 8 B x 640 threads = 5 KiB per channel.
        ("LL128", 10 * 5120, 10),
        ("LL128", 10 * 5120 - 1, 9),
    ],
)
def test_channels_per_size(protocol: str, size_bytes: int, channels: int) -> None:
    assert tune_call(AR, "ring", protocol, 8, size_bytes, n_channels=24).n_channels == channels


def test_pieces_per_protocol() -> None:
    # Simple ring all-reduce: 4 MiB buffer / 8 steps x 2 slice steps = 1 MiB pieces, 4 in
    # flight. A channel's share of one ring step is 1 GiB / (8 ranks x 24 channels)
    # = 5.33 MiB -> 6 pieces.
    t = tune_call(AR, "ring", "simple", 8, 2**30, n_channels=24)
    assert (t.piece_bytes, t.max_in_flight, t.n_chunks) == (2**20, 4, 6)
    # Broadcast (not sliced): one 512 KiB slot a piece, 8 in flight.
    b = tune_call(Collective.BROADCAST, "ring", "simple", 8, 2**24, n_channels=1)
    assert (b.piece_bytes, b.max_in_flight, b.n_chunks) == (2**19, 8, 32)
    # LL: 64 KiB a slot of 16-byte lines carrying 8 data bytes: 32 KiB of data.
    assert tune_call(AR, "ring", "LL", 8, 2**20, n_channels=1).piece_bytes == 32768
    # LL128: a slot of 120 x 8 x 640 = 614400 bytes, 120 of every 128 data: 576000.
    assert tune_call(AR, "ring", "LL128", 8, 2**26, n_channels=1).piece_bytes == 576000
    # A bigger NCCL_BUFFSIZE gives bigger pieces: 8 MiB / 8 x 2 = 2 MiB.
    big = tune_call(AR, "ring", "simple", 8, 2**30, n_channels=24, buffsize_bytes=2**23)
    assert big.piece_bytes == 2**21


def test_knobs_from_the_environment() -> None:
    knobs = parse_nccl_knobs(["NCCL_MIN_CTAS=24", "NCCL_MAX_NCHANNELS=32", "NCCL_PROTO=ll128",
                              "NCCL_ALGO=Tree", "NCCL_BUFFSIZE=8M"])  # fmt: skip
    assert knobs == NcclKnobs(max_channels=32, buffsize_bytes=2**23, algorithm="tree",
                              protocol="LL128", min_ctas=24)  # fmt: skip
    assert knobs.channels(16) == 24  # the minimum repeats channels
    assert NcclKnobs(max_channels=2).channels(16) == 2
    assert NcclKnobs().channels(16) == 16
    # NVLS runs NCCL's 16 CTAs within the CTA settings only (connect.cc, nvls.cc)
    assert (knobs.nvls_ctas(), NcclKnobs().nvls_ctas()) == (24, 16)
    assert NcclKnobs(min_channels=24, max_channels=2).nvls_ctas() == 16
    assert NcclKnobs(max_ctas=8).nvls_ctas() == NcclKnobs(max_ctas=8).channels(16) == 8
    # a CTA minimum above the maximum is lowered to it (init.cc), for every kind of channel
    both = NcclKnobs(min_ctas=24, max_ctas=8)
    assert (both.nvls_ctas(), both.channels(16)) == (8, 8)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("NCCL_FOO=1", "NAME one of NCCL_MIN_NCHANNELS"),
        ("NCCL_MIN_NCHANNELS", "NAME one of"),
        ("NCCL_MIN_NCHANNELS=0", "a channel count 1..64"),
        ("NCCL_MAX_CTAS=x", "a channel count 1..64"),
        ("NCCL_ALGO=fast", "expected one of ring, tree"),
        ("NCCL_BUFFSIZE=1", "at least 4096 bytes"),
        ("NCCL_PROTO=LL256", "LL256"),
    ],
)
def test_bad_knobs_are_one_line(item: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        parse_nccl_knobs([item])
    assert "\n" not in str(error.value)
    assert str(error.value).startswith("--nccl")


@pytest.mark.parametrize(
    ("algorithm", "n_nodes", "size_bytes", "chunk_bytes"),
    [
        # NCCL's enqueue.cc, 16 channels x 8 heads = 128 concurrent chunks: NVLS cuts
        # its 128 KiB below 64 x 128 x 128 KiB = 1 GiB to 64 KiB, below 8 x 128 x 64 KiB
        # = 64 MiB to 32 KiB, below 2 x 128 x 32 KiB = 8 MiB to 16 KiB
        ("nvls", 1, 2**30, 128 * 2**10),
        ("nvls", 1, 2**29, 64 * 2**10),
        ("nvls", 1, 2**25, 32 * 2**10),
        ("nvls", 1, 2**22, 16 * 2**10),
        # NVLS-tree: 128 KiB kept from 4 x 128 x 128 KiB = 64 MiB, 64 KiB down to
        # 1 x 128 x 64 KiB = 8 MiB, 32 KiB below; on 4 servers or more 64 KiB at most
        ("nvls_tree", 2, 2**26, 128 * 2**10),
        ("nvls_tree", 2, 2**25, 64 * 2**10),
        ("nvls_tree", 2, 2**22, 32 * 2**10),
        ("nvls_tree", 4, 2**30, 64 * 2**10),
    ],
)
def test_nvls_channels_pipeline_nccls_chunks(algorithm, n_nodes, size_bytes, chunk_bytes):
    from simcoll.plan.tuning import nvls_chunks  # noqa: PLC0415

    by_hand = min(64, max(1, size_bytes // (16 * 8 * chunk_bytes)))
    assert nvls_chunks(algorithm, 8, size_bytes, n_nodes=n_nodes) == by_hand


def test_a_simulated_nvls_tree_call_cuts_its_shards_as_nccl_does():
    # 64 MiB on two 8-GPU servers: NCCL's channels each pipeline 4 chunks of 128 KiB per
    # head, so simcoll cuts each shard into 4 pieces per tree (it was 64 of 16 KiB)
    from simcoll.core.collectives import Collective  # noqa: PLC0415
    from simcoll.prediction.simulated import _schedule  # noqa: PLC0415

    s = _schedule(Collective.ALLREDUCE, "nvls_tree", 16, 2**26, {"gpus_per_node": 8})
    assert s.params["n_chunks"] == 4
    assert s.pieces_per_block == 8 * 2 * 4  # 8 shards x 2 trees x 4 chunks
