"""The wheel works anywhere (issue 31): built from this tree, installed into a fresh
virtual environment, and run from a folder outside the clone, it finds its shipped
topologies, scenarios and measurements by name.

This is CI's wheel check: it builds with pip (the build backend comes from the package
index, as ``pip install -e .`` needs it too) and installs the wheel's dependencies from
the index or pip's cache.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(command: list[str], cwd: Path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                          check=False)  # fmt: skip
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a fresh environment holding only the wheel and its
    dependencies."""
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)],
         cwd=root)  # fmt: skip
    (wheel,) = dist.glob("simcoll-*.whl")
    venv.create(root / "env", with_pip=True)
    bin_dir = root / "env" / "bin"
    _run([str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=root)
    return bin_dir


def test_the_readme_main_job_runs_from_the_wheel_outside_the_clone(
    installed: Path, tmp_path: Path
) -> None:
    # The README's main job, the topology named as shipped (the clone's path does not
    # exist outside it).
    command = ["predict", "dgx-a100", "--collective", "allreduce", "--sizes", "8:8G",
               "--plot", "allreduce.png"]  # fmt: skip
    done = _run([str(installed / "simcoll"), *command], cwd=tmp_path)
    rows = [line.split() for line in done.stdout.splitlines() if not line.startswith("#")]
    assert len(rows) == 31  # 8 B .. 8 GiB, a row per power of two
    assert rows[-1][0] == str(8 * 2**30)
    assert (tmp_path / "allreduce.png").stat().st_size > 10_000


def test_the_bench_and_a_scenario_run_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    done = _run([str(installed / "simcoll"), "bench", "--cases", "ring-8"], cwd=tmp_path)
    assert "ring-8" in done.stdout
    done = _run([str(installed / "simcoll"), "run", "p2p-dgx1", "--out", "p2p"], cwd=tmp_path)
    assert (tmp_path / "p2p" / "results.csv").is_file()


def test_version_is_the_projects(installed: Path, tmp_path: Path) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    done = _run([str(installed / "simcoll"), "--version"], cwd=tmp_path)
    assert done.stdout.strip() == f"simcoll {project['version']}"
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("Apache License\nVersion 2.0, January 2004")
    assert project["license"] == "Apache-2.0"


def test_measurements_and_models_are_found_by_name_from_the_wheel(
    installed: Path, tmp_path: Path
) -> None:
    # issue 41: a shipped measurement file by name (with or without .csv), and the README's
    # read_model_file by the name scenarios take
    for name in ("nccl_allreduce_8xA100_nvswitch_superbench",
                 "nccl_allreduce_8xA100_nvswitch_superbench.csv"):  # fmt: skip
        done = _run([str(installed / "simcoll"), "compare", name, "--topology", "dgx-a100",
                     "--min-size", "1G"], cwd=tmp_path)  # fmt: skip
        assert "nccl_allreduce_8xA100_nvswitch_superbench.csv" in done.stdout
    code = ("from simcoll.training import read_model_file; "
            "print(read_model_file('llama3-70b')[0].n_layers)")  # fmt: skip
    done = _run([str(installed / "python"), "-c", code], cwd=tmp_path)
    assert done.stdout.strip() == "80"  # Llama 3 70B: 80 layers (Llama 3 paper, table 3)


def test_step_and_its_search_run_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    # issue 42: a shipped model by name and a Hugging Face config.json, outside the clone;
    # the kernel tables (simcoll/training/data) ship in the wheel
    done = _run([str(installed / "simcoll"), "step", "llama3-8b", "dgx-h100", "--tp", "8",
                 "--global-batch", "8", "--format", "json"], cwd=tmp_path)  # fmt: skip
    assert '"tokens_per_s_per_gpu"' in done.stdout
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 1024, '
                      '"intermediate_size": 4096, "num_attention_heads": 8, '
                      '"num_key_value_heads": 8, "vocab_size": 32000}')  # fmt: skip
    done = _run([str(installed / "simcoll"), "step", str(config), "dgx-h100", "--search",
                 "--top", "3", "--global-batch", "16", "--seq", "1024"], cwd=tmp_path)  # fmt: skip
    assert "the best 3 of" in done.stdout
    assert "GEMMs: XLA's measured table sm_90" in done.stdout
