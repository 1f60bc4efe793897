"""The training step: the pipeline's bubble on a compute-only step, and the bytes each
parallel dimension's calls move per step, against closed forms derived here."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from simcoll.core.errors import ConfigError, LimitError
from simcoll.prediction.session import recording_calls
from simcoll.topology import switch_star
from simcoll.topology.gpu_spec import GpuSpec, gpu_spec
from simcoll.topology.io import load
from simcoll.training import (
    Parallelism,
    StepTimes,
    Training,
    Transformer,
    read_model_file,
    training_step,
)
from simcoll.training.compute import Efficiency
from simcoll.training.step import compute_bound_s, step_calls, step_times

MODELS = Path(__file__).resolve().parents[2] / "models"
SMALL = Transformer(
    "small",
    n_layers=8,
    hidden_size=256,
    ffn_hidden_size=1024,
    n_heads=8,
    vocab_size=1000,
    gated_mlp=False,
)  # fmt: skip: 12 h^2 per layer


def free_links(n: int):  # type: ignore[no-untyped-def]
    """``n`` GPUs whose links cost (almost) nothing: a step of compute alone."""
    return switch_star(n, link_bandwidth_bytes_per_s=1e20, link_latency_s=0.0)


TIMES = StepTimes(forward_s_per_layer=1e-3, backward_s_per_layer=2e-3, head_forward_s=0.0,
                  head_backward_s=0.0, optimizer_s=0.0)  # fmt: skip


@pytest.mark.parametrize(("p", "m"), [(4, 8), (2, 6), (4, 4)])
def test_1f1b_on_compute_alone_has_the_bubble_p_minus_1_over_m_plus_p_minus_1(
    p: int, m: int
) -> None:
    # Each stage holds 8 / p layers: F = 8/p ms forward, B = 16/p ms backward per
    # micro-batch; 1F1B takes (m + p - 1)(F + B), idle (p - 1)(F + B) on every stage.
    t = Training(seq_length=64, global_batch_size=m)
    r = training_step(free_links(p), SMALL, t, Parallelism(pp=p, sequence_parallel=False),
                      times=TIMES, calibration=None, protocol=None)  # fmt: skip
    stage_s = 8 / p * 3e-3
    assert r.metrics["time_s"] == pytest.approx((m + p - 1) * stage_s, rel=1e-9)
    assert r.metrics["idle_s"] / r.metrics["time_s"] == pytest.approx((p - 1) / (m + p - 1),
                                                                      rel=1e-9)  # fmt: skip


def test_the_interleaved_schedule_divides_the_bubble_by_the_chunks() -> None:
    # Narayanan et al. 2021, section 2.2.2: with v chunks per stage the bubble is
    # (p - 1)(F + B) / v: the step takes m (F + B) + (p - 1)(F + B) / v.
    p, m, v = 4, 8, 2
    t = Training(seq_length=64, global_batch_size=m)
    par = Parallelism(pp=p, virtual_stages=v, sequence_parallel=False)
    r = training_step(free_links(p), SMALL, t, par, times=TIMES, calibration=None, protocol=None)
    stage_s = 8 / p * 3e-3
    assert r.metrics["time_s"] == pytest.approx(m * stage_s + (p - 1) * stage_s / v, rel=1e-9)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (2, 6, 1), (4, 8, 2), (1, 3, 1)])
def test_the_compute_bound_is_the_step_on_compute_alone(p: int, m: int, v: int) -> None:
    # Stage p - 1 waits for the first micro-batch's forward on the p - 1 stages before it,
    # runs m v chunk passes, and its last backward crosses them again: (p - 1)(F + B) / v
    # + m (F + B), the 1F1B and interleaved steps above: the bound is reached.
    t = Training(seq_length=64, global_batch_size=m)
    par = Parallelism(pp=p, virtual_stages=v, sequence_parallel=False)
    r = training_step(free_links(p), SMALL, t, par, times=TIMES, calibration=None, protocol=None)
    stage_s = 8 / p * 3e-3
    bound = compute_bound_s(SMALL, t, par.with_gpus(p), TIMES)
    assert bound == pytest.approx(m * stage_s + (p - 1) * stage_s / v, rel=1e-12)
    assert r.metrics["time_s"] == pytest.approx(bound, rel=1e-9)


@pytest.mark.parametrize(
    "par",
    [Parallelism(tp=2, pp=2), Parallelism(pp=4, virtual_stages=2), Parallelism(tp=4),
     Parallelism(data_parallel="fsdp"), Parallelism(tp=2, data_parallel="fsdp"),
     Parallelism(pp=2, data_parallel="ddp")],
)  # fmt: skip
def test_no_step_on_a_real_machine_beats_its_compute_bound(par: Parallelism) -> None:
    # Calls, copies, the bubble and SMs lent to calls only add to the compute the bound
    # counts (what --search skips layouts by).
    g = load("dgx-h100")
    gpu = gpu_spec(g)
    assert gpu is not None
    t = Training(seq_length=2048, global_batch_size=16, micro_batch_size=1)
    r = training_step(g, SMALL, t, par)
    full = r.parallelism
    bound = compute_bound_s(SMALL, t, full, step_times(SMALL, t, full, gpu, Efficiency()))
    assert 0.5 * r.metrics["time_s"] < bound <= r.metrics["time_s"]


def recorded(model: Transformer, t: Training, par: Parallelism, n_gpus: int) -> Counter[str]:
    """Bytes per (collective) the step asks for, summed over its calls."""
    with recording_calls() as calls:
        training_step(free_links(n_gpus), model, t, par, times=TIMES, calibration=None,
                      protocol=None)  # fmt: skip
    total: Counter[str] = Counter()
    for c in calls:
        if c.collective != "compute":
            total[c.collective] += c.size_bytes
    return total


def test_each_dimensions_bytes_per_step_are_the_closed_forms() -> None:
    # tp 2 (sequence parallel), pp 2, dp 2 on 8 GPUs; m = 16 / 2 = 8 micro-batches of
    # b = 2 sequences of s = 64 tokens; hidden h = 256; bf16 activations and gradients.
    tp, pp, dp, b, s, h, L, V, m = 2, 2, 2, 2, 64, 256, 8, 1000, 8
    t = Training(seq_length=s, micro_batch_size=b, global_batch_size=m * b * dp)
    par = Parallelism(tp=tp, pp=pp, dp=dp, data_parallel="zero1")
    got = recorded(SMALL, t, par, 8)
    act = b * s * h * 2
    # TP: per layer 2 all-gathers and 2 reduce-scatters of act, forward and backward, on
    # every micro-batch of every replica (L layers over the stages).
    assert got["allgather"] - gathered_params(tp, pp, dp, h, V, L) == 2 * 2 * L * m * dp * act
    assert got["reducescatter"] - gathered_params(tp, pp, dp, h, V, L) == 2 * 2 * L * m * dp * act
    # PP: each micro-batch's activations forward and gradients back across the p - 1
    # boundaries, 1/tp per TP rank, on every replica.
    assert got["sendrecv"] == 2 * (pp - 1) * m * dp * tp * (act // tp)


def gathered_params(tp: int, pp: int, dp: int, h: int, V: int, L: int) -> int:
    """ZeRO-1 bytes per step, reduce-scattered (gradients) and all-gathered (parameters),
    per call summed: each stage's TP rank holds L/pp layers of 12 h^2/tp + 2 h parameters,
    the first the embedding and the last the output layer (V h / tp each), 2 bytes each."""
    layer = 12 * h * h // tp + 2 * h
    per_stage = [L // pp * layer + V * h // tp * ((i == 0) + (i == pp - 1)) for i in range(pp)]
    return sum(2 * n for n in per_stage) * tp


def test_fsdp_gathers_every_pass_and_reduces_every_backward() -> None:
    # FSDP on 4 GPUs, one stage: per micro-batch each block's unit is gathered before its
    # forward and again before its backward (2 bytes per parameter), the root unit (the
    # embedding, final norm and output layer: V h + h + V h) once, held through the
    # backward; every unit and the root are reduce-scattered after each backward.
    dp, m = 4, 3
    t = Training(seq_length=64, global_batch_size=m * dp)
    par = Parallelism(data_parallel="fsdp", sequence_parallel=False)
    got = recorded(SMALL, t, par, dp)
    h, L, V = 256, 8, 1000
    layers_bytes = 2 * L * (12 * h * h + 2 * h)
    root_bytes = 2 * (2 * V * h + h)
    # each unit's size padded to a multiple of 2 x 4 bytes: 12 h^2 + 2 h and 2 V h + h are
    # multiples of 4 elements, so no padding
    assert got["allgather"] == m * (2 * layers_bytes + root_bytes)
    assert got["reducescatter"] == m * (layers_bytes + root_bytes)


def test_a_step_on_a_real_machine_is_between_compute_alone_and_compute_plus_comm() -> None:
    g = free_links(8)
    g.graph["gpu"] = GpuSpec("GPU", {"bf16": 100e12}, 80 * 10**9, 1e12)
    m, _training, _ = read_model_file(MODELS / "llama3-8b.toml")
    t = Training(seq_length=1024, global_batch_size=8)
    r = training_step(g, m, t, Parallelism(tp=8), calibration=None, protocol=None)
    assert r.metrics["compute_s"] <= r.metrics["time_s"]
    parts = ("compute_s", "exposed_tp_s", "exposed_pp_s", "exposed_dp_s", "idle_s")
    assert sum(r.metrics[k] for k in parts) == pytest.approx(r.metrics["time_s"], rel=1e-9)
    assert 0 < r.metrics["mfu"] < 1


@pytest.mark.parametrize(
    ("par", "message"),
    [
        (Parallelism(tp=3), "parallelism: 8 GPUs do not split into tp 3 x cp 1 x pp 1 (3 GPUs "
         "per data-parallel replica)"),
        (Parallelism(pp=8, dp=1), "parallelism: 8 layers do not split into pp 8 x "
         "virtual_stages 1 chunks"),
        (Parallelism(ep=2, dp=4, pp=2), "parallelism: ep 2 needs a mixture of experts (the "
         "model small has none)"),
    ],
)  # fmt: skip
def test_a_layout_that_cannot_run_gets_one_line(par: Parallelism, message: str) -> None:
    if par.pp == 8:
        par = Parallelism(pp=8, virtual_stages=2)
    t = Training(seq_length=64, global_batch_size=8)
    with pytest.raises(ConfigError) as info:
        training_step(free_links(8), SMALL, t, par, times=TIMES)
    assert str(info.value) == message.replace("pp 8 x virtual_stages 1", "pp 8 x virtual_stages 2")


def test_a_topology_without_its_gpus_figures_is_refused_in_one_line() -> None:
    t = Training(seq_length=64, global_batch_size=8)
    with pytest.raises(ConfigError, match=r"needs the GPU's peak FLOP/s and memory: add a \[gpu\]"):
        training_step(free_links(8), SMALL, t, Parallelism())


def test_a_step_that_does_not_fit_is_refused_with_its_numbers() -> None:
    g = free_links(8)
    g.graph["gpu"] = GpuSpec("small GPU", {"bf16": 100e12}, 10**9, 1e12)
    m, _, _ = read_model_file(MODELS / "llama3-8b.toml")
    t = Training(seq_length=1024, global_batch_size=8)
    with pytest.raises(ConfigError, match=r"GB per GPU \(parameters .* do not fit in 1 GB"):
        training_step(g, m, t, Parallelism(tp=8), memory_check="refuse")
    flagged = training_step(g, m, t, Parallelism(tp=8), calibration=None, protocol=None)
    assert flagged.metrics["fits_in_memory"] == 0


def test_every_tensor_parallel_call_takes_what_predict_prints_for_it() -> None:
    # One simulator: on one DGX H100, TP 8 with sequence parallelism and no compute, a
    # step is its calls one after another: per layer and pass (forward, backward) two
    # all-gathers and two reduce-scatters of the layer's activations, each the time
    # `simcoll predict` gives that call on those 8 GPUs.
    from simcoll import load_topology  # noqa: PLC0415
    from simcoll.prediction import predict  # noqa: PLC0415

    g = load_topology(Path(__file__).resolve().parents[2] / "topologies/dgx-h100.toml")
    zero = StepTimes(0.0, 0.0, 0.0, 0.0, 0.0)
    t = Training(seq_length=1024, global_batch_size=1)
    r = training_step(g, SMALL, t, Parallelism(tp=8), times=zero)
    act = 1024 * 256 * 2  # tokens x hidden x bf16
    gather = predict(g, "allgather", [act]).rows[0].time_s
    scatter = predict(g, "reducescatter", [act]).rows[0].time_s
    n_layers = 8
    assert r.metrics["time_s"] == pytest.approx(2 * n_layers * 2 * (gather + scatter), rel=1e-9)
    assert r.metrics["exposed_tp_s"] == pytest.approx(r.metrics["time_s"], rel=1e-9)


def test_a_steps_calls_are_counted_before_any_is_made() -> None:
    # tp 2 (sequence parallel) on 2 GPUs, 1 stage, 1 replica, 2 micro-batches of the small
    # model's 8 layers: 2 x 2 = 4 passes, each one compute span and, per layer, an
    # all-gather and a reduce-scatter around the attention and around the MLP (2 x 2 x 8
    # = 32 calls): 4 x 33 = 132, and the optimizer's span: 133 recorded.
    t = Training(seq_length=64, global_batch_size=2)
    par = Parallelism(tp=2).with_gpus(2)
    assert step_calls(SMALL, t, par) == 4 * (1 + 2 * 2 * 8)
    with recording_calls() as calls:
        training_step(free_links(2), SMALL, t, Parallelism(tp=2), times=TIMES,
                      calibration=None, protocol=None)  # fmt: skip
    assert len(calls) == 4 * 33 + 1


def test_a_step_of_more_calls_than_the_cap_is_refused_before_any_is_made() -> None:
    # Issue 41. As above with m micro-batches: 2 m x 33 calls, over 2^24 from
    # m = ceil((2^24 + 1) / 66) = 254,201 (16,777,266 calls); 254,200 make 16,777,200.
    par = Parallelism(tp=2).with_gpus(2)
    assert step_calls(SMALL, Training(seq_length=64, global_batch_size=254_200), par) == (
        16_777_200
    )
    t = Training(seq_length=64, global_batch_size=254_201)
    with pytest.raises(LimitError) as info:
        training_step(free_links(2), SMALL, t, Parallelism(tp=2), times=TIMES)
    assert str(info.value) == (
        "training step: at least 16777266 calls (508402 passes: forward and backward x "
        "254201 micro-batches x 1 chunks x pp 1 x dp 1; each a compute span and 32 "
        "tensor-parallel calls), more than the 16777216 (2^24) a step simulates; use a "
        "smaller global_batch_size or fewer layers"
    )


def test_uneven_stages_run_at_the_pace_of_the_largest() -> None:
    # Megatron's --decoder-first-pipeline-num-layers: 2 of the 8 layers on the first stage,
    # 6 on the last. Forward 1 ms and backward 2 ms a layer: f0 = 2, b0 = 4, f1 = 6, b1 =
    # 12 ms. The last stage is the bottleneck and never waits after its first input: it
    # starts at f0, runs m x (f1 + b1), then the first stage's last backward: with m = 4,
    # 2 + 4 x 18 + 4 = 78 ms (1F1B's order traced by hand in the issue 42 note).
    t = Training(seq_length=64, global_batch_size=4)
    layout = Parallelism(pp=2, first_stage_layers=2, sequence_parallel=False)
    r = training_step(free_links(2), SMALL, t, layout, times=TIMES, calibration=None,
                      protocol=None)  # fmt: skip
    assert r.metrics["time_s"] == pytest.approx(0.078, rel=1e-9)


def test_uneven_interleaved_chunks_run_as_traced_by_hand() -> None:
    # torchtitan's generate_split_points with two chunks per rank: the first and last of
    # the pp x 2 model chunks hold fewer layers. 8 layers, 1 in the first chunk and 3 in
    # the last: chunks v0..v3 hold 1, 2, 2, 3; stage 0 runs v0 and v2, stage 1 v1 and v3.
    # F = 1 ms and B = 2 ms a layer; 2 micro-batches. Megatron's interleaved order: stage
    # 0 F(v0) x2, F(v2) x2, B(v2) x2, B(v0) x2; stage 1 F(v1) x2, F(v3) B(v3) twice, B(v1)
    # x2. Traced, each op at max(its stage free, its input done):
    #   s0 F v0 0-1, 1-2        s1 F v1 1-3, 3-5
    #   s0 F v2 3-5, 5-7        s1 F v3 5-8, B v3 8-14, F v3 14-17, B v3 17-23
    #   s0 B v2 14-18, 23-27    s1 B v1 23-27, 27-31
    #   s0 B v0 27-29, 31-33: the step ends at 33 ms, the compute bound's stage 1:
    #   F(v0) 1 + 2 x 3 x 5 layers + B(v0) 2.
    t = Training(seq_length=64, global_batch_size=2)
    par = Parallelism(pp=2, virtual_stages=2, first_stage_layers=1, last_stage_layers=3,
                      sequence_parallel=False)  # fmt: skip
    r = training_step(free_links(2), SMALL, t, par, times=TIMES, calibration=None,
                      protocol=None)  # fmt: skip
    assert r.metrics["time_s"] == pytest.approx(0.033, rel=1e-9)
    assert compute_bound_s(SMALL, t, par.with_gpus(2), TIMES) == pytest.approx(0.033, rel=1e-12)


def test_uneven_interleaved_chunks_that_do_not_split_are_one_line() -> None:
    t = Training(seq_length=64, global_batch_size=2)
    with pytest.raises(ConfigError, match=r"^parallelism: 5 layers do not split evenly over "
                       r"the other 3 model chunks \(pp x virtual_stages\) \(first_stage_layers "
                       r"3, last_stage_layers 0\)$"):  # fmt: skip
        training_step(free_links(2), SMALL, t,
                      Parallelism(pp=2, virtual_stages=2, first_stage_layers=3), times=TIMES,
                      calibration=None, protocol=None)  # fmt: skip


def test_uneven_stages_that_do_not_split_are_one_line() -> None:
    t = Training(seq_length=64, global_batch_size=4)
    with pytest.raises(ConfigError, match=r"^parallelism: 5 layers do not split evenly over "
                       r"the other 2 pipeline stages"):  # fmt: skip
        training_step(free_links(3), SMALL, t, Parallelism(pp=3, first_stage_layers=3),
                      times=TIMES, calibration=None, protocol=None)  # fmt: skip


def test_a_first_stage_of_more_layers_than_the_model_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^parallelism: first_stage_layers 9, last_stage_layers "
                       r"0 leave -1 of the 8 layers for the other 1 pipeline stages, fewer than "
                       r"one each$"):  # fmt: skip
        training_step(free_links(2), SMALL, Training(seq_length=64, global_batch_size=4),
                      Parallelism(pp=2, first_stage_layers=9), times=TIMES, calibration=None,
                      protocol=None)  # fmt: skip


@pytest.mark.parametrize(("par", "communicators"), [
    (Parallelism(data_parallel="fsdp"), 1),  # the 8 GPUs' data-parallel group
    (Parallelism(tp=2, pp=2), 2),  # GPU 0's tensor-parallel pair and data-parallel pair
])  # fmt: skip
def test_nccl_buffers_are_each_communicators_channels(par: Parallelism, communicators: int) -> None:
    # NCCL's plan on one NVSwitch H100 server runs 24 channels (6 search channels,
    # duplicated, then doubled: README, "NVSwitch servers"), each receiving into 4 MiB
    # (Simple), 8 x 16 x 512 x 8 B (LL) and 120 x 8 x 640 x 8 B (LL128) of buffers.
    per_channel = 4 * 2**20 + 8 * 16 * 512 * 8 + 120 * 8 * 640 * 8
    t = Training(seq_length=2048, global_batch_size=16)
    r = training_step(load("dgx-h100"), SMALL, t, par, times=TIMES)
    assert r.metrics["memory_comm_buffers_bytes"] == communicators * 24 * per_channel
    assert r.memory.parts["comm_buffers"] == r.metrics["memory_comm_buffers_bytes"]


def test_fp8_leaves_the_output_layer_in_16_bits() -> None:
    # Transformer Engine runs FP8 in its own modules only; Megatron-Core's output layer and
    # llm-foundry's tied head are not one, so the head takes its BF16 time under FP8, while
    # the layers' GEMMs run at twice the BF16 table (the H100's FP8 stand-in).
    gpu = gpu_spec(load("dgx-h100"))
    assert gpu is not None
    par = Parallelism().with_gpus(8)

    def times(precision: str) -> StepTimes:
        t = Training(seq_length=2048, global_batch_size=8, precision=precision)
        return step_times(SMALL, t, par, gpu, Efficiency())

    fp8, bf16 = times("fp8"), times("bf16")
    assert (fp8.head_forward_s, fp8.head_backward_s) == (bf16.head_forward_s,
                                                          bf16.head_backward_s)  # fmt: skip
    assert fp8.forward_s_per_layer < bf16.forward_s_per_layer


@pytest.mark.parametrize(("precision", "skipped_gemm"), [("bf16", True), ("fp8", False)])
def test_pytorchs_early_stop_does_not_rerun_the_layers_last_gemm(
    precision: str, skipped_gemm: bool
) -> None:
    # PyTorch's non-reentrant checkpoint stops once every tensor the backward saved is
    # rebuilt. A 16-bit nn.Linear saves its input and weight before it multiplies, so the
    # MLP's down projection (b s x f @ f x h) and the residual after it are not re-run;
    # Transformer Engine's FP8 te.Linear saves after its GEMM, so only the residual is
    # skipped. On a roofline GPU (no tables, no SM count, no HBM bound) the GEMM takes
    # 2 b s f h / (peak x 0.7) and the residual (b s h FLOPs) its launch floor, 4 us.
    gpu = GpuSpec("GPU", {"bf16": 100e12, "fp8": 200e12}, 80 * 10**9)
    b, s, h, f = 8, 2048, 256, 1024
    par = Parallelism().with_gpus(1)

    def backward_s(early_stop: bool) -> float:
        t = Training(seq_length=s, micro_batch_size=b, global_batch_size=b,
                     precision=precision, recompute="full",
                     recompute_early_stop=early_stop)  # fmt: skip
        return step_times(SMALL, t, par, gpu, Efficiency()).backward_s_per_layer

    gemm_s = 2 * b * s * f * h / (100e12 * 0.7) if skipped_gemm else 0.0
    assert backward_s(False) - backward_s(True) == pytest.approx(gemm_s + 4e-6, rel=1e-9)


@pytest.mark.parametrize("sequence_parallel", [True, False])
def test_early_stop_recomputes_every_tensor_parallel_call_but_the_mlps_reduction(
    sequence_parallel: bool,
) -> None:
    # tp 2 on 2 GPUs, one micro-batch of b = 2 sequences of s = 64 tokens, h = 256, bf16.
    # Per layer the forward has 2 gathers and 2 reductions (sequence parallel: all-gather
    # and reduce-scatter; else 2 all-reduces), the backward as many; Megatron's full
    # recomputation issues the forward's again, PyTorch's early stop all but the MLP's
    # reduction (after the down projection, which it does not re-run).
    b, s, h, L = 2, 64, 256, 8
    act = b * s * h * 2
    par = Parallelism(tp=2, sequence_parallel=sequence_parallel)

    def calls(**kw: object) -> Counter[str]:
        t = Training(seq_length=s, micro_batch_size=b, global_batch_size=b, **kw)  # type: ignore[arg-type]
        return recorded(SMALL, t, par, 2)

    megatron = calls(recompute="full")
    torch = calls(recompute="full", recompute_early_stop=True)
    if sequence_parallel:
        assert megatron["allgather"] == torch["allgather"] == (2 + 2 + 2) * L * act
        assert megatron["reducescatter"] == (2 + 2 + 2) * L * act
        assert torch["reducescatter"] == (2 + 2 + 1) * L * act
    else:
        assert megatron["allreduce"] == (2 + 2 + 2) * L * act
        assert torch["allreduce"] == (2 + 2 + 1) * L * act


def test_early_stop_without_full_recomputation_is_one_line() -> None:
    with pytest.raises(ConfigError, match="recompute_early_stop applies to recompute"):
        Training(seq_length=64, recompute="selective", recompute_early_stop=True)


def _dgx_h100_tp8(par: Parallelism, times: StepTimes) -> tuple[float, float, float]:
    """The step of one micro-batch of the small model on one DGX H100 at TP 8 with those
    compute times, and the time `simcoll predict` gives one all-gather and one
    reduce-scatter of a layer's activations there."""
    from simcoll import load_topology  # noqa: PLC0415
    from simcoll.prediction import predict  # noqa: PLC0415

    g = load_topology(Path(__file__).resolve().parents[2] / "topologies/dgx-h100.toml")
    t = Training(seq_length=1024, global_batch_size=1)
    r = training_step(g, SMALL, t, par, times=times)
    act = 1024 * 256 * 2  # tokens x hidden x bf16
    gather = predict(g, "allgather", [act]).rows[0].time_s
    scatter = predict(g, "reducescatter", [act]).rows[0].time_s
    return r.metrics["time_s"], gather, scatter


