"""Megatron-core layout: synthetic fsdp_dtensor-style checkpoints built from HF models.

The HF -> mcore direction is written here independently of `mfsdp_ckpt.convert.name_maps`
(concatenation per query group rather than a reshape-and-slice), saved with plain
`torch.distributed.checkpoint.save` into a bare directory under Megatron-LM's top-level
`model.module.` keys, then exported and compared with the original model's logits.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.name_maps import Geometry, split_qkv
from tests.support.export import fixed_inputs, load_report, logits_of

FAMILIES = {
    # GQA 4:2, qkv bias, tied embeddings (Qwen2 / Qwen2.5)
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=True),
    # q/k RMSNorm, no bias, head_dim not hidden/heads (Qwen3)
    "qwen3": dict(model_type="qwen3", tie_word_embeddings=True, head_dim=48),
    # no bias, untied output layer (Llama 3)
    "llama": dict(model_type="llama", tie_word_embeddings=False),
}


def _hf_model(family: str, vocab: int = 512):
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


def save_megatron_style(path, weights: dict[str, torch.Tensor]) -> None:
    """Top-level keys like Megatron-LM's fsdp_dtensor save: model (under module.), optimizer,
    iteration."""
    state = {
        "model": {f"module.{k}": v for k, v in weights.items()},
        "optimizer": {
            "state": {
                f"module.{k}": {"exp_avg": torch.zeros_like(v)}
                for k, v in list(weights.items())[:2]
            }
        },
        "iteration": 10,
        "checkpoint_version": 3.0,
    }
    dcp.save(state, checkpoint_id=str(path), no_dist=True)


def _assets(model, tmp_path):
    from trainer.tiny import build_tokenizer

    assets = tmp_path / "assets"
    model.config.save_pretrained(assets)
    build_tokenizer().save_pretrained(assets)
    return assets


@pytest.mark.parametrize(
    "family,norms,fc1",
    [
        ("qwen2", "local", "split"),
        ("qwen2", "te", "fused"),
        ("qwen3", "local", "split"),
        ("qwen3", "te", "fused"),
        ("llama", "local", "fused"),
        ("llama", "te", "split"),
    ],
)
def test_mcore_export_matches_hf_logits(tmp_path, family, norms, fc1):
    model = _hf_model(family)
    ckpt = tmp_path / "iter_0000010"
    save_megatron_style(ckpt, to_mcore(model, norms=norms, fc1=fc1))
    out = tmp_path / "hf"
    result = export_hf(ckpt, out, hf_config=_assets(model, tmp_path), dtype="fp32")
    assert (result.layout, result.model_type) == ("mcore", FAMILIES[family]["model_type"])
    assert load_report(out) == {}
    ids = fixed_inputs(model.config.vocab_size)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_qkv_split_row_order_is_megatron_interleave():
    """Rows numbered by (group, slot, dim): q heads of g, then k_g, then v_g."""
    g = Geometry(num_heads=6, num_kv_heads=2, head_dim=2, tie_word_embeddings=False)
    fused = torch.arange((6 + 4) * 2).float()
    q, k, v = split_qkv(fused, g)
    assert q.tolist() == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
    assert k.tolist() == [6, 7, 16, 17]
    assert v.tolist() == [8, 9, 18, 19]


def test_cli_mcore_bare_dir_needs_hf_config_then_works(tmp_path):
    model = _hf_model("llama")
    ckpt = tmp_path / "iter_0000010"
    save_megatron_style(ckpt, to_mcore(model, norms="local", fc1="split"))
    runner = CliRunner()
    missing = runner.invoke(app, ["ckpt", "export-hf", str(ckpt), "--out", str(tmp_path / "a")])
    assert missing.exit_code == 2 and "--hf-config" in missing.output
    done = runner.invoke(
        app,
        [
            "ckpt",
            "export-hf",
            str(ckpt),
            "--out",
            str(tmp_path / "b"),
            "--hf-config",
            str(_assets(model, tmp_path) / "config.json"),
            "--dtype",
            "bf16",
            "--verify",
        ],
    )
    assert done.exit_code == 0, done.output
    assert "layout mcore" in done.output and "bfloat16" in done.output
    assert not (tmp_path / "a").exists()


def test_unknown_family_and_unmapped_names_exit_2(tmp_path):
    model = _hf_model("qwen2")
    weights = to_mcore(model, norms="local", fc1="split")
    ckpt = tmp_path / "ckpt"
    weights["decoder.layers.0.self_attention.linear_proj.bias"] = torch.zeros(128)
    save_megatron_style(ckpt, weights)
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "ckpt",
            "export-hf",
            str(ckpt),
            "--out",
            str(tmp_path / "o"),
            "--hf-config",
            str(_assets(model, tmp_path)),
        ],
    )
    assert result.exit_code == 2
    assert "decoder.layers.0.self_attention.linear_proj.bias" in result.output
    assert result.output.count("\n") == 1
    gpt2 = tmp_path / "gpt2.json"
    gpt2.write_text(
        '{"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "vocab_size": 512}'
    )
    result = runner.invoke(
        app,
        ["ckpt", "export-hf", str(ckpt), "--out", str(tmp_path / "o"), "--hf-config", str(gpt2)],
    )
    assert result.exit_code == 2 and "gpt2" in result.output and "mcore" in result.output
    assert not (tmp_path / "o").exists()


def test_qkv_shape_contradicting_config_exits_1(tmp_path):
    model = _hf_model("qwen2")
    ckpt = tmp_path / "ckpt"
    save_megatron_style(ckpt, to_mcore(model, norms="local", fc1="split"))
    assets = _assets(model, tmp_path)
    model.config.num_key_value_heads = 4  # config now wants 3x4 heads of rows; checkpoint has 4+2+2
    model.config.save_pretrained(assets)
    result = CliRunner().invoke(
        app,
        ["ckpt", "export-hf", str(ckpt), "--out", str(tmp_path / "o"), "--hf-config", str(assets)],
    )
    assert result.exit_code == 1, result.output
    assert "linear_qkv" in result.output and "rows" in result.output
