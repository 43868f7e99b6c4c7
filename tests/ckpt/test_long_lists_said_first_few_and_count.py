"""A checkpoint message that names some of many items (layers, tensors, files, errors,
optimizer states) names the first few and then `(+N more)`, the one spelling of
`first_of`: the lists were written " and N more", ", ..." and "(+N more)" by turns, and a
count sat away from the name it counted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.check.validate import invalid_checkpoint
from mfsdp_ckpt.convert.config_behaviour import WINDOWS, shown_behaviour
from mfsdp_ckpt.convert.export_errors import ExportVerifyError
from mfsdp_ckpt.convert.export_source import JsonConfig
from mfsdp_ckpt.convert.mapping_errors import (
    AdapterWeightsError,
    MappingError,
    UnsupportedModelError,
)
from mfsdp_ckpt.convert.megatron_lora import split_adapters
from mfsdp_ckpt.convert.name_maps import detect_layout, refuse_attention_window
from mfsdp_ckpt.convert.tied_head import Difference, unequal_verdict
from mfsdp_ckpt.format.dtypes import FLOAT32
from mfsdp_ckpt.format.state_keys import AmbiguousStateError, state_roots
from tests.ckpt.test_optimizer_kinds import OPTIMIZERS, _stepped, _validate


def test_the_first_error_of_many_is_counted_and_validate_named():
    said = str(invalid_checkpoint(["first", "second", "third"], Path("/ckpt")))
    assert said == "first (+2 more); see mfsdp ckpt validate /ckpt"
    assert str(invalid_checkpoint(["alone"], Path("/ckpt"))) == "alone"


def test_verify_names_three_mismatches_and_counts_the_rest():
    said = str(ExportVerifyError([f"[w{i}]: differs" for i in range(5)]))
    assert said == "verify: 5 mismatch(es): [w0]: differs; [w1]: differs; [w2]: differs (+2 more)"


def test_windows_on_many_layers_name_eight_and_count_the_rest():
    windows = [1024 if layer % 2 == 0 else None for layer in range(20)]
    shown = ", ".join(f"{layer}: 1024" for layer in range(0, 16, 2))
    assert shown_behaviour(WINDOWS, windows) == f"{{{shown} (+2 more)}}"


def test_windowed_layers_name_four_and_count_the_rest():
    config = JsonConfig(
        model_type="qwen2",
        num_hidden_layers=12,
        max_position_embeddings=4096,
        use_sliding_window=True,
        sliding_window=1024,
        layer_types=["sliding_attention", "full_attention"] * 6,
    )
    with pytest.raises(UnsupportedModelError) as caught:
        refuse_attention_window(config)
    assert " on layers 0, 2, 4, 6 (+2 more) (layer_types); " in str(caught.value)


def test_names_of_no_layout_are_three_then_counted():
    with pytest.raises(MappingError) as caught:
        detect_layout([f"weird{i}.weight" for i in range(5)])
    assert str(caught.value).endswith(": weird0.weight, weird1.weight, weird2.weight (+2 more)")


def test_many_model_entries_name_three_and_count_the_rest():
    with pytest.raises(AmbiguousStateError) as caught:
        state_roots([f"{app}.model.model.layers.0.w" for app in "abcd"])
    shown = ", ".join(f"{app}.model ([{app}.model.model.layers.0.w])" for app in "abc")
    assert f"weights: {shown} (+1 more); refusing" in str(caught.value)


def test_peft_extras_are_counted_beside_the_first_one_named():
    """The count was said after what the first one is, away from its name."""
    lora = "base_model.model.model.layers.0.self_attn.q_proj.lora_"
    biases = [
        f"base_model.model.model.layers.{i}.self_attn.q_proj.base_layer.bias" for i in (0, 1, 2)
    ]
    keys = [f"{lora}A.weight", f"{lora}B.weight", *biases]
    floats = dict.fromkeys(keys, FLOAT32)
    with pytest.raises(AdapterWeightsError) as caught:
        split_adapters({key: (2, 2) for key in keys}, {key: key for key in keys}, floats)
    assert str(caught.value).startswith(f"[{biases[0]}] (+2 more): a PEFT adapter save")


def test_changed_files_of_a_head_name_the_first_and_count_the_rest():
    files = ["a.safetensors", "b.safetensors", "c.safetensors"]
    verdict = unequal_verdict(Difference(5, 100), "embed", files, "config.json", "remedy")
    assert ", and a.safetensors (+2 more), which holds them, differs" in verdict.what


def test_many_unknown_optimizer_states_name_eight_and_count_the_rest(tmp_path):
    model, model_state, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    for states in optimizer_state["state"].values():
        states.update({f"state{i}": torch.zeros(1) for i in range(10)})
    state = {"model": model_state, "optimizer": optimizer_state}
    _, findings = _validate(tmp_path, model, state)
    held = sorted(["exp_avg", "exp_avg_sq", "step", *(f"state{i}" for i in range(10))])
    shown = f"optimizer states {', '.join(held[:8])} (+{len(held) - 8} more) are no known"
    assert [message for _, _, message in findings if message.startswith(shown)], findings


def test_many_parameters_without_state_name_three_and_count_the_rest(tmp_path):
    model, model_state, optimizer_state = _stepped(OPTIMIZERS["adamw"][0])
    params = sorted(optimizer_state["state"])[:5]
    for name in params:
        del optimizer_state["state"][name]
    state = {"model": model_state, "optimizer": optimizer_state}
    _, findings = _validate(tmp_path, model, state)
    warned = [m for _, _, m in findings if "so not checked" in m]
    assert len(warned) == 1 and re.search(r"; also \[[^]]+\], \[[^]]+\] \(\+2 more\)$", warned[0])
