"""Tests of simcoll.scenarios.outdir: whose files are whose, locks, symlinks, and resuming
only from results of the same file contents (issue 17, items 1, 3, 5 and 13)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from simcoll.cli import main
from simcoll.core.errors import ConfigError
from simcoll.output.folder import MANIFEST
from simcoll.scenarios.outdir import RESULTS_JSONL
from simcoll.scenarios.scenario import load_scenario
from simcoll.scenarios.sweep import run_sweep

REPO = Path(__file__).resolve().parents[2]
STAR = """\
schema = 1
builder = "switch_star"
[params]
n_gpus = 4
link_bandwidth = "{gbps} GB/s"
link_latency = "1 us"
"""


def write_scenario(folder: Path, sweep: str = 'size_bytes = ["4 KiB", "8 KiB"]') -> Path:
    (folder / "star.toml").write_text(STAR.format(gbps=10))
    path = folder / "s.toml"
    path.write_text(
        'schema = 1\ntitle = "t"\n[topology]\nfile = "star.toml"\n'
        f'[workload]\ncollective = "allgather"\nalgorithm = "ring"\nprotocol = "none"\n'
        f"[sweep]\n{sweep}\n"
    )
    return path


def user_files(folder: Path) -> dict[str, bytes]:
    """A folder of someone's files, with distinctive bytes, named like simcoll's outputs
    would be if it wrote them loosely (``*.png``, ``table.txt``...)."""
    files = {
        "holiday.png": b"\x89PNG holiday photo",
        "diagram.png": b"\x89PNG hand drawn",
        "notes.txt": b"my notes",
        "timelines.md": b"my timeline",
        "results.xlsx": b"my spreadsheet",
    }
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def assert_untouched(folder: Path, files: dict[str, bytes]) -> None:
    assert {name: (folder / name).read_bytes() for name in files} == files


def test_force_in_a_folder_of_photos_deletes_only_what_simcoll_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 17 item 1: `run s.toml --out "" --force` in a folder of photos deleted them
    photos = tmp_path / "photos"
    files = user_files(photos)
    first = write_scenario(tmp_path)
    other = tmp_path / "other.toml"
    other.write_text(first.read_text().replace('"4 KiB", "8 KiB"', '"16 KiB"'))
    monkeypatch.chdir(photos)
    for path in (first, first, other):
        assert main(["run", str(path), "--out", ".", "--force", "--workers", "1"]) == 0
        assert_untouched(photos, files)
    manifest = json.loads((photos / MANIFEST).read_text())["files"]
    assert {"results.csv", "table.txt", "sweep.json"} <= set(manifest)
    capsys.readouterr()


def test_an_empty_out_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_scenario(tmp_path)
    assert main(["run", str(path), "--out", "", "--force", "--workers", "1"]) == 2
    assert capsys.readouterr().err.endswith(
        "simcoll: error: --out: an empty folder name; give a folder (. for this one)\n"
    )


def test_a_user_file_with_a_name_simcoll_writes_is_refused_even_with_force(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "table.txt").write_bytes(b"my table")
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(write_scenario(tmp_path)), out, workers=1, force=True)
    assert str(info.value) == (
        f"{out}: holds table.txt, which simcoll writes but did not write here; will not "
        "overwrite (move them or choose another --out)"
    )
    assert (out / "table.txt").read_bytes() == b"my table"
    assert sorted(p.name for p in out.iterdir()) == ["table.txt"]


def test_a_planted_manifest_cannot_make_simcoll_delete_other_names(tmp_path: Path) -> None:
    out = tmp_path / "out"
    files = user_files(out)
    (out / MANIFEST).write_text(
        json.dumps({"simcoll_manifest": 1, "files": [*files, "../s.toml", "/etc/hostname"]})
    )
    path = write_scenario(tmp_path)
    run_sweep(load_scenario(path), out, workers=1, force=True)
    assert_untouched(out, files)
    assert path.exists()


def test_a_second_run_into_a_locked_folder_is_refused(tmp_path: Path) -> None:
    # issue 17 item 3: two `run --force` into one folder at once left mixed files
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a running `simcoll run` holds
        with pytest.raises(ConfigError) as info:
            run_sweep(load_scenario(write_scenario(tmp_path)), out, workers=1, force=True)
    finally:
        os.close(fd)
    assert str(info.value) == (
        f"{out}: another simcoll command is writing into this folder; wait for it or choose "
        "another --out"
    )
    assert list(out.iterdir()) == []


def test_a_symlinked_results_jsonl_is_refused(tmp_path: Path) -> None:
    # issue 17 item 3: results.jsonl was appended through a symlink
    path = write_scenario(tmp_path)
    out = tmp_path / "out"
    run_sweep(load_scenario(path), out, workers=1)
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"not yours")
    (out / RESULTS_JSONL).unlink()
    (out / RESULTS_JSONL).symlink_to(target)
    with pytest.raises(ConfigError, match=r"results\.jsonl: cannot read: is a symbolic link"):
        run_sweep(load_scenario(path), out, workers=1)
    assert target.read_bytes() == b"not yours"


def test_an_edited_topology_is_not_resumed_from(tmp_path: Path) -> None:
    # issue 17 item 5: editing the topology file and rerunning reused the old rows
    path = write_scenario(tmp_path, 'size_bytes = ["4 KiB"]')
    out = tmp_path / "out"
    before = run_sweep(load_scenario(path), out, workers=1).rows[0]["time_s"]
    (tmp_path / "star.toml").write_text(STAR.format(gbps=20))
    with pytest.raises(ConfigError, match="from other file contents"):
        run_sweep(load_scenario(path), out, workers=1)
    after = run_sweep(load_scenario(path), out, workers=1, force=True)
    # ring all-gather of 4 KiB on 4 ranks: 3 steps of 2 x 1 us + 1 KiB over the link
    assert before == pytest.approx(3 * (2e-6 + 1024 / 10e9), rel=1e-9)
    assert after.skipped == 0
    assert after.rows[0]["time_s"] == pytest.approx(3 * (2e-6 + 1024 / 20e9), rel=1e-9)


def test_an_edited_imported_file_is_not_resumed_from(tmp_path: Path) -> None:
    examples = REPO / "topologies" / "examples"
    for name in ("dgx1-v100-from-nvidia-smi.toml", "dgx1-v100.nvsmi.txt"):
        (tmp_path / name).write_bytes((examples / name).read_bytes())
    path = tmp_path / "s.toml"
    path.write_text(
        'schema = 1\n[topology]\nfile = "dgx1-v100-from-nvidia-smi.toml"\n[workload]\n'
        'collective = "allreduce"\n[sweep]\nsize_bytes = ["1 MiB"]\n'
    )
    out = tmp_path / "out"
    run_sweep(load_scenario(path), out, workers=1)
    matrix = tmp_path / "dgx1-v100.nvsmi.txt"
    matrix.write_text(matrix.read_text().replace("NV1", "NV2"))
    with pytest.raises(ConfigError, match="from other file contents"):
        run_sweep(load_scenario(path), out, workers=1)


def test_resume_works_from_another_directory_and_by_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_scenario(tmp_path)
    out = tmp_path / "out"
    run_sweep(load_scenario(path), out, workers=1)
    monkeypatch.chdir(tmp_path)
    assert run_sweep(load_scenario("s.toml"), out, workers=1).skipped == 2
    elsewhere = tmp_path / "deeper"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert run_sweep(load_scenario("../s.toml"), "../out", workers=1).skipped == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("42", "not a point record (a JSON object), got 42"),
        ("null", "not a point record (a JSON object), got None"),
        ("[1, 2]", "not a point record (a JSON object), got [1, 2]"),
        ('{"key": "x"}', "a point record without 'status'"),
        ("{not json", "not a JSON line"),
        ("ROWS:[[1]]", "rows: not valid in a point record: [[1]]"),
        ('ROWS:[{"time_s": "fast"}]', "rows: a row without 'collective'"),
        (
            'ROWS:[{"collective": "allgather", "algorithm": "ring", "protocol": "none", '
            '"n_ranks": "4", "size_bytes": 4096, "time_s": 1.0, "algbw_bytes_per_s": 1.0, '
            '"busbw_bytes_per_s": 1.0}]',
            "rows: n_ranks: wrong type: '4'",
        ),
        (
            'ROWS:[{"collective": "allgather", "algorithm": "ring", "protocol": "none", '
            '"n_ranks": 4, "size_bytes": 4096, "time_s": 1.0, "algbw_bytes_per_s": 1.0, '
            '"busbw_bytes_per_s": 1.0, "in_place": 1}]',
            "rows: in_place: wrong type: 1",
        ),
        ('ROWS:[{"collective": {"a": 1}}]', "rows: collective: not a number or text: {'a': 1}"),
    ],
)
def test_a_middle_line_that_is_not_a_record_is_one_line(
    tmp_path: Path, line: str, message: str
) -> None:
    # issue 17 item 13: such lines raised AttributeError, KeyError or TypeError on resume
    path = write_scenario(tmp_path)
    out = tmp_path / "out"
    run_sweep(load_scenario(path), out, workers=1)
    log = out / RESULTS_JSONL
    first, second = log.read_text().splitlines()
    if line.startswith("ROWS:"):
        line = json.dumps({**json.loads(second), "rows": json.loads(line[5:])})
    log.write_text(f"{first}\n{line}\n{second}\n")
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(path), out, workers=1)
    assert str(info.value) == (
        f"{log}: line 2: {message}; delete results.jsonl (its points run again) or choose "
        "another --out"
    )


def test_a_point_is_resumed_only_if_every_file_it_read_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 29: a scenario's placement file changed from "0 1" to "0 8" and the rerun
    # into the same --out took the old point (449.17 GB/s, where GPUs on two nodes give
    # 49.96). The file is also named relative to the scenario, not the current folder.
    fat_tree = Path(__file__).resolve().parents[2] / "topologies" / "h100-ib-fat-tree.toml"
    folder = tmp_path / "scenario"
    folder.mkdir()
    (folder / "pl.txt").write_text("0\n1\n")
    path = folder / "s.toml"
    path.write_text(
        f'schema = 1\n[topology]\nfile = "{fat_tree}"\nset = {{ n_nodes = 2 }}\n'
        '[workload]\ncollective = "allreduce"\nsize_bytes = "1 GiB"\nn_ranks = 2\n'
        'placement = "pl.txt"\nprotocol = "simple"\nalgorithm = "ring"\n'
    )
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    out = tmp_path / "out"
    inside = run_sweep(load_scenario(path), out, workers=1)
    (row,) = inside.rows
    again = run_sweep(load_scenario(path), out, workers=1)
    assert again.skipped == 1
    assert again.rows[0]["time_s"] == row["time_s"]
    (folder / "pl.txt").write_text("0\n8\n")
    across = run_sweep(load_scenario(path), out, workers=1)
    assert across.skipped == 0
    (moved,) = across.rows
    assert moved["busbw_bytes_per_s"] < row["busbw_bytes_per_s"] / 4  # one NIC, not NVLink


def test_a_scenario_with_list_values_resumes() -> None:
    # Issue 31: p2p-dgx1's dst_ranks axis ([1, 2, 4]) made a second run into the same
    # folder fail reading its own results.jsonl.
    import tempfile  # noqa: PLC0415

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "p2p-dgx1.toml"
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "p2p"
        first = run_sweep(load_scenario(scenario), out, workers=1)
        second = run_sweep(load_scenario(scenario), out, workers=1)
    assert second.skipped == 2
    assert second.rows == first.rows
