"""Model files are data: nothing in a model dir, checkpoint or tokenizer dir runs as code.

transformers runs the Python files shipped beside a config or tokenizer when its
`auto_map` names them (and on a terminal asks "Do you wish to run the custom code? [y/N]",
which a piped `y` answers; under `--json` the question landed in the output), and it
unpickles `*.bin` weights. mfsdp does neither: every transformers call that reads a model,
config, tokenizer or generation config passes `trust_remote_code=False` (and
`use_safetensors=True` for weights), and the checks here refuse such files in one line
naming the file and the key, in the launching process before anything starts and again
by each loader in the ranks. Before any of them is read, the files themselves are checked
as data (`trainer.model_assets`): inside their dir, regular, bounded. Nothing here imports
torch or transformers, except `check_tokenizer_class`, which asks transformers which
tokenizer classes it has.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert.hf_config import HFConfigError, check_geometry, read_config_json
from mfsdp_ckpt.format.hf_trainer import full_state_dict_file, not_model_weights
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage.safetensors_source import PICKLED_WEIGHTS
from trainer.config import ConfigError, ModelConfig
from trainer.model_assets import (
    TOKENIZER_CONFIG_FILE,
    check_asset_dir,
    check_chat_template_value,
    read_json_asset,
    unparsable_generation_config,
)
from trainer.model_dtype import dtype_problem, named_dtype
from trainer.model_source import ModelSource
from trainer.tokenizer_ids import check_token_ids

SUPPORTED_FAMILIES = ("qwen2", "qwen3", "llama")
CODE_KEY = "auto_map"  # where config.json and tokenizer_config.json name shipped code


def check_model_files(cfg: ModelConfig, source: ModelSource | None) -> None:
    """The files this run's model and tokenizer come from, and the generation config its
    checkpoints copy, checked as data (see the module docstring), and the tokenizer's chat
    template as text; the launching process calls it once `model.path` is resolved. The
    model dir is checked whether or not the tokenizer comes from it: its
    generation_config.json is read and copied either way."""
    assets = source.assets if source is not None else None
    _refuse_dtype(cfg.overrides, "model.overrides")
    if assets is not None:
        check_model_config(assets)
        check_asset_dir(assets, source)
        if source is not None and source.checkpoint is None and not cfg.random_init:
            check_weights_not_pickled(assets)
    left_out = unparsable_generation_config(cfg.path)  # checked as each checkpoint copies it
    if left_out is not None:
        logging.getLogger("mfsdp.config").warning("note: %s", left_out)
    tokenizer = Path(cfg.tokenizer) if cfg.tokenizer is not None else None
    if tokenizer is None and source is not None:
        tokenizer = source.tokenizer
    if tokenizer is not None and tokenizer.is_dir():
        if source is None or tokenizer not in (assets, source.tokenizer_dir):  # not yet checked
            check_asset_dir(tokenizer, source)
        check_tokenizer_files(tokenizer)
        check_chat_template_value(tokenizer)  # refused here once, not in every rank
        vocab_size = _vocab_size(cfg, source)
        if vocab_size is not None:
            check_token_ids(tokenizer, assets, vocab_size)


def check_model_config(assets: Path) -> None:
    """The model's config.json names no shipped code and a family mfsdp trains (another
    model_type is either one transformers has no class for, which only shipped code could
    build, or one this trainer does not support), sizes a model can have
    (`check_geometry`, as `model.overrides` are checked) and a dtype transformers reads:
    plain JSON, so `mfsdp config check` refuses what train would, before torch loads."""
    config_file, data = read_config_json(assets)
    _refuse_code(config_file, data)
    model_type = data["model_type"]
    if model_type not in SUPPORTED_FAMILIES:
        raise ConfigError(
            f"{config_file}: model_type {cut_to(repr(model_type), 80)} is not a family mfsdp trains"
            f" ({', '.join(SUPPORTED_FAMILIES)})"
        )
    try:
        check_geometry(data, config_file)
    except HFConfigError as err:
        raise ConfigError(str(err)) from None
    _refuse_dtype(data, str(config_file))


def _refuse_dtype(fields: dict[str, Any], where: str) -> None:
    """ConfigError naming `where` and the key when `fields` name a dtype transformers cannot
    build the model in (`trainer.model_dtype`)."""
    found = named_dtype(fields)
    problem = dtype_problem(found[1]) if found is not None else None
    if found is not None and problem is not None:
        raise ConfigError(f"{where}: {found[0]} {problem}")


def _vocab_size(cfg: ModelConfig, source: ModelSource | None) -> int | None:
    """The vocab_size the run's model is built with, as its config states it
    (`model.overrides`, a checkpoint's derived config, config.json); None where none does
    (a named shape sizes its vocab from the tokenizer, and a config without one takes its
    class's default)."""
    fields: Any = cfg.overrides
    if "vocab_size" not in fields and source is not None:
        if source.derived is not None:
            fields = source.derived
        elif source.assets is not None:
            fields = read_config_json(source.assets)[1]
    value = fields.get("vocab_size")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_tokenizer_files(directory: Path) -> None:
    """tokenizer_config.json and config.json of a tokenizer dir name no shipped code:
    AutoTokenizer follows either one's auto_map (config.json's may be another family's,
    a tokenizer borrowed from another model: only its code matters here)."""
    for name in (TOKENIZER_CONFIG_FILE, HF_CONFIG_FILE):
        path = directory / name
        if os.path.lexists(path):
            _refuse_code(path, read_json_asset(path))


def check_tokenizer_class(directory: Path) -> None:
    """tokenizer_config.json's tokenizer_class, when it names one, is a class transformers
    has (with or without its `Fast` suffix, as AutoTokenizer looks it up): only shipped
    code could provide another. Imports transformers, so it runs in the ranks only."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    path = directory / TOKENIZER_CONFIG_FILE
    if not os.path.lexists(path):
        return
    data = read_json_asset(path)
    name = data.get("tokenizer_class") if isinstance(data, dict) else None
    if name is None:
        return
    known = isinstance(name, str) and any(
        tokenizer_class_from_name(candidate) is not None
        for candidate in (name, name.removesuffix("Fast"), f"{name}Fast")
    )
    if not known:
        raise ConfigError(
            f"{path}: tokenizer_class {cut_to(repr(name), 80)} is not a tokenizer transformers has"
            " (one"
            " that needs code shipped with it, which mfsdp never runs)"
        )


def check_weights_not_pickled(assets: Path) -> None:
    """A model dir whose weights are only pickles (`pytorch_model.bin`) is refused before
    anything loads: unpickling can run code, so mfsdp reads safetensors only. The HF
    Trainer's state .bin files beside them (training_args.bin) are no weights, and not named."""
    names = sorted(entry.name for entry in os.scandir(assets))
    if any(name.endswith(".safetensors") for name in names):
        return
    full = full_state_dict_file(names)  # from_pretrained does not load it
    if full is not None:
        raise ConfigError(f"model.path: {assets}: {full}")
    pickled = [n for n in names if n.endswith(PICKLED_WEIGHTS) and not not_model_weights(n)]
    if pickled:
        raise ConfigError(
            f"model.path: {assets} holds its weights only as pickles ({first_of(pickled, 2)}),"
            " which mfsdp never loads (unpickling can run code); where you trust them, convert"
            " them with transformers (from_pretrained, then save_pretrained writes safetensors)"
        )


def _refuse_code(path: Path, data: Any) -> None:
    """ConfigError naming `path` when its JSON `data` has an auto_map."""
    if isinstance(data, dict) and data.get(CODE_KEY):
        raise ConfigError(
            f"{path}: {CODE_KEY} names code shipped with the model"
            f" ({cut_to(repr(_first_entry(data[CODE_KEY])), 120)}), which mfsdp never runs; use a"
            " model"
            f" and tokenizer transformers has itself ({', '.join(SUPPORTED_FAMILIES)})"
        )


def _first_entry(auto_map: Any) -> Any:
    """What an auto_map points at first (`configuration_x.XConfig`), to name in the error."""
    if isinstance(auto_map, dict) and auto_map:
        return next(iter(auto_map.values()))
    if isinstance(auto_map, (list, tuple)) and auto_map:
        return auto_map[0]
    return auto_map
