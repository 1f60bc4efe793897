"""Shipped topologies and scenarios by name (issue 31: the wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.cli import main
from simcoll.core.errors import ConfigError
from simcoll.core.shipped import data_root, find, is_bare_name, shipped_names
from simcoll.scenarios.scenario import load_scenario
from simcoll.topology import gpu_nodes, load

REPO = Path(__file__).resolve().parents[2]


def test_in_a_clone_the_shipped_files_are_the_repositorys() -> None:
    assert data_root() == REPO
    assert shipped_names("topologies") == sorted(
        p.stem for p in (REPO / "topologies").glob("*.toml")
    )
    assert "ddp-buckets" in shipped_names("scenarios")


def test_a_bare_name_finds_the_shipped_file_and_a_path_is_taken_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert [is_bare_name(x) for x in ("dgx-a100", "dgx-a100.toml", "a/b", "")] == [
        True, False, False, False]  # fmt: skip
    assert find("dgx-a100", "topologies") == REPO / "topologies" / "dgx-a100.toml"
    assert len(gpu_nodes(load("dgx-a100"))) == 8  # as topologies/dgx-a100.toml has
    assert load_scenario("p2p-dgx1").source == str(REPO / "scenarios" / "p2p-dgx1.toml")
    # a file of that name here wins over the shipped one
    (tmp_path / "dgx-a100").write_text("not toml [")
    assert find("dgx-a100", "topologies") == Path("dgx-a100")


def test_an_unknown_name_lists_the_shipped_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "dgx-a1000", "--collective", "allreduce", "--sizes", "1M"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simcoll: error: dgx-a1000: no such file, nor a shipped topology of "
                          "that name (shipped: a100-roce-2to1, dgx-a100, ")  # fmt: skip
    assert err.count("\n") == 1
    assert main(["run", "ddp-bucket"]) == 2
    assert "no such scenario file, nor a shipped scenario of that name (shipped: " in (
        capsys.readouterr().err
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import simcoll  # noqa: PLC0415 - the package's own version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"simcoll {simcoll.__version__}\n"


MEASURED = "nccl_allreduce_8xA100_nvswitch_superbench"


@pytest.mark.parametrize("name", [MEASURED, f"{MEASURED}.csv"])
def test_a_shipped_measurement_is_found_by_name_from_anywhere(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 41: compare and calibrate found no measurement file by name, with or without .csv
    monkeypatch.chdir(tmp_path)
    shipped = REPO / "validation" / "data" / "public" / f"{MEASURED}.csv"
    assert find(name, "measurements") == shipped
    assert main(["compare", name, "--topology", "dgx-a100", "--min-size", "1G"]) == 0
    assert f"{MEASURED}.csv" in capsys.readouterr().out
    assert MEASURED in shipped_names("measurements")


def test_a_shipped_model_is_read_by_name_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 41: the README's read_model_file took only a path from the clone's root;
    # Llama 3 70B has 80 layers (Llama 3 paper, table 3)
    from simcoll.training import read_model_file  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    for name in ("llama3-70b", "llama3-70b.toml"):
        model, _, _ = read_model_file(name)
        assert model.n_layers == 80
    (tmp_path / "llama3-70b.toml").write_text("not toml [")  # a file here wins
    with pytest.raises(ConfigError, match=r"llama3-70b\.toml: not TOML"):
        read_model_file("llama3-70b.toml")
