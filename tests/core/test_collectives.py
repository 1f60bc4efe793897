"""Tests of simcoll.core.collectives: names, nccl-tests busbw factors, sizes, counts, holdings."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
#: Public nccl-tests logs transcribed as CSV (see the folder's README for sources).
VALIDATION_DATA = next(
    (
        path
        for path in (REPO / "validation" / "data" / "public", Path("/work/shared/validation-data"))
        if path.is_dir()
    ),
    None,
)
#: Two rows of nccl_allgather_8xA100_nvswitch_superbench.csv (size_bytes, count), kept here so
#: the check runs where that folder is absent.
ALLGATHER_8X_A100_ROWS = ((1048576, 32768), (1073741824, 33554432))
NAMES = (
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "sendrecv",
)
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
REDUCING = {"allreduce", "reducescatter", "reduce"}
#: nccl-tests' ``size`` column is the whole buffer of all ranks for these (count is per rank).
PER_RANK_COUNT = {"allgather", "reducescatter", "alltoall", "gather", "scatter"}


def _nccl_tests_factor(name: str, n: int) -> float:
    """The busbw factors of nccl-tests doc/PERFORMANCE.md and its *GetBw functions."""
    if name == "allreduce":
        return 2 * (n - 1) / n
    if name in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    assert name in ("broadcast", "reduce", "sendrecv")
    return 1.0


def test_the_nine_collectives() -> None:
    assert tuple(c.value for c in Collective) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_parse_by_name(name: str) -> None:
    assert Collective.parse(name).value == name
    assert Collective.parse(name) is Collective(name)


@pytest.mark.parametrize("name", ["all_reduce", "AllReduce", "", "allreduce ", "alltoallv"])
def test_parse_unknown_lists_valid_names(name: str) -> None:
    with pytest.raises(ConfigError) as error:
        Collective.parse(name)
    text = str(error.value)
    assert "\n" not in text
    assert text == f"unknown collective {name!r}; valid: {', '.join(NAMES)}"


@pytest.mark.parametrize("n", range(1, 17))
@pytest.mark.parametrize("name", NAMES)
def test_busbw_factor_matches_nccl_tests(name: str, n: int) -> None:
    assert Collective(name).busbw_factor(n) == pytest.approx(_nccl_tests_factor(name, n), rel=1e-15)


@pytest.mark.parametrize("name", NAMES)
def test_rooted_and_reducing(name: str) -> None:
    c = Collective(name)
    assert c.is_rooted == (name in ROOTED)
    assert c.reduces == (name in REDUCING)


# --- blocks and block sizes -----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("name", NAMES)
def test_n_blocks(name: str, n: int) -> None:
    expected = {"alltoall": n * n}.get(name, n if name in PER_RANK_COUNT | {"sendrecv"} else 1)
    assert Collective(name).n_blocks(n) == expected


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("name", NAMES)
def test_block_bytes(name: str, n: int) -> None:
    size = 4096 * 3
    # All-gather and friends: the size is all ranks' buffers, one block per rank.
    # All-to-all: the size is one rank's send buffer, one block per destination.
    # The rest (send/recv included): the size is one block.
    per = n if name in PER_RANK_COUNT else 1
    assert Collective(name).block_bytes(size, n) == size // per


@pytest.mark.parametrize(
    ("name", "size", "n"),
    [("allgather", 10, 4), ("reducescatter", 12, 8), ("alltoall", 10, 4), ("gather", 7, 2)],
)
def test_block_bytes_divisibility_error(name: str, size: int, n: int) -> None:
    with pytest.raises(ConfigError) as error:
        Collective(name).block_bytes(size, n)
    assert str(error.value) == (
        f"{name} size {size} B does not divide into {n} equal blocks (one per rank); "
        f"use a multiple of {n} B"
    )


@pytest.mark.parametrize("name", ["allreduce", "broadcast", "reduce", "sendrecv"])
def test_single_block_collectives_take_any_size(name: str) -> None:
    assert Collective(name).block_bytes(10, 4) == 10


# --- counts as nccl-tests prints them --------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize("name", sorted(set(NAMES) - {"sendrecv"}))
def test_count_follows_nccl_tests(name: str, n: int) -> None:
    size = 2**20
    per_rank = n if name in PER_RANK_COUNT else 1
    assert Collective(name).count(size, n) == size // 4 // per_rank
    assert Collective(name).count(size, n, type_size_bytes=2) == size // 2 // per_rank


def test_count_allreduce_is_size_over_type_size() -> None:
    assert Collective.ALLREDUCE.count(2**30, 8) == 2**30 // 4


def test_count_allgather_is_per_rank() -> None:
    assert Collective.ALLGATHER.count(2**30, 8) == 2**30 // 4 // 8


def _rows(filename: str) -> list[dict[str, str]]:
    if VALIDATION_DATA is None or not (VALIDATION_DATA / filename).is_file():
        pytest.skip(f"validation data {filename} not found")
    with (VALIDATION_DATA / filename).open(newline="") as f:
        return [row for row in csv.DictReader(f) if int(row["size_bytes"]) > 0]


@pytest.mark.parametrize(
    ("filename", "collective", "n_ranks"),
    [
        ("nccl_allgather_8xA100_nvswitch_superbench.csv", Collective.ALLGATHER, 8),
        ("nccl_allreduce_8xA100_nvswitch_superbench.csv", Collective.ALLREDUCE, 8),
        pytest.param("nccl_sendrecv_8xA100_nvswitch_liplus.csv", Collective.SENDRECV, 8),
    ],
)
def test_count_matches_nccl_tests_logs(filename: str, collective: Collective, n_ranks: int) -> None:
    rows = _rows(filename)
    assert rows
    for row in rows:
        size = int(row["size_bytes"])
        assert collective.count(size, n_ranks) == int(row["count"]), row


def test_allgather_log_count_is_size_over_4_over_8() -> None:
    rows = _rows("nccl_allgather_8xA100_nvswitch_superbench.csv")
    by_size = {int(r["size_bytes"]): int(r["count"]) for r in rows}
    # Two rows read from the log: 1 MiB and 1 GiB on 8 ranks, float (4 B).
    for size, count in ALLGATHER_8X_A100_ROWS:
        assert by_size[size] == count == size // 4 // 8


@pytest.mark.parametrize(("size", "count"), ALLGATHER_8X_A100_ROWS)
def test_allgather_count_matches_transcribed_rows(size: int, count: int) -> None:
    assert Collective.ALLGATHER.count(size, 8) == count == size // 4 // 8


@pytest.mark.parametrize("n", [2, 8])
def test_sendrecv_count_is_size_over_type_size(n: int) -> None:
    assert Collective.SENDRECV.count(2**20, n) == 2**20 // 4


# --- holdings -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_allgather_holdings(n: int) -> None:
    c = Collective.ALLGATHER
    assert c.initial_holdings(n, 0) == {(r, r): 1 << r for r in range(n)}
    final = c.final_holdings(n, 0)
    assert len(final) == n * n
    assert final == {(r, b): 1 << b for r in range(n) for b in range(n)}


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_alltoall_holdings(n: int) -> None:
    c = Collective.ALLTOALL
    initial = c.initial_holdings(n, 0)
    final = c.final_holdings(n, 0)
    assert len(initial) == len(final) == n * n
    # Block s*n+d is what source s sends to destination d.
    assert initial == {(s, s * n + d): 1 << s for s in range(n) for d in range(n)}
    assert final == {(d, s * n + d): 1 << s for s in range(n) for d in range(n)}


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_allreduce_holdings(n: int) -> None:
    c = Collective.ALLREDUCE
    everyone = (1 << n) - 1
    assert c.initial_holdings(n, 0) == {(r, 0): 1 << r for r in range(n)}
    assert c.final_holdings(n, 0) == {(r, 0): everyone for r in range(n)}


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_reducescatter_holdings(n: int) -> None:
    c = Collective.REDUCESCATTER
    everyone = (1 << n) - 1
    initial = c.initial_holdings(n, 0)
    assert len(initial) == n * n
    assert initial == {(r, b): 1 << r for r in range(n) for b in range(n)}
    assert c.final_holdings(n, 0) == {(r, r): everyone for r in range(n)}


@pytest.mark.parametrize(("n", "root"), [(1, 0), (4, 0), (4, 3), (5, 2)])
def test_rooted_holdings(n: int, root: int) -> None:
    everyone = (1 << n) - 1
    assert Collective.BROADCAST.initial_holdings(n, root) == {(root, 0): 1 << root}
    assert Collective.BROADCAST.final_holdings(n, root) == {(r, 0): 1 << root for r in range(n)}
    assert Collective.REDUCE.initial_holdings(n, root) == {(r, 0): 1 << r for r in range(n)}
    assert Collective.REDUCE.final_holdings(n, root) == {(root, 0): everyone}
    assert Collective.GATHER.initial_holdings(n, root) == {(r, r): 1 << r for r in range(n)}
    assert Collective.GATHER.final_holdings(n, root) == {(root, b): 1 << b for b in range(n)}
    assert Collective.SCATTER.initial_holdings(n, root) == {(root, b): 1 << root for b in range(n)}
    assert Collective.SCATTER.final_holdings(n, root) == {(r, r): 1 << root for r in range(n)}


@pytest.mark.parametrize("n", [2, 4, 5])
def test_sendrecv_holdings(n: int) -> None:
    c = Collective.SENDRECV
    assert c.initial_holdings(n, 0) == {(r, r): 1 << r for r in range(n)}
    # Rank r sends to r + 1: rank (r + 1) mod n ends with r's block.
    assert c.final_holdings(n, 0) == {((r + 1) % n, r): 1 << r for r in range(n)}


@pytest.mark.parametrize("n", [1, 2, 3, 8])
@pytest.mark.parametrize("name", NAMES)
def test_holdings_are_consistent(name: str, n: int) -> None:
    c = Collective(name)
    root = n - 1
    initial = c.initial_holdings(n, root)
    final = c.final_holdings(n, root)
    everyone = (1 << n) - 1
    for holdings in (initial, final):
        assert holdings
        for (rank, block), bits in holdings.items():
            assert 0 <= rank < n
            assert 0 <= block < c.n_blocks(n)
            assert 0 < bits <= everyone
    # Every contribution a rank must end with was held by someone at the start.
    for (_, block), bits in final.items():
        held = 0
        for (_, b), have in initial.items():
            if b == block:
                held |= have
        assert bits & ~held == 0
    if not c.reduces:
        # Nothing is combined: every block holds exactly one rank's data.
        assert all(bin(bits).count("1") == 1 for bits in final.values())


#: Bytes one GPU copies from its input to its output in an out-of-place call of 8 MiB on 8
#: ranks, beside what it sends, read off NCCL's kernels: the ring all-gather's first step
#: writes the rank's own 1 MiB block as it sends it, the broadcast's root its whole 8 MiB;
#: every other collective writes its output as it receives or reduces it.
LOCAL_COPIES_8MIB_8_RANKS = {
    "allgather": 2**20, "broadcast": 8 * 2**20, "allreduce": 0, "reducescatter": 0,
    "reduce": 0, "alltoall": 0, "gather": 0, "scatter": 0, "sendrecv": 0,
}  # fmt: skip


def test_local_copy_bytes_is_what_an_out_of_place_call_copies_beside_its_sends() -> None:
    assert set(LOCAL_COPIES_8MIB_8_RANKS) == set(NAMES)
    for name, expected in LOCAL_COPIES_8MIB_8_RANKS.items():
        assert Collective(name).local_copy_bytes(8 * 2**20, 8) == expected, name
        assert Collective(name).copies_locally == (expected > 0), name
