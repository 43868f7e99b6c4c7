"""A config.json whose config class transformers builds but whose MODEL it cannot: refused.

`rope_parameters: {"rope_type": "linear", "factor": "x"}` passes Qwen2Config (which only
warns), and the rotary embedding then fails on it (`Tensor /= str`): import-hf imported it
and export-hf --verify wrote it (exit 0), and `from_pretrained` of the export failed. The
model is built on the meta device, so the check costs no memory; a dtype or rope_theta
transformers builds a model with still imports."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli.config_check_lines import checking_line
from cli.main import app
from mfsdp_ckpt.convert.hf_config import HFConfigError, refuse_unloadable
from tests.support.cli_errors import one_error
from tests.support.hf_model_files import TINY, saved_hf_model

_BAD_ROPE = {"rope_parameters": {"rope_type": "linear", "factor": "x"}}


def _qwen2(**changes: object) -> dict:
    return {"model_type": "qwen2", **TINY, **changes}


def test_a_config_whose_model_cannot_be_built_is_refused_naming_the_key():
    with pytest.raises(HFConfigError) as refused:
        refuse_unloadable(_qwen2(**_BAD_ROPE), "m/config.json")
    line = str(refused.value)
    assert line.startswith("m/config.json: transformers cannot load it (`rope_parameters`")
    assert "\n" not in line


@pytest.mark.parametrize(
    "changes",
    [
        {"dtype": 7},
        {"rope_parameters": {"rope_type": "default", "rope_theta": -1}},
        {"attn_implementation": "flash_attention_2"},  # a kernel this machine lacks
        {"_attn_implementation": "flash_attention_2"},
    ],
    ids=["dtype_7", "rope_theta_negative", "flash_attention", "flash_attention_private_key"],
)
def test_values_transformers_builds_a_model_with_still_pass(changes):
    refuse_unloadable(_qwen2(**changes), "m/config.json")


@pytest.mark.parametrize("layout", ["hf", "mcore"])
def test_import_hf_refuses_a_config_whose_model_cannot_be_built(tmp_path, layout):
    source = saved_hf_model(tmp_path, "qwen2", tied=False)
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, **_BAD_ROPE}))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["ckpt", "import-hf", str(source), "--out", str(out), "--layout", layout]
    )
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.output
    assert "config.json: transformers cannot load it (`rope_parameters`" in errors[0]
    assert not out.exists()


def test_export_verify_and_validate_deep_refuse_it(tmp_path):
    from mfsdp_ckpt.check.validate import validate_checkpoint
    from tests.support.ckpt_edits import rehash
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    run = tmp_path / "run"
    save_single_process_checkpoint(run, build_tiny_model_dir(tmp_path / "assets"))
    step = run / "global_step_1"
    own = step / "huggingface" / "config.json"
    own.write_text(json.dumps({**json.loads(own.read_text()), **_BAD_ROPE}))
    rehash(step, "huggingface/config.json")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["ckpt", "export-hf", str(run), "--out", str(out), "--verify"])
    assert result.exit_code == 1, result.output
    said = one_error(result.output, f"error: {own}: transformers cannot load it (`rope_parameters`")
    assert result.output == f"{checking_line(str(own))}\n{said}\n"  # said as the check begins
    assert not out.exists()
    found = [str(f) for f in validate_checkpoint(run, deep=True).findings if f.severity == "error"]
    assert found == [said], found  # the same line, as a finding
