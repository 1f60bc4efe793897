"""Progress on standard error (issue 29 and 31): a bar on a terminal, lines in a log,
nothing where only a terminal should see it; the first compile is announced."""

from __future__ import annotations

import io
import threading

import pytest

from simcoll.network import kernel
from simcoll.output.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_terminal_is_redrawn_in_place_and_ends_its_line() -> None:
    out = Terminal()
    bar = Progress(out, 3, "sizes", tty_only=True)
    for _ in range(3):
        bar.advance()
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 3
    assert text.endswith("\n")
    assert "3/3 sizes" in text


def test_without_a_terminal_a_log_gets_a_line_per_tenth_or_nothing() -> None:
    log = io.StringIO()
    bar = Progress(log, 100, "points")
    for _ in range(100):
        bar.advance(failed=False)
    assert len(log.getvalue().splitlines()) == 11  # the first point, then each tenth
    quiet = io.StringIO()
    bar = Progress(quiet, 100, "sizes", tty_only=True)
    for _ in range(100):
        bar.advance()
    bar.close()
    assert quiet.getvalue() == ""


def test_an_unknown_total_shows_the_count_and_time() -> None:
    out = Terminal()
    bar = Progress(out, None, "passes over the points")
    bar.advance()
    bar.advance()
    assert out.getvalue().split("\r")[-1].startswith("2 passes over the points, ")


def test_the_first_compile_is_announced_after_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    said = threading.Event()

    class Uncompiled:
        signatures: tuple[object, ...] = ()

    monkeypatch.setattr(kernel, "COMPILE_NOTICE", said.set)
    monkeypatch.setattr(kernel, "COMPILE_NOTICE_AFTER_S", 0.0)
    monkeypatch.setattr(kernel, "_simulate", Uncompiled())
    timer = kernel._compile_notice()
    assert timer is not None
    assert said.wait(5.0)
    monkeypatch.setattr(kernel, "COMPILE_NOTICE", None)
    assert kernel._compile_notice() is None  # nobody to tell
