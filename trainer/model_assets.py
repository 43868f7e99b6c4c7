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

Each checkpoint ships the tokenizer dir's own files as they are (`tokenizer_files`), as
import-hf copies them: saved again through transformers, tokenizer_config.json gained the
load settings `"is_local": true` and `"local_files_only": true` (in a file a user publishes
with the model), a Qwen2 one's tokenizer_class changed, and tokenizer.json was rewritten.

What is refused is one line naming the file, as a usage error (exit 2), as config.json's own
errors are: in the launching process before anything starts (`check_model_files`), and again
where a rank reads the file; so too a chat template that is no text, or named templates none
of which is the one rendered (`check_chat_template_value`), checked again where a tokenizer
without one is refused, as the tokenizer is loaded (a run started without the launcher).
This module imports neither torch nor transformers (a generation config is built with
transformers only where a dir holds one).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mfsdp_ckpt.check.printable import cut_to, first_of
from mfsdp_ckpt.convert.asset_rewrites import generation_config_note, generation_config_problem
from mfsdp_ckpt.convert.export_source import (
    MAX_JSON_ASSET_BYTES,
    MAX_JSON_ASSET_CONTAINERS,
    asset_files,
    check_generation_config,
    check_json_asset,
    check_local_assets,
)
from mfsdp_ckpt.convert.hf_config import HFConfigError
from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
from mfsdp_ckpt.format.model_files import CHAT_TEMPLATES_DIR, HF_CONFIG_FILE
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.unique_json import parse_json
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import ModelSource, resolve_model_source

# Where transformers takes a tokenizer dir's chat template from: chat_template.jinja (named
# `default`) with the named NAME.jinja of additional_chat_templates/, else, when that folder
# holds none, tokenizer_config.json's `chat_template`, a text or a list of named texts: of
# named templates, `default` is the one rendered
CHAT_TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_KEY = "chat_template"
DEFAULT_TEMPLATE = "default"
# The model files (`is_model_file`) that are no tokenizer's: the model's config and
# generation config (a checkpoint writes its own) and a multimodal processor's files
# (chat_template.json is a processor's template; a tokenizer reads chat_template.jinja)
_NOT_TOKENIZER_FILES = frozenset(
    {
        HF_CONFIG_FILE,
        GENERATION_CONFIG_FILE,
        "chat_template.json",
        "preprocessor_config.json",
        "processor_config.json",
        "video_preprocessor_config.json",
    }
)


def check_asset_dir(directory: Path, source: ModelSource | None) -> None:
    """Refuse, naming the file, what export would refuse to copy from `directory` (a model
    or tokenizer dir of the run whose model comes from `source`): see the module docstring."""
    with _usage_error():
        check_local_assets(directory, _checkpoint_of(directory, source))


def tokenizer_files(directory: Path, source: ModelSource | None) -> dict[str, bytes]:
    """The tokenizer files of `directory` (a tokenizer dir of the run whose model comes from
    `source`), name -> bytes, read as import-hf reads the model files it copies
    (`asset_files`: regular files that resolve inside the dir, or the checkpoint for its own
    huggingface/, bounded in size): what each checkpoint of the run ships as they are.
    Read once, as the tokenizer is loaded, so every checkpoint has the files it trained
    with, even if the dir changes or goes during the run."""
    with _usage_error():
        assets = asset_files(str(directory), "local", _checkpoint_of(directory, source))
        return {name: load() for name, load in assets.items() if name not in _NOT_TOKENIZER_FILES}


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


