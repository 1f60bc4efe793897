"""A model's shape is checked against the caps of simcoll.core.limits as it is made, in one
line naming the field, before a step builds anything (issue 41)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simcoll.core.errors import ConfigError
from simcoll.training import Transformer, n_params, read_model_file

MODELS = Path(__file__).resolve().parents[2] / "models"
SHAPE = {"n_layers": 2, "hidden_size": 64, "ffn_hidden_size": 256, "n_heads": 1,
         "vocab_size": 100, "gated_mlp": False}  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "cap"),
    [
        ("n_layers", 4097, 4096),
        ("hidden_size", 2**20 + 1, 2**20),
        ("ffn_hidden_size", 2**20 + 1, 2**20),
        ("vocab_size", 2**24 + 1, 2**24),
        ("n_experts", 2**16 + 1, 2**16),
    ],
)
def test_a_shape_past_its_cap_is_refused_naming_the_field(field: str, value: int, cap: int) -> None:
    with pytest.raises(ConfigError) as info:
        Transformer("m", **{**SHAPE, field: value})
    assert str(info.value) == (
        f"model m: {field} must be at most {cap} (the most simcoll simulates), got {value}"
    )


def test_the_caps_leave_room_above_the_largest_shipped_model() -> None:
    # Llama 3 405B: 126 layers, hidden 16,384, FFN 53,248, vocabulary 128,256
    m, _, _ = read_model_file(MODELS / "llama3-405b.toml")
    assert (m.n_layers, m.hidden_size, m.vocab_size) == (126, 16384, 128256)
    assert Transformer("deep", **{**SHAPE, "n_layers": 4096}).n_layers == 4096


def test_a_shape_of_more_parameters_than_the_cap_is_refused() -> None:
    # 4,096 layers of width h = f = 2^20, one head (keys and values as wide as h), a plain
    # MLP, a vocabulary of 1 (embedding and output layer): per layer 4 h^2 of attention
    # and 2 h f of MLP, 2 norms of h; 4096 x 6 x 2^40 + 2 x 2^20 + 8193 x 2^20 = 2.7e16,
    # over 2^50 = 1.13e15.
    shape: dict[str, Any] = {**SHAPE, "n_layers": 4096, "hidden_size": 2**20,
                             "ffn_hidden_size": 2**20, "vocab_size": 1}  # fmt: skip
    params = 4096 * 6 * 2**40 + 2 * 2**20 + 8193 * 2**20
    with pytest.raises(ConfigError) as info:
        Transformer("wide", **shape)
    assert str(info.value) == (
        f"model wide: its shape makes {params:.3g} parameters, more than the 1.13e+15 "
        "(2^50) simcoll simulates; use fewer layers or experts, or a narrower model"
    )
    assert f"{params:.3g}" == "2.7e+16"
    smaller = Transformer("ok", **{**shape, "n_layers": 128})  # 8.4e14, under the cap
    assert n_params(smaller) == 128 * 6 * 2**40 + 2 * 2**20 + 257 * 2**20


def test_an_infinite_capacity_factor_is_refused() -> None:
    with pytest.raises(ConfigError, match="capacity_factor must be a finite number >= 1"):
        Transformer("moe", **SHAPE, n_experts=4, top_k=2, capacity_factor=float("inf"))


@pytest.mark.parametrize("n_layers", [50_000_000, 100_000_000_000])
def test_a_model_file_past_the_layer_cap_names_the_file_and_field(
    tmp_path: Path, n_layers: int
) -> None:
    # issue 41: 50,000,000 layers grew to 24.3 GB; 10^11 raised a MemoryError
    text = (MODELS / "llama3-405b.toml").read_text().replace("n_layers = 126",
                                                             f"n_layers = {n_layers}")  # fmt: skip
    path = tmp_path / "huge.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_model_file(path)
    assert str(info.value) == (
        f"{path}: model: n_layers must be at most 4096 (the most simcoll simulates), got {n_layers}"
    )
