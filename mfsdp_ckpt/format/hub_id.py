"""A Hugging Face Hub id (`Qwen/Qwen2.5-0.5B`) given where a local model directory is needed.

verl and transformers download a model named so; mfsdp never downloads anything (it runs on
machines with no internet, and reads only what is on disk). "No such directory" alone left
a user from those tools wondering why the name that works there fails here, and how to get
the files: the hint says both.
"""

from __future__ import annotations

import os
import re

from mfsdp_ckpt.format.closest_path import missing_hint

# owner/name as the Hub spells them: one slash, letters, digits, `-`, `_`, `.`
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# Endings that make `x/y.EXT` a file path (`gsm8k/train.jsonl`), not a Hub id; an id may hold
# dots too (`Qwen/Qwen2.5-0.5B`, `openai/whisper-tiny.en`), so only these are taken as files.
_FILE_ENDINGS = frozenset(
    {"json", "jsonl", "parquet", "arrow", "csv", "tsv", "txt", "yaml", "yml", "gz", "bz2"}
    | {"xz", "zst", "zip", "tar", "safetensors", "bin", "pt", "pth", "gguf", "py"}
)


def _names_a_file(name: str) -> bool:
    """`name` ends as a data, config or weights file does (`train.jsonl`, `model.safetensors`)."""
    _, dot, ending = name.rpartition(".")
    return bool(dot) and ending.lower() in _FILE_ENDINGS


def hub_id_hint(given: str | os.PathLike, give_as: str, *, dataset: bool = False) -> str:
    """`; if that is a Hugging Face Hub id ...: hf download X --local-dir NAME ... give
    {give_as}NAME` for a missing path shaped like a Hub id whose first part is no directory
    here either (`runs/sft_typo` is a local path mistyped, not an id) and whose name is not
    a file's (`gsm8k/train.jsonl`: a file path, no id); else ''. A `dataset`
    id is fetched with `--repo-type dataset`, and its files are given, not its directory."""
    text = os.fspath(given)
    if not _HUB_ID.fullmatch(text) or os.path.exists(text):
        return ""
    owner, name = text.split("/")
    if os.path.isdir(owner) or _names_a_file(name):
        return ""
    kind = " --repo-type dataset" if dataset else ""
    then = f"its files under {name}/ as {give_as.strip()}" if dataset else f"{give_as}{name}"
    return (
        "; if that is a Hugging Face Hub id: nothing is downloaded here, so fetch it first "
        f"(`hf download {text}{kind} --local-dir {name}`) and give {then}"
    )


def missing_hf_config(given: str | os.PathLike) -> str:
    """The one-line error for an `--hf-config` that is not on this machine (export-hf and
    validate say it alike), worded as every command's missing path (`missing_line`) after
    the option's name, as `--out X: ...` is."""
    hint = hub_id_hint(given, "--hf-config ")
    return f"--hf-config {os.fspath(given)}: no such file or directory{missing_hint(given)}{hint}"
