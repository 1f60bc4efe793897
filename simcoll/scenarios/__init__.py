"""Scenario files, sweeps over their axes, the reports they write, the workloads they run,
and the benchmark cases of ``simcoll bench``."""
