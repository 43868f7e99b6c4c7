"""What a Hugging Face config says the weights must be: names and shapes, without weights.

The model is instantiated on the `meta` device, so this costs no memory and works for any
family transformers knows (Qwen2/2.5, Qwen3, Llama 3, ...), with no per-family table to
keep in sync. `config.json` is parsed as JSON, never executed (`trust_remote_code` is off).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


class HFConfigError(ValueError):
    """config.json is missing, unreadable, or names a model transformers cannot build."""


@dataclass(frozen=True)
class ExpectedWeights:
    model_type: str
    required: dict[str, tuple[int, ...]]  # parameters (tied ones once)
    allowed: dict[str, tuple[int, ...]]  # every key a full state dict may hold
    tie_word_embeddings: bool


def load_hf_config(path: str | os.PathLike):
    """A transformers config from a directory or a config.json path (local files only)."""
    from transformers import AutoConfig

    path = Path(path)
    config_file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(config_file.read_text())
    except FileNotFoundError:
        raise HFConfigError(f"{config_file}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise HFConfigError(f"{config_file}: not valid JSON ({err})") from None
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str):
        raise HFConfigError(f"{config_file}: no model_type")
    try:
        return AutoConfig.for_model(**data)
    except Exception as err:
        raise HFConfigError(f"{config_file}: transformers cannot read it ({err})") from None


def expected_weights(config) -> ExpectedWeights:
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    required = {name: tuple(p.shape) for name, p in model.named_parameters()}
    allowed = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    tied = bool(getattr(config, "tie_word_embeddings", False))
    return ExpectedWeights(config.model_type, required, allowed, tied)
