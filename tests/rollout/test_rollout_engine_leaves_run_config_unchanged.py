"""The hf rollout engine is built from a copy of the run's model config.

`AutoModelForCausalLM.from_config(config, dtype=...)` sets `config.dtype` to the engine's
dtype, and GRPO saves that same config object into every step's huggingface/: a bf16 model
trained with an fp32 engine (as on CPU) was saved, and then exported, as float32."""

from __future__ import annotations

import torch
from transformers import Qwen2Config

from tests.support.rollout import build_cpu_engine
from trainer.model import write_hf_assets
from trainer.tiny import build_tokenizer, tiny_config_fields


def test_the_hf_engine_keeps_the_run_configs_dtype(tmp_path):
    tokenizer = build_tokenizer()
    config = Qwen2Config(**tiny_config_fields(tokenizer), dtype="bfloat16")
    assert config.dtype == torch.bfloat16

    def write_assets(target):
        write_hf_assets(target, config, tokenizer, None)

    engine = build_cpu_engine("hf", config, tmp_path / "assets", write_assets, tokenizer=tokenizer)
    assert engine is not None
    assert config.dtype == torch.bfloat16  # the run saves this config
    write_hf_assets(tmp_path / "saved", config, tokenizer, None)
    assert '"dtype": "bfloat16"' in (tmp_path / "saved" / "config.json").read_text()
