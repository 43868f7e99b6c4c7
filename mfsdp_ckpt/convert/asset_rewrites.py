"""Model files that import-hf and export-hf write otherwise than they found them, each in a note.

Two kinds of file are not copied as they are, wherever a model's config and tokenizer files
are copied (`export_source.asset_files`: export-hf, its --hf-config, a LoRA merge, import-hf's
hf layout):

* config.json or tokenizer_config.json with an `auto_map`. It names Python files shipped
  with the model, which transformers runs under trust_remote_code=True and mfsdp never
  runs (nor copies from a model dir). Every family import-hf and export-hf convert is one
  transformers has built in (a model_type it lacks is refused, naming the auto_map, before
  anything is written: only the shipped code could build it), and the weights are
  converted as that built-in model, so its auto_map is redundant: kept, it named code files
  the output lacks (a loader with trust_remote_code=True, as verl and vLLM are often run,
  failed on the first one) and `mfsdp train` refused the output. The file is written
  without it, and a note says so.
* generation_config.json that is not JSON. transformers' model loader skips it as a file
  that is not there, while `GenerationConfig.from_pretrained` and the generation-config
  readers of verl and vLLM fail on it: it is left out, and a note says so. One that is JSON
  but one GenerationConfig refuses (`max_new_tokens: -5`) stops `from_pretrained` itself,
  and stays refused where transformers' classes are built (`check_generation_config`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping
from functools import partial
from typing import Any

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage.unique_json import json_problem, loads_unique

CODE_KEY = "auto_map"  # where config.json and tokenizer_config.json name shipped code
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CODE_NAMING_FILES = (HF_CONFIG_FILE, TOKENIZER_CONFIG_FILE)

# What loads each file without its auto_map's code, for the note
_LOADED_WITHOUT_CODE = {
    HF_CONFIG_FILE: "transformers builds its model_type's own classes without that code",
    TOKENIZER_CONFIG_FILE: "AutoTokenizer loads the tokenizer by its tokenizer_class without"
    " that code",
}


def code_map(data: bytes) -> Any:
    """The auto_map of the JSON object `data`, None when it names nothing (none, or an
    empty one, as training reads it: `trainer.model_code`) or `data` is no JSON object
    (such a file is refused where it is read, not here)."""
    return _json_object(data).get(CODE_KEY) or None


def _json_object(data: bytes) -> dict:
    """The JSON object `data`, {} when it is none."""
    try:
        parsed = loads_unique(data)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def transformers_has(model_type: Any) -> bool:
    """Whether transformers has its own classes for `model_type`: a config with an auto_map
    is only then rewritten, else left for the refusal naming its family and the auto_map
    (`code_map_words`). Imports transformers' table of families (seconds), so it is asked
    only of a config that has an auto_map."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return isinstance(model_type, str) and model_type in CONFIG_MAPPING_NAMES


def without_code_map(data: bytes) -> bytes:
    """The JSON object `data` written again without its auto_map (every other key, in its
    order, as it was)."""
    parsed = loads_unique(data)
    del parsed[CODE_KEY]
    return (json.dumps(parsed, indent=2, ensure_ascii=False) + "\n").encode()


def code_files(auto_map: Any) -> list[str]:
    """The Python files an auto_map names (`configuration_x.XConfig` is configuration_x.py;
    a tokenizer's entry is a [slow, fast] pair, either may be None; `repo--module.Class`
    names another repository's file)."""
    entries = auto_map.values() if isinstance(auto_map, dict) else [auto_map]
    flat = [
        item
        for entry in entries
        for item in (entry if isinstance(entry, (list, tuple)) else [entry])
        if isinstance(item, str)
    ]
    return sorted({f"{item.split('--')[-1].rsplit('.', 1)[0]}.py" for item in flat})


def code_map_note(where: str, name: str, auto_map: Any) -> str:
    """The note on a file written without its auto_map (see the module docstring)."""
    named = first_of(code_files(auto_map), 3) or repr(auto_map)[:80]
    return (
        f"{where}: its {CODE_KEY} (code shipped with the model: {named}) left out of what is"
        f" written; mfsdp never runs such code, and {_LOADED_WITHOUT_CODE[name]}"
    )


def code_map_words(data: Any) -> str:
    """What the line refusing the config.json `data` (parsed) as a model family mfsdp does
    not convert says first, when its auto_map names shipped code: such a family is built
    only by that code, which mfsdp never runs, so the key is why, and is named ("" when it
    has none)."""
    auto_map = data.get(CODE_KEY) if isinstance(data, dict) else None
    if not auto_map:
        return ""
    named = first_of(code_files(auto_map), 3) or repr(auto_map)[:80]
    return f"its {CODE_KEY} names code shipped with the model ({named}), which mfsdp never runs"


def generation_config_problem(data: bytes) -> str | None:
    """Why generation_config.json's `data` is no file its readers read (not JSON, in
    `json_problem`'s words), None when it is JSON."""
    try:
        loads_unique(data)
    except ValueError as err:
        return f"not valid JSON ({json_problem(err)})"
    return None


def generation_config_note(where: str, problem: str) -> str:
    """The note on a generation_config.json left out (see the module docstring)."""
    return (
        f"{where}: {problem}; left out of what is written (transformers' model loader skips"
        " it, GenerationConfig.from_pretrained and verl's and vLLM's readers fail on it)"
    )


def rewrite_assets(
    loaders: MutableMapping[str, Callable[[], bytes]], where: Callable[[str], str]
) -> list[str]:
    """Rewrite, in place, the loaders of the files an import or export copies (name ->
    loader; `where(name)` is the file as notes name it): an auto_map left out of
    config.json and tokenizer_config.json, a generation_config.json that is not JSON left
    out. Returns one note for each file rewritten or left out. A config.json whose
    model_type transformers lacks keeps its auto_map: that model is built only by the code
    it names, and is refused, naming both, where the config is read (`code_map_words`)."""
    notes = []
    for name in CODE_NAMING_FILES:
        if name not in loaders:
            continue
        data = loaders[name]()
        auto_map = code_map(data)
        if auto_map is None:
            continue
        if name == HF_CONFIG_FILE and not transformers_has(_json_object(data).get("model_type")):
            continue  # only the shipped code builds it: refused where the config is read
        loaders[name] = partial(bytes, without_code_map(data))
        notes.append(code_map_note(where(name), name, auto_map))
    if GENERATION_CONFIG_FILE in loaders:
        problem = generation_config_problem(loaders[GENERATION_CONFIG_FILE]())
        if problem is not None:
            del loaders[GENERATION_CONFIG_FILE]
            notes.append(generation_config_note(where(GENERATION_CONFIG_FILE), problem))
    return notes


__all__ = [
    "CODE_KEY",
    "CODE_NAMING_FILES",
    "code_map",
    "code_map_words",
    "generation_config_problem",
    "rewrite_assets",
]
