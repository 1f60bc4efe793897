"""The curated public API: sorted, resolvable, and nothing else public at the top."""

from __future__ import annotations

import types

import simcoll


def test_all_is_sorted_and_resolves():
    assert simcoll.__all__ == sorted(simcoll.__all__)
    for name in simcoll.__all__:
        assert getattr(simcoll, name) is not None


def test_public_names_equal_all():
    public = {
        name
        for name, value in vars(simcoll).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(simcoll.__all__)
