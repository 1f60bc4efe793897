"""FLOPs, parameters and memory of the shipped models against published figures and the
formulas of their papers, each derived here by hand from the model's shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.training import (
    Parallelism,
    Training,
    memory_per_gpu,
    model_flops_per_token,
    n_params,
    read_model_file,
    zero_model_state_bytes,
)
from simcoll.training.memory import activation_bytes_per_layer, params_per_gpu

MODELS = Path(__file__).resolve().parents[2] / "models"

#: Published parameter counts (billions): GPT-3 (Brown et al. 2020, table 2.1), Llama 3
#: (Llama Team 2024, table 3; the released 8.03B, 70.6B, 405.9B), Mixtral 8x7B (Jiang et
#: al. 2024: 46.7B in all).
PUBLISHED_PARAMS_B = {
    "gpt3-175b": 175.0,
    "llama3-8b": 8.03,
    "llama3-70b": 70.6,
    "llama3-405b": 405.9,
    "mixtral-8x7b": 46.7,
    # Llama 2 (Touvron et al. 2023): the released checkpoints' counts
    "llama2-7b": 6.74,
    "llama2-13b": 13.0,
    "llama2-70b": 69.0,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS_B))
def test_every_shipped_model_has_its_published_parameter_count(name: str) -> None:
    model, _, _ = read_model_file(MODELS / f"{name}.toml")
    assert n_params(model) / 1e9 == pytest.approx(PUBLISHED_PARAMS_B[name], rel=0.005)


def test_every_model_file_is_tested() -> None:
    assert sorted(p.stem for p in MODELS.glob("*.toml")) == sorted(PUBLISHED_PARAMS_B)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS_B))
def test_flops_per_token_is_six_n_plus_the_attention_term(name: str) -> None:
    # Narayanan et al. 2021 / PaLM: 6 N + 12 L h s, N the active matmul parameters:
    # per layer q, k, v (k and v of n_kv_heads heads) and the output projection, the MLP
    # (3 matrices gated, 2 plain) for each of top_k experts, the router; the output layer.
    m, _training, _ = read_model_file(MODELS / f"{name}.toml")
    h, f, L, V, s = m.hidden_size, m.ffn_hidden_size, m.n_layers, m.vocab_size, 2048
    kv = m.n_kv_heads * (h // m.n_heads)
    mlp = (3 if m.gated_mlp else 2) * h * f
    experts = m.top_k if m.n_experts else 1
    n = L * (h * h + 2 * h * kv + h * h + experts * mlp + h * m.n_experts) + V * h
    assert model_flops_per_token(m, s) == 6 * n + 12 * L * h * s


def test_mixtral_active_parameters_are_its_published_thirteen_billion() -> None:
    # Jiang et al. 2024: "each token has access to 47B parameters, but only uses 13B
    # active parameters": the dense parts, two experts' MLPs, both embeddings.
    m, _, _ = read_model_file(MODELS / "mixtral-8x7b.toml")
    h = m.hidden_size
    per_expert = 3 * h * m.ffn_hidden_size
    active = n_params(m) - m.n_layers * (m.n_experts - m.top_k) * per_expert
    assert active / 1e9 == pytest.approx(12.9, rel=0.01)


@pytest.mark.parametrize(
    ("stage", "gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)]
)  # fmt: skip
def test_zero_model_states_are_the_papers_figure_one(stage: int, gb: float) -> None:
    # Rajbhandari et al. 2020, figure 1: 7.5B parameters, N_d = 64, K = 12.
    assert zero_model_state_bytes(7.5e9, zero_stage=stage, dp=64) / 1e9 == pytest.approx(
        gb, abs=0.05)  # fmt: skip


@pytest.mark.parametrize("data_parallel", ["ddp", "zero1", "zero2", "zero3"])
def test_one_stage_holds_the_whole_models_zero_state(data_parallel: str) -> None:
    # tp = pp = 1: a GPU holds every parameter, sharded over dp as ZeRO says.
    m, _, _ = read_model_file(MODELS / "llama3-8b.toml")
    p = Parallelism(data_parallel=data_parallel, dp=16)
    t = Training(seq_length=4096)
    mem = memory_per_gpu(m, t, p)
    stage = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}[data_parallel]
    expected = zero_model_state_bytes(n_params(m), zero_stage=stage, dp=16)
    assert mem.params_bytes + mem.gradients_bytes + mem.optimizer_bytes == pytest.approx(expected)


def test_activations_are_korthikanti_table_two_on_gpt3() -> None:
    # Korthikanti et al. 2022, table 2, with sequence parallelism: s b h (34 + 5 a s / h) / t
    # per layer; selective recomputation drops 5 a s / h; 1F1B's first stage holds L layers.
    m, _, _ = read_model_file(MODELS / "gpt3-175b.toml")
    s, b, h, a, t, L = 2048, 1, 12288, 96, 8, 96
    p = Parallelism(tp=t, pp=16, dp=8)
    none = Training(seq_length=s, micro_batch_size=b, flash_attention=False)
    assert activation_bytes_per_layer(m, none, p) == pytest.approx(
        s * b * h * (34 + 5 * a * s / h) / t
    )
    selective = Training(seq_length=s, micro_batch_size=b, recompute="selective")
    assert memory_per_gpu(m, selective, p).activations_bytes == pytest.approx(
        L * s * b * h * 34 / t
    )
    full = Training(seq_length=s, micro_batch_size=b, recompute="full")
    assert activation_bytes_per_layer(m, full, p) == pytest.approx(2 * s * b * h / t)


def test_the_first_stage_holds_its_layers_and_the_embedding() -> None:
    m, _, _ = read_model_file(MODELS / "gpt3-175b.toml")
    h, V = 12288, 50257
    dense, expert = params_per_gpu(m, Parallelism(tp=8, pp=16, dp=8))
    assert dense == pytest.approx(96 / 16 * (12 * h * h / 8 + 2 * h) + V * h / 8)
    assert expert == 0
