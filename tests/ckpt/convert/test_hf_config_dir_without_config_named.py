"""`--hf-config` given a dir without config.json says what that dir is, never "pass --hf-config".

`export-hf RUN --hf-config RUN/global_step_80` said `RUN/global_step_80: no config.json;
pass --hf-config DIR|config.json`: the flag just passed, with no word of the step's
huggingface/, which holds the config.json. A checkpoint step, its run, its dist_ckpt and a
Megatron iteration are named as such now, with where the checkpoint keeps its config.json
(exit 2), for the full export and the LoRA merge alike; one not there is said to be
missing. A contradiction's line suggests leaving --hf-config out only where the
checkpoint's own record can be read: a Megatron record that derives no config leaves the
export nothing to use without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.export import save_single_process_checkpoint
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES
from tests.trainer.test_lora_export_flags import lora_run  # noqa: F401 (a fixture)

MCORE_FIXTURE = FIXTURES / "mcore_optim" / "qwen2"
FLAG_AGAIN = "pass --hf-config"


@pytest.fixture(scope="module")
def mfsdp_run(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("hf_config_dirs")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"))
    return root / "run"


def _refusal(ckpt: Path, hf_config: Path, out: Path) -> str:
    code, _, err = run_cli("ckpt", "export-hf", ckpt, "--hf-config", hf_config, "--out", out)
    line = one_error_line(err)
    assert code == 2 and FLAG_AGAIN not in line and not out.exists(), line
    assert line.startswith(f"error: --hf-config {hf_config}: no config.json; "), line
    return line


@pytest.mark.parametrize(
    ("given", "what"),
    [
        ("global_step_1", "it is the mfsdp checkpoint {step}"),
        (".", "it is the mfsdp training run {run}, whose latest checkpoint is {step}"),
        ("global_step_1/dist_ckpt", "it is the dist_ckpt (DCP weights) of the mfsdp checkpoint"),
    ],
    ids=["step", "run", "dist_ckpt"],
)
def test_a_level_of_the_exported_checkpoint_names_its_huggingface_dir(
    mfsdp_run, tmp_path, given, what
):
    step = mfsdp_run / "global_step_1"
    line = _refusal(mfsdp_run, mfsdp_run / given, tmp_path / "out")
    assert what.format(run=mfsdp_run / given, step=step) in line, line
    assert line.endswith(
        f"its config.json is in {step / 'huggingface'}, which export-hf reads when"
        " --hf-config is left out"
    ), line


def test_another_checkpoints_step_names_its_huggingface_dir(mfsdp_run, tmp_path):
    step = MCORE_FIXTURE / "run" / "iter_0000003"
    line = _refusal(step, mfsdp_run / "global_step_1", tmp_path / "out")
    hf_dir = mfsdp_run / "global_step_1" / "huggingface"
    assert line.endswith(f"its config.json is in {hf_dir}: give that dir"), line


def test_a_megatron_iteration_is_named_as_keeping_no_config(mfsdp_run, tmp_path):
    step = MCORE_FIXTURE / "run" / "iter_0000003"
    line = _refusal(mfsdp_run, step, tmp_path / "out")
    assert f"it is the megatron-lm checkpoint {step}, not a Hugging Face model dir" in line
    assert "it keeps no config.json: give the Hugging Face model dir the run started" in line


def test_a_dir_that_is_no_checkpoint_is_said_to_be_no_model_dir(mfsdp_run, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = _refusal(mfsdp_run, empty, tmp_path / "out")
    assert "not a Hugging Face model dir (give the Hugging Face model dir the run" in line, line


def test_a_lora_merge_names_the_steps_huggingface_dir(lora_run, tmp_path):  # noqa: F811
    step = sorted(lora_run.glob("global_step_*"))[-1]
    line = _refusal(lora_run, step, tmp_path / "out")
    assert f"it is the mfsdp checkpoint {step}" in line, line
    assert f"its config.json is in {step / 'huggingface'}, which export-hf reads" in line, line


def test_a_lora_merge_says_a_missing_hf_config_is_missing(lora_run, tmp_path):  # noqa: F811
    """As the full export says it: the LoRA merge said `DIR: no config.json; pass --hf-config`."""
    missing = tmp_path / "missing"
    code, _, err = run_cli(
        "ckpt", "export-hf", lora_run, "--hf-config", missing, "--out", tmp_path / "out"
    )
    line = one_error_line(err)
    assert code == 2 and line.startswith(
        f"error: --hf-config {missing}: no such file or directory"
    ), line


def test_leaving_hf_config_out_is_not_suggested_where_the_record_derives_no_config(tmp_path):
    """tests/fixtures/mcore_optim's `args` lack max_position_embeddings: no config is derived
    from them, so without --hf-config the export refuses (exit 2) for want of one."""
    other = tmp_path / "other"
    other.mkdir()
    data = json.loads((MCORE_FIXTURE / "config.json").read_text())
    changed = {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32}
    (other / "config.json").write_text(json.dumps({**data, **changed}))
    out = tmp_path / "out"
    run = MCORE_FIXTURE / "run"
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", other, "--out", out)
    line = one_error_line(err)
    assert code == 2 and "num_attention_heads=2 (record: 4)" in line, line
    assert line.endswith("; pass the model dir the run started from"), line
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 2 and "lacks max_position_embeddings" in one_error_line(err)


def test_validate_names_a_step_given_as_hf_config(mfsdp_run):
    """validate said `--hf-config RUN/global_step_1/config.json: no such file`."""
    step = mfsdp_run / "global_step_1"
    code, _, err = run_cli("ckpt", "validate", mfsdp_run, "--hf-config", step)
    line = one_error_line(err)
    assert code == 2 and f"it is the mfsdp checkpoint {step}" in line, line
    assert f"its config.json is in {step / 'huggingface'}: give that dir" in line, line
