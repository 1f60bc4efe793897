"""An emulated cluster: a simcoll topology as Linux network namespaces, bridges and tbf.

Every GPU of the topology becomes a network namespace ``sc<id>-r<rank>`` holding one
interface with an address in a /16 of its own; every other node (a switch) becomes a
Linux bridge, and all bridges live in one more namespace, ``sc<id>-fab``, so nothing is
added to the root namespace. Each topology link (a duplex pair of directed edges) is a
veth pair, and each directed edge is shaped by a tbf qdisc on the egress of its sending
end at the edge's ``bandwidth_bytes_per_s``: a single slow link, or an asymmetric one,
is emulated as written. Processes started with :meth:`Testbed.run_ranks` see ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` as torchrun sets them, so
:mod:`validation.replay` runs on the testbed unchanged::

    with Testbed("validation/topologies/star4-1gbit.toml") as bed:
        bed.run_ranks([sys.executable, "-m", "validation.replay", ...], env={}, timeout_s=600)

What it cannot emulate, it says so:

- **Latency.** Where the kernel has no ``sch_netem`` (the machines this project runs on:
  see ``shared/reference/testbed-notes.md``) no delay can be added; every link then has
  the native veth + bridge latency, which :meth:`Testbed.describe` measures (median TCP
  echo round trip between ranks 0 and 1) and reports next to the latency requested.
- **Shapes.** A GPU must have exactly one link, to a switch; switches must form a tree
  (bridges run no spanning tree and no ECMP); every link must exist in both directions.

Teardown always happens: on leaving the ``with`` block (also on an exception), on SIGINT
and SIGTERM while the testbed is up, and at interpreter exit. Every namespace and
interface is written to a state file (``/run/simcoll-testbed/<id>.json``, mode 0600) as
soon as it is created, never before: a name that could not be created (someone else's)
is never deleted. Teardown deletes exactly those names, and ``python -m validation.testbed
cleanup`` deletes what state files left behind by a process that was killed with -9. Only
state files owned by root and writable by nobody else, in folders of the same kind, are
read, and only names of the testbed's own pattern (``sc<id>-...``) are ever deleted:
a file planted in a world-writable ``$TMPDIR/simcoll-testbed`` cannot make cleanup delete
``eth0`` or another namespace.

Command line::

    python -m validation.testbed show validation/topologies/star4-1gbit.toml
    python -m validation.testbed run validation/topologies/star4-one-slow.toml -- CMD ARGS...
    python -m validation.testbed cleanup

Needs root, ``ip`` (iproute2) and ``tc``. This module never imports torch.
"""

from __future__ import annotations

from validation.testbed._system import (
    ECHO_ROUND_TRIPS,
    TBF_BURST_BYTES,
    TBF_QUEUE_S,
    RankResult,
    TestbedError,
    cleanup_leftovers,
    testbed_available,
)
from validation.testbed.cli import main
from validation.testbed.core import Testbed

__all__ = [
    "ECHO_ROUND_TRIPS",
    "TBF_BURST_BYTES",
    "TBF_QUEUE_S",
    "RankResult",
    "Testbed",
    "TestbedError",
    "cleanup_leftovers",
    "main",
    "testbed_available",
]
