"""Names, state files, shell helpers and clean-up of the emulated testbed (no torch)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from simcoll.core.errors import ConfigError, SimcollError
from simcoll.topology import gpu_nodes, load

STATE_DIRS = (Path("/run/simcoll-testbed"), Path(tempfile.gettempdir()) / "simcoll-testbed")
"""Where state files live: the first that can be written to (``/run`` needs root)."""

PREFIX = "sc"
"""Every name a testbed creates starts with ``sc<id>-``; ``<id>`` is 4 hex digits."""

NAME_PATTERN = re.compile(rf"{PREFIX}[0-9a-f]{{4}}-(?:fab|r\d+|b\d+|p\d+|l\d+[ab])")
"""Every name a testbed creates, exactly (:meth:`Testbed.namespace`, ``-fab``, bridges
``-b<i>``, veth ends ``-r<rank>``/``-p<rank>``/``-l<j>a``/``-l<j>b``). Teardown and cleanup
touch no other name, whatever a state file lists: never ``eth0``, never a namespace of
someone else's."""

STATE_NAME = re.compile(rf"{PREFIX}[0-9a-f]{{4}}\.json")
"""The name of a state file: the testbed's id."""

TBF_BURST_BYTES = 128 * 1024
"""tbf bucket. Smaller buckets lose 7-38 % of a 1 Gbit/s flow on a busy 2-core machine
because tbf's dequeue timer fires late (testbed-notes.md); 128 KiB reaches the MTU ceiling."""

TBF_QUEUE_S = 0.020
"""How long a packet may wait in a tbf queue (tc's ``latency``): sets the queue limit to
``rate * 20 ms + burst``, enough for one TCP flow to fill a link without loss."""

ECHO_ROUND_TRIPS = 200
"""Round trips whose median is the native RTT; 20 more are run first as warm-up."""

MEASURE_SKIP_BYTES = 1 << 20
"""Goodput is timed from the first MiB received on: the first 128 KiB leave at veth
speed (tbf's full bucket), which would inflate a short transfer by a few per cent."""

FIRST_MASTER_PORT = 29500
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TestbedError(SimcollError, RuntimeError):
    """The testbed could not be built or torn down, or a rank failed or timed out."""

    __test__ = False  # not a pytest test class, whatever its name


@dataclass(frozen=True)
class RankResult:
    """How one rank's process ended, with everything it printed."""

    rank: int
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


@dataclass(frozen=True)
class _Port:
    """One end of a veth pair and the directed topology edge that leaves through it."""

    interface: str
    namespace: str
    source: str
    target: str


# --------------------------------------------------------------------------------------
# Checking a topology
# --------------------------------------------------------------------------------------


def _load(topology: nx.DiGraph[str] | str | Path) -> nx.DiGraph[str]:
    if isinstance(topology, nx.DiGraph):
        return topology
    return load(topology)  # a missing file: ConfigError "<path>: no such file"


def _check_emulable(graph: nx.DiGraph[str]) -> None:
    """Raise :class:`ConfigError` for what namespaces and bridges cannot emulate."""
    source = graph.graph.get("source")
    for u, v in graph.edges:
        if not graph.has_edge(v, u):
            raise ConfigError(
                f"link {u} -> {v} has no reverse direction; the testbed emulates duplex links",
                source=source,
            )
    by_rank = gpu_nodes(graph)
    gpus = set(by_rank)
    for node in by_rank:
        neighbours = sorted(set(graph.successors(node)) | set(graph.predecessors(node)))
        direct = [n for n in neighbours if n in gpus]
        if direct:
            raise ConfigError(
                f"link {node} - {direct[0]} joins two GPUs directly; the testbed needs a"
                " switch between GPUs",
                source=source,
            )
        if len(neighbours) != 1:
            raise ConfigError(
                f"{node} has {len(neighbours)} links (to {', '.join(neighbours) or 'nothing'});"
                " a testbed rank needs exactly one link, to a switch",
                source=source,
            )
    fabric = graph.subgraph(n for n in graph if n not in gpus).to_undirected(as_view=True)
    loops = nx.cycle_basis(fabric)
    if loops:
        raise ConfigError(
            f"switches {', '.join(sorted(loops[0]))} form a loop; Linux bridges without"
            " spanning tree or ECMP cannot emulate redundant paths",
            source=source,
        )


