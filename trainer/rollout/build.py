"""Pick and start the rollout engine a run asked for (`rollout.name`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainer.config import ConfigError
from trainer.prerequisites import VLLM_BROKEN, VLLM_MISSING, installed
from trainer.rollout.base import RolloutEngine
from trainer.rollout.vllm_engine import vllm_available


def engine_name(requested: str) -> str:
    """`auto`: vllm when it imports, else hf."""
    if requested == "auto":
        return "vllm" if vllm_available() else "hf"
    if requested == "vllm" and not vllm_available():
        raise ConfigError(VLLM_MISSING if not installed("vllm") else VLLM_BROKEN)
    return requested


def eos_token_ids(tokenizer: Any, model_path: str | None) -> list[int]:
    """The tokenizer's EOS plus any the model's generation_config.json lists (Qwen lists two)."""
    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    if model_path and (Path(model_path) / "generation_config.json").is_file():
        from transformers import GenerationConfig

        extra = GenerationConfig.from_pretrained(
            model_path, local_files_only=True, trust_remote_code=False
        ).eos_token_id
        ids += [extra] if isinstance(extra, int) else list(extra or [])
    return sorted(set(ids))


def build_rollout_engine(
    name: str,
    *,
    hf_config: Any,
    tokenizer: Any,
    model_path: str | None,
    assets_dir: Path,
    write_assets: Any,
    device: torch.device,
    dtype: torch.dtype,
    max_model_len: int,
    seed: int,
    gpu_memory_utilization: float = 0.5,
    enforce_eager: bool = False,
    cuda_graphs: bool = True,
    fused_ops: bool = True,
    max_num_seqs: int = 1024,
) -> RolloutEngine:
    """An engine with the model's architecture; its weights are whatever the trainer pushes next.

    `write_assets(dir)` writes config.json and tokenizer files: vLLM starts from a model dir
    with dummy weights rather than reading a checkpoint the trainer is about to replace.
    """
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if name == "hf":
        from transformers import AutoModelForCausalLM

        from trainer.rollout.hf import HFRolloutEngine

        with torch.device(device):
            model = AutoModelForCausalLM.from_config(
                hf_config, dtype=dtype, trust_remote_code=False
            )
        return HFRolloutEngine(
            model,
            eos_token_ids(tokenizer, model_path),
            pad,
            cuda_graphs=cuda_graphs,
            fused_ops=fused_ops,
            max_num_seqs=max_num_seqs,
        )
    from trainer.rollout.vllm_engine import VLLMRolloutEngine

    assets_dir.mkdir(parents=True, exist_ok=True)
    write_assets(assets_dir)
    engine = VLLMRolloutEngine(
        str(assets_dir),
        dtype="float32" if dtype == torch.float32 else "bfloat16",
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        seed=seed,
        enforce_eager=enforce_eager,
        load_format="dummy",
    )
    engine.eos_token_ids = eos_token_ids(tokenizer, model_path)
    return engine
