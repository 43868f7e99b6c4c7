"""`mfsdp config check`: a run config checked as `mfsdp train` checks it, without training.

A config's mistakes (a key name, a type, a range, two keys that disagree, a path that is not
there) are found by `mfsdp train` before it loads torch; on a good config it then trains,
and on a 7B one loads the model. Here the same checks run, in the same order and with the
same lines (`load_checked_config`, `check_data_files`, `check_first_rows`: each data file's
first row), and nothing is written or started.
`model.overrides` alone need the model's transformers config: where they are given, the
tokenizer and that config are built as train builds them (no weights, no model). What the
machine has (GPUs, vLLM or megatron-fsdp installed, a wandb key) is left out: a config is
checked on a login node and run on another machine, whose `mfsdp train` checks those before
it loads anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cli.first_rows import check_first_rows
from cli.launch import check_data_files, load_checked_config
from cli.missing_path import refuse_missing

if TYPE_CHECKING:
    from trainer.config import ModelConfig
    from trainer.model_source import ModelSource


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
    from trainer.tokenizer_vocabulary import check_tokenizer_vocabulary

    if config_path is not None:
        refuse_missing(config_path)
    cfg = load_checked_config(config_class(trainer), config_path, overrides)
    check_data_files(cfg.data, "rl" if trainer == "grpo" else "sft", config_path is not None)
    check_first_rows(cfg, "rl" if trainer == "grpo" else "sft")
    source = resolve_model_source(cfg.model)  # the config's part of `check_prerequisites`
    check_tokenizer_present(cfg.model, source)
    check_tokenizer_vocabulary(cfg.model, source)
    _refuse_uncomputable_record(source)
    if trainer == "grpo":
        check_context_length(cfg, source)
    _check_model_overrides(cfg.model)
    return cfg


def _check_model_overrides(model: ModelConfig) -> None:
    """`model.overrides` checked as train checks them before it builds the model: the
    tokenizer, then the transformers config of the model source with the overrides
    (`load_tokenizer`, `build_hf_config`, the functions train calls; no weights are read and
    no model is built). A misspelt key, a `hidden_act` transformers lacks or text where it
    takes a bool passed here and was refused only by train, after torch had loaded on every
    node. This needs transformers (and torch), so it runs only where overrides are given."""
    if not model.overrides:
        return
    from trainer.model import build_hf_config, load_tokenizer

    build_hf_config(model, load_tokenizer(model))


def _refuse_uncomputable_record(source: ModelSource | None) -> None:
    """A checkpoint `model.path` names whose Megatron record (verl's transformer_config.json,
    Bridge's run_config.yaml, Megatron-LM's args) holds a setting no family here computes
    (qk_l2_norm, a sigmoid router, windowed attention) is refused as train refuses it when it
    loads the weights (`record_agreement.refuse_uncomputable`, the same rule and line): the
    config.json it would build the model from computes another model. A config derived from
    the record was refused as it was derived (`resolve_model_source`)."""
    from mfsdp_ckpt.convert.hf_config import read_config_json
    from mfsdp_ckpt.convert.megatron_config import MegatronConfigError
    from mfsdp_ckpt.convert.record_agreement import refuse_uncomputable
    from mfsdp_ckpt.storage.reader import CheckpointReader
    from trainer.config_base import ConfigError

    if source is None or source.assets is None or source.checkpoint is None:
        return
    given = read_config_json(source.assets)[1]
    reader = CheckpointReader(source.checkpoint.dist_ckpt)
    try:
        refuse_uncomputable(
            given, source.checkpoint, reader, f"{source.assets_key} {source.assets}"
        )
    except MegatronConfigError as err:
        raise ConfigError(f"model.path: {err}") from None


def ok_line(trainer: str, config_path: str | None) -> str:
    """What a config that passed is called on stdout."""
    what = config_path if config_path is not None else "the overrides"
    verb = "is" if config_path is not None else "make"
    return f"ok: {what} {verb} a valid mfsdp {trainer} config"
