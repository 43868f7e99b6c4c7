"""A tiny transformers model of each family and its weights under Megatron-core names.

The HF -> mcore direction is written here independently of `mfsdp_ckpt.convert.fused_tensors`
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
    # every layer MoE: 4 experts, top-2 renormalised, q/k RMSNorm, untied (Qwen3-30B-A3B)
    "qwen3_moe": dict(
        model_type="qwen3_moe",
        tie_word_embeddings=False,
        hidden_size=32,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        norm_topk_prob=True,
    ),
    # a sigmoid-gated shared expert beside 4 experts, qkv bias, top-2 not renormalised
    # (Qwen1.5-MoE / Qwen2-MoE)
    "qwen2_moe": dict(
        model_type="qwen2_moe",
        tie_word_embeddings=False,
        hidden_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=24,
        shared_expert_intermediate_size=40,
        norm_topk_prob=False,
    ),
    # 4 experts of intermediate_size, top-2 renormalised, Llama attention (Mixtral)
    "mixtral": dict(
        model_type="mixtral",
        tie_word_embeddings=False,
        hidden_size=32,
        intermediate_size=24,
        num_local_experts=4,
        num_experts_per_tok=2,
    ),
}


def tiny_causal_lm(family: str, vocab: int = 512, **changes):
    """A two-layer transformers model of `family` (a key of FAMILIES, with `changes` to its
    config) with seeded random weights, its norms and biases moved off their initial values."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
    )
    spec.update(FAMILIES[family], **changes)
    config = AutoConfig.for_model(spec.pop("model_type"), **spec)
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # norms start at 1.0; randomize so a swapped norm cannot pass
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.1)
            elif name.endswith(("mlp.gate.weight", "shared_expert_gate.weight")):
                param.normal_(0.0, 1.0)  # a router that prefers some experts
    return model


def _interleave_per_group(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int
) -> torch.Tensor:
    """Megatron's linear_qkv from HF q, k, v: for each KV group, its q heads then k then v."""
    q_parts, k_parts, v_parts = q.chunk(groups), k.chunk(groups), v.chunk(groups)
    return torch.cat([torch.cat([q_parts[g], k_parts[g], v_parts[g]]) for g in range(groups)])


def _hf_experts(hf: dict, prefix: str, count: int) -> list[tuple[torch.Tensor, ...]]:
    """(gate, up, down) of each expert under `prefix` (`model.layers.N.mlp.experts.`), from
    transformers 5.x's fused in-memory tensors or 4.x's per-expert modules."""
    if prefix + "gate_up_proj" in hf:  # [E, 2I, H], gate rows first; down [E, H, I]
        fused, down = hf[prefix + "gate_up_proj"], hf[prefix + "down_proj"]
        return [(*fused[e].chunk(2), down[e]) for e in range(count)]
    names = ("gate_proj", "up_proj", "down_proj")
    return [tuple(hf[f"{prefix}{e}.{n}.weight"] for n in names) for e in range(count)]


def _fc1(out: dict, name: str, gate: torch.Tensor, up: torch.Tensor, fc1: str) -> None:
    """`name` (a fc1 weight name) fused [gate; up], or split as fsdp_dtensor preprocessing
    does (handle_swiglu_in_state_dict): `name`_w (gate) and `name`_v (up)."""
    if fc1 == "fused":
        out[name] = torch.cat([gate, up])
    else:
        out[name + "_w"], out[name + "_v"] = gate, up


def _moe_mlp(out: dict, hf: dict, h: str, m: str, count: int, fc1: str, experts: str) -> None:
    """A Megatron MoE layer: router, then experts under their global ids as TEGroupedMLP
    (`experts.linear_fc1.weight<E>`) or SequentialMLP (`experts.local_experts.<E>.`)."""
    out[m + "mlp.router.weight"] = hf[h + "mlp.gate.weight"]
    shared = h + "mlp.shared_expert."
    if shared + "gate_proj.weight" in hf:  # SharedExpertMLP with its sigmoid gate
        gate, up = hf[shared + "gate_proj.weight"], hf[shared + "up_proj.weight"]
        _fc1(out, m + "mlp.shared_experts.linear_fc1.weight", gate, up, fc1)
        out[m + "mlp.shared_experts.linear_fc2.weight"] = hf[shared + "down_proj.weight"]
        out[m + "mlp.shared_experts.gate_weight"] = hf[h + "mlp.shared_expert_gate.weight"]
    for e, (gate, up, down) in enumerate(_hf_experts(hf, h + "mlp.experts.", count)):
        if experts == "grouped":
            _fc1(out, f"{m}mlp.experts.linear_fc1.weight{e}", gate, up, fc1)
            out[f"{m}mlp.experts.linear_fc2.weight{e}"] = down
        else:
            expert = f"{m}mlp.experts.local_experts.{e}."
            _fc1(out, expert + "linear_fc1.weight", gate, up, fc1)
            out[expert + "linear_fc2.weight"] = down


def to_mcore(model, *, norms: str, fc1: str, experts: str = "grouped") -> dict[str, torch.Tensor]:
    """The GPTModel state dict of an HF model. norms: local|te; fc1: fused|split; experts
    (MoE layers): grouped|sequential."""
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
        moe = h + "mlp.gate.weight" in hf
        if norms == "local":
            out[m + "input_layernorm.weight"] = hf[h + "input_layernorm.weight"]
        else:  # Transformer Engine spec: norms fused into the following linear
            out[m + "self_attention.linear_qkv.layer_norm_weight"] = hf[
                h + "input_layernorm.weight"
            ]
        # an MoE layer keeps its own pre-MLP norm in both specs (no linear to fuse it into)
        pre_mlp = "pre_mlp_layernorm.weight" if norms == "local" or moe else None
        out[m + (pre_mlp or "mlp.linear_fc1.layer_norm_weight")] = hf[
            h + "post_attention_layernorm.weight"
        ]
        if moe:
            _moe_mlp(out, hf, h, m, model.config.num_experts, fc1, experts)
            continue
        gate, up = hf[h + "mlp.gate_proj.weight"], hf[h + "mlp.up_proj.weight"]
        _fc1(out, m + "mlp.linear_fc1.weight", gate, up, fc1)
        out[m + "mlp.linear_fc2.weight"] = hf[h + "mlp.down_proj.weight"]
    return {k: v.detach().clone() for k, v in out.items()}
