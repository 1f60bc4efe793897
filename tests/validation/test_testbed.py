"""The emulated-cluster testbed: shaping, teardown on every way out, rank runs, errors.

Needs root and a working ``ip netns``; skipped otherwise. Expected rates are derived from
the topology's own numbers: one TCP flow over Ethernet with MTU 1500 carries 1448 payload
bytes (1500 - 20 IP - 20 TCP - 12 timestamp option) per 1514-byte frame (+ 14 Ethernet
header), and tbf counts frames, so goodput is at most ``rate * 1448 / 1514``. Goodput is
measured here with its own sender and receiver, not the testbed's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import validation.testbed as tb
from simcoll import load_topology
from simcoll.core.errors import ConfigError
from simcoll.topology import LinkKind, NodeKind, ring, switch_star

REPO = Path(__file__).resolve().parents[2]
UNAVAILABLE = tb.testbed_available()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"testbed: {UNAVAILABLE}")

MTU_GOODPUT = 1448 / 1514
"""TCP payload bytes per byte tbf counts, MTU 1500 with timestamps."""
LOW, HIGH = 0.85, 1.02
"""Accepted goodput band, as fractions of ``rate * MTU_GOODPUT``."""

STAR2_TOML = """
schema = 1
builder = "switch_star"
[params]
n_gpus = 2
link_bandwidth = "1 Gbit/s"
link_latency = "0.2 ms"
link_kind = "ethernet"
switch_kind = "switch"
"""

# Receiver: print the port, time from the first MiB received to EOF (the first MiB holds
# tbf's initial 128 KiB burst), print bytes per second. Sender: send argv[3] bytes.
RECEIVER = """
import socket, time
s = socket.create_server(("0.0.0.0", 0))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
buf = bytearray(1 << 20)
n = n0 = 0
t0 = None
while (k := c.recv_into(buf)):
    n += k
    if t0 is None and n >= 1 << 20:
        t0, n0 = time.perf_counter(), n
print((n - n0) / (time.perf_counter() - t0))
"""
SENDER = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
left = int(sys.argv[3])
chunk = memoryview(bytes(1 << 20))
while left > 0:
    left -= c.send(chunk[: min(left, len(chunk))])
c.close()
"""

HOLDER = """
import json, sys, time
from validation.testbed import Testbed
with Testbed(sys.argv[1]) as bed:
    names = {"namespaces": bed.namespaces, "interfaces": bed.interfaces}
    print(json.dumps({**names, "state_file": str(bed.state_file)}), flush=True)
    time.sleep(60)
"""


def tcp_goodput_bytes_per_s(bed: tb.Testbed, src: int, dst: int, size_bytes: int) -> float:
    """One TCP transfer of ``size_bytes`` from ``src`` to ``dst``, timed by the receiver."""
    receive = ["ip", "netns", "exec", bed.namespace(dst), sys.executable, "-c", RECEIVER]
    with subprocess.Popen(receive, stdout=subprocess.PIPE, text=True) as receiver:
        assert receiver.stdout is not None
        port = receiver.stdout.readline().strip()
        send = ["ip", "netns", "exec", bed.namespace(src), sys.executable, "-c", SENDER]
        subprocess.run([*send, bed.rank_ip(dst), port, str(size_bytes)], check=True, timeout=30)
        out, _ = receiver.communicate(timeout=30)
    return float(out)


