"""The Hugging Face state dict of a known family, name and shape, from config.json alone.

Validate and export compare a checkpoint's weights with what the config says the model
holds; asking transformers costs its import and a model build, so for the families the
name tables know (`name_maps`) the answer is computed here, and held to transformers'
own models by tests.
"""

from __future__ import annotations

from mfsdp_ckpt.convert.config_behaviour import FAMILY_DEFAULTS
from mfsdp_ckpt.convert.fused_tensors import is_int
from mfsdp_ckpt.convert.hf_config import MAX_EXPERTS, SHAPE_KEYS
from mfsdp_ckpt.convert.name_maps import MOE_NAMES, MoeNames

# What `AutoModelForCausalLM.from_config(config).state_dict()` holds for the families of
# `name_maps` (experts under the hub files' per-expert names), computed from config.json numbers
# alone: building even a meta-device model costs the transformers import plus model
# construction (seconds, on a 2-core machine), more than exporting a small model.
# tests/ckpt/convert/test_export_config_shapes.py holds these tables to the meta-device
# model for each family and its bias / tie / head_dim / dense-layer variants.
# A bias switch config.json leaves out (Llama configs from before `mlp_bias`, Qwen3 and
# Megatron-derived ones without `attention_bias`) takes its config class's default,
# `config_behaviour.FAMILY_DEFAULTS`, as transformers' model does; tie_word_embeddings must
# be stated (else transformers answers).
_FLAG_KEYS: dict[str, tuple[str, ...]] = {  # booleans each family's weight set depends on
    "qwen2": ("tie_word_embeddings",),
    "qwen3": ("tie_word_embeddings", "attention_bias"),
    "llama": ("tie_word_embeddings", "attention_bias", "mlp_bias"),
    "mistral": ("tie_word_embeddings",),  # never biases, whatever config.json says
    "qwen3_moe": ("tie_word_embeddings", "attention_bias"),
    "qwen2_moe": ("tie_word_embeddings",),
    "mixtral": ("tie_word_embeddings",),
}


def hf_state_dict_shapes(config: dict) -> dict[str, tuple[int, ...]] | None:
    """{HF state-dict name: shape} for a known family's config.json, or None when the
    family is unknown or a number it needs is absent (the caller then asks transformers).
    `lm_head.weight` is included even when tied, as in the model's state_dict."""
    family = config.get("model_type")
    flags = _FLAG_KEYS.get(family)  # type: ignore[arg-type]
    if flags is None:
        return None
    defaults = FAMILY_DEFAULTS.get(family, {})  # type: ignore[arg-type]
    config = {**{key: defaults[key] for key in flags if key in defaults}, **config}
    if not all(is_int(config.get(key)) for key in SHAPE_KEYS):
        return None
    if not all(isinstance(config.get(key), bool) for key in flags):
        return None
    moe = MOE_NAMES.get(family)  # type: ignore[arg-type]
    if moe is not None:
        config = {"num_experts": config.get("num_local_experts"), **config}
        # transformers 5.x saves num_experts as num_local_experts (Mixtral's own name)
        needed = ["num_experts", moe.expert_size]
        needed += ["shared_expert_intermediate_size"] if moe.shared_expert else []
        if not all(is_int(config.get(key)) for key in needed):
            return None
    sparse = _sparse_layers(config) if moe is not None else set()
    if sparse is None:
        return None
    qkv_bias_flag = config.get("qkv_bias", True)  # Qwen2-MoE's, read by transformers 5.x
    if family == "qwen2_moe" and not isinstance(qkv_bias_flag, bool):
        return None
    head_dim = config.get("head_dim")
    if family == "qwen3" and not is_int(head_dim):  # qwen3's default is 128, not hidden / heads
        return None
    if head_dim is not None and not is_int(head_dim):
        return None
    hidden, inter, heads, kv = (
        config[k]
        for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads")
    )
    if heads == 0:
        return None
    head_dim = head_dim or hidden // heads
    # a bias switch counts only for a family whose model reads it (Mistral's never does)
    o_bias = "attention_bias" in flags and config["attention_bias"]
    qkv_bias = family == "qwen2" or o_bias or (family == "qwen2_moe" and qkv_bias_flag)
    mlp_bias = "mlp_bias" in flags and config["mlp_bias"]
    layer: dict[str, tuple[int, ...]] = {
        "self_attn.q_proj.weight": (heads * head_dim, hidden),
        "self_attn.k_proj.weight": (kv * head_dim, hidden),
        "self_attn.v_proj.weight": (kv * head_dim, hidden),
        "self_attn.o_proj.weight": (hidden, heads * head_dim),
        "mlp.gate_proj.weight": (inter, hidden),
        "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
    }
    if qkv_bias:
        layer.update(
            {
                "self_attn.q_proj.bias": (heads * head_dim,),
                "self_attn.k_proj.bias": (kv * head_dim,),
                "self_attn.v_proj.bias": (kv * head_dim,),
            }
        )
    if o_bias:
        layer["self_attn.o_proj.bias"] = (hidden,)
    if mlp_bias:
        layer.update(
            {
                "mlp.gate_proj.bias": (inter,),
                "mlp.up_proj.bias": (inter,),
                "mlp.down_proj.bias": (hidden,),
            }
        )
    if family in ("qwen3", "qwen3_moe"):
        layer.update(
            {"self_attn.q_norm.weight": (head_dim,), "self_attn.k_norm.weight": (head_dim,)}
        )
    dense_mlp = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
    moe_layer = {k: v for k, v in layer.items() if k not in dense_mlp}
    if moe is not None and sparse:
        moe_layer.update(_moe_block_shapes(config, moe, hidden))
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config["vocab_size"], hidden)
    }
    for index in range(config["num_hidden_layers"]):
        names = moe_layer if index in sparse else layer
        shapes.update({f"model.layers.{index}.{name}": shape for name, shape in names.items()})
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (config["vocab_size"], hidden)
    return shapes


