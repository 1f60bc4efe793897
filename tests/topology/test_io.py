"""Tests of simcoll.topology.io: loading topology files, overrides and one-line errors."""

from __future__ import annotations

import tomllib
from pathlib import Path

import networkx as nx
import pytest

from simcoll.core.errors import ConfigError, SimcollError, TopologyError
from simcoll.topology import catalog
from simcoll.topology.io import load, parse_overrides
from simcoll.topology.schema import LinkKind, NodeKind, gpu_nodes

TOPOLOGIES = Path(__file__).parents[2] / "topologies"
SHIPPED = sorted(TOPOLOGIES.glob("*.toml"))
NVLINK_LINK_BYTES_PER_S = 25e9  # one NVLink3/NVLink4 link, per direction
GOOD = """\
schema = 1
builder = "switch_star"
description = "four GPUs"

[params]
n_gpus = 4
link_bandwidth = "300 GB/s"
link_latency = "0.5 us"
"""


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "topo.toml"
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def _error(path: Path | str, overrides: dict[str, str] | None = None) -> SimcollError:
    with pytest.raises(SimcollError) as info:
        load(path, overrides)
    assert "\n" not in str(info.value)
    return info.value


def _link_values(graph: nx.DiGraph[str], key: str) -> set[object]:
    return {attrs[key] for _, _, attrs in graph.edges(data=True)}


def test_shipped_topologies_exist() -> None:
    # The designs issue 3 asks for, at least.
    names = {path.name for path in SHIPPED}
    assert names >= {
        f"{name}.toml"
        for name in [
            "dgx-a100", "dgx-h100", "dgx-h200", "dgx1-v100", "pcie-8x-rtx4090",
            "pcie-4x-switch", "h100-ib-fat-tree", "h100-rail-optimized", "a100-roce-2to1",
        ]
    }  # fmt: skip


@pytest.mark.parametrize("path", SHIPPED, ids=[path.name for path in SHIPPED])
def test_every_shipped_topology_loads_and_validates(path: Path) -> None:
    graph = load(path)
    assert graph.graph["source"] == str(path)
    assert graph.graph["description"].strip()
    assert path.read_text(encoding="utf-8").startswith("#")  # cites its public spec


@pytest.mark.parametrize(
    ("name", "n_links"),
    [("dgx-a100.toml", 12), ("dgx-h100.toml", 18)],  # NVLink3 x 12, NVLink4 x 18
)
def test_dgx_boxes_have_the_datasheet_bandwidth(name: str, n_links: int) -> None:
    graph = load(TOPOLOGIES / name)
    assert len(gpu_nodes(graph)) == 8
    assert graph.number_of_edges() == 2 * 8
    assert graph.nodes["nvsw"]["kind"] is NodeKind.NVSWITCH
    assert _link_values(graph, "bandwidth_bytes_per_s") == {n_links * NVLINK_LINK_BYTES_PER_S}
    assert _link_values(graph, "latency_s") == {0.5e-6}
    assert _link_values(graph, "kind") == {LinkKind.NVLINK}


