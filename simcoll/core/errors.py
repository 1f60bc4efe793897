"""Exceptions raised by simcoll.

Every error simcoll raises on bad input derives from :class:`SimcollError` and renders as
one line that names where the problem is (file, field, transfer) and what is wrong. The
command line prints ``str(error)`` and exits non-zero; it never shows a traceback for
these.

>>> str(ConfigError("must be positive, got -1", source="dgx.toml", field="params.bandwidth"))
'dgx.toml: params.bandwidth: must be positive, got -1'
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "LimitError",
    "ScheduleError",
    "SimcollError",
    "SimulationError",
    "TopologyError",
    "UnitError",
    "one_line",
]


#: The longest message an error prints; the rest is cut, and its length said.
MAX_MESSAGE_CHARS = 2000


def one_line(text: str) -> str:
    """``text`` as one line of at most :data:`MAX_MESSAGE_CHARS` (then how much was cut):
    how every error prints, whatever the caller or the operating system wrote.

    >>> one_line("a\\n  b")
    'a b'
    >>> one_line("x" * 2003)[-30:]
    'xxxxxxx... (3 more characters)'
    """
    line = " ".join(text.split())
    if len(line) > MAX_MESSAGE_CHARS:  # a 10 MB input line is not echoed whole
        cut = len(line) - MAX_MESSAGE_CHARS
        line = f"{line[:MAX_MESSAGE_CHARS]}... ({cut} more characters)"
    return line


class SimcollError(Exception):
    """Base class of every error simcoll raises on purpose.

    Parameters
    ----------
    message
        What is wrong, in one line.
    source
        The file (or other input) the problem is in, when there is one.
    field
        The key, element or argument inside ``source`` that is wrong.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        return one_line(": ".join([*parts, self.message]))

    def located(self, *, source: str | None = None, field: str | None = None) -> SimcollError:
        """Return a copy of this error that also names ``source`` and ``field``.

        A location already on the error wins, so the innermost caller's detail is kept.
        """
        return type(self)(self.message, source=self.source or source, field=self.field or field)


class UnitError(SimcollError, ValueError):
    """A quantity string such as ``"450 GB/s"`` does not parse, or has the wrong dimension."""


class ConfigError(SimcollError, ValueError):
    """An input file or argument is malformed: unknown key, wrong type, bad value."""


class LimitError(ConfigError):
    """An input is valid but too large to simulate: over a cap of :mod:`simcoll.core.limits`."""


class TopologyError(SimcollError, ValueError):
    """A topology graph breaks the schema: a missing attribute, an unreachable GPU, ..."""


class ScheduleError(SimcollError, ValueError):
    """A schedule is malformed or does not compute its collective."""


class SimulationError(SimcollError, RuntimeError):
    """A simulation cannot finish: a dependency cycle, a transfer with no route, ..."""
