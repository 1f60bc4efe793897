"""A Hugging Face config.json read as simcoll's Transformer: the released configs of Llama 3
8B, Mixtral 8x7B, GPT-2 small and MPT-7B give their shapes and stated parameter counts,
and a bad file is refused in one line naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simcoll.core.errors import ConfigError
from simcoll.training.flops import n_params
from simcoll.training.hf_config import SUPPORTED_MODEL_TYPES, read_hf_config

# The keys of each released config.json that matter, beside some that do not.
LLAMA3_8B = {"_name_or_path": "meta-llama/Meta-Llama-3-8B",
             "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
             "intermediate_size": 14336, "max_position_embeddings": 8192,
             "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": None,
             "rope_theta": 500000.0, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16", "vocab_size": 128256}  # fmt: skip
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "hidden_act": "silu",
                "hidden_size": 4096, "intermediate_size": 14336, "model_type": "mixtral",
                "num_attention_heads": 32, "num_experts_per_tok": 2,
                "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                "router_aux_loss_coef": 0.02, "sliding_window": None,
                "tie_word_embeddings": False, "vocab_size": 32000}  # fmt: skip
GPT2 = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": None,
        "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}  # fmt: skip
MPT_7B = {"architectures": ["MPTForCausalLM"],
          "attn_config": {"alibi": True, "attn_impl": "torch",
                          "attn_type": "multihead_attention", "clip_qkv": None},
          "d_model": 4096, "expansion_ratio": 4, "learned_pos_emb": True, "max_seq_len": 2048,
          "model_type": "mpt", "n_heads": 32, "n_layers": 32, "no_bias": True,
          "norm_type": "low_precision_layernorm", "vocab_size": 50432}  # fmt: skip


def write(folder: Path, data: Any, name: str = "config.json") -> Path:
    path = folder / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def shape(m: Any) -> tuple[Any, ...]:
    return (m.n_layers, m.hidden_size, m.ffn_hidden_size, m.n_heads, m.n_kv_heads,
            m.vocab_size, m.gated_mlp, m.n_experts, m.tied_embeddings)  # fmt: skip


def test_llama3_8b_reads_as_meta_describes_it_and_makes_its_8_03b_parameters(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, LLAMA3_8B)
    m = read_hf_config(path)
    assert (m.name, m.source) == ("meta-llama/Meta-Llama-3-8B", str(path))
    assert shape(m) == (32, 4096, 14336, 32, 8, 128256, True, 0, False)
    # by hand: input embedding and untied output layer, V h each; per layer q and o h x h,
    # k and v h x (8 heads x 128), three h x f MLP matrices, two norms; a final norm
    V, h, f, L, kv = 128256, 4096, 14336, 32, 8 * (4096 // 32)
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    expected = 2 * V * h + L * per_layer + h
    assert n_params(m) == expected == 8_030_261_248
    assert abs(expected / 8.03e9 - 1) < 0.005  # Meta's stated 8.03B


def test_mixtral_8x7b_is_8_experts_top_2_and_makes_its_46_7b_parameters(
    tmp_path: Path,
) -> None:
    m = read_hf_config(write(tmp_path, MIXTRAL_8X7B))
    assert m.name == "config"  # no _name_or_path: the file's stem
    assert shape(m) == (32, 4096, 14336, 32, 8, 32000, True, 8, False)
    assert (m.top_k, m.capacity_factor) == (2, 1.0)
    # by hand: per layer the attention, 8 experts of 3 h x f, a router of h x 8, two norms
    V, h, f, L, kv, E = 32000, 4096, 14336, 32, 1024, 8
    per_layer = 2 * h * h + 2 * h * kv + E * 3 * h * f + h * E + 2 * h
    expected = 2 * V * h + L * per_layer + h
    assert n_params(m) == expected
    assert abs(expected / 46.7e9 - 1) < 0.005  # Mistral AI's stated 46.7B


@pytest.mark.parametrize("n_inner", ["null", "absent"])
def test_gpt2_small_has_a_4h_plain_mlp_and_tied_embeddings(tmp_path: Path, n_inner: str) -> None:
    data = dict(GPT2) if n_inner == "null" else {k: v for k, v in GPT2.items() if k != "n_inner"}
    m = read_hf_config(write(tmp_path, data))
    assert shape(m) == (12, 768, 4 * 768, 12, 12, 50257, False, 0, True)
    # by hand: the tied embedding once; per layer 4 h^2 of attention, 2 x h x 4h of MLP and
    # two norms; a final norm. GPT-2 also learns 1,024 position embeddings, biases (3h + h
    # + 4h + h per layer) and the norms' shifts, which simcoll does not count: with them
    # the count is GPT-2's 124,439,808.
    V, h, L, positions = 50257, 768, 12, 1024
    expected = V * h + L * (4 * h * h + 2 * h * 4 * h + 2 * h) + h
    assert n_params(m) == expected
    assert expected + positions * h + L * 9 * h + L * 2 * h + h == 124_439_808
    assert abs(expected / 124.4e6 - 1) < 0.01


def test_mpt_7b_has_expansion_ratio_x_d_model_and_tied_embeddings(tmp_path: Path) -> None:
    m = read_hf_config(write(tmp_path, MPT_7B))
    assert shape(m) == (32, 4096, 4 * 4096, 32, 32, 50432, False, 0, True)
    # no biases and ALiBi positions: simcoll's count is MPT-7B's whole count (6.7B)
    V, h, L = 50432, 4096, 32
    expected = V * h + L * (4 * h * h + 2 * h * 4 * h + 2 * h) + h
    assert n_params(m) == expected
    assert abs(expected / 6.7e9 - 1) < 0.01


def test_mpt_attention_types_give_their_kv_heads(tmp_path: Path) -> None:
    gqa = {**MPT_7B, "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 8}}
    mqa = {**MPT_7B, "attn_config": {"attn_type": "multiquery_attention"}}
    glu = {**MPT_7B, "ffn_config": {"ffn_type": "mptglu", "ffn_hidden_size": 10944}}
    assert read_hf_config(write(tmp_path, gqa, "gqa.json")).n_kv_heads == 8
    assert read_hf_config(write(tmp_path, mqa, "mqa.json")).n_kv_heads == 1
    m = read_hf_config(write(tmp_path, glu, "glu.json"))
    assert (m.gated_mlp, m.ffn_hidden_size) == (True, 10944)


def test_falcon_7b_is_multi_query_and_falcon_40b_grouped(tmp_path: Path) -> None:
    falcon_7b = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
                 "num_hidden_layers": 32, "multi_query": True,
                 "new_decoder_architecture": False, "vocab_size": 65024}  # fmt: skip
    m = read_hf_config(write(tmp_path, falcon_7b, "falcon-7b.json"))
    assert shape(m) == (32, 4544, 4 * 4544, 71, 1, 65024, False, 0, True)
    falcon_40b = {**falcon_7b, "hidden_size": 8192, "num_attention_heads": 128,
                  "num_hidden_layers": 60, "num_kv_heads": 8,
                  "new_decoder_architecture": True}  # fmt: skip
    m = read_hf_config(write(tmp_path, falcon_40b, "falcon-40b.json"))
    assert (m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_hidden_size) == (60, 128, 8, 4 * 8192)


def test_gpt_neox_is_plain_and_untied_and_opt_plain_and_tied(tmp_path: Path) -> None:
    pythia = {"model_type": "gpt_neox", "hidden_size": 512, "intermediate_size": 2048,
              "num_attention_heads": 8, "num_hidden_layers": 6, "vocab_size": 50304}  # fmt: skip
    m = read_hf_config(write(tmp_path, pythia, "pythia.json"))
    assert shape(m) == (6, 512, 2048, 8, 8, 50304, False, 0, False)
    opt = {"model_type": "opt", "hidden_size": 768, "ffn_dim": 3072,
           "num_attention_heads": 12, "num_hidden_layers": 12, "vocab_size": 50272,
           "word_embed_proj_dim": 768}  # fmt: skip
    m = read_hf_config(write(tmp_path, opt, "opt.json"))
    assert shape(m) == (12, 768, 3072, 12, 12, 50272, False, 0, True)


def test_gemma_ties_by_default_and_an_agreeing_head_dim_is_read(tmp_path: Path) -> None:
    # Gemma 2B: 8 heads of 256 = 2,048, one KV head
    gemma_2b = {"model_type": "gemma", "hidden_size": 2048, "head_dim": 256,
                "intermediate_size": 16384, "num_attention_heads": 8, "num_hidden_layers": 18,
                "num_key_value_heads": 1, "vocab_size": 256000}  # fmt: skip
    m = read_hf_config(write(tmp_path, gemma_2b))
    assert shape(m) == (18, 2048, 16384, 8, 1, 256000, True, 0, True)
    assert m.head_dim == 256


def test_an_unknown_model_type_with_the_llama_keys_is_read_as_llama(tmp_path: Path) -> None:
    data = {**LLAMA3_8B, "model_type": "my_llama"}
    del data["tie_word_embeddings"]  # transformers' PretrainedConfig default: tied
    m = read_hf_config(write(tmp_path, data))
    assert shape(m) == (32, 4096, 14336, 32, 8, 128256, True, 0, True)


def test_a_moe_with_moe_intermediate_size_uses_it_per_expert(tmp_path: Path) -> None:
    olmoe = {"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024,
             "num_attention_heads": 16, "num_hidden_layers": 16, "num_experts": 64,
             "num_experts_per_tok": 8, "vocab_size": 50304}  # fmt: skip
    m = read_hf_config(write(tmp_path, olmoe, "olmoe.json"))
    assert (m.n_experts, m.top_k, m.ffn_hidden_size) == (64, 8, 1024)
    qwen3_moe = {**olmoe, "model_type": "qwen3_moe", "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_experts": 128,
                 "decoder_sparse_step": 1, "mlp_only_layers": []}  # fmt: skip
    m = read_hf_config(write(tmp_path, qwen3_moe, "qwen3_moe.json"))
    assert (m.n_experts, m.top_k, m.ffn_hidden_size) == (128, 8, 768)


# -- refused, in one line naming the file and the key ---------------------------------------

LLAMA_STYLE = ", ".join(("num_hidden_layers", "hidden_size", "intermediate_size",
                         "num_attention_heads", "vocab_size"))  # fmt: skip
BAD = [
    ("missing key", {k: v for k, v in LLAMA3_8B.items() if k != "num_hidden_layers"},
     "num_hidden_layers: missing"),
    ("null required key", {**LLAMA3_8B, "vocab_size": None}, "vocab_size: missing"),
    ("string for a number", {**LLAMA3_8B, "hidden_size": "4096"},
     'hidden_size: must be an integer >= 1, got "4096"'),
    ("true for a number", {**GPT2, "n_layer": True}, "n_layer: must be an integer >= 1, got true"),
    ("float for a number", {**GPT2, "n_head": 12.5}, "n_head: must be an integer >= 1, got 12.5"),
    ("number for a flag", {**LLAMA3_8B, "tie_word_embeddings": 0},
     "tie_word_embeddings: must be true or false, got 0"),
    ("no model_type", {k: v for k, v in GPT2.items() if k != "model_type"},
     "model_type: missing"),
    ("unknown model_type", {"model_type": "t5", "d_model": 512, "num_layers": 6},
     f'model_type: "t5" is not one simcoll reads ({", ".join(SUPPORTED_MODEL_TYPES)}; any '
     f"other needs the llama-style keys {LLAMA_STYLE})"),
    ("Gemma 7B's head_dim", {"model_type": "gemma", "hidden_size": 3072, "head_dim": 256,
                             "intermediate_size": 24576, "num_attention_heads": 16,
                             "num_hidden_layers": 28, "vocab_size": 256000},
     "head_dim: 16 heads of 256 make 4096, not hidden_size 3072; simcoll assumes "
     "hidden_size = num_attention_heads x head_dim"),
    ("a shared expert", {**MIXTRAL_8X7B, "model_type": "qwen2_moe", "num_experts": 60,
                         "shared_expert_intermediate_size": 5632},
     "shared_expert_intermediate_size: 5632: simcoll models no shared expert (every MLP is "
     "top-k routed experts)"),
    ("a dense first layer", {**MIXTRAL_8X7B, "model_type": "deepseek", "n_routed_experts": 64,
                             "first_k_dense_replace": 1},
     "first_k_dense_replace: 1: simcoll makes every layer's MLP a mixture of experts"),
    ("experts without top-k", {k: v for k, v in MIXTRAL_8X7B.items()
                               if k != "num_experts_per_tok"},
     "num_experts_per_tok: missing"),
    ("OPT-350m's projection", {"model_type": "opt", "hidden_size": 1024, "ffn_dim": 4096,
                               "num_attention_heads": 16, "num_hidden_layers": 24,
                               "vocab_size": 50272, "word_embed_proj_dim": 512},
     "word_embed_proj_dim: 512: differs from hidden_size 1024; simcoll models no embedding "
     "projection"),
    ("a fractional MLP width", {**MPT_7B, "expansion_ratio": 4.0001},
     "expansion_ratio: must be a number whose product with d_model 4096 is a whole number "
     ">= 1, got 4.0001"),
    ("an unknown MPT attention", {**MPT_7B, "attn_config": {"attn_type": "sliding"}},
     "attn_config.attn_type: 'sliding' is not multihead_attention, multiquery_attention or "
     "grouped_query_attention"),
    ("a nested key", {**MPT_7B, "attn_config": {"attn_type": "grouped_query_attention"}},
     "attn_config: kv_n_heads: missing"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])  # fmt: skip
def test_a_bad_config_is_refused_naming_the_file_and_key(
    tmp_path: Path, data: dict[str, Any], message: str
) -> None:
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        read_hf_config(path)
    assert str(info.value) == f"{path}: {message}"


def test_a_file_that_is_not_json_is_refused_naming_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{"model_type": "llama",\n  "hidden_size": 4096,,}')
    with pytest.raises(ConfigError) as info:
        read_hf_config(path)
    # the second comma of line 2 is its 22nd character
    column = len('  "hidden_size": 4096,') + 1
    assert str(info.value) == (
        f"{path}: line 2, column {column}: not JSON: Expecting property name enclosed in "
        "double quotes"
    )


@pytest.mark.parametrize(("text", "got"), [("[1, 2]", "a list"), ('"llama"', '"llama"')])
def test_json_that_is_not_an_object_is_refused(tmp_path: Path, text: str, got: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        read_hf_config(path)
    assert str(info.value) == f"{path}: must be a JSON object of the model's settings, got {got}"


def test_a_missing_file_and_a_shape_past_simcolls_caps_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_hf_config(tmp_path / "none.json")
    assert str(info.value) == f"{tmp_path / 'none.json'}: no such config file"
    path = write(tmp_path, {**LLAMA3_8B, "num_hidden_layers": 5000})
    with pytest.raises(ConfigError) as info:
        read_hf_config(path)
    assert str(info.value) == (
        f"{path}: model meta-llama/Meta-Llama-3-8B: n_layers must be at most 4096 (the most "
        "simcoll simulates), got 5000"
    )
