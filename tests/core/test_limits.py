"""Tests of simcoll.core.limits: sizes past 2^53 bytes, and ranks, channels, chunks and
transfers past their caps, are refused in one line (issue 17, items 6, 11 and 18)."""

from __future__ import annotations

from pathlib import Path

import pytest

import simcoll
from simcoll.algorithms import build_schedule
from simcoll.cli import main
from simcoll.core import limits
from simcoll.core.errors import ConfigError, LimitError, UnitError
from simcoll.core.limits import MAX_SIZE_BYTES, MAX_TRANSFERS
from simcoll.core.sizes import parse_sizes
from simcoll.core.units import parse_size_bytes
from simcoll.scenarios.scenario import parse_scenario
from simcoll.topology import switch_star

STAR = switch_star(8, link_bandwidth_bytes_per_s=1e9, link_latency_s=1e-6)
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text", ["9223372036854775808", "1e300", "8 PiB + 1", "16384 TiB"])
def test_sizes_past_2_53_bytes_are_refused(text: str) -> None:
    # issue 17 item 6: 2^63 came out negative per rank, 1e300 raised OverflowError
    with pytest.raises(UnitError):
        parse_size_bytes(text)


def test_2_53_bytes_is_the_largest_size() -> None:
    assert parse_size_bytes(str(MAX_SIZE_BYTES)) == 2**53
    assert parse_size_bytes("8192 TiB") == 2**53  # 2^13 x 2^40
    with pytest.raises(UnitError) as info:
        parse_size_bytes(str(2**53 + 1))
    assert str(info.value) == (
        "size '9007199254740993' is more than 2^53 bytes (8 PiB), the largest simcoll takes"
    )
    assert parse_sizes("1:8G")[0][-1] == 2**33
    with pytest.raises(ConfigError, match="more than 2"):
        parse_sizes("1:9223372036854775808")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size_bytes": 2**66}, "size_bytes must be at most 2^53 bytes (8 PiB), got "
         "73786976294838206464"),
        ({"size_bytes": 1.5}, "size_bytes must be a whole number of bytes, got 1.5"),
        ({"size_bytes": 1024.0}, "size_bytes must be a whole number of bytes, got 1024.0"),
        ({"n_ranks": 10**6}, "n_ranks must be at most 131072, got 1000000"),
        ({"n_channels": 0}, "n_channels must be a positive integer, got 0"),
        ({"n_channels": 1.5}, "n_channels must be a positive integer, got 1.5"),
        ({"n_channels": 100_000}, "n_channels must be at most 64, got 100000"),
        ({"n_chunks": 10**6}, "n_chunks must be at most 4096, got 1000000"),
    ],
)  # fmt: skip
def test_build_schedule_refuses_what_would_overflow_or_exhaust(
    kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"n_ranks": 8, "size_bytes": 2**20, **kwargs}
    with pytest.raises(ConfigError) as info:
        simcoll.build_schedule("allreduce", "ring", **args)  # type: ignore[arg-type]
    assert str(info.value) == f"allreduce/ring: {message}"


def test_a_schedule_of_more_transfers_than_the_cap_is_refused_before_it_is_built() -> None:
    # issue 17 item 11: build_schedule(n_ranks=10**6) was OOM-killed at 24 GB; 32,768 ranks
    # all-to-all are 32768^2 blocks, over the 2^24 cap, refused before any transfer
    with pytest.raises(ConfigError) as info:
        simcoll.build_schedule("alltoall", "direct", n_ranks=32768, size_bytes=2**30)
    assert str(info.value) == (
        "alltoall over 32768 ranks in 1 pieces per block would cut the buffer into "
        f"1073741824 pieces, more than the {MAX_TRANSFERS} one schedule may hold; use fewer "
        "chunks or channels"
    )


def test_a_schedule_is_refused_once_it_passes_the_transfer_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from simcoll.core import schedule  # noqa: PLC0415

    monkeypatch.setattr(schedule, "MAX_TRANSFERS", 100)
    # ring all-reduce on 8 ranks: 2 x 7 steps x 8 ranks = 112 transfers > 100
    with pytest.raises(ConfigError, match="would have more than 100 transfers"):
        simcoll.build_schedule("allreduce", "ring", n_ranks=8, size_bytes=8 * 1024)
    assert simcoll.build_schedule("allgather", "ring", n_ranks=8, size_bytes=8).n_transfers == 56


