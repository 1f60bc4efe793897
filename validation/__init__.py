"""Checks of simcoll against real runs: replay, the emulated-cluster testbed, data."""