def _moe_block_shapes(config: dict, names: MoeNames, hidden: int) -> dict[str, tuple[int, ...]]:
    """One MoE layer's router, experts (and shared expert) under the hub's names."""
    experts = config["num_experts"]
    inter = config[names.expert_size]
    block = names.block + "."
    shapes: dict[str, tuple[int, ...]] = {block + "gate.weight": (experts, hidden)}
    for expert in range(experts):
        prefix = f"{block}experts.{expert}."
        shapes[prefix + names.gate + ".weight"] = (inter, hidden)
        shapes[prefix + names.up + ".weight"] = (inter, hidden)
        shapes[prefix + names.down + ".weight"] = (hidden, inter)
    if names.shared_expert:
        shared = config["shared_expert_intermediate_size"]
        shapes["mlp.shared_expert.gate_proj.weight"] = (shared, hidden)
        shapes["mlp.shared_expert.up_proj.weight"] = (shared, hidden)
        shapes["mlp.shared_expert.down_proj.weight"] = (hidden, shared)
        shapes["mlp.shared_expert_gate.weight"] = (1, hidden)
    return shapes


def _sparse_layers(config: dict) -> set[int] | None:
    """The layers of an MoE config.json that hold experts, as transformers decides them:
    Mixtral's every layer; Qwen2/Qwen3-MoE's not in mlp_only_layers, and every
    decoder_sparse_step-th (1-based); None when a key is malformed or names more experts
    than MAX_EXPERTS (then transformers judges)."""
    if config["num_experts"] > MAX_EXPERTS:
        return None
    if config.get("model_type") == "mixtral":
        return set(range(config["num_hidden_layers"]))
    step = config.get("decoder_sparse_step", 1)
    dense = config.get("mlp_only_layers") or []
    experts = config["num_experts"]
    if not (is_int(step) and step > 0 and experts <= MAX_EXPERTS):
        return None
    if not (isinstance(dense, list) and all(is_int(i) for i in dense)):
        return None
    if experts == 0:
        return set()
    layers = range(config["num_hidden_layers"])
    return {i for i in layers if i not in dense and (i + 1) % step == 0}