def test_userbuffers_run_a_passs_calls_beside_all_of_its_compute() -> None:
    # Transformer Engine's overlap: each pass is max(its compute, its chain of calls), per
    # layer 2 all-gathers and 2 reduce-scatters in the forward and as many in the backward.
    n = 8  # layers
    times = StepTimes(3e-5, 6e-5, 0.0, 0.0, 0.0)
    step, ag, rs = _dgx_h100_tp8(Parallelism(tp=8, tp_comm_overlap=True), times)
    calls = 2 * n * (ag + rs)
    assert step == pytest.approx(max(n * 3e-5, calls) + max(n * 6e-5, calls), rel=1e-9)


def _async_tp_step_s(
    n: int,
    calls_s: tuple[float, float],
    whole_s: tuple[tuple[float, ...], tuple[float, ...]],
    split_s: tuple[tuple[float, ...], tuple[float, ...]],
    pass_s: tuple[float, float, float],
) -> float:
    """The hand count of the async TP tests below: ``n`` layers, the gather and the
    reduce-scatter's times (ag, rs), each site's whole GEMM (g, d) and as its row pieces
    run (gs, ds), the layer's forward, backward and each fused reduction's sum (f, b, r).
    A site takes gs / 8 + max(7 gs / 8, c); the rest of a pass is its compute less the
    whole GEMMs."""
    (ag, rs), (g, d), (gs, ds), (f, b, r) = calls_s, whole_s, split_s, pass_s

    def site(c: float, gemm_s: float) -> float:
        return gemm_s / 8 + max(7 * gemm_s / 8, c)

    forward = n * (site(ag, gs[0]) + site(rs, gs[1]) + site(ag, gs[2]) + site(rs, gs[3])
                   + f - sum(g) + 2 * r)  # fmt: skip
    backward = n * (site(ag, ds[1]) + site(ag, ds[3]) + b - d[1] - d[3] + 2 * rs)
    return forward + backward


