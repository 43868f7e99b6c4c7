"""Whether a tokenizer dir holds a vocabulary, the file transformers builds a tokenizer's
tokens from: a dir of tokenizer_config.json alone (or special_tokens_map.json) passed the
check for tokenizer files, and transformers then built a tokenizer that turns text into no
tokens, refused only once torch and the model had loaded (exit 1). Checked before launch
for the dir the run reads its tokenizer from (`model.tokenizer`, else its model's dir), and
said by import-hf of a model dir that gives a run none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.config_base import ConfigError

# The files a tokenizer's vocabulary is read from (fast tokenizers, BPE, WordPiece,
# sentencepiece and Mistral's tekken): tokenizer_config.json only configures a tokenizer
# built from one of them
VOCABULARY_FILES = (
    "tokenizer.json",
    "vocab.json",
    "tokenizer.model",
    "vocab.txt",
    "spiece.model",
    "tekken.json",
)


def vocabulary_missing(directory: str | os.PathLike) -> str | None:
    """What `directory` lacks to give a run a tokenizer (`no tokenizer files in DIR`, as
    export-hf says it, or no vocabulary beside a tokenizer_config.json); None where it
    holds a vocabulary file, or is no directory (said where it is read)."""
    folder = Path(directory)
    if not folder.is_dir() or any(os.path.lexists(folder / n) for n in VOCABULARY_FILES):
        return None
    others = sorted(n for n in os.listdir(folder) if n.startswith(("tokenizer", "special_tokens")))
    if not others:
        return f"no tokenizer files in {directory}"
    return (
        f"no tokenizer vocabulary in {directory} ({', '.join(others)} but none of"
        f" {', '.join(VOCABULARY_FILES)})"
    )


def check_tokenizer_vocabulary(model: Any, source: Any) -> None:
    """ConfigError (exit 2) where the dir the run reads its tokenizer from (`model`'s
    `tokenizer`, else `source`'s: a `trainer.model_source.ModelSource`) holds no
    vocabulary file; the line names the key that named the dir."""
    if model.tokenizer is not None:
        key, directory = "model.tokenizer", Path(model.tokenizer)
    elif source is not None and source.tokenizer is not None:
        key, directory = source.tokenizer_key, source.tokenizer
    else:
        return  # the embedded tiny tokenizer
    missing = vocabulary_missing(directory)
    if missing is not None:
        instead = "give it" if key == "model.tokenizer" else "set model.tokenizer=DIR,"
        raise ConfigError(
            f"{key}: {missing}: transformers would build a tokenizer that turns text into no"
            f" tokens; {instead} a local dir with the model's tokenizer files"
        )
