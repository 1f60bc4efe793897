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
