"""A Hugging Face model dir's files besides its weights, written through transformers: what a
step's `huggingface/` holds (export needs it) and what the embedded tiny model dir holds.

Each library save runs inside `named_writes.writing`, so a full disk is one line naming the
file (`.../tokenizer.json: not written (No space left on device)`), never tokenizers' plain
`Exception` naming none or a traceback; a file the tokenizer writes from Python
(tokenizer_config.json, chat_template.jinja) is named too, not the directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mfsdp_ckpt.format.generation_config import GENERATION_CONFIG_FILE
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
from mfsdp_ckpt.storage.named_writes import write_bytes, writing

TOKENIZER_FILE = "tokenizer.json"  # the one file tokenizers writes from Rust


def save_hf_files(target: Path, config: Any, tokenizer: Any, generation: bytes | None) -> None:
    """config.json, the tokenizer's files and generation_config.json (`generation`'s bytes,
    or greedy decoding ending at the tokenizer's eos) into the directory `target`. A
    failure is an OSError naming the file."""
    from transformers import GenerationConfig

    with writing(target / HF_CONFIG_FILE):
        config.save_pretrained(target)
    with writing(target, rust_file=target / TOKENIZER_FILE):
        tokenizer.save_pretrained(target)
    if generation is not None:
        write_bytes(target / GENERATION_CONFIG_FILE, generation)
        return
    with writing(target / GENERATION_CONFIG_FILE):
        GenerationConfig(
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            do_sample=False,
        ).save_pretrained(target)
