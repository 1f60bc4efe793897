"""The adversarial pass of issue 41 ("One answer from every door"): thousands of generated
inputs through every door simcoll has (the command line, scenario files, topology imports,
trace replays), each run in its own process under a time and memory limit, each outcome
classified, and every number that comes out checked against physics and against the same
question asked through another door.

Run it by hand from the repository root, in the project's virtual environment (it is not
part of the test suite)::

    python validation/adversarial.py                        # 5,700 inputs, seed 41, 2 workers
    python validation/adversarial.py --seed 7 --count 300   # a smaller pass
    python validation/adversarial.py --families trace,import --count 200
    python validation/adversarial.py --spawn                # each input in `python -m simcoll`
    sh validation/results/adversarial-41/failures/<id>/repro.sh   # one failing input again

The inputs are generated from ``--seed`` alone (the same seed gives the same inputs, byte
for byte), spread over four families:

- ``cli``: ``simcoll predict`` (random and boundary values of every flag: sizes such as
  ``0``, ``8:8G``, ``1M:1GB``, ``1e300`` and negatives, ``--ranks`` beyond the GPUs,
  ``--set`` of unknown, huge, negative and NaN values, ``--fail``/``--degrade`` targets,
  ``--nccl`` knobs, ``--plan`` logs, ``--params`` and ``--placement`` files, formats,
  special files as paths), ``topo show|dump|draw``, ``plan show``, ``run`` (its flags),
  ``compare`` and ``calibrate`` (mutated measurement CSVs, sidecars and nccl-tests logs),
  and the top-level parser;
- ``scenario``: the shipped ``scenarios/*.toml`` mutated (plausible edits, bad values, bad
  and huge sweep axes, special files as paths, byte damage), each shrunk to a few points,
  run by ``simcoll run --workers 1 --max-hours 0.01``; training steps of a model file with
  an odd shape or batch (the model-shape caps); and one call asked through the Python
  doors that run it later (``predict``, the collective workload of calls back to back, a
  session where the call waits on a compute span);
- ``import``: ``topologies/examples/*.nccl.xml`` and ``*.nvsmi.txt`` mutated (attribute
  values, missing and repeated elements, huge numbers, entity tricks, byte damage), through
  ``predict``, ``topo show`` and ``plan show``;
- ``trace``: the recorded steps of ``validation/data/traces/`` mutated (NaN, negative and
  huge durations and starts, missing and repeated record-function ids, odd ranks and
  process groups, overlapping ops, cycles, byte damage), replayed by
  ``simcoll.training.trace.replay`` (the only door to trace replay; no command reaches it),
  through a small driver that turns a ``SimcollError`` into the command line's one line.

Each input runs in a child process with a 60 s limit and a 4 GiB address-space limit
(``RLIMIT_AS``). By default the child is forked from this process after it imported
simcoll (no simulation has run in it, so every child starts as a fresh ``simcoll`` would,
less the 1 s of imports) and calls ``simcoll.cli.main`` as the ``simcoll`` script does, an
uncaught exception printing its traceback; ``--spawn`` executes ``python -m simcoll``
instead. At most ``--workers`` children run at once. Outcomes:

- ``ok``: exit 0 (then the checks below);
- ``refused``: exit non-zero, exactly one ``simcoll ...: error: ...`` line on stderr of at
  most 2,000 characters, nothing else but notes, warnings and progress;
- ``traceback``: a ``Traceback``, a Python warning, a multi-line or over-long error, an
  error status with no error line, or a scenario point that failed with an internal
  exception (``TypeError: ... (at file:line)`` in ``results.jsonl``);
- ``hang``: still running after 60 s (killed with its process group), its last stderr
  line not a progress line;
- ``slow``: still running after 60 s, its last stderr line a progress bar with the time
  elapsed and left (a long ``calibrate`` fit): not a failure, listed so it can be rerun;
- ``memory``: a ``MemoryError``, killed by a signal it did not get from the harness, or
  a peak resident size over 4 GiB;
- ``wrong``: ran, but a check below failed.

Checks on what ran (``wrong`` when one fails):

- every CSV or JSON row of ``predict`` (and of a collective scenario's ``results.csv``):
  the DESIGN contract's first eight columns in order; time finite and > 0 for a size > 0;
  algbw = size / time; busbw = algbw x the nccl-tests factor; and, for the models that
  respect link capacity (``flow``, ``packet``, ``analytical``), busbw under sound physical
  bounds derived in :func:`physics_problems` from the topology's links (what every rank
  must send or receive for that collective, over its GPU's links; a ring's own traffic;
  with ``--plan rank``, the max flow between ring neighbours; the run's own byte counts);
- ``--model analytical`` within 1 % of ``--model flow`` on the single-switch shipped
  servers (dgx-a100, dgx-h100, dgx-h200, dgx-b200, pcie-4x-switch), or the row's model
  column says ``flow`` and stderr says why; and both models answer, or both refuse;
- the same command twice prints the same bytes;
- in-process :func:`simcoll.prediction.predict` gives the CLI's rows;
- ``topo dump`` read back predicts what the topology file predicts;
- the DGX H100 from its TOML, its NCCL XML dump and its ``nvidia-smi`` matrix predict the
  same rows (README: "both print the same busbw at every size");
- ``compare``'s ``points.csv``: finite positive simulated times, the errors it prints are
  sim/meas - 1 of its own columns, and, on a published log, each simulated time is what
  ``predict`` gives for that size (to 1e-9);
- one call through ``predict``, a workload of 1 to 7 calls back to back and a session
  after a wait of 0 to 100 s: the same time per call (to 1e-9; the clock's grid makes a
  later call the same run, shifted);
- a replayed trace: a finite step > 0, at least every rank's host work (its compute runs
  in order on one stream), communication and exposed communication within the step, and
  the same numbers when replayed again.

Output, in ``--out`` (default ``validation/results/adversarial-41``): ``summary.json``
(seed, wall time, counts per outcome and per family and group, every failure with its
reason), ``README.md`` (the same, short), and ``failures/<id>/`` for each failing input:
``case.json`` (task, outcome, reasons, stdout and stderr tails), its input files and
``repro.sh`` (the command, under the same limits).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import gzip
import io
import json
import math
import os
import random
import re
import resource
import shlex
import shutil
import signal
import sys
import tempfile
import time
import tomllib
import traceback
from collections import Counter
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # `python validation/adversarial.py` from anywhere

TIMEOUT_S = 60.0
MEMORY_BYTES = 4 * 2**30
CONTRACT_COLUMNS = [
    "collective",
    "algorithm",
    "protocol",
    "n_ranks",
    "size_bytes",
    "time_s",
    "algbw_bytes_per_s",
    "busbw_bytes_per_s",
]
COLLECTIVES = [
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "sendrecv",
]
ALGORITHMS = {
    "allreduce": [
        "ring",
        "tree",
        "halving_doubling",
        "hierarchical",
        "reducescatter_allgather",
        "reduce_broadcast",
        "direct",
        "nvls",
        "sharp",
    ],
    "allgather": ["ring", "halving_doubling", "bruck", "direct", "nvls"],
    "reducescatter": ["ring", "halving_doubling", "direct", "nvls"],
    "broadcast": ["ring", "tree", "direct"],
    "reduce": ["ring", "tree", "direct"],
    "alltoall": ["direct", "pairwise"],
    "gather": ["tree", "direct"],
    "scatter": ["tree", "direct"],
    "sendrecv": ["direct"],
}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
SINGLE_SWITCH = ["dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200", "pcie-4x-switch"]
SERVERS = {
    **dict.fromkeys(SINGLE_SWITCH, 8),
    "pcie-4x-switch": 4,
    "pcie-8x-rtx4090": 8,
    "dgx1-v100": 8,
}
CLUSTERS = ["h100-ib-fat-tree", "h100-rail-optimized", "a100-roce-2to1"]
#: Models whose rows must respect link capacity. ``ideal`` gives every flow its route's
#: bottleneck as if alone (no sharing, by definition above capacity when flows share a
#: link) and ``nccl`` is NCCL's own tuning model (per-channel caps, no links): neither is
#: bound by the links, so only the definitions are checked on them.
PHYSICAL_MODELS = {"flow", "packet", "analytical"}
REL = 1e-9  # definitions (algbw = size / time, busbw = algbw x factor)
BOUND_REL = 1e-6  # physical bounds
ERROR_LINE = re.compile(r"^simcoll(?: [\w-]+)*: error: |^simcoll: \d+ of \d+ point\(s\) failed")
PROGRESS_LINE = re.compile(r"^\[[#.]+\] \d+/~?\d+ .* elapsed, ~.* left$")
INFO_LINE = re.compile(
    r"^(simcoll(?: [\w-]+)*: (note|warning|wrote|timelines|compiling)\b"
    r"|estimated about |\[[#.]+\] \d+/~?\d+ |.*: \d+ point\(s\), results in "
    r"|(compare|calibrate): |no estimate for )"
)
PY_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ")


# -- inputs -------------------------------------------------------------------------------


@dataclass
class Case:
    """One generated input: the task a child runs, the files it needs, what to check."""

    id: str
    family: str
    group: str
    task: dict[str, Any]
    files: dict[str, Any] = field(default_factory=dict)  # name -> bytes | {"fifo"...}
    checks: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Stub:
    """An input not made yet: its id, family, maker (a method of :class:`Inputs`) and seed."""

    id: str
    family: str
    maker: str
    seed: str
    case: Case | None = None  # once made


@dataclass
class RunResult:
    rc: int | None
    signal: int | None
    timed_out: bool
    wall_s: float
    maxrss_bytes: int
    stdout: str
    stderr: str
    workdir: Path


@dataclass
class Verdict:
    outcome: str  # ok refused slow traceback hang memory wrong harness
    reasons: list[str] = field(default_factory=list)
    runs: int = 1
    wall_s: float = 0.0
    maxrss_bytes: int = 0


FIFO = {"fifo": True}
DIRECTORY = {"dir": True}


def sparse(size: int) -> dict[str, int]:
    return {"sparse": size}


def symlink(target: str) -> dict[str, str]:
    return {"symlink": target}


def materialize(files: dict[str, Any], where: Path) -> None:
    """Write a case's files into ``where`` (special files made as asked)."""
    for name, spec in files.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, bytes):
            path.write_bytes(spec.replace(b"{case}", bytes(where)).replace(b"{repo}", bytes(REPO)))
        elif spec.get("fifo"):
            os.mkfifo(path)
        elif spec.get("dir"):
            path.mkdir(exist_ok=True)
        elif "symlink" in spec:
            os.symlink(spec["symlink"], path)
        elif "sparse" in spec:
            with open(path, "wb") as handle:
                handle.truncate(spec["sparse"])
        else:  # pragma: no cover - a generator bug
            raise ValueError(f"unknown file spec {spec!r}")


def substitute(value: Any, case_dir: Path) -> Any:
    """``{case}`` and ``{repo}`` in every string of a task, replaced."""
    if isinstance(value, str):
        return value.replace("{case}", str(case_dir)).replace("{repo}", str(REPO))
    if isinstance(value, list):
        return [substitute(v, case_dir) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, case_dir) for k, v in value.items()}
    return value


# -- what a child runs ----------------------------------------------------------------------


def execute(task: dict[str, Any]) -> int:
    """Run one task in this (child) process and return its exit status, as the ``simcoll``
    script would: an uncaught exception prints its traceback and exits 1."""
    try:
        if task["kind"] == "cli":
            from simcoll.cli.main import main  # noqa: PLC0415

            return int(main(task["argv"]))
        return _api(task)
    except SystemExit as stop:
        if stop.code is None:
            return 0
        if isinstance(stop.code, int):
            return stop.code
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def _api(task: dict[str, Any]) -> int:
    """The Python doors: a SimcollError is the CLI's one line and status 2."""
    from simcoll.core.errors import SimcollError  # noqa: PLC0415

    try:
        if task["kind"] == "api_predict":
            sys.stdout.write(_api_predict(task["spec"], task["sizes"]))
        elif task["kind"] == "bounds":
            sys.stdout.write(json.dumps(_bounds(task)))
        elif task["kind"] == "replay":
            sys.stdout.write(json.dumps(_replay(task)))
        elif task["kind"] == "doors":
            sys.stdout.write(json.dumps(_doors(task)))
        else:
            raise ValueError(f"unknown task kind {task['kind']!r}")
    except SimcollError as error:
        print(f"simcoll: error: {error}", file=sys.stderr)
        return 2
    return 0


def _api_predict(spec: dict[str, Any], sizes: list[int]) -> str:
    """``simcoll.prediction.predict`` with what the command line was given, as CSV."""
    from simcoll.output.results import to_csv  # noqa: PLC0415
    from simcoll.plan.tuning import parse_nccl_knobs  # noqa: PLC0415
    from simcoll.prediction import predict  # noqa: PLC0415
    from simcoll.topology import gpu_nodes, load, parse_overrides  # noqa: PLC0415
    from simcoll.topology.calibration import read_calibration  # noqa: PLC0415

    graph = load(spec["topology"], parse_overrides(spec.get("set", [])))
    params = spec.get("params")
    calibration: Any = (
        "default" if params is None else None if params == "none" else read_calibration(params)
    )
    knobs = {
        "n_channels": "channels",
        "n_chunks": "chunks",
        "max_in_flight": "window",
        "root": "root",
    }
    protocol = spec.get("protocol", "auto")
    prediction = predict(
        graph,
        spec["collective"],
        sizes,
        algorithm=spec.get("algorithm"),
        protocol=None if protocol == "none" else protocol,
        model=spec.get("model", "flow"),
        n_ranks=int(spec["ranks"]) if spec.get("ranks") else len(gpu_nodes(graph)),
        params={k: int(spec[v]) for k, v in knobs.items() if spec.get(v) is not None},
        calibration=calibration,
        placement=spec.get("placement", "linear"),
        plan=spec.get("plan", "nccl"),
        knobs=parse_nccl_knobs(spec.get("nccl", [])),
        in_place=bool(spec.get("in_place")),
    )
    return to_csv(prediction.rows)


def _bounds(task: dict[str, Any]) -> dict[str, Any]:
    """What the physical bounds need from a topology: per GPU the sum of the bandwidths of
    the links leaving it and entering it, the fastest link, and (``pairs``) the max flow
    between ring neighbours of the linear placement with no other GPU forwarding."""
    import networkx as nx  # noqa: PLC0415

    from simcoll.plan.placement import place_ranks  # noqa: PLC0415
    from simcoll.topology import gpu_nodes, load, parse_overrides  # noqa: PLC0415

    graph = load(task["topology"], parse_overrides(task.get("set", [])))
    gpus = list(gpu_nodes(graph))
    bw = "bandwidth_bytes_per_s"
    out = {g: sum(float(d[bw]) for _, _, d in graph.out_edges(g, data=True)) for g in gpus}
    inn = {g: sum(float(d[bw]) for _, _, d in graph.in_edges(g, data=True)) for g in gpus}
    result: dict[str, Any] = {
        "n_gpus": len(gpus),
        "max_out": max(out.values(), default=0.0),
        "max_in": max(inn.values(), default=0.0),
        "max_link": max((float(d[bw]) for _, _, d in graph.edges(data=True)), default=0.0),
    }
    n = int(task.get("ranks") or len(gpus))
    if task.get("pairs") and n >= 2:
        nodes = list(place_ranks(graph, n, "linear"))
        flows = []
        for r in range(n):
            a, b = nodes[r], nodes[(r + 1) % n]
            keep = [
                v
                for v in graph
                if v in (a, b)
                or graph.nodes[v].get("kind") is None
                or str(getattr(graph.nodes[v]["kind"], "value", graph.nodes[v]["kind"])) != "gpu"
            ]
            sub = graph.subgraph(keep)
            flows.append(float(nx.maximum_flow_value(sub, a, b, capacity=bw)))
        result["ring_pair_flow_min"] = min(flows) if flows else None
    return result


def _doors(task: dict[str, Any]) -> dict[str, Any]:
    """One call asked through three Python doors: ``predict``; the collective workload of
    ``iterations`` calls back to back (each call after the one before: run later); and a
    session where the call waits for ``wait_s`` of compute on its ranks (the same run,
    shifted by that wait on the clock's grid)."""
    from simcoll.network.clock import on_grid  # noqa: PLC0415
    from simcoll.prediction import predict  # noqa: PLC0415
    from simcoll.prediction.session import Session  # noqa: PLC0415
    from simcoll.scenarios.workloads import run_workload  # noqa: PLC0415
    from simcoll.topology import gpu_nodes, load, parse_overrides  # noqa: PLC0415

    graph = load(task["topology"], parse_overrides(task.get("set", [])))
    n = int(task.get("ranks") or len(gpu_nodes(graph)))
    call = {
        "algorithm": task.get("algorithm"),
        "protocol": task.get("protocol", "auto"),
        "calibration": task.get("calibration", "default"),
    }
    c, size = task["collective"], int(task["size_bytes"])
    row = predict(graph, c, [size], n_ranks=n, **call).rows[0]
    metrics = run_workload(
        "collective",
        graph,
        collective=c,
        size_bytes=size,
        n_ranks=n,
        iterations=task["iterations"],
        **call,
    ).metrics
    session = Session(graph, protocol=call["protocol"], calibration=call["calibration"])
    wait = session.compute(range(n), task["wait_s"], "wait")
    session.collective(c, size, range(n), algorithm=call["algorithm"], after=[wait])
    end = session.run().time_s
    return {
        "predict_s": row.time_s,
        "algorithm": row.algorithm,
        "protocol": row.protocol,
        "workload_time_s": metrics["time_s"],
        "workload_iteration_s": metrics.get("iteration_time_s"),
        "shift_s": on_grid(task["wait_s"]),
        "session_end_s": end,
    }


