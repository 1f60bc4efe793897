"""--sizes ranges and lists, and nccl-tests' rounding to whole elements (simcoll.core.sizes)."""

from __future__ import annotations

import pytest

from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError
from simcoll.core.sizes import align_size_bytes, parse_sizes, size_notes


def test_parse_sizes_default_range() -> None:
    sizes, is_range = parse_sizes("8:8G")
    assert is_range
    assert len(sizes) == 31
    assert sizes == [8 * 2**k for k in range(31)]
    assert sizes[0] == 8
    assert sizes[-1] == 8 * 2**30


def test_parse_sizes_factor() -> None:
    sizes, is_range = parse_sizes("1K:1M:4")
    assert is_range
    assert sizes == [1024 * 4**k for k in range(6)]
    assert sizes[-1] == 2**20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8:64", [8, 16, 32, 64]),
        ("8:8", [8]),
        ("8:100", [8, 16, 32, 64]),  # stops at the last power below MAX
        ("1K:10K:3", [1024, 3072, 9216]),
        ("1 KB:4 KB", [1000, 2000, 4000]),
        (" 1M:4M ", [2**20, 2**21, 2**22]),
    ],
)
def test_parse_sizes_ranges(text: str, expected: list[int]) -> None:
    assert parse_sizes(text) == (expected, True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1K,1M,1G", [2**10, 2**20, 2**30]),
        ("4096", [4096]),
        ("1 KB, 1 MiB", [1000, 2**20]),
        ("64,8", [64, 8]),  # a list keeps its order
    ],
)
def test_parse_sizes_lists(text: str, expected: list[int]) -> None:
    assert parse_sizes(text) == (expected, False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1M:1K", "--sizes: range '1M:1K' ends below its start"),
        ("0:8", "--sizes: range '0:8' must start at 1 byte or more"),
        ("8:64:1", "--sizes: range factor in '8:64:1' must be 2 or more"),
        ("8:64:0", "--sizes: range factor in '8:64:0' must be 2 or more"),
        # issue 17 item 19: this was answered with "unknown unit"
        (
            "1K:1G:1.5",
            "--sizes: range factor in '1K:1G:1.5' must be a whole number of 2 or more, got '1.5'",
        ),
        ("abc", "--sizes: cannot read 'abc' as a number with a unit"),
        ("8:x", "--sizes: cannot read 'x' as a number with a unit"),
        ("8,,16", "--sizes: cannot read '' as a number with a unit"),
        ("-8", "--sizes: size '-8' is negative"),
        ("1.5", "--sizes: size '1.5' is not a whole number of bytes"),
        (
            "1 Gbps",
            "--sizes: unit 'Gbps' is ambiguous (bits or bytes?): write '1 Gbit/s' or '1 GB/s'",
        ),
    ],
)
def test_parse_sizes_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_sizes(text)
    assert str(error.value) == message


def test_align_size_bytes_examples() -> None:
    assert align_size_bytes(Collective.ALLGATHER, 3, 1000) == 996  # 3 ranks x 4 B -> 12 | 996
    assert align_size_bytes(Collective.ALLREDUCE, 3, 1001) == 1000
    assert align_size_bytes(Collective.ALLTOALL, 8, 1000) == 992
    assert align_size_bytes(Collective.ALLGATHER, 8, 16) == 0


@pytest.mark.parametrize("n", [1, 2, 3, 8])
@pytest.mark.parametrize("collective", list(Collective))
@pytest.mark.parametrize("size", [0, 7, 8, 1000, 4099, 2**20 + 3])
def test_align_size_bytes_rounds_down_to_whole_elements(
    collective: Collective, n: int, size: int
) -> None:
    # Whole float elements in every block of the nccl-tests size convention.
    per_rank = n if collective.n_blocks(n) > 1 and collective is not Collective.SENDRECV else 1
    unit = 4 * per_rank
    aligned = align_size_bytes(collective, n, size)
    assert aligned == size // unit * unit
    assert 0 <= size - aligned < unit
    # The aligned size splits into blocks without error.
    assert collective.block_bytes(aligned, n) * (n if per_rank > 1 else 1) == aligned


@pytest.mark.parametrize(
    ("text", "notes"),
    [
        # issue 41: 1GB is 10^9 B, so the powers of two from 1 MiB stop at 2^29
        ("1M:1GB", ["--sizes 1M:1GB: the range stops at 512 MiB (536870912 B); its end, 1GB, "
                    "is 1000000000 B and the next size, 1 GiB, is past it",
                    "--sizes 1M:1GB: GB is 10^9 B, G is 2^30 B: 1GB is 1000000000 B, 1G is "
                    "1073741824 B"]),
        # 8 x 2^3 = 64 <= 100 < 128
        ("8:100", ["--sizes 8:100: the range stops at 64 B; its end, 100, is 100 B and "
                   "the next size, 128 B, is past it"]),
        # 1 KiB x 3^2 = 9 KiB <= 10 KiB < 27 KiB
        ("1K:10K:3", ["--sizes 1K:10K:3: the range stops at 9 KiB (9216 B); its end, 10K, is "
                      "10240 B and the next size, 27 KiB, is past it"]),
        ("1 KB, 1 MiB", ["--sizes 1 KB, 1 MiB: KB is 10^3 B, K is 2^10 B: 1KB is 1000 B, 1K "
                         "is 1024 B"]),
        ("8:8G", []),
        ("1 KB:4 KB", []),  # decimal alone: meant as written
        ("1K,1M,1G", []),
    ],
)  # fmt: skip
def test_size_notes_say_what_a_range_or_its_units_do_unexpectedly(
    text: str, notes: list[str]
) -> None:
    assert size_notes(text) == notes
