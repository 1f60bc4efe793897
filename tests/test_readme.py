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


def test_no_document_points_outside_the_repository() -> None:
    # issue 31: README.md and ARCHITECTURE.md pointed to ../shared/DESIGN.md, not in a clone
    repo = Path(__file__).resolve().parents[1]
    documents = [repo / "README.md", repo / "ARCHITECTURE.md", *repo.glob("*/README.md"),
                 *repo.glob("*/*/README.md")]  # fmt: skip
    outside = [str(d.relative_to(repo)) for d in documents if "../shared" in d.read_text()]
    assert not outside


def test_the_readme_calibrate_example_is_the_shipped_fit() -> None:
    # issue 31: the README's calibrate command was not the fit the DGX A100 file ships with
    repo = Path(__file__).resolve().parents[1]
    readme = " ".join((repo / "README.md").read_text().replace("\\\n", " ").split())
    shipped = (repo / "topologies/calibration/dgx-a100.params.toml").read_text()
    command = next(line for line in shipped.splitlines() if line.startswith("command = "))
    flags = command.split('"')[1].split(" -o ")[0].split()
    for flag in flags[2:]:  # after "simcoll calibrate"
        assert flag in readme, flag
