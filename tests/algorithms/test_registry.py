"""The algorithm registry: names, parameters and the errors that list valid choices."""

from __future__ import annotations

import pytest

from simcoll.algorithms import ALGORITHMS, algorithm_names, build_schedule
from simcoll.core.collectives import Collective
from simcoll.core.errors import ConfigError


def test_names_per_collective():
    assert {"direct", "nvls", "reduce_broadcast", "ring"} <= set(algorithm_names("allreduce"))
    assert algorithm_names("allreduce") == sorted(algorithm_names("allreduce"))
    assert "direct" in algorithm_names(Collective.ALLTOALL)
    assert sum(len(algorithm_names(c)) for c in Collective) == len(ALGORITHMS)


def test_unknown_algorithm_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"^sendrecv has no algorithm 'ring'; valid: direct$"):
        build_schedule("sendrecv", "ring", n_ranks=4, size_bytes=64)


def test_unknown_collective_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown collective 'allreduc'; valid: allreduce,"):
        build_schedule("allreduc", "ring", n_ranks=4, size_bytes=64)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_chunk": 2},
         "allreduce/ring takes no parameter 'n_chunk'; valid: n_channels, n_chunks, max_in_flight"),
        ({"n_chunks": 0}, "allreduce/ring: n_chunks must be a positive integer, got 0"),
        ({"n_channels": 1.5}, "allreduce/ring: n_channels must be a positive integer, got 1.5"),
        ({"root": 1}, "allreduce/ring takes no parameter 'root'"),
    ],
)  # fmt: skip
def test_bad_parameters_are_named(params, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build_schedule("allreduce", "ring", n_ranks=4, size_bytes=64, **params)


def test_root_must_be_a_rank():
    with pytest.raises(ConfigError, match="broadcast: root 4 is not a rank of 4"):
        build_schedule("broadcast", "direct", n_ranks=4, size_bytes=64, root=4)


def test_parameters_reach_the_schedule():
    s = build_schedule("allgather", "direct", n_ranks=4, size_bytes=4 * 6, n_channels=2, n_chunks=3,
                       max_in_flight=2)  # fmt: skip
    assert s.params == {"n_channels": 2, "n_chunks": 3, "max_in_flight": 2}
    assert s.max_in_flight == 2
    assert s.n_channels == 2
    # 4 ranks x 3 peers x 2 channels x 3 chunks, one byte each.
    assert s.n_transfers == 4 * 3 * 2 * 3
    assert set(s.transfer_bytes.tolist()) == {1}
