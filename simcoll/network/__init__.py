"""The network: how flows in flight share link bandwidth.

:mod:`simcoll.network.fairshare` holds the sharing maths (pure numpy);
:mod:`simcoll.network.fabric` is the SimPy process that owns flows in flight.
"""

from __future__ import annotations

from simcoll.network.fairshare import max_min_rates, max_min_rates_sparse

__all__ = ["max_min_rates", "max_min_rates_sparse"]
