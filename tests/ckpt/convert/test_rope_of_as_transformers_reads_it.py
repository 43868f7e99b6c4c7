"""`rope_of` is the RoPE transformers builds the model with from a config.json, in each way a
config can state it (`rope_parameters`, `rope_scaling`, both, `rope_theta` beside or inside):
a config transformers 5 saved, with a `rope_scaling` block added, was held to the
`rope_parameters` beside it, which transformers does not use, so import-hf --layout mcore
took a llama3 scaling Megatron-core cannot compute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.config_behaviour import behaviour_differences, rope_of, rope_source
from tests.support.cli_errors import one_error
from tests.support.hf_model_files import TINY

SHAPES = {
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "intermediate_size": 48,
    "vocab_size": 96,
}
CONTEXT = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
DEFAULT = {"rope_type": "default", "rope_theta": 5e5}
STATED = {
    "rope_parameters only": {"rope_parameters": DEFAULT},
    "rope_parameters without theta": {"rope_parameters": {"rope_type": "default"}},
    "rope_parameters, theta at top level": {
        "rope_parameters": {"rope_type": "linear", "factor": 2.0},
        "rope_theta": 7e5,
    },
    "theta inside and at top level": {"rope_parameters": DEFAULT, "rope_theta": 7e5},
    "rope_theta only": {"rope_theta": 5e5},
    "rope_scaling only": {"rope_scaling": CONTEXT},
    "rope_scaling, theta at top level": {"rope_scaling": CONTEXT, "rope_theta": 5e5},
    "rope_scaling, theta inside": {
        "rope_scaling": {**CONTEXT, "rope_theta": 3e5},
        "rope_theta": 5e5,
    },
    "both agreeing": {"rope_parameters": {**CONTEXT, "rope_theta": 5e5}, "rope_scaling": CONTEXT},
    "both differing": {"rope_parameters": DEFAULT, "rope_scaling": CONTEXT},
    "both differing, theta at top level": {
        "rope_parameters": DEFAULT,
        "rope_scaling": CONTEXT,
        "rope_theta": 6e5,
    },
    "empty rope_scaling": {"rope_parameters": DEFAULT, "rope_scaling": {}},
    "null rope_scaling": {"rope_parameters": DEFAULT, "rope_scaling": None},
    "legacy type": {"rope_scaling": {"type": "linear", "factor": 2.0}},
    "llama3 without its original length": {
        "rope_scaling": {
            k: v for k, v in CONTEXT.items() if k != "original_max_position_embeddings"
        },
        "max_position_embeddings": 256,
    },
    "yarn, family's default length": {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
    "partial_rotary_factor at top level": {"rope_theta": 5e5, "partial_rotary_factor": 0.5},
}


def _transformers_rope(config: dict, root: Path) -> dict:
    """What transformers' own config class makes of `config` as a config.json."""
    from transformers import AutoConfig

    root.mkdir()
    (root / "config.json").write_text(json.dumps(config))
    built = dict(AutoConfig.from_pretrained(root).rope_parameters)
    built.pop("type", None)  # the legacy name transformers leaves beside rope_type
    return built


@pytest.mark.parametrize("family", ["llama", "mixtral", "qwen2"])
@pytest.mark.parametrize("case", sorted(STATED))
def test_rope_of_is_what_transformers_builds_the_model_with(case, family, tmp_path):
    config = {"model_type": family, **SHAPES, **STATED[case]}
    assert rope_of(config) == _transformers_rope(config, tmp_path / "model")


def test_a_config_stating_no_rope_has_none_to_compare():
    assert rope_of({"model_type": "llama", **SHAPES}) is None


def test_the_key_named_is_the_one_transformers_read():
    assert rope_source(STATED["both differing"]) == "rope_scaling"
    assert rope_source(STATED["empty rope_scaling"]) == "rope_parameters"
    assert rope_source(STATED["rope_scaling only"]) == "rope_scaling"


def test_a_hf_config_comparison_sees_the_scaling_that_replaces_rope_parameters():
    own = {"model_type": "llama", "rope_parameters": DEFAULT}
    extended = {**own, "rope_scaling": CONTEXT}
    assert behaviour_differences(own, dict(own)) == []
    found = behaviour_differences(extended, own)
    assert len(found) == 1 and "'rope_type': 'llama3'" in found[0], found


def _saved(root: Path) -> Path:
    """A random tiny llama saved by transformers 5 itself (its config.json has rope_parameters)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    shapes = {key: value for key, value in TINY.items() if key != "dtype"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **shapes))
    model.save_pretrained(root / "saved")
    return root / "saved"


def _import(source: Path, out: Path):
    return CliRunner().invoke(app, ["ckpt", "import-hf", str(source), "--out", str(out)])


def test_import_refuses_a_scaling_added_beside_saved_rope_parameters(tmp_path):
    """The same refusal with and without the `rope_parameters` transformers 5 saved."""
    source = _saved(tmp_path)
    config = json.loads((source / "config.json").read_text())
    assert isinstance(config.get("rope_parameters"), dict)
    scaling = {**CONTEXT, "original_max_position_embeddings": 32}  # under TINY's 64
    (source / "config.json").write_text(json.dumps({**config, "rope_scaling": scaling}))
    beside = _import(source, tmp_path / "beside")
    legacy = {k: v for k, v in config.items() if k != "rope_parameters"}
    (source / "config.json").write_text(
        json.dumps({**legacy, "rope_scaling": scaling, "rope_theta": 1e4})
    )
    alone = _import(source, tmp_path / "alone")
    assert beside.exit_code == alone.exit_code == 1, (beside.output, alone.output)
    needles = ("rope_type='llama3'", "original_max_position_embeddings=32 (Megatron-core: 8192)")
    line = one_error(beside.output, *needles)
    assert line.replace(str(tmp_path / "beside"), "") == one_error(alone.output, *needles).replace(
        str(tmp_path / "alone"), ""
    )
    assert not (tmp_path / "beside").exists()