def test_load_accepts_a_string_path(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    graph = load(str(path))
    assert graph.graph == {"name": "switch_star_4", "source": str(path), "description": "four GPUs"}


def test_description_is_optional(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace('description = "four GPUs"\n', ""))
    assert load(path).graph["description"] == ""


def test_override_changes_the_gpu_count() -> None:
    graph = load(TOPOLOGIES / "dgx-a100.toml", parse_overrides(["n_gpus=4"]))
    assert gpu_nodes(graph) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert graph.number_of_edges() == 2 * 4


def test_override_changes_a_quantity() -> None:
    overrides = parse_overrides(["nvlink_bandwidth=10 GB/s"])  # per link; 18 links per GPU
    graph = load(TOPOLOGIES / "dgx-h100.toml", overrides)
    assert _link_values(graph, "bandwidth_bytes_per_s") == {18 * 10 * 1e9}
    assert _link_values(graph, "latency_s") == {0.5e-6}  # untouched


def test_overrides_set_kinds_and_supply_missing_values(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("n_gpus = 4\n", ""))
    overrides = parse_overrides(["n_gpus = 3", "link_kind=pcie", "switch_kind=pcie_switch"])
    graph = load(path, overrides)
    assert len(gpu_nodes(graph)) == 3
    assert _link_values(graph, "kind") == {LinkKind.PCIE}
    assert graph.nodes["sw"]["kind"] is NodeKind.PCIE_SWITCH


@pytest.mark.parametrize(
    ("builder", "n_gpus", "expected_edges"),
    [("ring", 5, 2 * 5), ("full_mesh", 5, 5 * 4), ("switch_star", 5, 2 * 5)],
)
def test_every_builder_is_reachable_from_a_file(
    tmp_path: Path, builder: str, n_gpus: int, expected_edges: int
) -> None:
    text = GOOD.replace('"switch_star"', f'"{builder}"').replace("= 4", f"= {n_gpus}")
    graph = load(_write(tmp_path, text))
    assert graph.number_of_edges() == expected_edges
    assert _link_values(graph, "bandwidth_bytes_per_s") == {300 * 1e9}


def probe(
    n_parts: int,
    *,
    buffer_bytes: int,
    hop_latency_s: float,
    fabric_bandwidth_bytes_per_s: float = 1.0,
    scale: float = 1.0,
    strict: bool = False,
    label: str = "x",
    link_kind: LinkKind = LinkKind.IB,
) -> nx.DiGraph[str]:
    """A builder that records its arguments, to test the signature-derived mapping."""
    graph: nx.DiGraph[str] = nx.DiGraph(name="probe")
    graph.graph["arguments"] = dict(locals())
    graph.add_node("gpu0", kind=NodeKind.GPU, rank=0)
    return graph


@pytest.fixture
def with_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(catalog.BUILDERS, "probe", probe)


PROBE = """\
schema = 1
builder = "probe"
[params]
n_parts = 2
buffer = "1 KiB"
hop_latency = "2 us"
"""


@pytest.mark.usefixtures("with_probe")
def test_keys_and_types_come_from_the_builder_signature(tmp_path: Path) -> None:
    path = _write(tmp_path, PROBE + 'fabric_bandwidth = "400 Gbit/s"\nscale = 2\nlabel = "y"\n')
    arguments = load(path).graph["arguments"]
    assert arguments["n_parts"] == 2
    assert arguments["buffer_bytes"] == 1024
    assert arguments["hop_latency_s"] == pytest.approx(2e-6, rel=1e-12)
    assert arguments["fabric_bandwidth_bytes_per_s"] == 400e9 / 8
    assert arguments["scale"] == 2.0
    assert type(arguments["scale"]) is float
    assert arguments["label"] == "y"
    assert arguments["strict"] is False


@pytest.mark.usefixtures("with_probe")
def test_overrides_follow_the_same_rules(tmp_path: Path) -> None:
    overrides = parse_overrides(
        ["buffer=4K", "scale=0.5", "strict=true", "label=z", "link_kind=ethernet", "n_parts=-7"]
    )
    arguments = load(_write(tmp_path, PROBE), overrides).graph["arguments"]
    assert arguments["buffer_bytes"] == 4 * 1024  # nccl-tests: a bare K is binary
    assert arguments["scale"] == 0.5
    assert arguments["strict"] is True
    assert arguments["label"] == "z"
    assert arguments["link_kind"] is LinkKind.ETHERNET
    assert arguments["n_parts"] == -7


@pytest.mark.usefixtures("with_probe")
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("strict=yes", "--set strict: expected true or false, got str 'yes'"),
        ("scale=fast", "--set scale: expected a number, got str 'fast'"),
        ("n_parts=2.5", "--set n_parts: expected an integer, got str '2.5'"),
        ("link_kind=IB", "--set link_kind: expected one of nvlink, pcie, cpu_link, ib, "
                         "ethernet, got str 'IB'"),
        ("hop_latency=3", "--set hop_latency: expected a quantity string with its unit, "
                          "e.g. '0.5 us', got str '3'"),
    ],
)  # fmt: skip
def test_bad_override_values(tmp_path: Path, override: str, expected: str) -> None:
    path = _write(tmp_path, PROBE)
    error = _error(path, parse_overrides([override]))
    assert isinstance(error, ConfigError)
    assert str(error) == f"{path}: {expected}"


