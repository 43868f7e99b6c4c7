"""import-hf --layout mcore refuses the config.json settings under which the Megatron-core
model loading the import computes another model than transformers' (an MLP activation
other than SiLU, linear biases no mcore table maps, a rope scaling no Megatron-core
'rope' setting computes), each in one line naming the key, its value, what the mcore
layout supports and that --layout hf imports it; the settings Megatron-core does run
import. The rope comparison is the one export-hf holds a config to against a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.record_values import megatron_rope_mismatch, value_disagreements
from tests.support.cli_errors import one_error
from tests.support.hf_model_files import TINY as IMPORT_TINY

TINY = {key: value for key, value in IMPORT_TINY.items() if key != "dtype"}
# Megatron-core's fixed llama3 parameters beside its factor (RotaryEmbedding._apply_scaling)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _saved(root: Path, name: str, family: str = "llama", **config) -> Path:
    """A random tiny model of `family` saved by transformers itself."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **TINY, **config))
    out = root / name
    model.save_pretrained(out)
    return out


def _import(source: Path, out: Path, layout: str = "mcore"):
    return CliRunner().invoke(
        app, ["ckpt", "import-hf", str(source), "--out", str(out), "--layout", layout]
    )


REFUSED = {
    "gelu": (
        "llama",
        {"hidden_act": "gelu_pytorch_tanh"},
        ("hidden_act='gelu_pytorch_tanh'", "--swiglu"),
    ),
    "yarn": (
        "llama",
        {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}},
        ("rope_parameters.rope_type='yarn'", "--use-rope-scaling"),
    ),
    "llama3_context": (
        "llama",
        {"rope_parameters": {**LLAMA3, "original_max_position_embeddings": 64, "rope_theta": 1e4}},
        ("rope_type='llama3'", "original_max_position_embeddings=64 (Megatron-core: 8192)"),
    ),
    "llama3_high_freq": (
        "llama",
        {"rope_parameters": {**LLAMA3, "high_freq_factor": 2.0, "rope_theta": 1e4}},
        ("high_freq_factor=2.0 (Megatron-core: 4.0)",),
    ),
    "attention_bias": ("llama", {"attention_bias": True}, ("attention_bias=True", "llama mcore")),
    "mlp_bias": ("llama", {"mlp_bias": True}, ("mlp_bias=True", "llama mcore")),
    "qwen3_attention_bias": (
        "qwen3",
        {"attention_bias": True, "head_dim": 8},
        ("attention_bias=True", "qwen3 mcore"),
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_in_one_line_naming_the_key_and_hf_layout_imports_it(case, tmp_path):
    family, config, needles = REFUSED[case]
    source = _saved(tmp_path, case, family, **config)
    result = _import(source, tmp_path / "ckpt")
    assert result.exit_code == 1, result.output
    one_error(result.output, *needles, "--layout hf imports it")
    assert not (tmp_path / "ckpt").exists()
    assert _import(source, tmp_path / "run", layout="hf").exit_code == 0


ACCEPTED = {
    "silu": {},
    "swish": {"hidden_act": "swish"},  # transformers' other name of SiLU
    "llama3_megatron": {"rope_parameters": {**LLAMA3, "rope_theta": 1e4}},
    "linear": {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
    # the default RoPE up to max_position_embeddings, as export-hf compares it
    "dynamic": {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}},
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_what_megatron_core_runs_imports(case, tmp_path):
    source = _saved(tmp_path, case, **ACCEPTED[case])
    result = _import(source, tmp_path / "ckpt")
    assert result.exit_code == 0, result.output


def test_the_legacy_rope_scaling_key_is_named_as_the_file_spells_it(tmp_path):
    source = _saved(tmp_path, "legacy")
    config = json.loads((source / "config.json").read_text())
    config.pop("rope_parameters", None)
    config.update(rope_theta=1e4, rope_scaling={"type": "yarn", "factor": 4.0})
    (source / "config.json").write_text(json.dumps(config))
    result = _import(source, tmp_path / "ckpt")
    assert result.exit_code == 1, result.output
    one_error(result.output, "config: rope_scaling.rope_type='yarn' (")


@pytest.mark.parametrize(
    ("rope", "settings"),
    [
        ({"rope_type": "linear", "factor": 2.0}, {"rotary_seq_len_interpolation_factor": 2}),
        ({**LLAMA3, "factor": 32.0}, {"use_rope_scaling": True, "rope_scaling_factor": 32.0}),
        ({"rope_type": "default"}, {}),
    ],
)
def test_an_imported_scaling_is_what_export_takes_back_against_the_runs_record(rope, settings):
    """What the mcore import accepts, export-hf accepts against the record of the Megatron-LM
    run that trained with the matching flags (one comparison, not two)."""
    config = {"rope_parameters": {**rope, "rope_theta": 1e4}}
    assert megatron_rope_mismatch(config) is None
    record = {"position_embedding_type": "rope", "rotary_base": 10000, **settings}
    assert value_disagreements(config, record, {}) == []


def test_the_window_refusal_gives_the_reason_without_denying_megatron_windows(tmp_path):
    source = _saved(tmp_path, "mistral", "mistral", sliding_window=16)
    result = _import(source, tmp_path / "ckpt")
    assert result.exit_code == 1, result.output
    line = one_error(
        result.output, "sliding_window=16", "--window-size", "carries no attention window"
    )
    assert "Megatron-core layers converted here run full attention" not in line
    docs = (Path(__file__).parents[3] / "docs" / "interop.md").read_text()
    assert "Megatron-core GPT layers run full attention" not in docs
    assert "`--window-size`" in docs and "--window-attn-skip-freq" in docs
