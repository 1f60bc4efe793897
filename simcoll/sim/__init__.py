"""The engine: one collective (:mod:`~simcoll.sim.engine`), many calls on one clock
(:mod:`~simcoll.sim.session`), the exact symmetric fast path, and timelines."""
