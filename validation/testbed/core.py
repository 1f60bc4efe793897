"""The :class:`Testbed`: build, shape, run ranks in, measure and tear down (no torch)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import networkx as nx

from simcoll.topology import gpu_nodes
from validation.testbed._system import (
    _SIGNALS,
    ECHO_ROUND_TRIPS,
    FIRST_MASTER_PORT,
    MEASURE_SKIP_BYTES,
    PREFIX,
    TBF_BURST_BYTES,
    TBF_QUEUE_S,
    RankResult,
    TestbedError,
    _check_emulable,
    _kill_netns_processes,
    _last_line,
    _load,
    _netns_list,
    _Port,
    _proc_start_time,
    _run,
    _signals_held,
    _state_dir,
    _teardown_names,
    _write_json,
)


class Testbed:
    """A topology emulated with network namespaces, bridges, veth pairs and tbf.

    Parameters
    ----------
    topology
        A topology graph (as :func:`simcoll.load_topology` returns) or the path of a
        topology file.

    Raises
    ------
    ConfigError
        If the file is missing or invalid, or the topology cannot be emulated: a GPU
        with other than one link, two GPUs linked directly, a link in one direction
        only, or switches joined in a loop.

    Nothing is created until the testbed is entered (``with``) or :meth:`up` is called.
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, topology: nx.DiGraph[str] | str | Path) -> None:
        self.graph = _load(topology)
        _check_emulable(self.graph)
        self.id = ""
        """The short token in every name, assigned by :meth:`up`."""
        self._gpus = gpu_nodes(self.graph)
        self._switches = sorted(n for n in self.graph if n not in set(self._gpus))
        self._state_path: Path | None = None
        self._namespaces: list[str] = []
        self._interfaces: list[str] = []
        self._ports: list[_Port] = []
        self._octet = 0
        self._latency_applied = False
        self._latency_note = ""
        self._chrt = False
        self._rtt: dict[str, Any] | None = None
        self._next_port = FIRST_MASTER_PORT
        self._previous_handlers: dict[int, Any] = {}
        self._lock = threading.RLock()
        self._up = False

    # -- names --------------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        return len(self._gpus)

    def namespace(self, rank: int) -> str:
        """The network namespace of ``rank``: ``sc<id>-r<rank>``."""
        self._check_rank(rank)
        return f"{PREFIX}{self.id}-r{rank}"

    def interface(self, rank: int) -> str:
        """The one interface in ``rank``'s namespace (its end of the link to its switch)."""
        self._check_rank(rank)
        return f"{PREFIX}{self.id}-r{rank}"

    @property
    def fabric_namespace(self) -> str:
        """The namespace holding every bridge: ``sc<id>-fab``."""
        return f"{PREFIX}{self.id}-fab"

    def rank_ip(self, rank: int) -> str:
        """The IPv4 address of ``rank``: host ``rank + 1`` of the testbed's /16."""
        self._check_rank(rank)
        host = rank + 1
        return f"10.{self._octet}.{host >> 8}.{host & 0xFF}"

    @property
    def subnet(self) -> str:
        return f"10.{self._octet}.0.0/16"

    @property
    def state_file(self) -> Path | None:
        """The JSON file listing every name created, until teardown removes it."""
        return self._state_path

    @property
    def namespaces(self) -> list[str]:
        """Every namespace this testbed created (the fabric's first)."""
        return list(self._namespaces)

    @property
    def interfaces(self) -> list[str]:
        """Every interface (veth end, bridge) this testbed created, in any namespace."""
        return list(self._interfaces)

    def _check_rank(self, rank: int) -> None:
        if not self.id:
            raise TestbedError("the testbed is not up; enter it with 'with' first")
        if not 0 <= rank < self.world_size:
            raise TestbedError(f"rank {rank} is not in 0..{self.world_size - 1}")

    # -- life cycle ---------------------------------------------------------------------

    def __enter__(self) -> Testbed:
        self.up()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.down()

    def up(self) -> None:
        """Create the namespaces, bridges, veth pairs and qdiscs; tear down on any failure."""
        with self._lock:
            if self._up:
                return
            self._up = True
        try:
            self._claim_id()
            self._install_handlers()
            atexit.register(self.down)
            self._build()
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Delete everything this testbed created, by name. Safe to call more than once."""
        with self._lock:
            if not self._up:
                return
            masked = threading.current_thread() is threading.main_thread()
            if masked:  # a signal now would interrupt the teardown: hold it until the end
                signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            try:
                left = _teardown_names(self._namespaces, self._interfaces)
                if not left and self._state_path is not None:
                    self._state_path.unlink(missing_ok=True)
                self._up = False
                self._restore_handlers()
                atexit.unregister(self.down)
            finally:
                if masked:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
        if left:
            raise TestbedError(
                f"teardown left {', '.join(left)}; run 'python -m validation.testbed cleanup'"
            )

    def _claim_id(self) -> None:
        """Pick an id no state file and no namespace uses; create its state file."""
        folder = _state_dir()
        taken = {ns.split("-")[0] for ns in _netns_list()}
        for _ in range(100):
            token = secrets.token_hex(2)
            if f"{PREFIX}{token}" in taken:
                continue
            path = folder / f"{PREFIX}{token}.json"
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                continue
            self.id, self._state_path = token, path
            self._namespaces, self._interfaces, self._ports, self._rtt = [], [], [], None
            self._octet = 200 + int(token, 16) % 56
            self._save_state()
            return
        raise TestbedError("could not find an unused testbed id in 100 tries")

    def _save_state(self) -> None:
        assert self._state_path is not None
        pid = os.getpid()
        state = {
            "id": self.id,
            "pid": pid,
            "pid_start": _proc_start_time(pid),
            "topology": str(self.graph.graph.get("source", "(graph)")),
            "namespaces": self._namespaces,
            "interfaces": self._interfaces,
        }
        _write_json(self._state_path, state)

    def _create(
        self,
        argv: Sequence[str],
        *,
        namespaces: Sequence[str] = (),
        interfaces: Sequence[str] = (),
    ) -> None:
        """Run the command that creates these names, then write them into the state file.

        A name is recorded only once it exists: if ``ip netns add`` fails because the name
        is taken (someone else's namespace), teardown never deletes it. Signals are held
        from the command to the record, so a SIGINT cannot fall between them.
        """
        if not self._up:  # torn down by a signal handler that did not end the process
            raise TestbedError("the testbed was torn down while it was being built")
        with _signals_held():
            _run(argv)
            self._namespaces += namespaces
            self._interfaces += interfaces
            self._save_state()

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set there; atexit and 'with' still hold
        for signum in _SIGNALS:
            previous = signal.signal(signum, self._on_signal)
            # None: a handler set outside Python; the closest stand-in is the default
            self._previous_handlers[signum] = signal.SIG_DFL if previous is None else previous

    def _restore_handlers(self) -> None:
        for signum, previous in self._previous_handlers.items():
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, previous)
        self._previous_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous_handlers.get(signum, signal.SIG_DFL)
        with contextlib.suppress(TestbedError):
            self.down()
        if callable(previous):
            previous(signum, frame)  # SIGINT's default raises KeyboardInterrupt
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    # -- building -----------------------------------------------------------------------

    def _build(self) -> None:
        fab = self.fabric_namespace
        for ns in [fab, *(self.namespace(r) for r in range(self.world_size))]:
            self._create(["ip", "netns", "add", ns], namespaces=[ns])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(
                ["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                 "net.ipv6.conf.default.disable_ipv6=1"],
                check=False,
            )  # fmt: skip
        bridges = {node: f"{PREFIX}{self.id}-b{i}" for i, node in enumerate(self._switches)}
        for bridge in bridges.values():
            self._create(["ip", "-n", fab, "link", "add", "name", bridge, "type", "bridge",
                          "forward_delay", "0", "stp_state", "0"], interfaces=[bridge])  # fmt: skip
            _run(["ip", "-n", fab, "link", "set", bridge, "up"])
        for rank, gpu in enumerate(self._gpus):
            switch = next(iter(self.graph.successors(gpu)))
            ns = self.namespace(rank)
            inner, outer = self.interface(rank), f"{PREFIX}{self.id}-p{rank}"
            veth = ["ip", "-n", fab, "link", "add", "name", outer, "type", "veth", "peer",
                    "name", inner, "netns", ns]  # fmt: skip
            self._create(veth, interfaces=[inner, outer])
            _run(["ip", "-n", fab, "link", "set", outer, "master", bridges[switch], "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.rank_ip(rank)}/16", "dev", inner])
            _run(["ip", "-n", ns, "link", "set", inner, "up"])
            # delayed ACKs stall pipelined segments (testbed-notes.md): ACK at once
            route = [self.subnet, "dev", inner, "proto", "kernel", "scope", "link"]
            _run(["ip", "-n", ns, "route", "replace", *route, "src", self.rank_ip(rank),
                  "quickack", "1"])  # fmt: skip
            self._ports += [
                _Port(inner, ns, gpu, switch),
                _Port(outer, fab, switch, gpu),
            ]
        links = sorted(
            {tuple(sorted(e)) for e in self.graph.edges if e[0] in bridges and e[1] in bridges}
        )
        for j, (u, v) in enumerate(links):
            end_u, end_v = f"{PREFIX}{self.id}-l{j}a", f"{PREFIX}{self.id}-l{j}b"
            self._create(["ip", "-n", fab, "link", "add", "name", end_u, "type", "veth",
                          "peer", "name", end_v], interfaces=[end_u, end_v])  # fmt: skip
            _run(["ip", "-n", fab, "link", "set", end_u, "master", bridges[u], "up"])
            _run(["ip", "-n", fab, "link", "set", end_v, "master", bridges[v], "up"])
            self._ports += [
                _Port(end_u, fab, u, v),
                _Port(end_v, fab, v, u),
            ]
        self._try_netem(self._ports[0])
        for port in self._ports:
            self._shape(port)
        probe = [*self._netns_exec(self.namespace(0), ["true"], rt=True)]
        self._chrt = _run(probe, check=False).returncode == 0

    def _try_netem(self, port: _Port) -> None:
        """Try ``netem delay`` once; where the kernel has no netem, record why not."""
        done = _run(
            ["tc", "-n", port.namespace, "qdisc", "add", "dev", port.interface, "root",
             "handle", "1:", "netem", "delay", "1us"],
            check=False,
        )  # fmt: skip
        if done.returncode == 0:
            _run(["tc", "-n", port.namespace, "qdisc", "del", "dev", port.interface, "root"])
            self._latency_applied = True
            self._latency_note = "netem applies each link's latency (netem root, tbf child)"
        else:
            self._latency_applied = False
            self._latency_note = (
                f"netem unavailable ({_last_line(done.stderr) or 'tc failed'}); no delay"
                " is added, links have the native veth + bridge latency (native_rtt_s)"
            )

    def _shape(self, port: _Port) -> None:
        attrs = self.graph.edges[port.source, port.target]
        rate_bit = round(float(attrs["bandwidth_bytes_per_s"]) * 8)
        latency_s = float(attrs["latency_s"])
        tc = ["tc", "-n", port.namespace, "qdisc", "add", "dev", port.interface]
        tbf = ["tbf", "rate", f"{rate_bit}bit", "burst", str(TBF_BURST_BYTES),
               "latency", f"{TBF_QUEUE_S * 1e3:g}ms"]  # fmt: skip
        if self._latency_applied and latency_s > 0:
            _run([*tc, "root", "handle", "1:", "netem", "delay", f"{latency_s * 1e6:.3f}us"])
            _run([*tc, "parent", "1:1", "handle", "10:", *tbf])
        else:
            _run([*tc, "root", "handle", "1:", *tbf])

    # -- running ------------------------------------------------------------------------

    def _netns_exec(self, ns: str, argv: Sequence[str], *, rt: bool | None = None) -> list[str]:
        """``ip netns exec NS [chrt -r 1] ARGV``; ``rt=None`` uses chrt where it worked."""
        use_rt = self._chrt if rt is None else rt
        return ["ip", "netns", "exec", ns, *(["chrt", "-r", "1"] if use_rt else []), *argv]

    def run_ranks(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        timeout_s: float,
        cwd: str | Path | None = None,
    ) -> list[RankResult]:
        """Run ``argv`` once per rank, each in its namespace, and wait for all of them.

        Each process runs as ``ip netns exec NS chrt -r 1 ARGV`` (without ``chrt`` where
        SCHED_RR is refused). Its environment is this process's, then
        ``OMP_NUM_THREADS=1`` and ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` = the
        rank's interface (gloo otherwise binds the address the host name resolves to,
        127.0.0.1, which other ranks cannot reach), then ``env``, then ``RANK``,
        ``WORLD_SIZE``, ``MASTER_ADDR`` (rank 0's address) and ``MASTER_PORT`` (a new
        port each call: nothing else listens in rank 0's namespace).
        stdout and stderr go to files, so a chatty rank never blocks on a pipe.

        Raises
        ------
        TestbedError
            When a rank exits non-zero (the others are killed): ``rank 1 exited with
            code 3: <last line of its stderr>``; or when ``timeout_s`` passes first (all
            are killed): ``rank(s) 2, 3 did not finish within 60 s; killed``.
        """
        if not self._up:
            raise TestbedError("the testbed is not up; enter it with 'with' first")
        port, self._next_port = self._next_port, self._next_port + 1
        with contextlib.ExitStack() as stack:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sc-run-")))
            procs: list[subprocess.Popen[bytes]] = []
            stack.callback(_kill_all, procs)
            started = time.monotonic()
            for rank in range(self.world_size):
                interface = self.interface(rank)
                rank_env = {
                    **os.environ,
                    "OMP_NUM_THREADS": "1",
                    "GLOO_SOCKET_IFNAME": interface,
                    "NCCL_SOCKET_IFNAME": interface,
                    **env,
                    "RANK": str(rank),
                    "WORLD_SIZE": str(self.world_size),
                    "MASTER_ADDR": self.rank_ip(0),
                    "MASTER_PORT": str(port),
                }
                out = stack.enter_context((folder / f"rank{rank}.out").open("wb"))
                err = stack.enter_context((folder / f"rank{rank}.err").open("wb"))
                procs.append(
                    subprocess.Popen(
                        self._netns_exec(self.namespace(rank), argv),
                        env=rank_env,
                        cwd=cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        start_new_session=True,
                    )
                )
            elapsed = self._wait_ranks(procs, started, timeout_s, folder)
            return [
                RankResult(
                    rank=rank,
                    returncode=int(proc.returncode),
                    stdout=(folder / f"rank{rank}.out").read_text(errors="replace"),
                    stderr=(folder / f"rank{rank}.err").read_text(errors="replace"),
                    elapsed_s=elapsed[rank],
                )
                for rank, proc in enumerate(procs)
            ]

    def _wait_ranks(
        self,
        procs: Sequence[subprocess.Popen[bytes]],
        started: float,
        timeout_s: float,
        folder: Path,
    ) -> list[float]:
        """Poll every 5 ms until all exit 0 (their times), one fails or time runs out."""
        elapsed: dict[int, float] = {}
        while len(elapsed) < len(procs):
            now = time.monotonic()
            for rank, proc in enumerate(procs):
                if rank in elapsed or proc.poll() is None:
                    continue
                elapsed[rank] = now - started
                if proc.returncode != 0:
                    _kill_all(procs)
                    stderr = Path(folder, f"rank{rank}.err").read_text(errors="replace")
                    raise TestbedError(_exit_message(rank, proc.returncode, stderr))
            if now - started > timeout_s:
                late = [r for r in range(len(procs)) if r not in elapsed]
                _kill_all(procs)
                _kill_netns_processes([self.namespace(r) for r in late])
                raise TestbedError(
                    f"rank(s) {', '.join(map(str, late))} did not finish within"
                    f" {timeout_s:g} s; killed"
                )
            time.sleep(0.005)
        return [elapsed[r] for r in range(len(procs))]

    # -- measuring ----------------------------------------------------------------------

    def _pair(
        self,
        server: str,
        client: str,
        *,
        src: int,
        dst: int,
        args: Sequence[str],
        timeout_s: float,
    ) -> dict[str, Any]:
        """Start ``server`` in ``dst``'s namespace, then ``client`` in ``src``'s; their JSON."""
        server_cmd = self._netns_exec(
            self.namespace(dst), [sys.executable, "-c", server, *args]
        )  # fmt: skip
        with subprocess.Popen(
            server_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as srv:
            try:
                assert srv.stdout is not None
                port = srv.stdout.readline().strip()
                if not port.isdigit():
                    raise TestbedError(f"measuring server did not start: {port!r}")
                client_cmd = self._netns_exec(
                    self.namespace(src),
                    [sys.executable, "-c", client, self.rank_ip(dst), port, *args],
                )
                sent = subprocess.run(
                    client_cmd, capture_output=True, text=True, timeout=timeout_s, check=False
                )
                out, err = srv.communicate(timeout=timeout_s)
            finally:
                srv.kill()
        if sent.returncode != 0 or srv.returncode != 0:
            reason = _last_line(sent.stderr) or _last_line(err)
            raise TestbedError(f"measurement rank {src} -> rank {dst} failed: {reason}")
        result: dict[str, Any] = json.loads(out.splitlines()[-1])
        result.update(json.loads(sent.stdout.splitlines()[-1]))
        return result

    def measure_rtt(self, src: int = 0, dst: int = 1) -> dict[str, Any]:
        """Median TCP round trip of 1 byte, ``src`` to ``dst`` and back, application to application.

        200 round trips after 20 of warm-up, ``TCP_NODELAY`` set, both processes under
        SCHED_RR where chrt works. Returns ``median_s``, ``min_s``, ``p90_s``, ``samples``.
        """
        result = self._pair(
            _ECHO_SERVER, _ECHO_CLIENT, src=src, dst=dst, args=[str(ECHO_ROUND_TRIPS)], timeout_s=30
        )
        times = sorted(result.pop("times_s"))
        return {
            "median_s": statistics.median(times),
            "min_s": times[0],
            "p90_s": times[int(0.9 * (len(times) - 1))],
            "samples": len(times),
        }

    def measure_goodput(self, src: int, dst: int, *, duration_s: float = 2.0) -> dict[str, Any]:
        """One TCP flow ``src`` -> ``dst`` for ``duration_s``: bytes per second received.

        Timed at the receiver from its first MiB on (see :data:`MEASURE_SKIP_BYTES`).
        Returns ``bytes_per_s``, ``bytes`` and ``seconds`` of the timed part.
        """
        result = self._pair(
            _SINK_SERVER,
            _SOURCE_CLIENT,
            src=src,
            dst=dst,
            args=[str(MEASURE_SKIP_BYTES), f"{duration_s:g}"],
            timeout_s=duration_s + 30,
        )
        result["bytes_per_s"] = result["bytes"] / result["seconds"]
        return result

    def bottleneck_bytes_per_s(self, src: int, dst: int) -> float:
        """The lowest rate on the path ``src`` -> ``dst`` (switches form a tree: one path)."""
        path = nx.shortest_path(self.graph, self._gpus[src], self._gpus[dst])
        return min(
            float(self.graph.edges[u, v]["bandwidth_bytes_per_s"])
            for u, v in nx.utils.pairwise(path)
        )

    def describe(self) -> dict[str, Any]:
        """What was built and how faithful it is.

        Returns a dict with ``id``, ``topology``, ``subnet``, ``sched`` (``"SCHED_RR"`` or
        ``"SCHED_OTHER"``), ``ranks`` (rank, namespace, ip), ``links`` (one per directed
        edge: ``link``, ``interface``, ``namespace``, ``bandwidth_bytes_per_s``
        requested, ``shaped_rate_bit_per_s`` as the kernel reports its tbf,
        ``burst_bytes``, ``latency_s`` requested, ``latency_applied``), ``latency_note``
        and ``native_rtt_s`` (median TCP echo round trip rank 0 <-> rank 1, measured once;
        None with one rank) with ``rtt`` (its details).
        """
        if not self._up:
            raise TestbedError("the testbed is not up; enter it with 'with' first")
        if self._rtt is None and self.world_size > 1:
            self._rtt = self.measure_rtt(0, 1)
        kernel = self._read_qdiscs()
        links = []
        for port in self._ports:
            attrs = self.graph.edges[port.source, port.target]
            tbf = kernel.get((port.namespace, port.interface), {})
            links.append(
                {
                    "link": f"{port.source} -> {port.target}",
                    "interface": port.interface,
                    "namespace": port.namespace,
                    "bandwidth_bytes_per_s": float(attrs["bandwidth_bytes_per_s"]),
                    "shaped_rate_bit_per_s": tbf.get("rate_bit_per_s"),
                    "burst_bytes": tbf.get("burst_bytes"),
                    "latency_s": float(attrs["latency_s"]),
                    "latency_applied": self._latency_applied and float(attrs["latency_s"]) > 0,
                }
            )
        return {
            "id": f"{PREFIX}{self.id}",
            "topology": str(self.graph.graph.get("source", "(graph)")),
            "subnet": self.subnet,
            "sched": "SCHED_RR" if self._chrt else "SCHED_OTHER",
            "ranks": [
                {"rank": r, "namespace": self.namespace(r), "ip": self.rank_ip(r)}
                for r in range(self.world_size)
            ],
            "links": links,
            "latency_note": self._latency_note,
            "native_rtt_s": None if self._rtt is None else self._rtt["median_s"],
            "rtt": self._rtt,
        }

    def _read_qdiscs(self) -> dict[tuple[str, str], dict[str, int]]:
        """The tbf rate and burst the kernel holds, per (namespace, interface)."""
        found: dict[tuple[str, str], dict[str, int]] = {}
        for ns in sorted({p.namespace for p in self._ports}):
            done = _run(["tc", "-n", ns, "-j", "qdisc", "show"], check=False)
            for qdisc in json.loads(done.stdout or "[]"):
                if qdisc.get("kind") == "tbf":
                    options = qdisc.get("options", {})
                    found[ns, qdisc["dev"]] = {
                        "rate_bit_per_s": int(options.get("rate", 0)) * 8,
                        "burst_bytes": int(options.get("burst", 0)),
                    }
        return found


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s process group (its session, started for it) and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _kill_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        _kill_group(proc)


def _exit_message(rank: int, returncode: int, stderr: str) -> str:
    if returncode < 0:
        head = f"rank {rank} was killed by signal {signal.Signals(-returncode).name}"
    else:
        head = f"rank {rank} exited with code {returncode}"
    last = _last_line(stderr)
    return f"{head}: {last}" if last else f"{head} (no stderr)"


# Small programs run inside the namespaces (python -c). Servers print their port first.
_ECHO_SERVER = """
import socket, sys
s = socket.create_server(("0.0.0.0", 0))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (b := c.recv(1)):
    c.sendall(b)
print("{}")
"""
_ECHO_CLIENT = """
import json, socket, sys, time
n = int(sys.argv[3])
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for i in range(20 + n):
    t = time.perf_counter()
    c.sendall(b"x")
    c.recv(1)
    times.append(time.perf_counter() - t)
c.close()
print(json.dumps({"times_s": times[20:]}))
"""
_SINK_SERVER = """
import json, socket, sys, time
skip = int(sys.argv[1])
s = socket.create_server(("0.0.0.0", 0))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
buf = bytearray(1 << 20)
n = n0 = 0
t0 = None
while (k := c.recv_into(buf)):
    n += k
    if t0 is None and n >= skip:
        t0, n0 = time.perf_counter(), n
t1 = time.perf_counter()
print(json.dumps({"bytes": n - n0, "seconds": t1 - t0}))
"""
_SOURCE_CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
end = time.perf_counter() + float(sys.argv[4])
chunk = bytes(1 << 20)
while time.perf_counter() < end:
    c.sendall(chunk)
c.close()
print("{}")
"""


# --------------------------------------------------------------------------------------
# Probing and the command line
# --------------------------------------------------------------------------------------
