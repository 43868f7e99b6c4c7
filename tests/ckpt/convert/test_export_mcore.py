"""Megatron-core layout: synthetic fsdp_dtensor-style checkpoints built from HF models.

The HF -> mcore direction is tests/support/hf_to_mcore.py's, written independently of
`mfsdp_ckpt.convert.fused_tensors` (concatenation per query group rather than a
reshape-and-slice), saved with plain `torch.distributed.checkpoint.save` into a bare
directory under Megatron-LM's top-level `model.module.` keys, then exported and compared
with the original model's logits.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.fused_tensors import Geometry, split_qkv
from tests.support.export import fixed_inputs, load_report, logits_of
from tests.support.hf_to_mcore import FAMILIES, tiny_causal_lm, to_mcore


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
    model = tiny_causal_lm(family)
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
    model = tiny_causal_lm("llama")
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
    model = tiny_causal_lm("qwen2")
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


def test_qkv_shape_contradicting_a_given_config_exits_2(tmp_path):
    model = tiny_causal_lm("qwen2")
    ckpt = tmp_path / "ckpt"
    save_megatron_style(ckpt, to_mcore(model, norms="local", fc1="split"))
    assets = _assets(model, tmp_path)
    model.config.num_key_value_heads = 4  # config now wants 3x4 heads of rows; checkpoint has 4+2+2
    model.config.save_pretrained(assets)
    result = CliRunner().invoke(
        app,
        ["ckpt", "export-hf", str(ckpt), "--out", str(tmp_path / "o"), "--hf-config", str(assets)],
    )
    assert result.exit_code == 2, result.output  # --hf-config's, as any contradiction
    assert "linear_qkv" in result.output and "rows" in result.output
