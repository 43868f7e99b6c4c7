"""Accelerate's FULL_STATE_DICT file (`pytorch_model_fsdp.bin`) beside the weights or alone.

The HF Trainer's FULL_STATE_DICT save writes model.safetensors (save_model) and, through
Accelerate, pytorch_model_fsdp.bin beside it: that checkpoint-N is a Hugging Face model dir,
imported as one, and was refused as "weights only in a pickle". Alone, the file is named with
the steps that load it (torch.load, then save_pretrained): from_pretrained, once advised by
import-hf, does not load a file of that name. Neither is ever unpickled.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from tests.support.interop_layouts import one_error_line, run_cli


class _Runs:
    """A pickle that, once loaded, would create the file it names."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.mknod, (str(self.path),))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    return build_tiny_model_dir(tmp_path_factory.mktemp("hf") / "model", with_weights=True)


def _trainer_checkpoint(model_dir: Path, run: Path, ran: Path, *, weights: bool) -> Path:
    """A Trainer FULL_STATE_DICT checkpoint-2: config, Accelerate's files, model.safetensors
    when `weights`."""
    save = run / "checkpoint-2"
    save.mkdir(parents=True)
    shutil.copy(model_dir / "config.json", save)
    if weights:
        shutil.copy(model_dir / "model.safetensors", save)
    for name in ("pytorch_model_fsdp.bin", "optimizer.bin"):
        (save / name).write_bytes(pickle.dumps(_Runs(ran)))
    (save / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    return save


def test_full_state_dict_beside_safetensors_is_a_model_dir(model_dir, tmp_path):
    ran = tmp_path / "unpickled"
    save = _trainer_checkpoint(model_dir, tmp_path / "run", ran, weights=True)
    for command, where in (("validate", save), ("inspect", save), ("validate", save.parent)):
        code, _out, err = run_cli("ckpt", command, where)
        line = one_error_line(err)
        assert code == 2 and "a Hugging Face model dir, not a training checkpoint" in line, line
    code, _out, err = run_cli("ckpt", "import-hf", save, "--out", tmp_path / "imported")
    assert code == 0, err
    assert not ran.exists()


def test_full_state_dict_alone_names_the_steps_that_load_it(model_dir, tmp_path):
    ran = tmp_path / "unpickled"
    save = _trainer_checkpoint(model_dir, tmp_path / "run", ran, weights=False)
    for command in ("validate", "import-hf"):
        args = ["--out", tmp_path / "imported"] if command == "import-hf" else []
        _code, _out, err = run_cli("ckpt", command, save, *args)
        line = one_error_line(err)
        assert "pytorch_model_fsdp.bin: Accelerate's FULL_STATE_DICT" in line, line
        assert "torch.load(weights_only=True)" in line and "from_pretrained" not in line, line
    assert not ran.exists()