@pytest.mark.parametrize(
    ("collective", "n_transfers"),
    # 16 channels of a 1,024-rank ring: 2 x 1023 x 1024 x 16 = 33,521,664 (all-reduce),
    # half that for the others: 16,760,832, just under 2^24 = 16,777,216 with 16 channels,
    # so they take 17: 17,808,384
    [("allreduce", 33_521_664), ("allgather", 17_808_384), ("reducescatter", 17_808_384)],
)
def test_a_ring_over_the_transfer_cap_is_refused_before_its_first_transfer(
    monkeypatch: pytest.MonkeyPatch, collective: str, n_transfers: int
) -> None:
    from simcoll.core.schedule import ScheduleBuilder  # noqa: PLC0415

    added = []
    original = ScheduleBuilder.add

    def counted(self: ScheduleBuilder, **kwargs: object) -> int:
        added.append(1)
        return original(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ScheduleBuilder, "add", counted)
    channels = 16 if collective == "allreduce" else 17
    assert n_transfers == (2 if collective == "allreduce" else 1) * 1023 * 1024 * channels
    with pytest.raises(ConfigError) as info:
        simcoll.build_schedule(collective, "ring", n_ranks=1024, size_bytes=2**30,
                               n_channels=channels)  # fmt: skip
    assert str(info.value) == (
        f"{collective}/ring on 1024 ranks would have more than {MAX_TRANSFERS} transfers, "
        "too many to simulate; use fewer ranks, chunks or channels"
    )
    assert added == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sizes_bytes": [2**63]}, "size_bytes: must be at most 2^53 bytes (8 PiB), got "
         "9223372036854775808"),
        ({"sizes_bytes": [1024.0]}, "size_bytes: must be a whole number of bytes, got 1024.0"),
        ({"params": {"n_channels": 100_000}}, "n_channels: must be at most 64, got 100000"),
        ({"params": {"n_channels": -1}}, "n_channels: must be at least 1, got -1"),
        ({"n_ranks": 0}, "n_ranks: must be at least 1, got 0"),
    ],
)  # fmt: skip
def test_predict_refuses_in_one_line_naming_the_parameter(
    kwargs: dict[str, object], message: str
) -> None:
    # issue 17 item 19: n_ranks=0 named the --ranks flag, n_channels=-1 pieces_per_block
    args: dict[str, object] = {"sizes_bytes": [1024], **kwargs}
    with pytest.raises(ConfigError) as info:
        simcoll.predict(STAR, "allreduce", **args)  # type: ignore[arg-type]
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("flag", "value", "maximum"),
    [("--channels", "100000", 64), ("--chunks", "5000", 4096), ("--ranks", "200000", 131072)],
)
def test_predict_caps_channels_chunks_and_ranks(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, maximum: int
) -> None:
    # issue 17 item 11: --channels 100000 on 8 GPUs grew past 4 GB
    topology = str(REPO / "topologies" / "dgx-a100.toml")
    with pytest.raises(SystemExit) as info:
        main(["predict", topology, "--collective", "allreduce", flag, value])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"argument {flag}: expected a positive integer of at most {maximum}, got {value} "
        "(see simcoll predict --help)\n"
    )


def test_run_scenario_refuses_what_is_not_a_scenario() -> None:
    with pytest.raises(ConfigError) as info:
        simcoll.run_scenario(42)  # type: ignore[arg-type]
    assert str(info.value) == (
        "run_scenario takes a scenario file's path or its contents as a dict, got int 42"
    )


def test_a_scenario_size_past_the_cap_names_its_field() -> None:
    data = {"schema": 1, "topology": {"file": "t.toml"}, "sweep": {"size_bytes": [2**63]}}
    with pytest.raises(ConfigError) as info:
        parse_scenario(data, source="s.toml")
    assert str(info.value) == (
        "s.toml: sweep.size_bytes: must be at most 2^53 bytes (8 PiB), got 9223372036854775808"
    )


def test_a_huge_message_is_cut_to_one_readable_line() -> None:
    # Issue 29: a 10 MB log line was echoed whole in the error.
    from simcoll.core.errors import MAX_MESSAGE_CHARS, ConfigError  # noqa: PLC0415

    text = str(ConfigError("bad value " + "x" * 10_000_000, source="big.log", field="line 2"))
    assert len(text) < MAX_MESSAGE_CHARS + 40
    assert text.startswith("big.log: line 2: bad value xxx")
    cut = len("big.log: line 2: bad value ") + 10_000_000 - MAX_MESSAGE_CHARS
    assert text.endswith(f"... ({cut} more characters)")


def test_a_direct_allreduce_with_cubic_dependencies_is_refused_before_it_is_built() -> None:
    # Issue 29: direct all-reduce at 512 GPUs reached a MemoryError at 5.5 GB holding its
    # 512 x 511 x 511 dependencies; refused at once now.
    from simcoll.algorithms import build_schedule  # noqa: PLC0415
    from simcoll.core.errors import LimitError  # noqa: PLC0415

    with pytest.raises(LimitError, match="would have more than 33554432 dependencies"):
        build_schedule("allreduce", "direct", n_ranks=512, size_bytes=2**20)


