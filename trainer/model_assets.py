"""The files a run reads or copies from its model and tokenizer dirs, checked as data first.

A run reads config.json, the tokenizer files and generation_config.json from its model dir
(`model.path`, a checkpoint's huggingface/, `model.hf_config`) and its tokenizer dir
(`model.tokenizer`, else the model dir), and copies generation_config.json into every
checkpoint it saves. transformers follows any link, reads a file whole however large and
takes a FIFO for a file that is not there, and a copy did the same: a generation_config.json
linked to a user's file outside the model dir was copied into every checkpoint (and each
export of it) whenever `model.tokenizer` named another dir, and a 1.5 GB one was read into
memory and written into each step. So each such dir is checked as export checks the assets
it copies (`check_local_assets`), whether or not it is also the tokenizer's: regular files
that resolve inside the dir (inside the checkpoint, for its own huggingface/; a model dir
may also link to blobs of the Hugging Face cache, as a cache snapshot and a `--local-dir`
download do: `safe_files.model_dir_root`), bounded in size, each JSON one parsed with
bounded memory, nested at most MAX_JSON_DEPTH deep and giving each key once, and
generation_config.json one transformers builds its GenerationConfig from
(`mfsdp_ckpt.format.generation_config`): `max_new_tokens: -5` was carried into every
checkpoint, whose exports then did not load.

What is refused is one line naming the file, as a usage error (exit 2), as config.json's own
errors are: in the launching process before anything starts (`check_model_files`), and again
where a rank reads the file. This module imports neither torch nor transformers (a
generation config is built with transformers only where a dir holds one).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mfsdp_ckpt.convert.export_source import (
    MAX_JSON_ASSET_BYTES,
    MAX_JSON_ASSET_CONTAINERS,
    check_generation_config,
    check_json_asset,
    check_local_assets,
)
from mfsdp_ckpt.convert.hf_config import HFConfigError
from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import parse_json
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import ModelSource, resolve_model_source


def check_asset_dir(directory: Path, source: ModelSource | None) -> None:
    """Refuse, naming the file, what export would refuse to copy from `directory` (a model
    or tokenizer dir of the run whose model comes from `source`): see the module docstring."""
    with _usage_error():
        check_local_assets(directory, _checkpoint_of(directory, source))


def read_json_asset(path: Path) -> Any:
    """The JSON in a model or tokenizer dir's file, read for what it names (an auto_map, a
    tokenizer_class) with the bounds of a JSON asset: at most MAX_JSON_ASSET_BYTES and
    MAX_JSON_ASSET_CONTAINERS objects and arrays, counted before it is parsed (each one is a
    Python object: a file of empty arrays within the byte cap takes many times its size in
    memory to parse), each key once; else HFConfigError naming it."""
    try:
        text = safe_files.read_text(path, MAX_JSON_ASSET_BYTES)
    except CheckpointFileError as err:
        raise HFConfigError(str(err)) from None
    return parse_json(text, str(path), HFConfigError, MAX_JSON_ASSET_CONTAINERS)


def generation_config_bytes(directory: Path, source: ModelSource | None) -> bytes | None:
    """`directory`'s generation_config.json as checked bytes (a regular file inside the dir,
    as `check_asset_dir` checks it, and one transformers reads: `check_json_asset`), None
    when it has none."""
    path = directory / GENERATION_CONFIG_FILE
    if not os.path.lexists(path):
        return None
    checkpoint = _checkpoint_of(directory, source)
    root, within = (
        (checkpoint, "the checkpoint")
        if checkpoint is not None
        else (safe_files.model_dir_root(directory), f"the model dir {directory}")
    )
    with _usage_error():
        safe_files.regular_file(path, root, within)
        data = safe_files.read_bytes(path, MAX_JSON_ASSET_BYTES, root)
        check_json_asset(GENERATION_CONFIG_FILE, path, data)
        check_generation_config(path, data)
    return data


def copied_generation_config(model_path: str | None) -> bytes | None:
    """The generation_config.json each checkpoint of a run from `model_path` ships (that of
    the model dir, or of a checkpoint's huggingface/), checked; None when there is none."""
    if model_path is None:
        return None
    try:
        source = resolve_model_source(ModelConfig(path=model_path, random_init=True))
    except ConfigError:
        return None
    if source is None or source.assets is None:
        return None
    return generation_config_bytes(source.assets, source)


def _checkpoint_of(directory: Path, source: ModelSource | None) -> str | None:
    """The checkpoint `directory` is part of (its huggingface/ dir: links may lead anywhere
    in the checkpoint, as for export), else None: a model dir, whose files stay inside it
    (`safe_files.model_dir_root`)."""
    if source is None or source.checkpoint is None:
        return None
    checkpoint = os.path.realpath(source.checkpoint.root)
    if os.path.commonpath([os.path.realpath(directory), checkpoint]) != checkpoint:
        return None
    return checkpoint


@contextlib.contextmanager
def _usage_error() -> Iterator[None]:
    """A file export would refuse, refused as a usage error (the run's own model files are
    its input, as config.json is), in the same line."""
    try:
        yield
    except CheckpointFileError as err:
        raise ConfigError(str(err)) from None