def test_builder_output_is_validated_with_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_gpus(n_parts: int) -> nx.DiGraph[str]:
        graph: nx.DiGraph[str] = nx.DiGraph()
        graph.add_node("sw", kind=NodeKind.SWITCH)
        return graph

    monkeypatch.setitem(catalog.BUILDERS, "no_gpus", no_gpus)
    path = _write(tmp_path, 'schema = 1\nbuilder = "no_gpus"\n[params]\nn_parts = 1\n')
    error = _error(path)
    assert isinstance(error, TopologyError)
    assert str(error) == f"{path}: topology has no GPU node"


def test_builder_complaint_about_a_default_points_at_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def picky(n_gpus: int, *, hop_latency_s: float = -1.0) -> nx.DiGraph[str]:
        raise ConfigError("must be >= 0", field="hop_latency_s")

    monkeypatch.setitem(catalog.BUILDERS, "picky", picky)
    path = _write(tmp_path, 'schema = 1\nbuilder = "picky"\n[params]\nn_gpus = 1\n')
    assert str(_error(path)) == f"{path}: params.hop_latency: must be >= 0"


def _odd(n_gpus: int, *, sizes: list[int]) -> nx.DiGraph[str]:
    raise AssertionError("never called")


def _clash(n_gpus: int, *, latency_s: float, latency: float) -> nx.DiGraph[str]:
    raise AssertionError("never called")


@pytest.mark.parametrize(
    ("builder", "match"),
    [(_odd, "argument 'sizes' has a type"), (_clash, "'latency_s' and 'latency' would both")],
)
def test_builder_signature_a_file_cannot_express_is_a_programming_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builder: object, match: str
) -> None:
    monkeypatch.setitem(catalog.BUILDERS, "odd", builder)
    with pytest.raises(TypeError, match=match):
        load(_write(tmp_path, 'schema = 1\nbuilder = "odd"\n'))


def _bad(case_id: str, old: str, new: str, expected: str) -> object:
    """A case: GOOD with ``old`` replaced by ``new``, and the error after "<path>: "."""
    assert old in GOOD
    return pytest.param(GOOD.replace(old, new, 1), expected, id=case_id)


