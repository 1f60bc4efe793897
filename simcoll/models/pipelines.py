"""Closed forms of pipelined transfers: m dependent steps of k chunks on one connection, and
k chunks through a chain of h hops, each with at most W chunks in flight.

The pipelined form is the longest path through a connection's transfers (derived in
``tests/sim/test_engine.py`` for W = 1 and W unbounded)::

    P(m, k) = alpha + m k tau + floor((m k - 1) / w) max(0, alpha - (w - 1) tau),  w = min(W, k)

m steps of k chunks each, every chunk waiting for its predecessor of the step before:
with W >= k it is ``alpha + m k tau + (m - 1) max(0, alpha - (k - 1) tau)`` (latency
hidden behind the k - 1 chunks in flight), with W = 1 it is ``m k (alpha + tau)``. A chain
of h hops (a pipelined broadcast, Thakur et al. 2005) is
``C(h, k) = h (alpha + tau) + (k - 1) tau + floor((k - 1) / w) max(0, alpha - (w - 1) tau)``
when the hops are alike; hops with their own alpha and tau (a ring broadcast that leaves
a server, SHARP's levels) are costed by the same longest path, hop by hop, which for
k = 1 is the sum of ``alpha_h + tau_h``. Chunked, a chain's hops run at once and share
the links they have in common; unchunked, each hop runs alone.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["chain_of_hops_time_s", "chain_time_s", "pipeline_time_s"]


def pipeline_time_s(m: int, k: int, alpha_s: float, tau_s: float, window: int) -> float:
    """P(m, k): m dependent steps of k chunks on one connection (see the module docstring).

    >>> pipeline_time_s(3, 1, 2.0, 1.0, 8)  # m (alpha + tau)
    9.0
    >>> pipeline_time_s(3, 4, 2.0, 1.0, 8)  # alpha + m k tau: latency hidden
    14.0
    >>> pipeline_time_s(2, 3, 1.0, 1.0, 1)  # m k (alpha + tau)
    12.0
    """
    if m <= 0 or k <= 0:
        return 0.0
    w = min(window, k)
    return alpha_s + m * k * tau_s + (m * k - 1) // w * max(0.0, alpha_s - (w - 1) * tau_s)


def chain_time_s(hops: int, k: int, alpha_s: float, tau_s: float, window: int) -> float:
    """C(h, k): k chunks through h hops, each hop forwarding a chunk once it has arrived.

    >>> chain_time_s(3, 1, 1.0, 2.0, 8)  # h (alpha + tau)
    9.0
    >>> chain_time_s(3, 4, 1.0, 2.0, 8)  # h (alpha + tau) + (k - 1) tau
    15.0
    """
    if hops <= 0 or k <= 0:
        return 0.0
    w = min(window, k)
    return (
        hops * (alpha_s + tau_s)
        + (k - 1) * tau_s
        + (k - 1) // w * max(0.0, alpha_s - (w - 1) * tau_s)
    )


def chain_of_hops_time_s(hops: Sequence[tuple[float, float]], k: int, window: int) -> float:
    """C(h, k) for hops of their own (alpha, tau), evaluated as its longest path.

    Piece j leaves hop h once it has arrived from hop h - 1, once the window has room
    (piece j - W of the hop has arrived) and after its route latency; its bytes follow
    those of piece j - 1 on the wire. With equal hops this is :func:`chain_time_s`; with
    k = 1 it is the sum of ``alpha + tau`` over the hops.
    """
    arrived = [0.0] * k  # at the hop before: the first hop's pieces are all there
    for alpha, tau in hops:
        here: list[float] = []
        for j in range(k):
            issue = max(arrived[j], here[j - window]) if j >= window else arrived[j]
            start = max(issue + alpha, here[j - 1]) if j else issue + alpha
            here.append(start + tau)
        arrived = here
    return arrived[-1] if hops and k else 0.0
