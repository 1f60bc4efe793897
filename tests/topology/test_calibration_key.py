"""A topology file's `calibration` key: loaded by default, bad ones refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError
from simcoll.topology import load
from simcoll.topology.nodelink import dumps, from_node_link

STAR = """schema = 1
builder = "switch_star"
calibration = {value}
[params]
n_gpus = 4
link_bandwidth = "100 GB/s"
link_latency = "1 us"
"""


def _topology(tmp_path: Path, value: str) -> Path:
    path = tmp_path / "star.toml"
    path.write_text(STAR.format(value=value))
    return path


def test_the_named_params_file_is_attached(tmp_path: Path) -> None:
    (tmp_path / "fit.toml").write_text("schema = 1\nlaunch_s = 1e-05\n[efficiency]\nnvlink = 0.5\n")
    graph = load(_topology(tmp_path, '"fit.toml"'))
    assert graph.graph["calibration"].values == {"efficiency.nvlink": 0.5, "launch_s": 1e-05}
    back = from_node_link(json.loads(dumps(graph)))  # topo dump keeps it
    assert back.graph["calibration"] == graph.graph["calibration"]


@pytest.mark.parametrize(
    ("value", "params", "message"),
    [
        ('"none.toml"', None, "star.toml: calibration: {dir}/none.toml: no such params file"),
        (
            "3",
            None,
            "star.toml: calibration: must name a params file (relative to the topology "
            "file), got int 3",
        ),
        (
            '"fit.toml"',
            "schema = 1\n[efficiency]\nnvlink = 2.0\n",
            "star.toml: calibration: {dir}/fit.toml: efficiency.nvlink: must be in [0.001, 1]",
        ),
        (
            '"fit.toml"',
            "schema = 1\n[efficiency]\nnvlink = 0.5\nfoo = 1\n",
            "star.toml: calibration: {dir}/fit.toml: efficiency.foo: unknown key",
        ),
    ],
)
def test_a_bad_calibration_is_one_line(
    tmp_path: Path, value: str, params: str | None, message: str
) -> None:
    if params is not None:
        (tmp_path / "fit.toml").write_text(params)
    with pytest.raises(ConfigError) as error:
        load(_topology(tmp_path, value))
    text = str(error.value)
    assert "\n" not in text
    assert text.startswith(f"{tmp_path}/" + message.format(dir=tmp_path))


def test_a_bad_calibration_in_node_link_json_is_one_line() -> None:
    data = {"directed": True, "graph": {"calibration": {"values": {"nope.x": 1}}},
            "nodes": [{"id": "gpu0", "kind": "gpu", "rank": 0}], "links": []}  # fmt: skip
    expected = r"^x.json: graph.calibration: unknown parameter section 'nope'; valid: "
    with pytest.raises(ConfigError, match=expected) as error:
        from_node_link(data, source="x.json")
    assert "\n" not in str(error.value)


WHEN = STAR.format(value='"bare.toml"') + "[calibration_when]\n{entries}"


def _when(tmp_path: Path, entries: str) -> Path:
    (tmp_path / "bare.toml").write_text("schema = 1\n[efficiency]\nnvlink = 0.5\n")
    (tmp_path / "fast.toml").write_text("schema = 1\n[efficiency]\nnvlink = 0.9\n")
    path = tmp_path / "star.toml"
    path.write_text(WHEN.format(entries=entries))
    return path


def test_a_machine_built_otherwise_takes_the_params_file_its_parameters_name(
    tmp_path: Path,
) -> None:
    # A params file describes the machine as built: the RTX 4090 box with P2P on moves its
    # data by another path than with it off, and its own fit says how fast.
    path = _when(tmp_path, '"link_bandwidth=200 GB/s" = "fast.toml"\n')
    assert load(path).graph["calibration"].efficiency == {"nvlink": 0.5}
    chosen = load(path, {"link_bandwidth": "200 GB/s"})
    assert chosen.graph["calibration"].efficiency == {"nvlink": 0.9}
    assert chosen.graph["calibration_file"] == str(tmp_path / "fast.toml")
    numbers = _when(tmp_path, '"n_gpus=4.0" = "fast.toml"\n')  # the file's own n_gpus, 4
    assert load(numbers).graph["calibration"].efficiency == {"nvlink": 0.9}


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ('"bandwidth=1" = "fast.toml"\n', 'calibration_when."bandwidth=1": must be "name=value" '
         "with a name of [params] (valid: n_gpus, link_bandwidth, link_latency)"),
        ('"n_gpus" = "fast.toml"\n', 'calibration_when."n_gpus": must be "name=value"'),
        ('"n_gpus=4" = 7\n', 'calibration_when."n_gpus=4": must name a params file'),
        ('"n_gpus=4" = "missing.toml"\n',
         'calibration_when."n_gpus=4": {dir}/missing.toml: no such params file'),
        ('"n_gpus=4" = "fast.toml"\n"link_latency=1 us" = "fast.toml"\n',
         'calibration_when."n_gpus=4" and calibration_when."link_latency=1 us" both hold for '
         "this machine; one params file describes it"),
    ],
)  # fmt: skip
def test_a_bad_calibration_when_is_one_line(tmp_path: Path, entries: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load(_when(tmp_path, entries))
    text = str(error.value)
    assert "\n" not in text
    assert text.startswith(f"{tmp_path}/star.toml: " + message.format(dir=tmp_path))
