"""A Hugging Face ``config.json`` read as a :class:`~simcoll.training.spec.Transformer`.

The families users bring, by ``model_type``. The shape's keys named first must be there
(a missing or null one is refused, whatever default ``transformers`` has); an optional key
left out or null takes the value ``transformers`` gives it (:data:`TIED_BY_DEFAULT` for
``tie_word_embeddings``):

``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``gemma``, ``gemma2`` (llama-style)
    ``num_hidden_layers``, ``hidden_size``, ``intermediate_size``,
    ``num_attention_heads``, ``vocab_size``; ``num_key_value_heads`` (absent or null: as
    many as the heads); a gated MLP (SwiGLU, Gemma's GeGLU).
``mixtral``, ``qwen2_moe``, ``qwen3_moe``, ``olmoe``, ``deepseek`` (llama-style experts)
    as above, and ``num_local_experts``, ``num_experts`` or ``n_routed_experts`` experts,
    ``num_experts_per_tok`` of them per token, each ``moe_intermediate_size`` wide (else
    ``intermediate_size``). A shared expert, dense layers among the expert ones and
    multi-head latent attention (``kv_lora_rank``) are refused: simcoll models none.
``gpt2``
    ``n_layer``, ``n_embd``, ``n_head``, ``vocab_size``, ``n_inner`` (null:
    ``4 x n_embd``); a plain MLP; tied embeddings.
``gpt_neox``
    the llama-style keys; a plain MLP; untied unless ``tie_word_embeddings``.
``opt``
    ``num_hidden_layers``, ``hidden_size``, ``ffn_dim``, ``num_attention_heads``,
    ``vocab_size``; a plain MLP; tied. A ``word_embed_proj_dim`` other than
    ``hidden_size`` (OPT-350m's projection) is refused.
``falcon``
    ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``vocab_size``,
    ``ffn_hidden_size`` (null: ``4 x hidden_size``); 1 KV head where ``multi_query`` (the
    default) without ``new_decoder_architecture``, else ``num_kv_heads`` (null: as many as
    the heads); a plain MLP; tied.
``mpt``
    ``n_layers``, ``d_model``, ``n_heads``, ``vocab_size``, ``expansion_ratio x d_model``
    (``ffn_config.ffn_hidden_size`` where given); ``attn_config.attn_type``
    ``multiquery_attention`` has 1 KV head, ``grouped_query_attention``
    ``attn_config.kv_n_heads``; a plain MLP (``ffn_config.ffn_type`` ``mptglu``: gated);
    tied.

Any other ``model_type`` whose file has the five llama-style keys is read as llama-style
(a gated MLP; tied unless ``tie_word_embeddings`` says otherwise, ``transformers``'
default); without them it is refused.

simcoll takes each head to be ``hidden_size / n_heads`` wide; a file whose ``head_dim``
disagrees (Gemma 7B: 16 heads of 256 in a width of 3,072) is refused rather than
simulated with attention matrices of another size. Biases, learned position embeddings
and norms' shifts are not counted, here as everywhere in simcoll.

>>> tiny = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
...         "intermediate_size": 172, "num_attention_heads": 4, "num_key_value_heads": 2,
...         "vocab_size": 1000, "tie_word_embeddings": False}
>>> m = transformer_from_hf(tiny, "tiny/config.json")
>>> m.name, m.n_layers, m.ffn_hidden_size, m.n_kv_heads, m.gated_mlp, m.tied_embeddings
('config', 2, 172, 2, True, False)
>>> transformer_from_hf({**tiny, "head_dim": 32}, "tiny/config.json")
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: tiny/config.json: head_dim: 4 heads of 32 make 128, not \
hidden_size 64; simcoll assumes hidden_size = num_attention_heads x head_dim
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from simcoll.core.errors import ConfigError
from simcoll.core.files import TOO_DEEP, check_nesting, read_input_text
from simcoll.training.spec import Transformer

__all__ = ["SUPPORTED_MODEL_TYPES", "TIED_BY_DEFAULT", "read_hf_config", "transformer_from_hf"]

#: The llama-style keys: with them, a ``model_type`` simcoll does not know is read as llama.
LLAMA_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size",
              "num_attention_heads", "vocab_size")  # fmt: skip
#: ``tie_word_embeddings`` where a file leaves it out: each ``transformers`` config class's
#: default (``PretrainedConfig``'s, true, for a ``model_type`` not listed).
TIED_BY_DEFAULT = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False,
                   "gemma": True, "gemma2": True, "mixtral": False, "qwen2_moe": False,
                   "qwen3_moe": False, "olmoe": False, "deepseek": False, "gpt2": True,
                   "gpt_neox": False, "opt": True, "falcon": True, "mpt": True}  # fmt: skip
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_MISSING = object()


def _shown(value: object) -> str:
    """A JSON value as the file spells it (a table or list by its kind only)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return json.dumps(value)