def check_chat_template_value(directory: Path) -> None:
    """The tokenizer in `directory` has a chat template transformers renders: named templates
    of additional_chat_templates/ include `default` (`_check_named_template_files`), and
    tokenizer_config.json's chat_template, where the template comes from it, is a text (a
    Jinja template) or named texts whose `default` is one: transformers loads any JSON value
    there, and `"chat_template": 5` was a traceback of 80 lines in every rank at the first
    row, a list of numbers one from transformers, named templates without `default` an
    error blaming the data's first row. Refused in one line naming the file or key, a usage
    error as a tokenizer without a template is (`load_tokenizer`)."""
    path = directory / TOKENIZER_CONFIG_FILE
    if os.path.lexists(directory / CHAT_TEMPLATE_FILE):
        return  # the template is chat_template.jinja's text, whatever else is named
    if _check_named_template_files(directory) or not os.path.lexists(path):
        return  # tokenizer_config.json's template is not read, or the tokenizer has none
    data = read_json_asset(path)
    template = data.get(TEMPLATE_KEY) if isinstance(data, dict) else None
    if template is None or isinstance(template, str):
        return  # none: load_tokenizer says the tokenizer has no chat template
    where = f"{path} [{TEMPLATE_KEY}]"
    if not isinstance(template, (list, dict)):
        raise ConfigError(
            f"{where}: {cut_to(repr(template), 80)} is not a string (a Jinja chat template) or a"
            " list of"
            f" named templates; {_TEMPLATE_REMEDY}"
        )
    named = _named_templates(template, where) if isinstance(template, list) else template
    if DEFAULT_TEMPLATE not in named:
        raise ConfigError(
            f"{where}: no template named {DEFAULT_TEMPLATE!r}, the one transformers renders"
            f" (named: {first_of([repr(name) for name in named], 3) or 'none'});"
            f" {_TEMPLATE_REMEDY}"
        )
    if not isinstance(named[DEFAULT_TEMPLATE], str):
        raise ConfigError(
            f"{where}: its {DEFAULT_TEMPLATE!r} template, the one transformers renders, is"
            f" {cut_to(repr(named[DEFAULT_TEMPLATE]), 80)}, not a string (a Jinja chat template);"
            f" {_TEMPLATE_REMEDY}"
        )


_TEMPLATE_REMEDY = f"write the template there as a string, or in {CHAT_TEMPLATE_FILE} beside it"


def _check_named_template_files(directory: Path) -> bool:
    """Whether `directory` (without chat_template.jinja) names its chat templates in files of
    additional_chat_templates/, which transformers then reads instead of tokenizer_config.json's
    `chat_template`; refused, naming the folder, when none of them is `default.jinja`:
    transformers renders only the template named `default`, and `mfsdp train` failed at the
    data's first row, blaming the row rather than the tokenizer dir."""
    folder = directory / CHAT_TEMPLATES_DIR
    # the files transformers reads as named templates, found as it finds them
    names = sorted(file.name for file in folder.glob("*.jinja")) if folder.is_dir() else []
    if names and f"{DEFAULT_TEMPLATE}.jinja" not in names:
        raise ConfigError(
            f"{folder}/: named chat templates ({first_of([repr(name) for name in names], 3)}),"
            f" none {DEFAULT_TEMPLATE}.jinja, and no {CHAT_TEMPLATE_FILE} beside the folder"
            f" (while it holds templates, tokenizer_config.json's {TEMPLATE_KEY} is not read);"
            f" transformers uses the template named {DEFAULT_TEMPLATE!r} or {CHAT_TEMPLATE_FILE}:"
            f" e.g. copy one of them to {directory / CHAT_TEMPLATE_FILE}"
        )
    return bool(names)


def _named_templates(entries: list[Any], where: str) -> dict[Any, Any]:
    """A list of named chat templates as transformers reads it, name -> template (the last
    of a name wins): each entry an object with a `name` and a `template`, else ConfigError
    naming the entry (transformers' own error named neither file nor key)."""
    for index, entry in enumerate(entries):
        if not (isinstance(entry, dict) and {"name", "template"} <= entry.keys()):
            raise ConfigError(
                f"{where}[{index}]: {cut_to(repr(entry), 80)} is not a named template"
                f' ({{"name": ..., "template": ...}}); {_TEMPLATE_REMEDY}'
            )
    return {entry["name"]: entry["template"] for entry in entries}


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
    the model dir, or of a checkpoint's huggingface/), checked; None when there is none, or
    when it is no JSON (`unparsable_generation_config`): transformers' model loader skips
    such a file, but GenerationConfig.from_pretrained and verl's and vLLM's readers fail on
    it, and every checkpoint and export carried it on without a word."""
    found = _generation_config_of(model_path)
    if found is None or generation_config_problem(found[1]) is not None:
        return None
    return found[1]


def unparsable_generation_config(model_path: str | None) -> str | None:
    """The note on `model_path`'s generation_config.json when it is no JSON, which the run's
    checkpoints leave out (as import-hf and export-hf do); None otherwise."""
    found = _generation_config_of(model_path)
    if found is None:
        return None
    problem = generation_config_problem(found[1])
    return None if problem is None else generation_config_note(str(found[0]), problem)


def _generation_config_of(model_path: str | None) -> tuple[Path, bytes] | None:
    """The path and checked bytes of the generation_config.json a run from `model_path`
    reads, None when there is none."""
    if model_path is None:
        return None
    try:
        source = resolve_model_source(ModelConfig(path=model_path, random_init=True))
    except ConfigError:
        return None
    if source is None or source.assets is None:
        return None
    data = generation_config_bytes(source.assets, source)
    return None if data is None else (source.assets / GENERATION_CONFIG_FILE, data)


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
