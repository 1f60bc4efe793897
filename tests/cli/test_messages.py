"""One-line errors that used to name the wrong thing, or nothing (issue 17, item 19)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.cli import main

REPO = Path(__file__).resolve().parents[2]
DGX = str(REPO / "topologies" / "dgx-a100.toml")


def test_model_nccl_refuses_chunks_and_window(capsys: pytest.CaptureFixture[str]) -> None:
    # --model nccl silently ignored --chunks and --window
    cases = [
        (["--chunks", "4"], "--chunks", "does"),
        (["--chunks", "4", "--window", "2"], "--chunks and --window", "do"),
    ]
    for flags, names, verb in cases:
        argv = ["predict", DGX, "--collective", "allreduce", "--model", "nccl", *flags]
        assert main(argv) == 2
        assert capsys.readouterr().err == (
            f"simcoll: error: {names} {verb} not apply to --model nccl: NCCL's tuning model "
            "costs channels, not pieces or a window; drop it or use --model flow\n"
        )
    assert main(["predict", DGX, "--collective", "allreduce", "--model", "nccl", "--sizes",
                 "1M", "--channels", "4"]) == 0  # fmt: skip


def test_a_scenario_with_n_ranks_0_does_not_name_a_cli_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the point's error named --ranks, a flag of another command
    path = tmp_path / "s.toml"
    path.write_text(
        f'schema = 1\n[topology]\nfile = "{DGX}"\n[workload]\ncollective = "allreduce"\n'
        'size_bytes = "1 MiB"\n[sweep]\nn_ranks = [0, 2]\nn_channels = [-1, 1]\n'
    )
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "(n_ranks=0, n_channels=-1) failed: n_ranks: must be at least 1, got 0\n" in out
    assert "(n_ranks=0, n_channels=1) failed: n_ranks: must be at least 1, got 0\n" in out
    assert "(n_ranks=2, n_channels=-1) failed: n_channels: must be at least 1, got -1\n" in out
    assert "--ranks" not in out
    assert "pieces_per_block" not in out


# --- issue 41: one answer from every door -------------------------------------------------

H100_FAT_TREE = str(REPO / "topologies" / "h100-ib-fat-tree.toml")
DGX1 = str(REPO / "topologies" / "dgx1-v100.toml")


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def _rows(out: str) -> list[dict[str, str]]:
    header, *lines = out.strip().splitlines()
    return [dict(zip(header.split(","), line.split(","), strict=True)) for line in lines]


def test_an_empty_params_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # it was taken as no parameters: 52.98 GB/s against the file's 29.30
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    status, out, err = _run(capsys, "predict", DGX, "--collective", "allreduce", "--sizes", "1M",
                            "--params", empty)  # fmt: skip
    assert (status, out) == (2, "")
    assert err == (
        f"simcoll: error: --params {empty}: sets no parameter, so every link would stay bare "
        "(an empty file?): give a file from `simcoll calibrate`, or --params none for the "
        "bare links\n"
    )


def test_a_range_that_stops_short_of_its_end_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    # 1GB is 10^9 B: 2^20 x 2^9 = 536870912 is the last power of two under it, 2^30 is over
    status, out, err = _run(capsys, "predict", DGX, "--collective", "allreduce", "--sizes",
                            "1M:1GB", "--format", "csv", "--model", "analytical")  # fmt: skip
    assert status == 0
    assert [int(r["size_bytes"]) for r in _rows(out)] == [2**k for k in range(20, 30)]
    assert err == (
        "simcoll: note: --sizes 1M:1GB: the range stops at 512 MiB (536870912 B); its end, "
        "1GB, is 1000000000 B and the next size, 1 GiB, is past it\n"
        "simcoll: note: --sizes 1M:1GB: GB is 10^9 B, G is 2^30 B: 1GB is 1000000000 B, 1G "
        "is 1073741824 B\n"
    )


def test_fail_names_itself_when_routing_can_no_longer_join_two_gpus(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a DGX-1 routes gpu0-gpu5 (no NVLink) over PCIe and both CPUs: cutting the CPUs' link
    # parts them, though NVLinks through a third GPU still join the graph (GPUs forward
    # nothing). It failed as "no route from gpu3 to gpu4", naming no --fail.
    status, out, err = _run(capsys, "predict", DGX1, "--collective", "allreduce", "--sizes",
                            "1M", "--fail", "cpu_link")  # fmt: skip
    assert (status, out) == (2, "")
    assert err == (
        "simcoll: error: --fail cpu_link: gpu0 and gpu5 can no longer reach each other (every "
        "path left between them crosses another GPU, and GPUs forward no traffic)\n"
    )
    # gpu0..gpu3 under CPU 0 are NVLink peers: four ranks run
    assert _run(capsys, "predict", DGX1, "--collective", "allreduce", "--sizes", "1M",
                "--fail", "cpu_link", "--ranks", "4")[0] == 0  # fmt: skip


def test_fail_of_a_gpu_no_rank_runs_on_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    # --ranks 2 runs on gpu0 and gpu1: gpu7 down changes none of their routes
    argv = ["predict", DGX, "--collective", "allreduce", "--sizes", "1M", "--ranks", "2",
            "--format", "csv"]  # fmt: skip
    status, failed, err = _run(capsys, *argv, "--fail", "gpu7")
    assert (status, err) == (0, "")
    assert _rows(failed) == _rows(_run(capsys, *argv)[1])
    status, _, err = _run(capsys, *argv, "--fail", "gpu7", "--placement", "random:3")
    assert status == 2  # random:3 draws gpu6 and gpu7 (numpy default_rng(3).permutation)
    assert err.startswith("simcoll: error: --fail gpu7: ")


def test_a_log_of_rings_only_runs_nccls_pick_among_what_it_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # without 'Trees' lines the plan has no trees: NCCL's pick cannot be the tree (it was
    # refused: "the plan has no trees for the tree algorithm"); --algorithm tree still is
    status, shown, _ = _run(capsys, "plan", "show", H100_FAT_TREE, "--set", "n_nodes=2")
    assert status == 0
    lines = [line for line in shown.splitlines() if line.startswith("NCCL INFO")]
    assert any(line.startswith("NCCL INFO Trees ") for line in lines)
    rings_only = tmp_path / "rings.log"
    rings_only.write_text("\n".join(ln for ln in lines if " Trees " not in ln) + "\n")
    argv = ["predict", H100_FAT_TREE, "--set", "n_nodes=2", "--collective", "allreduce",
            "--sizes", "1K,64K", "--plan", rings_only]  # fmt: skip
    status, out, err = _run(capsys, *argv, "--format", "csv")
    assert (status, err) == (0, "")
    assert {r["algorithm"] for r in _rows(out)} <= {"ring", "nvls_tree"}
    status, out, err = _run(capsys, *argv, "--algorithm", "tree")
    assert (status, out) == (2, "")
    assert err == f"simcoll: error: the plan ({rings_only}) has no trees for the tree algorithm\n"


def test_a_log_with_fewer_channel_lines_than_its_header_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 'Channel 00/08' with 4 channel lines silently ran 4 channels
    log = tmp_path / "cut.log"
    log.write_text("".join(f"h:1:1 [0] NCCL INFO Channel {c:02d}/08 :    0   1   2   3   4   5"
                           "   6   7\n" for c in range(4)))  # fmt: skip
    status, out, err = _run(capsys, "predict", DGX, "--collective", "allreduce", "--sizes",
                            "1M", "--plan", log)  # fmt: skip
    assert (status, out) == (2, "")
    assert err == (
        f"simcoll: error: {log}: its ring lines' header ('Channel cc/08') says 8 channels, but "
        "the log has lines for 4 (channels 00..03): a log cut short? give rank 0's whole "
        "NCCL_DEBUG=INFO output\n"
    )


@pytest.mark.parametrize(("topology", "argv"), [
    ("dgx-h100", []), ("dgx-a100", []), ("h100-ib-fat-tree", ["--set", "n_nodes=2"])])  # fmt: skip
def test_plan_show_prints_the_nvls_channels_predict_runs(
    topology: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # plan show said 0 NVLS channels on a DGX H100, where predict runs NVLS on 2
    status, shown, _ = _run(capsys, "plan", "show", topology, *argv)
    assert status == 0
    (line,) = [ln for ln in shown.splitlines() if " coll channels, " in ln]
    printed = int(line.split(", ")[1].removesuffix(" nvls channels"))
    ran = []
    for name in ("nvls", "nvls_tree"):
        status, out, _ = _run(capsys, "predict", topology, *argv, "--collective", "allreduce",
                              "--sizes", "1M", "--algorithm", name, "--format", "csv")  # fmt: skip
        ran += [int(r["n_channels"]) for r in _rows(out)] if status == 0 else []
    assert printed == (ran[0] if ran else 0)
    assert (printed > 0) == (topology != "dgx-a100")  # A100's NVSwitch does not reduce


def test_a_description_states_the_values_set(capsys: pytest.CaptureFixture[str]) -> None:
    # after --set oversubscription=2 it still read "two-level 1:1 fat tree"
    status, out, _ = _run(capsys, "topo", "show", H100_FAT_TREE, "--set", "oversubscription=2",
                          "--set", "nic_bandwidth=200 Gbit/s")  # fmt: skip
    assert status == 0
    description = out.splitlines()[1]
    assert description == (
        "description: DGX H100 nodes, 8 x 200 Gbit/s NICs each, 2-level 2:1 ib fat tree"
    )
    status, out, _ = _run(capsys, "predict", H100_FAT_TREE, "--set", "oversubscription=2",
                          "--collective", "allreduce", "--sizes", "1M", "--model",
                          "analytical")  # fmt: skip
    assert status == 0
    assert "2-level 2:1 ib fat tree" in out.splitlines()[0]
    assert "1:1" not in out.splitlines()[0]


def test_every_shipped_description_names_only_its_parameters() -> None:
    from simcoll.core.shipped import shipped_names  # noqa: PLC0415
    from simcoll.topology import load  # noqa: PLC0415

    for name in shipped_names("topologies"):
        description = load(name).graph["description"]
        assert description, name
        assert "{" not in description, name
        assert "}" not in description, name


def test_a_placeholder_naming_no_parameter_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'schema = 1\nbuilder = "switch_star"\ndescription = "{n_gpu} GPUs"\n'
        '[params]\nn_gpus = 4\nlink_bandwidth = "1 GB/s"\nlink_latency = "1 us"\n'
    )
    status, _, err = _run(capsys, "topo", "show", path)
    assert status == 2
    assert err == (f"simcoll: error: {path}: description: {{n_gpu}} names no parameter of "
                   "[params] (valid: n_gpus, link_bandwidth, link_latency)\n")  # fmt: skip


def test_a_link_from_a_node_to_itself_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a duplex link A-A was "link gpu0->gpu0 is already defined at links[0]"
    path = tmp_path / "loop.toml"
    path.write_text(
        'schema = 1\n[[nodes]]\nid = "gpu0"\nkind = "gpu"\nrank = 0\n'
        '[[nodes]]\nid = "gpu1"\nkind = "gpu"\nrank = 1\n'
        '[[links]]\nfrom = "gpu0"\nto = "gpu1"\nkind = "nvlink"\nbandwidth = "1 GB/s"\n'
        'latency = "1 us"\n'
        '[[links]]\nfrom = "gpu1"\nto = "gpu1"\nkind = "nvlink"\nbandwidth = "1 GB/s"\n'
        'latency = "1 us"\n'
    )
    status, _, err = _run(capsys, "topo", "show", path)
    assert status == 2
    assert err == (f"simcoll: error: {path}: links[1]: link gpu1-gpu1 goes from gpu1 to "
                   "itself; a link must join two different nodes\n")  # fmt: skip


def test_an_os_error_on_a_huge_path_is_one_line_of_at_most_2000_characters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue 41: a 100,000-character TOPOLOGY (ENAMETOOLONG, an OSError, not a SimcollError)
    # was echoed whole; every error is cut at MAX_MESSAGE_CHARS
    name = "x" * 100_000
    assert main(["predict", name, "--collective", "allreduce"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"simcoll: error: {'x' * 100}")
    assert err.endswith("... (98020 more characters)\n")  # "xxx: File name too long", cut
    assert len(err) == len("simcoll: error: ") + 2000 + len("... (98020 more characters)\n")


def test_more_ranks_than_gpus_suggests_the_set_that_fits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Issue 41: the 8x8 H100 table on the default 4 nodes was refused without saying how
    # to fit it; predict's --ranks says the same as calibrate and compare: 64 ranks over
    # 8 GPUs per node need 8 nodes, and the file's builder takes n_nodes.
    status, _, err = _run(capsys, "predict", "h100-ib-fat-tree", "--ranks", "64",
                          "--collective", "allreduce", "--sizes", "1M")  # fmt: skip
    assert status == 2
    assert err == (
        "simcoll: error: --ranks: 64 ranks, but h100-ib-fat-tree has 32 GPUs (4 nodes of 8); "
        "pass --set n_nodes=8 (64 ranks / 8 GPUs per node)\n"
    )
    status, _, err = _run(capsys, "predict", "dgx-a100", "--ranks", "9", "--collective",
                          "allreduce", "--sizes", "1M")  # fmt: skip
    assert err.endswith("has 8 GPUs (1 node of 8); give a topology of at least 9 GPUs\n")