VALID_KEYS = "n_gpus, link_bandwidth, link_latency, link_kind, switch_kind"
BUILDER_NAMES = ", ".join(sorted([*catalog.BUILDERS, *catalog.IMPORTERS]))
BAD_FILES = [
    _bad("unknown-param", "[params]\n", "[params]\nextra = 1\n",
         f"params.extra: unknown parameter of builder 'switch_star'; valid: {VALID_KEYS}"),
    _bad("unknown-top-level-key", "schema = 1\n", "schema = 1\ncolour = 'red'\n",
         "colour: unknown key; valid keys: schema, builder, description, calibration, "
         "calibration_when, gpu_memory_bandwidth, host_memory_bandwidth, gpu, params, routing, "
         "transport"),
    _bad("unknown-builder", '"switch_star"', '"star"',
         f"builder: unknown builder 'star'; valid: {BUILDER_NAMES}"),
    _bad("missing-builder", 'builder = "switch_star"\n', "",
         f"builder: missing (or list [[nodes]] and [[links]] instead); valid: {BUILDER_NAMES}"),
    _bad("schema-2", "schema = 1", "schema = 2",
         "schema: unsupported version 2; this simcoll reads schema = 1"),
    _bad("schema-float", "schema = 1", "schema = 1.0",
         "schema: unsupported version 1.0; this simcoll reads schema = 1"),
    _bad("schema-missing", "schema = 1\n", "",
         "schema: missing; the file must start with schema = 1"),
    _bad("zero-bandwidth", '"300 GB/s"', '"0 GB/s"',
         "params.link_bandwidth: must be positive and finite, got 0.0 bytes/s"),
    _bad("negative-bandwidth", '"300 GB/s"', '"-300 GB/s"',
         "params.link_bandwidth: must be positive and finite, got -300000000000.0 bytes/s"),
    _bad("gbps", '"300 GB/s"', '"400 Gbps"',
         "params.link_bandwidth: unit 'Gbps' is ambiguous (bits or bytes?): "
         "write '400 Gbit/s' or '400 GB/s'"),
    _bad("unknown-unit", '"0.5 us"', '"0.5 parsecs"',
         "params.link_latency: unknown unit 'parsecs' in '0.5 parsecs'; "
         "expected seconds, e.g. '0.7 us', '2 ms'"),
    _bad("bare-number-quantity", '"300 GB/s"', "300e9",
         "params.link_bandwidth: expected a quantity string with its unit, "
         "e.g. '300 GB/s', got float 300000000000.0"),
    _bad("unitless-string-quantity", '"0.5 us"', '"0.5"',
         "params.link_latency: expected a quantity string with its unit, "
         "e.g. '0.5 us', got str '0.5'"),
    _bad("float-count", "n_gpus = 4", "n_gpus = 4.0",
         "params.n_gpus: expected an integer, got float 4.0"),
    _bad("bool-count", "n_gpus = 4", "n_gpus = true",
         "params.n_gpus: expected an integer, got bool True"),
    _bad("string-count", "n_gpus = 4", 'n_gpus = "4"',
         "params.n_gpus: expected an integer, got str '4'"),
    _bad("zero-gpus", "n_gpus = 4", "n_gpus = 0",
         "params.n_gpus: must be an integer >= 1, got 0"),
    _bad("bad-kind", "[params]\n", '[params]\nlink_kind = "NVLink"\n',
         "params.link_kind: expected one of nvlink, pcie, cpu_link, ib, ethernet, "
         "got str 'NVLink'"),
    _bad("missing-param", 'link_latency = "0.5 us"\n', "",
         "params.link_latency: missing; builder 'switch_star' needs it "
         "(required: n_gpus, link_bandwidth, link_latency)"),
    _bad("description-not-a-string", '"four GPUs"', "4",
         "description: must be a string, got int 4"),
    _bad("memory-bandwidth-zero", "schema = 1\n", 'schema = 1\ngpu_memory_bandwidth = "0 GB/s"\n',
         "gpu_memory_bandwidth: must be positive, got 0.0 bytes/s"),
    _bad("memory-bandwidth-negative", "schema = 1\n",
         'schema = 1\ngpu_memory_bandwidth = "-1555 GB/s"\n',
         "gpu_memory_bandwidth: must be positive, got -1555000000000.0 bytes/s"),
    _bad("memory-bandwidth-bare-number", "schema = 1\n",
         "schema = 1\ngpu_memory_bandwidth = 1555e9\n",
         "gpu_memory_bandwidth: expected a quantity string with its unit, e.g. '300 GB/s', "
         "got float 1555000000000.0"),
    _bad("memory-bandwidth-a-size", "schema = 1\n", 'schema = 1\ngpu_memory_bandwidth = "80 GB"\n',
         "gpu_memory_bandwidth: unknown unit 'GB' in '80 GB'; expected bytes_per_s, "
         "e.g. '450 GB/s', '400 Gbit/s'"),
]  # fmt: skip


def test_gpu_memory_bandwidth_is_read_onto_the_graph(tmp_path: Path) -> None:
    assert "gpu_memory_bandwidth_bytes_per_s" not in load(_write(tmp_path, GOOD)).graph
    text = GOOD.replace("schema = 1\n", 'schema = 1\ngpu_memory_bandwidth = "1.555 TB/s"\n')
    assert load(_write(tmp_path, text)).graph["gpu_memory_bandwidth_bytes_per_s"] == 1.555e12