def test_async_tp_hides_each_call_behind_its_own_gemms_only() -> None:
    # PyTorch's async TP. Per layer, forward: the gather beside the QKV GEMM (g1), the
    # reduction beside the attention's output projection (g2), the MLP's gather beside its
    # up projection (g3) and reduction beside its down projection (g4); the rest of the
    # layer's compute alone. Backward (no recomputation): the gathers (gradients of the
    # reductions) beside the data gradients of g2 and g4 (d2, d4); the two reductions (of
    # the QKV and up projections' summed input gradients) exposed. So with F and B a
    # layer's forward and backward and n layers, and each site's GEMM run in tp = 8
    # pieces of which one has no copy beside it, site(c, g) = g / 8 + max(7 g / 8, c):
    #   forward  n (site(ag, g1) + site(rs, g2) + site(ag, g3) + site(rs, g4) + F - sum g
    #               + 2 r)  (r: each fused reduce-scatter's sum of its partials)
    #   backward n (site(ag, d2) + site(ag, d4) + B - d2 - d4 + 2 rs)
    # The GEMM times straddle the calls: g1 and d2 shorter, the others longer.
    n, ag_guess = 8, 14e-6  # about what predict gives: 14.3 us
    g = (0.25 * ag_guess, 3 * ag_guess, 4 * ag_guess, 5 * ag_guess)
    d = (0.0, 0.5 * ag_guess, 0.0, 6 * ag_guess)
    f, b = sum(g) + 1e-5, sum(d) + 2e-5
    r = 1e-6
    times = StepTimes(f, b, 0.0, 0.0, 0.0, tp_site_forward_s=g, tp_site_dgrad_s=d,
                      tp_site_recompute_s=(0.0,) * 4, tp_reduce_s=r)  # fmt: skip
    par = Parallelism(tp=8, tp_comm_overlap=True, tp_comm_overlap_impl="async_tp")
    step, ag, rs = _dgx_h100_tp8(par, times)
    assert 7 * g[0] / 8 < ag < 7 * g[2] / 8  # as intended: the GEMMs straddle the calls
    assert 7 * g[0] / 8 < rs < 7 * g[1] / 8
    assert 7 * d[1] / 8 < ag < 7 * d[3] / 8
    expected = _async_tp_step_s(n, (ag, rs), (g, d), (g, d), (f, b, r))
    assert step == pytest.approx(expected, rel=1e-9)
    # without sequence parallelism nothing fuses: the all-reduces run after the compute
    plain = replace(par, sequence_parallel=False)
    exposed = replace(plain, tp_comm_overlap=False)
    assert _dgx_h100_tp8(plain, times)[0] == _dgx_h100_tp8(exposed, times)[0]


