"""A Megatron-LM run with dense layers among its MoE ones (`moe_layer_freq=[0, 1]`) is not
derived from its record, and the refusal says the route that exports it: --hf-config with a
config.json whose `mlp_only_layers` lists the dense layers (Qwen3-MoE's and Qwen2-MoE's
transformers models honour it).

Was: "moe_layer_freq=[0, 1] mixes dense and MoE layers; only every layer MoE (1) is
exported", read as "cannot be exported", while the route below exports it to the source
model's logits.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.support.export import logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run, source_logits


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_the_refusal_names_mlp_only_layers_and_that_route_exports(family, tmp_path):
    model = tiny_causal_lm(family, mlp_only_layers=[0])
    run = megatron_run(tmp_path, model, megatron_args(model, moe_layer_freq=[0, 1]))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "refused")
    line = one_error_line(err)
    assert code == 1 and "moe_layer_freq=[0, 1] mixes dense and MoE layers" in line, err
    assert line.endswith(
        f"--hf-config with a {family} config.json whose mlp_only_layers lists the dense"
        " layers ([0]) exports it"
    ), line

    config = {**model.config.to_dict(), "mlp_only_layers": [0]}
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "config.json").write_text(json.dumps(config))
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--hf-config", tmp_path / "assets", "--out", out
    )
    assert code == 0, stdout + err
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_a_mixtral_record_names_no_route_it_lacks(tmp_path):
    """transformers' Mixtral has no dense layers: no config.json route is offered."""
    model = tiny_causal_lm("mixtral")
    run = megatron_run(tmp_path, model, megatron_args(model, moe_layer_freq=[0, 1]))
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and line.endswith("only every layer MoE (1) is derived from the record"), line
