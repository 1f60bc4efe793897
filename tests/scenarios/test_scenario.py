"""Tests of simcoll.scenarios.scenario: the schema, unit parsing, axes, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError
from simcoll.scenarios.scenario import load_scenario, parse_scenario

BASE = {"schema": 1, "topology": {"file": "t.toml"}}


def spec(**tables: object) -> dict[str, object]:
    return {**BASE, **tables}


def test_points_are_the_product_of_the_axes_last_axis_fastest() -> None:
    s = parse_scenario(spec(sweep={"n_ranks": [2, 4], "algorithm": ["ring", "tree"]}), source="s")
    assert [p.values for p in s.points()] == [
        {"n_ranks": 2, "algorithm": "ring"},
        {"n_ranks": 2, "algorithm": "tree"},
        {"n_ranks": 4, "algorithm": "ring"},
        {"n_ranks": 4, "algorithm": "tree"},
    ]
    assert [p.index for p in s.points()] == [0, 1, 2, 3]


def test_no_sweep_is_one_point() -> None:
    s = parse_scenario(spec(workload={"collective": "allreduce", "size_bytes": 8}), source="s")
    assert [p.values for p in s.points()] == [{}]


def test_units_are_parsed_by_the_key_suffix() -> None:
    s = parse_scenario(
        spec(
            workload={"bucket_bytes": "25 MiB", "backward_s_per_layer": "2 ms", "name": "x"},
            sweep={"size_bytes": ["1 KiB", 2048], "link_bytes_per_s": ["1 GB/s"]},
        ),
        source="s",
    )
    assert s.workload == {"bucket_bytes": 25 * 2**20, "backward_s_per_layer": 0.002, "name": "x"}
    assert s.axes == {"size_bytes": [1024, 2048], "link_bytes_per_s": [1e9]}


def test_size_range_axis_follows_nccl_tests() -> None:
    s = parse_scenario(spec(sweep={"size_bytes": "1K:8K"}), source="s")
    assert s.axes["size_bytes"] == [1024, 2048, 4096, 8192]


def test_topology_axis_becomes_an_override() -> None:
    s = parse_scenario(
        spec(topology={"file": "t.toml", "set": {"n_nodes": 2, "sharp": True}},
             sweep={"topology.nic_bandwidth": ["200 Gbit/s"]}),
        source="s",
    )  # fmt: skip
    file, overrides, params = s.setup(s.points()[0])
    assert file == Path("t.toml")
    assert overrides == {"n_nodes": "2", "sharp": "true", "nic_bandwidth": "200 Gbit/s"}
    assert params == {}


def test_topology_file_axis_switches_the_file(tmp_path: Path) -> None:
    s = parse_scenario(
        spec(sweep={"topology.file": ["a.toml", "b.toml"]}), source="s", base=tmp_path
    )
    assert [s.setup(p)[0] for p in s.points()] == [tmp_path / "a.toml", tmp_path / "b.toml"]


def test_paths_resolve_against_the_scenario_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "s.toml"
    path.parent.mkdir()
    path.write_text('schema = 1\n[topology]\nfile = "../t.toml"\n')
    assert load_scenario(path).topology_file == tmp_path / "sub" / ".." / "t.toml"


def test_digest_changes_with_what_decides_results_only() -> None:
    a = parse_scenario(spec(sweep={"n_ranks": [2]}), source="a")
    b = parse_scenario(spec(sweep={"n_ranks": [2]}, output={"plots": ["scaling"]}), source="b")
    c = parse_scenario(spec(sweep={"n_ranks": [4]}), source="a")
    assert a.digest == b.digest != c.digest


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"topology": {"file": "t"}}, "s.toml: schema: must be 1, got None"),
        ({"schema": 1}, "s.toml: topology: missing table"),
        ({"schema": 1, "topology": {}},
         "s.toml: topology.file: must name a topology file (a string)"),
        ({**BASE, "colour": 1}, "s.toml: colour: unknown key; valid: schema, title, description, "
         "topology, workload, sweep, output"),
        ({**BASE, "workload": 3}, "s.toml: workload: must be a table, got 3"),
        ({**BASE, "workload": {"bucket_bytes": "25 parsecs"}},
         "s.toml: workload.bucket_bytes: unknown unit 'parsecs' in '25 parsecs'; expected bytes, "
         "e.g. '256 MiB', '1 GB'"),
        ({**BASE, "workload": {"x_s": float("nan")}}, "s.toml: workload.x_s: must be a finite "
         "number, got nan"),
        ({**BASE, "sweep": {"n_ranks": []}}, "s.toml: sweep.n_ranks: must be a list of values "
         '(or a size range such as "8:8G"), got []'),
        ({**BASE, "sweep": {"n_ranks": [2, 2]}},
         "s.toml: sweep.n_ranks: has a value twice: [2, 2]"),
        ({**BASE, "sweep": {"size_bytes": "1M:1K"}}, "s.toml: sweep.size_bytes: range '1M:1K' "
         "ends below its start"),
        ({**BASE, "sweep": {"kind": ["ddp"]}}, "s.toml: sweep.kind: the workload kind cannot "
         "be swept"),
        ({**BASE, "output": {"plots": ["pie"]}}, "s.toml: output.plots: unknown plot 'pie'; "
         "valid: busbw_vs_size, scaling, crossover, metric, breakdown, gantt, "
         "link_utilisation"),
        ({**BASE, "output": {"timelines": "some"}}, "s.toml: output.timelines: must be one of "
         "none, first, all, got 'some'"),
        ({**BASE, "topology": {"file": "t", "set": {"n": [1, 2]}}}, "s.toml: topology.set.n: a "
         "topology parameter must be a single value, got [1, 2]"),
    ],
)  # fmt: skip
def test_bad_scenarios_give_one_line_naming_file_and_field(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(data, source="s.toml")
    assert str(info.value) == message


def test_file_errors(tmp_path: Path) -> None:
    missing = tmp_path / "none.toml"
    with pytest.raises(ConfigError, match=r"^.*none\.toml: no such scenario file$"):
        load_scenario(missing)
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"schema = 1\n\xff\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not UTF-8 \(byte 11\)$"):
        load_scenario(bad)
    broken = tmp_path / "broken.toml"
    broken.write_text("schema = \n")
    with pytest.raises(ConfigError, match=r"broken\.toml: not valid TOML: "):
        load_scenario(broken)


def test_a_sweep_of_too_many_points_is_refused_before_any_is_made(tmp_path: Path) -> None:
    # issue 17 item 9: three axes of 464 values (10^8 points, a 6 KB file) grew past 8 GB
    values = ", ".join(str(v) for v in range(1, 465))
    path = tmp_path / "s.toml"
    path.write_text(
        'schema = 1\n[topology]\nfile = "t.toml"\n[workload]\ncollective = "allreduce"\n'
        f"[sweep]\nsize_bytes = [{values}]\nn_channels = [{values}]\nn_chunks = [{values}]\n"
    )
    assert path.stat().st_size < 8000
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert str(info.value) == (
        f"{path}: sweep: has 99897344 points (464 size_bytes x 464 n_channels x 464 n_chunks), "
        "more than the 100000 one run takes; sweep fewer values, or split it into several "
        "scenarios"
    )


def test_n_points_is_counted_not_built() -> None:
    sweep = {"size_bytes": [1, 2, 3], "n_ranks": [2, 4], "algorithm": ["ring"]}
    data = {"schema": 1, "topology": {"file": "t"}, "sweep": sweep}
    scenario = parse_scenario(data, source="s.toml")
    assert scenario.n_points == 3 * 2 * 1 == len(scenario.points())
    assert parse_scenario({"schema": 1, "topology": {"file": "t"}}, source="s").n_points == 1


@pytest.mark.parametrize(
    ("table", "key", "hint"),
    [("sweep", "bogus", ""), ("sweep", "n_chanels", "did you mean 'n_channels'? "),
     ("workload", "sizes_bytes", "did you mean 'size_bytes'? ")],
)  # fmt: skip
def test_a_key_no_collective_point_reads_is_refused_before_any_point(
    tmp_path: Path, table: str, key: str, hint: str
) -> None:
    # issue 41: [sweep] bogus was accepted, then every point failed
    from simcoll.scenarios.points import check_scenario  # noqa: PLC0415 - pulls in the engine

    topology = Path(__file__).resolve().parents[2] / "topologies" / "dgx-a100.toml"
    workload: dict[str, object] = {"collective": "allreduce", "size_bytes": 1024}
    sweep: dict[str, object] = {"n_ranks": [2, 4]}
    (workload if table == "workload" else sweep)[key] = [1, 2] if table == "sweep" else 1
    scenario = parse_scenario(
        {"schema": 1, "topology": {"file": str(topology)}, "workload": workload, "sweep": sweep},
        source="s.toml",
    )
    with pytest.raises(ConfigError) as info:
        check_scenario(scenario)
    assert str(info.value) == (
        f"s.toml: {table}.{key}: a collective point has no parameter {key!r}; {hint}valid: "
        "collective, size_bytes, algorithm, n_ranks, model, protocol, calibration, placement, "
        "plan, in_place, gpus_per_node, max_in_flight, n_channels, n_chunks, n_ctas, "
        "ranks_per_switch, root, sm_bus_bandwidth_bytes_per_s, or topology.NAME for a "
        "topology parameter"
    )
