"""How real libraries run each collective, as simcoll algorithms: the model of a backend.

Calibration and comparison must simulate what the measured library did. For NCCL that is
its own choice among ring, tree, NVLS and SHARP, which ``algorithm="auto"`` reproduces.
For torch.distributed's gloo backend (CPU tensors, TCP) the algorithm per collective is
fixed by gloo and torch; ``validation/gloo-algorithms.md`` gives the sources.

>>> algorithm_for("gloo", "allreduce"), algorithm_for("nccl", "allgather")
('ring', 'auto')
>>> algorithm_for("gloo", "alltoall")
'direct'
"""

from __future__ import annotations

from simcoll.collectives import Collective
from simcoll.errors import ConfigError

__all__ = ["BACKENDS", "GLOO_ALGORITHMS", "algorithm_for", "default_protocol"]

#: torch's gloo backend, CPU tensors (see validation/gloo-algorithms.md for the evidence).
GLOO_ALGORITHMS: dict[str, str] = {
    "allreduce": "ring",
    "allgather": "ring",
    "reducescatter": "ring",
    "alltoall": "direct",
    "broadcast": "tree",
    "reduce": "tree",
    "gather": "direct",
    "scatter": "direct",
    "sendrecv": "direct",
}

BACKENDS = ("nccl", "gloo")


def algorithm_for(backend: str, collective: str) -> str:
    """The simcoll algorithm that models ``backend`` running ``collective``."""
    name = Collective.parse(collective).value
    if backend == "gloo":
        return GLOO_ALGORITHMS[name]
    if backend == "nccl":
        return "auto"
    raise ConfigError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")


def default_protocol(backend: str) -> str | None:
    """NCCL's protocols for NCCL (the fastest per size); none (the bare links) for gloo.

    >>> default_protocol("gloo") is None, default_protocol("nccl")
    (True, 'auto')
    """
    return None if backend == "gloo" else "auto"
