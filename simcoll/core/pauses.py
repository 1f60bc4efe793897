"""Python's cyclic garbage collector paused while a large simulation allocates.

A training step on 16,384 GPUs makes millions of small, long-lived objects (its ops, the
spans of its timeline, routes); every full collection the allocations trigger walks all
of them again, and took 8 of its 60 s (bench case ``step-405b-16384``, 2026-11-28).
simcoll's objects form few reference cycles: reference counting frees them as before, and
what cycles there are wait for the collector to be back on.

>>> import gc
>>> with gc_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off for the block (or the decorated call), then as it was before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