def output(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def leftovers(names: dict[str, list[str]]) -> list[str]:
    """Which of these namespaces and root-namespace interfaces still exist."""
    netns, links = output("ip", "netns", "list"), output("ip", "-o", "link", "show")
    present = {line.split()[0] for line in netns.splitlines() if line.strip()}
    present |= {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()}
    return sorted(present & {*names["namespaces"], *names["interfaces"]})


def names_of(bed: tb.Testbed) -> dict[str, list[str]]:
    return {"namespaces": bed.namespaces, "interfaces": bed.interfaces}


@pytest.fixture(scope="module")
def star2_200mbit() -> Iterator[tb.Testbed]:
    """2 ranks on one switch, every link 200 Mbit/s each way."""
    graph = switch_star(
        2,
        link_bandwidth_bytes_per_s=200e6 / 8,
        link_latency_s=0.0,
        link_kind=LinkKind.ETHERNET,
        switch_kind=NodeKind.SWITCH,
    )
    with tb.Testbed(graph) as bed:
        yield bed


@pytest.fixture
def star2_toml(tmp_path: Path) -> Path:
    path = tmp_path / "star2.toml"
    path.write_text(STAR2_TOML)
    return path


# -- shaping ---------------------------------------------------------------------------


def test_200mbit_link_carries_one_flow_at_the_mtu_ceiling(star2_200mbit: tb.Testbed) -> None:
    expected = 200e6 / 8 * MTU_GOODPUT  # 23.9 MB/s
    goodput = tcp_goodput_bytes_per_s(star2_200mbit, 0, 1, 5_000_000)
    assert LOW * expected <= goodput <= HIGH * expected, goodput / expected


def test_describe_reports_shaping_latency_and_native_rtt(star2_200mbit: tb.Testbed) -> None:
    description = star2_200mbit.describe()
    assert [link["link"] for link in description["links"]] == [
        "gpu0 -> sw",
        "sw -> gpu0",
        "gpu1 -> sw",
        "sw -> gpu1",
    ]
    for link in description["links"]:
        assert link["shaped_rate_bit_per_s"] == 200_000_000
        assert link["latency_s"] == 0.0
        assert link["latency_applied"] is False  # nothing to apply for 0 s
    assert 1e-6 < description["native_rtt_s"] < 10e-3
    assert description["rtt"]["samples"] == tb.ECHO_ROUND_TRIPS


def test_one_slow_link_limits_only_the_flows_through_it() -> None:
    path = REPO / "validation/topologies/star4-one-slow.toml"
    graph = load_topology(path)
    rate = {e: graph.edges[e]["bandwidth_bytes_per_s"] for e in graph.edges}
    to_slow = min(rate["gpu0", "sw"], rate["sw", "gpu3"]) * MTU_GOODPUT  # 200 Mbit/s class
    to_fast = min(rate["gpu0", "sw"], rate["sw", "gpu1"]) * MTU_GOODPUT  # 1 Gbit/s class
    assert to_fast == pytest.approx(5 * to_slow)
    with tb.Testbed(path) as bed:
        slow = tcp_goodput_bytes_per_s(bed, 0, 3, 10_000_000)
        fast = tcp_goodput_bytes_per_s(bed, 0, 1, 40_000_000)
    assert LOW * to_slow <= slow <= HIGH * to_slow, slow / to_slow
    assert LOW * to_fast <= fast <= HIGH * to_fast, fast / to_fast


# -- teardown --------------------------------------------------------------------------


def test_leaving_the_block_deletes_every_name(star2_toml: Path) -> None:
    with tb.Testbed(star2_toml) as bed:
        names, state = names_of(bed), bed.state_file
        assert len(names["namespaces"]) == 3  # the fabric and 2 ranks
        assert all(name.startswith(f"sc{bed.id}-") for name in names["namespaces"])
        assert leftovers(names) == sorted(names["namespaces"])  # veths live in namespaces
        assert state is not None
        assert json.loads(state.read_text())["namespaces"] == names["namespaces"]
    assert leftovers(names) == []
    assert not state.exists()


def test_an_exception_in_the_block_still_tears_down(star2_toml: Path) -> None:
    names: dict[str, list[str]] = {}

    def fail_inside() -> None:
        with tb.Testbed(star2_toml) as bed:
            names.update(names_of(bed))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert len(names["namespaces"]) == 3
    assert leftovers(names) == []


def _start_holder(topology: Path) -> tuple[subprocess.Popen[str], dict[str, list[str]], Path]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(topology)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    names = json.loads(holder.stdout.readline())
    return holder, names, Path(names.pop("state_file"))


def test_sigint_to_a_process_holding_a_testbed_tears_it_down(star2_toml: Path) -> None:
    holder, names, state = _start_holder(star2_toml)
    with holder:
        assert leftovers(names) == sorted(names["namespaces"])
        holder.send_signal(signal.SIGINT)
        _, stderr = holder.communicate(timeout=20)
    assert "KeyboardInterrupt" in stderr
    assert leftovers(names) == []
    assert not state.exists()


def test_sigkill_leftovers_go_with_the_cleanup_command(star2_toml: Path) -> None:
    holder, names, state = _start_holder(star2_toml)
    with holder:
        holder.kill()
        holder.communicate(timeout=20)
    assert leftovers(names) == sorted(names["namespaces"])  # nothing could clean up
    cleanup = subprocess.run(
        [sys.executable, "-m", "validation.testbed", "cleanup"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert cleanup.returncode == 0, cleanup.stderr
    assert all(ns in cleanup.stdout for ns in names["namespaces"])
    assert leftovers(names) == []
    assert not state.exists()


# -- running ranks ---------------------------------------------------------------------


def test_run_ranks_sets_the_torchrun_environment_and_ranks_can_talk(
    star2_200mbit: tb.Testbed,
) -> None:
    program = """
import os, socket, time
rank, addr = int(os.environ["RANK"]), os.environ["MASTER_ADDR"]
port = int(os.environ["MASTER_PORT"])
print(rank, os.environ["WORLD_SIZE"], addr, os.environ["OMP_NUM_THREADS"], os.environ["EXTRA"])
print(os.environ["GLOO_SOCKET_IFNAME"])
if rank == 0:
    c, _ = socket.create_server((addr, port)).accept()
    print(c.recv(16).decode())
else:
    for _ in range(200):
        try:
            socket.create_connection((addr, port)).sendall(b"hello from 1")
            break
        except ConnectionRefusedError:
            time.sleep(0.01)
"""
    bed = star2_200mbit
    results = bed.run_ranks(
        [sys.executable, "-c", program], env={"EXTRA": "x"}, timeout_s=20, cwd=REPO
    )
    ip0 = bed.rank_ip(0)
    assert [r.returncode for r in results] == [0, 0]
    assert results[0].stdout == f"0 2 {ip0} 1 x\n{bed.interface(0)}\nhello from 1\n"
    assert results[1].stdout == f"1 2 {ip0} 1 x\n{bed.interface(1)}\n"


def test_a_failing_rank_is_reported_in_one_line(star2_200mbit: tb.Testbed) -> None:
    program = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    print('warming up', file=sys.stderr)\n"
        "    print('gives up', file=sys.stderr)\n"
        "    sys.exit(3)\n"
        "time.sleep(30)\n"
    )
    started = time.monotonic()
    with pytest.raises(tb.TestbedError) as error:
        star2_200mbit.run_ranks([sys.executable, "-c", program], env={}, timeout_s=20)
    assert str(error.value) == "rank 1 exited with code 3: gives up"
    assert time.monotonic() - started < 10  # rank 0 was killed, not waited for
    assert _processes_in(star2_200mbit) == ""


def test_ranks_past_the_timeout_are_killed(star2_200mbit: tb.Testbed) -> None:
    started = time.monotonic()
    with pytest.raises(tb.TestbedError) as error:
        star2_200mbit.run_ranks(["sleep", "30"], env={}, timeout_s=2)
    assert str(error.value) == "rank(s) 0, 1 did not finish within 2 s; killed"
    assert time.monotonic() - started < 5
    assert _processes_in(star2_200mbit) == ""


def _processes_in(bed: tb.Testbed) -> str:
    """The pids still running in any of the testbed's namespaces."""
    return "".join(output("ip", "netns", "pids", ns) for ns in bed.namespaces).strip()


# -- what it refuses ---------------------------------------------------------------------


def test_a_gpu_with_two_links_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dual-homed.toml"
    links = [("gpu0", "sw0"), ("gpu0", "sw1"), ("gpu1", "sw1"), ("sw0", "sw1")]
    path.write_text(
        'schema = 1\n[[nodes]]\nid = "sw0"\nkind = "switch"\n[[nodes]]\nid = "sw1"\n'
        'kind = "switch"\n[[nodes]]\nid = "gpu0"\nkind = "gpu"\nrank = 0\n'
        '[[nodes]]\nid = "gpu1"\nkind = "gpu"\nrank = 1\n'
        + "".join(
            f'[[links]]\nfrom = "{a}"\nto = "{b}"\nkind = "ethernet"\n'
            'bandwidth = "1 Gbit/s"\nlatency = "1 us"\n'
            for a, b in links
        )
    )
    with pytest.raises(ConfigError) as error:
        tb.Testbed(path)
    assert str(error.value) == (
        f"{path}: gpu0 has 2 links (to sw0, sw1); a testbed rank needs exactly one link,"
        " to a switch"
    )


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "missing.toml"
    with pytest.raises(ConfigError) as error:
        tb.Testbed(path)
    assert str(error.value) == f"{path}: no such file"
    cli = subprocess.run(
        [sys.executable, "-m", "validation.testbed", "show", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (cli.returncode, cli.stdout, cli.stderr) == (2, "", f"error: {path}: no such file\n")


def test_show_prints_rates_rtt_and_goodput_and_leaves_nothing(star2_toml: Path) -> None:
    show = subprocess.run(
        [
            sys.executable,
            "-m",
            "validation.testbed",
            "show",
            str(star2_toml),
            "--duration-s",
            "0.5",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert show.returncode == 0, show.stderr
    lines = show.stdout.splitlines()
    prefix = lines[0].split()[1].rstrip(":")  # "testbed sc1a2b: ..."
    links = [line for line in lines if line.startswith(("gpu", "sw"))]
    assert [line.split()[:3] for line in links] == [
        ["gpu0", "->", "sw"],
        ["sw", "->", "gpu0"],
        ["gpu1", "->", "sw"],
        ["sw", "->", "gpu1"],
    ]
    assert all(line.count(" 1 Gbit/s") == 2 for line in links)  # requested and tbf rate
    assert any(line.startswith("native RTT rank 0 <-> rank 1:") for line in lines)
    assert any(line.startswith("TCP goodput rank 0 -> rank 1:") for line in lines)
    assert prefix not in output("ip", "netns", "list")


def test_gpus_linked_directly_are_refused() -> None:
    graph = ring(3, link_bandwidth_bytes_per_s=1e9, link_latency_s=0.0)
    with pytest.raises(ConfigError) as error:
        tb.Testbed(graph)
    assert str(error.value) == (
        "link gpu0 - gpu1 joins two GPUs directly; the testbed needs a switch between GPUs"
    )
