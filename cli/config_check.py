"""`mfsdp config check`: a run config checked as `mfsdp train` checks it, without training.

A config's mistakes (a key name, a type, a range, two keys that disagree, a path that is not
there) are found by `mfsdp train` before it loads torch; on a good config it then trains,
and on a 7B one loads the model. Here the same checks run, in the same order and with the
same lines (`load_checked_config`, `check_data_files`), and nothing is loaded, written or
started. What the machine has (GPUs, vLLM or megatron-fsdp installed, a wandb key) is left
out: a config is checked on a login node and run on another machine, whose `mfsdp train`
checks those before it loads anything.
"""

from __future__ import annotations

from typing import Any

from cli.launch import check_data_files, load_checked_config
from cli.missing_path import refuse_missing


def config_class(trainer: str) -> type:
    """The config class of `mfsdp train TRAINER` (sft or grpo)."""
    if trainer == "grpo":
        from trainer.grpo.config import GRPOConfig

        return GRPOConfig
    from trainer.config import SFTConfig

    return SFTConfig


def check_config(trainer: str, config_path: str | None, overrides: list[str]) -> Any:
    """The config `mfsdp train TRAINER --config CONFIG_PATH OVERRIDES` would run, after the
    checks it runs on it; the first problem exits 2 with the line train prints."""
    from trainer.model_source import check_tokenizer_present, resolve_model_source
    from trainer.prerequisites import check_context_length

    if config_path is not None:
        refuse_missing(config_path)
    cfg = load_checked_config(config_class(trainer), config_path, overrides)
    check_data_files(cfg.data, "rl" if trainer == "grpo" else "sft", config_path is not None)
    source = resolve_model_source(cfg.model)  # the config's part of `check_prerequisites`
    check_tokenizer_present(cfg.model, source)
    if trainer == "grpo":
        check_context_length(cfg, source)
    return cfg


def ok_line(trainer: str, config_path: str | None) -> str:
    """What a config that passed is called on stdout."""
    what = config_path if config_path is not None else "the overrides"
    verb = "is" if config_path is not None else "make"
    return f"ok: {what} {verb} a valid mfsdp {trainer} config"
