"""`mfsdp ckpt import-hf` given a dir of a training checkpoint that holds a config (its
huggingface/: config and tokenizer, no weights) is the wrong dir, exit 2, pointing at
export-hf of the checkpoint it lies in; it was `no .safetensors weights`, exit 1, as for a
damaged model. The other levels of a checkpoint (run, step, role, dist_ckpt) get the same
pointer."""

from pathlib import Path

import pytest

from tests.support.interop_layouts import one_error_line, run_cli, verl_rl_v1
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"
STEP = RUN / "global_step_2"


def _import_error(hf_dir: Path, out: Path, *args: str) -> tuple[int, str]:
    code, _out, err = run_cli("ckpt", "import-hf", hf_dir, "--out", out, *args)
    return code, one_error_line(err)


@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_a_steps_huggingface_dir_points_to_export_hf_of_the_step(tmp_path, layout_name):
    code, line = _import_error(STEP / "huggingface", tmp_path / "o", "--layout", layout_name)
    assert code == 2, line
    assert f"the config and tokenizer dir of the training checkpoint {STEP}" in line
    assert f"`mfsdp ckpt export-hf {STEP} --out DIR`" in line
    assert not (tmp_path / "o").exists()


def test_a_verl_actors_huggingface_dir_points_to_export_hf_of_its_step(tmp_path):
    """export-hf of a verl step reads its actor."""
    laid = verl_rl_v1(FIXTURES / "mcore" / "qwen2", tmp_path, critic=False)
    hf_dir, step = laid.levels["actor"] / "huggingface", laid.levels["step"]
    code, line = _import_error(hf_dir, tmp_path / "o")
    assert code == 2 and f"`mfsdp ckpt export-hf {step} --out DIR`" in line, line


@pytest.mark.parametrize("level", ["run", "step", "actor", "dist_ckpt"])
def test_every_level_of_a_checkpoint_points_to_export_hf(tmp_path, level):
    laid = verl_rl_v1(FIXTURES / "mcore" / "qwen2", tmp_path, critic=False)
    code, line = _import_error(laid.levels[level], tmp_path / "o")
    assert code == 2 and "mfsdp ckpt export-hf" in line and "--out DIR" in line, line


def test_a_model_dir_without_weights_outside_checkpoints_is_still_a_failed_read(tmp_path):
    """Only a checkpoint's dir is the wrong dir: a model dir missing its weights stays exit 1."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes((STEP / "huggingface" / "config.json").read_bytes())
    code, line = _import_error(model, tmp_path / "o")
    assert code == 1 and "no .safetensors weights" in line and "export-hf" not in line, line
