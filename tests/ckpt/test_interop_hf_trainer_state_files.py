"""The HF Trainer's state files are never called weights, and its output dir given as
model.path names the checkpoint to give.

Without FSDP the Trainer's checkpoint-N holds config.json and model.safetensors beside
optimizer.pt, scheduler.pt, scaler.pt, rng_state.pth (rng_state_<rank>.pth),
training_args.bin and trainer_state.json. With the weights gone those pickles were named
as the model's weights, with advice to convert them with transformers, which cannot; and
`model.path=OUTPUT` said it was "neither a Hugging Face model dir nor a checkpoint (...: a
Hugging Face model dir ...)".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from trainer.config import ConfigError, ModelConfig
from trainer.model_code import check_model_files
from trainer.model_source import resolve_model_source

STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state_0.pth", "training_args.bin")


def _trainer_run(run: Path, steps=(2, 4), weights: bool = True) -> Path:
    """The Trainer's output dir: checkpoint-N per step, each a model dir (or, without
    `weights`, its config alone) beside the Trainer's state pickles (plain dicts)."""
    model = tiny_causal_lm("qwen2", vocab=64)
    for step in steps:
        checkpoint = run / f"checkpoint-{step}"
        if weights:
            model.save_pretrained(checkpoint)
        else:
            model.config.save_pretrained(checkpoint)
        for name in STATE_FILES:
            torch.save({"file": name}, checkpoint / name)
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return run


def _assert_named_without_weights(line: str) -> None:
    assert "an HF Trainer checkpoint (trainer_state.json, " in line, line
    assert "without the model's weights" in line, line
    assert "is a pickle" not in line and "from_pretrained" not in line, line


@pytest.mark.parametrize("level", ["run", "checkpoint"])
def test_a_checkpoint_without_weights_is_named_not_its_state_as_weights(level, tmp_path):
    run = _trainer_run(tmp_path / "out", weights=False)
    given = run if level == "run" else run / "checkpoint-4"
    for command in ("validate", "inspect"):
        code, _out, err = run_cli("ckpt", command, given)
        line = one_error_line(err)
        assert code == 2 and line.startswith(f"error: {run / 'checkpoint-4'}: "), err
        _assert_named_without_weights(line)
        assert "not a checkpoint" not in line


def test_import_hf_and_model_path_name_it_too(tmp_path):
    checkpoint = _trainer_run(tmp_path / "out", weights=False) / "checkpoint-4"
    code, _out, err = run_cli("ckpt", "import-hf", checkpoint, "--out", tmp_path / "imported")
    line = one_error_line(err)
    assert code == 1 and "it is an HF Trainer checkpoint" in line, err
    _assert_named_without_weights(line)
    with pytest.raises(ConfigError) as refused:
        resolve_model_source(ModelConfig(path=str(checkpoint)))
    _assert_named_without_weights(str(refused.value))


def test_pickled_weights_beside_the_state_are_still_named_as_weights(tmp_path):
    """Only the Trainer's state is left out: an older save_pretrained's pytorch_model.bin
    beside it is the model's weights, named as a pickle to convert."""
    checkpoint = _trainer_run(tmp_path / "out", weights=False) / "checkpoint-4"
    torch.save({"file": "weights"}, checkpoint / "pytorch_model.bin")
    cfg = ModelConfig(path=str(checkpoint))
    with pytest.raises(ConfigError) as refused:
        check_model_files(cfg, resolve_model_source(cfg))
    said = str(refused.value)
    assert "as pickles (pytorch_model.bin)" in said, said
    assert not any(name in said for name in STATE_FILES), said


def test_model_path_of_the_output_dir_names_its_newest_checkpoint(tmp_path):
    run = _trainer_run(tmp_path / "out", steps=(4, 10))
    with pytest.raises(ConfigError) as refused:
        resolve_model_source(ModelConfig(path=str(run)))
    said = str(refused.value)
    assert said == (
        f"model.path: {run} is an HF Trainer output dir, whose newest checkpoint"
        f" checkpoint-10 is a Hugging Face model dir: give model.path={run / 'checkpoint-10'}"
    )
    assert resolve_model_source(ModelConfig(path=str(run / "checkpoint-10"))).assets == (
        run / "checkpoint-10"
    )
