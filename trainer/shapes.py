"""The public architecture shapes a run may name (`model.shape`) to train a random-init
model of a released model's size without its weights.

A module of its own, free of torch: the config loader refuses an unknown shape
(`shape_refusal`) and the launcher checks a GRPO run's lengths against a shape's context
before torch is imported (trainer.prerequisites), and trainer.model builds the shape's model.
"""

from __future__ import annotations

from typing import Any

from trainer.config_suggestions import choice_refusal

TINY = "tiny"  # the embedded tiny model (trainer.tiny), sized to the run's tokenizer

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


SHAPE_NAMES = (TINY, *SHAPES)  # what model.shape may name


def shape_refusal(shape: str) -> str:
    """The line refusing `model.shape=shape`, a name no shape here has: every shape named,
    and the closest, case aside (`Qwen2-0.5B` is qwen2-0.5b). The config loader refuses it
    (`trainer.config.check_across_keys`): the model build met it only once torch had loaded,
    and a GRPO run's context check had no fields to hold its lengths to."""
    return choice_refusal("model.shape", shape, "unknown shape", SHAPE_NAMES, " or set model.path")