def test_a_schedule_too_large_for_this_machines_memory_is_refused_before_it_is_built(
    monkeypatch,
):
    # Issue 29: memory was checked only by the sweep's estimate. Every schedule now asks
    # for its memory before any transfer is built: a ring all-reduce on 16 ranks, 4 pieces
    # per block, has 16 x 2 x 15 x 4 = 1,920 transfers, about 2.1 MiB at 1,152 B each.
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 2**20)
    with pytest.raises(LimitError) as info:
        build_schedule("allreduce", "ring", n_ranks=16, size_bytes=2**20, n_chunks=4)
    needed_gib = 1920 * limits.TRANSFER_BYTES / 2**30
    assert info.value.message == (
        f"allreduce/ring on 16 ranks would need about {needed_gib:.4g} GiB of memory to build "
        "and simulate (1920 transfers), more than the 0.0009766 GiB this "
        "machine has available; use fewer ranks, chunks or channels"
    )
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 2**30)
    assert build_schedule("allreduce", "ring", n_ranks=16, size_bytes=2**20,
                          n_chunks=4).n_transfers == 1920  # fmt: skip


def test_the_memory_available_is_no_more_than_the_address_space_limit_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 41: under `ulimit -v 4194304` a ring all-reduce of 15.7 million transfers
    # (within MAX_TRANSFERS) was checked against the machine's 23 GB and ran into a
    # MemoryError traceback at 3.9 GB; the limit, less what the process maps, now counts
    if limits.resource is None:  # pragma: no cover - not a Unix
        pytest.skip("no address-space limit on this platform")
    machine = limits._machine_available_bytes()
    monkeypatch.setattr(limits, "_mapped_bytes", lambda: 2**30)
    monkeypatch.setattr(limits.resource, "getrlimit", lambda which: (4 * 2**30, 4 * 2**30))
    assert limits.available_memory_bytes() == min(3 * 2**30, machine or 3 * 2**30)
    monkeypatch.setattr(limits, "_mapped_bytes", lambda: 5 * 2**30)  # past it already
    assert limits.available_memory_bytes() == 0
    infinity = limits.resource.RLIM_INFINITY
    monkeypatch.setattr(limits.resource, "getrlimit", lambda which: (infinity, infinity))
    assert limits.available_memory_bytes() == machine  # no limit: the machine's alone


def test_a_repeated_call_past_the_step_cap_is_refused_before_its_list_is_built() -> None:
    # Issue 41: [RecordedCall(...)] * repeat raised a MemoryError at repeat 10^11.
    from simcoll.core.errors import LimitError  # noqa: PLC0415
    from simcoll.prediction.session import Session, recording_calls  # noqa: PLC0415

    with recording_calls() as calls:
        session = Session(STAR, calibration=None)
        session.compute([0], 1e-3, "work")
        session.collective("allreduce", 1024, [0, 1], repeat=limits.MAX_STEP_CALLS - 1)
        with pytest.raises(LimitError) as info:
            session.collective("allreduce", 1024, [0, 1], name="tp", repeat=1)
    assert str(info.value) == "tp: would make 16777217 calls, more than the 16777216 (2^24) " \
        "a session simulates"  # fmt: skip
    assert len(calls) == 1 + (2**24 - 1)  # the compute span and the repeats: none added
    with pytest.raises(LimitError, match=r"tp: would make 100000000000 calls, more than"):
        Session(STAR, calibration=None).collective("allreduce", 1024, [0, 1], name="tp",
                                                   repeat=10**11)  # fmt: skip


MODEL_SCENARIO = """schema = 1
[topology]
file = "{topology}"
set = {{ n_nodes = 16 }}
[workload]
kind = "training_step"
transformer = "huge.toml"
global_batch_size = 16
tp = 8
pp = 16
"""


def _limited_to_4_gib() -> None:  # run in the child: it is refused, not the machine
    import resource  # noqa: PLC0415

    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))


@pytest.mark.parametrize("n_layers", [50_000_000, 100_000_000_000])
def test_a_model_of_too_many_layers_is_refused_in_one_line_before_it_grows(
    tmp_path: Path, n_layers: int
) -> None:
    # Issue 41: 50,000,000 layers grew to 24.3 GB in 86 s until the kernel killed it;
    # 10^11 printed a MemoryError traceback. Under 4 GiB both now fail their one point
    # with the model file's field, in about a second.
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    model = (REPO / "models" / "llama3-405b.toml").read_text()
    (tmp_path / "huge.toml").write_text(model.replace("n_layers = 126", f"n_layers = {n_layers}"))
    topology = (REPO / "topologies" / "h100-ib-fat-tree.toml").as_posix()
    (tmp_path / "s.toml").write_text(MODEL_SCENARIO.format(topology=topology))
    done = subprocess.run(
        [sys.executable, "-m", "simcoll", "run", "s.toml", "--out", "out", "--workers", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        preexec_fn=_limited_to_4_gib,
    )  # fmt: skip
    printed = done.stdout + done.stderr
    assert done.returncode == 1, printed
    assert "Traceback" not in printed, printed
    assert "MemoryError" not in printed, printed
    assert (
        f"failed: huge.toml: model: n_layers must be at most 4096 (the most simcoll "
        f"simulates), got {n_layers}\n"
    ) in printed