# --------------------------------------------------------------------------------------
# Running commands
# --------------------------------------------------------------------------------------


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a short command; on failure raise a one-line :class:`TestbedError`."""
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        reason = _last_line(done.stderr) or f"exit code {done.returncode}"
        raise TestbedError(f"{' '.join(argv)}: {reason}")
    return done


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _netns_list() -> set[str]:
    done = _run(["ip", "netns", "list"], check=False)
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def _root_links() -> set[str]:
    done = _run(["ip", "-o", "link", "show"], check=False)
    names = set()
    for line in done.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            names.add(parts[1].strip().split("@")[0])
    return names


def _kill_netns_processes(namespaces: Sequence[str]) -> None:
    """SIGKILL every process inside ``namespaces`` and wait (up to 2 s) until none is left."""
    deadline = time.monotonic() + 2.0
    while True:
        pids = []
        for ns in namespaces:
            if _netns_exists(ns):
                done = _run(["ip", "netns", "pids", ns], check=False)
                pids += [int(p) for p in done.stdout.split() if p.isdigit()]
        pids = [p for p in pids if p != os.getpid()]
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _proc_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[19])


def testbed_names(names: object) -> list[str]:
    """The names of a state file's list that a testbed could have made (:data:`NAME_PATTERN`);
    anything else (``eth0``, another tool's namespace, a non-string) is dropped."""
    if not isinstance(names, list):
        return []
    return [n for n in names if isinstance(n, str) and NAME_PATTERN.fullmatch(n)]


def _teardown_names(namespaces: Sequence[str], interfaces: Sequence[str]) -> list[str]:
    """Delete exactly these namespaces (and, if any leaked there, root interfaces); names
    that are not a testbed's (:data:`NAME_PATTERN`) are never touched.

    Returns what is still there afterwards (empty when all went).
    """
    namespaces, interfaces = testbed_names(list(namespaces)), testbed_names(list(interfaces))
    _kill_netns_processes(namespaces)
    for ns in reversed(namespaces):
        if _netns_exists(ns):
            _run(["ip", "netns", "del", ns], check=False)
    leaked = _root_links() & set(interfaces)
    for name in sorted(leaked):
        _run(["ip", "link", "del", "dev", name], check=False)
    return sorted(set(namespaces) & _netns_list()) + sorted(_root_links() & set(interfaces))


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM (in the main thread) until the block ends."""
    masked = threading.current_thread() is threading.main_thread()
    if masked:
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        if masked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


# --------------------------------------------------------------------------------------
# State files
# --------------------------------------------------------------------------------------


def trusted(path: Path, *, kind: int) -> bool:
    """Whether ``path`` is a file (``kind=stat.S_IFREG``) or folder (``stat.S_IFDIR``), not a
    symbolic link, owned by root and writable by nobody else: the only state a testbed
    trusts (``$TMPDIR/simcoll-testbed`` may be anyone's)."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return (
        stat.S_IFMT(info.st_mode) == kind
        and info.st_uid == 0
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _state_dir() -> Path:
    for folder in STATE_DIRS:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue
        if trusted(folder, kind=stat.S_IFDIR) and os.access(folder, os.W_OK):
            return folder
    raise TestbedError(
        f"no state folder owned by root and writable only by it among "
        f"{', '.join(map(str, STATE_DIRS))}"
    )


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` atomically, so a kill never leaves half a state file; only root
    may write it (mode 0600), as :func:`trusted` requires."""
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(data, file, indent=1)
        file.flush()
        os.fsync(file.fileno())
    partial.replace(path)


def _state_files() -> Iterator[Path]:
    """State files a testbed wrote: root's, in root's folders, named by a testbed id."""
    for folder in STATE_DIRS:
        if trusted(folder, kind=stat.S_IFDIR):
            for path in sorted(folder.glob("*.json")):
                if STATE_NAME.fullmatch(path.name) and trusted(path, kind=stat.S_IFREG):
                    yield path


def cleanup_leftovers(*, force: bool = False) -> list[str]:
    """Delete what the state files of dead testbed processes list; return the names removed.

    Only root's state files in root's folders are read (:func:`trusted`), and of what they
    list only names a testbed makes (:data:`NAME_PATTERN`) are touched. A state file whose
    owner process is still running belongs to a live testbed and is left alone unless
    ``force``. Names that no longer exist are skipped silently.
    """
    removed: list[str] = []
    for path in _state_files():
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(state, dict):
            continue
        pid = state.get("pid")
        alive = isinstance(pid, int) and _proc_start_time(pid) == state.get("pid_start")
        if alive and not force:
            continue
        namespaces = testbed_names(state.get("namespaces"))
        interfaces = testbed_names(state.get("interfaces"))
        present = (set(namespaces) & _netns_list()) | (set(interfaces) & _root_links())
        left = _teardown_names(namespaces, interfaces)
        removed += sorted(present - set(left))
        if not left:
            path.unlink(missing_ok=True)
    return removed


# --------------------------------------------------------------------------------------
# The testbed
# --------------------------------------------------------------------------------------


def testbed_available() -> str | None:
    """None where a testbed can be built here, else why not (a skip reason).

    Needs root, ``ip`` and ``tc``, and ``ip netns add`` to work (it adds and deletes a
    throwaway namespace).
    """
    if os.geteuid() != 0:
        return f"the testbed needs root (network namespaces); running as uid {os.geteuid()}"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the testbed needs '{tool}' (iproute2), not found on PATH"
    probe = f"{PREFIX}probe{os.getpid() % 100000}"
    added = _run(["ip", "netns", "add", probe], check=False)
    _run(["ip", "netns", "del", probe], check=False)
    if added.returncode != 0:
        return f"'ip netns add' does not work here: {_last_line(added.stderr)}"
    return None
