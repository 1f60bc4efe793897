"""Progress of a long command on standard error: a bar redrawn in place on a terminal, a
line per tenth of the work otherwise (a log keeps ten lines, not thousands), or per step
where steps are few and long (a fit's passes).

>>> import io
>>> out = io.StringIO()
>>> bar = Progress(out, 4, "sizes")
>>> for _ in range(4):
...     bar.advance()
>>> out.getvalue().splitlines()[-1].split(",")[0]
'[##############################] 4/4 sizes'
"""

from __future__ import annotations

import time
from typing import IO

__all__ = ["Progress", "format_left"]


class Progress:
    """Counts ``total`` steps of work (``unit``: what a step is) and shows how far it got,
    how long it took and about how long is left; with ``total`` None (not known ahead),
    the count and the time only, on a terminal; ``tty_only``: nothing but on a terminal
    (a command whose standard error is a log says its estimate only); ``each_step``: off
    a terminal, a line per step, not per tenth; ``about``: the total is an estimate that
    :meth:`advance` may revise (shown ``~``).

    >>> import io
    >>> out = io.StringIO()
    >>> bar = Progress(out, 6, "passes", each_step=True, about=True)
    >>> bar.advance()
    >>> bar.advance(total=4)
    >>> [line.split(",")[0] for line in out.getvalue().splitlines()]
    ['[#####.........................] 1/~6 passes', '[###############...............] 2/~4 passes']
    """

    def __init__(
        self,
        stream: IO[str] | None,
        total: int | None,
        unit: str = "points",
        *,
        tty_only: bool = False,
        total_weight: float | None = None,
        each_step: bool = False,
        about: bool = False,
    ) -> None:
        self.stream = None if tty_only and not (stream is not None and stream.isatty()) else stream
        self.total = total
        self.unit = unit
        self.count = 0
        self.failed = 0
        self.started = time.perf_counter()
        self.tty = bool(stream is not None and stream.isatty())
        self.shown_tenth = -1
        self.each_step = each_step
        self.about = about
        # With weights (each step's expected cost), the bar fills and the time left is
        # told by the work done, not by the count: one slow step among quick ones.
        self.total_weight = total_weight if total_weight and total_weight > 0 else None
        self.done_weight = 0.0

    def advance(
        self, *, failed: bool = False, weight: float = 1.0, total: int | None = None
    ) -> None:
        """One more step done (``failed``: it failed, and the bar says how many did;
        ``weight``: its share of ``total_weight``, where the bar was given one;
        ``total``: the steps now expected in all, where that changes as the work goes).

        >>> import io
        >>> out = io.StringIO()
        >>> bar = Progress(out, 2, "points", total_weight=4.0)
        >>> bar.advance(weight=3.0)
        >>> out.getvalue().split("]")[0].count("#")  # 3/4 of the bar for 1 of 2 points
        22
        """
        self.count += 1
        self.failed += failed
        self.done_weight += weight
        if total is not None:
            self.total = max(total, self.count)
        self._show()

    def _show(self) -> None:
        """Draw the bar (on a terminal) or write its line (in a log, when due)."""
        if self.stream is None:
            return
        elapsed = time.perf_counter() - self.started
        if self.total is None:
            if self.tty:
                self.stream.write(f"\r{self.count} {self.unit}, {elapsed:.1f} s elapsed")
                self.stream.flush()
            return
        if not self.total:
            return
        done = min(1.0, self.count / self.total)
        if self.total_weight is not None and self.count < self.total:
            done = min(1.0, self.done_weight / self.total_weight)
        tenth = int(10 * done)
        if not self.tty and not self.each_step and tenth == self.shown_tenth:
            return
        self.shown_tenth = tenth
        filled = int(30 * done)
        left = elapsed / done * (1 - done) if done > 0 else 0.0
        shown = f", {self.failed} failed" if self.failed else ""
        text = (
            f"[{'#' * filled}{'.' * (30 - filled)}] {self.count}/{'~' * self.about}{self.total} "
            f"{self.unit}{shown}, {elapsed:.1f} s elapsed, ~{format_left(left)} left"
        )
        self.stream.write(("\r" + text) if self.tty else text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line on a terminal (a total that was an estimate now the count)."""
        if self.stream is not None and self.tty and self.count:
            if self.about and self.total != self.count:
                self.total = self.count
                self._show()
            self.stream.write("\n")
            self.stream.flush()


def format_left(seconds: float) -> str:
    """A time left as a person reads it: seconds under two minutes, else minutes.

    >>> format_left(42.4), format_left(150), format_left(3 * 3600)
    ('42 s', '2.5 min', '180 min')
    """
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.{0 if seconds >= 600 else 1}f} min"
