"""``simcoll step``: one training step, and the layout search, from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simcoll.cli.main import main
from simcoll.topology import load
from simcoll.training import Parallelism, Training, read_model_file, training_step

TINY = """schema = 1
[model]
name = "tiny"
n_layers = 4
hidden_size = 1024
ffn_hidden_size = 4096
n_heads = 8
vocab_size = 32000
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def test_one_step_prints_what_the_api_computes(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["step", str(tiny), "dgx-h100", "--tp", "2", "--global-batch", "8", "--seq", "2048",
            "--format", "json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    model, _, _ = read_model_file(tiny)
    result = training_step(load("dgx-h100"), model,
                           Training(seq_length=2048, global_batch_size=8),
                           Parallelism(tp=2))  # fmt: skip
    assert out["time_s"] == result.metrics["time_s"]
    assert out["tokens_per_s_per_gpu"] == result.metrics["tokens_per_s"] / 8
    assert (out["tp"], out["dp"], out["data_parallel"]) == (2, 4, "zero1")


def test_the_table_names_every_default_it_used(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["step", str(tiny), "dgx-h100"]) == 0
    captured = capsys.readouterr()
    assert "simcoll: note: default seq 4096 (simcoll's default: give --seq)" in captured.err
    assert "simcoll: note: default global batch 8 sequences" in captured.err  # 1 per replica
    assert "simcoll: note: default dp zero1 (simcoll's default)" in captured.err
    for what in ("step time", "tokens/s per GPU", "MFU", "HFU", "memory per GPU", "GEMMs: "):
        assert what in captured.out


def test_search_ranks_by_throughput_and_says_what_it_dropped(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["step", str(tiny), "dgx-h100", "--search", "--global-batch", "16", "--seq", "2048",
            "--format", "json", "--top", "100"]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    speeds = [r["tokens_per_s"] for r in out["ranked"]]
    assert speeds == sorted(speeds, reverse=True)
    assert len(speeds) > 10
    # 16 sequences over 8 replicas of micro-batch 8 do not divide; nothing else drops
    dropped = {d["layout"]: d["why"] for d in out["dropped"]}
    assert dropped["tp1 pp1 vp1 zero1 mb8"] == (
        "does not divide: training: global_batch_size 16 is not a multiple of "
        "micro_batch_size x dp = 64")  # fmt: skip
    # layouts tried, by hand: (tp, pp) with tp x pp dividing 8 GPUs and pp the 4 layers:
    # (1,1) (2,1) (4,1) (8,1) x {zero1, fsdp}; (1,2) (2,2) (4,2) x vp {1, 2}; (1,4) (2,4):
    # 4 x 2 + 3 x 2 + 2 = 16, each with micro-batches 1, 2, 4, 8: 64
    assert len(out["ranked"]) + len(dropped) == 64
    assert "layouts, " in captured.err
    assert "estimated at most about" in captured.err


def test_a_search_skips_only_layouts_that_cannot_reach_the_top(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--top 3`` the search simulates the layouts by their compute alone, fastest
    first, and stops where that bound is no faster than the third best step simulated:
    the same three, in the same order, as the full ranking, and every layout either
    ranked or skipped with its bound no better than the third."""
    common = ["step", str(tiny), "dgx-h100", "--search", "--global-batch", "16", "--seq",
              "2048", "--format", "json"]  # fmt: skip
    assert main([*common, "--top", "100"]) == 0
    everything = json.loads(capsys.readouterr().out)
    assert everything["skipped"] == []
    assert main([*common, "--top", "3"]) == 0
    captured = capsys.readouterr()
    top = json.loads(captured.out)
    assert top["ranked"] == everything["ranked"][:3]
    third_s = top["ranked"][2]["time_s"]
    assert top["skipped"], "nothing was skipped: the test shows nothing"
    assert all(s["compute_bound_s"] >= third_s for s in top["skipped"])
    n_simulated = len(everything["ranked"]) - len(top["skipped"])
    assert 3 <= n_simulated < len(everything["ranked"])
    assert f"{len(top['skipped'])} layouts not simulated" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["step", "nope", "dgx-h100"], "simcoll: error: "),
        (["step", "llama3-8b", "dgx-h100", "--dp", "bogus"], "invalid choice: 'bogus'"),
        (["step", "llama3-8b", "dgx-h100", "--tp", "3"], "do not split into tp 3"),
        (
            ["step", "llama3-8b", "dgx-h100", "--recompute-early-stop"],
            "recompute_early_stop applies to recompute = full, sac_op, sac_layer, got "
            "recompute 'none'",
        ),
        (
            ["step", "llama3-8b", "dgx-h100", "--eager-ops", "norm,softmax"],
            "argument --eager-ops: expected some of norm, rotary, activation once each, "
            "got 'norm,softmax'",
        ),
        (
            ["step", "llama3-8b", "dgx-h100", "--search", "--first-stage-layers", "3"],
            "--first-stage-layers: --search chooses it for each layout it tries (drop the "
            "flag, or --search)",
        ),
        (
            ["step", "llama3-8b", "dgx-h100", "--search", "--tp", "2"],
            "--tp: --search chooses it for each layout it tries",
        ),
        (
            ["step", "llama3-8b", "dgx-h100", "--workers", "2"],
            "--workers: it runs the layouts "
            "of --search; one step runs in this process (add --search, or drop it)",
        ),
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse's own usage errors
        status = int(stop.code or 0)
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if "error" in line]) == 1
    assert message in err[-1]


def test_a_hugging_face_config_is_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the tiny model as Hugging Face writes it: the same step as its model file
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024,
        "intermediate_size": 4096, "num_attention_heads": 8, "num_key_value_heads": 8,
        "vocab_size": 32000, "tie_word_embeddings": False}))  # fmt: skip
    (tmp_path / "tiny.toml").write_text(TINY)
    common = ["dgx-h100", "--global-batch", "8", "--seq", "2048", "--format", "json"]
    assert main(["step", str(config), *common]) == 0
    from_hf = json.loads(capsys.readouterr().out)
    assert main(["step", str(tmp_path / "tiny.toml"), *common]) == 0
    from_toml = json.loads(capsys.readouterr().out)
    assert from_hf["time_s"] == from_toml["time_s"]


def test_a_stopped_search_ranks_the_layouts_it_finished(
    tiny: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or SIGTERM, turned into it) after 3 layouts: those 3 are ranked, the exit
    status is 130, and stderr says how many of how many ran."""
    from simcoll.cli import step_search as step_cli  # noqa: PLC0415 - the module patched

    real, done = step_cli._run_one, []

    def three_then_stop(index: int):  # type: ignore[no-untyped-def]
        if len(done) == 3:
            raise KeyboardInterrupt
        done.append(index)
        return real(index)

    monkeypatch.setattr(step_cli, "_run_one", three_then_stop)
    argv = ["step", str(tiny), "dgx-h100", "--search", "--global-batch", "16", "--seq", "2048",
            "--format", "json", "--top", "100"]  # fmt: skip
    assert main(argv) == 130
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert len(out["ranked"]) == 3
    # of the 64 layouts (counted by hand in the test above), those that divide and fit
    assert f"interrupted after 3 of {64 - len(out['dropped'])} layouts" in captured.err


def test_a_search_on_a_dask_cluster_ranks_what_one_process_ranks(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    distributed = pytest.importorskip("distributed")
    common = ["step", str(tiny), "dgx-h100", "--search", "--global-batch", "16", "--seq",
              "2048", "--format", "json", "--top", "3"]  # fmt: skip
    assert main(common) == 0
    here = json.loads(capsys.readouterr().out)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:  # fmt: skip
        assert main([*common, "--scheduler", cluster.scheduler_address]) == 0
    on_dask = json.loads(capsys.readouterr().out)
    assert on_dask["ranked"] == here["ranked"]
    assert len(on_dask["ranked"]) == 3


def test_an_unreachable_scheduler_is_one_line(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["step", str(tiny), "dgx-h100", "--search", "--global-batch", "16", "--seq",
            "2048", "--scheduler", "ftp://nowhere:1"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("simcoll: error: --scheduler: 'ftp://nowhere:1' uses ftp://")


def test_early_stop_reruns_less_and_says_so(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["step", str(tiny), "dgx-h100", "--dp", "fsdp", "--global-batch", "8", "--seq",
            "2048", "--recompute", "full"]  # fmt: skip
    assert main([*base, "--format", "json"]) == 0
    megatron = json.loads(capsys.readouterr().out)
    assert main([*base, "--recompute-early-stop", "--format", "json"]) == 0
    torch = json.loads(capsys.readouterr().out)
    assert torch["time_s"] < megatron["time_s"]
    # HFU counts what is re-run: 4/3 of MFU under a full recomputation, less under early stop
    assert megatron["hfu"] == pytest.approx(4 / 3 * megatron["mfu"], rel=1e-12)
    assert torch["mfu"] < torch["hfu"] < 4 / 3 * torch["mfu"]
    assert main([*base, "--recompute-early-stop"]) == 0
    assert "recompute full (early stop)" in capsys.readouterr().out


def test_eager_ops_and_torchtitans_checkpointing_from_the_command_line(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["step", str(tiny), "dgx-h100", "--dp", "fsdp", "--global-batch", "8", "--seq",
            "2048", "--format", "json"]  # fmt: skip
    assert main(base) == 0
    fused = json.loads(capsys.readouterr().out)
    assert main([*base, "--eager-ops", "norm,rotary,activation"]) == 0
    eager = json.loads(capsys.readouterr().out)
    assert eager["time_s"] > fused["time_s"]  # more bytes through HBM, nothing less
    assert main([*base, "--recompute", "sac_op"]) == 0
    op = json.loads(capsys.readouterr().out)
    # per-op checkpointing re-runs part of the forward: HFU above MFU, below 4/3 of it
    assert fused["time_s"] < op["time_s"]
    assert op["mfu"] < op["hfu"] < 4 / 3 * op["mfu"]
    assert main([*base[:-2], "--recompute", "sac_layer", "--eager-ops", "rotary"]) == 0
    assert "recompute sac_layer, eager rotary" in capsys.readouterr().out
    # torchtitan's wq, wk, wv and w1, w3 apart: what the API gives for the same step
    assert main([*base, "--separate-projections"]) == 0
    apart = json.loads(capsys.readouterr().out)
    model, _, _ = read_model_file(tiny)
    training = Training(seq_length=2048, global_batch_size=8, separate_projections=True)
    result = training_step(load("dgx-h100"), model, training,
                           Parallelism(data_parallel="fsdp"))  # fmt: skip
    assert apart["time_s"] == result.metrics["time_s"] != fused["time_s"]


def test_interleaved_chunks_of_unequal_size_from_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # torchtitan's split on 2 chunks per rank: 10 layers on pp 2 x vp 2, the first and
    # last chunk 1 layer each, the middle two 4: what the API computes for that layout.
    path = tmp_path / "ten.toml"
    path.write_text(TINY.replace("n_layers = 4", "n_layers = 10"))
    argv = ["step", str(path), "dgx-h100", "--pp", "2", "--vp", "2", "--global-batch", "8",
            "--seq", "2048", "--first-stage-layers", "1", "--last-stage-layers", "1",
            "--format", "json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    model, _, _ = read_model_file(path)
    layout = Parallelism(pp=2, virtual_stages=2, first_stage_layers=1, last_stage_layers=1)
    result = training_step(load("dgx-h100"), model,
                           Training(seq_length=2048, global_batch_size=8), layout)  # fmt: skip
    assert out["time_s"] == result.metrics["time_s"]
    assert main([*argv[:-2], "--first-stage-layers", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "simcoll: error: parallelism: 7 layers do not split evenly over the other 2 model "
        "chunks (pp x virtual_stages) (first_stage_layers 2, last_stage_layers 1)"
    )


def test_a_search_tries_torchtitans_split_where_the_layers_do_not_divide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 6 layers on one 8-GPU server: pp 4 and pp 2 x vp 2 only as four chunks of 1, 2, 2, 1
    # (tests/training/test_search.py counts them); the table marks them and says so.
    path = tmp_path / "six.toml"
    path.write_text(TINY.replace("n_layers = 4", "n_layers = 6"))
    common = ["step", str(path), "dgx-h100", "--search", "--global-batch", "16", "--seq",
              "2048", "--top", "100"]  # fmt: skip
    assert main([*common, "--format", "json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranked"]
    split = {(r["tp"], r["pp"], r["vp"]) for r in ranked if r["first_stage_layers"]}
    assert split == {(1, 4, 1), (2, 4, 1), (1, 2, 2), (2, 2, 2), (4, 2, 2)}
    assert all(r["first_stage_layers"] == r["last_stage_layers"] for r in ranked)
    assert main(common) == 0
    out = capsys.readouterr().out
    assert "  4*  1 " in out
    assert out.rstrip().endswith("# *: the first and last of the 4 model chunks 1 layer each, "
                                 "the others 2 (torchtitan's split)")  # fmt: skip


def test_tensor_parallel_overlap_from_the_command_line(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --tp-overlap: each way is what the API computes for it, and the table says which.
    base = ["step", str(tiny), "dgx-h100", "--tp", "8", "--global-batch", "1", "--seq",
            "16384"]  # fmt: skip
    model, _, _ = read_model_file(tiny)
    t = Training(seq_length=16384, global_batch_size=1)
    times = {}
    for how, layout in (("none", Parallelism(tp=8)),
                        ("userbuffers", Parallelism(tp=8, tp_comm_overlap=True)),
                        ("async_tp", Parallelism(tp=8, tp_comm_overlap=True,
                                                 tp_comm_overlap_impl="async_tp"))):  # fmt: skip
        assert main([*base, "--tp-overlap", how, "--format", "json"]) == 0
        times[how] = json.loads(capsys.readouterr().out)["time_s"]
        assert times[how] == training_step(load("dgx-h100"), model, t, layout).metrics["time_s"]
    # userbuffers hide every call the compute can cover; async TP only those its GEMMs can,
    # run in 8 row pieces of 2,048 tokens each
    assert times["userbuffers"] < times["async_tp"] < times["none"]
    # at 2,048 tokens the pieces (256 rows, hidden 1,024) are each about one kernel
    # launch: async TP loses more than it hides
    short = [*base[:-1], "2048", "--format", "json"]
    assert main([*short, "--tp-overlap", "async_tp"]) == 0
    fused = json.loads(capsys.readouterr().out)["time_s"]
    assert main([*short, "--tp-overlap", "none"]) == 0
    assert fused > json.loads(capsys.readouterr().out)["time_s"]
    assert main([*base, "--tp-overlap", "async_tp"]) == 0
    assert "(zero1); tp overlap async_tp; micro-batch" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        main([*base, "--tp-overlap", "ring"])
    assert bad.value.code == 2
    assert "--tp-overlap: invalid choice: 'ring'" in capsys.readouterr().err


def test_a_search_says_which_of_the_model_files_choices_it_does_not_keep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The file's tp and micro-batch are layouts the search tries like any other: said in
    # one note; the defaults the search chooses itself (recompute, dp) are not "defaults".
    path = tmp_path / "chosen.toml"
    path.write_text(TINY + "\n[training]\nseq_length = 2048\nmicro_batch_size = 2\n"
                    "\n[parallelism]\ntp = 2\n")  # fmt: skip
    argv = ["step", str(path), "dgx-h100", "--search", "--global-batch", "16", "--top", "1",
            "--format", "json"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert ("simcoll: note: --search chooses these for each layout it tries; the model "
            "file's tp 2, micro_batch_size 2 are not kept") in err  # fmt: skip
    assert "default recompute" not in err
    assert "default dp" not in err
