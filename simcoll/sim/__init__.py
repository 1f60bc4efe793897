"""The engine: one collective (:mod:`~simcoll.sim.engine`), many calls and compute spans
on one clock (:mod:`~simcoll.sim.graph`), the exact fast paths, and timelines."""
