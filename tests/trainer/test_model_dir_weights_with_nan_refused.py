"""A model dir whose weights hold NaN/Inf is refused before step 1, naming the file and the
tensor as import-hf does (exit 1), and leaves no run dir: it trained to "step 1: gradient
norm is nan", which blamed the step and left the run's config.yaml behind."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mfsdp_ckpt.errors import MfsdpFailedError
from tests.support.cli_errors import one_error
from tests.support.model_dirs import shard_with_index, train_from
from trainer.config import ModelConfig
from trainer.model import build_hf_config, build_model, load_tokenizer

EMBEDDING = "model.embed_tokens.weight"
DOWN = "model.layers.1.mlp.down_proj.weight"


def _poisoned(trainable, tmp_path: Path, name: str, value: float, count: int = 1) -> Path:
    """A copy of the trainable model dir with `count` values of the tensor `name` set to
    `value`."""
    model = Path(shutil.copytree(trainable[0], tmp_path / "model"))
    tensors = load_file(str(model / "model.safetensors"))
    tensors[name].view(-1)[:count] = value
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    return model


def _build(model: Path) -> torch.nn.Module:
    cfg = ModelConfig(path=str(model))
    return build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), 0)


@pytest.mark.parametrize(
    ("name", "value", "count"),
    [(EMBEDDING, math.nan, 1), (DOWN, math.inf, 3), (DOWN, -math.inf, 1)],
    ids=["nan-embedding", "inf-layer", "minus-inf"],
)
def test_the_loader_names_the_file_and_the_tensor(trainable, tmp_path, name, value, count):
    model = _poisoned(trainable, tmp_path, name, value, count)
    with pytest.raises(MfsdpFailedError) as raised:
        _build(model)
    assert str(raised.value) == (
        f"{model / 'model.safetensors'} [{name}]: holds {count} NaN/Inf value(s) (a diverged"
        " run?); training from it would only give NaN"
    )


def test_a_shard_is_named_as_the_file_holding_the_tensor(trainable, tmp_path):
    model = _poisoned(trainable, tmp_path, DOWN, math.nan)
    shard_with_index(model)
    shards = sorted(model.glob("model-*.safetensors"))
    holding = next(shard for shard in shards if DOWN in load_file(str(shard)))
    with pytest.raises(MfsdpFailedError, match=rf"^{holding} \[{DOWN}\]: holds 1 NaN/Inf"):
        _build(model)


def test_finite_weights_still_load(trainable):
    model = _build(trainable[0])
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())


def test_train_refuses_before_step_one_and_leaves_no_run_dir(trainable, tmp_path):
    model = _poisoned(trainable, tmp_path, EMBEDDING, math.nan)
    run = tmp_path / "run"
    code, stderr = train_from(model, trainable[1], run)
    assert code == 1, stderr
    one_error(stderr, f"{model / 'model.safetensors'} [{EMBEDDING}]: holds 1 NaN/Inf value(s)")
    assert "step 1" not in stderr
    assert not run.exists()