def test_async_tp_sites_take_their_gemms_as_the_fused_ops_row_pieces_run_them() -> None:
    # As above, with each fused GEMM slower in its tp row pieces (gs, ds: 1.25 and 1.5
    # times the whole GEMM's g, d): a site takes gs / 8 + max(7 gs / 8, c), and the rest
    # of the pass is still its compute less the whole GEMMs (F - sum g), so the pass
    # grows by what the pieces lose even where every call hides.
    n, ag_guess = 8, 14e-6
    g = (0.25 * ag_guess, 3 * ag_guess, 4 * ag_guess, 5 * ag_guess)
    d = (0.0, 0.5 * ag_guess, 0.0, 6 * ag_guess)
    gs, ds = tuple(1.25 * x for x in g), tuple(1.5 * x for x in d)
    f, b, r = sum(g) + 1e-5, sum(d) + 2e-5, 1e-6
    times = StepTimes(f, b, 0.0, 0.0, 0.0, tp_site_forward_s=g, tp_site_dgrad_s=d,
                      tp_site_recompute_s=(0.0,) * 4, tp_site_forward_split_s=gs,
                      tp_site_dgrad_split_s=ds, tp_site_recompute_split_s=(0.0,) * 4,
                      tp_reduce_s=r)  # fmt: skip
    par = Parallelism(tp=8, tp_comm_overlap=True, tp_comm_overlap_impl="async_tp")
    step, ag, rs = _dgx_h100_tp8(par, times)
    expected = _async_tp_step_s(n, (ag, rs), (g, d), (gs, ds), (f, b, r))
    assert step == pytest.approx(expected, rel=1e-9)


