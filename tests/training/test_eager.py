"""PyTorch eager's elementwise modules (``Training.eager_ops``): the bytes torchtitan's
RMSNorm, rotary embedding and ``silu(w1 x) * w3 x`` move op by op, counted here from the
ops they run (``models/norms.py``, ``models/llama/model.py``)."""

from __future__ import annotations

import pytest

from simcoll.core.errors import ConfigError
from simcoll.training import Parallelism, Training, Transformer
from simcoll.training.flops import layer_ops

M = Transformer("llama-like", n_layers=4, hidden_size=512, ffn_hidden_size=1536, n_heads=8,
                n_kv_heads=2, vocab_size=1000)  # fmt: skip
B, S = 2, 1024


def layer_bytes(eager: tuple[str, ...], par: Parallelism) -> float:
    t = Training(seq_length=S, micro_batch_size=B, eager_ops=eager)
    return sum(o.memory_bytes for o in layer_ops(M, t, par))


@pytest.mark.parametrize("tp", [1, 2])
def test_eager_modules_move_the_bytes_of_their_ops(tp: int) -> None:
    # RMSNorm: x.float() 2 + 4, pow 4 + 4, mean 4, x * rsqrt 4 + 4, type_as 4 + 2,
    # * weight 2 + 2 = 36 bytes an element where a fused kernel moves 4: 32 more, twice a
    # layer, on the s b / tp tokens sequence parallelism leaves each GPU. Rotary on q
    # (h / tp) and k (kv / tp): float() 2 + 4, the complex product 4 + 4, type_as 4 + 2 =
    # 20 bytes an element, uncharged when fused. silu 2 + 2 then the product 4 + 2 where
    # one kernel reads 4 and writes 2: 4 more an FFN element (f / tp).
    h, kv, f, tokens = 512, 128, 1536, B * S
    par = Parallelism(tp=tp)
    extra = {
        "norm": 2 * 32 * tokens / tp * h,
        "rotary": 20 * tokens * (h + kv) / tp,
        "activation": 4 * tokens * f / tp,
    }
    fused = layer_bytes((), par)
    for name, more in extra.items():
        assert layer_bytes((name,), par) - fused == pytest.approx(more, rel=1e-12)
    assert layer_bytes(("norm", "rotary", "activation"), par) - fused == pytest.approx(
        sum(extra.values()), rel=1e-12)  # fmt: skip


def test_eager_ops_names_are_checked() -> None:
    with pytest.raises(ConfigError, match="eager_ops must list some of norm, rotary, "
                       r"activation once each, got \['norm', 'softmax'\]"):  # fmt: skip
        Training(seq_length=64, eager_ops=("norm", "softmax"))


def test_eager_ops_must_be_a_list() -> None:
    with pytest.raises(ConfigError, match="eager_ops must be a list of some of norm, rotary, "
                       "activation, got 5"):  # fmt: skip
        Training(seq_length=64, eager_ops=5)  # type: ignore[arg-type]
