"""The figures of docs/scenarios/ come from the commands named beside them:
``docs/regenerate_pngs.py`` names each one's scenario and plot, and makes them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError
from simcoll.core.files import check_output
from simcoll.output.plot import PNG_MARK

REPO = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("regenerate_pngs", REPO / "docs" /
                                                  "regenerate_pngs.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_figure_has_a_source_and_every_source_a_figure():
    script = _script()
    figures = sorted(p.name for p in (REPO / "docs" / "scenarios").glob("*.png"))
    assert figures == sorted(script.SOURCES)
    for scenario, _ in script.SOURCES.values():
        assert (REPO / "scenarios" / f"{scenario}.toml").is_file(), scenario
    for name in figures:  # each is a plot simcoll wrote, so the script may replace it
        check_output(REPO / "docs" / "scenarios" / name, mark=PNG_MARK)


def test_the_script_refuses_an_unknown_figure(capsys):
    assert _script().main(["nope.png"]) == 2
    assert capsys.readouterr().err.startswith("regenerate_pngs: unknown figure 'nope.png'")


@pytest.mark.slow
def test_the_script_makes_every_figure(tmp_path):
    # into a scratch folder: the committed figures are not touched by the test
    script = _script()
    written = script.regenerate(list(script.SOURCES), into=tmp_path)
    assert sorted(p.name for p in written) == sorted(script.SOURCES)
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        check_output(path, mark=PNG_MARK)


def test_the_script_will_not_write_over_a_file_simcoll_did_not_write(tmp_path, capsys):
    # the check runs before any scenario: a foreign file in the way is refused in one line
    script = _script()
    (tmp_path / "ring-allreduce-law.png").write_text("not a plot of ours")
    with pytest.raises(ConfigError, match=r"ring-allreduce-law\.png"):
        script.regenerate(["ring-allreduce-law.png"], into=tmp_path)
    assert (tmp_path / "ring-allreduce-law.png").read_text() == "not a plot of ours"
