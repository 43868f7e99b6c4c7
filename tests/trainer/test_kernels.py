"""`model.liger` / `model.loss=liger` without liger-kernel: one error naming the setting, before
any step runs (the kernels themselves are checked on a GPU, tests/trainer/test_kernels_gpu.py)."""

from __future__ import annotations

import sys

import pytest
import torch

from trainer.config import ConfigError, ModelConfig
from trainer.model import build_hf_config, build_model, load_tokenizer


@pytest.mark.parametrize(
    ("settings", "named"),
    [({"liger": True}, "model.liger=true"), ({"loss": "liger"}, "model.loss=liger")],
)
def test_liger_settings_without_liger_kernel_name_the_setting(monkeypatch, settings, named):
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # importing it now raises ImportError
    cfg = ModelConfig(**settings)
    with pytest.raises(ConfigError) as error:
        build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), seed=0)
    assert named in str(error.value) and "liger-kernel" in str(error.value)
    assert "\n" not in str(error.value)