def _replay(task: dict[str, Any]) -> dict[str, Any]:
    """``simcoll.training.trace.replay`` of the given traces, and per rank the host work
    its trace holds (compute durations and the issue time of its calls)."""
    from simcoll.topology import load, parse_overrides  # noqa: PLC0415
    from simcoll.training.trace import (  # noqa: PLC0415
        CollectiveOp,
        ComputeOp,
        read_execution_trace,
        replay,
    )

    traces = [
        read_execution_trace(et, kineto=kineto, step=task.get("step"))
        for et, kineto in task["traces"]
    ]
    graph = load(task["topology"], parse_overrides(task.get("set", [])))
    result = replay(
        traces,
        graph,
        calibration=task.get("calibration", "default"),
        backend=task.get("backend", "gloo"),
    )
    host = [
        sum(op.duration_s for op in t.ops if isinstance(op, ComputeOp))
        + sum(op.issue_s for op in t.ops if isinstance(op, CollectiveOp))
        for t in traces
    ]
    return {
        "step_s": result.step_s,
        "compute_s": list(result.compute_s),
        "comm_s": list(result.comm_s),
        "exposed_comm_s": list(result.exposed_comm_s),
        "host_s": host,
        "measured_step_s": result.measured_step_s,
    }


# -- running children -----------------------------------------------------------------------


@dataclass
class RunSpec:
    task: dict[str, Any]
    workdir: Path


@dataclass
class _Active:
    flow: Generator[RunSpec, RunResult, Verdict]
    case: Any  # what the caller's ``done`` gets back
    spec: RunSpec
    started: float
    out: Path
    err: Path
    timed_out: bool = False
    runs: int = 1
    wall_s: float = 0.0
    maxrss: int = 0


class Runner:
    """At most ``workers`` children at once, each a task under the time and memory limits;
    each case a generator that yields the runs it needs and returns its verdict."""

    def __init__(
        self, workers: int, *, spawn: bool, timeout_s: float, memory_bytes: int, scratch: Path
    ) -> None:
        self.workers = workers
        self.spawn = spawn
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self.scratch = scratch
        self._serial = 0

    def _start(self, spec: RunSpec) -> tuple[int, Path, Path]:
        self._serial += 1
        out = self.scratch / f"_io/{self._serial}.out"
        err = self.scratch / f"_io/{self._serial}.err"
        out.parent.mkdir(parents=True, exist_ok=True)
        task = substitute(spec.task, spec.workdir)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child
            status = 70
            try:
                os.setpgid(0, 0)
                resource.setrlimit(resource.RLIMIT_AS, (self.memory_bytes, self.memory_bytes))
                os.chdir(spec.workdir)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
                os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
                if self.spawn:
                    argv = (
                        [sys.executable, "-m", "simcoll", *task["argv"]]
                        if task["kind"] == "cli"
                        else [
                            sys.executable,
                            str(Path(__file__).resolve()),
                            "--task-json",
                            json.dumps(task),
                        ]
                    )
                    env = dict(os.environ, PYTHONPATH=str(REPO))
                    os.execve(argv[0], argv, env)
                status = execute(task)
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(status)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        return pid, out, err

    def run(  # noqa: PLR0915 - a branch per kind of input
        self,
        cases: Iterable[tuple[Any, Generator[RunSpec, RunResult, Verdict]]],
        done: Callable[[Any, Verdict], None],
    ) -> None:
        queue = iter(cases)  # taken one at a time: an input is made when it starts
        active: dict[int, _Active] = {}
        more = True
        while more or active:
            while more and len(active) < self.workers:
                item = next(queue, None)
                if item is None:
                    more = False
                    break
                case, flow = item
                try:
                    spec = next(flow)
                except StopIteration as stop:
                    done(case, stop.value)
                    continue
                except Exception:
                    done(case, Verdict("harness", [traceback.format_exc(limit=3)]))
                    continue
                pid, out, err = self._start(spec)
                active[pid] = _Active(flow, case, spec, time.monotonic(), out, err)
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                now = time.monotonic()
                for child, state in active.items():
                    if not state.timed_out and now - state.started > self.timeout_s:
                        state.timed_out = True
                        _kill_group(child)
                time.sleep(0.01)
                continue
            if pid not in active:
                continue
            state = active.pop(pid)
            _kill_group(pid)  # whatever it left behind in its group (sweep workers)
            wall = time.monotonic() - state.started
            result = RunResult(
                rc=os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
                signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                timed_out=state.timed_out,
                wall_s=wall,
                maxrss_bytes=usage.ru_maxrss * 1024,
                stdout=_read_text(state.out),
                stderr=_read_text(state.err),
                workdir=state.spec.workdir,
            )
            state.out.unlink(missing_ok=True)
            state.err.unlink(missing_ok=True)
            state.wall_s += wall
            state.maxrss = max(state.maxrss, result.maxrss_bytes)
            try:
                spec = state.flow.send(result)
            except StopIteration as stop:
                verdict: Verdict = stop.value
                verdict.runs, verdict.wall_s = state.runs, state.wall_s
                verdict.maxrss_bytes = state.maxrss
                done(state.case, verdict)
                continue
            except Exception:
                done(state.case, Verdict("harness", [traceback.format_exc(limit=3)]))
                continue
            new_pid, out, err = self._start(spec)
            state.spec, state.started, state.out, state.err = spec, time.monotonic(), out, err
            state.timed_out, state.runs = False, state.runs + 1
            active[new_pid] = state


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _read_text(path: Path, limit: int = 4 * 2**20) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


# -- classifying ----------------------------------------------------------------------------


def classify(result: RunResult) -> Verdict:
    """ok, refused, traceback, hang or memory, from the exit and stderr alone."""
    if result.timed_out:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        if lines and PROGRESS_LINE.match(lines[-1]):
            # a long fit that says how far it is and how long it has left is not stuck
            return Verdict("slow", [f"killed at {TIMEOUT_S:.0f} s while reporting: {lines[-1]}"])
        return Verdict("hang", [f"still running after {TIMEOUT_S:.0f} s"])
    err = result.stderr
    if "MemoryError" in err:
        return Verdict("memory", ["MemoryError"])
    if result.signal is not None:
        return Verdict("memory", [f"killed by signal {result.signal}"])
    if result.maxrss_bytes > MEMORY_BYTES:
        return Verdict("memory", [f"peak RSS {result.maxrss_bytes / 2**30:.2f} GiB"])
    if "Traceback (most recent call last)" in err:
        return Verdict("traceback", [_last_lines(err, 6)])
    lines = [line for line in err.splitlines() if line.strip()]
    warnings = [line for line in lines if PY_WARNING.match(line)]
    if warnings:
        return Verdict("traceback", [f"Python warning on stderr: {warnings[0][:300]}"])
    if result.rc == 0:
        return Verdict("ok")
    errors = [line for line in lines if ERROR_LINE.match(line)]
    others = [line for line in lines if not ERROR_LINE.match(line) and not INFO_LINE.match(line)]
    if not errors:
        return Verdict(
            "traceback", [f"exit {result.rc} with no error line: {_last_lines(err, 3)!r}"]
        )
    if len(errors) > 1 or others:
        return Verdict("traceback", [f"multi-line error: {_last_lines(err, 4)!r}"])
    if len(errors[0]) > 2100:
        return Verdict("traceback", [f"error line of {len(errors[0])} characters"])
    return Verdict("refused", [errors[0][:300]])


def _last_lines(text: str, n: int) -> str:
    return "\n".join(text.strip().splitlines()[-n:])[-1500:]


# -- checks ---------------------------------------------------------------------------------


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor (DESIGN.md), derived here, not imported."""
    if collective == "allreduce":
        return 2 * (n - 1) / n
    if collective in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    return 1.0  # broadcast, reduce, sendrecv


def parse_rows(stdout: str, fmt: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The header and rows of ``predict``'s CSV or JSON."""
    if fmt == "json":
        data = json.loads(stdout) if stdout.strip() else []
        rows = data if isinstance(data, list) else data.get("rows", [])
        header = list(rows[0]) if rows else []
        return header, rows
    reader = csv.reader(io.StringIO(stdout))
    table = list(reader)
    if not table:
        return [], []
    header = table[0]
    return header, [dict(zip(header, line, strict=False)) for line in table[1:] if line]


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def physics_problems(  # noqa: PLR0912 - a branch per kind of input
    row: dict[str, Any], bounds: dict[str, Any] | None, *, ring_pairs: bool = False
) -> list[str]:
    """What is physically impossible or inconsistent in one result row.

    The bounds are lower bounds on the time, turned into upper bounds on busbw. Each one is
    sound for any algorithm it is applied to, whatever the routes, channels or protocol (a
    protocol adds wire bytes, calibration only slows a link, never speeds it): B_out and
    B_in are the largest, over every GPU of the topology, sum of the bandwidths of the
    links leaving (entering) a GPU, so whichever GPUs the ranks sit on, no rank can send
    (receive) faster. S is the size in nccl-tests' convention, n the ranks.

    - allreduce: every element of a rank's input must leave it at least once (each other
      rank needs it in its sum) and every element of the result must reach it at least
      once, so T >= S / B_out and T >= S / B_in: busbw <= 2(n-1)/n x B. A ring (and
      reduce-scatter + all-gather, and halving-doubling on a power of two) moves exactly
      2(n-1)/n x S out of and into every rank: busbw <= B_out and <= B_in;
    - allgather: every rank receives the n-1 blocks it lacks, (n-1)/n x S: busbw <= B_in;
    - reducescatter: every rank sends something for each element of the n-1 blocks that
      others own, (n-1)/n x S: busbw <= B_out (also with in-network reduction);
    - alltoall: every rank sends and receives (n-1)/n x S: busbw <= B_out, <= B_in;
    - broadcast: every other rank receives S, the root sends at least S: busbw <= B_in,
      <= B_out; reduce: the root receives at least S, every other rank sends S;
    - gather: the root receives (n-1)/n x S: busbw <= B_in; scatter: the root sends it;
    - sendrecv: every rank sends S to its peer and receives S: busbw <= B_out, <= B_in;
    - a ring all-reduce, all-gather or reduce-scatter on ``--plan rank`` with the linear
      placement sends all its data from rank r to rank r+1: busbw <= the least, over r, max
      flow from r's GPU to r+1's with no other GPU forwarding (the "slowest link on its
      ring", generalised to any routing, multipath included);
    - the run's own counts (flow and packet): a link cannot carry its bytes faster than its
      bandwidth, nor a rank send or receive faster than its links: T >= max_link_bytes /
      the fastest link, T >= max_rank_sent_bytes / B_out, T >= max_rank_received_bytes / B_in.
    """
    problems: list[str] = []
    coll = str(row.get("collective"))
    n = int(_num(row.get("n_ranks")))
    size = _num(row.get("size_bytes"))
    t = _num(row.get("time_s"))
    algbw = _num(row.get("algbw_bytes_per_s"))
    busbw = _num(row.get("busbw_bytes_per_s"))
    model = str(row.get("model", ""))
    algorithm = str(row.get("algorithm", ""))
    where = f"{coll}/{algorithm}/{row.get('protocol')} n={n} size={int(size)} model={model}"
    for name, value in (("time_s", t), ("algbw", algbw), ("busbw", busbw)):
        if not math.isfinite(value) or value < 0:
            problems.append(f"{where}: {name} = {value!r}")
    if problems:
        return problems
    if n == 1 and t == 0 and algbw == 0 and busbw == 0:
        # One rank moves nothing over a link; on bare links (no launch cost or floor in a
        # params file) its call takes 0 s, and simcoll prints algbw 0 rather than size/0.
        return problems
    if size > 0 and not t > 0:
        problems.append(f"{where}: time {t} for a size > 0")
        return problems
    if t > 0 and not _close(algbw, size / t, REL):
        problems.append(f"{where}: algbw {algbw} != size/time {size / t}")
    if n >= 1 and not _close(busbw, algbw * busbw_factor(coll, n), REL):
        problems.append(f"{where}: busbw {busbw} != algbw x {busbw_factor(coll, n):.6g}")
    if bounds is None or model not in PHYSICAL_MODELS or n < 2 or size <= 0:
        return problems
    out, inn = bounds["max_out"], bounds["max_in"]
    f = busbw_factor(coll, n)
    limits: list[tuple[float, str]] = []
    if coll == "allreduce":
        limits += [(f * out, "2(n-1)/n x B_out"), (f * inn, "2(n-1)/n x B_in")]
        pow2 = n & (n - 1) == 0
        if algorithm in ("ring", "reducescatter_allgather") or (
            algorithm == "halving_doubling" and pow2
        ):
            limits += [(out, "B_out (ring traffic)"), (inn, "B_in (ring traffic)")]
    elif coll in ("allgather", "gather"):
        limits.append((inn, "B_in"))
    elif coll in ("reducescatter", "scatter"):
        limits.append((out, "B_out"))
    else:  # alltoall, broadcast, reduce, sendrecv
        limits += [(out, "B_out"), (inn, "B_in")]
    if (
        ring_pairs
        and algorithm == "ring"
        and coll in ("allreduce", "allgather", "reducescatter")
        and bounds.get("ring_pair_flow_min")
    ):
        limits.append((bounds["ring_pair_flow_min"], "least max flow between ring neighbours"))
    for limit, why in limits:
        if busbw > limit * (1 + BOUND_REL):
            problems.append(
                f"{where}: busbw {busbw / 1e9:.6g} GB/s above {why} = {limit / 1e9:.6g} GB/s"
            )
    if model in ("flow", "packet") and t > 0:
        counted = (
            ("max_link_bytes", bounds["max_link"], "the fastest link"),
            ("max_rank_sent_bytes", out, "B_out"),
            ("max_rank_received_bytes", inn, "B_in"),
        )
        for column, bandwidth, why in counted:
            moved = _num(row.get(column))
            if math.isfinite(moved) and moved / t > bandwidth * (1 + BOUND_REL):
                problems.append(
                    f"{where}: {column} {moved:.6g} in {t:.6g} s is "
                    f"{moved / t / 1e9:.6g} GB/s, above {why} "
                    f"{bandwidth / 1e9:.6g} GB/s"
                )
    return problems


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def same_rows(
    a: list[dict[str, Any]],
    b: list[dict[str, Any]],
    rel: float = REL,
    columns: tuple[str, ...] = ("time_s", "algbw_bytes_per_s", "busbw_bytes_per_s"),
    keys: tuple[str, ...] = ("collective", "n_ranks", "size_bytes", "algorithm", "protocol"),
) -> list[str]:
    """Where two row lists differ (their keys, or a number beyond ``rel``)."""
    if len(a) != len(b):
        return [f"{len(a)} rows against {len(b)}"]
    problems = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        for key in keys:
            if str(x.get(key)) != str(y.get(key)):
                problems.append(f"row {i}: {key} {x.get(key)!r} against {y.get(key)!r}")
        for column in columns:
            if not _close(_num(x.get(column)), _num(y.get(column)), rel):
                problems.append(
                    f"row {i} ({x.get('size_bytes')} B): {column} "
                    f"{x.get(column)} against {y.get(column)}"
                )
    return problems[:5]


# -- the flow of one case ---------------------------------------------------------------------