def test_dtensors_sequence_sharding_copies_the_activations_at_each_call() -> None:
    # torchtitan shards [b, s, h] on dim 1: each all-gather is followed, and each
    # reduce-scatter preceded, by torch.cat's copy of the whole tensor, read and written:
    # 2 x b s h x 2 bytes at the HBM bandwidth x 0.8. b = 1, s = 65,536, h = 256 on a GPU
    # of 2 TB/s: 67,108,864 B / 1.6e12 B/s = 41.9 us. Megatron's [s, b, h] copies nothing.
    gpu = GpuSpec("X", {"bf16": 100e12}, 80 * 10**9, 2e12)
    t = Training(seq_length=65536, global_batch_size=1)
    torchtitan = Parallelism(tp=8, sequence_parallel_dim=1).with_gpus(8)
    assert step_times(SMALL, t, torchtitan, gpu, Efficiency()).tp_copy_s == pytest.approx(
        2 * 65536 * 256 * 2 / (2e12 * 0.8), rel=1e-12
    )
    megatron = Parallelism(tp=8).with_gpus(8)
    assert step_times(SMALL, t, megatron, gpu, Efficiency()).tp_copy_s == 0.0
    # in a step: per layer 2 gathers and 2 reduce-scatters a pass, each with its copy
    copy_s = 5e-6
    times = StepTimes(3e-5, 6e-5, 0.0, 0.0, 0.0)
    plain = _dgx_h100_tp8(Parallelism(tp=8), times)[0]
    copied = _dgx_h100_tp8(torchtitan, replace(times, tp_copy_s=copy_s))[0]
    assert copied - plain == pytest.approx(2 * 8 * 4 * copy_s, rel=1e-9)


