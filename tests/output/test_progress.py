"""Progress on standard error (issue 29 and 31): a bar on a terminal, lines in a log,
nothing where only a terminal should see it; the first compile is announced."""

from __future__ import annotations

import io
import threading

import pytest

from simcoll.network import kernel
from simcoll.output.progress import Progress, format_left


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


def test_a_fit_off_a_terminal_gets_a_line_per_pass_with_a_total_and_the_time_left() -> None:
    # issue 41: off a terminal calibrate printed one line and nothing more for 22 minutes;
    # on one it counted passes with no total. Passes are few and long: a line each.
    log = io.StringIO()
    bar = Progress(log, None, "passes over the points", each_step=True, about=True)
    for total in (10, 10, 12, 12, 5):  # the total as the fit revises it; never below the count
        bar.advance(total=total)
    bar.close()
    lines = log.getvalue().splitlines()
    assert [line.split(" passes")[0].split("] ")[1] for line in lines] == [
        "1/~10", "2/~10", "3/~12", "4/~12", "5/~5"]  # fmt: skip
    assert all(line.endswith(" left") and " s elapsed, ~" in line for line in lines)
    assert lines[-1].startswith("[" + "#" * 30 + "]")


def test_a_revised_total_redraws_the_bar_on_a_terminal_and_the_end_shows_the_count() -> None:
    out = Terminal()
    bar = Progress(out, None, "passes over the points", each_step=True, about=True)
    bar.advance(total=4)
    bar.advance(total=6)
    assert out.getvalue().split("\r")[-1].split(",")[0] == (
        "[" + "#" * 10 + "." * 20 + "] 2/~6 passes over the points"
    )
    bar.close()  # fewer passes than expected: the bar ends full, at the count
    assert out.getvalue().split("\r")[-1].split(",")[0] == (
        "[" + "#" * 30 + "] 2/~2 passes over the points"
    )
    assert out.getvalue().endswith("\n")


def test_the_time_left_reads_in_seconds_then_minutes() -> None:
    assert [format_left(s) for s in (0.4, 119, 120, 599, 600, 5400)] == [
        "0 s", "119 s", "2.0 min", "10.0 min", "10 min", "90 min"]  # fmt: skip
