"""validation/training_torchtitan.py: torchtitan's FSDP2 runs on 64 A100, nothing fitted on
them, stay within what validation/README.md reports for each attention rule."""

from __future__ import annotations

from validation import training_torchtitan as script


def test_every_a100_row_is_simulated_with_its_checkpointing() -> None:
    rows = script.read_rows()
    assert [(r.model, script.RECOMPUTE[r.activation_checkpointing]) for r in rows] == [
        ("llama3-8b", "sac_layer"), ("llama3-8b", "sac_op"), ("llama3-70b", "full"),
        ("llama2-13b", "none"), ("llama2-13b", "sac_layer"), ("llama2-13b", "sac_op"),
        ("llama2-70b", "sac_op"), ("llama2-70b", "full")]  # fmt: skip


def test_llama2_13b_without_checkpointing_is_predicted_within_3_percent() -> None:
    # measured 2,162 tokens/s/GPU (torchtitan, never fitted); the rule the A100 files used
    # before, the H100's attention scaled by the peaks, is slower than FlashAttention-2's
    # own A100 figures (about half), so its step is slower and further off
    (row, *_) = [r for r in script.read_rows() if r.model == "llama2-13b"]
    assert row.activation_checkpointing == "no"
    shipped, scaled = script.simulate(row), script.simulate(row, "")
    assert abs(shipped / row.tokens_per_s_per_gpu - 1) < 0.03
    assert scaled < shipped < row.tokens_per_s_per_gpu * 1.03


def test_llama2_13b_per_op_checkpointing_costs_what_the_run_measured() -> None:
    # measured: 2,162 tokens/s/GPU without checkpointing, 1,904 with per-op SAC (-11.9 %);
    # the re-run matmuls (wk, wo, w3) and elementwise ops must cost about as much
    rows = {r.activation_checkpointing: r for r in script.read_rows() if r.model == "llama2-13b"}
    plain, op = script.simulate(rows["no"]), script.simulate(rows["selective op"])
    assert abs(op / rows["selective op"].tokens_per_s_per_gpu - 1) < 0.03
    measured_cost = 1 - rows["selective op"].tokens_per_s_per_gpu / rows["no"].tokens_per_s_per_gpu
    assert abs((1 - op / plain) - measured_cost) < 0.05
