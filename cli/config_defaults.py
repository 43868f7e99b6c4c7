"""What `mfsdp config defaults TRAINER` prints: every key of the trainer's config at its
default, as a YAML file `--config` takes, that `mfsdp config check` passes once
data.train_files is set.

GRPO's default lengths are verl's (data.max_prompt_length and rollout.max_response_length,
512 each) and its default model, model.shape=tiny, takes 512 tokens: the file printed, with
only data.train_files set, was refused for lengths past the model's context. The two are
printed shrunk in proportion to fit the default model, and a comment says so and gives
their defaults; the config classes keep verl's, so a verl config reads as verl reads it.
"""

from __future__ import annotations

from typing import Any

from trainer.config import SFTConfig, config_to_dict, dump_yaml
from trainer.grpo.config import GRPOConfig
from trainer.prerequisites import context_limit, shape_config_fields


def defaults_text(trainer: str) -> str:
    """The YAML text `mfsdp config defaults TRAINER` (sft or grpo) prints."""
    cfg: Any = GRPOConfig() if trainer == "grpo" else SFTConfig()
    fitted = _lengths_fitted(cfg) if trainer == "grpo" else ""
    which = "every key, at its default" + (" but the two below" if fitted else "")
    return f"# mfsdp train {trainer} --config THIS_FILE   ({which})\n{fitted}" + dump_yaml(
        config_to_dict(cfg)
    )


def _lengths_fitted(cfg: Any) -> str:
    """Shrink `cfg`'s prompt and response lengths, in proportion, to the context of its
    model.shape where they add up past it; the comment line that says so ("" where they
    fit)."""
    fields = shape_config_fields(cfg.model.shape)
    limit = None if fields is None else context_limit(fields)
    prompt, response = cfg.data.max_prompt_length, cfg.rollout.max_response_length
    if limit is None or prompt + response <= limit.tokens:
        return ""
    cfg.data.max_prompt_length = limit.tokens * prompt // (prompt + response)
    cfg.rollout.max_response_length = limit.tokens - cfg.data.max_prompt_length
    return (
        f"# data.max_prompt_length + rollout.max_response_length ="
        f" {cfg.data.max_prompt_length} + {cfg.rollout.max_response_length}: the"
        f" {limit.tokens} tokens model.shape={cfg.model.shape} takes (their defaults, verl's,"
        f" {prompt} + {response}, need a model.path of a longer context)\n"
    )
