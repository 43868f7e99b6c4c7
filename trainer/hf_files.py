"""A Hugging Face model dir's files besides its weights: what a step's `huggingface/` holds
(export needs it) and what the embedded tiny model dir holds.

A tokenizer read from a dir is shipped as that dir's own files, byte for byte
(`keep_tokenizer_files`, read by `model_assets.tokenizer_files`), as import-hf copies them:
transformers' re-save wrote the load settings it was read with (`"is_local": true`,
`"local_files_only": true`) into tokenizer_config.json, a file users publish, changed a Qwen2
tokenizer_class and rewrote tokenizer.json. Only a tokenizer built in memory (the embedded
tiny one), which has no files, is saved through transformers.

Each write runs inside `named_writes.writing`, so a full disk is one line naming the file
(`.../tokenizer.json: not written (No space left on device)`), never tokenizers' plain
`Exception` naming none or a traceback; a file the tokenizer writes from Python
(tokenizer_config.json, chat_template.jinja) is named too, not the directory.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage.named_writes import write_bytes, writing

TOKENIZER_FILE = "tokenizer.json"  # the one file tokenizers writes from Rust

# The files each tokenizer was read from, name -> bytes; weak, as the tokenizer itself is
# left as transformers built it (no attribute of ours travels with it)
_TOKENIZER_FILES: weakref.WeakKeyDictionary[Any, Mapping[str, bytes]] = weakref.WeakKeyDictionary()


def keep_tokenizer_files(tokenizer: Any, files: Mapping[str, bytes]) -> None:
    """Record `files` (name -> bytes, names relative to its dir) as those `tokenizer` was
    read from: `save_hf_files` writes them as they are."""
    _TOKENIZER_FILES[tokenizer] = dict(files)


def save_hf_files(target: Path, config: Any, tokenizer: Any, generation: bytes | None) -> None:
    """config.json, the tokenizer's files and generation_config.json (`generation`'s bytes,
    or greedy decoding ending at the tokenizer's eos) into the directory `target`. A
    failure is an OSError naming the file."""
    from transformers import GenerationConfig

    with writing(target / HF_CONFIG_FILE):
        config.save_pretrained(target)
    _save_tokenizer(target, tokenizer)
    if generation is not None:
        write_bytes(target / GENERATION_CONFIG_FILE, generation)
        return
    with writing(target / GENERATION_CONFIG_FILE):
        GenerationConfig(
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            do_sample=False,
        ).save_pretrained(target)


def _save_tokenizer(target: Path, tokenizer: Any) -> None:
    """The files `tokenizer` was read from, as they were; else (built in memory) as
    transformers saves it."""
    files = _TOKENIZER_FILES.get(tokenizer)
    if files is None:
        with writing(target, rust_file=target / TOKENIZER_FILE):
            tokenizer.save_pretrained(target)
        return
    for name, data in files.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)  # additional_chat_templates/
        write_bytes(path, data)
