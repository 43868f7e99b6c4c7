"""A tiny transformers model of each family and its weights under Megatron-core names.

The HF -> mcore direction is written here independently of `mfsdp_ckpt.convert.name_maps`
(concatenation per query group rather than a reshape-and-slice), so a checkpoint built from
it and exported by mfsdp can be compared with the source model's logits.
"""

from __future__ import annotations

import torch

FAMILIES = {
    # GQA 4:2, qkv bias, tied embeddings (Qwen2 / Qwen2.5)
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=True),
    # q/k RMSNorm, no bias, head_dim not hidden/heads (Qwen3)
    "qwen3": dict(model_type="qwen3", tie_word_embeddings=True, head_dim=48),
    # no bias, untied output layer (Llama 3)
    "llama": dict(model_type="llama", tie_word_embeddings=False),
}


def tiny_causal_lm(family: str, vocab: int = 512):
    """A two-layer transformers model of `family` (a key of FAMILIES) with seeded random
    weights, its norms and biases moved off their initial values."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(FAMILIES[family])
    config = AutoConfig.for_model(
        spec.pop("model_type"),
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        **spec,
    )
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # norms start at 1.0; randomize so a swapped norm cannot pass
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.1)
    return model


def _interleave_per_group(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int
) -> torch.Tensor:
    """Megatron's linear_qkv from HF q, k, v: for each KV group, its q heads then k then v."""
    q_parts, k_parts, v_parts = q.chunk(groups), k.chunk(groups), v.chunk(groups)
    return torch.cat([torch.cat([q_parts[g], k_parts[g], v_parts[g]]) for g in range(groups)])


def to_mcore(model, *, norms: str, fc1: str) -> dict[str, torch.Tensor]:
    """The GPTModel state dict of an HF model. norms: local|te; fc1: fused|split."""
    hf = model.state_dict()
    groups = model.config.num_key_value_heads
    out = {
        "embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
        "decoder.final_layernorm.weight": hf["model.norm.weight"],
    }
    if "lm_head.weight" in hf and not model.config.tie_word_embeddings:
        out["output_layer.weight"] = hf["lm_head.weight"]
    for i in range(model.config.num_hidden_layers):
        h, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        attn = h + "self_attn."
        out[m + "self_attention.linear_qkv.weight"] = _interleave_per_group(
            hf[attn + "q_proj.weight"],
            hf[attn + "k_proj.weight"],
            hf[attn + "v_proj.weight"],
            groups,
        )
        if attn + "q_proj.bias" in hf:
            out[m + "self_attention.linear_qkv.bias"] = _interleave_per_group(
                hf[attn + "q_proj.bias"], hf[attn + "k_proj.bias"], hf[attn + "v_proj.bias"], groups
            )
        if attn + "q_norm.weight" in hf:
            out[m + "self_attention.q_layernorm.weight"] = hf[attn + "q_norm.weight"]
            out[m + "self_attention.k_layernorm.weight"] = hf[attn + "k_norm.weight"]
        out[m + "self_attention.linear_proj.weight"] = hf[attn + "o_proj.weight"]
        if norms == "local":
            out[m + "input_layernorm.weight"] = hf[h + "input_layernorm.weight"]
            out[m + "pre_mlp_layernorm.weight"] = hf[h + "post_attention_layernorm.weight"]
        else:  # Transformer Engine spec: norms fused into the following linear
            out[m + "self_attention.linear_qkv.layer_norm_weight"] = hf[
                h + "input_layernorm.weight"
            ]
            out[m + "mlp.linear_fc1.layer_norm_weight"] = hf[h + "post_attention_layernorm.weight"]
        gate, up = hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]
        if fc1 == "fused":
            out[m + "mlp.linear_fc1.weight"] = torch.cat([gate, up])
        else:  # fsdp_dtensor preprocessing splits SwiGLU fc1 into weight_w (gate) / weight_v (up)
            out[m + "mlp.linear_fc1.weight_w"] = gate
            out[m + "mlp.linear_fc1.weight_v"] = up
        out[m + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
    return {k: v.detach().clone() for k, v in out.items()}
