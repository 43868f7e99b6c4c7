"""export-hf's exit code for stored weights the config has no place for says whose fault it
is, as validate does. Was: exit 2 ("bad usage") for q/k norms under args with
qk_layernorm=False, a qkv bias under add_qkv_bias=False, an extra layer, an extra expert or
an fc1 bias, though no --hf-config or --layout was given and validate called the same
checkpoint INVALID (exit 1). Now exit 1 when the config and layout are the checkpoint's own
(its `args`), exit 2 only when the user gave the config (--hf-config) or a layout the names
do not show (--layout)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support.cli_errors import error_prefixed_lines
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import mcore_weights, megatron_args, megatron_run


def _qwen3_run(root: Path, **changes) -> Path:
    model = tiny_causal_lm("qwen3")
    return megatron_run(root, model, megatron_args(model, **changes))


def _with_extra(root: Path, family: str, extra: dict[str, torch.Tensor]) -> Path:
    model = tiny_causal_lm(family)
    return megatron_run(root, model, megatron_args(model), extra=extra)


def _extra_layer(root: Path) -> Path:
    model = tiny_causal_lm("qwen3")
    layer = {
        key.replace(".layers.1.", ".layers.2."): value
        for key, value in mcore_weights(model).items()
        if ".layers.1." in key
    }
    return megatron_run(root, model, megatron_args(model), extra=layer)


def _extra_expert(root: Path) -> Path:
    model = tiny_causal_lm("qwen3_moe")
    weights = mcore_weights(model)
    last = model.config.num_experts - 1
    expert = {
        key.replace(f"weight{last}", f"weight{last + 1}"): value
        for key, value in weights.items()
        if key.endswith((f"weight{last}", f"weight{last}_w", f"weight{last}_v"))
    }
    assert expert, sorted(weights)
    return megatron_run(root, model, megatron_args(model), extra=expert)


CASES = {
    "qk_norms_under_qk_layernorm_false": lambda root: _qwen3_run(root, qk_layernorm=False),
    "qkv_bias_under_add_qkv_bias_false": lambda root: megatron_run(
        root,
        model := tiny_causal_lm("qwen2"),
        megatron_args(model, add_qkv_bias=False),
    ),
    "fc1_bias": lambda root: _with_extra(
        root, "qwen3", {"module.decoder.layers.0.mlp.linear_fc1.bias": torch.zeros(2 * 192)}
    ),
    "extra_layer": _extra_layer,
    "extra_expert": _extra_expert,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_weights_against_the_checkpoints_own_config_exit_1_as_validate(case, tmp_path):
    run = CASES[case](tmp_path)
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    errors = error_prefixed_lines(stdout + err)
    assert code == 1 and len(errors) == 1, stdout + err
    assert str(run / "iter_0000100") in errors[0], errors
    assert not (tmp_path / "hf").exists()
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1, stdout + err


def test_the_layout_the_names_show_given_with_layout_is_still_the_checkpoints(tmp_path):
    run = _qwen3_run(tmp_path, qk_layernorm=False)
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "hf", "--layout", "mcore"
    )
    assert code == 1, stdout + err


def test_a_layout_the_names_do_not_show_is_bad_usage(tmp_path):
    run = _qwen3_run(tmp_path)
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "hf", "--layout", "hf"
    )
    errors = error_prefixed_lines(stdout + err)
    assert code == 2 and len(errors) == 1 and "(hf layout)" in errors[0], stdout + err


def test_a_config_the_user_gave_is_bad_usage(tmp_path):
    """The checkpoint is whole (its args say qk_layernorm) and --hf-config names a Llama of
    the same sizes: the user's config has no place for its q/k norms."""
    run = _qwen3_run(tmp_path)
    recorded = tiny_causal_lm("qwen3").config
    given = tmp_path / "llama"
    sizes = {"head_dim": recorded.head_dim, "tie_word_embeddings": recorded.tie_word_embeddings}
    tiny_causal_lm("llama", **sizes).config.save_pretrained(given)
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "hf", "--hf-config", given
    )
    errors = error_prefixed_lines(stdout + err)
    assert code == 2 and len(errors) == 1, stdout + err
    assert "have no llama mcore mapping" in errors[0] and "q_layernorm" in errors[0], errors
