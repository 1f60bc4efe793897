"""validation/report.py: its dataset list names real files, and bad names are one line."""

from __future__ import annotations

from pathlib import Path

from validation.report import DATASETS, main

REPO = Path(__file__).resolve().parents[2]


def test_every_dataset_names_files_that_exist():
    for dataset in DATASETS:
        for path in [dataset.topology, *dataset.measured, *dataset.calibrate_on]:
            assert (REPO / path).is_file(), f"{dataset.name}: {path}"


def test_list_and_unknown_name(capsys):
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in listed] == [d.name for d in DATASETS]
    assert main(["a100", "--list"]) == 0  # --list wins
    capsys.readouterr()
    assert main(["b200"]) == 2
    valid = ", ".join(d.name for d in DATASETS)
    assert capsys.readouterr().err == f"report: unknown dataset 'b200'; valid: {valid}\n"
