"""Build the Hugging Face causal LM and tokenizer a run trains, and what a checkpoint ships with it.

A model comes from a local model dir (weights, or only its config with `random_init`) or,
for tests and benchmarks, from a named shape (`tiny`, `qwen2-1.5b`, ...) with random
weights, so nothing is ever downloaded. The model's `forward` is replaced by one that
returns the summed token loss: the loss then runs inside the module call, where FSDP2 and
Megatron-FSDP have the LM head's weight gathered, and the state dict keeps the plain
Hugging Face parameter names (a wrapper module would prefix every name).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import torch

from trainer.config import ConfigError, ModelConfig
from trainer.kernels import apply_kernels
from trainer.local_paths import missing_path
from trainer.lora import apply_lora
from trainer.loss import linear_cross_entropy_sum
from trainer.model_source import load_checkpoint_weights, resolve_model_source

SUPPORTED_FAMILIES = ("qwen2", "qwen3", "llama")

# Public architecture shapes (config.json fields) for random-init runs; vocab sizes as shipped.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2-0.5b": dict(
        model_type="qwen2",
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
        max_position_embeddings=32768,
    ),
    "qwen2-1.5b": dict(
        model_type="qwen2",
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
        max_position_embeddings=32768,
    ),
    "qwen2.5-7b": dict(
        model_type="qwen2",
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        max_position_embeddings=32768,
    ),
    "qwen3-0.6b": dict(
        model_type="qwen3",
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
        max_position_embeddings=40960,
    ),
    "llama3.2-1b": dict(
        model_type="llama",
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=True,
        rope_theta=500000.0,
        max_position_embeddings=131072,
    ),
}


def load_tokenizer(cfg: ModelConfig):
    """The tokenizer named by `tokenizer`, else the model dir's (a checkpoint's huggingface/ or
    `hf_config` dir), else the embedded tiny one. Local files only: nothing is downloaded."""
    if cfg.tokenizer is not None:
        if not Path(cfg.tokenizer).exists():
            raise missing_path("model.tokenizer", cfg.tokenizer, "a local tokenizer dir")
        source = Path(cfg.tokenizer)
    else:
        model_source = resolve_model_source(cfg)
        source = model_source.tokenizer if model_source is not None else None
    if source is None:
        from trainer.tiny import build_tokenizer

        return build_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(source), local_files_only=True)


def build_hf_config(cfg: ModelConfig, tokenizer) -> Any:
    from transformers import AutoConfig

    source = resolve_model_source(cfg)
    if source is not None and source.derived is not None:
        derived = {k: v for k, v in source.derived.items() if k != "model_type"}
        config = AutoConfig.for_model(source.derived["model_type"], **{**derived, **cfg.overrides})
    elif source is not None and source.assets is not None:
        assets = str(source.assets)
        config = AutoConfig.from_pretrained(assets, local_files_only=True, **cfg.overrides)
    elif cfg.shape == "tiny":
        from transformers import Qwen2Config

        from trainer.tiny import tiny_config_kwargs

        config = Qwen2Config(
            **{**tiny_config_kwargs(len(tokenizer)), **cfg.overrides},
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    elif cfg.shape in SHAPES:
        fields = {**SHAPES[cfg.shape], **cfg.overrides}
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    else:
        raise ConfigError(
            f"model.shape: unknown shape {cfg.shape!r}; choose tiny, {', '.join(SHAPES)} or set "
            "model.path"
        )
    if config.model_type not in SUPPORTED_FAMILIES:
        raise ConfigError(
            f"model: family {config.model_type!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_FAMILIES)}"
        )
    if len(tokenizer) > config.vocab_size:
        raise ConfigError(
            f"model: tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{config.vocab_size}"
        )
    config._attn_implementation = cfg.attn_implementation
    return config


def build_model(cfg: ModelConfig, config: Any, device: torch.device, seed: int) -> torch.nn.Module:
    """fp32 model on `device` (the strategy casts compute to bf16); every rank builds the same one.
    From a checkpoint, the weights stream into the model built from its config."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    source = resolve_model_source(cfg) if not cfg.random_init else None
    if source is not None and source.checkpoint is None:
        model = AutoModelForCausalLM.from_pretrained(
            str(source.assets),
            config=config,
            dtype=torch.float32,
            attn_implementation=cfg.attn_implementation,
            local_files_only=True,
        ).to(device)
    else:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(
                config, dtype=torch.float32, attn_implementation=cfg.attn_implementation
            )
        if source is not None:
            load_checkpoint_weights(model, source)
    model.train()
    apply_lora(model, cfg, seed)  # no-op unless model.lora_rank > 0 or lora_adapter_path is set
    if cfg.activation_checkpointing:
        # transformers >= 5.2x renames gradient_checkpointing_enable to
        # activation_checkpointing_enable
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
        else:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
    apply_kernels(model, cfg)
    if cfg.compile:
        for layer in decoder_layers(model):
            layer.compile()  # in place: parameter names stay as they are
    attach_loss_forward(model, cfg.loss, cfg.loss_chunk_tokens)
    return model


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return list(model.model.layers)


def decoder_layer_class(model: torch.nn.Module) -> type:
    return type(decoder_layers(model)[0])


def attach_loss_forward(model: torch.nn.Module, mode: str, chunk_tokens: int) -> None:
    """Make `model(input_ids, position_ids, targets, attention_mask=None, cu_seqlens=None)` return
    the summed loss; `cu_seqlens` (packed rows) reaches every attention call (trainer/attention)."""

    def forward(self, input_ids, position_ids, targets, attention_mask=None, cu_seqlens=None):
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        hidden = self.model(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=attention_mask,
            use_cache=False,
            **packed,
        ).last_hidden_state
        return linear_cross_entropy_sum(hidden, self.lm_head.weight, targets, mode, chunk_tokens)

    model.forward = types.MethodType(forward, model)


def write_hf_assets(target: Path, config: Any, tokenizer, model_path: str | None) -> None:
    """config.json, tokenizer files and generation_config.json: what export needs besides
    weights."""
    from transformers import GenerationConfig

    config.save_pretrained(target)
    tokenizer.save_pretrained(target)
    source = _generation_config_of(model_path)
    if source is not None and source.is_file():
        (target / "generation_config.json").write_bytes(source.read_bytes())
    else:
        GenerationConfig(
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            do_sample=False,
        ).save_pretrained(target)


def _generation_config_of(model_path: str | None) -> Path | None:
    """generation_config.json of the model dir, or of a checkpoint's huggingface/ dir."""
    if model_path is None:
        return None
    try:
        source = resolve_model_source(ModelConfig(path=model_path, random_init=True))
    except ConfigError:
        return None
    if source is None or source.assets is None:
        return None
    return source.assets / "generation_config.json"


def count_parameters(config: Any) -> dict[str, int]:
    """Matmul parameters (what 6*N*tokens counts: layers + LM head) and the embedding, from the
    config."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    attention = hidden * head_dim * (heads + 2 * kv_heads) + heads * head_dim * hidden
    mlp = 3 * hidden * config.intermediate_size
    per_layer = attention + mlp
    head = config.vocab_size * hidden
    return {
        "matmul": layers * per_layer + head,
        "embedding": head,
        "attention_dim": heads * head_dim,
    }