def _value(data: Mapping[str, Any], key: str, source: str, default: Any) -> Any:
    """``data[key]``; an absent or null key is ``default``, refused where there is none."""
    value = data.get(key)
    if value is None:
        if default is _MISSING:
            raise ConfigError("missing", source=source, field=key)
        return default
    return value


def _integer(
    data: Mapping[str, Any], key: str, source: str, default: Any = _MISSING, minimum: int = 1
) -> int:
    """A whole number of at least ``minimum`` (true, 4096.0 or "4096" are refused).

    >>> _integer({"n_head": "12"}, "n_head", "gpt2.json")
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: gpt2.json: n_head: must be an integer >= 1, got "12"
    """
    value = _value(data, key, source, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"must be an integer >= {minimum}, got {_shown(value)}", source=source,
                          field=key)  # fmt: skip
    return value


def _flag(data: Mapping[str, Any], key: str, source: str, default: bool) -> bool:
    value = _value(data, key, source, default)
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {_shown(value)}", source=source,
                          field=key)  # fmt: skip
    return value


def _text(data: Mapping[str, Any], key: str, source: str, default: Any = _MISSING) -> str:
    value = _value(data, key, source, default)
    if not isinstance(value, str):
        raise ConfigError(f"must be a string, got {_shown(value)}", source=source, field=key)
    return value


