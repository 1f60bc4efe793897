"""Pure data and proofs: units, errors, collectives, schedules, protocols, and the checks
that prove a schedule computes its collective. Imports nothing else of simcoll."""
