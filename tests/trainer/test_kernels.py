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


def test_scope_to_model_gives_later_cpu_models_transformers_own_modules():
    """A liger patch swaps the family's norm and MLP classes and its RoPE module-wide (a
    stand-in swap here: liger-kernel needs CUDA); after `scope_to_model` a model built later in
    the process on CPU computes what it computed before the patch, and re-patching does not
    stack wrappers."""
    from transformers.models.qwen2 import modeling_qwen2

    from trainer.kernels import scope_to_model

    def cuda_only_rotary(q, k, *args, **kwargs):
        raise AssertionError("a CPU tensor reached the CUDA-only RoPE")

    class CudaOnlyNorm(modeling_qwen2.Qwen2RMSNorm):
        def forward(self, hidden_states):
            raise AssertionError("a model built after the patch got the patched norm class")

    cfg = ModelConfig()
    hf_config = build_hf_config(cfg, load_tokenizer(cfg))
    ids = torch.arange(3, 19).reshape(2, 8)

    def loss() -> torch.Tensor:
        model = build_model(cfg, hf_config, torch.device("cpu"), seed=0)
        return model(input_ids=ids, position_ids=torch.arange(8).expand(2, 8), targets=ids)

    expected = loss()
    untouched = dict(vars(modeling_qwen2))
    try:
        for _ in range(2):
            before = dict(vars(modeling_qwen2))
            modeling_qwen2.Qwen2RMSNorm = CudaOnlyNorm
            modeling_qwen2.apply_rotary_pos_emb = cuda_only_rotary
            modeling_qwen2.stray = 1
            scope_to_model(modeling_qwen2, before)
            assert modeling_qwen2.Qwen2RMSNorm is untouched["Qwen2RMSNorm"]
            assert not hasattr(modeling_qwen2, "stray")
            rotary = modeling_qwen2.apply_rotary_pos_emb
            assert rotary.transformers_rotary is untouched["apply_rotary_pos_emb"]
            assert torch.equal(loss(), expected)
    finally:
        vars(modeling_qwen2).update(untouched)