#: GPU memory bandwidth per shipped machine, from each GPU's data sheet (bytes/s).
DATASHEET_MEMORY_BYTES_PER_S = {
    "dgx-a100": 1555e9, "a100-roce-2to1": 1555e9, "dgx-h100": 3.35e12, "h100-ib-fat-tree": 3.35e12,
    "h100-rail-optimized": 3.35e12, "dgx-h200": 4.8e12, "dgx-b200": 8e12, "dgx1-v100": 900e9,
    "pcie-8x-rtx4090": 1008e9,
}  # fmt: skip


@pytest.mark.parametrize(("name", "expected"), DATASHEET_MEMORY_BYTES_PER_S.items())
def test_shipped_machines_carry_their_gpu_memory_bandwidth(name: str, expected: float) -> None:
    graph = load(TOPOLOGIES / f"{name}.toml")
    assert graph.graph["gpu_memory_bandwidth_bytes_per_s"] == pytest.approx(expected, rel=1e-12)


def test_params_must_be_a_table(tmp_path: Path) -> None:
    path = _write(tmp_path, 'schema = 1\nbuilder = "ring"\nparams = 3\n')
    assert str(_error(path)) == f"{path}: params: must be a table ([params]), got int 3"


@pytest.mark.parametrize(("text", "expected"), BAD_FILES)
def test_bad_file_gives_one_line_naming_file_and_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = _write(tmp_path, text)
    assert str(_error(path)) == f"{path}: {expected}"


def test_malformed_toml_gives_line_and_column(tmp_path: Path) -> None:
    text = GOOD.replace('"300 GB/s"', "300 GB/s")
    lines = text.splitlines()
    line = next(i for i, content in enumerate(lines, start=1) if "GB/s" in content)
    column = lines[line - 1].index("GB/s") + 1  # 1-based, where the stray token starts
    error = _error(_write(tmp_path, text))
    assert isinstance(error, ConfigError)
    assert error.source == str(tmp_path / "topo.toml")
    assert error.field == f"line {line}, column {column}"
    assert error.message.startswith("invalid TOML: ")
    assert str(error).startswith(f"{tmp_path / 'topo.toml'}: line {line}, column {column}: ")


def test_truncated_toml_is_reported_at_end_of_document(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD + "link_kind = ")
    error = _error(path)
    assert error.field == "end of document"
    assert str(error).startswith(f"{path}: end of document: invalid TOML: ")


def test_non_utf8_file(tmp_path: Path) -> None:
    raw = GOOD.encode("utf-8") + "# Grüße\n".encode("latin-1")
    path = _write(tmp_path, raw)
    offset = len(GOOD.encode("utf-8")) + len("# Gr")
    line = GOOD.count("\n") + 1
    assert str(_error(path)) == (
        f"{path}: line {line}: not UTF-8 text (byte 0xfc at offset {offset}); "
        "save the file as UTF-8"
    )


def test_byte_order_mark_is_tolerated(tmp_path: Path) -> None:
    path = _write(tmp_path, b"\xef\xbb\xbf" + GOOD.encode("utf-8"))
    assert len(gpu_nodes(load(path))) == 4


def test_missing_file_and_directory(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    assert str(_error(path)) == f"{path}: no such file"
    assert str(_error(tmp_path)) == f"{tmp_path}: is a directory, not a file"


def test_source_is_the_path_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, GOOD.replace("n_gpus = 4", "n_gpus = -1"))
    monkeypatch.chdir(tmp_path)
    assert str(_error("topo.toml")) == "topo.toml: params.n_gpus: must be an integer >= 1, got -1"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"n_gpu": "4"}, f"--set n_gpu: unknown parameter of builder 'switch_star'; "
                         f"valid: {VALID_KEYS}"),
        ({"n_gpus": "four"}, "--set n_gpus: expected an integer, got str 'four'"),
        ({"n_gpus": "0"}, "--set n_gpus: must be an integer >= 1, got 0"),
        ({"link_bandwidth": "100 Gbps"}, "--set link_bandwidth: unit 'Gbps' is ambiguous "
                                         "(bits or bytes?): write '100 Gbit/s' or '100 GB/s'"),
    ],
)  # fmt: skip
def test_bad_override_names_the_file_and_the_override(
    tmp_path: Path, overrides: dict[str, str], expected: str
) -> None:
    path = _write(tmp_path, GOOD)
    assert str(_error(path, overrides)) == f"{path}: {expected}"