class Checker:
    """Each case's runs and checks; bounds computed once per topology and kept."""

    def __init__(self, scratch: Path, inputs: Inputs) -> None:
        self.scratch = scratch
        self.inputs = inputs
        self.bounds: dict[str, dict[str, Any] | None] = {}
        self.checked: Counter[str] = Counter()  # cases that ran, and were checked so

    def flow(self, stub: Stub) -> Generator[RunSpec, RunResult, Verdict]:
        stub.case = case = self.inputs.make(stub)
        workdir = self.scratch / case.id
        workdir.mkdir(parents=True, exist_ok=True)
        materialize(case.files, workdir)
        try:
            return (yield from self._flow(case, workdir))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _flow(self, case: Case, workdir: Path) -> Generator[RunSpec, RunResult, Verdict]:  # noqa: PLR0912 - a branch per kind of input
        first = yield RunSpec(case.task, workdir)
        verdict = classify(first)
        case.meta["_first"] = first
        if "pair" in case.checks:  # both doors answer, or both refuse
            flow_task = copy.deepcopy(case.task)
            argv = flow_task["argv"]
            argv[argv.index("--model") + 1] = "flow"
            other = yield RunSpec(flow_task, workdir)
            other_verdict = classify(other)
            if verdict.outcome in ("ok", "refused") and other_verdict.outcome in ("ok", "refused"):
                too_large = "one schedule may hold" in " ".join(other_verdict.reasons)
                if verdict.outcome != other_verdict.outcome and not too_large:
                    # (a schedule too large to simulate is refused by the flow model only:
                    # the formula needs no schedule, by design)
                    said = (verdict if verdict.outcome == "refused" else other_verdict).reasons
                    return Verdict(
                        "wrong",
                        [
                            f"--model analytical {verdict.outcome}, --model "
                            f"flow {other_verdict.outcome}: {said[0]}"
                        ],
                    )
            elif other_verdict.outcome not in ("ok", "refused"):
                return Verdict(
                    other_verdict.outcome, ["(the --model flow run) ", *other_verdict.reasons]
                )
            if verdict.outcome == "ok" and other_verdict.outcome == "ok" and not too_large:
                problems = _pair_problems(first, other)
                if problems:
                    return Verdict("wrong", problems)
        if verdict.outcome == "refused" and "scenario" in case.checks:
            # a run whose points failed exits 1 with one line; each point's own error is in
            # results.jsonl, and one raised inside simcoll is a traceback swallowed there
            problems = self._check_scenario(case, first, workdir)
            internal = [p for p in problems if "inside simcoll" in p or "multi-line" in p]
            if internal:
                return Verdict("traceback", internal)
            errors = case.meta.get("point_errors")
            if errors:
                verdict.reasons = [f"{verdict.reasons[0]} (first point: {errors[0][:200]})"]
        if verdict.outcome != "ok":
            return verdict
        problems = []
        for check in case.checks:
            self.checked[check] += 1
            if check == "pair":
                continue
            found = getattr(self, f"_check_{check}")(case, first, workdir)
            if not isinstance(found, list):  # a check that runs more tasks
                found = yield from found
            problems += found
        return Verdict("wrong", problems) if problems else verdict

    # each check: a generator that may run more tasks, returning its problems

    def _get_bounds(
        self, topology: str, sets: list[str], ranks: Any, pairs: bool, workdir: Path
    ) -> Generator[RunSpec, RunResult, dict[str, Any] | None]:
        key = json.dumps([topology, sets, ranks if pairs else None, pairs])
        if key not in self.bounds:
            task = {
                "kind": "bounds",
                "topology": topology,
                "set": sets,
                "ranks": ranks,
                "pairs": pairs,
            }
            result = yield RunSpec(task, workdir)
            self.bounds[key] = json.loads(result.stdout) if result.rc == 0 else None
        return self.bounds[key]

    def _check_physics(
        self, case: Case, first: RunResult, workdir: Path
    ) -> Generator[RunSpec, RunResult, list[str]]:
        spec = case.meta["spec"]
        fmt = spec.get("format", "table")
        if fmt not in ("csv", "json"):
            return []
        try:
            header, rows = parse_rows(first.stdout, fmt)
        except (ValueError, csv.Error) as error:
            return [f"output does not parse as {fmt}: {error}"]
        problems = []
        if rows and header[: len(CONTRACT_COLUMNS)] != CONTRACT_COLUMNS:
            problems.append(f"columns {header[:8]} are not the contract's {CONTRACT_COLUMNS}")
        ring_pairs = (
            spec.get("plan") == "rank"
            and spec.get("placement", "linear") == "linear"
            and not spec.get("degrade")
            and not spec.get("fail")
        )
        topology = spec["topology"].replace("{case}", str(workdir))
        bounds = yield from self._get_bounds(
            topology, spec.get("set", []), spec.get("ranks"), ring_pairs, workdir
        )
        if bounds is None:
            problems.append("the topology that predicted could not be loaded for its bounds")
        for row in rows:
            problems += physics_problems(row, bounds, ring_pairs=ring_pairs)
        return problems[:8]

    def _check_twice(
        self, case: Case, first: RunResult, workdir: Path
    ) -> Generator[RunSpec, RunResult, list[str]]:
        again = yield RunSpec(case.task, workdir)
        if again.rc != first.rc or again.stdout != first.stdout:
            diff = next(
                (
                    f"{x!r} / {y!r}"
                    for x, y in zip(
                        first.stdout.splitlines(), again.stdout.splitlines(), strict=False
                    )
                    if x != y
                ),
                "",
            )
            return [
                f"the same command twice: exit {first.rc}/{again.rc}, output differs: {diff[:400]}"
            ]
        return []

    def _check_api(
        self, case: Case, first: RunResult, workdir: Path
    ) -> Generator[RunSpec, RunResult, list[str]]:
        spec = case.meta["spec"]
        _, rows = parse_rows(first.stdout, "csv")
        if not rows:
            return []
        task = {"kind": "api_predict", "spec": spec, "sizes": [int(r["size_bytes"]) for r in rows]}
        result = yield RunSpec(task, workdir)
        verdict = classify(result)
        if verdict.outcome != "ok":
            return [
                f"in-process predict {verdict.outcome} where the CLI answered: "
                f"{verdict.reasons[0] if verdict.reasons else ''}"
            ]
        _, api_rows = parse_rows(result.stdout, "csv")
        return [
            f"in-process predict differs from the CLI: {p}"
            for p in same_rows(rows, api_rows, rel=0.0)
        ]

    def _check_same_as(
        self, case: Case, first: RunResult, workdir: Path
    ) -> Generator[RunSpec, RunResult, list[str]]:
        """Another door (a dumped topology read back, an imported dump) asked the same."""
        if "same_as_first" in case.meta:  # the reference is another command than the case's
            first = yield RunSpec(case.meta["same_as_first"], workdir)
            verdict = classify(first)
            if verdict.outcome != "ok":
                return [] if verdict.outcome == "refused" else [f"reference run {verdict.outcome}"]
        _, rows = parse_rows(first.stdout, "csv")
        problems = []
        for other_task, label, rel in case.meta["same_as"]:
            result = yield RunSpec(other_task, workdir)
            verdict = classify(result)
            if verdict.outcome != "ok":
                problems.append(
                    f"{label}: {verdict.outcome} where the first door answered: "
                    f"{verdict.reasons[0] if verdict.reasons else ''}"
                )
                continue
            _, other = parse_rows(result.stdout, "csv")
            problems += [f"{label}: {p}" for p in same_rows(rows, other, rel=rel)]
        return problems

    def _check_scenario(self, case: Case, first: RunResult, workdir: Path) -> list[str]:
        """A run's points: no internal exception; collective rows physically consistent."""
        problems: list[str] = []
        out = workdir / "out"
        jsonl = out / "results.jsonl"
        if jsonl.is_file():
            for line in jsonl.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                error = str(record.get("error") or "")
                if error and record.get("status") == "error":
                    case.meta.setdefault("point_errors", []).append(error)
                if re.match(r"^\w+(Error|Exception|Warning)\b.*\(at \S+:\d+\)$", error, re.S):
                    case.meta["internal"] = error
                    problems.append(
                        f"point {record.get('index')} failed inside simcoll: {error[:300]}"
                    )
                elif "\n" in error:
                    problems.append(
                        f"point {record.get('index')}: multi-line error {error[:300]!r}"
                    )
        results = out / "results.csv"
        if results.is_file():
            _, rows = parse_rows(results.read_text(errors="replace"), "csv")
            for row in rows:
                if row.get("collective") in COLLECTIVES and row.get("busbw_bytes_per_s"):
                    problems += physics_problems(row, None)
        return problems[:8]

    def _check_compare(self, case: Case, first: RunResult, workdir: Path) -> list[str]:
        points = workdir / "cmp" / "points.csv"
        if not points.is_file():
            return []
        _, rows = parse_rows(points.read_text(errors="replace"), "csv")
        problems = []
        for row in rows:
            meas, sim = _num(row.get("measured_s")), _num(row.get("simulated_s"))
            err = _num(row.get("time_error"))
            if not (math.isfinite(sim) and sim > 0):
                problems.append(
                    f"simulated_s {row.get('simulated_s')!r} at {row.get('size_bytes')} B"
                )
            elif math.isfinite(meas) and meas > 0 and not _close(err, sim / meas - 1, 1e-6):
                problems.append(f"time_error {err} != sim/meas - 1 = {sim / meas - 1}")
        return problems[:5]

    def _check_doors(self, case: Case, first: RunResult, workdir: Path) -> list[str]:
        return _doors_problems(first, case.task)

    def _check_compare_predict(
        self, case: Case, first: RunResult, workdir: Path
    ) -> Generator[RunSpec, RunResult, list[str]]:
        """compare's simulated time of each measured point is predict's for that size."""
        points = workdir / "cmp" / "points.csv"
        if not points.is_file():
            return ["compare wrote no points.csv"]
        _, rows = parse_rows(points.read_text(errors="replace"), "csv")
        sizes = sorted({int(r["size_bytes"]) for r in rows if int(r["size_bytes"]) > 0})
        if not sizes:
            return []
        n_ranks = sorted({r["n_ranks"] for r in rows})
        argv = [*case.meta["predict"], "--sizes", ",".join(map(str, sizes)), "--ranks", n_ranks[0]]
        result = yield RunSpec({"kind": "cli", "argv": argv}, workdir)
        verdict = classify(result)
        if verdict.outcome != "ok":
            return [
                f"predict of compare's sizes: {verdict.outcome}: {(verdict.reasons or [''])[0]}"
            ]
        _, predicted = parse_rows(result.stdout, "csv")
        by_size = {int(r["size_bytes"]): _num(r["time_s"]) for r in predicted}
        problems = []
        for r in rows:
            size, simulated = int(r["size_bytes"]), _num(r["simulated_s"])
            if size in by_size and not _close(simulated, by_size[size], 1e-9):
                problems.append(f"{size} B: compare simulated {simulated!r} s, predict "
                                f"{by_size[size]!r} s")  # fmt: skip
        return problems[:5]

    def _check_replay(
        self, case: Case, first: RunResult, workdir: Path
    ) -> Generator[RunSpec, RunResult, list[str]]:
        try:
            data = json.loads(first.stdout)
        except ValueError as error:
            return [f"replay printed no JSON: {error}"]
        step = _num(data.get("step_s"))
        problems = []
        if not (math.isfinite(step) and step > 0):
            problems.append(f"step_s {data.get('step_s')!r}")
            return problems
        for r, host in enumerate(data.get("host_s", [])):
            if host > step * (1 + 1e-9) + 1e-12:
                problems.append(f"rank {r}: host work {host:.9g} s in its trace, step {step:.9g} s")
        for name in ("compute_s", "comm_s", "exposed_comm_s"):
            for r, value in enumerate(data.get(name, [])):
                if not (math.isfinite(value) and 0 <= value <= step * (1 + 1e-9) + 1e-12):
                    problems.append(f"rank {r}: {name} {value!r} outside [0, step {step:.9g}]")
        again = yield RunSpec(case.task, workdir)
        if again.stdout != first.stdout:
            problems.append("the same replay twice gave different numbers")
        return problems[:6]


def _doors_problems(first: RunResult, task: dict[str, Any]) -> list[str]:
    """The call's time through every door: the workload's per-call time and the session's
    call after its wait are ``predict``'s (to 1e-9, as tests/prediction/test_one_path.py
    holds them on one call at 0; here later, and after a wait)."""
    data = json.loads(first.stdout)
    t = data["predict_s"]
    problems = []
    label = f"{task['collective']} {task['size_bytes']} B on {task['topology']}"
    per_call = data["workload_iteration_s"] or data["workload_time_s"] / task["iterations"]
    if not _close(per_call, t, 1e-9):
        problems.append(
            f"{label}: {task['iterations']} calls back to back take {per_call!r} "
            f"each, predict {t!r} ({per_call / t - 1:+.3g})"
        )
    shifted = data["session_end_s"] - data["shift_s"]
    if abs(shifted - t) > 1e-9 * t + 4 * 2.0**-50 * max(1.0, data["session_end_s"] / 8):
        problems.append(
            f"{label}: after a wait of {task['wait_s']!r} s the call takes "
            f"{shifted!r}, predict {t!r} ({shifted / t - 1:+.3g})"
        )
    return problems


def _pair_problems(analytical: RunResult, flow: RunResult) -> list[str]:
    """--model analytical within 1 % of --model flow, or the row is the flow model's and
    stderr says so."""
    _, a_rows = parse_rows(analytical.stdout, "csv")
    _, f_rows = parse_rows(flow.stdout, "csv")
    if len(a_rows) != len(f_rows):
        return [f"analytical printed {len(a_rows)} rows, flow {len(f_rows)}"]
    problems = []
    for a, f in zip(a_rows, f_rows, strict=True):
        ta, tf = _num(a.get("time_s")), _num(f.get("time_s"))
        label = f"{a.get('collective')} {a.get('size_bytes')} B"
        if a.get("model") == "flow":
            if "flow model costed it" not in analytical.stderr:
                problems.append(f"{label}: row's model is flow with no note on stderr")
            continue
        if a.get("model") != "analytical":
            problems.append(f"{label}: model column {a.get('model')!r}")
        elif not (
            math.isfinite(ta)
            and math.isfinite(tf)
            and (abs(ta / tf - 1) <= 0.01 if tf > 0 else ta == tf)
        ):
            problems.append(
                f"{label}: analytical {a.get('algorithm')}/{a.get('protocol')} "
                f"{ta * 1e6:.4g} us, flow {f.get('algorithm')}/{f.get('protocol')} "
                f"{tf * 1e6:.4g} us"
            )
    return problems[:5]


# -- generating inputs ----------------------------------------------------------------------

BAD_NUMBERS = [
    "0",
    "-1",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e308",
    "1e309",
    "1e-308",
    "9223372036854775808",
    "18446744073709551617",
    "1e30",
    "-0",
    "0.5",
    "x",
    "",
    " ",
    "1_000",
    "0x10",
    "true",
    "1e-30",
    "2^10",
    "٣",
    "1" * 400,
]
BAD_QUANTITIES = [
    "0 GB/s",
    "-1 GB/s",
    "nan GB/s",
    "inf GB/s",
    "1e308 GB/s",
    "1e-308 GB/s",
    "12 parsecs",
    "GB/s",
    "1 GB/h",
    "100",
    "1 us",
    "-1 us",
    "nan us",
    "1e300 s",
    "1e-300 s",
    "400 Gbit/s",
    "1e30 Tbit/s",
    "",
    "100 GB/s/s",
]
GOOD_SIZES = [
    "1K",
    "1M",
    "4096",
    "64K",
    "16M",
    "1K,1M",
    "8,1K,64K",
    "1M,16M,64M",
    "256M",
    "8:1M",
    "1K:64M:4",
    "1K:1G:16",
    "1 GB",
    "1G",
    "100000",
    "4M",
    "12",
    "1K:4K",
]
BIG_SIZES = ["8:8G", "1G,4G", "1M:1GB", "1K:8G:8"]
BAD_SIZES = [
    "0",
    "-1",
    "-1K",
    "1e300",
    "1e3",
    "8:8G:1",
    "8:8G:0",
    "8:8G:-2",
    "1M:1K",
    "abc",
    "",
    " ",
    "1.5K",
    "nan",
    "inf",
    "9007199254740993",
    "9007199254740992",
    "18446744073709551616",
    "2^10",
    "0x10",
    "1K,,2K",
    "1K:",
    ":1K",
    "1:2:3:4",
    "8:8G:1.0000001",
    "1:9007199254740992:1.001",
    "1e15",
    "8E",
    "8P",
    "1 TB",
    "1KB:1GB:1.5",
    "\uff11K",  # a full-width digit
    "1K\n1M",
    "8:8G:2.5",
    "9 PiB",
    "8 PiB",
    "1,2,3,-4",
    "0:0",
    "0:1K",
    "1K:1K",
    "7",
    "3",
    "1 kB",
    "1 KiB",
    "1 Kb",
    ",".join(["1K"] * 5000),
    "1:8G:1.00001",
    "1:2:nan",
    "1:2:inf",
    "1K;1M",
    "1K 1M",
]
BAD_INTS = [
    "0",
    "-1",
    "x",
    "2.5",
    "1e3",
    "",
    "99999999999999999999",
    "65",
    "4097",
    "1073741825",
    "32769",
]
NCCL_BAD = [
    "NCCL_MIN_NCHANNELS=0",
    "NCCL_MIN_NCHANNELS=-1",
    "NCCL_MIN_NCHANNELS=1e9",
    "NCCL_MAX_NCHANNELS=x",
    "NCCL_MAX_NCHANNELS=65",
    "NCCL_MIN_CTAS=100000",
    "NCCL_MAX_CTAS=0",
    "NCCL_ALGO=bogus",
    "NCCL_ALGO=",
    "NCCL_ALGO=^Ring,Tree,NVLS,NVLSTree,CollnetDirect,CollnetChain,PAT",
    "NCCL_PROTO=bogus",
    "NCCL_PROTO=^LL,LL128,Simple",
    "NCCL_BUFFSIZE=0",
    "NCCL_BUFFSIZE=-1",
    "NCCL_BUFFSIZE=1",
    "NCCL_BUFFSIZE=1099511627776",
    "NCCL_BUFFSIZE=1e30",
    "NCCL_BUFFSIZE=4M",
    "NCCL_FOO=1",
    "NCCL_ALGO",
    "=Ring",
    "NCCL_MIN_NCHANNELS=64",
    "NCCL_BUFFSIZE=7",
    "NCCL_MIN_NCHANNELS=32,NCCL_MAX_NCHANNELS=2",
    "nccl_algo=ring",
]
NCCL_GOOD = [
    "NCCL_MIN_NCHANNELS=4",
    "NCCL_MAX_NCHANNELS=2",
    "NCCL_MIN_CTAS=8",
    "NCCL_MAX_CTAS=16",
    "NCCL_ALGO=Ring",
    "NCCL_ALGO=Tree",
    "NCCL_ALGO=NVLS",
    "NCCL_ALGO=ring,tree",
    "NCCL_ALGO=^NVLS",
    "NCCL_PROTO=LL",
    "NCCL_PROTO=Simple",
    "NCCL_PROTO=^LL128",
    "NCCL_BUFFSIZE=4194304",
    "NCCL_BUFFSIZE=1048576",
    "NCCL_MAX_NCHANNELS=1",
]
WHATIF_TARGETS = [
    "nvlink",
    "pcie",
    "ib",
    "ethernet",
    "cpu_link",
    "gpu0",
    "gpu1",
    "nvsw",
    "gpu0-nvsw",
    "nvsw-gpu3",
    "node0.nic0",
    "node1.nvsw",
    "leaf0",
    "spine0",
    "gpu99",
    "",
    "-",
    "a-b-c",
    "gpu0-gpu1",
    "cpu0-cpu1",
    "pcie0",
    "cpu0",
    "gpu0-pcie0",
    "GPU0",
    "nvlink,pcie",
    " gpu0",
]
FACTORS = [
    "0.5",
    "1",
    "0.01",
    "0",
    "-1",
    "2",
    "nan",
    "inf",
    "1e-300",
    "x",
    "",
    "0.999999",
    "1e-3",
    "1.0000001",
]
SPECIAL_PATHS = [
    "/dev/zero",
    "/dev/urandom",
    "/dev/null",
    "{case}/fifo",
    "{case}/adir",
    "{case}/zero-link",
    "{case}/missing.toml",
    "{case}/empty",
    "{case}/big",
    "/",
    "/proc/self/status",
    "{case}/not-utf8",
]


