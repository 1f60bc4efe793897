"""The Python examples in README.md run and print what the README says they print."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_readme_examples_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the examples name files relative to the repository
    result = doctest.testfile(str(REPO / "README.md"), module_relative=False, verbose=False)
    assert result.attempted >= 10
    assert result.failed == 0