def _table(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    """A nested object (absent or null: empty)."""
    value = _value(data, key, source, {})
    if not isinstance(value, dict):
        raise ConfigError(f"must be an object, got {_shown(value)}", source=source, field=key)
    return value


def _tied(data: Mapping[str, Any], model_type: str, source: str) -> bool:
    return _flag(data, "tie_word_embeddings", source, TIED_BY_DEFAULT.get(model_type, True))


def _refuse_unless_absent(
    data: Mapping[str, Any], key: str, source: str, absent: object, why: str
) -> None:
    """Refuse ``key`` unless it is absent, null or ``absent`` (what means "none of it")."""
    value = data.get(key)
    if value is not None and value != absent:
        raise ConfigError(f"{_shown(value)}: {why}", source=source, field=key)


def _check_head_dim(data: Mapping[str, Any], source: str, hidden: int, heads: int) -> None:
    """Refuse an explicit ``head_dim`` whose heads do not add up to ``hidden_size``."""
    if data.get("head_dim") is None:
        return
    head_dim = _integer(data, "head_dim", source)
    if head_dim * heads != hidden:
        raise ConfigError(f"{heads} heads of {head_dim} make {head_dim * heads}, not "
                          f"hidden_size {hidden}; simcoll assumes hidden_size = "
                          "num_attention_heads x head_dim", source=source,
                          field="head_dim")  # fmt: skip


def _experts(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``n_experts``, ``top_k`` and each expert's width of a llama-style mixture of experts
    (empty for a dense model), refusing what simcoll does not model."""
    key = next((k for k in _EXPERT_KEYS if data.get(k) is not None), None)
    if key is None or _integer(data, key, source, minimum=0) == 0:
        return {}
    shared = "simcoll models no shared expert (every MLP is top-k routed experts)"
    dense = "simcoll makes every layer's MLP a mixture of experts"
    for name, absent, why in (("n_shared_experts", 0, shared),
                              ("shared_expert_intermediate_size", 0, shared),
                              ("first_k_dense_replace", 0, dense),
                              ("decoder_sparse_step", 1, dense), ("moe_layer_freq", 1, dense),
                              ("mlp_only_layers", [], dense)):  # fmt: skip
        _refuse_unless_absent(data, name, source, absent, why)
    width = "moe_intermediate_size" if data.get("moe_intermediate_size") is not None else None
    return {"n_experts": _integer(data, key, source),
            "top_k": _integer(data, "num_experts_per_tok", source),
            "ffn_hidden_size": _integer(data, width or "intermediate_size", source)}  # fmt: skip


def _llama(data: Mapping[str, Any], model_type: str, source: str) -> dict[str, Any]:
    """Llama, Mistral, Qwen2/3, Gemma/Gemma 2, their mixtures of experts, and any other
    ``model_type`` with the llama-style keys."""
    _refuse_unless_absent(data, "kv_lora_rank", source, None,
                          "simcoll models no multi-head latent attention")  # fmt: skip
    hidden = _integer(data, "hidden_size", source)
    heads = _integer(data, "num_attention_heads", source)
    _check_head_dim(data, source, hidden, heads)
    shape = {"n_layers": _integer(data, "num_hidden_layers", source), "hidden_size": hidden,
             "n_heads": heads, "vocab_size": _integer(data, "vocab_size", source),
             "n_kv_heads": _integer(data, "num_key_value_heads", source, heads),
             "gated_mlp": True, "tied_embeddings": _tied(data, model_type, source)}  # fmt: skip
    experts = _experts(data, source)
    return {**shape, **(experts or {"ffn_hidden_size": _integer(data, "intermediate_size",
                                                                source)})}  # fmt: skip


def _gpt2(data: Mapping[str, Any], model_type: str, source: str) -> dict[str, Any]:
    hidden = _integer(data, "n_embd", source)
    return {"n_layers": _integer(data, "n_layer", source), "hidden_size": hidden,
            "ffn_hidden_size": _integer(data, "n_inner", source, 4 * hidden),
            "n_heads": _integer(data, "n_head", source),
            "vocab_size": _integer(data, "vocab_size", source), "gated_mlp": False,
            "tied_embeddings": _tied(data, model_type, source)}  # fmt: skip


def _gpt_neox(data: Mapping[str, Any], model_type: str, source: str) -> dict[str, Any]:
    return {"n_layers": _integer(data, "num_hidden_layers", source),
            "hidden_size": _integer(data, "hidden_size", source),
            "ffn_hidden_size": _integer(data, "intermediate_size", source),
            "n_heads": _integer(data, "num_attention_heads", source),
            "vocab_size": _integer(data, "vocab_size", source), "gated_mlp": False,
            "tied_embeddings": _tied(data, model_type, source)}  # fmt: skip


def _opt(data: Mapping[str, Any], model_type: str, source: str) -> dict[str, Any]:
    hidden = _integer(data, "hidden_size", source)
    _refuse_unless_absent(data, "word_embed_proj_dim", source, hidden,
                          f"differs from hidden_size {hidden}; simcoll models no embedding "
                          "projection")  # fmt: skip
    return {"n_layers": _integer(data, "num_hidden_layers", source), "hidden_size": hidden,
            "ffn_hidden_size": _integer(data, "ffn_dim", source),
            "n_heads": _integer(data, "num_attention_heads", source),
            "vocab_size": _integer(data, "vocab_size", source), "gated_mlp": False,
            "tied_embeddings": _tied(data, model_type, source)}  # fmt: skip


def _falcon(data: Mapping[str, Any], model_type: str, source: str) -> dict[str, Any]:
    hidden = _integer(data, "hidden_size", source)
    heads = _integer(data, "num_attention_heads", source)
    # as transformers' FalconAttention: num_kv_heads unless an old-style multi-query model
    multi_query = _flag(data, "multi_query", source, True)
    if _flag(data, "new_decoder_architecture", source, False) or not multi_query:
        kv_heads = _integer(data, "num_kv_heads", source, heads)
    else:
        kv_heads = 1
    return {"n_layers": _integer(data, "num_hidden_layers", source), "hidden_size": hidden,
            "ffn_hidden_size": _integer(data, "ffn_hidden_size", source, 4 * hidden),
            "n_heads": heads, "vocab_size": _integer(data, "vocab_size", source),
            "n_kv_heads": kv_heads, "gated_mlp": False,
            "tied_embeddings": _tied(data, model_type, source)}  # fmt: skip


def _mpt_ffn_size(data: Mapping[str, Any], source: str, hidden: int) -> int:
    """``ffn_config.ffn_hidden_size``, else ``expansion_ratio x d_model`` (a whole number)."""
    ffn = _table(data, "ffn_config", source)
    if ffn.get("ffn_hidden_size") is not None:
        return _integer(ffn, "ffn_hidden_size", f"{source}: ffn_config")
    ratio = _value(data, "expansion_ratio", source, 4)
    size: float = 0
    if isinstance(ratio, int) and not isinstance(ratio, bool):
        size = ratio * hidden  # exact, however large (the shape's caps refuse it after)
    elif isinstance(ratio, float) and math.isfinite(ratio * hidden):
        size = ratio * hidden
    if not (size >= 1 and size == int(size)):
        raise ConfigError(f"must be a number whose product with d_model {hidden} is a whole "
                          f"number >= 1, got {_shown(ratio)}", source=source,
                          field="expansion_ratio")  # fmt: skip
    return int(size)


def _mpt(data: Mapping[str, Any], model_type: str, source: str) -> dict[str, Any]:
    hidden = _integer(data, "d_model", source)
    heads = _integer(data, "n_heads", source)
    attn, ffn = _table(data, "attn_config", source), _table(data, "ffn_config", source)
    attn_type = _text(attn, "attn_type", f"{source}: attn_config", "multihead_attention")
    kv_heads = {"multihead_attention": heads, "multiquery_attention": 1}.get(attn_type)
    if attn_type == "grouped_query_attention":
        kv_heads = _integer(attn, "kv_n_heads", f"{source}: attn_config")
    if kv_heads is None:
        raise ConfigError(f"{attn_type!r} is not multihead_attention, multiquery_attention or "
                          "grouped_query_attention", source=source,
                          field="attn_config.attn_type")  # fmt: skip
    ffn_type = _text(ffn, "ffn_type", f"{source}: ffn_config", "mptmlp")
    if ffn_type not in ("mptmlp", "mptglu", "te_ln_mlp"):
        raise ConfigError(f"{ffn_type!r} is not mptmlp, mptglu or te_ln_mlp", source=source,
                          field="ffn_config.ffn_type")  # fmt: skip
    return {"n_layers": _integer(data, "n_layers", source), "hidden_size": hidden,
            "ffn_hidden_size": _mpt_ffn_size(data, source, hidden), "n_heads": heads,
            "vocab_size": _integer(data, "vocab_size", source), "n_kv_heads": kv_heads,
            "gated_mlp": ffn_type == "mptglu",
            "tied_embeddings": _tied(data, model_type, source)}  # fmt: skip


_Reader = Callable[[Mapping[str, Any], str, str], dict[str, Any]]
#: The ``model_type`` values read by llama's rules (with or without experts).
LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "mixtral",
               "qwen2_moe", "qwen3_moe", "olmoe", "deepseek")  # fmt: skip
_READERS: dict[str, _Reader] = {
    **dict.fromkeys(LLAMA_TYPES, _llama),
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "opt": _opt,
    "falcon": _falcon,
    "mpt": _mpt,
}
#: The ``model_type`` values read by their own rules (any other with the llama-style keys
#: is read as llama).
SUPPORTED_MODEL_TYPES = tuple(_READERS)


def _reader(data: Mapping[str, Any], model_type: str, source: str) -> _Reader:
    """The rules for ``model_type``: its own, llama's where the llama-style keys are all
    there, else a refusal naming the supported types."""
    if model_type in _READERS:
        return _READERS[model_type]
    if all(data.get(key) is not None for key in LLAMA_KEYS):
        return _llama
    raise ConfigError(f"{json.dumps(model_type)} is not one simcoll reads "
                      f"({', '.join(SUPPORTED_MODEL_TYPES)}; any other needs the llama-style "
                      f"keys {', '.join(LLAMA_KEYS)})", source=source,
                      field="model_type")  # fmt: skip


def transformer_from_hf(data: Mapping[str, Any], source: str) -> Transformer:
    """The :class:`Transformer` a parsed ``config.json`` describes, ``source`` (its path)
    named in every error and kept as the model's source; the name is ``_name_or_path``,
    else the stem of ``source``.

    >>> gpt2 = {"model_type": "gpt2", "_name_or_path": "gpt2", "n_layer": 12,
    ...         "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_inner": None}
    >>> m = transformer_from_hf(gpt2, "gpt2.json")
    >>> m.name, m.ffn_hidden_size, m.gated_mlp, m.tied_embeddings, m.source
    ('gpt2', 3072, False, True, 'gpt2.json')
    >>> transformer_from_hf({**gpt2, "model_type": "t5"}, "t5.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: t5.json: model_type: "t5" is not one simcoll reads \
(llama, mistral, ...)
    """
    model_type = _text(data, "model_type", source)
    shape = _reader(data, model_type, source)(data, model_type, source)
    name = _text(data, "_name_or_path", source, "") or Path(source).stem
    try:
        return Transformer(name, **shape, source=source)
    except ConfigError as error:  # a cap, or heads that do not divide
        raise ConfigError(error.message, source=source) from None


def read_hf_config(path: str | Path) -> Transformer:
    """The :class:`Transformer` of a Hugging Face ``config.json`` (read bounded, through
    :func:`~simcoll.core.files.read_input_text`), every error one line naming the file.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "config.json"
    >>> _ = path.write_text('{"model_type": "llama", "num_hidden_layers": 32}')
    >>> read_hf_config(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: .../config.json: hidden_size: missing
    """
    source = str(path)
    text = read_input_text(path, missing="no such config file")
    try:
        data = json.loads(text)
    except RecursionError:
        raise ConfigError(TOO_DEEP, source=source) from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"not JSON: {error.msg}", source=source,
                          field=f"line {error.lineno}, column {error.colno}") from None  # fmt: skip
    except ValueError as error:  # an integer of more than sys.get_int_max_str_digits() digits
        raise ConfigError(f"not JSON: {str(error).split(';')[0]}", source=source) from None
    check_nesting(data, source=source)
    if not isinstance(data, dict):
        raise ConfigError(f"must be a JSON object of the model's settings, got "
                          f"{_shown(data)[:40]}", source=source)  # fmt: skip
    return transformer_from_hf(data, source)