def test_parse_overrides_splits_on_the_first_equals_sign() -> None:
    assert parse_overrides([]) == {}
    assert parse_overrides(["label=a=b", " n_gpus = 4 "]) == {"label": "a=b", "n_gpus": "4"}


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["n_gpus"], "--set: expected KEY=VALUE (e.g. n_gpus=4), got 'n_gpus'"),
        (["=4"], "--set: expected KEY=VALUE (e.g. n_gpus=4), got '=4'"),
        ([" =4"], "--set: expected KEY=VALUE (e.g. n_gpus=4), got ' =4'"),
        (["n_gpus=4", "n_gpus=8"], "--set n_gpus: given twice ('4' and '8'); give it once"),
    ],
)
def test_malformed_override_items(items: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_overrides(items)
    assert str(info.value) == expected


def _wrapper_params(wrapper: Path) -> dict[str, str]:
    """The [params] of an example wrapper, but its file: as --set would give them."""
    params = tomllib.loads(wrapper.read_text())["params"]
    return {k: str(v) for k, v in params.items() if k != "file"}


@pytest.mark.parametrize(
    ("dump", "wrapper"),
    [
        ("dgx1-v100.nccl.xml", "dgx1-v100-from-nccl.toml"),
        ("h100-vm-1gpu.nccl.xml", "h100-vm-1gpu-from-nccl.toml"),
        ("dgx1-v100.nvsmi.txt", "dgx1-v100-from-nvidia-smi.toml"),
        ("h100-vm-1gpu.nvsmi.txt", "h100-vm-1gpu-from-nvidia-smi.toml"),
    ],
)
def test_a_dump_is_a_topology_detected_by_its_content(dump: str, wrapper: str) -> None:
    # issue 31: an NCCL XML dump or an nvidia-smi matrix needed a TOML wrapper; read
    # directly, with what it does not say given as overrides, it is the wrapper's machine
    examples = Path(__file__).resolve().parents[2] / "topologies" / "examples"
    direct = load(examples / dump, overrides=_wrapper_params(examples / wrapper))
    wrapped = load(examples / wrapper)
    assert list(direct.nodes(data=True)) == list(wrapped.nodes(data=True))
    assert list(direct.edges(data=True)) == list(wrapped.edges(data=True))  # (source differs)
    with pytest.raises(ConfigError) as info:
        load(examples / dump)
    message = str(info.value)
    assert message.startswith(f"{examples / dump}: params.")
    assert message.endswith(
        "; a dump does not say it: give it with --set KEY=VALUE, or write a TOML file that "
        "names the dump (see topologies/examples/)"
    )


def test_the_routing_rule_is_a_what_if_knob() -> None:
    # issue 31: --set routing=ecmp answered "unknown parameter of builder 'rail_optimized'"
    base = {"n_nodes": "2"}
    assert load("h100-rail-optimized", overrides=base).graph["routing"] == "dmodk"  # its file's
    ecmp = load("h100-rail-optimized", overrides={**base, "routing.rule": "ecmp",
                                                   "routing.ecmp_seed": "7"})  # fmt: skip
    assert (ecmp.graph["routing"], ecmp.graph["ecmp_seed"]) == ("ecmp", 7)
    assert load("dgx-a100", overrides={"routing.rule": "lowest_ids"}).graph["routing"] == (
        "lowest_ids"
    )
    with pytest.raises(ConfigError, match=r"routing\.rule: expected one of ecmp, lowest_ids"):
        load("h100-rail-optimized", overrides={"routing.rule": "bogus"})


@pytest.mark.parametrize("builder", ['["nccl_xml"]', "{ a = 1 }", "3"])
def test_the_files_of_a_topology_whose_builder_is_not_a_name(tmp_path: Path, builder: str) -> None:
    # Issue 41: `topo dump -o` listed the topology's files before loading it, and a builder
    # given as a list raised TypeError (unhashable) there; the file itself is listed, and
    # loading it is what refuses it, in one line
    from simcoll.topology.io import source_files  # noqa: PLC0415

    path = tmp_path / "t.toml"
    path.write_text(f'schema = 1\nbuilder = {builder}\n[params]\nfile = "x.xml"\n')
    assert source_files(path) == [path]
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: builder: ")


@pytest.mark.parametrize(("value", "expected"), [
    ('"-1 GB/s"', "host_memory_bandwidth: must be positive"),
    ('"fast"', "host_memory_bandwidth"),
])  # fmt: skip
def test_bad_host_memory_bandwidth_names_its_key(tmp_path: Path, value: str, expected: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(GOOD.replace("schema = 1\n", f"schema = 1\nhost_memory_bandwidth = {value}\n"))
    with pytest.raises(ConfigError, match=expected) as caught:
        load(path)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_host_memory_bandwidth_is_read_in_bytes_per_s(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        GOOD.replace("schema = 1\n", 'schema = 1\nhost_memory_bandwidth = "409.6 GB/s"\n')
    )
    assert load(path).graph["host_memory_bandwidth_bytes_per_s"] == 409.6e9


def test_gpudirect_rdma_off_in_the_file_or_by_set_stages_every_nic(tmp_path: Path) -> None:
    from simcoll.topology.whatif import gpudirect_rdma_off  # noqa: PLC0415

    shipped = TOPOLOGIES / "h100-ib-fat-tree.toml"
    by_set = load(shipped, {"n_nodes": "2", "transport.gpudirect_rdma": "false"})
    text = shipped.read_text() + "\n[transport]\ngpudirect_rdma = false\n"
    (tmp_path / "calibration").symlink_to(TOPOLOGIES / "calibration")
    (tmp_path / "staged.toml").write_text(text)
    in_file = load(tmp_path / "staged.toml", {"n_nodes": "2"})
    by_hand = gpudirect_rdma_off(load(shipped, {"n_nodes": "2"}))
    for graph in (by_set, in_file):
        assert graph.graph["gpudirect_rdma"] is False
        assert {e: a["bandwidth_bytes_per_s"] for e, a in graph.edges.items()} == {
            e: a["bandwidth_bytes_per_s"] for e, a in by_hand.edges.items()
        }
    # 614.4 GB/s of host memory over 4 x 8 NICs: 19.2 GB/s each way (50 with GPUDirect)
    assert by_set.edges["node0.nic0", "leaf0"]["bandwidth_bytes_per_s"] == pytest.approx(19.2e9)
    assert load(shipped, {"n_nodes": "2", "transport.gpudirect_rdma": "true"}).edges[
        "node0.nic0", "leaf0"]["bandwidth_bytes_per_s"] == 50e9  # fmt: skip


@pytest.mark.parametrize(("override", "field", "message"), [
    ({"transport.gdr": "off"}, "transport.gdr", "unknown key; valid: gpudirect_rdma"),
    ({"transport.gpudirect_rdma": "maybe"}, "transport.gpudirect_rdma", "expected true or false"),
])  # fmt: skip
def test_bad_transport_names_its_key(override: dict[str, str], field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load(TOPOLOGIES / "h100-ib-fat-tree.toml", override)
    assert caught.value.field == field


def test_gpudirect_rdma_off_without_host_memory_names_the_missing_key() -> None:
    with pytest.raises(ConfigError, match="missing: without GPUDirect RDMA") as caught:
        load(TOPOLOGIES / "dgx-a100.toml", {"transport.gpudirect_rdma": "false"})
    assert caught.value.field == "host_memory_bandwidth"


def test_a_string_in_the_files_transport_table_is_refused(tmp_path: Path) -> None:
    # TOML has booleans: "false" in quotes is a string there (only --set gives strings)
    path = tmp_path / "t.toml"
    path.write_text(GOOD + '\n[transport]\ngpudirect_rdma = "false"\n')
    with pytest.raises(ConfigError, match="expected true or false, got str") as caught:
        load(path)
    assert caught.value.field == "transport.gpudirect_rdma"
