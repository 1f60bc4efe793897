"""Measurements from real runs (CSV, nccl-tests logs), fitting the simulator's parameters
to them, and comparing predictions with them."""
