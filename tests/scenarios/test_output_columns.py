"""A scenario's ``[output]`` columns are checked before the sweep runs (issue 17, item 14:
a missing column or a non-numeric y raised ValueError after the whole sweep)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.scenario import load_scenario
from simcoll.scenarios.sweep import run_sweep

STAR = """\
schema = 1
builder = "switch_star"
[params]
n_gpus = 4
link_bandwidth = "10 GB/s"
link_latency = "1 us"
"""


def scenario(folder: Path, workload: str, sweep: str, output: str) -> Path:
    (folder / "star.toml").write_text(STAR)
    path = folder / "s.toml"
    path.write_text(
        f'schema = 1\n[topology]\nfile = "star.toml"\n[workload]\n{workload}\n'
        f"[sweep]\n{sweep}\n[output]\n{output}\n"
    )
    return path


COLLECTIVE = 'collective = "allgather"'
DDP = 'kind = "ddp"\nlayer_params_bytes = [4096, 4096]'


@pytest.mark.parametrize(
    ("workload", "sweep", "output", "message"),
    [
        (COLLECTIVE, "size_bytes = [4096, 8192]", 'x = "nope"', "output.x: no column 'nope'"),
        (COLLECTIVE, "size_bytes = [4096, 8192]", 'series = "colour"',
         "output.series: no column 'colour'"),
        (DDP, 'bucket_bytes = ["1 KiB", "2 KiB"]', 'y = "n_bukets"',
         "output.y: no column 'n_bukets'"),
        (COLLECTIVE, "size_bytes = [4096, 8192]", 'y = "algorithm"',
         "output.y: 'algorithm' is not a numeric column"),
        (COLLECTIVE, 'algorithm = ["ring", "direct"]\nsize_bytes = [4096]', 'y = "algorithm"',
         "output.y: 'algorithm' is not a numeric column"),
        (COLLECTIVE, "n_ranks = [2, 4]\nsize_bytes = [4096]",
         'plots = ["scaling"]\ny = "max_link_bytes"',
         "output.y: a scaling plot shows busbw, algbw or time, not 'max_link_bytes'"),
    ],
)  # fmt: skip
def test_a_bad_output_column_is_refused_before_any_point_runs(
    tmp_path: Path, workload: str, sweep: str, output: str, message: str
) -> None:
    path = scenario(tmp_path, workload, sweep, output)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        run_sweep(load_scenario(path), out, workers=1)
    assert str(info.value).startswith(f"{path}: {message}")
    assert not out.exists()


@pytest.mark.parametrize(
    ("workload", "sweep", "output"),
    [
        (DDP, 'bucket_bytes = ["1 KiB", "2 KiB"]', 'x = "bucket_bytes"\ny = "n_buckets"'),
        (COLLECTIVE, "size_bytes = [4096, 8192]", 'y = "busbw_bytes_per_s"'),
        ('kind = "p2p"\ndst_ranks = [1]', "size_bytes = [4096, 8192]", 'y = "time_s_to_1"'),
    ],
)
def test_columns_the_rows_have_are_accepted(
    tmp_path: Path, workload: str, sweep: str, output: str
) -> None:
    path = scenario(tmp_path, workload, sweep, output)
    result = run_sweep(load_scenario(path), tmp_path / "out", workers=1)
    assert not result.failures