def test_float8_tensor_parallelism_gathers_one_byte_an_element() -> None:
    # torchao's Float8ColwiseParallel: under fp8 the gathers move half the bytes (and
    # their copies half the bytes); the reduce-scatters stay 16-bit.
    from simcoll import load_topology  # noqa: PLC0415
    from simcoll.prediction import predict  # noqa: PLC0415

    g = load_topology(Path(__file__).resolve().parents[2] / "topologies/dgx-h100.toml")
    t = Training(seq_length=1024, global_batch_size=1, precision="fp8")
    zero = StepTimes(0.0, 0.0, 0.0, 0.0, 0.0, tp_copy_s=1e-5)
    par = Parallelism(tp=8, sequence_parallel_dim=1, tp_fp8_all_gather=True)
    step = training_step(g, SMALL, t, par, times=zero).metrics["time_s"]
    act = 1024 * 256 * 2
    gather = predict(g, "allgather", [act // 2]).rows[0].time_s
    scatter = predict(g, "reducescatter", [act]).rows[0].time_s
    per_layer_pass = 2 * (gather + 0.5e-5) + 2 * (scatter + 1e-5)
    assert step == pytest.approx(2 * 8 * per_layer_pass, rel=1e-9)


def test_async_tp_sums_the_partials_it_pulled_at_the_hbm_bandwidth() -> None:
    # _fused_matmul_reduce_scatter_impl ends in one reduction over the tp stacked
    # partials: b s h x 2 bytes read and 1/tp of it written, at 2 TB/s x 0.8. b = 1,
    # s = 65,536, h = 256, tp 8: 33,554,432 x 9/8 B / 1.6e12 B/s = 23.6 us.
    gpu = GpuSpec("X", {"bf16": 100e12}, 80 * 10**9, 2e12)
    t = Training(seq_length=65536, global_batch_size=1)
    par = Parallelism(tp=8, tp_comm_overlap=True, tp_comm_overlap_impl="async_tp")
    assert step_times(SMALL, t, par.with_gpus(8), gpu, Efficiency()).tp_reduce_s == (
        pytest.approx(65536 * 256 * 2 * 9 / 8 / (2e12 * 0.8), rel=1e-12)
    )
    userbuffers = replace(par, tp_comm_overlap_impl="userbuffers").with_gpus(8)
    assert step_times(SMALL, t, userbuffers, gpu, Efficiency()).tp_reduce_s == 0.0


@pytest.mark.parametrize(
    ("recompute", "early_stop"),
    [("none", False), ("full", False), ("full", True), ("sac_op", True), ("sac_layer", True)],
)
def test_async_tp_issues_the_calls_the_unfused_step_issues(
    recompute: str, early_stop: bool
) -> None:
    # Fusing moves calls beside GEMMs; it neither adds nor drops one: per kind, as many
    # calls as without overlap, under every recomputation (tp 2 on 2 GPUs, 8 layers).
    t = Training(seq_length=64, micro_batch_size=2, global_batch_size=2, recompute=recompute,
                 recompute_early_stop=early_stop)  # fmt: skip
    sites = (1e-5,) * 4
    times = replace(TIMES, tp_site_forward_s=sites, tp_site_dgrad_s=sites,
                    tp_site_recompute_s=sites)  # fmt: skip

    def calls(par: Parallelism) -> Counter[str]:
        with recording_calls() as made:
            training_step(free_links(2), SMALL, t, par, times=times, calibration=None,
                          protocol=None)  # fmt: skip
        return Counter(c.collective for c in made if c.collective != "compute")

    fused = Parallelism(tp=2, tp_comm_overlap=True, tp_comm_overlap_impl="async_tp")
    assert calls(fused) == calls(Parallelism(tp=2))


def test_async_tp_on_given_times_without_its_gemms_is_one_line() -> None:
    par = Parallelism(tp=2, tp_comm_overlap=True, tp_comm_overlap_impl="async_tp")
    with pytest.raises(ConfigError, match=r"^parallelism: tp_comm_overlap_impl async_tp needs"):
        training_step(free_links(2), SMALL, Training(seq_length=64, global_batch_size=1), par,
                      times=TIMES)  # fmt: skip


@pytest.mark.parametrize(
    "base",
    [
        Parallelism(tp=2, cp=2),
        Parallelism(tp=2, pp=2),
        Parallelism(tp=2, cp=2, data_parallel="fsdp"),
    ],
)
def test_async_tp_is_between_userbuffers_and_no_overlap(base: Parallelism) -> None:
    # Hiding each call behind its own GEMMs hides less than hiding the pass's calls behind
    # all of its compute, and more than hiding nothing, beside a context-parallel ring and
    # a pipeline too (the ring runs beside the attention, before the fused sites: it
    # once ran beside the sites' calls and shared their links, slower than no overlap).
    g = switch_star(8, link_bandwidth_bytes_per_s=50e9, link_latency_s=1e-6)
    t = Training(seq_length=4096, micro_batch_size=2, global_batch_size=4, recompute="full")
    sites = (1e-5,) * 4
    times = StepTimes(1e-4, 2e-4, 0.0, 0.0, 0.0, tp_site_forward_s=sites,
                      tp_site_dgrad_s=sites, tp_site_recompute_s=sites)  # fmt: skip

    def step_s(par: Parallelism) -> float:
        r = training_step(g, SMALL, t, par, times=times, calibration=None, protocol=None)
        return r.metrics["time_s"]

    userbuffers = step_s(replace(base, tp_comm_overlap=True))
    fused = step_s(replace(base, tp_comm_overlap=True, tp_comm_overlap_impl="async_tp"))
    assert userbuffers < fused < step_s(base)


def test_step_times_find_every_gemm_async_tp_fuses_a_call_into() -> None:
    # TP_SITES names layer_ops' GEMMs: a dense layer has the four (QKV, attention out, MLP
    # up and down), a mixture of experts the attention's two. Each site's forward GEMM is
    # part of the layer's forward, so the four together are less than it (the attention
    # and norms are the rest); a data gradient is the same FLOPs as its forward GEMM.
    gpu = GpuSpec("X", {"bf16": 100e12}, 80 * 10**9, 2e12)
    t = Training(seq_length=2048, global_batch_size=1)
    par = Parallelism(tp=2).with_gpus(2)
    dense = step_times(SMALL, t, par, gpu, Efficiency())
    assert len(dense.tp_site_forward_s) == len(dense.tp_site_dgrad_s) == 4
    assert all(s > 0 for s in dense.tp_site_forward_s)
    assert sum(dense.tp_site_forward_s) < dense.forward_s_per_layer
    assert dense.tp_site_dgrad_s == pytest.approx(dense.tp_site_forward_s, rel=1e-12)
    moe = Transformer("moe", n_layers=2, hidden_size=256, ffn_hidden_size=512, n_heads=8,
                      vocab_size=1000, n_experts=4, top_k=2)  # fmt: skip
    assert len(step_times(moe, t, par, gpu, Efficiency()).tp_site_forward_s) == 2
