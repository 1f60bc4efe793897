"""simcoll.core.pauses: the collector is off inside, and back as it was after, even when
the block raises."""

from __future__ import annotations

import gc

import pytest

from simcoll.core.pauses import gc_paused


def test_the_collector_comes_back_after_an_error() -> None:
    @gc_paused()
    def failing_step() -> None:
        assert not gc.isenabled()
        raise RuntimeError("a failed step")

    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="a failed step"):
        failing_step()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_as_a_decorator_each_call_pauses() -> None:
    @gc_paused()
    def enabled() -> bool:
        return gc.isenabled()

    assert (enabled(), enabled(), gc.isenabled()) == (False, False, True)