def set_flags(sets: list[str]) -> list[str]:
    """``--set`` before each item."""
    return [word for item in sets for word in ("--set", item)]


def special_files() -> dict[str, Any]:
    return {
        "fifo": FIFO,
        "adir": DIRECTORY,
        "zero-link": symlink("/dev/zero"),
        "empty": b"",
        "big": sparse(65 * 2**20),
        "not-utf8": b"\xff\xfe\x00bad\x80\x81 = 1\n",
    }


class Inputs:
    """Every input of a pass, from its seed alone."""

    def __init__(self, seed: int, plan_logs: dict[str, str]) -> None:
        self.rng = random.Random(seed)
        self.plan_logs = plan_logs
        self.params = {
            p.stem: tomllib.loads(p.read_text()).get("params", {})
            for p in sorted((REPO / "topologies").glob("*.toml"))
        }
        self.scenarios = {
            p.stem: p.read_text() for p in sorted((REPO / "scenarios").glob("*.toml"))
        }
        self.calibrations = sorted(
            str(p) for p in (REPO / "topologies/calibration").rglob("*.toml")
        )
        ex = REPO / "topologies/examples"
        self.xml = {p.name: p.read_text() for p in sorted(ex.glob("*.nccl.xml"))}
        self.nvsmi = {p.name: p.read_text() for p in sorted(ex.glob("*.nvsmi.txt"))}
        shipped = sorted(str(p) for p in (REPO / "topologies").glob("*.toml"))
        self.topology_files = [*shipped, str(ex / "two-switches.toml")]
        self.traces = _trace_bases()
        self.pristine = False
        self.import_params = {
            p.stem: tomllib.loads(p.read_text()).get("params", {})
            for p in sorted(ex.glob("*-from-*.toml"))
        }

    # helpers

    def choice(self, items: list[Any], weights: list[float] | None = None) -> Any:
        return self.rng.choices(items, weights=weights)[0] if weights else self.rng.choice(items)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def machine(self, *, clusters: float = 0.25) -> tuple[str, list[str], int]:
        """A topology (shipped name), its --set and its GPU count, cheap to simulate."""
        if self.chance(clusters):
            kind = self.choice([*CLUSTERS, "torus-3d", "dragonfly"])
            if kind == "torus-3d":
                dims = [self.choice(["1", "2", "2", "3"]) for _ in range(3)]
                sets = [f"dim_x={dims[0]}", f"dim_y={dims[1]}", f"dim_z={dims[2]}"]
                return kind, sets, math.prod(int(d) for d in dims)
            if kind == "dragonfly":
                groups = self.choice([2, 3])
                return kind, [f"n_groups={groups}"], groups * 8
            nodes = self.choice([1, 2, 2, 3, 4])
            return kind, [f"n_nodes={nodes}"], nodes * 8
        name = self.choice(list(SERVERS))
        return name, [], SERVERS[name]

    # predict

    def predict_spec(self, *, single_switch: bool = False) -> dict[str, Any]:  # noqa: PLR0912, PLR0915 - a branch per kind of input
        """A valid, cheap predict call."""
        if single_switch:
            topology = self.choice(SINGLE_SWITCH)
            sets: list[str] = []
            n_gpus = SERVERS[topology]
        else:
            topology, sets, n_gpus = self.machine()
        coll = self.choice(COLLECTIVES)
        spec: dict[str, Any] = {"topology": topology, "set": list(sets), "collective": coll}
        r = self.rng.random()
        if r < 0.4:
            pass
        elif r < 0.45:
            spec["algorithm"] = "nccl"
        elif r < 0.6:
            spec["algorithm"] = "auto"
        elif r < 0.64:
            spec["algorithm"] = "all"
        else:
            spec["algorithm"] = self.choice(ALGORITHMS[coll])
        if self.chance(0.35):
            spec["protocol"] = self.choice(["simple", "LL", "LL128", "none", "auto"])
        spec["model"] = self.choice(
            ["flow", "analytical", "ideal", "nccl", "packet"], [70, 10, 5, 8, 7]
        )
        if spec["model"] == "packet":
            spec["sizes"] = self.choice(["1K", "4K", "8,1K", "64K", "1K:16K"])
        elif (
            n_gpus <= 8
            and spec["model"] == "flow"
            and spec.get("algorithm") in (None, "ring", "nccl")
            and self.chance(0.05)
        ):
            spec["sizes"] = self.choice(BIG_SIZES)
        else:
            spec["sizes"] = self.choice(GOOD_SIZES)
        if self.chance(0.5):
            spec["ranks"] = str(self.choice([1, 2, 2, 3, 4, 5, 7, n_gpus, max(2, n_gpus // 2)]))
            if int(spec["ranks"]) > n_gpus:
                spec["ranks"] = str(n_gpus)
        r = self.rng.random()
        if r < 0.12:
            spec["placement"] = self.choice(["random", f"random:{self.rng.randrange(100)}"])
        elif r < 0.16:
            gpus = list(range(n_gpus))
            self.rng.shuffle(gpus)
            spec["placement"] = "{case}/placement.txt"
            spec["_files"] = {
                "placement.txt": "\n".join(self.choice([str(g), f"gpu{g}"]) for g in gpus).encode()
                + b"\n"
            }
        if self.chance(0.2):
            spec["plan"] = "rank"
        for knob, values in (
            ("channels", ["1", "2", "4", "8"]),
            ("chunks", ["1", "2", "4", "16"]),
            ("window", ["1", "2", "8", "1000000"]),
        ):
            if self.chance(0.08):
                spec[knob] = self.choice(values)
        if coll in ROOTED and self.chance(0.3):
            spec["root"] = str(self.rng.randrange(int(spec.get("ranks", n_gpus))))
        r = self.rng.random()
        if r < 0.25:
            spec["params"] = "none"
        elif r < 0.3:
            spec["params"] = self.choice(self.calibrations)
        if self.chance(0.15):
            spec["in_place"] = True
        spec["format"] = self.choice(["csv", "json", "table", "nccl-tests"], [80, 10, 7, 3])
        if spec["format"] == "nccl-tests" and spec.get("algorithm") == "all":
            spec["format"] = "csv"
        if self.chance(0.1):
            spec["nccl"] = [self.choice(NCCL_GOOD)]
        if self.chance(0.05):
            spec["degrade"] = [f"{self.choice(['nvlink', 'pcie', 'ib', 'gpu1', 'ethernet'])}=0.5"]
        if self.chance(0.05):
            spec["dtype"] = self.choice(["half", "bfloat16", "f8e4m3", "double", "int8", "uint64"])
        return spec

    def predict_argv(self, spec: dict[str, Any]) -> list[str]:
        argv = ["predict", spec["topology"]]
        for item in spec.get("set", []):
            argv += ["--set", item]
        order = [
            "collective",
            "algorithm",
            "protocol",
            "model",
            "sizes",
            "ranks",
            "placement",
            "plan",
            "channels",
            "chunks",
            "window",
            "root",
            "params",
            "format",
            "dtype",
            "op",
            "plot",
        ]
        for key in order:
            if spec.get(key) is not None:
                argv += [f"--{key}", str(spec[key])]
        for key in ("nccl", "degrade", "fail"):
            for item in spec.get(key, []):
                argv += [f"--{key}", item]
        if spec.get("in_place"):
            argv.append("--in-place")
        return [*argv, *spec.get("extra", [])]

    def predict_case(self, spec: dict[str, Any], group: str, *, sampled: bool = True) -> Case:
        files = spec.pop("_files", {})
        checks = ["physics"] if spec.get("format") in ("csv", "json") else []
        if sampled and self.chance(0.12):
            checks.append("twice")
        plain = (
            spec.get("format") == "csv"
            and not spec.get("degrade")
            and not spec.get("fail")
            and spec.get("algorithm") != "all"
            and spec.get("plan", "nccl") in ("nccl", "rank")
            and not spec.get("plot")
            and not spec.get("dtype")
            and not spec.get("extra")
        )
        if sampled and plain and self.chance(0.15):
            checks.append("api")
        return Case(
            "",
            "cli",
            group,
            {"kind": "cli", "argv": self.predict_argv(spec)},
            files,
            checks,
            {"spec": spec},
        )

    def predict_boundary(self) -> Case:  # noqa: PLR0912, PLR0915 - a branch per kind of input
        spec = self.predict_spec()
        files: dict[str, Any] = dict(spec.pop("_files", {}))
        n_gpus = 8
        for _ in range(self.choice([1, 1, 1, 2, 3])):
            what = self.choice(
                [
                    "sizes",
                    "ranks",
                    "set",
                    "whatif",
                    "nccl",
                    "plan",
                    "placement",
                    "knob",
                    "root",
                    "params",
                    "format",
                    "choice",
                    "plot",
                    "model",
                    "extra",
                ]
            )
            if what == "sizes":
                spec["sizes"] = self.choice(BAD_SIZES + GOOD_SIZES[:4])
                if spec.get("model") == "packet":
                    spec["model"] = "flow"
            elif what == "ranks":
                spec["ranks"] = self.choice([*BAD_INTS, "9", "17", "33", "32768", "1", "8", "65"])
            elif what == "set":
                spec["set"] = [*spec.get("set", []), self.bad_set(spec["topology"])]
            elif what == "whatif":
                key = self.choice(["degrade", "fail"])
                target = self.choice(WHATIF_TARGETS)
                item = f"{target}={self.choice(FACTORS)}" if key == "degrade" else target
                spec[key] = [*spec.get(key, []), item]
            elif what == "nccl":
                spec["nccl"] = [*spec.get("nccl", []), self.choice(NCCL_BAD + NCCL_GOOD)]
            elif what == "plan":
                spec["plan"], extra = self.plan_value()
                files.update(extra)
            elif what == "placement":
                spec["placement"], extra = self.placement_value(n_gpus)
                files.update(extra)
            elif what == "knob":
                knob = self.choice(["channels", "chunks", "window"])
                spec[knob] = self.choice([*BAD_INTS, "64", "4096", "1073741824", "1", "3"])
                if self.chance(0.3):  # a transfer count over the cap, refused before building
                    spec.update(channels="64", chunks="4096", sizes="1G")
            elif what == "root":
                spec["root"] = self.choice(
                    ["-1", "8", "9", "1000", "99999999999999999999", "x", "0", "7", "3"]
                )
                spec["collective"] = self.choice([*sorted(ROOTED), "allreduce"])
                spec.pop("algorithm", None)
            elif what == "params":
                spec["params"], extra = self.params_value()
                files.update(extra)
            elif what == "format":
                spec["format"] = self.choice(["bogus", "CSV", "", "csv", "nccl-tests"])
                spec["dtype"] = self.choice([None, "bogus", "half", "f8e5m2", ""])
                spec["op"] = self.choice([None, "bogus", "avg", "prod", ""])
            elif what == "choice":
                key = self.choice(["collective", "algorithm", "protocol"])
                spec[key] = self.choice(
                    [
                        "bogus",
                        "",
                        "AllReduce",
                        "ring",
                        "nvls",
                        "sharp",
                        "tree",
                        "LL",
                        "ll128",
                        "simple",
                        "none",
                        "all",
                        "auto",
                        "hierarchical",
                        "bruck",
                        "pairwise",
                        "reduce_broadcast",
                    ]
                )
            elif what == "plot":
                spec["plot"] = self.choice(
                    [
                        "{case}/p.png",
                        "{case}/p.txt",
                        "/dev/null",
                        "{case}/empty",
                        "{case}/adir/x.png",
                        "{case}/fifo",
                        "{case}/zero-link",
                    ]
                )
                files.update(special_files())
            elif what == "model":
                spec["model"] = self.choice(["packet", "bogus", "ideal", "nccl", "analytical"])
                if spec["model"] == "nccl" and self.chance(0.5):
                    spec["chunks"] = "2"
                if spec["model"] == "packet":
                    spec["sizes"] = self.choice(["1K", "64K", "1M"])
            else:
                spec["extra"] = self.choice(
                    [
                        ["--bogus"],
                        ["--sizes"],
                        ["--set"],
                        ["extra-positional"],
                        ["--ranks", "2", "--ranks", "3"],
                        ["--in-place", "--in-place"],
                        ["--log-y"],
                        ["--plot-y", "time"],
                        ["--plot-y", "bogus"],
                        ["-d"],
                        ["--", "x"],
                        ["--format=csv"],
                        ["--root=-1"],
                    ]
                )
        spec["_files"] = files
        return self.predict_case(spec, "predict-boundary")

    def bad_set(self, topology: str) -> str:
        keys = list(self.params.get(topology, {})) or ["n_gpus"]
        key = self.choice(
            [
                *keys,
                "bogus",
                "routing.rule",
                "routing.ecmp_seed",
                "n_nodes",
                "calibration",
                "description",
                "schema",
                "builder",
                "",
            ]
        )
        if key == "routing.rule":
            return f"{key}={self.choice(['ecmp', 'dmodk', 'lowest_ids', 'bogus', ''])}"
        value = self.params.get(topology, {}).get(key)
        if isinstance(value, str) and any(c.isalpha() for c in value):
            bad = self.choice(BAD_QUANTITIES)
        elif isinstance(value, bool):
            bad = self.choice(["true", "false", "1", "yes", "x", ""])
        else:
            bad = self.choice([*BAD_NUMBERS, "100000", "4096", "2", "1", "33"])
        return str(self.choice([f"{key}={bad}", key, f"={bad}", f"{key}=={bad}"], [90, 4, 3, 3]))

    def plan_value(self) -> tuple[str, dict[str, Any]]:
        r = self.rng.random()
        if r < 0.15:
            return self.choice(["nccl", "rank", "bogus", "", "NCCL"]), {}
        if r < 0.3:
            path = self.choice(SPECIAL_PATHS)
            return path, special_files()
        name = self.choice(sorted(self.plan_logs))
        text = self.plan_logs[name]
        if self.chance(0.75):
            text = mutate_lines(self.rng, text, NCCL_LOG_VALUES)
        return "{case}/plan.log", {"plan.log": text.encode(errors="surrogateescape")}

    def placement_value(self, n_gpus: int) -> tuple[str, dict[str, Any]]:
        r = self.rng.random()
        if r < 0.3:
            return self.choice(
                [
                    "linear",
                    "random",
                    "random:-1",
                    "random:x",
                    "random:",
                    "random:99999999999999999999",
                    "bogus",
                    "",
                    "random:1:2",
                    "linear:1",
                    "RANDOM",
                ]
            ), {}
        if r < 0.4:
            return self.choice(SPECIAL_PATHS), special_files()
        gpus = [str(g) for g in range(n_gpus)]
        self.rng.shuffle(gpus)
        damage = self.choice(
            [
                "dup",
                "range",
                "names",
                "junk",
                "empty",
                "short",
                "huge",
                "comments",
                "negative",
                "nan",
                "valid",
            ]
        )
        if damage == "dup":
            gpus[-1] = gpus[0]
        elif damage == "range":
            gpus[0] = self.choice(["99", "8", "65536", "gpu99", "99999999999999999999"])
        elif damage == "names":
            gpus = [f"gpu{g}" if self.chance(0.5) else f"node0.gpu{g}" for g in gpus]
        elif damage == "junk":
            gpus[0] = self.choice(["x", "gpu", "1.5", "nvsw", "cpu0", "#", "\x00"])
        elif damage == "empty":
            gpus = []
        elif damage == "short":
            gpus = gpus[:1]
        elif damage == "huge":
            gpus = [str(i) for i in range(100000)]
        elif damage == "comments":
            gpus = ["# GPUs", *gpus, "", "  "]
        elif damage == "negative":
            gpus[0] = "-1"
        elif damage == "nan":
            gpus[0] = "nan"
        return "{case}/placement.txt", {"placement.txt": ("\n".join(gpus) + "\n").encode()}

    def params_value(self) -> tuple[str, dict[str, Any]]:
        r = self.rng.random()
        if r < 0.2:
            return self.choice(["none", "None", "", "bogus.toml"]), {}
        if r < 0.35:
            return self.choice(SPECIAL_PATHS), special_files()
        base = Path(self.choice(self.calibrations)).read_text()
        text = mutate_toml(
            self.rng,
            base,
            extra=["efficiency", "latency_s", "launch_s", "floor_s", "base", "protocol_efficiency"],
        )
        text = text.replace('"../', f'"{REPO}/topologies/').replace("'../", f"'{REPO}/topologies/")
        return "{case}/params.toml", {"params.toml": text.encode(errors="surrogateescape")}

    def predict_special(self) -> Case:
        spec = self.predict_spec()
        spec.pop("_files", None)
        slot = self.choice(["topology", "params", "plan", "placement"])
        spec[slot] = self.choice(SPECIAL_PATHS)
        spec["_files"] = special_files()
        return self.predict_case(spec, "predict-special", sampled=False)

    def pair_case(self) -> Case:
        spec = self.predict_spec(single_switch=True)
        spec.pop("_files", None)
        spec.pop("placement", None)
        spec.pop("degrade", None)
        spec["model"] = "analytical"
        spec["format"] = "csv"
        spec.pop("dtype", None)
        if spec.get("algorithm") == "all":
            spec["algorithm"] = "auto"
        if spec["sizes"] in BIG_SIZES:
            spec["sizes"] = "1K:1G:4"
        case = self.predict_case(spec, "analytical-vs-flow", sampled=False)
        case.checks = ["pair", "physics"]
        return case

    # topo and plan

    def topology_arg(self) -> tuple[str, list[str], dict[str, Any]]:
        r = self.rng.random()
        if r < 0.45:
            name, sets, _ = self.machine(clusters=0.4)
            if self.chance(0.3):
                sets = [*sets, self.bad_set(name)]
            return name, sets, {}
        if r < 0.55:
            return self.choice(SPECIAL_PATHS), [], special_files()
        base_path = Path(self.choice(self.topology_files))
        text = mutate_toml(
            self.rng,
            base_path.read_text(),
            extra=["n_gpus", "n_nodes", "bandwidth", "latency", "kind"],
        )
        files: dict[str, Any] = {
            "t.toml": text.encode(errors="surrogateescape"),
            "calibration": symlink(str(REPO / "topologies/calibration")),
        }
        for dump in list(self.xml) + list(self.nvsmi):
            files[dump] = symlink(str(REPO / "topologies/examples" / dump))
        sets = [f"n_nodes={self.choice([1, 2])}"] if "n_nodes" in text else []
        return "{case}/t.toml", sets, files

    def topo_case(self) -> Case:
        topology, sets, files = self.topology_arg()
        sub = self.choice(["show", "show", "dump", "dump", "draw", "bogus"], [40, 0, 40, 0, 5, 2])
        argv = ["topo", sub, topology]
        for item in sets:
            argv += ["--set", item]
        checks: list[str] = []
        meta: dict[str, Any] = {}
        if sub == "dump":
            out = self.choice(
                [
                    "{case}/t.json",
                    None,
                    "{case}/t.json",
                    "/dev/null",
                    "{case}/empty",
                    "{case}/adir",
                    "{case}/fifo",
                ],
                [50, 20, 0, 3, 3, 3, 3],
            )
            if out is not None:
                argv += ["-o", out]
                files = {**special_files(), **files}
            if (
                out == "{case}/t.json"
                and not topology.startswith(("/", "{case}/"))
                and self.chance(0.5)
            ):
                coll = self.choice(COLLECTIVES)
                common = [
                    "--collective",
                    coll,
                    "--sizes",
                    self.choice(["1K", "1M", "1K,16M"]),
                    "--params",
                    "none",
                    "--format",
                    "csv",
                ]
                mine = ["predict", topology, *set_flags(sets), *common]
                back = ["predict", "{case}/t.json", *common]
                checks = ["same_as"]
                meta["same_as_first"] = {"kind": "cli", "argv": mine}
                meta["same_as"] = [({"kind": "cli", "argv": back}, "topo dump read back", 1e-12)]
        elif sub == "draw":
            argv += ["-o", self.choice(["{case}/t.png", "{case}/t.txt", "/dev/null"])]
        return Case("", "cli", f"topo-{sub}", {"kind": "cli", "argv": argv}, files, checks, meta)

    def plan_case(self) -> Case:
        topology, sets, files = (
            self.topology_arg() if self.chance(0.3) else (*self.machine(clusters=0.4)[:2], {})
        )
        argv = ["plan", "show", topology]
        for item in sets:
            argv += ["--set", item]
        if self.chance(0.4):
            argv += [
                "--ranks",
                self.choice(["1", "2", "3", "4", "8", "9", "16", "0", "-1", "x", "32769"]),
            ]
        if self.chance(0.3):
            placement, extra = self.placement_value(8)
            argv += ["--placement", placement]
            files = {**files, **extra}
        if self.chance(0.4):
            plan, extra = self.plan_value()
            argv += ["--plan", plan]
            files = {**files, **extra}
        if self.chance(0.3):
            argv += ["--nccl", self.choice(NCCL_BAD + NCCL_GOOD)]
        return Case("", "cli", "plan-show", {"kind": "cli", "argv": argv}, files)

    # compare and calibrate

    def measurement(self) -> tuple[list[str], str, list[str], dict[str, Any]]:
        """Measurement files (maybe mutated), the topology they were made on, its --set."""
        kind = self.choice(["testbed", "log", "log"])
        files: dict[str, Any] = {}
        if kind == "testbed":
            name, topology = self.choice(
                [
                    ("star4-1gbit", "star4-1gbit"),
                    ("star4-500mbit", "star4-500mbit"),
                    ("star4-one-slow", "star4-one-slow"),
                    ("two-switches-oversubscribed", "two-switches-oversubscribed"),
                ]
            )
            rows = (REPO / f"validation/data/testbed/{name}.csv").read_text().splitlines()
            picked = self.rng.sample(rows[1:], min(len(rows) - 1, self.choice([3, 6, 12])))
            keep = [rows[0], *picked]
            text = "\n".join(keep) + "\n"
            side = (REPO / f"validation/data/testbed/{name}.json").read_text()
            if self.chance(0.6):
                text = mutate_csv(self.rng, text)
            if self.chance(0.2):
                side = mutate_json_text(self.rng, side)
            files["m.csv"] = text.encode(errors="surrogateescape")
            if not self.chance(0.1):
                files["m.json"] = side.encode(errors="surrogateescape")
            return (["{case}/m.csv"], f"{REPO}/validation/topologies/{topology}.toml", [], files)
        log, topology, sets = self.choice(
            [
                ("nccl_allgather_8xA100_nvswitch_superbench", "dgx-a100", []),
                ("nccl_allreduce_8xA100_nvswitch_superbench", "dgx-a100", []),
                ("nccl_reducescatter_8xA100_nvswitch_superbench", "dgx-a100", []),
                ("nccl_sendrecv_8xA100_nvswitch_liplus", "dgx-a100", []),
                ("nccl_allreduce_8xH100_nvswitch_nccltests290", "dgx-h100", []),
                ("nccl_allreduce_8xRTX4090_pcie_noP2P_chlc", "pcie-8x-rtx4090", []),
                ("nccl_allreduce_8xV100_oci_bmgpu38_ocitutorials", "dgx1-v100", []),
                (
                    "nccl_allreduce_2x8xH100_ndr_nccltests309_gjaion",
                    "h100-ib-fat-tree",
                    ["n_nodes=2"],
                ),
            ]
        )
        text = (REPO / f"validation/data/nccl-tests-logs/{log}.log").read_text()
        self.pristine = self.chance(0.4)  # a log as published: compare is predict there
        if not self.pristine:
            text = mutate_lines(self.rng, text, LOG_VALUES)
        files["m.log"] = text.encode(errors="surrogateescape")
        if self.chance(0.9) or self.pristine:
            sets = [*sets, "--collective", log.split("_")[1]]
        return (["{case}/m.log"], topology, sets, files)

    def compare_case(self, calibrate: bool = False) -> Case:  # noqa: PLR0912 - a branch per kind of input
        self.pristine = False
        inputs, topology, sets, files = self.measurement()
        if self.pristine and not calibrate and self.chance(0.6):
            # compare simulates each measured point as predict would: the same times
            sets_only = [i for i in sets if not i.startswith("--") and i not in COLLECTIVES]
            collective = next(i for i in sets if i in COLLECTIVES)
            argv = ["compare", *inputs, "--topology", topology, *set_flags(sets_only),
                    "--collective", collective, "--out", "{case}/cmp"]  # fmt: skip
            predict = ["predict", topology, *set_flags(sets_only), "--collective", collective,
                       "--format", "csv"]  # fmt: skip
            return Case("", "cli", "compare-vs-predict", {"kind": "cli", "argv": argv}, files,
                        ["compare", "compare_predict"], {"predict": predict})  # fmt: skip
        if self.chance(0.08):
            inputs = [self.choice(SPECIAL_PATHS)]
            files = {**files, **special_files()}
        if self.chance(0.05):
            topology = self.choice(SPECIAL_PATHS)
            files = {**files, **special_files()}
        argv = ["calibrate" if calibrate else "compare", *inputs, "--topology", topology]
        for item in sets:
            argv += [item] if item.startswith("--") or item in COLLECTIVES else ["--set", item]
        flags = {
            "--collective": [*COLLECTIVES, "bogus", ""],
            "--ranks": ["4", "8", "16", "0", "x", "3"],
            "--backend": ["nccl", "gloo", "bogus"],
            "--algorithm": ["nccl", "auto", "ring", "tree", "bogus", "all"],
            "--protocol": ["auto", "simple", "LL", "none", "bogus"],
            "--model": ["flow", "ideal", "analytical", "bogus"],
            "--nccl": NCCL_GOOD + NCCL_BAD[:6],
        }
        for flag, values in flags.items():
            if self.chance(0.06) and flag not in argv:
                argv += [flag, self.choice(values)]
        if self.chance(0.1):
            argv.append("--in-place")
        if calibrate:
            argv += [
                "-o",
                self.choice(
                    ["{case}/p.toml"] * 8
                    + ["{case}/m.csv", "/dev/null", "{case}/adir", "{case}/p.txt", ""]
                ),
            ]
            files = {**special_files(), **files}
            argv += [
                "--fit",
                self.choice(
                    [
                        "launch_s",
                        "efficiency",
                        "efficiency,launch_s",
                        "floor_s",
                        "step_latency_s,launch_s",
                        "bogus",
                        "",
                        "protocol_efficiency",
                        "link_latency_s",
                        "efficiency,protocol_efficiency,launch_s,floor_s",
                    ]
                ),
            ]
            if self.chance(0.3):
                argv += [
                    "--regimes",
                    self.choice(
                        ["latency", "bandwidth", "middle", "bogus", "", "latency,bandwidth"]
                    ),
                ]
            if self.chance(0.1):
                base, extra = self.params_value()
                argv += ["--base", base]
                files = {**files, **extra}
            checks: list[str] = []
        else:
            if self.chance(0.3):
                params, extra = self.params_value()
                argv += ["--params", params]
                files = {**files, **extra}
            if self.chance(0.1):
                argv += ["--degrade", f"{self.choice(WHATIF_TARGETS)}={self.choice(FACTORS)}"]
            if self.chance(0.1):
                argv += ["--fail", self.choice(WHATIF_TARGETS)]
            if self.chance(0.15):
                argv += ["--min-size", self.choice(["1M", "0", "-1", "x", "1e300", "8G", "1 GB"])]
            checks = []
            if self.chance(0.5):
                argv += ["--out", "{case}/cmp"]
                checks = ["compare"]
        return Case(
            "",
            "cli",
            "calibrate" if calibrate else "compare",
            {"kind": "cli", "argv": argv},
            files,
            checks,
        )

    # run: its flags, and mutated scenarios

    def run_flags_case(self) -> Case:
        name = self.choice(
            [
                "ring-allreduce-law",
                "scaling-designs",
                "tensor-parallel",
                "p2p-dgx1",
                "broadcast-chunks",
                "allreduce-compositions",
            ]
        )
        argv = ["run", self.choice([name, f"{REPO}/scenarios/{name}.toml"])]
        files = special_files()
        argv += [
            "--out",
            self.choice(
                ["{case}/out"] * 6
                + [
                    "/dev/null",
                    "{case}/empty",
                    "{case}/fifo",
                    "{case}/adir",
                    "{case}/zero-link",
                    "{case}/new/deeper",
                    "",
                ]
            ),
        ]
        argv += ["--workers", self.choice(["1"] * 6 + ["2", "0", "-1", "x", "1000000", ""])]
        argv += [
            "--max-hours",
            self.choice(["0.01"] * 6 + ["0", "-1", "nan", "inf", "1e-9", "1e308", "x", ""]),
        ]
        if self.chance(0.15):
            argv += [
                "--scheduler",
                self.choice(
                    [
                        "bogus",
                        "tcp://",
                        "tcp://[::1",
                        "tcp://127.0.0.1:1",
                        "tcp://host:99999",
                        "",
                        "tcp://a b:1",
                        "inproc://x",
                    ]
                ),
            ]
        if self.chance(0.2):
            argv.append("--force")
        return Case("", "cli", "run-flags", {"kind": "cli", "argv": argv}, files, ["scenario"])

    def scenario_case(self) -> Case:
        name = self.choice(sorted(self.scenarios))
        text = self.scenarios[name].replace('"../', f'"{REPO}/').replace("'../", f"'{REPO}/")
        text = shrink_sweep(self.rng, text)
        r = self.rng.random()
        if r < 0.45:  # values another user could give: the scenario should run
            for _ in range(self.choice([0, 1, 1, 2])):
                text = benign_toml(self.rng, text)
        else:
            for _ in range(self.choice([1, 1, 1, 2, 3])):
                text = mutate_toml(self.rng, text, scenario=True)
        files = {"s.toml": text.encode(errors="surrogateescape"), **special_files()}
        argv = [
            "run",
            "{case}/s.toml",
            "--out",
            "{case}/out",
            "--workers",
            "1",
            "--max-hours",
            "0.01",
        ]
        return Case(
            "", "scenario", f"scenario-{name}", {"kind": "cli", "argv": argv}, files, ["scenario"]
        )

    def doors_case(self) -> Case:
        """One call through predict, the collective workload (run later, after the calls
        before it) and a session (after a wait on the clock)."""
        topology, sets, n_gpus = self.machine(clusters=0.3)
        coll = self.choice(COLLECTIVES)
        task: dict[str, Any] = {
            "kind": "doors",
            "topology": topology,
            "set": sets,
            "collective": coll,
            "size_bytes": self.choice([1024, 4096, 65536, 2**20, 3 * 2**20, 2**24, 2**26, 2**28]),
            "ranks": self.choice([None, None, 2, max(2, n_gpus // 2)]) if n_gpus > 1 else None,
            "algorithm": self.choice([None, None, None, "auto", *ALGORITHMS[coll][:2]]),
            "protocol": self.choice(["auto", "auto", "simple", "LL", "LL128"]),
            "calibration": self.choice(["default", "default", None]),
            "iterations": self.choice([1, 2, 3, 7]),
            "wait_s": self.choice([0.0, 1e-9, 1e-6, 3.3e-5, 0.123456789, 1.0, 7.5, 9.0, 100.0]),
        }
        n = task["ranks"] or n_gpus
        size = task["size_bytes"]
        blocks = n * n if coll == "alltoall" else n
        task["size_bytes"] = max(4 * blocks, size - size % (4 * blocks))  # whole floats per block
        return Case("", "scenario", "one-path-doors", task, {}, ["doors"])

    def training_case(self) -> Case:
        """A training step of a model file with one odd shape or batch (the model-shape caps
        of core/limits.py), or a plausible one, shrunk to a few GPUs."""
        model = self.choice(["llama3-8b", "llama2-7b", "llama2-13b", "mixtral-8x7b"])
        text = (REPO / "models" / f"{model}.toml").read_text()
        if self.chance(0.7):
            key = self.choice(
                [
                    "n_layers",
                    "hidden_size",
                    "ffn_hidden_size",
                    "n_heads",
                    "n_kv_heads",
                    "vocab_size",
                    "seq_length",
                    "micro_batch_size",
                    "global_batch_size",
                    "precision",
                    "tp",
                    "data_parallel",
                    "n_experts",
                    "top_k",
                ]
            )
            value = self.choice(
                [
                    "1",
                    "2",
                    "3",
                    "0",
                    "-1",
                    "4096",
                    "4097",
                    "50000000",
                    "100000000000",
                    "1e308",
                    "nan",
                    "1048577",
                    "16777217",
                    '"x"',
                    "true",
                    "7",
                    "1.5",
                    "1125899906842625",
                    '"fp8"',
                    '"zero3"',
                    "9223372036854775807",
                ]
            )
            if re.search(rf"(?m)^{key} = ", text):
                text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
            else:
                text = text.replace("[model]\n", f"[model]\n{key} = {value}\n", 1)
        topology, n_nodes = self.choice(
            [("dgx-h100", 1), ("h100-ib-fat-tree", 1), ("h100-ib-fat-tree", 2)]
        )
        tp = self.choice([1, 2, 4, 8])
        scenario = (
            f'schema = 1\ntitle = "step"\n[topology]\nfile = "{REPO}/topologies/{topology}.toml"\n'
            + (f"set = {{ n_nodes = {n_nodes} }}\n" if topology != "dgx-h100" else "")
            + f'[workload]\nkind = "training_step"\ntransformer = "{{case}}/model.toml"\n'
            f"global_batch_size = {self.choice([8, 16, 32])}\nseq_length = "
            f"{self.choice([1024, 2048, 4096])}\n[sweep]\ntp = [{tp}]\n"
        )
        files = {"model.toml": text.encode(), "s.toml": scenario.encode()}
        argv = [
            "run",
            "{case}/s.toml",
            "--out",
            "{case}/out",
            "--workers",
            "1",
            "--max-hours",
            "0.01",
        ]
        return Case(
            "", "scenario", "training-model", {"kind": "cli", "argv": argv}, files, ["scenario"]
        )

    # imports

    def import_case(self) -> Case:
        files = special_files()
        xml = self.chance(0.55)
        name = self.choice(sorted(self.xml if xml else self.nvsmi))
        text = (self.xml if xml else self.nvsmi)[name]
        for _ in range(self.choice([0, 0, 1, 1, 1, 2, 3])):
            text = mutate_xml(self.rng, text) if xml else mutate_nvsmi(self.rng, text)
        base = name.split(".")[0]
        dump = f"{{case}}/{base}{'.nccl.xml' if xml else '.nvsmi.txt'}"
        files[Path(dump).name] = text.encode(errors="surrogateescape")
        wrapper = self.import_params[f"{base}-from-{'nccl' if xml else 'nvidia-smi'}"]
        sets = [f"{k}={v}" for k, v in wrapper.items() if k != "file"]
        if not xml and self.chance(0.2):
            sets = [s for s in sets if not s.startswith("gpu=")]
            sets.append(
                "gpu="
                + self.choice(["bogus", "", "a100-sxm4-80gb", "rtx-4090", "v100-sxm2-16gb", "b200"])
            )
        if self.chance(0.1) and sets:
            sets.pop(self.rng.randrange(len(sets)))
        if self.chance(0.1):
            sets.append(
                self.choice(
                    [
                        "cpu_link_bandwidth=0",
                        "pcie_latency=-1us",
                        "bogus=1",
                        "cpu_link_bandwidth=nan GB/s",
                        "gpu=x",
                        "file=/dev/zero",
                        "cpu_link_latency=1e300 s",
                        "pcie_bandwidth=1e-300 GB/s",
                    ]
                )
            )
        if self.chance(0.15):  # through a TOML file that names the dump
            builder = "nccl_xml" if xml else "nvidia_smi"
            lines = [f'schema = 1\nbuilder = "{builder}"\n[params]\nfile = "{Path(dump).name}"']
            lines += [f'{k} = "{v}"' for k, v in (s.split("=", 1) for s in sets)]
            files["wrap.toml"] = ("\n".join(lines) + "\n").encode()
            topology, sets = "{case}/wrap.toml", []
        else:
            topology = dump
        cmd = self.choice(["predict", "predict", "predict", "topo", "plan"])
        spec: dict[str, Any] = {"topology": topology, "set": sets}
        if cmd == "topo":
            argv = ["topo", "show", topology, *set_flags(sets)]
            return Case(
                "",
                "import",
                f"import-{'xml' if xml else 'nvsmi'}-topo",
                {"kind": "cli", "argv": argv},
                files,
            )
        if cmd == "plan":
            argv = ["plan", "show", topology, *set_flags(sets)]
            return Case(
                "",
                "import",
                f"import-{'xml' if xml else 'nvsmi'}-plan",
                {"kind": "cli", "argv": argv},
                files,
            )
        spec.update(
            collective=self.choice(COLLECTIVES), sizes=self.choice(GOOD_SIZES[:12]), format="csv"
        )
        if self.chance(0.2):
            spec["model"] = self.choice(["analytical", "flow", "nccl"])
        if self.chance(0.2):
            spec["algorithm"] = self.choice(["auto", "ring", "tree", "nvls", "direct"])
            if spec["algorithm"] not in ALGORITHMS[spec["collective"]]:
                spec["algorithm"] = "auto"
        if self.chance(0.2):
            spec["params"] = "none"
        case = self.predict_case(spec, f"import-{'xml' if xml else 'nvsmi'}-predict")
        case.family = "import"
        case.files = files
        return case

    def import_equivalence_case(self) -> Case:
        """The DGX H100 through three doors (README: the same busbw at every size)."""
        coll = self.choice(COLLECTIVES)
        common = [
            "--collective",
            coll,
            "--sizes",
            self.choice(["1K", "1M", "64M", "1G", "1K,1M,1G", "8:1M"]),
            "--format",
            "csv",
        ]
        if self.chance(0.3):
            common += ["--params", "none"]
        if self.chance(0.3):
            common += ["--model", self.choice(["analytical", "flow"])]
        ex = f"{REPO}/topologies/examples"
        host = [
            "--set",
            "cpu_link_bandwidth=128GB/s",
            "--set",
            "cpu_link_latency=1us",
            "--set",
            "pcie_latency=1us",
        ]
        first = ["predict", "dgx-h100", *common]
        xml = ["predict", f"{ex}/dgx-h100.nccl.xml", *host, *common]
        smi = ["predict", f"{ex}/dgx-h100.nvsmi.txt", *host, "--set", "gpu=h100-sxm5-80gb", *common]
        meta = {
            "same_as": [
                ({"kind": "cli", "argv": xml}, "the NCCL XML dump", 1e-9),
                ({"kind": "cli", "argv": smi}, "the nvidia-smi matrix", 1e-9),
            ],
            "spec": {"topology": "dgx-h100", "format": "csv"},
        }
        return Case(
            "",
            "import",
            "import-equivalence",
            {"kind": "cli", "argv": first},
            {},
            ["physics", "same_as"],
            meta,
        )

    # traces

    def trace_case(self) -> Case:  # noqa: PLR0912, PLR0915 - a branch per kind of input
        base = self.choice(sorted(self.traces))
        side, docs = self.traces[base]
        docs = copy.deepcopy(docs)
        files: dict[str, Any] = special_files()
        paths: list[list[str | None]] = []
        mutated: set[tuple[int, str]] = set()
        benign = self.chance(0.45)
        for _ in range(self.choice([0, 1, 1, 1, 2, 3])):
            rank = self.rng.randrange(len(docs))
            if benign:
                benign_trace(self.rng, docs[rank])
                mutated |= {(rank, "et"), (rank, "kineto")}
                continue
            which = self.choice(["et", "kineto"])
            docs[rank][which] = mutate_trace(self.rng, docs[rank][which], which)
            mutated.add((rank, which))
        step: str | None = side["step_annotation"]
        for rank, pair in enumerate(docs):
            entry: list[str | None] = []
            for which in ("et", "kineto"):
                original = (
                    REPO / "validation/data/traces" / side["files"][str(rank)][which == "kineto"]
                )
                if (rank, which) in mutated:
                    doc = pair[which]
                    raw = _trace_bytes(doc)
                    gz = self.chance(0.5) and not isinstance(doc, bytes)
                    name = f"r{rank}.{which}.json" + (".gz" if gz else "")
                    files[name] = gzip.compress(raw, mtime=0) if gz else raw
                    entry.append(f"{{case}}/{name}")
                else:
                    entry.append(str(original))
            paths.append(entry)
        task: dict[str, Any] = {
            "kind": "replay",
            "traces": paths,
            "step": step,
            "topology": f"{REPO}/validation/topologies/star4-1gbit.toml",
            "calibration": f"{REPO}/validation/results/testbed-star4/params.toml",
            "backend": "gloo",
        }
        for _ in range(self.choice([0, 0, 0, 1, 2])):
            what = self.choice(
                ["backend", "topology", "calibration", "no-kineto", "step"]
                if benign
                else [
                    "order",
                    "drop",
                    "dup",
                    "extra",
                    "step",
                    "backend",
                    "topology",
                    "calibration",
                    "no-kineto",
                    "special",
                ]
            )
            if what == "order":
                i, j = self.rng.sample(range(len(paths)), 2)
                paths[i], paths[j] = paths[j], paths[i]
            elif what == "drop" and len(paths) > 1:
                paths.pop(self.rng.randrange(len(paths)))
            elif what == "dup":
                paths.append(list(paths[self.rng.randrange(len(paths))]))
            elif what == "extra":
                paths.insert(self.rng.randrange(len(paths) + 1), list(paths[0]))
            elif what == "step":
                task["step"] = self.choice([None] if benign else [None, "bogus", "", "aten::mm"])
            elif what == "backend":
                task["backend"] = self.choice(
                    ["nccl", "gloo"] if benign else ["bogus", "mpi", "nccl"]
                )
            elif what == "topology" and benign:
                task["topology"] = self.choice(
                    [
                        "dgx-a100",
                        "pcie-4x-switch",
                        "dgx1-v100",
                        f"{REPO}/validation/topologies/two-switches-oversubscribed.toml",
                        f"{REPO}/validation/topologies/star4-one-slow.toml",
                    ]
                )
                task["calibration"] = self.choice([None, "default"])
            elif what == "calibration" and benign:
                task["calibration"] = self.choice([None, "default"])
            elif what == "topology":
                task["topology"] = self.choice(
                    [
                        "dgx-a100",
                        "pcie-4x-switch",
                        "dgx1-v100",
                        f"{REPO}/validation/topologies/two-switches-oversubscribed.toml",
                        "{case}/fifo",
                        "/dev/zero",
                    ]
                )
                if self.chance(0.3):
                    task["topology"] = f"{REPO}/validation/topologies/star4-1gbit.toml"
                    task["set"] = [
                        self.choice(
                            [
                                "n_gpus=2",
                                "n_gpus=3",
                                "n_gpus=8",
                                "n_gpus=0",
                                "link_bandwidth=0 GB/s",
                                "link_latency=nan s",
                            ]
                        )
                    ]
            elif what == "calibration":
                task["calibration"] = self.choice(
                    [None, "default", "{case}/fifo", "/dev/zero", "{case}/params.toml"]
                )
                if task["calibration"] == "{case}/params.toml":
                    _, extra = self.params_value()
                    files.update(extra)
                    if "params.toml" not in files:
                        files["params.toml"] = b"[efficiency]\nnet = 2.0\n"
            elif what == "no-kineto":
                for entry in paths:
                    entry[1] = None
            else:
                entry = paths[self.rng.randrange(len(paths))]
                entry[self.rng.randrange(2)] = self.choice(SPECIAL_PATHS)
        return Case("", "trace", f"trace-{base}", task, files, ["replay"])

    # the top-level parser

    def misc_case(self) -> Case:
        argv = self.choice(
            [
                [],
                ["--help"],
                ["--version"],
                ["frob"],
                ["predict"],
                ["predict", "--help"],
                ["topo"],
                ["topo", "show"],
                ["plan"],
                ["run"],
                ["calibrate"],
                ["compare"],
                ["topo", "frob", "dgx-a100"],
                ["predict", "dgx-a100"],
                ["-x"],
                ["--", "predict"],
                ["predict", "dgx-a100", "--collective"],
                ["run", "--help"],
                ["plan", "show", "--help"],
                ["predict", "x" * 100000, "--collective", "allreduce"],
                [
                    "predict",
                    "dgx-a100",
                    "--collective",
                    "allreduce",
                    "--sizes",
                    "1K",
                    "--set",
                    "a=" + "9" * 5000,
                ],
                ["predict", "\uff44\uff47\uff58-a100", "--collective", "allreduce"],
                ["topo", "show", "dgx-a100 "],
                [
                    "predict",
                    "dgx-a100",
                    "--collective",
                    "allreduce",
                    "--sizes",
                    "1K",
                    "--unknown=1",
                ],
                ["bench", "--cases", "bogus"],
                ["bench", "--timeout-s", "-1"],
                ["bench", "--cases", ""],
                [
                    "predict",
                    "../topologies/dgx-a100.toml",
                    "--collective",
                    "allreduce",
                    "--sizes",
                    "1K",
                ],
                ["predict", "dgx-a100.toml", "--collective", "allreduce", "--sizes", "1K"],
                ["predict", "DGX-A100", "--collective", "allreduce", "--sizes", "1K"],
                [
                    "run",
                    "ddp-buckets.toml",
                    "--out",
                    "{case}/o",
                    "--max-hours",
                    "0.01",
                    "--workers",
                    "1",
                ],
                ["topo", "show", "ddp-buckets"],
                ["run", "dgx-a100", "--out", "{case}/o"],
            ]
        )
        return Case("", "cli", "misc", {"kind": "cli", "argv": argv}, special_files())

    # the pass

    def predict_valid_case(self) -> Case:
        return self.predict_case(self.predict_spec(), "predict-valid")

    def calibrate_case(self) -> Case:
        return self.compare_case(calibrate=True)

    #: Per family, the makers of its inputs and their shares.
    MAKERS: ClassVar[dict[str, list[tuple[str, float]]]] = {
        "cli": [
            ("predict_valid_case", 27),
            ("predict_boundary", 27),
            ("pair_case", 9),
            ("predict_special", 4),
            ("topo_case", 9),
            ("plan_case", 8),
            ("compare_case", 8),
            ("calibrate_case", 3),
            ("run_flags_case", 3),
            ("misc_case", 3),
        ],
        "scenario": [("scenario_case", 6), ("doors_case", 2), ("training_case", 2)],
        "import": [("import_case", 9), ("import_equivalence_case", 1)],
        "trace": [("trace_case", 1)],
    }

    def stubs(self, counts: dict[str, int], seed: int) -> list[Stub]:
        """Every input of the pass, not yet made: its id, its maker and its own seed (an
        input is the same whichever others run, and is made only when it runs)."""
        order = random.Random(seed)
        stubs: list[Stub] = []
        for family, count in counts.items():
            # a fixed share per maker, in an order shuffled by the seed
            options = self.MAKERS[family]
            total = sum(w for _, w in options)
            pool: list[str] = []
            for maker, weight in options:
                pool += [maker] * round(count * weight / total)
            while len(pool) < count:
                pool.append(options[0][0])
            pool = pool[:count]
            order.shuffle(pool)
            for i, maker in enumerate(pool, 1):
                stubs.append(Stub(f"{family}-{i:05d}", family, maker, f"{seed}:{family}:{i}"))
        order.shuffle(stubs)  # mix cheap and dear across the workers
        return stubs

    def make(self, stub: Stub) -> Case:
        """The input of ``stub``, from its own seed."""
        self.rng = random.Random(stub.seed)
        case: Case = getattr(self, stub.maker)()
        case.id, case.family = stub.id, stub.family
        return case


# -- mutations ------------------------------------------------------------------------------

NCCL_LOG_VALUES = [
    "-1",
    "-2",
    "99",
    "100000",
    "8",
    "0",
    "x",
    "",
    "1e9",
    "9999999999999999999",
    "3/3/3",
    "-1/-1/-1",
    "0->0",
    "NET/IB/99",
    "P2P/IPC",
]
LOG_VALUES = [
    "nan",
    "-1",
    "0",
    "1e300",
    "inf",
    "N/A",
    "x",
    "",
    "99999999999999999999",
    "-0",
    "1e-300",
    "0.00",
    "9007199254740993",
]
TOML_VALUES = [
    '"x"',
    "0",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e308",
    "9223372036854775807",
    "-9223372036854775808",
    "1.5",
    "true",
    "[]",
    "[1, 2]",
    '["a", 1]',
    "{}",
    "{ a = 1 }",
    '""',
    '"0 GB/s"',
    '"-1 GB/s"',
    '"nan GB/s"',
    '"1e308 GB/s"',
    '"12 parsecs"',
    '"1 us"',
    '"1e300 s"',
    '"/dev/zero"',
    '"{case}/fifo"',
    '"{case}/adir"',
    '"{case}/zero-link"',
    '"{case}/missing.toml"',
    '"{case}/big"',
    "1979-05-27T07:32:00Z",
    '"\\u0000"',
    '"' + "a" * 3000 + '"',
    "[[1], [2]]",
    '"dgx-a100"',
    '"none"',
    '"default"',
    '"random:1"',
    '"ring"',
    '"bogus"',
]
SCENARIO_VALUES = [
    '["a", "b"]',
    "[0]",
    "[-1]",
    "[1e308]",
    "[nan]",
    '["1 GiB", "x"]',
    "[[1]]",
    "[]",
    '["/dev/zero"]',
    "[true]",
    "[{a = 1}]",
    "[2, 2, 2]",
    "[100000]",
    '["8:8G"]',
    '["{case}/fifo"]',
]
SCENARIO_AXES = [
    '"topology.bogus" = [1, 2]',
    "bogus = [1, 2]",
    '"topology.file" = ["/dev/zero"]',
    '"topology.file" = ["{case}/fifo"]',
    "n_ranks = [2, 1000000]",
    '"topology.degrade" = ["bogus=0.5", "nvlink=2"]',
    '"topology.fail" = ["gpu0", "x"]',
    '"topology.routing.rule" = ["bogus"]',
    'calibration = ["bogus", "{case}/adir"]',
    'size_bytes = ["1 GiB", "-1", "0"]',
    'algorithm = ["bogus", "ring"]',
    'protocol = ["LL", "bogus"]',
    'placement = ["random:x", "{case}/fifo"]',
    '"" = [1]',
    'model = ["bogus", "packet"]',
    "n_ranks = [0, -1, 1]",
    '"topology.n_nodes" = [1e308]',
    "tp = [0, 3, 1000]",
    "pp = [-1]",
    "micro_batch_size = [0]",
    'transformer = ["bogus", "/dev/zero"]',
]


def mutate_lines(rng: random.Random, text: str, values: list[str]) -> str:
    """Text damage: a number replaced, a line dropped, repeated or cut, bytes spoiled."""
    lines = text.splitlines()
    op = rng.choice(
        ["number", "number", "number", "drop", "dup", "truncate", "bytes", "swap", "many", "blank"]
    )
    if not lines:
        return text
    i = rng.randrange(len(lines))
    if op == "number":
        numbers = list(re.finditer(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", lines[i]))
        if numbers:
            m = rng.choice(numbers)
            lines[i] = lines[i][: m.start()] + rng.choice(values) + lines[i][m.end() :]
    elif op == "drop":
        del lines[i]
    elif op == "dup":
        lines.insert(i, lines[i])
    elif op == "truncate":
        return text[: rng.randrange(len(text) + 1)]
    elif op == "bytes":
        return (
            text[: rng.randrange(len(text) + 1)].encode() + b"\xff\xfe\x80" + text.encode()[-50:]
        ).decode("utf-8", errors="surrogateescape")
    elif op == "swap" and len(lines) > 1:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "many":
        lines = lines[: i + 1] + [lines[i]] * 20000 + lines[i + 1 :]
    elif op == "blank":
        lines[i] = ""
    return "\n".join(lines) + "\n"


def mutate_toml(  # noqa: PLR0912 - a branch per kind of input
    rng: random.Random, text: str, *, scenario: bool = False, extra: list[str] | None = None
) -> str:
    """TOML damage at the level of lines: a value replaced, a key dropped, repeated or
    unknown, a sweep axis bad or huge, bytes spoiled."""
    lines = text.splitlines()
    assignments = [
        i for i, line in enumerate(lines) if re.match(r'^\s*("[^"]*"|[\w.-]+)\s*=', line)
    ]
    op = rng.choice(
        ["value"] * 6
        + ["drop", "dup", "unknown", "bytes", "truncate", "table"]
        + (["axis", "axis", "huge", "axis-value"] if scenario else [])
    )
    if op == "value" and assignments:
        i = rng.choice(assignments)
        key = lines[i].split("=", 1)[0]
        lines[i] = f"{key}= {rng.choice(TOML_VALUES)}"
    elif op == "drop" and assignments:
        del lines[rng.choice(assignments)]
    elif op == "dup" and assignments:
        i = rng.choice(assignments)
        lines.insert(i, lines[i])
    elif op == "unknown" and lines:
        key = rng.choice((extra or []) + ["bogus", "n_gpus", "kind", "file", "set"])
        lines.insert(rng.randrange(len(lines) + 1), f"{key} = {rng.choice(TOML_VALUES)}")
    elif op == "bytes":
        cut = rng.randrange(len(text) + 1)
        return text[:cut] + "\udcff\udcfe" + text[cut:]
    elif op == "truncate":
        return text[: rng.randrange(len(text) + 1)]
    elif op == "table":
        lines.insert(
            rng.randrange(len(lines) + 1),
            rng.choice(["[bogus]", "[[x]]", "[params]", "[sweep]", "[workload]", "["]),
        )
    elif op == "axis":
        at = next((i for i, line in enumerate(lines) if line.strip() == "[sweep]"), None)
        axis = rng.choice(SCENARIO_AXES)
        if at is None:
            lines += ["[sweep]", axis]
        else:
            lines.insert(at + 1, axis)
    elif op == "huge":
        at = next((i for i, line in enumerate(lines) if line.strip() == "[sweep]"), None)
        axes = rng.choice(
            [
                [f"n_ranks = [{', '.join(str(2 + i % 7) for i in range(200000))}]"],
                [f"a{j} = [{', '.join(str(i) for i in range(60))}]" for j in range(4)],
                [f"size_bytes = [{', '.join(str(2**10 + i) for i in range(150000))}]"],
            ]
        )
        lines = (
            (lines[: at + 1] + axes + lines[at + 1 :])
            if at is not None
            else [*lines, "[sweep]", *axes]
        )
    elif op == "axis-value":
        at = next((i for i, line in enumerate(lines) if line.strip() == "[sweep]"), None)
        if at is not None and at + 1 < len(lines) and "=" in lines[at + 1]:
            key = lines[at + 1].split("=", 1)[0]
            lines[at + 1] = f"{key}= {rng.choice(SCENARIO_VALUES)}"
    return "\n".join(lines) + "\n"


SIZE_STRINGS = [
    '"64 KiB"',
    '"1 MiB"',
    '"16 MiB"',
    '"256 MiB"',
    '"1 GB"',
    '"3 MiB"',
    "4096",
    '"0 B"',
    '"1 B"',
]


def benign_toml(rng: random.Random, text: str) -> str:
    """A value of a scenario changed to another plausible one (a number scaled, a size or
    an algorithm swapped): what a user editing the file might do."""
    lines = text.splitlines()
    candidates = [
        i
        for i, line in enumerate(lines)
        if re.match(r'^\s*("[^"]*"|[\w.-]+)\s*=\s*(-?[\d.]+|"[^"]*"|\[[^\]]*\])\s*(#.*)?$', line)
        and not re.match(r"^\s*(schema|title|description|file|kind)\s*=", line)
    ]
    if not candidates:
        return text
    i = rng.choice(candidates)
    key, value = lines[i].split("=", 1)
    value = value.split("#", 1)[0].strip()
    if re.fullmatch(r"-?\d+", value):
        new = str(max(1, int(int(value) * rng.choice([0.5, 2, 1, 0.25, 3, 4]))))
    elif re.fullmatch(r"-?[\d.]+", value):
        new = repr(float(value) * rng.choice([0.5, 2, 0.1, 10]))
    elif value.startswith("["):
        try:
            items = tomllib.loads(f"x = {value}")["x"]
        except tomllib.TOMLDecodeError:
            return text
        rng.shuffle(items)
        new = _toml_array(items[: max(1, len(items) - rng.choice([0, 1]))])
    elif re.search(r"\d\s*[KMGT]?i?B\b", value):
        new = rng.choice(SIZE_STRINGS)
    elif re.search(r"bit/s|B/s", value):
        new = rng.choice(['"100 Gbit/s"', '"400 Gbit/s"', '"25 GB/s"', '"1 GB/s"'])
    elif re.search(r"\d\s*[mun]?s\b", value):
        new = rng.choice(['"1 us"', '"0.5 ms"', '"10 ms"', '"0 s"'])
    elif value.strip('"') in {a for names in ALGORITHMS.values() for a in names} | {"nccl", "auto"}:
        new = json.dumps(rng.choice(["ring", "tree", "nccl", "auto", "direct", "halving_doubling"]))
    elif value.strip('"') in ("simple", "LL", "LL128", "auto", "none"):
        new = json.dumps(rng.choice(["simple", "LL", "LL128", "auto"]))
    else:
        return text
    lines[i] = f"{key}= {new}"
    return "\n".join(lines) + "\n"


def shrink_sweep(rng: random.Random, text: str) -> str:
    """A scenario cut to a few points: every sweep axis keeps one or two values (so that a
    mutated scenario runs in seconds, as a few points of the shipped one do)."""
    out = []
    in_sweep = False
    for line in text.splitlines():
        if line.startswith("["):
            in_sweep = line.strip() == "[sweep]"
        if in_sweep and "= [" in line and line.rstrip().endswith("]"):
            key, values = line.split("=", 1)
            try:
                items = tomllib.loads(f"x = {values}")["x"]
            except tomllib.TOMLDecodeError:
                out.append(line)
                continue
            keep = items[: rng.choice([1, 1, 2])]
            out.append(f"{key}= {_toml_array(keep)}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _toml_array(items: list[Any]) -> str:
    def one(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return _toml_array(v)
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {one(x)}" for k, x in v.items()) + " }"
        return repr(v)

    return "[" + ", ".join(one(v) for v in items) + "]"


def mutate_csv(rng: random.Random, text: str) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 2:
        return text
    op = rng.choice(
        [
            "cell",
            "cell",
            "cell",
            "drop-column",
            "swap-columns",
            "dup-header",
            "empty",
            "header-only",
            "many",
            "unknown-collective",
        ]
    )
    header = rows[0]
    if op == "cell":
        r = rng.randrange(1, len(rows))
        c = rng.randrange(len(header))
        rows[r][c] = rng.choice([*LOG_VALUES, "allreduce", "sendrecv", "true", "false", "99"])
    elif op == "drop-column":
        c = rng.randrange(len(header))
        rows = [row[:c] + row[c + 1 :] for row in rows]
    elif op == "swap-columns":
        a, b = rng.sample(range(len(header)), 2)
        rows[0][a], rows[0][b] = rows[0][b], rows[0][a]
    elif op == "dup-header":
        rows.insert(1, list(header))
    elif op == "empty":
        return ""
    elif op == "header-only":
        rows = rows[:1]
    elif op == "many":
        rows = rows[:1] + rows[1:2] * 200000
    else:
        col = header.index("collective") if "collective" in header else 0
        rows[1][col] = rng.choice(["bogus", "AllReduce", "", "all_reduce"])
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def mutate_json_text(rng: random.Random, text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    op = rng.choice(["value", "value", "drop", "junk", "deep", "list"])
    if op == "junk":
        return text[: len(text) // 2]
    if op == "deep":
        return "[" * 100000 + "]" * 100000
    if op == "list":
        return "[]"
    if isinstance(doc, dict) and doc:
        key = rng.choice(sorted(doc))
        if op == "drop":
            del doc[key]
        else:
            doc[key] = rng.choice([None, -1, "bogus", 1e308, [], {}, "nccl", "gloo", 0, 3])
    return json.dumps(doc)


def mutate_xml(rng: random.Random, text: str) -> str:
    op = rng.choice(
        ["attr"] * 6
        + ["drop", "dup", "nest", "entity", "truncate", "bytes", "many", "rename", "external"]
    )
    attrs = list(re.finditer(r'(\w+)="([^"]*)"', text))
    if op == "attr" and attrs:
        m = rng.choice(attrs)
        value = rng.choice(
            [
                "",
                "-1",
                "0",
                "nan",
                "inf",
                "1e308",
                "99999999999999999999",
                "x",
                "0x",
                "0xZZ",
                "0x2330",
                "0x20b0",
                "0x1db5",
                "0x2684",
                "1.5",
                "-0",
                "32.0 GT/s PCIe",
                "2.5 GT/s",
                "bogus GT/s",
                "16",
                "9999",
                "&amp;",
                "0000:ff:00.0",
                "0000:a1:00.0",
                "0000:19:00.0",
                "90",
                "70",
                "100",
                "a" * 5000,
                "400000",
                "1",
            ]
        )
        return text[: m.start(2)] + value + text[m.end(2) :]
    lines = text.splitlines()
    elements = [i for i, line in enumerate(lines) if re.match(r"^\s*<\w", line)]
    if op == "drop" and elements:
        del lines[rng.choice(elements)]
    elif op == "dup" and elements:
        i = rng.choice(elements)
        lines.insert(i, lines[i])
    elif op == "nest":
        depth = rng.choice([100, 1000, 20000])
        at = rng.choice(elements) if elements else 0
        lines.insert(at + 1, '<pci busid="0000:01:00.0">' * depth + "</pci>" * depth)
    elif op == "entity":
        bomb = (
            '<?xml version="1.0"?>\n<!DOCTYPE system [\n <!ENTITY a "aaaaaaaaaa">\n'
            + "".join(
                f' <!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">\n' for i in range(9)
            )
            + "]>\n"
        )
        body = "\n".join(lines)
        return bomb + body.replace('arch="x86_64"', 'arch="&j;"', 1)
    elif op == "external":
        return (
            '<?xml version="1.0"?>\n<!DOCTYPE system [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
            + "\n".join(lines).replace('vendor="GenuineIntel"', 'vendor="&x;"', 1)
        )
    elif op == "truncate":
        return text[: rng.randrange(len(text) + 1)]
    elif op == "bytes":
        cut = rng.randrange(len(text) + 1)
        return text[:cut] + "\udcff\udcfe" + text[cut:]
    elif op == "many":
        gpu_block = re.search(r"\s*<pci [^\n]*class=\"0x060400\".*?\n    </pci>", text, re.S)
        if gpu_block:
            block = gpu_block.group(0)
            copies = "".join(
                block.replace("0000:", f"{k:04x}:") for k in range(1, rng.choice([8, 200, 5000]))
            )
            return text.replace(block, block + copies, 1)
    elif op == "rename" and elements:
        i = rng.choice(elements)
        lines[i] = re.sub(
            r"<(\w+)",
            lambda m: (
                "<" + rng.choice(["gpu", "nic", "cpu", "pci", "nvlink", "bogus", "net", "system"])
            ),
            lines[i],
            count=1,
        )
    return "\n".join(lines) + "\n"


def mutate_nvsmi(rng: random.Random, text: str) -> str:
    lines = text.splitlines()
    matrix = [
        i
        for i, line in enumerate(lines)
        if re.match(r"^(GPU|NIC)\d+\t", line) or line.startswith("\tGPU")
    ]
    op = rng.choice(
        ["cell"] * 6
        + [
            "drop-row",
            "drop-col",
            "dup-row",
            "huge",
            "spaces",
            "truncate",
            "bytes",
            "asym",
            "header",
        ]
    )
    if op == "cell" and matrix:
        i = rng.choice(matrix)
        cells = lines[i].split("\t")
        j = rng.randrange(len(cells))
        cells[j] = rng.choice(
            [
                "NV0",
                "NV999999999",
                "NV-1",
                "NVx",
                "NV",
                "PIX",
                "SYS",
                "NODE",
                "PHB",
                "PXB",
                " X ",
                "X",
                "bogus",
                "",
                "NV18",
                "NV1",
                "NV2",
                "N/A",
                "0-999999999",
                "-1",
                "99999999999999999999",
                "GPU9",
                "NIC99",
            ]
        )
        lines[i] = "\t".join(cells)
    elif op == "drop-row" and matrix:
        del lines[rng.choice(matrix)]
    elif op == "drop-col" and matrix:
        j = rng.randrange(1, 9)
        for i in matrix:
            cells = lines[i].split("\t")
            if j < len(cells):
                del cells[j]
            lines[i] = "\t".join(cells)
    elif op == "dup-row" and matrix:
        i = rng.choice(matrix)
        lines.insert(i, lines[i])
    elif op == "huge":
        n = rng.choice([64, 600, 3000])
        header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity"
        rows = [
            f"GPU{i}\t" + "\t".join(" X " if i == j else "NV4" for j in range(n)) + "\t0-1\t0"
            for i in range(n)
        ]
        return "\n".join([header, *rows, "", *lines[len(matrix) + 1 :]]) + "\n"
    elif op == "spaces":
        return text.replace("\t", " " * rng.choice([1, 2, 4]))
    elif op == "truncate":
        return text[: rng.randrange(len(text) + 1)]
    elif op == "bytes":
        cut = rng.randrange(len(text) + 1)
        return text[:cut] + "\udcff\udcfe" + text[cut:]
    elif op == "asym" and len(matrix) > 2:
        i = rng.choice(matrix[1:])
        cells = lines[i].split("\t")
        j = rng.randrange(1, min(len(cells), 9))
        cells[j] = rng.choice(["NV1", "SYS", "PIX", "NV12"])
        lines[i] = "\t".join(cells)
    elif op == "header" and lines:
        lines[0] = rng.choice(["", "GPU0\tGPU1", "\tGPU0\tGPU0\tGPU1", "bogus", "\t" * 50])
    return "\n".join(lines) + "\n"


TRACE_NUMBERS = [
    math.nan,
    -1.0,
    1e308,
    math.inf,
    -math.inf,
    0,
    -1e18,
    1e300,
    "x",
    None,
    1.5,
    2**63,
    -(2**63),
    True,
    [],
    {},
]


def mutate_trace(rng: random.Random, doc: Any, which: str) -> Any:  # noqa: PLR0912, PLR0915 - a branch per kind of input
    """Damage to an execution trace (``et``) or a Kineto trace: odd numbers, missing and
    repeated ids, odd ranks and process groups, overlaps, cycles, bytes."""
    if isinstance(doc, bytes):
        return doc
    op = rng.choice(
        ["bytes", "junk"]
        + ["field"] * 6
        + (
            ["drop-node", "dup-node", "pg", "c10d", "rf", "cycle", "deep", "shape"]
            if which == "et"
            else ["dur", "ts", "rfid", "rank", "overlap", "drop-event", "events"]
        )
    )
    if op == "bytes":
        raw = json.dumps(doc).encode()
        return rng.choice(
            [
                raw[: rng.randrange(len(raw))],
                b"",
                b"\x1f\x8b\x08\x00garbage",
                gzip.compress(raw, mtime=0)[:50],
                b"\xff\xfe\x00",
                b"null",
                gzip.compress(b"\x00" * 2**20, mtime=0),
            ]
        )
    if op == "junk":
        return rng.choice(
            [
                [],
                {},
                None,
                1,
                "x",
                {"nodes": {}},
                {"traceEvents": None},
                {"nodes": [1, 2, 3]},
                {"traceEvents": [1, "x", None]},
            ]
        )
    if not isinstance(doc, dict):
        return doc
    if which == "et":
        nodes = doc.get("nodes")
        if not isinstance(nodes, list) or not any(isinstance(n, dict) for n in nodes):
            return doc
        every = nodes
        nodes = [n for n in nodes if isinstance(n, dict)]
        if not nodes:
            return doc
        node = rng.choice(nodes)
        if op == "field":
            key = rng.choice(["id", "name", "ctrl_deps", "inputs", "outputs", "attrs"])
            if rng.random() < 0.4:
                node.pop(key, None)
            else:
                node[key] = rng.choice(TRACE_NUMBERS)
        elif op == "drop-node":
            special = [
                n
                for n in nodes
                if str(n.get("name", "")).startswith(("c10d::", "## process", "simcoll:"))
            ]
            every.remove(rng.choice(special) if special and rng.random() < 0.6 else node)
        elif op == "dup-node":
            every.append(copy.deepcopy(node))
        elif op == "pg":
            pg = next((n for n in nodes if n.get("name") == "## process_group:init ##"), None)
            if pg is not None:
                value = rng.choice(
                    [
                        [{"pg_name": "0", "ranks": [0, 1, 2, 99], "group_size": 4}],
                        [{"pg_name": "0", "ranks": [-1, 0], "group_size": 2}],
                        [{"pg_name": "0", "ranks": ["a"], "group_size": 1}],
                        [{"pg_name": "0", "ranks": [0, 0, 1, 1], "group_size": 4}],
                        [{"pg_name": "0", "ranks": [], "group_size": 99}],
                        [{"pg_name": "0", "ranks": 1e30}],
                        [{"pg_name": "0", "ranks": [], "group_size": -4}],
                        [
                            {"pg_name": "0", "ranks": [], "group_size": 4},
                            {"pg_name": "0", "ranks": [0]},
                        ],
                        [{"pg_name": "1", "ranks": [0, 1], "group_size": 2}],
                        [{"ranks": [0, 1, 2, 3]}],
                        [],
                        {},
                        "x",
                        [{"pg_name": "0", "ranks": [0, 1, 2, 3, 4, 5, 6, 7], "group_size": 8}],
                        [{"pg_name": "0", "ranks": [0, 1, 2, 2**40], "group_size": 4}],
                    ]
                )
                text = json.dumps(value) if rng.random() < 0.85 else '[{"pg_name": "0", "ranks": ['
                pg.setdefault("inputs", {})["values"] = [text]
        elif op == "c10d":
            calls = [n for n in nodes if str(n.get("name", "")).startswith("c10d::")]
            if calls:
                call = rng.choice(calls)
                if rng.random() < 0.3:
                    call["name"] = rng.choice(
                        [
                            "c10d::frob_",
                            "c10d::send",
                            "c10d::recv_",
                            "c10d::barrier",
                            "c10d::alltoall_base_",
                        ]
                    )
                else:
                    for value in call.get("inputs", {}).get("values", []):
                        if isinstance(value, list) and len(value) == 6:
                            value[rng.choice([3, 4])] = rng.choice([2**62, -4, 0, 1e30, "x", None])
                            break
                        if (
                            isinstance(value, list)
                            and value
                            and isinstance(value[0], list)
                            and len(value[0]) == 6
                        ):
                            value[0][rng.choice([3, 4])] = rng.choice([2**62, -4, 0, 1e30, "x"])
                            break
        elif op == "rf":
            attrs = node.get("attrs")
            if isinstance(attrs, list):
                rf = next(
                    (a for a in attrs if isinstance(a, dict) and a.get("name") == "rf_id"), None
                )
                if rf is not None:
                    choice = rng.random()
                    if choice < 0.3:
                        attrs.remove(rf)
                    elif choice < 0.6:
                        other = rng.choice(nodes)
                        rf["value"] = next(
                            (
                                a.get("value")
                                for a in other.get("attrs", [])
                                if isinstance(a, dict) and a.get("name") == "rf_id"
                            ),
                            0,
                        )
                    else:
                        rf["value"] = rng.choice(TRACE_NUMBERS)
        elif op == "cycle":
            a, b = rng.choice(nodes), rng.choice(nodes)
            a["ctrl_deps"], b["ctrl_deps"] = b.get("id"), a.get("id")
        elif op == "deep":  # written out by _trace_bytes
            node.setdefault("inputs", {})["values"] = [f"__DEEP_{rng.choice([100, 5000])}__"]
        elif op == "shape":
            for value in node.get("outputs", {}).get("values", []):
                if isinstance(value, list) and len(value) == 6:
                    value[3] = rng.choice([2**62, -1, 1e300])
        return doc
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        events = []
    ops = [
        e
        for e in events
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and isinstance(e.get("args"), dict)
        and "Record function id" in e["args"]
    ]
    if op == "rank":
        info = doc.setdefault("distributedInfo", {})
        choice = rng.random()
        if choice < 0.15:
            doc.pop("distributedInfo", None)
        elif choice < 0.25:
            doc["distributedInfo"] = rng.choice([[], "x", 1])
        elif isinstance(info, dict):
            info["rank"] = rng.choice([7, -1, "x", 99999, None, 1.5, 2**40, 3, 1, 32768])
        return doc
    if op == "events":
        doc["traceEvents"] = rng.choice(
            [
                {},
                None,
                [],
                [
                    {"ph": "X", "args": {"Record function id": i}, "ts": i, "dur": 1}
                    for i in range(200000)
                ],
            ]
        )
        return doc
    if not ops:
        return doc
    event = rng.choice(ops)
    if op in ("dur", "field"):
        if rng.random() < 0.2:
            event.pop("dur", None)
        else:
            event["dur"] = rng.choice(TRACE_NUMBERS)
    elif op == "ts":
        if rng.random() < 0.2:
            event.pop("ts", None)
        else:
            event["ts"] = rng.choice(TRACE_NUMBERS)
    elif op == "rfid":
        choice = rng.random()
        if choice < 0.3:
            event["args"]["Record function id"] = rng.choice(ops)["args"]["Record function id"]
        else:
            event["args"]["Record function id"] = rng.choice(TRACE_NUMBERS)
    elif op == "overlap":
        other = rng.choice(ops)
        if isinstance(other.get("ts"), (int, float)) and isinstance(other.get("dur"), (int, float)):
            event["ts"] = other["ts"] + other["dur"] * rng.choice([0.1, 0.5, 0.99, 1.0])
            event["dur"] = other["dur"] * rng.choice([0.5, 2.0, 10.0, 1000.0])
    elif op == "drop-event":
        events.remove(event)
    return doc


def benign_trace(rng: random.Random, docs: dict[str, Any]) -> None:
    """One rank's step changed in ways a real recording could show: an op's duration
    scaled (0 included), ops overlapping, events reordered, an op dropped from both traces."""
    events = docs["kineto"].get("traceEvents", [])
    ops = [
        e
        for e in events
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and isinstance(e.get("args"), dict)
        and "Record function id" in e["args"]
    ]
    if not ops:
        return
    op = rng.choice(["scale", "scale", "overlap", "shuffle", "drop-both", "shift"])
    event = rng.choice(ops)
    if op == "scale":
        event["dur"] = event.get("dur", 0) * rng.choice([0, 0.5, 2, 10, 1000])
    elif op == "overlap":
        other = rng.choice(ops)
        event["ts"] = other["ts"] + other["dur"] * rng.choice([0.0, 0.5, 1.0])
    elif op == "shuffle":
        rng.shuffle(events)
    elif op == "shift":
        for e in ops:
            e["ts"] = e["ts"] + rng.choice([-1e9, 1e9, 0.5])
    else:
        rf_id = event["args"]["Record function id"]
        name = str(event.get("name", ""))
        if name.startswith(("c10d::", "## process", "simcoll:", "ProfilerStep")):
            return
        events.remove(event)
        nodes = docs["et"].get("nodes", [])
        docs["et"]["nodes"] = [
            n
            for n in nodes
            if not any(
                isinstance(a, dict) and a.get("name") == "rf_id" and a.get("value") == rf_id
                for a in n.get("attrs", [])
            )
        ]


def _trace_bytes(doc: Any) -> bytes:
    """A (mutated) trace document as JSON, NaN and infinities as Python writes them, and
    nesting markers expanded (too deep for ``json.dumps``)."""
    if isinstance(doc, bytes):
        return doc
    text = json.dumps(doc)
    return re.sub(
        r'"__DEEP_(\d+)__"', lambda m: "[" * int(m.group(1)) + "1" + "]" * int(m.group(1)), text
    ).encode()


def _trace_bases() -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The recorded steps: sidecar and, per rank, the decoded ET and Kineto documents."""
    bases = {}
    folder = REPO / "validation/data/traces"
    for name in ("ddp-star4", "tp-star4"):
        side = json.loads((folder / f"{name}.json").read_text())
        docs = []
        for rank in range(side["world_size"]):
            et, kineto = side["files"][str(rank)]
            docs.append(
                {
                    "et": json.loads(gzip.decompress((folder / et).read_bytes())),
                    "kineto": json.loads(gzip.decompress((folder / kineto).read_bytes())),
                }
            )
        bases[name] = (side, docs)
    return bases


# -- the pass -------------------------------------------------------------------------------

PLAN_SOURCES = [
    ("dgx-h100", []),
    ("dgx-a100", []),
    ("dgx1-v100", []),
    ("pcie-4x-switch", []),
    ("h100-ib-fat-tree", ["--set", "n_nodes=2"]),
    ("a100-roce-2to1", ["--set", "n_nodes=2"]),
    ("h100-rail-optimized", ["--set", "n_nodes=2"]),
]


def _setup_plans(runner: Runner, scratch: Path) -> dict[str, str]:
    """The NCCL logs the plan mutations start from: ``plan show`` of a few machines."""
    logs: dict[str, str] = {}

    def flow(name: str, extra: list[str]) -> Generator[RunSpec, RunResult, Verdict]:
        workdir = scratch / f"setup-{name}"
        workdir.mkdir(parents=True, exist_ok=True)
        result = yield RunSpec({"kind": "cli", "argv": ["plan", "show", name, *extra]}, workdir)
        if result.rc == 0:
            logs[name] = result.stdout
        return classify(result)

    cases = [(Case(f"setup-{n}", "setup", "setup", {}), flow(n, e)) for n, e in PLAN_SOURCES]
    runner.run(cases, lambda case, verdict: None)
    return logs


def _clear_failures(out: Path) -> None:
    """Removes an earlier run's failure folders (each holds the case.json it wrote), and
    nothing else."""
    failures = out / "failures"
    if not failures.is_dir():
        return
    for folder in failures.iterdir():
        if folder.is_dir() and (folder / "case.json").is_file():
            shutil.rmtree(folder)
    with contextlib.suppress(OSError):
        failures.rmdir()


def _save_failure(out: Path, case: Case, verdict: Verdict) -> None:
    folder = out / "failures" / case.id
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    regular = {k: v for k, v in case.files.items() if isinstance(v, bytes) and len(v) <= 2**20}
    materialize(regular, folder)
    setup = []  # special and large files, made by repro.sh (nothing odd in the results)
    for name, spec in case.files.items():
        if name in regular:
            continue
        if isinstance(spec, bytes):
            packed = spec.replace(b"{repo}", bytes(REPO))
            (folder / f"{name}.gz").write_bytes(gzip.compress(packed, mtime=0))
            setup.append(
                f'gunzip -c {shlex.quote(name)}.gz | sed "s#{{case}}#$CASE#g" > {shlex.quote(name)}'
            )
        elif spec.get("fifo"):
            setup.append(f"[ -p {name} ] || mkfifo {name}")
        elif spec.get("dir"):
            setup.append(f"mkdir -p {name}")
        elif "symlink" in spec:
            setup.append(f"ln -sfn {shlex.quote(spec['symlink'])} {name}")
        elif "sparse" in spec:
            setup.append(f"truncate -s {spec['sparse']} {name}")
    first: RunResult | None = case.meta.get("_first")
    record = {
        "id": case.id,
        "family": case.family,
        "group": case.group,
        "outcome": verdict.outcome,
        "reasons": verdict.reasons,
        "task": case.task,
        "checks": case.checks,
        "stdout_tail": first.stdout[-3000:] if first else "",
        "stderr_tail": first.stderr[-3000:] if first else "",
        "wall_s": verdict.wall_s,
    }
    extra = {k: v for k, v in case.meta.items() if not k.startswith("_")}
    if extra:
        record["meta"] = json.loads(json.dumps(extra, default=str))
    (folder / "case.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    (folder / "task.json").write_text(json.dumps(case.task) + "\n")
    repo = '$(cd "$(dirname "$0")/../../../../.." && pwd)'
    if case.task.get("kind") == "cli":
        argv = " ".join(_sh(a) for a in case.task["argv"])
        command = f'"$PY" -m simcoll {argv}'
    else:
        command = '"$PY" "$REPO/validation/adversarial.py" --task task.json'
    (folder / "repro.sh").write_text(
        "#!/bin/sh\n"
        f"# {case.id} ({case.group}): {verdict.outcome}\n"
        f"# {(verdict.reasons[0] if verdict.reasons else '')[:300]!r}\n"
        'CASE="$(cd "$(dirname "$0")" && pwd)"\n'
        f"REPO={repo}\n"
        'cd "$CASE"\n'
        + "".join(f"{line}\n" for line in setup)
        + f"ulimit -v {MEMORY_BYTES // 1024}\n"
        'PY="$REPO/.venv/bin/python"; [ -x "$PY" ] || PY=python\n'
        f'PYTHONPATH="$REPO" timeout {TIMEOUT_S:.0f} {command}\n'
    )


def _sh(arg: str) -> str:
    quoted = shlex.quote(arg)
    return quoted.replace("{case}", "'\"$CASE\"'").replace("{repo}", "'\"$REPO\"'")


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - a branch per kind of input
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--count", type=int, default=5700, help="inputs in all (default 5,700)")
    parser.add_argument("--families", default="cli,scenario,import,trace")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--spawn",
        action="store_true",
        help="run each input in a fresh `python -m simcoll` (slower)",
    )
    parser.add_argument("--out", default=str(REPO / "validation/results/adversarial-41"))
    parser.add_argument("--only", help="run only these case ids (comma-separated)")
    parser.add_argument("--task", help="run one task.json in this process (a reproduction)")
    parser.add_argument("--task-json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.task or args.task_json:
        task = json.loads(Path(args.task).read_text() if args.task else args.task_json)
        return execute(substitute(task, Path.cwd()))

    # Everything a child needs is imported before the first fork, and nothing is run.
    import simcoll.cli.main  # noqa: PLC0415
    import simcoll.prediction  # noqa: PLC0415
    import simcoll.training.trace  # noqa: F401, PLC0415

    started = time.monotonic()
    out = Path(args.out)
    if out.is_dir() and any(out.iterdir()) and not (out / "summary.json").is_file():
        print(f"adversarial.py: error: --out {out}: not empty and not an earlier run's folder")
        return 2
    _clear_failures(out)
    out.mkdir(parents=True, exist_ok=True)
    families = [f for f in args.families.split(",") if f]
    share = {"cli": 0.56, "scenario": 0.12, "import": 0.16, "trace": 0.16}
    weights = {f: share[f] for f in families}
    counts = {f: round(args.count * w / sum(weights.values())) for f, w in weights.items()}
    scratch = Path(tempfile.mkdtemp(prefix="simcoll-adversarial-"))
    runner = Runner(
        args.workers,
        spawn=args.spawn,
        timeout_s=TIMEOUT_S,
        memory_bytes=MEMORY_BYTES,
        scratch=scratch,
    )
    try:
        plan_logs = _setup_plans(runner, scratch)
        generator = Inputs(args.seed, plan_logs)
        stubs = generator.stubs(counts, args.seed)
        if args.only:
            wanted = set(args.only.split(","))
            stubs = [s for s in stubs if s.id in wanted]
        checker = Checker(scratch, generator)
        outcomes: Counter[str] = Counter()
        by_family: dict[str, Counter[str]] = {}
        by_group: dict[str, Counter[str]] = {}
        failures: list[dict[str, Any]] = []
        refusals: dict[str, Counter[str]] = {}
        runs = 0
        slowest: list[tuple[float, str]] = []
        peak = (0, "")

        def done(stub: Stub, verdict: Verdict) -> None:
            case = stub.case or Case(stub.id, stub.family, stub.maker, {})
            nonlocal runs, peak
            runs += verdict.runs
            outcomes[verdict.outcome] += 1
            by_family.setdefault(case.family, Counter())[verdict.outcome] += 1
            by_group.setdefault(case.group, Counter())[verdict.outcome] += 1
            slowest.append((verdict.wall_s, case.id))
            if verdict.outcome == "refused" and verdict.reasons:
                said = re.sub(r"/tmp/simcoll-adversarial-\w+/[\w-]+", "{case}", verdict.reasons[0])
                said = re.sub(r"\d+(\.\d+)?", "N", said)[:160]
                refusals.setdefault(case.group, Counter())[said] += 1
            if verdict.maxrss_bytes > peak[0]:
                peak = (verdict.maxrss_bytes, case.id)
            if verdict.outcome not in ("ok", "refused"):  # slow ones too, to rerun
                failures.append(
                    {
                        "id": case.id,
                        "family": case.family,
                        "group": case.group,
                        "outcome": verdict.outcome,
                        "reasons": verdict.reasons[:3],
                    }
                )
                _save_failure(out, case, verdict)
            finished = sum(outcomes.values())
            if finished % 100 == 0 or verdict.outcome not in ("ok", "refused"):
                print(
                    f"[{time.monotonic() - started:7.0f} s] {finished}/{len(stubs)} "
                    + " ".join(f"{k}={v}" for k, v in sorted(outcomes.items()))
                    + (
                        f"  {case.id}: {verdict.outcome}: {(verdict.reasons or [''])[0][:200]}"
                        if verdict.outcome not in ("ok", "refused")
                        else ""
                    ),
                    flush=True,
                )

        runner.run(((stub, checker.flow(stub)) for stub in stubs), done)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.monotonic() - started
    slowest.sort(reverse=True)
    summary = {
        "issue": 41,
        "seed": args.seed,
        "inputs": sum(outcomes.values()),
        "runs": runs,
        "wall_s": round(wall, 1),
        "workers": args.workers,
        "mode": "spawn" if args.spawn else "fork",
        "limits": {"timeout_s": TIMEOUT_S, "address_space_bytes": MEMORY_BYTES},
        "command": shlex.join(
            ["python", "validation/adversarial.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "outcomes": dict(sorted(outcomes.items())),
        "by_family": {k: dict(sorted(v.items())) for k, v in sorted(by_family.items())},
        "by_group": {k: dict(sorted(v.items())) for k, v in sorted(by_group.items())},
        "checked": dict(sorted(checker.checked.items())),
        "slowest": [{"id": i, "wall_s": round(s, 2)} for s, i in slowest[:10]],
        "peak_rss": {"id": peak[1], "bytes": peak[0]},
        "failures": failures,
        "refusals": {
            g: [f"{n} x {m}" for m, n in c.most_common(8)] for g, c in sorted(refusals.items())
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "README.md").write_text(readme(summary))
    print(
        json.dumps(
            {k: summary[k] for k in ("seed", "inputs", "runs", "wall_s", "outcomes", "by_family")},
            indent=1,
        )
    )
    bad = sum(v for k, v in outcomes.items() if k not in ("ok", "refused", "slow"))
    return 1 if bad else 0


def readme(summary: dict[str, Any]) -> str:
    """The summary, short, as Markdown."""
    outcomes = ", ".join(f"{k} {v:,}" for k, v in summary["outcomes"].items())
    lines = [
        f"# Adversarial pass (issue {summary['issue']})",
        "",
        "Made by",
        "",
        f"    {summary['command']}",
        "",
        f"{summary['inputs']:,} inputs (seed {summary['seed']}), {summary['runs']:,} runs of "
        f"simcoll, {summary['wall_s']:.0f} s on {summary['workers']} workers, each run under "
        f"{summary['limits']['timeout_s']:.0f} s and "
        f"{summary['limits']['address_space_bytes'] / 2**30:.0f} GiB of address space.",
        "",
        f"Outcomes: {outcomes}. Outcomes are defined in the docstring of "
        "`validation/adversarial.py`; anything but ok, refused and slow is a failure.",
        "",
        "| family | " + " | ".join(sorted(summary["outcomes"])) + " |",
        "|---" * (1 + len(summary["outcomes"])) + "|",
    ]
    for family, counts in summary["by_family"].items():
        cells = " | ".join(f"{counts.get(k, 0):,}" for k in sorted(summary["outcomes"]))
        lines.append(f"| {family} | {cells} |")
    checked = ", ".join(f"{k} {v:,}" for k, v in summary["checked"].items())
    lines += ["", f"Checks run on what ran: {checked}.", ""]
    if summary["failures"]:
        lines += ["Not ok and not refused (each has `failures/<id>/repro.sh`):", ""]
        for failure in summary["failures"]:
            reason = (failure["reasons"] or [""])[0].replace("\n", " ")[:200]
            lines.append(
                f"- `{failure['id']}` ({failure['group']}): {failure['outcome']}: {reason}"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
